//! Memory post-mortems end to end, with the built binary, the fake NVML and the stand-in torch:
//! a script under `torchtop run --record-history` that runs out of memory leaves a private
//! snapshot file and a critical `oom` warning naming it (also after the process has died of
//! it), and `S` in the monitor opens the viewer on a fresh snapshot, with Esc back to the monitor.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use common::fake_nvml::{env_refs, ScenarioFile};
use common::pty::PtySession;
use common::{json_stream_until, output_within_patience, wait_until, PATIENCE};
use serde_json::Value;
use tempfile::TempDir;

/// Fails one allocation of 5 GiB on cuda:0 as the real allocator does (observers, then
/// OutOfMemoryError), then `AFTER`.
const OOM_SCRIPT: &str = "\
import os, sys, time, torch
torch.cuda._fake_init((0,))
WAIT_FOR_MONITOR
try:
    torch.cuda._fake_alloc(0, 5 << 30)
except torch.cuda.OutOfMemoryError:
    AFTER
";

/// [`OOM_SCRIPT`] with what comes before the allocation (`wait`) and after the error.
fn oom_script(wait: &str, after: &str) -> String {
    OOM_SCRIPT
        .replace("WAIT_FOR_MONITOR", wait)
        .replace("AFTER", after)
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn agent_dir() -> (TempDir, PathBuf) {
    let scratch = tempfile::Builder::new()
        .prefix("torchtop-e2e-")
        .tempdir()
        .expect("a scratch directory");
    let agents = scratch.path().join("agents");
    (scratch, agents)
}

/// `torchtop run [--record-history] -- python3 -c SCRIPT` with the stand-in torch.
fn run_script(agents: &Path, record_history: bool, script: &str) -> Child {
    let mut command = Command::new(common::torchtop_binary());
    command.arg("run");
    if record_history {
        command.arg("--record-history");
    }
    let child = command
        .args(["--", "python3", "-c", script])
        .env("PYTHONPATH", repo().join("tests/python/fake_torch"))
        .env("TORCHTOP_AGENT_DIR", agents)
        .env("TORCHTOP_AGENT_INTERVAL_MS", "100")
        .stdin(Stdio::null())
        // One of them dies of the OOM on purpose: its traceback is no news.
        .stderr(Stdio::null())
        .spawn()
        .expect("torchtop run");
    let socket = agents.join(format!("{}.sock", child.id()));
    wait_until(&format!("the agent socket {}", socket.display()), || {
        socket.exists()
    });
    child
}

fn one_gpu_with(pid: u32) -> ScenarioFile {
    ScenarioFile::new(&format!(
        "[[gpu]]\nname = \"Agent GPU\"\nmemory_total_mib = 81920\nmemory_used_mib = 8192\n\
         [[gpu.process]]\npid = {pid}\nused_memory_mib = 2048\nsm_percent = 80\n"
    ))
}

fn oom_warning(doc: &Value) -> Option<&Value> {
    doc["warnings"]
        .as_array()?
        .iter()
        .find(|w| w["id"] == "oom")
}

fn oom_files(agents: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(agents)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains("-oom-"))
        .collect();
    found.sort();
    found
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_oom_under_record_history_leaves_a_private_snapshot_and_a_critical_warning() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let script = oom_script("", "while True: time.sleep(0.05)");
    let child = Killed(run_script(&agents, true, &script));
    let pid = child.0.id();
    wait_until("the OOM snapshot file", || oom_files(&agents).len() == 1);
    let file = oom_files(&agents).remove(0);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", file.display());
    assert!(file
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with(&format!("{pid}-oom-")));

    let scenario = one_gpu_with(pid);
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["--once", "--json"])
            .envs(scenario.env())
            .env("TORCHTOP_AGENT_DIR", &agents),
    );
    // A critical warning (the OOM) holds, so --once exits with the critical status.
    assert_eq!(
        output.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    let warning =
        oom_warning(&doc).unwrap_or_else(|| panic!("no oom warning: {}", doc["warnings"]));
    assert_eq!(warning["severity"], "critical");
    assert_eq!(warning["subject"]["pid"], pid);
    let message = warning["message"].as_str().unwrap();
    assert!(message.contains(&format!("pid {pid}")), "{message}");
    assert!(message.contains("5.0GiB"), "{message}");
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert_eq!(doc["ooms"][0]["requested_bytes"], 5u64 << 30);

    // The file is a snapshot torchtop reads, with the failed allocation in its trace.
    let opened = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["snapshot", "--json"])
            .arg(&file),
    );
    assert!(
        opened.status.success(),
        "{}",
        String::from_utf8_lossy(&opened.stderr)
    );
}

