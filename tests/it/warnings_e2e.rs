//! Issue 13 end to end, with the built binary, the fake NVML and real child processes: rules
//! that know what training is (no gpu-starved flood from 64 ordinary processes, exactly one for
//! a starved 2-rank job), health failures that are loud (gpu-lost, gpu-unresponsive, ecc and
//! driver-missing each critical, and `--once` exiting with the documented codes), and
//! training-stalled for a stand-in agent whose step stops while its stats go on.

use crate::common;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::fake_nvml::{ScenarioFile, Sleepers};
use common::{json_stream_until, output_within_patience, wait_until};
use serde_json::Value;
use tempfile::{NamedTempFile, TempDir};

const EXIT_WARN: i32 = 3;
const EXIT_CRITICAL: i32 = 4;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn config_file(text: &str) -> NamedTempFile {
    let mut file = tempfile::Builder::new()
        .prefix("torchtop-warn-")
        .suffix(".toml")
        .tempfile()
        .expect("a config file");
    file.write_all(text.as_bytes()).unwrap();
    file
}

fn agent_dir() -> (TempDir, PathBuf) {
    let scratch = tempfile::Builder::new()
        .prefix("torchtop-warn-")
        .tempdir()
        .expect("a scratch directory");
    let agents = scratch.path().join("agents");
    (scratch, agents)
}

fn torchtop(scenario: &ScenarioFile, args: &[&str]) -> Command {
    let (_scratch, agents) = agent_dir();
    let mut command = Command::new(common::torchtop_binary());
    command
        .args(args)
        .envs(scenario.env())
        .env("TORCHTOP_AGENT_DIR", agents);
    command
}

fn once(scenario: &ScenarioFile, args: &[&str]) -> Output {
    output_within_patience(&mut torchtop(scenario, args))
}

