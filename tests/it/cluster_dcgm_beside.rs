//! End to end with a real Prometheus: one node runs `torchtop serve` and, beside it, a
//! dcgm-exporter (a stand-in serving DCGM's text format with the node's `Hostname`, as
//! dcgm-exporter does). When `torchtop serve` dies, dcgm-exporter still reports the node's
//! GPUs, so the node is not down; but nothing watches it any more. `torchtop cluster --once`
//! must keep the node's GPU figures, mark it `exporter_down`, raise a critical `exporter-down`
//! warning for it, and exit 4 as it does for a node that is down.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use common::fake_nvml::ScenarioFile;
use common::prometheus::{cluster_once, wait_for_cluster, Prometheus, Serve};
use common::{require_program, PATIENCE};
use serde_json::Value;

const HOST: &str = "node-d";

/// What the stand-in exports: two GPUs of `HOST`, as dcgm-exporter names and labels them.
const DCGM_TEXT: &str = "\
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-d-0\",Hostname=\"node-d\",modelName=\"NVIDIA H100 80GB HBM3\"} 71
DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-d-1\",Hostname=\"node-d\",modelName=\"NVIDIA H100 80GB HBM3\"} 33
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-d-0\",Hostname=\"node-d\",modelName=\"NVIDIA H100 80GB HBM3\"} 20480
DCGM_FI_DEV_FB_USED{gpu=\"1\",UUID=\"GPU-d-1\",Hostname=\"node-d\",modelName=\"NVIDIA H100 80GB HBM3\"} 10240
";

/// A dcgm-exporter stand-in: answers every request with [`DCGM_TEXT`] from a thread that
/// lives as long as the test process (the listener is leaked with it; a test binary exits).
fn dcgm_stand_in() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the dcgm stand-in");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
            // The request's head: read until its blank line (Prometheus sends no body).
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
                match stream.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let answer = format!(
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                 Content-Length: {}\r\n\r\n{DCGM_TEXT}",
                DCGM_TEXT.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    addr
}

fn node_d(doc: &Value) -> Option<&Value> {
    doc["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["hostname"] == HOST)
}

#[test]
fn a_node_whose_torchtop_died_beside_dcgm_exporter_is_an_exporter_down_warning() {
    if !require_program("prometheus") {
        return;
    }
    let scenario = ScenarioFile::new(
        "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"GPU-d-0\"\nmemory_total_mib = 81920\n\
         [[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"GPU-d-1\"\nmemory_total_mib = 81920\n",
    );
    let serve = Serve::start(&["-d", "0.5"], &["--hostname", HOST], &scenario.env());
    serve.wait_for_metrics(PATIENCE, |m| m.contains("torchtop_gpu_state{"));
    let dcgm = dcgm_stand_in();
    let torchtop_addr = serve.addr.to_string();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: torchtop\n    static_configs:\n      - targets: ['{torchtop_addr}']\n\
         \x20 - job_name: dcgm\n    static_configs:\n      - targets: ['{dcgm}']\n"
    );
    let dir = tempfile::tempdir().expect("temporary directory");
    let prometheus = Prometheus::start_with_config(dir, &config);

    let watched = |doc: &Value| {
        node_d(doc).is_some_and(|n| {
            n["gpus"].as_array().is_some_and(|g| g.len() == 2)
                && n["gpus"][0]["state"] == "ok"
                && n["exporter_down"] == false
        })
    };
    wait_for_cluster(&prometheus, &[], "node-d watched by torchtop", watched);

    drop(serve);
    let doc = wait_for_cluster(&prometheus, &[], "node-d's torchtop down", |doc| {
        node_d(doc).is_some_and(|n| n["exporter_down"] == true)
    });
    let node = node_d(&doc).unwrap();
    assert_eq!(
        node["down"], false,
        "dcgm-exporter still reports it: {doc:#}"
    );
    assert_eq!(node["gpus"].as_array().map(Vec::len), Some(2), "{doc:#}");
    assert_eq!(node["gpus"][0]["utilization_percent"], 71.0, "{doc:#}");
    assert_eq!(node["instance"], torchtop_addr.as_str(), "{doc:#}");
    assert_eq!(doc["nodes_down"], 0, "{doc:#}");
    let warnings: Vec<&Value> = (doc["warnings"].as_array().into_iter().flatten())
        .filter(|w| w["id"] == "exporter-down")
        .collect();
    assert_eq!(warnings.len(), 1, "{doc:#}");
    assert_eq!(
        (&warnings[0]["hostname"], &warnings[0]["severity"]),
        (&HOST.into(), &"critical".into()),
        "{doc:#}"
    );
    let message = warnings[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("torchtop's exporter on node-d is down: last seen ")
            && message.contains(&torchtop_addr),
        "{message}"
    );
    let (status, _, _) = cluster_once(&prometheus.url, &[]);
    assert_eq!(
        status.code(),
        Some(4),
        "a critical warning, as for a node down"
    );
}
