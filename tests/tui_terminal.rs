//! The TUI in a pseudo-terminal: it starts without a driver, quits on q/Esc/Ctrl-C, and leaves
//! the terminal as it found it after a normal exit, SIGTERM, SIGHUP and a panic.

mod common;

use std::time::{Duration, Instant};

use common::pty::PtySession;

const NO_DRIVER: &str = "/nonexistent/libnvidia-ml.so.1";

/// Runs torchtop under `sh`, which prints the exit status and the tty modes after it ends.
fn spawn_wrapped(extra_env: &[(&str, &str)]) -> PtySession {
    let binary = common::torchtop_binary();
    let script = r#""$0" --nvml-lib "$1"; echo "EXIT=$?"; stty -a; sleep 5"#;
    PtySession::spawn(
        std::path::Path::new("/bin/sh"),
        &["-c", script, binary.to_str().unwrap(), NO_DRIVER],
        extra_env,
        100,
        30,
    )
}

/// The pid of torchtop itself: the only child of the wrapping shell.
fn torchtop_pid(session: &PtySession) -> u32 {
    let shell = session.pid().expect("shell pid");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            return pid.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "torchtop did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_restored(session: &PtySession, expected_exit: &str) {
    assert!(
        session.wait_for(Duration::from_secs(5), |s| s.contains("EXIT=")
            && s.contains("icanon")),
        "no exit report; screen:\n{}",
        session.screen()
    );
    let screen = session.screen();
    assert!(
        screen.contains(expected_exit),
        "wrong exit status:\n{screen}"
    );
    assert!(!screen.contains("-icanon"), "raw mode left on:\n{screen}");
    assert!(!screen.contains("-echo "), "echo left off:\n{screen}");
    assert!(
        !session.on_alternate_screen(),
        "alternate screen not left:\n{screen}"
    );
}

fn wait_for_first_frame(session: &PtySession) {
    assert!(
        session.wait_for(Duration::from_secs(10), |s| s
            .contains("NVML could not be loaded")),
        "the no-driver message never appeared:\n{}",
        session.screen()
    );
}

#[test]
fn starts_without_a_driver_and_quits_on_q() {
    let mut session = spawn_wrapped(&[]);
    wait_for_first_frame(&session);
    assert!(
        session.screen().contains(NO_DRIVER),
        "the library tried is named"
    );
    session.send(b"q");
    assert_restored(&session, "EXIT=0");
    let _ = session.wait_exit(Duration::from_millis(10));
}

#[test]
fn quits_on_escape_and_on_ctrl_c() {
    for key in [&b"\x1b"[..], &b"\x03"[..]] {
        let session = &mut spawn_wrapped(&[]);
        wait_for_first_frame(session);
        session.send(key);
        assert_restored(session, "EXIT=0");
    }
}

#[test]
fn restores_the_terminal_on_sigterm_and_sighup() {
    for signal in [libc::SIGTERM, libc::SIGHUP] {
        let session = spawn_wrapped(&[]);
        wait_for_first_frame(&session);
        let pid = torchtop_pid(&session);
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
        assert_restored(&session, "EXIT=0");
    }
}

#[test]
fn restores_the_terminal_after_a_panic() {
    let session = spawn_wrapped(&[("TORCHTOP_TEST_PANIC", "1")]);
    assert!(
        session.wait_for(Duration::from_secs(10), |s| s.contains("EXIT=")),
        "{}",
        session.screen()
    );
    assert_restored(&session, "EXIT=");
    assert!(
        !session.screen().contains("EXIT=0"),
        "a panic must not exit 0"
    );
}