fn ids(doc: &Value) -> Vec<String> {
    doc["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .map(|w| w["id"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn with_id<'a>(doc: &'a Value, id: &str) -> Vec<&'a Value> {
    doc["warnings"]
        .as_array()
        .map(|w| w.iter().filter(|w| w["id"] == id).collect())
        .unwrap_or_default()
}

/// Streams `--json` until the last document holds `done`; returns the documents.
fn stream_until(command: &mut Command, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    json_stream_until(command, |docs| docs.last().is_some_and(&done))
}

/// A window of 2 s instead of 60: the same rule, watched long enough in a test.
const SHORT_STARVED_WINDOW: &str = "[rules.gpu_starved]\nwindow_seconds = 2.0\n";

/// Eight GPUs between 47 and 90% busy, eight ordinary processes each (real sleepers, no RANK
/// in their environment) with small SM shares of their own.
fn busy_ordinary_machine(pids: &[u32]) -> String {
    let mut text = String::new();
    for gpu in 0..8 {
        text.push_str(&format!(
            "[[gpu]]\nname = \"H100 #{gpu}\"\nmemory_total_mib = 81559\nmemory_used_mib = 40000\n\
             utilization_gpu = {{ fn = \"noise\", mean = 68, amplitude = 21, seed = {gpu} }}\n"
        ));
        for k in 0..8 {
            text.push_str(&format!(
                "[[gpu.process]]\npid = {}\nused_memory_mib = 4096\nsm_percent = {}\n",
                pids[gpu * 8 + k],
                k % 3
            ));
        }
    }
    text
}

#[test]
fn sixty_four_ordinary_processes_on_busy_gpus_raise_no_gpu_starved() {
    let sleepers = Sleepers::spawn(64);
    let scenario = ScenarioFile::new(&busy_ordinary_machine(&sleepers.pids()));
    let config = config_file(SHORT_STARVED_WINDOW);
    let path = config.path().to_str().unwrap();
    let mut command = torchtop(&scenario, &["--json", "-d", "0.4", "--config", path]);
    // Read until the window has been full for a while (2 s window, 5 s of samples).
    let docs = stream_until(&mut command, |doc| {
        doc["unix_seconds"].as_f64().unwrap_or(0.0) > 0.0
            && doc["processes"].as_array().is_some_and(|p| p.len() == 64)
    });
    let start = docs.last().unwrap()["unix_seconds"].as_f64().unwrap();
    let docs = stream_until(&mut command, |doc| {
        doc["unix_seconds"].as_f64().unwrap_or(0.0) >= start + 5.0
    });
    let last = docs.last().unwrap();
    assert_eq!(last["processes"].as_array().unwrap().len(), 64, "{last}");
    for doc in &docs {
        assert!(
            with_id(doc, "gpu-starved").is_empty(),
            "{}",
            doc["warnings"]
        );
    }
}

/// A rank: `sh` with RANK set whose one child (its "DataLoader worker") spins for at most two
/// minutes. Its own process group, killed whole on drop.
struct Rank {
    child: Child,
}

impl Rank {
    fn start(rank: u32, port: &str) -> Rank {
        let spin = "import time\nend = time.time() + 120\nwhile time.time() < end: pass\n";
        let child = Command::new("sh")
            .args(["-c", &format!("python3 -c '{spin}' & wait")])
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("sh");
        Rank { child }
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this test made for the rank.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

#[test]
fn a_starved_two_rank_job_raises_exactly_one_gpu_starved() {
    if !common::require_program("python3") {
        return;
    }
    let ranks = [Rank::start(0, "29561"), Rank::start(1, "29561")];
    let mut text = String::new();
    for (gpu, rank) in ranks.iter().enumerate() {
        text.push_str(&format!(
            "[[gpu]]\nname = \"H100 #{gpu}\"\nmemory_total_mib = 81559\nmemory_used_mib = 20500\nutilization_gpu = 5\n\
             [[gpu.process]]\npid = {}\nused_memory_mib = 20000\nsm_percent = 5\n",
            rank.child.id()
        ));
    }
    let scenario = ScenarioFile::new(&text);
    let config = config_file(SHORT_STARVED_WINDOW);
    let path = config.path().to_str().unwrap();
    let mut command = torchtop(&scenario, &["--json", "-d", "0.4", "--config", path]);
    let docs = stream_until(&mut command, |doc| !with_id(doc, "gpu-starved").is_empty());
    let last = docs.last().unwrap();
    let starved = with_id(last, "gpu-starved");
    assert_eq!(starved.len(), 1, "{}", last["warnings"]);
    assert_eq!(starved[0]["subject"]["kind"], "job");
    let job = common::job_of_mine("job 127.0.0.1:29561");
    assert_eq!(starved[0]["subject"]["id"], job);
    assert_eq!(starved[0]["group"], format!("gpu-starved@{job}"));
    let message = starved[0]["message"].as_str().unwrap();
    assert!(message.contains("2 ranks on GPUs 0, 1"), "{message}");
    let workers = starved[0]["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "dataloader workers")
        .unwrap();
    assert_eq!(workers["number"], 2.0, "{workers}");
}

fn lost_gpu() -> ScenarioFile {
    ScenarioFile::new(
        "[[gpu]]\nname = \"Fine\"\nutilization_gpu = 50\n\
         [[gpu]]\nname = \"Gone\"\nutilization_gpu = 50\nlost_after_s = 0\n",
    )
}

#[test]
fn a_lost_gpu_is_critical_and_once_exits_with_the_critical_code() {
    let scenario = lost_gpu();
    let text = once(&scenario, &["--once"]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert_eq!(text.status.code(), Some(EXIT_CRITICAL), "{stdout}");
    assert!(
        stdout.contains("Critical gpu-lost on GPU 1: GPU 1"),
        "{stdout}"
    );
    let json = once(&scenario, &["--once", "--json"]);
    assert_eq!(json.status.code(), Some(EXIT_CRITICAL));
    let doc: Value = serde_json::from_slice(&json.stdout).unwrap();
    let lost = with_id(&doc, "gpu-lost");
    assert_eq!(lost[0]["severity"], "critical");
    assert_eq!(lost[0]["subject"]["index"], 1);
    let never = once(&scenario, &["--once", "--fail-on", "never"]);
    assert_eq!(never.status.code(), Some(0));
    // A textfile collector's cron (`... > x.tmp && mv x.tmp x.prom`) must keep the file fresh
    // most of all while something is critical: the exposition exits 0 and says it as a series.
    let prometheus = once(&scenario, &["--once", "--format", "prometheus"]);
    let exposition = String::from_utf8_lossy(&prometheus.stdout);
    assert_eq!(prometheus.status.code(), Some(0), "{exposition}");
    assert!(
        exposition.contains("id=\"gpu-lost\"") && exposition.contains("severity=\"critical\""),
        "{exposition}"
    );
}

#[test]
fn a_gpu_hung_past_the_threshold_is_critical() {
    let scenario = ScenarioFile::new(
        "[[gpu]]\nname = \"Fine\"\nutilization_gpu = 50\n\
         [[gpu]]\nname = \"Stuck\"\nhang = { after_s = 0, block_s = 3600 }\n",
    );
    let config = config_file("[rules.health]\nunresponsive_seconds = 1.0\n");
    let path = config.path().to_str().unwrap();
    let output = once(
        &scenario,
        &["--once", "--json", "--timeout", "2", "--config", path],
    );
    assert_eq!(output.status.code(), Some(EXIT_CRITICAL));
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["gpus"][1]["state"], "stale");
    let hung = with_id(&doc, "gpu-unresponsive");
    assert_eq!(hung.len(), 1, "{}", doc["warnings"]);
    assert_eq!(hung[0]["subject"]["index"], 1);
}

#[test]
fn uncorrected_ecc_present_from_the_start_is_critical() {
    let scenario =
        ScenarioFile::new("[[gpu]]\nname = \"Flaky\"\nutilization_gpu = 50\necc_uncorrected = 4\n");
    let output = once(&scenario, &["--once", "--json"]);
    assert_eq!(output.status.code(), Some(EXIT_CRITICAL));
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    let ecc = with_id(&doc, "ecc");
    assert_eq!(ecc[0]["severity"], "critical", "{}", doc["warnings"]);
    let fact = ecc[0]["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "volatile uncorrected")
        .unwrap();
    assert_eq!(fact["number"], 4.0);
}

#[test]
fn pages_waiting_for_retirement_or_rows_for_remapping_are_critical() {
    for (name, spec) in [
        (
            "retired",
            "retired_pages = { double_bit = 2, pending = true }",
        ),
        (
            "remapped",
            "remapped_rows = { uncorrectable = 1, pending = true }",
        ),
    ] {
        let scenario = ScenarioFile::new(&format!(
            "[[gpu]]\nname = \"Worn\"\nutilization_gpu = 50\n{spec}\n"
        ));
        let output = once(&scenario, &["--once", "--json"]);
        assert_eq!(output.status.code(), Some(EXIT_CRITICAL), "{name}");
        let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            doc["gpus"][0][format!(
                "{name}_{}_pending",
                if name == "retired" { "pages" } else { "rows" }
            )],
            true
        );
        let ecc = with_id(&doc, "ecc");
        assert_eq!(ecc.len(), 1, "{name}: {}", doc["warnings"]);
        assert!(
            ecc[0]["message"]
                .as_str()
                .unwrap()
                .contains("wait for a reset"),
            "{}",
            ecc[0]["message"]
        );
    }
    let quiet = ScenarioFile::new(
        "[[gpu]]\nname = \"Fine\"\nretired_pages = { single_bit = 1 }\nremapped_rows = { correctable = 2 }\n",
    );
    let output = once(&quiet, &["--once", "--json"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn device_nodes_without_a_loadable_library_are_a_missing_driver() {
    let dev = tempfile::tempdir().unwrap();
    let run = |dev_dir: &Path| {
        output_within_patience(
            Command::new(common::torchtop_binary())
                .args(["--once", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])
                .env("TORCHTOP_DEV_DIR", dev_dir),
        )
    };
    let no_gpu_machine = run(dev.path());
    assert_eq!(
        no_gpu_machine.status.code(),
        Some(0),
        "no nodes, no driver to miss"
    );
    for node in ["nvidia0", "nvidiactl"] {
        std::fs::write(dev.path().join(node), "").unwrap();
    }
    let broken = run(dev.path());
    let stdout = String::from_utf8_lossy(&broken.stdout);
    assert_eq!(broken.status.code(), Some(EXIT_CRITICAL), "{stdout}");
    assert!(
        stdout.contains("Critical driver-missing on host"),
        "{stdout}"
    );
}

#[test]
fn a_healthy_machine_exits_0_and_warn_level_fails_only_when_asked() {
    let sleepers = Sleepers::spawn(1);
    let healthy = ScenarioFile::new(&format!(
        "[[gpu]]\nname = \"Fine\"\nutilization_gpu = 50\nmemory_used_mib = 5000\n\
         [[gpu.process]]\npid = {}\nused_memory_mib = 4096\n",
        sleepers.pid(0)
    ));
    let output = once(&healthy, &["--once", "--fail-on", "warn"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");

    // A process on GPU 1 whose CUDA_VISIBLE_DEVICES says 0: wrong-gpu, at warn level. Both
    // GPUs one model: on mixed models CUDA's index 0 may be NVML's GPU 1.
    let stray = Command::new("sleep")
        .arg("600")
        .env("CUDA_VISIBLE_DEVICES", "0")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut stray = KillOnDrop(stray);
    let scenario = ScenarioFile::new(&format!(
        "[[gpu]]\nname = \"A\"\n[[gpu]]\nname = \"A\"\nmemory_used_mib = 3000\n\
         [[gpu.process]]\npid = {}\nused_memory_mib = 2048\n",
        stray.0.id()
    ));
    wait_until("the stray's environment", || {
        std::fs::read(format!("/proc/{}/environ", stray.0.id()))
            .is_ok_and(|e| String::from_utf8_lossy(&e).contains("CUDA_VISIBLE_DEVICES=0"))
    });
    let default = once(&scenario, &["--once"]);
    let stdout = String::from_utf8_lossy(&default.stdout);
    assert!(stdout.contains("Warn wrong-gpu on pid"), "{stdout}");
    assert_eq!(
        default.status.code(),
        Some(0),
        "critical is the default threshold"
    );
    let strict = once(&scenario, &["--once", "--fail-on", "warn"]);
    assert_eq!(strict.status.code(), Some(EXIT_WARN));
    let usage = once(&scenario, &["--once", "--fail-on", "sometimes"]);
    assert_eq!(usage.status.code(), Some(2), "clap's usage error");
    stray.kill();
}

struct KillOnDrop(Child);

impl KillOnDrop {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Python "training script" under `torchtop run` (stand-in torch) that calls
/// `torchtop_agent.step()` every 50 ms, `steps` times (forever with `None`), then idles while
/// its agent keeps sending stats.
fn stepping_script(agents: &Path, steps: Option<u32>) -> KillOnDrop {
    let limit = steps.map_or("None".to_string(), |n| n.to_string());
    let script = format!(
        "import time, torch, torchtop_agent\ntorch.cuda._fake_init((0,))\nn = 0\nlimit = {limit}\n\
         while True:\n    if limit is None or n < limit:\n        torchtop_agent.step()\n        n += 1\n    time.sleep(0.05)\n"
    );
    let child = Command::new(common::torchtop_binary())
        .args(["run", "--", "python3", "-c", &script])
        .env("PYTHONPATH", repo().join("tests/python/fake_torch"))
        .env("TORCHTOP_AGENT_DIR", agents)
        .env("TORCHTOP_AGENT_INTERVAL_MS", "100")
        .stdin(Stdio::null())
        .spawn()
        .expect("torchtop run");
    let socket = agents.join(format!("{}.sock", child.id()));
    let child = KillOnDrop(child);
    wait_until(&format!("the agent socket {}", socket.display()), || {
        socket.exists()
    });
    child
}

fn agent_gpu(pid: u32) -> ScenarioFile {
    ScenarioFile::new(&format!(
        "[[gpu]]\nname = \"Agent GPU\"\nmemory_total_mib = 81920\nmemory_used_mib = 8192\n\
         utilization_gpu = 100\n[[gpu.process]]\npid = {pid}\nused_memory_mib = 2048\nsm_percent = 100\n"
    ))
}

const QUICK_STALL: &str = "[rules.training_stalled]\nmin_seconds = 2.0\n";

fn step_of(doc: &Value) -> Option<u64> {
    doc["processes"][0]["torch"]["step"].as_u64()
}

#[test]
fn training_stalled_fires_when_the_step_stops_while_stats_go_on() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let script = stepping_script(&agents, Some(20));
    let scenario = agent_gpu(script.0.id());
    let config = config_file(QUICK_STALL);
    let path = config.path().to_str().unwrap();
    let mut command = Command::new(common::torchtop_binary());
    command
        .args(["--json", "-d", "0.4", "--config", path])
        .envs(scenario.env())
        .env("TORCHTOP_AGENT_DIR", &agents);
    let docs = stream_until(&mut command, |doc| {
        !with_id(doc, "training-stalled").is_empty()
    });
    let last = docs.last().unwrap();
    assert_eq!(step_of(last), Some(20), "{}", last["processes"][0]);
    let stalled = with_id(last, "training-stalled");
    assert_eq!(stalled[0]["subject"]["pid"], script.0.id());
    let remedy = stalled[0]["remedy"].as_str().unwrap();
    for name in [
        "py-spy dump",
        "NCCL_DEBUG=INFO",
        "TORCH_NCCL_TRACE_BUFFER_SIZE",
    ] {
        assert!(remedy.contains(name), "{remedy}");
    }
}

#[test]
fn training_stalled_stays_quiet_while_the_steps_advance() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let script = stepping_script(&agents, None);
    let scenario = agent_gpu(script.0.id());
    let config = config_file(QUICK_STALL);
    let path = config.path().to_str().unwrap();
    let mut command = Command::new(common::torchtop_binary());
    command
        .args(["--json", "-d", "0.4", "--config", path])
        .envs(scenario.env())
        .env("TORCHTOP_AGENT_DIR", &agents);
    // Until the steps have been watched for twice the 2 s minimum.
    let docs = json_stream_until(&mut command, |docs| {
        let stepping: Vec<&Value> = docs.iter().filter(|d| step_of(d).is_some()).collect();
        match (stepping.first(), stepping.last()) {
            (Some(a), Some(b)) => {
                b["unix_seconds"].as_f64().unwrap() - a["unix_seconds"].as_f64().unwrap() >= 4.0
            }
            _ => false,
        }
    });
    let steps: Vec<u64> = docs.iter().filter_map(step_of).collect();
    assert!(steps.last() > steps.first(), "{steps:?}");
    for doc in &docs {
        assert!(
            !ids(doc).contains(&"training-stalled".to_string()),
            "{}",
            doc["warnings"]
        );
    }
}

/// Eight GPUs and 64 processes, every figure moving: after the first line (which carries
/// everything once), each compact line stays within 8 KiB, and still lists every GPU and process.
#[test]
fn compact_json_lines_stay_within_8_kib_for_8_gpus_and_64_processes() {
    let sleepers = Sleepers::spawn(64);
    let scenario = ScenarioFile::from_fixture("eight_gpus.toml", &sleepers.pids());
    let output = once(
        &scenario,
        &["--json", "--compact", "--samples", "6", "-d", "0.4"],
    );
    assert!(output.status.success());
    let lines: Vec<&[u8]> = output
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 6);
    let sizes: Vec<usize> = lines.iter().map(|l| l.len()).collect();
    for line in &lines[1..] {
        let doc: Value = serde_json::from_slice(line).unwrap();
        assert_eq!(doc["compact"], true);
        assert_eq!(doc["gpus"].as_array().unwrap().len(), 8);
        assert_eq!(doc["processes"].as_array().unwrap().len(), 64, "{doc}");
        assert!(line.len() <= 8 * 1024, "line sizes {sizes:?}");
    }
    let first: Value = serde_json::from_slice(lines[0]).unwrap();
    assert!(
        first["processes"][0]["command"].is_string(),
        "the first line has it all"
    );
}
