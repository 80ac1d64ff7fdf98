//! How often torchtop asks the driver for what costs the most. On an H200 (2026-12-04) the energy
//! counter took 3.2 ms of CPU a call and the per-process utilization samples 2.8 ms, more than
//! all of a reading's other calls together but the PCIe counters: the energy counter is read
//! every tenth reading (with the MIG mode, 153 µs, which changes only with a GPU reset), and
//! the samples in one call a reading, only while the GPU has processes. The fake NVML counts the calls (`TORCHTOP_FAKE_NVML_CALL_COUNTS`).

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::fake_nvml::{ScenarioFile, Sleepers};
use common::json_stream_until;
use serde_json::Value;

/// Runs `torchtop --json` at the shortest interval until the fake has counted `readings`
/// readings (its utilization calls, one a reading); returns the documents printed by then and
/// the call counts per query family. It polls, since a loaded machine reads late.
fn stream_and_count(scenario: &ScenarioFile, readings: u64) -> (Vec<Value>, HashMap<String, u64>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("calls");
    let docs = json_stream_until(
        Command::new(common::torchtop_binary())
            .args(["--json", "-d", "0.1"])
            .envs(scenario.env())
            .env("TORCHTOP_FAKE_NVML_CALL_COUNTS", &file),
        |_| count(&counts(&file), "Utilization") >= readings,
    );
    (docs, counts(&file))
}

/// The fake's counts as last written; none before its first write.
fn counts(file: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split_once(' '))
        .filter_map(|(field, n)| Some((field.to_string(), n.parse().ok()?)))
        .collect()
}

fn count(counts: &HashMap<String, u64>, field: &str) -> u64 {
    counts.get(field).copied().unwrap_or(0)
}

#[test]
fn the_energy_counter_and_the_mig_mode_are_read_every_tenth_reading_and_still_shown() {
    let scenario = ScenarioFile::new(
        "[[gpu]]\nname = \"H200\"\nmemory_total_mib = 143771\nenergy_mj = 5000\n",
    );
    let (docs, counts) = stream_and_count(&scenario, 25);
    let readings = count(&counts, "Utilization");
    let energy = count(&counts, "Energy");
    let mig_mode = count(&counts, "MigMode");
    assert!(
        (1..=readings.div_ceil(10) + 1).contains(&energy),
        "the energy counter was read {energy} times in {readings} readings: {counts:?}"
    );
    assert!(
        (1..=readings.div_ceil(10) + 1).contains(&mig_mode),
        "the MIG mode was read {mig_mode} times in {readings} readings: {counts:?}"
    );
    let last = docs.last().expect("documents");
    assert_eq!(last["gpus"][0]["energy_millijoules"], 5000, "{last}");
}

#[test]
fn process_utilization_is_asked_once_a_reading_and_only_while_the_gpu_has_processes() {
    let idle = ScenarioFile::new("[[gpu]]\nname = \"H200\"\nmemory_total_mib = 143771\n");
    let (_, counts) = stream_and_count(&idle, 12);
    assert!(count(&counts, "Utilization") >= 12, "{counts:?}");
    assert_eq!(count(&counts, "ProcessUtilization"), 0, "{counts:?}");

    let sleepers = Sleepers::spawn(2);
    let busy = ScenarioFile::new(&format!(
        "[[gpu]]\nname = \"H200\"\nmemory_total_mib = 143771\nsample_interval_s = 0.2\n\
         [[gpu.process]]\npid = {}\nused_memory_mib = 1000\nsm_percent = 40\n\
         [[gpu.process]]\npid = {}\nused_memory_mib = 2000\nsm_percent = 55\n",
        sleepers.pid(0),
        sleepers.pid(1)
    ));
    let (docs, counts) = stream_and_count(&busy, 25);
    let readings = count(&counts, "Utilization");
    let asked = count(&counts, "ProcessUtilization");
    // Samples come every 0.2 s and readings every 0.1 s: asking for the count first made more
    // calls than readings.
    assert!(
        asked <= readings,
        "{asked} utilization calls in {readings} readings: {counts:?}"
    );
    let last = docs.last().expect("documents");
    let mut sm: Vec<u64> = (last["processes"].as_array().expect("processes").iter())
        .filter_map(|p| p["sm_percent"].as_u64())
        .collect();
    sm.sort_unstable();
    assert_eq!(sm, [40, 55], "{last}");
}
