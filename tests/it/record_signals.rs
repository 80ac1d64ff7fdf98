//! `torchtop record` and the signals an admin's shell and service manager send: run under
//! `nohup` it outlives the login (its SIGHUP stays ignored), and a SIGTERM after its stderr
//! pipe has closed still stops it cleanly, exit status 0; a summary written into a closed pipe
//! ends quietly.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};

use crate::common;
use common::fake_nvml::ScenarioFile;
use common::PATIENCE;

fn one_gpu() -> ScenarioFile {
    ScenarioFile::new("[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nmemory_used_mib = 100\n")
}

/// The JSON lines of `stdout`, read on a thread so that a stalled recorder fails the test.
fn lines_of(stdout: ChildStdout) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// `command` (torchtop, or a program that runs it) with `record` into `file` every 0.2 s,
/// and its JSON lines.
fn record(mut command: Command, scenario: &ScenarioFile, file: &Path) -> (Child, Receiver<String>) {
    let mut child = command
        .args([
            "record",
            "-o",
            file.to_str().unwrap(),
            "-d",
            "0.2",
            "--json",
        ])
        .envs(scenario.env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    (child, lines)
}

fn take_lines(lines: &Receiver<String>, child: &mut Child, n: usize, what: &str) {
    for i in 0..n {
        if lines.recv_timeout(PATIENCE).is_err() {
            let _ = child.kill();
            panic!("{what}: torchtop record stopped after {i} of {n} lines");
        }
    }
}

/// How `child` ended, and what it said on stderr.
fn ended(mut child: Child) -> (std::process::ExitStatus, String) {
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).unwrap();
    }
    (child.wait().unwrap(), stderr)
}

fn signal(child: &Child, signal: i32) {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) with a pid this test spawned and has not waited for.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// The cluster-admin review: `nohup torchtop record &` stopped at logout ("stopped by signal
/// 1"): torchtop had turned the SIGHUP that nohup ignores back on.
#[test]
fn record_under_nohup_outlives_the_hangup() {
    let scenario = one_gpu();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nohup.ttrec");
    let mut nohup = Command::new("nohup");
    nohup.arg(common::torchtop_binary());
    let (mut child, lines) = record(nohup, &scenario, &file);
    take_lines(&lines, &mut child, 2, "before SIGHUP");
    signal(&child, libc::SIGHUP);
    take_lines(&lines, &mut child, 3, "after SIGHUP");
    signal(&child, libc::SIGTERM);
    let (status, stderr) = ended(child);
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("stopped by signal 15"), "{stderr}");
}

/// The cluster-admin review: SIGTERM after the reader of stderr had gone (`2>&1 | logger`,
/// logger restarted) made the closing line's `eprintln!` panic, exit status 101.
#[test]
fn record_stops_cleanly_when_its_stderr_has_closed() {
    let scenario = one_gpu();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("closed.ttrec");
    let command = Command::new(common::torchtop_binary());
    let (mut child, lines) = record(command, &scenario, &file);
    take_lines(&lines, &mut child, 2, "before closing stderr");
    drop(child.stderr.take());
    signal(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
}

/// The diff review: `torchtop replay --demo --summary | true` panicked writing to the closed
/// pipe ("failed printing to stdout: Broken pipe"), exit status 101; a reader that has gone
/// wants nothing more, and the command ends quietly.
#[test]
fn a_summary_into_a_closed_pipe_ends_quietly() {
    for args in [
        &["replay", "--demo", "--summary"][..],
        &["--print-config"][..],
    ] {
        let mut child = Command::new(common::torchtop_binary())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let (status, stderr) = ended(child);
        assert_eq!(status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
