//! Two training processes in two PID namespaces (containers, here `unshare --pid`), both pid 1
//! there, share one agent directory with the monitor (a DaemonSet's hostPath that every pod
//! mounts). Both agents wanted `1.sock`: the second removed the first's live socket, so the first
//! vanished from the monitor. Now the second serves under `1.<its PID namespace inode>.sock`,
//! and `torchtop --once --json` shows both. Needs root and a kernel that lets it unshare; where
//! it cannot, the test says so and passes.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Stdio};

use serde_json::Value;

use crate::common::fake_nvml::ScenarioFile;
use crate::common::wait_until;
use crate::launch_support::{dir_of, fake_torch_dir, first_line, is_root, open_base, Killed};

/// Starts the agent (interval 100 ms) with the stand-in torch on GPU 0, prints its pid and
/// socket, and idles.
fn agent_script() -> String {
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/python");
    format!(
        "import os, sys, time, torch\nsys.path.insert(0, {:?})\nimport torchtop_agent\n\
         torch.cuda._fake_init([0])\npath = torchtop_agent.start(interval_ms=100)\n\
         print(os.getpid(), path, flush=True)\nwhile True:\n    time.sleep(0.05)\n",
        agent.display().to_string()
    )
}

/// A Python agent as pid 1 of a PID namespace of its own, serving in `dir`; its pid inside and
/// its socket. `None` (having said why) where this machine does not let us unshare.
fn agent_in_own_pid_namespace(dir: &Path) -> Option<(Killed, u32, PathBuf)> {
    let mut command = Command::new("unshare");
    command
        .args(["--pid", "--fork", "--kill-child", "--mount-proc"])
        .args(["python3", "-c", &agent_script()])
        .env("TORCHTOP_AGENT_DIR", dir)
        .env("PYTHONPATH", fake_torch_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("unshare runs");
    let mut out: BufReader<ChildStdout> = BufReader::new(child.stdout.take().unwrap());
    let child = Killed(child);
    let line = first_line(&mut out);
    let Some((pid, path)) = line.split_once(' ') else {
        let mut child = child;
        let _ = child.0.wait();
        let stderr = std::io::read_to_string(child.0.stderr.take().unwrap()).unwrap_or_default();
        println!(
            "skipped: unshare --pid is not permitted here: {}",
            stderr.trim()
        );
        return None;
    };
    Some((child, pid.parse().unwrap(), PathBuf::from(path)))
}

/// The host pids of the processes whose environment names `dir` and that are pid 1 of a PID
/// namespace below ours.
fn host_pids_of_agents(dir: &Path, count: usize) -> Vec<u32> {
    let wanted = format!("TORCHTOP_AGENT_DIR={}", dir.display());
    let mut found = Vec::new();
    wait_until("the agents' processes", || {
        found = (std::fs::read_dir("/proc").unwrap())
            .filter_map(|entry| {
                let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
                let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
                let named = environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes());
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
                let inner: Vec<&str> = nspid.split_whitespace().collect();
                (named && inner.len() == 2 && inner[1] == "1").then_some(pid)
            })
            .collect();
        found.len() == count
    });
    found
}

fn gpu_with(pids: &[u32]) -> ScenarioFile {
    let mut text = "[[gpu]]\nname = \"Shared GPU\"\nmemory_total_mib = 81920\n".to_string();
    for pid in pids {
        text += &format!("[[gpu.process]]\npid = {pid}\nused_memory_mib = 2048\n");
    }
    ScenarioFile::new(&text)
}

/// `torchtop --once --json`, run by `command` (the binary, or a wrapper before it), reading the
/// agents in `dir`: its document.
fn once_json(mut command: Command, scenario: &ScenarioFile, dir: &Path) -> Value {
    crate::common::once_json_of(
        command
            .envs(scenario.env())
            .env("TORCHTOP_AGENT_DIR", dir)
            .env_remove("XDG_RUNTIME_DIR"),
    )
}

