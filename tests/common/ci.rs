//! What the tests promise a CI machine: they never skip there, and they never time anything.
//! Locally a missing program (python3, gdb, prometheus, promtool, curl, openssl...) skips the
//! test with a printed line; under CI (`CI` set, as `.ci/run` exports it) it fails the test, so
//! that CI never passes a test it did not run. And a test polls for what it waits on (never
//! sleeps on it), against one generous deadline that only keeps a broken test from hanging.
//!
//! Used by the integration tests (through `tests/common`, or alone through `#[path]` in the
//! binaries that need nothing else) and by the library's unit tests (through `#[path]` in
//! src/lib.rs), so it needs nothing but std and libc.
// Shared by several test binaries, each of which uses a part: `pub` is their interface.
#![allow(dead_code, unreachable_pub)]

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a test polls for something that should happen at once, before it gives up. Only a
/// guard against hanging: nothing a test asserts depends on it, so it can be generous enough for
/// a loaded CI machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Whether this is a CI run: `CI` is set and not empty.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// Stands a test down because this machine lacks something: prints `skipped: <why>`, or fails
/// the test under CI. The caller returns after it.
#[track_caller]
pub fn skip_or_fail(why: &str) {
    assert!(!in_ci(), "CI is set, so this test may not skip: {why}");
    println!("skipped: {why}");
}

/// Whether `program` can be started here (`program --version`). When it cannot, the test stands
/// down through [`skip_or_fail`] (a failure under CI) and the caller returns:
/// `if !require_program("gdb") { return; }`.
#[track_caller]
pub fn require_program(program: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        skip_or_fail(&format!(
            "{program} is not installed (.ci/run installs what the tests need)"
        ));
    }
    found
}

/// Polls `condition` until it holds; fails the test, naming `what`, after [`PATIENCE`].
#[track_caller]
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "waited {} s for {what}",
            PATIENCE.as_secs()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `command` to its end with stdin closed, stdout and stderr captured, as
/// `Command::output` does; kills it and fails the test if it is still running after
/// [`PATIENCE`]. A test that asserts "it finishes although a driver call hangs for an hour" is
/// an ordering, not a speed: the hang is far longer than the deadline.
#[track_caller]
pub fn output_within_patience(command: &mut Command) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{command:?} was still running after {} s; killed",
                PATIENCE.as_secs()
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().expect("the stdout reader"),
        stderr: stderr.join().expect("the stderr reader"),
    }
}

/// The state letter of /proc/PID/stat (R, S, T, Z...); `None` once the pid is gone.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Fails unless the process `pid` (a child of this test, not yet reaped) lives and has no
/// fatal signal on its way. Checking that it still runs right after a refused signal proves
/// nothing: a signal that was sent kills it a moment later. So this stops it and waits until
/// /proc shows it stopped: the kernel drops a stop for a process that a fatal signal was sent
/// to, and that process turns into a zombie instead. Then it continues it.
#[track_caller]
pub fn assert_no_fatal_signal_on_its_way(pid: u32) {
    send(pid, libc::SIGSTOP);
    let deadline = Instant::now() + PATIENCE;
    loop {
        match process_state(pid) {
            Some('T') => break,
            Some('Z' | 'X') | None => {
                panic!("process {pid} died: a fatal signal had been sent to it")
            }
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} never stopped on SIGSTOP: state {:?}",
            process_state(pid)
        );
        thread::sleep(Duration::from_millis(5));
    }
    send(pid, libc::SIGCONT);
}

fn send(pid: u32, signal: libc::c_int) {
    // SAFETY: kill only sends a signal; the pid is a child this test has not reaped.
    let sent = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(sent, 0, "kill({pid}, {signal}) failed");
}

/// A new directory `theirs` in `parent`, owned by uid 65534 (nobody), for the tests of what root
/// refuses to write into another user's directory; `None` once [`skip_or_fail`] has stood the
/// test down, when it does not run as root.
#[track_caller]
pub fn directory_of_nobody(parent: &std::path::Path) -> Option<std::path::PathBuf> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        skip_or_fail("this test needs root, to hand a directory to uid 65534");
        return None;
    }
    let theirs = parent.join("theirs");
    std::fs::create_dir(&theirs).expect("a new directory in the test's scratch directory");
    std::os::unix::fs::chown(&theirs, Some(65534), None).expect("root hands it to uid 65534");
    Some(theirs)
}
