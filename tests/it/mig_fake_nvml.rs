//! MIG end to end: one A100 split three ways by the fake NVML, a real process on each MIG
//! device; `--once --json` lists the MIG devices with their own memory and processes, and
//! the TUI shows them as sub-rows of the GPU, and each process with its MIG device (`0:1`) and
//! its share of that device's memory; `--once` text labels them the same way.

use crate::common;

use std::process::Command;

use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use common::{output_within_patience, PATIENCE};
use serde_json::Value;

const GIB_MIB: u64 = 1024 * 1024;

#[test]
fn once_json_lists_each_mig_device_with_its_memory_and_process() {
    let sleepers = Sleepers::spawn(3);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("mig_a100.toml", &pids);
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["--once", "--json"])
            .envs(scenario.env()),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    let gpu = &doc["gpus"][0];
    assert_eq!(gpu["vendor"], "nvidia");
    assert_eq!(gpu["mig_enabled"], true);
    let migs = gpu["mig_devices"].as_array().expect("mig_devices");
    assert_eq!(migs.len(), 3, "{gpu:#}");
    let expected = [
        (1, "3g.40gb", 40192u64, 20480u64, pids[0], 20000u64),
        (5, "2g.20gb", 19968, 8192, pids[1], 8000),
        (13, "1g.10gb", 9856, 2048, pids[2], 2000),
    ];
    for (mig, (gi, profile, total, used, pid, _)) in migs.iter().zip(expected) {
        assert_eq!(mig["gpu_instance_id"], gi);
        assert_eq!(mig["compute_instance_id"], 0);
        assert_eq!(mig["name"], format!("NVIDIA A100-SXM4-80GB MIG {profile}"));
        assert_eq!(mig["memory_total_bytes"], total * GIB_MIB);
        assert_eq!(mig["memory_used_bytes"], used * GIB_MIB);
        assert_eq!(mig["pids"], serde_json::json!([pid]));
    }
    // Each process is a row of GPU 0 with the memory its MIG device reports for it.
    let processes = doc["processes"].as_array().unwrap();
    for (_, _, _, _, pid, mib) in expected {
        let row = processes
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("no row for {pid}: {processes:#?}"));
        assert_eq!(row["gpu"], 0);
        assert_eq!(row["gpu_memory_bytes"], mib * GIB_MIB);
        assert_eq!(row["visible"], true);
    }
}

/// `--once` text names the MIG devices and each process's device as the monitor does (`0:1`);
/// a user's review found neither there.
#[test]
fn once_text_labels_each_mig_device_and_its_processes() {
    let sleepers = Sleepers::spawn(3);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("mig_a100.toml", &pids);
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .arg("--once")
            .envs(scenario.env()),
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("\n  MIG 0:1 2g.20gb | GI 5 CI 0 | "),
        "{text}"
    );
    for (place, pid) in ["0:0", "0:1", "0:2"].into_iter().zip(&pids) {
        let row = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("no row for {pid}:\n{text}"));
        assert_eq!(row.split_whitespace().next(), Some(place), "{text}");
    }
}

#[test]
fn the_tui_shows_mig_devices_as_sub_rows() {
    let sleepers = Sleepers::spawn(3);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("mig_a100.toml", &pids);
    let env = scenario.env();
    let mut session = PtySession::spawn(&common::torchtop_binary(), &[], &env_refs(&env), 200, 50);
    let sub_rows = |s: &str| {
        ["3g.40gb", "2g.20gb", "1g.10gb"].iter().all(|profile| {
            s.lines()
                .any(|l| l.contains("MIG") && l.contains(profile) && l.contains("GI"))
        })
    };
    assert!(
        session.wait_for(PATIENCE, sub_rows),
        "no MIG sub-rows:\n{}",
        session.screen()
    );
    let screen = session.screen();
    let row = screen.lines().find(|l| l.contains("2g.20gb")).unwrap();
    assert!(row.contains("GI 5"), "{row}");
    assert!(row.contains(&pids[1].to_string()), "{row}");
    // The process table names each process's MIG device, and its GMEM% is a share of that
    // device's memory: 20000 MiB of the 3g.40gb's 40192 is 50% (of the whole GPU, 24%).
    let cells = |pid: u32| -> Vec<String> {
        let header: Vec<&str> = screen
            .lines()
            .find(|l| l.contains("PID") && l.contains("GMEM%"))
            .expect("a GMEM% column at 200 columns")
            .split_whitespace()
            .collect();
        let row = screen
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("no row for {pid}:\n{screen}"));
        let row: Vec<&str> = row.split_whitespace().collect();
        ["GPU", "GMEM%"]
            .iter()
            .map(|c| row[header.iter().position(|h| h.starts_with(c)).unwrap()].to_string())
            .collect()
    };
    assert_eq!(cells(pids[0]), ["0:0", "50"], "{screen}");
    assert_eq!(cells(pids[1]), ["0:1", "40"], "{screen}");
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).expect("q quits").success());
}
