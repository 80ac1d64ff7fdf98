//! How often torchtop asks the driver for what costs the most. On an H200 (2026-12-04) the energy
//! counter took 3.2 ms of CPU a call and the per-process utilization samples 2.8 ms, more than
//! all of a reading's other calls together but the PCIe counters: the energy counter is read
//! every tenth reading, and the samples in one call a reading, only while the GPU has
//! processes. The fake NVML counts the calls (`TORCHTOP_FAKE_NVML_CALL_COUNTS`).

use crate::common;

use std::collections::HashMap;
use std::process::Command;

use common::fake_nvml::{ScenarioFile, Sleepers};
use common::output_within_patience;
use serde_json::Value;

/// Runs `torchtop --json` for `samples` documents at the shortest interval; returns them and
/// the fake's call counts per query family.
fn stream_and_count(scenario: &ScenarioFile, samples: usize) -> (Vec<Value>, HashMap<String, u64>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let counts = dir.path().join("calls");
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["--json", "-d", "0.1", "--samples", &samples.to_string()])
            .envs(scenario.env())
            .env("TORCHTOP_FAKE_NVML_CALL_COUNTS", &counts),
    );
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let docs = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let text = std::fs::read_to_string(&counts).expect("the fake wrote its call counts");
    let counts = text
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(field, n)| (field.to_string(), n.parse().expect("a count")))
        .collect();
    (docs, counts)
}

fn count(counts: &HashMap<String, u64>, field: &str) -> u64 {
    counts.get(field).copied().unwrap_or(0)
}

#[test]
fn the_energy_counter_is_read_every_tenth_reading_and_still_shown() {
    let scenario = ScenarioFile::new(
        "[[gpu]]\nname = \"H200\"\nmemory_total_mib = 143771\nenergy_mj = 5000\n",
    );
    let (docs, counts) = stream_and_count(&scenario, 25);
    let readings = count(&counts, "Utilization");
    let energy = count(&counts, "Energy");
    assert!(readings >= 20, "{counts:?}");
    assert!(
        (1..=readings.div_ceil(10) + 1).contains(&energy),
        "the energy counter was read {energy} times in {readings} readings: {counts:?}"
    );
    for doc in &docs {
        assert_eq!(doc["gpus"][0]["energy_millijoules"], 5000, "{doc}");
    }
}

#[test]
fn process_utilization_is_asked_once_a_reading_and_only_while_the_gpu_has_processes() {
    let idle = ScenarioFile::new("[[gpu]]\nname = \"H200\"\nmemory_total_mib = 143771\n");
    let (_, counts) = stream_and_count(&idle, 12);
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
        readings >= 20 && asked <= readings,
        "{asked} utilization calls in {readings} readings: {counts:?}"
    );
    let last = docs.last().expect("documents");
    let mut sm: Vec<u64> = (last["processes"].as_array().expect("processes").iter())
        .filter_map(|p| p["sm_percent"].as_u64())
        .collect();
    sm.sort_unstable();
    assert_eq!(sm, [40, 55], "{last}");
}
