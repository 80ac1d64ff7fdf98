//! The scrape-cost benchmark (`cargo bench --bench scrape`): what `/metrics` costs and what a
//! refresh of `torchtop cluster` costs. Not part of `cargo test`: it measures, it does not judge.
//!
//! 1. Encoding one exposition of a synthetic node with 8 GPUs, 64 processes and 4 agents, in
//!    process (the work a scrape does).
//! 2. The release `torchtop serve` on the fake NVML (eight_gpus.toml, 60 sleepers and 4 Python
//!    ranks with the agent): one client's scrapes in a row, then 10 clients at 200 scrapes/s in
//!    all, and whether sampling kept its 1 s interval meanwhile (from `torchtop_sample_age_seconds`).
//! 3. A real Prometheus filled with 64 synthetic nodes of 8 GPUs (512 GPUs, one job of 512
//!    ranks), served by tiny HTTP servers here; then `torchtop cluster --once --json` is timed.
//!
//! Environment: TORCHTOP_BENCH_SECONDS (the load window, default 10).

#[path = "../common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::fake_nvml::{ScenarioFile, Sleepers};
use common::prometheus::{http_get, Prometheus, Serve};
use common::synthetic::{node_snapshot, NodeShape};
use torchtop::serve::exposition::Format;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(ms: Vec<f64>) -> String {
    summary_of(ms, "scrapes")
}

fn summary_of(mut ms: Vec<f64>, what: &str) -> String {
    ms.sort_by(f64::total_cmp);
    let mean = ms.iter().sum::<f64>() / ms.len().max(1) as f64;
    format!(
        "mean {mean:.3} ms, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} {what})",
        percentile(&ms, 0.5),
        percentile(&ms, 0.99),
        ms.last().copied().unwrap_or(f64::NAN),
        ms.len()
    )
}

fn encode_in_process() {
    let shape = NodeShape {
        gpus: 8,
        per_gpu: 8,
        agents: 4,
        first_rank: 0,
        world_size: 4,
        step_time: 0.4,
        slow_rank: None,
    };
    let snapshot = node_snapshot("bench-node", &shape);
    for (name, format) in [
        ("text 0.0.4", Format::Prometheus),
        ("OpenMetrics", Format::OpenMetrics),
    ] {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..2000 {
            let started = Instant::now();
            let text = torchtop::serve::encode(&snapshot, None, false, format);
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            bytes = text.len();
        }
        println!(
            "encode, 8 GPUs / 64 processes / 4 agents, {name}: {} ; {bytes} bytes",
            summary(times)
        );
    }
}

const RANK_SCRIPT: &str = "import sys, time, torch, torchtop_agent\n\
torch.cuda._fake_init((0,))\ntorchtop_agent.start(interval_ms=1000)\n\
while True:\n    time.sleep(0.4)\n    torchtop_agent.step()\n";

fn python_agents(count: usize, dir: &Path) -> Vec<Child> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pythonpath = format!(
        "{}:{}",
        root.join("assets/python").display(),
        root.join("tests/python/fake_torch").display()
    );
    (0..count)
        .map(|rank| {
            Command::new("python3")
                .args(["-c", RANK_SCRIPT])
                .env("PYTHONPATH", &pythonpath)
                .env("TORCHTOP_AGENT_DIR", dir)
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", count.to_string())
                .env("MASTER_PORT", "29500")
                .stdin(Stdio::null())
                .spawn()
                .expect("python3")
        })
        .collect()
}

fn sample_age(body: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with("torchtop_sample_age_seconds"))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

