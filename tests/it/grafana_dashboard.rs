//! The shipped Grafana dashboard (assets/grafana/torchtop.json) queries only metrics torchtop
//! exports: every `DCGM_FI_*` and `torchtop_*` name in its queries must be a family of the
//! exposition of a snapshot with every field filled. With promtool, every query must also
//! parse as PromQL.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;
use torchtop::model::{
    DeviceAllocatorStats, DriverInfo, GpuProcess, GpuSample, LaunchEnv, ProcessKind, Severity,
    Snapshot, Subject, TorchInfo, Warning,
};
use torchtop::serve::exposition::Format;

fn dashboard() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/grafana/torchtop.json");
    let text = std::fs::read_to_string(path).expect("read the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every PromQL expression in the dashboard: panel targets and template variable queries.
fn expressions(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                match (key.as_str(), child) {
                    ("expr" | "definition", Value::String(text)) => out.push(text.clone()),
                    _ => expressions(child, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| expressions(item, out)),
        _ => {}
    }
}

fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| word.starts_with("DCGM_FI_DEV_") || word.starts_with("torchtop_"))
        .map(str::to_string)
        .collect()
}

/// A snapshot with every figure torchtop can export filled in.
fn full_snapshot() -> Snapshot {
    let mut snapshot = Snapshot::at(std::time::SystemTime::now());
    snapshot.driver = DriverInfo {
        nvml_loaded: true,
        driver_version: Some("550.54.15".into()),
        ..Default::default()
    };
    snapshot.host.hostname = Some("node-a".into());
    snapshot.host.memory.total_bytes = Some(1 << 40);
    snapshot.host.memory.available_bytes = Some(1 << 39);
    snapshot.host.memory.used_bytes = Some(1 << 39);
    snapshot.host.swap.total_bytes = Some(1 << 30);
    snapshot.host.swap.used_bytes = Some(0);
    snapshot.host.vm.swappiness = Some(60);
    snapshot.host.vm.overcommit_memory = Some(0);
    snapshot.gpus.push(GpuSample {
        index: 0,
        name: Some("NVIDIA H100 80GB HBM3".into()),
        uuid: Some("GPU-0".into()),
        bus_id: Some("00000000:18:00.0".into()),
        utilization_percent: Some(80),
        memory_utilization_percent: Some(40),
        memory_used_bytes: Some(40 << 30),
        memory_total_bytes: Some(80 << 30),
        memory_free_bytes: Some(39 << 30),
        temperature_c: Some(60),
        power_w: Some(400.0),
        sm_clock_mhz: Some(1755),
        memory_clock_mhz: Some(2619),
        pcie_rx_kib_s: Some(1000),
        pcie_tx_kib_s: Some(1000),
        encoder_percent: Some(0),
        decoder_percent: Some(0),
        ecc_volatile_corrected: Some(0),
        ecc_volatile_uncorrected: Some(0),
        energy_millijoules: Some(1_000_000),
        remapped_rows_correctable: Some(0),
        remapped_rows_uncorrectable: Some(0),
        remapped_rows_failed: Some(false),
        ..Default::default()
    });
    let mut process = GpuProcess::new(4100, 0, ProcessKind::Compute);
    process.gpu_memory_bytes = Some(30 << 30);
    process.sm_percent = Some(70);
    process.user = Some("alice".into());
    process.env = Some(
        LaunchEnv {
            rank: Some(0),
            local_rank: Some(0),
            world_size: Some(2),
            master_addr: Some("10.0.0.1".into()),
            master_port: Some("29500".into()),
            ..Default::default()
        }
        .into(),
    );
    process.torch = Some(std::sync::Arc::new(TorchInfo {
        rank: Some(0),
        world_size: Some(2),
        step: Some(10),
        step_time_seconds: Some(0.4),
        age_seconds: Some(0.1),
        devices: vec![DeviceAllocatorStats {
            index: 0,
            allocated_bytes: Some(1 << 30),
            reserved_bytes: Some(2 << 30),
            active_bytes: Some(1 << 30),
            inactive_split_bytes: Some(1 << 20),
            peak_allocated_bytes: Some(3 << 30),
            alloc_retries: Some(0),
            ooms: Some(0),
            ..Default::default()
        }],
        ..Default::default()
    }));
    snapshot.processes.push(process);
    snapshot.warnings.push(Warning {
        id: "oom-risk".into(),
        severity: Severity::Warn,
        subject: Subject::Gpu { index: 0 },
        message: "m".into(),
        evidence: vec![],
        remedy: "r".into(),
        since: snapshot.time.clone(),
    });
    snapshot
}