/// A review: a batch-size finder's caught OOM stayed critical for an hour, `--once` exiting 4
/// while the job trained on; then the diff review: the first fix judged from the steps the
/// monitor saw move, which `--once` never sees. The OOM event gives the step count it came
/// at, and one `--once` compares it with the count now.
#[test]
fn an_oom_the_program_steps_on_from_is_a_warning_in_once() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let script = oom_script(
        "import torchtop_agent\nfor _ in range(3): torchtop_agent.step()",
        "while True:\n        torchtop_agent.step()\n        time.sleep(0.05)",
    );
    // Under --record-history, as the other tests here.
    let child = Killed(run_script(&agents, true, &script));
    let pid = child.0.id();
    let scenario = one_gpu_with(pid);
    let once = || {
        output_within_patience(
            Command::new(common::torchtop_binary())
                .args(["--once", "--json"])
                .envs(scenario.env())
                .env("TORCHTOP_AGENT_DIR", &agents),
        )
    };
    let mut last = String::new();
    wait_until("the caught OOM as a warning in --once", || {
        let output = once();
        let Ok(doc) = serde_json::from_slice::<Value>(&output.stdout) else {
            return false;
        };
        last = doc["warnings"].to_string();
        let warned = oom_warning(&doc).is_some_and(|w| w["severity"] == "warn");
        warned && output.status.code() != Some(4)
    });
    assert!(last.contains("so the program caught the error"), "{last}");
}

#[test]
fn the_oom_warning_outlives_the_process_it_killed() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    // The program waits for the monitor to connect, then dies of the OOM, as a job does.
    let script = oom_script(
        "import torchtop_agent\nwhile not torchtop_agent._agent.clients: time.sleep(0.01)",
        "raise",
    );
    let child = Arc::new(Mutex::new(run_script(&agents, true, &script)));
    let pid = child.lock().unwrap().id();
    let scenario = one_gpu_with(pid);
    let exited = {
        let child = Arc::clone(&child);
        move || child.lock().unwrap().try_wait().unwrap().is_some()
    };
    let docs = json_stream_until(
        Command::new(common::torchtop_binary())
            .args(["--json", "-d", "0.3"])
            .envs(scenario.env())
            .env("TORCHTOP_AGENT_DIR", &agents),
        |docs| exited() && docs.last().and_then(oom_warning).is_some(),
    );
    let last = docs.last().unwrap();
    assert!(oom_warning(last).unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("-oom-"));
    assert_eq!(oom_files(&agents).len(), 1);
}

#[test]
fn capital_s_opens_the_viewer_and_esc_returns_to_the_monitor() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let script =
        "import time, torch\ntorch.cuda._fake_init((0,))\nwhile True:\n    time.sleep(0.05)\n";
    let child = Killed(run_script(&agents, false, script));
    let pid = child.0.id().to_string();
    let scenario = one_gpu_with(child.0.id());
    let mut env = scenario.env();
    env.push(("TORCHTOP_AGENT_DIR".into(), agents.display().to_string()));
    let mut session = PtySession::spawn(&common::torchtop_binary(), &[], &env_refs(&env), 120, 40);
    let monitor = |s: &str| s.contains(&pid) && s.contains("allocated") && !s.contains("Holders");
    assert!(
        session.wait_for(PATIENCE, monitor),
        "no monitor:\n{}",
        session.screen()
    );
    session.send(b"S");
    let viewer =
        |s: &str| s.contains("1 Summary") && s.contains("2 Holders") && s.contains("-snapshot-");
    assert!(
        session.wait_for(PATIENCE, viewer),
        "no viewer:\n{}",
        session.screen()
    );
    // Recording was started first, so the snapshot carries the stand-in's frames.
    session.send(b"2");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("forward")),
        "no stack in the Holders view:\n{}",
        session.screen()
    );
    session.send(b"\x1b");
    assert!(
        session.wait_for(PATIENCE, monitor),
        "Esc did not return:\n{}",
        session.screen()
    );
    session.send(b"q");
    assert!(
        session.wait_exit(PATIENCE).is_some(),
        "q did not quit the monitor"
    );
}