fn serve_under_load(window: Duration) {
    let dir = std::env::temp_dir().join(format!("torchtop-bench-scrape-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut agents = python_agents(4, &dir);
    let sleepers = Sleepers::spawn(60);
    let mut pids: Vec<u32> = agents.iter().map(Child::id).collect();
    pids.extend(sleepers.pids());
    let scenario = ScenarioFile::from_fixture("eight_gpus.toml", &pids);
    let mut env = scenario.env();
    env.push(("TORCHTOP_AGENT_DIR".into(), dir.display().to_string()));
    let serve = Serve::start(&["-d", "1"], &[], &env);
    let body = serve.wait_for_metrics(Duration::from_secs(30), |m| {
        m.matches("torchtop_step_time_seconds{").count() == 4
    });
    println!(
        "serve: {} series, {} bytes per scrape",
        body.lines().filter(|l| !l.starts_with('#')).count(),
        body.len()
    );
    let mut one = Vec::new();
    for _ in 0..500 {
        let started = Instant::now();
        let (status, _, _) =
            http_get(serve.addr, "/metrics", &[], Duration::from_secs(10)).unwrap();
        assert_eq!(status, 200);
        one.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "serve, one client, scrapes in a row (HTTP included): {}",
        summary(one)
    );

    let latencies = Arc::new(Mutex::new(Vec::new()));
    let snapshots = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(0u32));
    let started = Instant::now();
    let clients: Vec<_> = (0..10)
        .map(|client| {
            let (latencies, snapshots, failures) =
                (latencies.clone(), snapshots.clone(), failures.clone());
            let addr = serve.addr;
            thread::spawn(move || {
                // 20 scrapes a second each, staggered: 200 a second in all.
                let period = Duration::from_millis(50);
                let mut next = Instant::now() + period * client / 10;
                while started.elapsed() < window {
                    thread::sleep(next.saturating_duration_since(Instant::now()));
                    next += period;
                    let asked = Instant::now();
                    match http_get(addr, "/metrics", &[], Duration::from_secs(10)) {
                        Ok((200, _, body)) => {
                            let took = asked.elapsed().as_secs_f64();
                            latencies.lock().unwrap().push(took * 1000.0);
                            if let Some(age) = sample_age(&body) {
                                let now = std::time::SystemTime::now()
                                    .duration_since(std::time::UNIX_EPOCH)
                                    .unwrap()
                                    .as_secs_f64();
                                snapshots
                                    .lock()
                                    .unwrap()
                                    .push(((now - age) * 10.0).round() / 10.0);
                            }
                        }
                        _ => *failures.lock().unwrap() += 1,
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let latencies = latencies.lock().unwrap().clone();
    println!(
        "serve, 10 clients for {elapsed:.1} s: {:.0} scrapes/s answered, {} failed; {}",
        latencies.len() as f64 / elapsed,
        failures.lock().unwrap(),
        summary(latencies)
    );
    let mut times = snapshots.lock().unwrap().clone();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|g| *g > 0.05)
        .collect();
    if !gaps.is_empty() {
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let max = gaps.iter().copied().fold(0.0, f64::max);
        println!(
            "sampling under that load: {} snapshots, interval mean {mean:.2} s, max {max:.2} s (configured 1.00 s)",
            times.len()
        );
    }
    for agent in &mut agents {
        let _ = agent.kill();
        let _ = agent.wait();
    }
}

/// Serves `body` to every request on a port of its own, until the process ends.
fn static_server(body: String) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let mut stream = stream;
            let mut buffer = [0u8; 4096];
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = stream.read(&mut buffer);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
    });
    addr
}

fn cluster_refresh() {
    if !common::require_program("prometheus") {
        return;
    }
    let nodes = 64;
    let targets: Vec<SocketAddr> = (0..nodes)
        .map(|n| {
            let shape = NodeShape {
                gpus: 8,
                per_gpu: 1,
                agents: 8,
                first_rank: n * 8,
                world_size: nodes * 8,
                step_time: 0.4,
                slow_rank: Some(137),
            };
            let hostname = format!("node-{n:02}");
            let snapshot = node_snapshot(&hostname, &shape);
            static_server(torchtop::serve::encode(
                &snapshot,
                None,
                false,
                Format::Prometheus,
            ))
        })
        .collect();
    let prometheus = Prometheus::start(&targets);
    let addr: SocketAddr = prometheus
        .url
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let query = "/api/v1/query?query=count(DCGM_FI_DEV_GPU_UTIL)";
        if let Ok((200, _, body)) = http_get(addr, query, &[], Duration::from_secs(10)) {
            if body.contains("\"512\"") {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never had 512 GPUs:\n{}",
            prometheus.log()
        );
        thread::sleep(Duration::from_millis(500));
    }
    // A few more scrapes, so that the sparklines have points.
    thread::sleep(Duration::from_secs(5));
    let mut runs = Vec::new();
    let mut fetch = Vec::new();
    let mut last = serde_json::Value::Null;
    for _ in 0..10 {
        let started = Instant::now();
        let output = Command::new(common::torchtop_binary())
            .args([
                "cluster",
                "--prometheus",
                &prometheus.url,
                "--once",
                "--json",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("torchtop cluster");
        runs.push(started.elapsed().as_secs_f64() * 1000.0);
        last = serde_json::from_slice(&output.stdout).unwrap_or_default();
        if let Some(ms) = last["fetch_ms"].as_f64() {
            fetch.push(ms);
        }
    }
    let ranks = last["jobs"][0]["ranks"].as_array().map_or(0, Vec::len);
    let stragglers = last["jobs"][0]["ranks"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|r| r["straggler"] == true).count());
    println!(
        "cluster, {} nodes / {} GPUs / one job of {ranks} ranks ({stragglers} straggler):",
        last["nodes"].as_array().map_or(0, Vec::len),
        last["gpu_count"]
    );
    println!(
        "  4 queries (fetch_ms, in process): {}",
        summary_of(fetch, "refreshes")
    );
    println!(
        "  whole `torchtop cluster --once --json` process: {}",
        summary_of(runs, "runs")
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let window = Duration::from_secs(
        std::env::var("TORCHTOP_BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10),
    );
    println!("torchtop scrape benchmark");
    encode_in_process();
    serve_under_load(window);
    cluster_refresh();
}
