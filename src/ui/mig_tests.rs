//! MIG in the process table, with the figures of the fake NVML's `mig_a100.toml`: an A100 80GB
//! split into 3g.40gb, 2g.20gb and 1g.10gb devices, one process on each. The GPU column names
//! the MIG device (`0:1`, as nvitop writes it) and GMEM% is a share of that device's memory,
//! not of the whole GPU's.

use super::*;
use crate::model::MigDevice;

const MIB: u64 = 1024 * 1024;

/// (profile, GPU instance id, total MiB, used MiB, the process's MiB), as in the fixture.
const SLICES: [(&str, u32, u64, u64, u64); 3] = [
    ("3g.40gb", 1, 40192, 20480, 20000),
    ("2g.20gb", 5, 19968, 8192, 8000),
    ("1g.10gb", 13, 9856, 2048, 2000),
];

fn mig_snapshot() -> Snapshot {
    let mut a100 = gpu(0, 0);
    a100.name = Some("NVIDIA A100-SXM4-80GB".to_string().into());
    a100.memory_total_bytes = Some(81920 * MIB);
    a100.memory_used_bytes = Some(30720 * MIB);
    a100.mig_enabled = Some(true);
    let mut processes = Vec::new();
    for (index, (profile, gi, total, used, mine)) in SLICES.into_iter().enumerate() {
        let pid = 30_000 + index as u32;
        a100.mig_devices.push(MigDevice {
            index: index as u32,
            gpu_instance_id: Some(gi),
            compute_instance_id: Some(0),
            name: Some(format!("NVIDIA A100-SXM4-80GB MIG {profile}")),
            memory_used_bytes: Some(used * MIB),
            memory_total_bytes: Some(total * MIB),
            pids: vec![pid],
            ..MigDevice::default()
        });
        let mut p = process(index as u32, 0);
        p.pid = pid;
        p.gpu_memory_bytes = Some(mine * MIB);
        processes.push(p);
    }
    snapshot_with(vec![a100], processes)
}

/// The cells of the row of `pid` under the header's `columns`.
fn cells<'a>(s: &'a str, pid: u32, columns: &[&str]) -> Vec<&'a str> {
    let header: Vec<&str> = line_with(s, "PID").split_whitespace().collect();
    let row: Vec<&str> = line_with(s, &format!("{pid} "))
        .split_whitespace()
        .collect();
    columns
        .iter()
        .map(|c| {
            let at = header.iter().position(|h| h.starts_with(c));
            row[at.unwrap_or_else(|| panic!("no {c} column in\n{s}"))]
        })
        .collect()
}

#[test]
fn a_process_on_a_mig_device_shows_the_device_and_its_share_of_that_device() {
    let app = sized(app_with(mig_snapshot()), 120, 40);
    let s = screen(&app, 120, 40);
    // 20000 MiB of the 3g.40gb's 40192 is 50%, not the 24% of the whole 80 GB GPU.
    assert_eq!(cells(&s, 30_000, &["GPU", "GMEM%"]), ["0:0", "50"], "{s}");
    assert_eq!(cells(&s, 30_001, &["GPU", "GMEM%"]), ["0:1", "40"], "{s}");
    assert_eq!(cells(&s, 30_002, &["GPU", "GMEM%"]), ["0:2", "20"], "{s}");
    // The GPU's sub-rows name the devices the same way.
    let sub_row = line_with(&s, "2g.20gb");
    assert!(sub_row.contains("MIG 0:1  2g.20gb"), "{sub_row}");
}

#[test]
fn a_process_on_a_whole_gpu_keeps_its_index_and_the_gpu_s_share() {
    let app = sized(app_with(busy_snapshot(2, 1, 0)), 120, 40);
    let s = screen(&app, 120, 40);
    // 9 GiB of 80.
    assert_eq!(cells(&s, 20_001, &["GPU", "GMEM%"]), ["1", "11"], "{s}");
}

/// A review: at 80x24 the MIG sub-rows went (as low-priority GPU detail lines) while the
/// history and the balance and host strip stayed. They come with the GPU lines, as nvitop
/// always shows them, in every layout (`c` included).
#[test]
fn mig_sub_rows_come_with_the_gpu_lines_at_80x24() {
    // Eight more processes: the table's first rows take what the history left the MIG rows.
    let mut snapshot = mig_snapshot();
    snapshot.processes.extend((3..11).map(|k| process(k, 0)));
    for density in ['a', 'c', 'f'] {
        let mut app = app_with(snapshot.clone());
        key(&mut app, crossterm::event::KeyCode::Char(density));
        let app = sized(app, 80, 24);
        let s = screen(&app, 80, 24);
        for (index, (profile, ..)) in SLICES.into_iter().enumerate() {
            let sub_row = line_with(&s, &format!("MIG 0:{index}"));
            assert!(sub_row.contains(profile), "{density}: {sub_row}\n{s}");
        }
        // Right under the GPU's line.
        assert_eq!(
            row_of(&s, "MIG 0:0"),
            row_of(&s, "A100") + 1,
            "{density}:\n{s}"
        );
    }
}

/// A review: two GPUs of seven instances each took 17 rows at 80x24 and left the table 3 of
/// its 14 processes. The sub-rows come only while the table keeps its first rows.
#[test]
fn mig_sub_rows_never_take_the_tables_first_rows() {
    let mut snapshot = mig_snapshot();
    let mut second = snapshot.gpus[0].clone();
    second.index = 1;
    snapshot.gpus.push(second);
    for gpu in &mut snapshot.gpus {
        let template = gpu.mig_devices[2].clone();
        gpu.mig_devices = (0..7)
            .map(|i| MigDevice {
                index: i,
                pids: vec![],
                ..template.clone()
            })
            .collect();
    }
    snapshot
        .processes
        .extend((3..14).map(|k| process(k, k % 2)));
    let app = sized(app_with(snapshot.clone()), 80, 24);
    let s = screen(&app, 80, 24);
    assert!(!s.contains("MIG 0:0"), "{s}");
    let rows = (0..14)
        .filter(|&k| s.contains(&format!("{} ", 20_000 + k)))
        .count();
    assert!(rows >= 7, "{rows} process rows:\n{s}");
    // With room, they come.
    let app = sized(app_with(snapshot), 120, 50);
    let s = screen(&app, 120, 50);
    assert!(s.contains("MIG 1:6"), "{s}");
}
