//! End to end with a real Prometheus: two `torchtop serve` instances on two fake-NVML
//! scenarios stand for two nodes, each holding two ranks of one job (real Python processes with
//! the agent and the stand-in torch, marking steps; rank 3 is slow). Prometheus scrapes both
//! every second; `torchtop cluster` must then show both nodes, four GPUs and one job of four
//! ranks with rank 3 as its straggler, in `--once --json` and in the TUI. Node b's name is a
//! long FQDN, which `--once`'s text must not cut. Then node b's exporter dies: node b must be
//! listed DOWN (not vanish), the job must say that ranks 2 and 3 are missing, and a critical
//! `node-down` warning must name node b, in the TUI, in `--once --json` and in `--once`'s
//! plain text, whose exit status is then 4 as `torchtop --once`'s is for a critical warning.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::fake_nvml::{env_refs, ScenarioFile};
use common::prometheus::{cluster_once, wait_for_cluster, Prometheus, Serve};
use common::pty::PtySession;
use common::{require_program, PATIENCE};
use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

const RANK_SCRIPT: &str = "import sys, time, torch, torchtop_agent\n\
torch.cuda._fake_init((0,))\n\
torchtop_agent.start(interval_ms=200)\n\
period = float(sys.argv[1])\n\
while True:\n    time.sleep(period)\n    torchtop_agent.step()\n";

/// Rank 3 steps every 0.3 s, the others every 0.1 s: 200 % above the median. A loaded machine
/// stretches every sleep a little; a bar at 100 % (not the default 20) keeps a rank that slept
/// a few ms long from counting as a straggler too.
const STRAGGLER_PERCENT: &str = "100";

/// Node b's host name: longer than any column the TUI gives a host name (24), as a real
/// cluster's FQDNs are.
const NODE_B: &str = "node-b.rack-07.cluster.example.internal";

/// One rank of the job: a Python process with the agent, marking a step every `period` s.
struct RankProcess {
    child: Child,
}

impl RankProcess {
    fn start(rank: u32, local_rank: u32, period: f64, agents: &Path) -> Self {
        let pythonpath = format!(
            "{}:{}",
            repo().join("assets/python").display(),
            repo().join("tests/python/fake_torch").display()
        );
        let child = Command::new("python3")
            .args(["-c", RANK_SCRIPT, &period.to_string()])
            .env("PYTHONPATH", pythonpath)
            .env("TORCHTOP_AGENT_DIR", agents)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", local_rank.to_string())
            .env("WORLD_SIZE", "4")
            .env("MASTER_ADDR", "10.0.0.1")
            .env("MASTER_PORT", "29500")
            .env("CUDA_VISIBLE_DEVICES", local_rank.to_string())
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 for a rank");
        let socket = agents.join(format!("{}.sock", child.id()));
        let deadline = Instant::now() + PATIENCE;
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "no agent socket {}",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RankProcess { child }
    }
}

impl Drop for RankProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A node: two GPUs, each with one rank, and its exporter.
struct Node {
    _ranks: Vec<RankProcess>,
    _scenario: ScenarioFile,
    serve: Serve,
    /// Holds the agents' socket directory; dropped after the ranks.
    _scratch: tempfile::TempDir,
}

fn node(hostname: &str, first_rank: u32, periods: [f64; 2]) -> Node {
    let scratch = tempfile::Builder::new()
        .prefix("torchtop-cluster-")
        .tempdir()
        .expect("a scratch directory");
    let agents = scratch.path().join("agents");
    let ranks: Vec<RankProcess> = (0..2)
        .map(|local| {
            RankProcess::start(first_rank + local, local, periods[local as usize], &agents)
        })
        .collect();
    let mut text = String::new();
    for (gpu, rank) in ranks.iter().enumerate() {
        text.push_str(&format!(
            "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"GPU-{hostname}-{gpu}\"\n\
             memory_total_mib = 81920\nmemory_used_mib = {}\nutilization_gpu = {}\ntemperature_c = {}\n\
             [[gpu.process]]\npid = {}\nused_memory_mib = 20000\nsm_percent = 80\n",
            20_500 + gpu * 1000,
            70 + gpu * 10,
            60 + gpu,
            rank.child.id()
        ));
    }
    let scenario = ScenarioFile::new(&text);
    let mut env = scenario.env();
    env.push(("TORCHTOP_AGENT_DIR".into(), agents.display().to_string()));
    let serve = Serve::start(&["-d", "0.5"], &["--hostname", hostname], &env);
    Node {
        _ranks: ranks,
        _scenario: scenario,
        serve,
        _scratch: scratch,
    }
}