fn exported_names() -> BTreeSet<String> {
    let text = torchtop::serve::encode(&full_snapshot(), None, true, Format::Prometheus);
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_metric_the_dashboard_queries_is_exported() {
    let mut exprs = Vec::new();
    expressions(&dashboard(), &mut exprs);
    assert!(exprs.len() >= 15, "too few queries found: {exprs:?}");
    let exported = exported_names();
    assert!(exported.contains("DCGM_FI_DEV_GPU_UTIL"), "{exported:?}");
    let mut queried = BTreeSet::new();
    for expr in &exprs {
        queried.extend(metric_names(expr));
    }
    let missing: Vec<&String> = queried.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries {missing:?}, which torchtop does not export"
    );
    for wanted in [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "torchtop_allocator_reserved_bytes",
        "torchtop_step_time_seconds",
        "torchtop_warning",
        "DCGM_FI_DEV_FB_FREE",
    ] {
        assert!(queried.contains(wanted), "no panel queries {wanted}");
    }
}

#[test]
fn the_check_catches_a_metric_torchtop_does_not_export() {
    let exported = exported_names();
    let names = metric_names("rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[5m])");
    assert!(!names.is_subset(&exported));
}

#[test]
fn every_dashboard_query_parses_as_promql() {
    if !common::require_program("promtool") {
        return;
    }
    let mut exprs = Vec::new();
    expressions(&dashboard(), &mut exprs);
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, expr) in exprs
        .iter()
        .filter(|e| !e.starts_with("label_values"))
        .enumerate()
    {
        let expr = expr.replace("$Hostname", ".*");
        rules.push_str(&format!(
            "      - record: dashboard:query{i}\n        expr: {}\n",
            serde_json::to_string(&expr).unwrap()
        ));
    }
    promtool_passes(&["check", "rules"], &rules);
}

/// Runs `promtool ARGS FILE` on `text` written to a file, and asserts it passes.
fn promtool_passes(args: &[&str], text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("promtool.yml");
    std::fs::write(&path, text).unwrap();
    let output = Command::new("promtool")
        .args(args)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// An ops review: the headroom panel's query failed ("many-to-many matching not allowed")
/// whenever two ranks shared a GPU, as on a shared development box. promtool evaluates the
/// panel's own query on two ranks of one GPU.
#[test]
fn the_headroom_panel_answers_for_two_ranks_on_one_gpu() {
    if !common::require_program("promtool") {
        return;
    }
    let mut exprs = Vec::new();
    expressions(&dashboard(), &mut exprs);
    let expr = (exprs.iter())
        .find(|e| e.contains("DCGM_FI_DEV_FB_FREE") && e.contains("training_job"))
        .expect("the headroom query")
        .replace("$Hostname", ".*");
    let series = |labels: &str, values: &str| {
        format!("      - series: '{labels}'\n        values: '{values}'\n")
    };
    let mut test = String::from(
        "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n",
    );
    test += &series(
        r#"DCGM_FI_DEV_FB_FREE{Hostname="n1",gpu="0",job="torchtop"}"#,
        "1000x5",
    );
    for rank in 0..2 {
        test += &series(
            &format!(
                r#"torchtop_process_gpu_memory_bytes{{Hostname="n1",gpu="0",pid="1{rank}",rank="{rank}",training_job="j",job="torchtop"}}"#
            ),
            "5x5",
        );
    }
    test += &format!(
        "    promql_expr_test:\n      - expr: {}\n        eval_time: 2m\n        exp_samples:\n",
        serde_json::to_string(&expr).unwrap()
    );
    for rank in 0..2 {
        test += &format!(
            "          - labels: '{{Hostname=\"n1\", gpu=\"0\", rank=\"{rank}\", training_job=\"j\"}}'\n            value: 1048576000\n"
        );
    }
    promtool_passes(&["test", "rules"], &test);
}
