//! Shared helpers for the integration tests.
// Shared by several test binaries, each of which uses a part: `pub` is their interface.
#![allow(dead_code, unreachable_pub)]

pub mod amd_fixture;
pub mod ci;
pub mod fake_amdsmi;
pub mod fake_nvml;
pub mod forked_agent;
pub mod prometheus;
pub mod pty;
pub mod synthetic;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use serde_json::Value;

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use ci::{
    assert_no_fatal_signal_on_its_way, in_ci, output_within_patience, process_state,
    require_program, skip_or_fail, wait_until, PATIENCE,
};

/// The torchtop binary that cargo built for these tests.
pub fn torchtop_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_torchtop"))
}

/// A job id as torchtop writes it for processes the tests start: an id from the environment
/// names their user, the one running the tests (`job 127.0.0.1:29500 (root)` in CI).
pub fn job_of_mine(id: &str) -> String {
    let uid = nix::unistd::geteuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name);
    format!("{id} ({user})")
}

/// The row of `pid` in a `--once --json` document (its first, for a process on several GPUs);
/// the panic shows the whole document.
pub fn process_row(doc: &Value, pid: u32) -> &Value {
    doc["processes"]
        .as_array()
        .and_then(|rows| rows.iter().find(|p| p["pid"] == pid))
        .unwrap_or_else(|| panic!("pid {pid} not in {doc:#}"))
}

/// `torchtop --once --json` over the fixture tree `fs_root` (`TORCHTOP_FS_ROOT`), with the
/// fake NVML playing `scenario`; it must succeed, and the panic shows its stderr.
pub fn once_json_in(fs_root: &Path, scenario: &fake_nvml::ScenarioFile) -> Value {
    once_json_of(
        Command::new(torchtop_binary())
            .envs(scenario.env())
            .env("TORCHTOP_FS_ROOT", fs_root),
    )
}

/// `command` (torchtop, or a wrapper with torchtop last) with `--once --json` added: its one
/// document. It must succeed, and the panic shows its stderr.
pub fn once_json_of(command: &mut Command) -> Value {
    let output = output_within_patience(command.args(["--once", "--json"]));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

/// Runs `torchtop`, a command that streams one JSON document a line (`--json` without
/// `--once`), and reads its documents until `enough` holds on all read so far; then ends it.
/// A test that waits for a warning reads until it comes, however slowly the samples come on a
/// loaded machine. Fails if that takes more than [`PATIENCE`].
pub fn json_stream_until(torchtop: &mut Command, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut child = torchtop
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run torchtop --json");
    let (lines_tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + PATIENCE;
    let mut docs: Vec<Value> = Vec::new();
    while !enough(&docs) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = lines.recv_timeout(left) else {
            let _ = child.kill();
            let _ = child.wait();
            let last = docs.last().map(Value::to_string).unwrap_or_default();
            panic!(
                "the stream ended or stalled after {} documents; the last:\n{last}",
                docs.len()
            );
        };
        docs.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")));
    }
    let _ = child.kill();
    let _ = child.wait();
    docs
}
