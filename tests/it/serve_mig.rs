//! MIG in the Prometheus exporter: the fake NVML's A100 split three ways (`mig_a100.toml`), a
//! real process on each MIG device. `torchtop serve` exports each MIG device's memory and each
//! process's memory on it, labelled with the parent GPU and the instance ids; the exposition
//! passes `promtool check metrics`, and a real Prometheus scrapes and stores the series.

use crate::common;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::fake_nvml::{ScenarioFile, Sleepers};
use common::prometheus::{http_get, Prometheus, Serve};
use common::{require_program, PATIENCE};
use serde_json::Value;

const MIB: u64 = 1 << 20;

/// (GPU instance id, profile, used MiB, the process's MiB) of the fixture's three devices.
const DEVICES: [(u32, &str, u64, u64); 3] = [
    (1, "3g.40gb", 20480, 20000),
    (5, "2g.20gb", 8192, 8000),
    (13, "1g.10gb", 2048, 2000),
];

fn promtool_problems(text: &str) -> Vec<String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
    .lines()
    .filter(|l| !l.trim().is_empty())
    // dcgm-exporter's own label `modelName` is camelCase; dashboards need it as it is.
    .filter(|l| !l.ends_with("label names should be written in 'snake_case' not 'camelCase'"))
    .map(str::to_string)
    .collect()
}

#[test]
fn serve_exports_each_mig_device_and_its_process() {
    let sleepers = Sleepers::spawn(3);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("mig_a100.toml", &pids);
    let serve = Serve::start(&[], &[], &scenario.env());
    let text = serve.wait_for_metrics(PATIENCE, |body| {
        body.matches("torchtop_mig_process_gpu_memory_bytes{")
            .count()
            == 3
    });
    for (i, (gi, profile, used, process)) in DEVICES.into_iter().enumerate() {
        let device = format!(
            "gpu=\"0\",UUID=\"GPU-9a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d\",mig_index=\"{i}\",GPU_I_ID=\"{gi}\",\
             compute_instance_id=\"0\",GPU_I_PROFILE=\"{profile}\""
        );
        let used_line = format!("torchtop_mig_memory_used_bytes{{{device},");
        let line = text
            .lines()
            .find(|l| l.starts_with(&used_line))
            .unwrap_or_else(|| panic!("no {used_line:?} in:\n{text}"));
        assert!(line.ends_with(&format!("}} {}", used * MIB)), "{line}");
        let pid = format!("pid=\"{}\"", pids[i]);
        let row = text
            .lines()
            .find(|l| {
                l.starts_with("torchtop_mig_process_gpu_memory_bytes{")
                    && l.contains(&pid)
                    && l.contains(&device)
            })
            .unwrap_or_else(|| panic!("no process series for {pid} on GI {gi} in:\n{text}"));
        assert!(row.ends_with(&format!("}} {}", process * MIB)), "{row}");
    }
    if require_program("promtool") {
        let problems = promtool_problems(&text);
        assert!(problems.is_empty(), "promtool: {problems:#?}\n{text}");
    }
    if !require_program("prometheus") {
        return;
    }
    let prometheus = Prometheus::start(&[serve.addr]);
    let api: SocketAddr = prometheus
        .url
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let query =
        "/api/v1/query?query=sum%20by%20(GPU_I_ID)%20(torchtop_mig_process_gpu_memory_bytes)";
    let mut last = String::new();
    let deadline = std::time::Instant::now() + PATIENCE;
    let stored = |last: &mut String| {
        let Ok((200, _, body)) = http_get(api, query, &[], Duration::from_secs(5)) else {
            return false;
        };
        *last = body;
        let doc: Value = serde_json::from_str(last).unwrap_or_default();
        let results = doc["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        DEVICES.iter().all(|(gi, _, _, process)| {
            results.iter().any(|r| {
                let number = |v: &Value| v.as_str().and_then(|s| s.parse::<u64>().ok());
                number(&r["metric"]["GPU_I_ID"]) == Some(u64::from(*gi))
                    && number(&r["value"][1]) == Some(process * MIB)
            })
        })
    };
    while !stored(&mut last) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        stored(&mut last),
        "Prometheus never stored the MIG series; last answer: {last}\n{}",
        prometheus.log()
    );
}
