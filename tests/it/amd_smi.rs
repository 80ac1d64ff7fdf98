//! `libamd_smi.so` end to end: the MI300X fixture node of `common::amd_fixture` under
//! `TORCHTOP_AMD_ROOT`, and the fake amd-smi library of `tests/fake-amdsmi` (C, amd-smi 26
//! layouts) loaded through `TORCHTOP_AMDSMI_LIB`. amd-smi fills what sysfs and fdinfo lack
//! (ECC counts, energy, a process whose fdinfo is not there to read), never overrides them; and
//! a library that is absent, fails `amdsmi_init` or has a version torchtop does not know leaves
//! the sysfs figures as they are, with a sentence on the driver line.

use crate::common;

use std::process::Command;

use common::amd_fixture::{write_mi300_node, write_mi300_processes, MI300_PDEVS};
use common::fake_amdsmi::{AmdSmiScenario, LIB_ENV};
use common::fake_nvml::{ScenarioFile, Sleepers};
use common::output_within_patience;
use serde_json::Value;

const GIB: u64 = 1 << 30;

/// One `--once --json` document of the node with `pids[..3]` as its fdinfo processes, and
/// `extra` added to the environment.
fn once(pids: &[u32], extra: &[(String, String)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    write_mi300_node(dir.path());
    write_mi300_processes(dir.path(), [pids[0], pids[1], pids[2]], 0);
    let nvml = ScenarioFile::from_fixture("one_gpu.toml", &pids[..2]);
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            // amd-smi's uncorrected ECC error makes a critical warning, and so status 4.
            .args(["--once", "--json", "--fail-on", "never"])
            .envs(nvml.env())
            .env("TORCHTOP_AMD_ROOT", dir.path())
            .envs(extra.iter().cloned()),
    );
    assert!(
        output.status.success(),
        "torchtop ended with {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn row(doc: &Value, pid: u32, gpu: u64) -> Option<&Value> {
    doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid && p["gpu"] == gpu)
}

/// The scenario: the first card with ECC counts and energy, `pids[0]` (which fdinfo shows
/// with 48 GiB) at 1 GiB, and `pids[3]`, which has no fdinfo, at 8 GiB.
fn scenario(pids: &[u32], head: &str) -> AmdSmiScenario {
    AmdSmiScenario::new(&format!(
        "{head}\ngpu {card} 3 1 123456000 0.5\nprocess {card} {a} {one} 5000\n\
         process {card} {d} {eight} 7000\n",
        card = MI300_PDEVS[0],
        a = pids[0],
        d = pids[3],
        one = GIB,
        eight = 8 * GIB,
    ))
}

/// What sysfs and fdinfo give, whatever amd-smi does.
fn assert_sysfs_intact(doc: &Value, pids: &[u32]) {
    let mi300 = &doc["gpus"][1];
    assert_eq!(mi300["vendor"], "amd");
    assert_eq!(mi300["utilization_percent"], 93);
    assert_eq!(mi300["memory_used_bytes"], 150 * GIB);
    assert_eq!(mi300["temperature_c"], 67);
    assert_eq!(mi300["power_w"], 612.0);
    assert_eq!(doc["gpus"][2]["utilization_percent"], 41);
    assert_eq!(row(doc, pids[0], 1).unwrap()["gpu_memory_bytes"], 48 * GIB);
    assert_eq!(row(doc, pids[1], 2).unwrap()["gpu_memory_bytes"], 16 * GIB);
}

#[test]
fn amd_smi_fills_ecc_energy_and_the_processes_fdinfo_cannot_show() {
    let sleepers = Sleepers::spawn(4);
    let pids = sleepers.pids();
    let smi = scenario(&pids, "version 26 1 0");
    let doc = once(&pids, &smi.env());

    let note = doc["driver"]["amd_smi"].as_str().unwrap();
    assert!(note.contains("libamd_smi.so 26.1.0"), "{note}");
    assert_sysfs_intact(&doc, &pids);
    let mi300 = &doc["gpus"][1];
    assert_eq!(mi300["ecc_volatile_corrected"], 3);
    assert_eq!(mi300["ecc_volatile_uncorrected"], 1);
    // 123456000 counts of 0.5 µJ.
    assert_eq!(mi300["energy_millijoules"], 61728);
    // The rules see amd-smi's counts like NVML's: an uncorrected error is critical.
    let ecc = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == "ecc")
        .unwrap_or_else(|| panic!("no ecc warning: {:#}", doc["warnings"]));
    assert_eq!(ecc["severity"], "critical");
    assert!(ecc["message"]
        .as_str()
        .unwrap()
        .contains("1 uncorrected ECC error since the driver loaded"));
    // The second card is not in amd-smi's list: nothing is made up for it.
    assert_eq!(doc["gpus"][2]["ecc_volatile_corrected"], Value::Null);
    assert_eq!(doc["gpus"][2]["energy_millijoules"], Value::Null);

    // The process with no fdinfo: its row comes from amd-smi, joined with /proc like any.
    let hidden = row(&doc, pids[3], 1).expect("amd-smi's process has a row");
    assert_eq!(hidden["gpu_memory_bytes"], 8 * GIB);
    assert_eq!(hidden["visible"], true);
    assert!(hidden["command"].as_str().unwrap().contains("sleep"));
    // One row per (pid, GPU): amd-smi's pids[0] joined the fdinfo row, which kept its figure.
    let rows_of_first = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["pid"] == pids[0] && p["gpu"] == 1)
        .count();
    assert_eq!(rows_of_first, 1);
}

#[test]
fn an_absent_failing_or_unknown_library_leaves_the_sysfs_figures_and_says_why() {
    let sleepers = Sleepers::spawn(4);
    let pids = sleepers.pids();
    let failing = scenario(&pids, "init 8");
    let unknown = scenario(&pids, "version 24 6 1");
    let absent = vec![(
        LIB_ENV.to_string(),
        "/nonexistent/torchtop/libamd_smi.so".to_string(),
    )];
    let cases = [
        ("absent", absent, "not found"),
        (
            "init fails",
            failing.env(),
            "amdsmi_init failed with status 8",
        ),
        (
            "unknown version",
            unknown.env(),
            "version 24.6.1 is not amd-smi 26",
        ),
    ];
    for (case, env, says) in cases {
        let doc = once(&pids, &env);
        let note = doc["driver"]["amd_smi"].as_str().unwrap();
        assert!(note.contains(says), "{case}: {note}");
        assert_sysfs_intact(&doc, &pids);
        let mi300 = &doc["gpus"][1];
        assert_eq!(mi300["state"], "ok", "{case}");
        assert_eq!(mi300["ecc_volatile_corrected"], Value::Null, "{case}");
        assert_eq!(mi300["energy_millijoules"], Value::Null, "{case}");
        assert!(
            row(&doc, pids[3], 1).is_none(),
            "{case}: no row from amd-smi"
        );
    }
}
