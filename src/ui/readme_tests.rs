//! The README's screenshot is this render, not a hand edit: two H100s each running one rank of
//! a job started with `torchtop run -- python3 train.py --lr 3e-4`, at 100x34. The test fails
//! when the README's first code block differs from the render; `UPDATE_README=1 cargo test
//! --lib readme_screenshot` writes the render into the README.

use super::*;
use crate::model::LaunchEnv;

const WIDTH: u16 = 100;
const HEIGHT: u16 = 34;

fn rank(rank: u32, gpu_index: u32, t: u32) -> GpuProcess {
    let grow = u64::from(t % 40) * 4 * 1024 * 1024;
    let mut p = process(rank, gpu_index);
    p.pid = 17_332 + rank;
    p.user = Some("alice".to_string().into());
    p.uid = Some(1000);
    p.command = Some(
        "/home/alice/.pyenv/versions/3.11.7/bin/python3 train.py --lr 3e-4"
            .to_string()
            .into(),
    );
    p.gpu_memory_bytes = Some((30 + 21 * u64::from(rank)) * GIB + grow);
    p.sm_percent = Some(78 - 34 * rank);
    p.cpu_percent = Some(101.5 - f64::from(rank) * 3.0);
    p.rss_bytes = Some(6 * GIB + u64::from(rank) * GIB / 4);
    p.running_seconds = Some(309.0);
    p.state = Some('R');
    p.nice = Some(0);
    p.env = Some(
        LaunchEnv {
            cuda_visible_devices: Some(gpu_index.to_string()),
            rank: Some(rank),
            local_rank: Some(rank),
            world_size: Some(2),
            master_addr: Some("127.0.0.1".to_string()),
            master_port: Some("29500".to_string()),
            launcher: Some("torchrun".to_string()),
            ..Default::default()
        }
        .into(),
    );
    p.torch = Some(std::sync::Arc::new(TorchInfo {
        python: Some("3.11.7".to_string()),
        torch: Some("2.5.1".to_string()),
        rank: Some(rank),
        local_rank: Some(rank),
        world_size: Some(2),
        step: Some(1200 + u64::from(t)),
        step_time_seconds: Some(0.412),
        devices: vec![DeviceAllocatorStats {
            index: 0,
            allocated_bytes: Some((24 + 18 * u64::from(rank)) * GIB + grow),
            reserved_bytes: Some((28 + 20 * u64::from(rank)) * GIB + grow),
            active_bytes: Some((24 + 18 * u64::from(rank)) * GIB),
            inactive_split_bytes: Some(GIB / 2),
            requested_bytes: Some((24 + 18 * u64::from(rank)) * GIB),
            peak_allocated_bytes: Some((26 + 19 * u64::from(rank)) * GIB),
            segments: Some(308),
            alloc_retries: Some(0),
            ooms: Some(0),
            non_pytorch_bytes: Some(GIB + GIB / 2),
            ..Default::default()
        }],
        age_seconds: Some(0.3),
        ..Default::default()
    }));
    p
}

fn job_app() -> App {
    app_after(|t| {
        let processes = vec![rank(0, 0, t), rank(1, 1, t)];
        // Each GPU holds its rank's memory and a little more, and is as busy as its rank.
        let gpus: Vec<GpuSample> = processes
            .iter()
            .map(|p| GpuSample {
                memory_used_bytes: p.gpu_memory_bytes.map(|b| b + GIB / 2),
                utilization_percent: p.sm_percent.map(|sm| sm + 3 + t % 7),
                memory_utilization_percent: p.sm_percent.map(|sm| sm / 2),
                ..gpu(p.gpu, t)
            })
            .collect();
        let mut processes = processes;
        // As the sampler's torch join leaves them: each rank's cuda:0 is its own GPU, with that
        // GPU's total and what NVML says is left of it.
        for p in &mut processes {
            let gpu = gpus.iter().find(|g| g.index == p.gpu);
            for device in p
                .torch
                .iter_mut()
                .flat_map(|t| std::sync::Arc::make_mut(t).devices.iter_mut())
            {
                device.gpu = Some(p.gpu);
                device.device_total_bytes = gpu.and_then(|g| g.memory_total_bytes);
                device.headroom_bytes =
                    gpu.and_then(crate::model::GpuSample::memory_headroom_bytes);
            }
        }
        let mut snapshot = snapshot_with(gpus, processes);
        snapshot.host.hostname = Some("trainbox-07".into());
        snapshot.jobs = crate::rules::group_jobs(&snapshot.processes);
        snapshot
    })
}

/// The README's first fenced block (the screenshot), without its fences.
fn readme_block(readme: &str) -> Option<(usize, usize)> {
    let start = readme.find("```\n")? + 4;
    let end = start + readme[start..].find("\n```")?;
    Some((start, end))
}

#[test]
fn readme_screenshot() {
    let app = job_app();
    let shot = screen(&app, WIDTH, HEIGHT);
    assert!(
        shot.contains("python3 train.py --lr 3e-4"),
        "the script name shows:\n{shot}"
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let (start, end) = readme_block(&readme).expect("README.md has a code block");
    if std::env::var_os("UPDATE_README").is_some() {
        let updated = format!("{}{shot}{}", &readme[..start], &readme[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        &readme[start..end],
        shot,
        "README.md's screenshot is not the render: UPDATE_README=1 cargo test --lib readme_screenshot"
    );
}