/// Whether `doc` shows the agent's figures on the row of `pid`.
fn has_agent(doc: &Value, pid: u32) -> bool {
    let rows = doc["processes"].as_array().unwrap();
    let row = rows.iter().find(|p| p["pid"] == pid);
    row.is_some_and(|r| r["torch"]["devices"][0]["allocated_bytes"].is_u64())
}

/// A directory of root's for agents to share, where this machine lets the test unshare PID
/// namespaces; `None` (having said why) where it does not. The first value keeps it.
fn shared_agent_dir() -> Option<(tempfile::TempDir, PathBuf)> {
    if !is_root() {
        println!("skipped: unshare --pid needs root");
        return None;
    }
    if !crate::ci::require_program("python3") || !crate::ci::require_program("unshare") {
        return None;
    }
    let base = open_base();
    let shared = dir_of(&base.path().join("agents"), 0, 0o700);
    Some((base, shared))
}

#[test]
fn two_agents_of_pid_1_in_two_pid_namespaces_both_show() {
    let Some((_base, shared)) = shared_agent_dir() else {
        return;
    };
    let Some((_first, first_pid, first_path)) = agent_in_own_pid_namespace(&shared) else {
        return;
    };
    let (_second, second_pid, second_path) =
        agent_in_own_pid_namespace(&shared).expect("unshare worked the first time");
    assert_eq!(
        (first_pid, second_pid),
        (1, 1),
        "each is pid 1 in its namespace"
    );
    assert_eq!(first_path, shared.join("1.sock"));
    let second_name = second_path.file_name().unwrap().to_str().unwrap();
    let inode = (second_name.strip_prefix("1."))
        .and_then(|rest| rest.strip_suffix(".sock"))
        .and_then(|inode| inode.parse::<u64>().ok());
    assert!(inode.is_some(), "{second_name}");
    assert!(
        first_path.exists(),
        "the second agent removed the first's socket"
    );
    let pids = host_pids_of_agents(&shared, 2);

    let scenario = gpu_with(&pids);
    let mut doc = Value::Null;
    wait_until("the monitor to show both agents' figures", || {
        doc = once_json(
            Command::new(crate::common::torchtop_binary()),
            &scenario,
            &shared,
        );
        pids.iter().all(|&pid| has_agent(&doc, pid))
    });
    assert!(first_path.exists() && second_path.exists(), "{doc}");
}

/// A monitor in a PID namespace of its own sees neither agent's process (SO_PEERCRED says pid
/// 0): a name with a namespace gives a pid of that namespace, not one NVML reports, and taken
/// as one it put the agent's figures on the monitor's own pid 1 (a review).
#[test]
fn a_monitor_in_its_own_pid_namespace_does_not_take_a_namespaced_name_for_its_pid() {
    let Some((_base, shared)) = shared_agent_dir() else {
        return;
    };
    // Something of ours listens on 1.sock (no agent: it never says hello), so the agent of
    // pid 1 in its namespace serves under 1.<inode>.sock.
    let _plain = std::os::unix::net::UnixListener::bind(shared.join("1.sock")).unwrap();
    let Some((_agent, pid, path)) = agent_in_own_pid_namespace(&shared) else {
        return;
    };
    assert_eq!(pid, 1);
    assert_ne!(path, shared.join("1.sock"), "{}", path.display());
    // Only the namespaced name is left to read.
    std::fs::remove_file(shared.join("1.sock")).unwrap();
    // NVML (the stand-in) reports pid 1, as it would for the monitor's own namespace's init.
    let scenario = gpu_with(&[1]);
    for _ in 0..3 {
        let mut unshare = Command::new("unshare");
        unshare
            .args(["--pid", "--fork", "--kill-child", "--mount-proc"])
            .arg(crate::common::torchtop_binary());
        let doc = once_json(unshare, &scenario, &shared);
        assert!(!has_agent(&doc, 1), "the agent's figures on pid 1: {doc}");
    }
    assert!(path.exists());
}
