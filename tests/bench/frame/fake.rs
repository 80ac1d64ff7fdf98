//! Snapshots for the frame benchmark: the sampler, in this process, against the fake NVML
//! built with optimizations, with sleeping processes as the GPU processes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use torchtop::model::Snapshot;
use torchtop::sampler::{Sampler, SamplerConfig};

use crate::common::fake_nvml::{
    fill_pids, fixture_text, many_gpus_scenario, ScenarioFile, Sleepers,
};

/// The fake library built with optimizations, as the overhead benchmark builds it.
pub(crate) fn release_library() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = root.join("target").join("fake-nvml-release");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--release", "-p", "fake-nvml"])
        .arg("--target-dir")
        .arg(&target)
        .current_dir(root)
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .expect("run cargo");
    assert!(status.success(), "building the fake NVML library failed");
    let dir = target.join("lib");
    std::fs::create_dir_all(&dir).unwrap();
    let library = dir.join("libnvidia-ml.so.1");
    std::fs::copy(target.join("release").join("libnvidia_ml.so"), &library).unwrap();
    library
}

/// `count` snapshots of `gpus` GPUs and `processes` GPU processes, 100 ms apart: 8 GPUs is
/// the overhead benchmark's fixture, 16 its generated scenario.
pub(crate) fn snapshots(
    library: &Path,
    gpus: usize,
    processes: usize,
    count: usize,
) -> Vec<Snapshot> {
    let sleepers = Sleepers::spawn(processes);
    let template = if gpus == 8 {
        fixture_text("eight_gpus.toml")
    } else {
        many_gpus_scenario(gpus, processes)
    };
    let file = ScenarioFile::new(&fill_pids(&template, &sleepers.pids()));
    std::env::set_var("TORCHTOP_FAKE_NVML_SCENARIO", file.path());
    let config = SamplerConfig::for_interval(Duration::from_secs(1), "fake".into());
    let mut sampler = Sampler::start(config, torchtop::collect::nvml_loader(library.into()));
    let deadline = Instant::now() + Duration::from_secs(30);
    let full = |s: &Snapshot| s.gpus.len() == gpus && s.processes.len() >= processes;
    while !full(&sampler.tick()) {
        assert!(
            Instant::now() < deadline,
            "the fake NVML never showed {gpus} GPUs"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (0..count)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            sampler.tick()
        })
        .collect()
}