fn cluster_json(url: &str) -> Option<Value> {
    let (_, stdout, _) = cluster_once(url, &["--json", "--straggler-percent", STRAGGLER_PERCENT]);
    serde_json::from_str(&stdout).ok()
}

/// Polls `--once --json` until `condition` holds on the document, for at most 90 s.
fn wait_for_json(prometheus: &Prometheus, what: &str, condition: impl Fn(&Value) -> bool) -> Value {
    let straggler = ["--straggler-percent", STRAGGLER_PERCENT];
    wait_for_cluster(prometheus, &straggler, what, condition)
}

/// Whether the document shows everything the test waits for: 2 nodes, 4 GPUs, one job whose
/// 4 ranks all have a step time.
fn complete(doc: &Value) -> bool {
    let jobs = doc["jobs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    doc["nodes"].as_array().is_some_and(|n| n.len() == 2)
        && doc["gpu_count"] == 4
        && jobs.len() == 1
        && jobs[0]["ranks"].as_array().is_some_and(|r| {
            r.len() == 4 && r.iter().all(|rank| rank["step_time_seconds"].is_number())
        })
}

#[test]
fn two_nodes_in_a_real_prometheus_show_one_job_and_its_straggler() {
    if !require_program("prometheus") || !require_program("python3") {
        return;
    }
    let a = node("node-a", 0, [0.1, 0.1]);
    let b = node(NODE_B, 2, [0.1, 0.3]);
    for node in [&a, &b] {
        node.serve.wait_for_metrics(PATIENCE, |m| {
            m.matches("torchtop_step_time_seconds{").count() == 2
        });
    }
    let prometheus = Prometheus::start(&[a.serve.addr, b.serve.addr]);

    let doc = wait_for_json(
        &prometheus,
        "2 nodes, 4 GPUs and a job of 4 ranks",
        complete,
    );
    let hosts: Vec<&str> = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["hostname"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["node-a", NODE_B]);
    assert_eq!(doc["nodes"][0]["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(doc["nodes"][0]["utilization_min"], 70.0);
    let job = &doc["jobs"][0];
    let id = common::job_of_mine("job 10.0.0.1:29500");
    assert_eq!(job["id"], id);
    assert_eq!(job["nodes"], 2);
    assert_eq!(job["world_size"], 4, "from the ranks' WORLD_SIZE: {job:#}");
    let ranks = job["ranks"].as_array().unwrap();
    let numbers: Vec<u64> = ranks.iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [0, 1, 2, 3]);
    let stragglers: Vec<u64> = ranks
        .iter()
        .filter(|r| r["straggler"] == true)
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(stragglers, [3], "{job:#}");
    assert!(
        ranks[3]["headroom_bytes"].as_f64().unwrap() > 0.0,
        "{job:#}"
    );
    assert_eq!(ranks[2]["hostname"], NODE_B);
    both_up_in_text(&prometheus);

    // The TUI, read from the same Prometheus.
    let args = [
        "cluster",
        "--prometheus",
        prometheus.url.as_str(),
        "--refresh",
        "1",
        "--straggler-percent",
        STRAGGLER_PERCENT,
    ];
    let session = PtySession::spawn(&common::torchtop_binary(), &args, &env_refs(&[]), 120, 40);
    let shown = session.wait_for(PATIENCE, |s| {
        s.contains("node-a")
            && s.contains("node-b")
            && s.contains(&format!("JOB {id}  4 of 4 ranks on 2 nodes  "))
            && s.contains("STRAGGLER")
    });
    assert!(
        shown,
        "the TUI never showed both nodes and the job:\n{}",
        session.screen()
    );
    assert!(!session.screen().contains("down"), "{}", session.screen());

    // node-b's exporter dies; its ranks' processes go on (as they would on a node that lost
    // its network).
    let b_exporter = b.serve.addr.to_string();
    drop(b.serve);
    let shown = session.wait_for(PATIENCE, |s| {
        s.contains("2 nodes, 1 down")
            && s.contains(&format!("JOB {id}  2 of 4 ranks on 1 node, 2 missing"))
            && s.lines()
                .any(|l| l.contains("CRIT node-b") && l.contains("node-down"))
    });
    assert!(
        shown,
        "the TUI never showed node-b down, its node-down warning and the job's missing ranks:\n{}",
        session.screen()
    );
    a_dead_exporter_is_a_node_down(&prometheus, &b_exporter);
}

/// Both nodes up: `--once`'s text cuts no column (node b's long name, any warning's id), the
/// warnings the nodes export carry no message (the exporter exports none) in the JSON and N/A
/// in the text, and the exit status follows the worst of them.
fn both_up_in_text(prometheus: &Prometheus) {
    // The nodes' warnings can change between two queries (a throttle coming and going): the
    // text is judged by a JSON document read on both sides of it that agree.
    let (status, text, stderr, doc) = (0..10)
        .find_map(|_| {
            let before = cluster_json(&prometheus.url)?;
            let (status, text, stderr) = cluster_once(&prometheus.url, &[]);
            let after = cluster_json(&prometheus.url)?;
            (before["warnings"] == after["warnings"]).then_some((status, text, stderr, after))
        })
        .expect("the nodes' warnings held still over one text run in 10 tries");
    assert!(text.contains("  2 nodes  4 GPUs  1 job  "), "{text}");
    assert!(text.contains("4 of 4 ranks on 2 nodes  "), "{text}");
    assert!(!text.contains('…'), "nothing cut:\n{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains(NODE_B)).count(),
        1 + 2
            + doc["warnings"]
                .as_array()
                .map_or(0, |w| w.iter().filter(|w| w["hostname"] == NODE_B).count()),
        "node b's row, its 2 ranks and its warnings name it whole:\n{text}"
    );
    let warnings = doc["warnings"].as_array().unwrap();
    for warning in warnings {
        let (id, subject) = (
            warning["id"].as_str().unwrap(),
            warning["subject"].as_str().unwrap(),
        );
        assert_eq!(warning.get("message"), Some(&Value::Null), "{warning:#}");
        assert!(
            text.lines().any(|l| l.contains(&format!(" {id} "))
                && l.contains(subject)
                && l.ends_with(" N/A")),
            "{id} on {subject}, whole:\n{text}"
        );
    }
    if !warnings.is_empty() {
        assert!(
            text.contains("N/A: `torchtop serve` exports no message"),
            "{text}"
        );
    }
    let critical = warnings.iter().any(|w| w["severity"] == "critical");
    let warn = warnings.iter().any(|w| w["severity"] == "warn");
    assert_eq!(
        status.code(),
        Some(if critical { 4 } else { 0 }),
        "{text}\n{stderr}"
    );
    let (status, _, stderr) = cluster_once(&prometheus.url, &["--fail-on", "warn"]);
    let at_warn = match (critical, warn) {
        (true, _) => 4,
        (false, true) => 3,
        (false, false) => 0,
    };
    assert_eq!(status.code(), Some(at_warn), "--fail-on warn: {stderr}");
}

/// After node-b's exporter died: `--once --json` and `--once`'s text list node-b as down with
/// when it was last seen, the job's ranks 2 and 3 as missing, on node-b, and node b's
/// `node-down` warning; `--once` exits 4 for it, and 0 with `--fail-on never`.
fn a_dead_exporter_is_a_node_down(prometheus: &Prometheus, b_exporter: &str) {
    let doc = wait_for_json(prometheus, "node-b down", |doc| {
        doc["nodes_down"] == 1
            && doc["jobs"][0]["ranks"]
                .as_array()
                .is_some_and(|r| r.len() == 2)
    });
    let b = &doc["nodes"][1];
    assert_eq!(
        (&b["hostname"], &b["down"]),
        (&NODE_B.into(), &true.into()),
        "{doc:#}"
    );
    assert_eq!(b["instance"], b_exporter, "{doc:#}");
    let ago = b["last_seen_seconds_ago"]
        .as_f64()
        .expect("when node-b was last seen");
    assert!((0.0..120.0).contains(&ago), "{doc:#}");
    let missing: Vec<(u64, &str)> = doc["jobs"][0]["missing_ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["rank"].as_u64().unwrap(), m["hostname"].as_str().unwrap()))
        .collect();
    assert_eq!(missing, [(2, NODE_B), (3, NODE_B)], "{doc:#}");
    let down: Vec<&Value> = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["id"] == "node-down")
        .collect();
    assert_eq!(down.len(), 1, "{doc:#}");
    assert_eq!(
        (&down[0]["hostname"], &down[0]["severity"]),
        (&NODE_B.into(), &"critical".into()),
        "{doc:#}"
    );
    assert!(down[0]["last_seen_seconds_ago"].is_number(), "{doc:#}");
    let message = down[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("{NODE_B} is down: last seen "))
            && message.ends_with(&format!(
                "; Prometheus cannot scrape its exporter at {b_exporter}"
            )),
        "{doc:#}"
    );

    let (status, text, stderr) = cluster_once(&prometheus.url, &[]);
    assert_eq!(
        status.code(),
        Some(4),
        "a critical warning holds: {text}\n{stderr}"
    );
    assert!(
        text.contains("  2 nodes, 1 down  2 GPUs  1 job  "),
        "{text}"
    );
    assert!(text.contains("2 of 4 ranks on 1 node, 2 missing"), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains(NODE_B) && l.contains("DOWN"));
    assert!(
        line.is_some_and(|l| l.contains(&format!("exporter at {b_exporter}"))),
        "{text}"
    );
    let warning = text.lines().find(|l| l.contains("node-down"));
    assert!(
        warning.is_some_and(|l| l.starts_with(&format!("  CRIT {NODE_B} node-down"))
            && l.ends_with(&format!("exporter at {b_exporter}"))),
        "the WARNINGS list says node b is down:\n{text}"
    );
    assert_eq!(
        text.matches("NOT REPORTING: its node is down").count(),
        2,
        "{text}"
    );
    // Plain text sized to its content: no padding to a screen, no key help.
    assert!(text.lines().all(|l| !l.trim().is_empty()), "{text:?}");
    assert!(!text.contains("q quit"), "{text}");
    let (status, _, stderr) = cluster_once(&prometheus.url, &["--fail-on", "never"]);
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn an_unreachable_prometheus_is_a_sentence_and_a_failure_status() {
    // Port 1 (tcpmux) has no listener on a test machine; a free port from the OS could be
    // taken by a parallel test's server before this one connects.
    let url = "http://127.0.0.1:1".to_string();
    let output = Command::new(common::torchtop_binary())
        .args(["cluster", "--prometheus", &url, "--once", "--json"])
        .args(["--query-timeout", "5"])
        .stdin(Stdio::null())
        .output()
        .expect("run torchtop cluster");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot reach Prometheus at"), "{stderr}");
    let doc: Value = serde_json::from_slice(&output.stdout).expect("JSON even on failure");
    assert_eq!(doc["stale"]["nodes"], true);
    assert_eq!(doc["unread"]["nodes"], true);
}

#[test]
fn once_text_without_prometheus_says_what_could_not_be_read() {
    let (status, text, stderr) = cluster_once("http://127.0.0.1:1", &["--query-timeout", "5"]);
    assert!(!status.success());
    // Each panel says it could not be read, and why, in full; none claims to be empty.
    assert_eq!(
        text.matches("could not be read: cannot reach Prometheus at")
            .count(),
        3,
        "{text}"
    );
    assert!(text.contains("check the URL and that it runs"), "{text}");
    assert!(
        !text.contains("no job") && !text.contains("  none"),
        "{text}"
    );
    assert!(text.contains("? nodes"), "{text}");
    assert!(text.lines().count() < 15, "sized to its content:\n{text}");
    assert!(!text.contains("q quit"), "{text}");
    // No earlier data exists in a one-shot run, so no problem claims to show it.
    assert!(
        stderr.contains("the nodes could not be read: cannot reach"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("stale") && !text.contains("stale"),
        "{stderr}"
    );
}

#[test]
fn the_straggler_bar_is_a_percentage_with_its_own_range() {
    for bad in ["100000", "-1"] {
        let (status, _, stderr) = cluster_once(
            "http://127.0.0.1:1",
            &[&format!("--straggler-percent={bad}")],
        );
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("expected a percentage from 0 to 10000"),
            "{stderr}"
        );
    }
    // 0 is a bar: a rank slower than the median at all. Only Prometheus is missing here.
    let (status, _, stderr) = cluster_once(
        "http://127.0.0.1:1",
        &["--straggler-percent", "0", "--json"],
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot reach Prometheus"), "{stderr}");
}
