//! The TUI in a pseudo-terminal: it starts without a driver, quits on q/F10/Ctrl-C (never on
//! Esc), answers
//! each key at once whatever the refresh, leaves the terminal as it found it after a normal
//! exit, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and a panic, suspends on Ctrl-Z, ends when its
//! terminal goes away, and says what to do when there is no terminal at all, or one that cannot
//! draw a screen (TERM=dumb, or none).

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use common::{process_state, wait_until, PATIENCE};

const NO_DRIVER: &str = "/nonexistent/libnvidia-ml.so.1";

/// Runs torchtop under `sh`, which prints the exit status and the tty modes after it ends.
fn spawn_wrapped(extra_env: &[(&str, &str)]) -> PtySession {
    spawn_wrapped_with(&[], extra_env)
}

/// [`spawn_wrapped`] with more arguments for torchtop.
fn spawn_wrapped_with(args: &[&str], extra_env: &[(&str, &str)]) -> PtySession {
    let binary = common::torchtop_binary();
    // No core file from the SIGQUIT test. The shell then holds the terminal open until the
    // session is dropped (which kills it), so that the report is read whatever the load.
    let script = r#"ulimit -c 0; "$0" --nvml-lib "$@"; echo "EXIT=$?"; stty -a; exec sleep 600"#;
    let mut argv = vec!["-c", script, binary.to_str().unwrap(), NO_DRIVER];
    argv.extend_from_slice(args);
    PtySession::spawn(Path::new("/bin/sh"), &argv, extra_env, 100, 30)
}

/// The pid of torchtop itself: the only child of the wrapping shell.
fn torchtop_pid(session: &PtySession) -> u32 {
    only_child(session.pid().expect("shell pid"))
}

/// The pid of the only child of `parent`.
fn only_child(parent: u32) -> u32 {
    let children = || {
        std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default()
    };
    wait_until(&format!("a child of {parent}"), || {
        !children().trim().is_empty()
    });
    children()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Polls until `condition` holds for the state of `pid`; false after [`PATIENCE`], a deadline
/// only to avoid hanging.
fn wait_for_state(pid: u32, condition: impl Fn(Option<char>) -> bool) -> bool {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        if condition(process_state(pid)) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn gone(state: Option<char>) -> bool {
    matches!(state, None | Some('Z' | 'X'))
}

/// SIGKILLs a pid on drop, so that a failing test leaves no spinning process behind.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !gone(process_state(self.0)) {
            // SAFETY: kill only sends a signal.
            unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
        }
    }
}

fn send_signal(pid: u32, signal: i32) {
    // SAFETY: kill only sends a signal.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0, "kill {pid}");
}

fn assert_restored(session: &PtySession, expected_exit: &str) {
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("EXIT=") && s.contains("icanon")),
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
    assert!(
        !session.mouse_reporting(),
        "mouse reporting left on:\n{screen}"
    );
}

fn wait_for_first_frame(session: &PtySession) {
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("NVML could not be loaded")),
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

/// `--readonly` takes no value (it swallowed a subcommand); TORCHTOP_READONLY's says yes or no.
#[test]
fn readonly_variable_says_yes_or_no() {
    for (value, readonly) in [("yes", true), ("1", true), ("no", false), ("0", false)] {
        let mut session = spawn_wrapped(&[("TORCHTOP_READONLY", value)]);
        wait_for_first_frame(&session);
        // The status line's badge is drawn in the frame of the no-driver message.
        let screen = session.screen();
        assert_eq!(screen.contains("READ-ONLY"), readonly, "{value}:\n{screen}");
        session.send(b"q");
        assert_restored(&session, "EXIT=0");
        let _ = session.wait_exit(Duration::from_millis(10));
    }
}

/// F10 as xterm sends it.
const F10: &[u8] = b"\x1b[21~";

#[test]
fn quits_on_f10_and_on_ctrl_c() {
    for key in [F10, &b"\x03"[..]] {
        let session = &mut spawn_wrapped(&[]);
        wait_for_first_frame(session);
        session.send(key);
        assert_restored(session, "EXIT=0");
    }
}

#[test]
fn escape_never_quits() {
    let session = &mut spawn_wrapped(&[]);
    wait_for_first_frame(session);
    session.send(b"?");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("torchtop keys")),
        "the help did not open:\n{}",
        session.screen()
    );
    session.send(b"\x1b");
    assert!(
        session.wait_for(PATIENCE, |s| !s.contains("torchtop keys")),
        "Esc did not close the help:\n{}",
        session.screen()
    );
    // The Esc that quit before: now it says how to quit, and torchtop goes on.
    session.send(b"\x1b");
    assert!(
        session.wait_for(PATIENCE, |s| s
            .contains("nothing to close (q or F10 quits)")),
        "the second Esc was not answered:\n{}",
        session.screen()
    );
    assert!(!session.screen().contains("EXIT="), "{}", session.screen());
    session.send(F10);
    assert_restored(session, "EXIT=0");
}

#[test]
fn restores_the_terminal_on_sigterm_and_sighup() {
    for signal in [libc::SIGTERM, libc::SIGHUP] {
        let session = spawn_wrapped(&[]);
        wait_for_first_frame(&session);
        let pid = torchtop_pid(&session);
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
        assert_restored(&session, "EXIT=0");
    }
}

#[test]
fn restores_the_terminal_after_a_panic() {
    let session = spawn_wrapped(&[("TORCHTOP_TEST_PANIC", "1")]);
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("EXIT=")),
        "{}",
        session.screen()
    );
    assert_restored(&session, "EXIT=");
    assert!(
        !session.screen().contains("EXIT=0"),
        "a panic must not exit 0"
    );
}

/// The longest refresh torchtop takes (-d 86400): a key that waited for the next refresh would
/// wait a day, far past the test's deadline.
const A_DAY: &str = "86400";

#[test]
fn a_key_after_a_key_is_handled_without_waiting_for_the_refresh() {
    let mut session = spawn_wrapped_with(&["-d", A_DAY], &[]);
    wait_for_first_frame(&session);
    let pid = torchtop_pid(&session);
    // `t` shows on screen once it is handled, so `q` surely comes as a second wake-up.
    session.send(b"t");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("(tree,")),
        "t was not handled at -d {A_DAY}; screen:\n{}",
        session.screen()
    );
    session.send(b"q");
    assert!(
        wait_for_state(pid, gone),
        "q after t was not handled at -d {A_DAY}; screen:\n{}",
        session.screen()
    );
    assert_restored(&session, "EXIT=0");
}

/// The cores a thread of `pid` may run on, as the kernel lists them.
fn cores_allowed(pid: u32, tid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    Some(line.trim().to_string())
}

/// The thread of `pid` named `torchtop-sample`.
fn sampler_thread(pid: u32) -> u32 {
    let named = |tid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
            .is_ok_and(|name| name.trim() == "torchtop-sample")
    };
    let tasks = || -> Vec<u32> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|dir| {
                dir.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    wait_until("the sampler thread", || tasks().iter().any(named));
    tasks().into_iter().find(|t| named(t)).expect("found above")
}

/// A core list as the kernel writes it ("0-3,6") has one core when it has no ',' or '-'.
fn one_core(list: &str) -> bool {
    !list.is_empty() && !list.contains([',', '-'])
}

#[test]
fn the_ui_thread_follows_the_sampler_core_and_a_key_frees_it() {
    // The sampler narrows the UI thread to its own core before waking it with a snapshot; the
    // input thread must free it before each key, or a key would wait on a core that may be busy.
    let mut session = spawn_wrapped_with(&["-d", A_DAY], &[]);
    wait_for_first_frame(&session);
    let pid = torchtop_pid(&session);
    let _kill = KillOnDrop(pid);
    // The sampler thread is never narrowed: its cores are all the UI thread's.
    let all = cores_allowed(pid, sampler_thread(pid)).expect("the sampler thread's cores");
    let ui = || cores_allowed(pid, pid).unwrap_or_default();
    if !one_core(&all) {
        wait_until(
            "the UI thread narrowed to one core by the first snapshot",
            || one_core(&ui()),
        );
    }
    session.send(b"?");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("torchtop keys")),
        "the help did not open:\n{}",
        session.screen()
    );
    // No snapshot comes for a day to narrow it again.
    wait_until("the UI thread on all its cores after a key", || ui() == all);
}

#[test]
fn closing_the_terminal_ends_the_monitor_between_refreshes() {
    let sleepers = Sleepers::spawn(4);
    let scenario = ScenarioFile::from_fixture("eight_gpus.toml", &sleepers.pids());
    let env = scenario.env();
    let binary = common::torchtop_binary();
    // Without a controlling terminal (setsid), no SIGHUP comes when the terminal goes away:
    // only the terminal itself tells (POLLHUP, EOF, EIO), as for a process that lost its SSH
    // session. At -d 86400 the next frame, whose write would fail, is a day away.
    let mut session = PtySession::spawn(
        Path::new("/usr/bin/setsid"),
        &["-w", binary.to_str().unwrap(), "-d", A_DAY],
        &env_refs(&env),
        120,
        40,
    );
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("H100")),
        "no GPUs drawn:\n{}",
        session.screen()
    );
    let pid = only_child(session.pid().expect("setsid's pid"));
    let _cleanup = KillOnDrop(pid);
    session.close_terminal();
    assert!(
        wait_for_state(pid, gone),
        "torchtop (pid {pid}) still runs after its terminal closed, state {:?}",
        process_state(pid)
    );
}

#[test]
fn closing_the_terminal_of_a_session_leader_ends_it() {
    let mut session = PtySession::spawn(
        &common::torchtop_binary(),
        &["--nvml-lib", NO_DRIVER, "-d", A_DAY],
        &[],
        100,
        30,
    );
    wait_for_first_frame(&session);
    let pid = session.pid().unwrap();
    session.close_terminal();
    let status = session.wait_exit(PATIENCE);
    let Some(status) = status else {
        panic!(
            "torchtop still runs after its terminal closed, state {:?}",
            process_state(pid)
        );
    };
    // Its stderr is the terminal that hung up: ratatui's message that it could not show the
    // cursor again was printed with `eprintln!`, which panicked (exit 101).
    assert!(
        status.success(),
        "torchtop ended with {status:?} after its terminal closed"
    );
}

#[test]
fn sigterm_ends_a_stuck_loop_and_restores_the_terminal() {
    // The debug build's fault hook blocks the loop for good after the first frame.
    let session = spawn_wrapped(&[("TORCHTOP_TEST_STALL", "1")]);
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("PID USER")),
        "no first frame:\n{}",
        session.screen()
    );
    let pid = torchtop_pid(&session);
    let _cleanup = KillOnDrop(pid);
    send_signal(pid, libc::SIGTERM);
    assert!(wait_for_state(pid, gone), "a stuck loop ignored SIGTERM");
    assert_restored(&session, &format!("EXIT={}", 128 + libc::SIGTERM));
}

#[test]
fn fatal_signals_restore_the_terminal_then_kill_with_that_signal() {
    for signal in [libc::SIGQUIT, libc::SIGUSR1] {
        let session = spawn_wrapped(&[]);
        wait_for_first_frame(&session);
        let pid = torchtop_pid(&session);
        let _cleanup = KillOnDrop(pid);
        send_signal(pid, signal);
        assert_restored(&session, &format!("EXIT={}", 128 + signal));
    }
}

/// An interactive bash with job control, in which torchtop runs as a foreground job.
fn job_control_shell() -> PtySession {
    PtySession::spawn(
        Path::new("/bin/bash"),
        &["--norc", "--noprofile", "-i"],
        &[("PS1", "$ "), ("HISTFILE", "/dev/null")],
        100,
        30,
    )
}

#[test]
fn ctrl_z_and_sigtstp_suspend_and_fg_redraws() {
    let mut session = job_control_shell();
    assert!(session.wait_for(PATIENCE, |s| s.contains("$ ")));
    let binary = common::torchtop_binary();
    session.send(format!("{} --nvml-lib {NO_DRIVER}\r", binary.display()).as_bytes());
    wait_for_first_frame(&session);
    let pid = only_child(session.pid().unwrap());
    let _cleanup = KillOnDrop(pid);
    for how in ["Ctrl-Z", "SIGTSTP"] {
        if how == "Ctrl-Z" {
            session.send(b"\x1a");
        } else {
            send_signal(pid, libc::SIGTSTP);
        }
        assert!(
            wait_for_state(pid, |s| s == Some('T')),
            "{how}: not stopped, state {:?}",
            process_state(pid)
        );
        assert!(
            session.wait_for(PATIENCE, |s| s.contains("Stopped")),
            "{how}: the shell did not get the terminal back:\n{}",
            session.screen()
        );
        assert!(
            !session.on_alternate_screen(),
            "{how}: alternate screen kept"
        );
        assert!(!session.mouse_reporting(), "{how}: mouse reporting kept");
        session.send(b"clear; fg\r");
        assert!(
            wait_for_state(pid, |s| s != Some('T')),
            "{how}: fg did not continue it"
        );
        wait_for_first_frame(&session);
        assert!(session.on_alternate_screen(), "{how}: not redrawn after fg");
    }
    session.send(b"q");
    assert!(
        wait_for_state(pid, gone),
        "raw-mode keys do not work after fg"
    );
}

#[test]
fn without_a_terminal_it_says_to_use_once_or_json() {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(common::torchtop_binary());
    command
        .args(["--nvml-lib", NO_DRIVER])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe; it leaves the child without a controlling terminal.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let output = command.output().expect("run torchtop");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("needs a terminal"), "{stderr}");
    assert!(
        stderr.contains("--once") && stderr.contains("--json"),
        "{stderr}"
    );
    assert!(!stderr.contains("os error"), "{stderr}");
}

/// A review: `TERM=dumb` (Emacs' shell, some CI runners) got the alternate screen, mouse
/// reporting and 256 colours. With it, or with no TERM, the monitor and a replay refuse as
/// without a terminal: a sentence, exit status 1, no escape code written.
#[test]
fn a_dumb_terminal_or_none_named_gets_a_sentence_not_the_screen() {
    let binary = common::torchtop_binary();
    let cases: [(&str, &[&str], &str); 4] = [
        ("export TERM=dumb", &["--nvml-lib", NO_DRIVER], "TERM=dumb"),
        ("unset TERM", &["--nvml-lib", NO_DRIVER], "TERM is not set"),
        ("export TERM=dumb", &["replay", "--demo"], "--summary"),
        // `cluster` has no `--json` stream: its sentence names what it has.
        (
            "export TERM=dumb",
            &["cluster", "--prometheus", "http://127.0.0.1:9"],
            "--once --json",
        ),
    ];
    for (term, args, sentence) in cases {
        // The shell prints the exit status, then holds the terminal open for the reading.
        let script = format!(r#"{term}; "$0" "$@"; echo "EXIT=$?"; exec sleep 600"#);
        let mut argv = vec!["-c", script.as_str(), binary.to_str().unwrap()];
        argv.extend_from_slice(args);
        let session = PtySession::spawn(Path::new("/bin/sh"), &argv, &[], 100, 30);
        assert!(
            session.wait_for(PATIENCE, |s| s.contains("EXIT=")),
            "{term} {args:?}: it did not end:\n{}",
            session.screen()
        );
        let screen = session.screen();
        assert!(screen.contains("EXIT=1"), "{term} {args:?}:\n{screen}");
        assert!(screen.contains(sentence), "{term} {args:?}:\n{screen}");
        assert!(screen.contains("--json"), "{term} {args:?}:\n{screen}");
        assert!(!session.on_alternate_screen() && !session.mouse_reporting());
    }
    // `torchtop snapshot FILE` has its text summary to give instead of the viewer.
    let pickle = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/memsnap/oom.pickle");
    let script = r#"export TERM=dumb; "$0" "$@"; echo "EXIT=$?"; exec sleep 600"#;
    let argv = [
        "-c",
        script,
        binary.to_str().unwrap(),
        "snapshot",
        pickle.to_str().unwrap(),
    ];
    let session = PtySession::spawn(Path::new("/bin/sh"), &argv, &[], 100, 30);
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("EXIT=")),
        "snapshot: it did not end:\n{}",
        session.screen()
    );
    let screen = session.screen();
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains("who holds the memory"), "{screen}");
    assert!(!session.on_alternate_screen() && !session.mouse_reporting());
}

/// A command line with terminal escapes and a newline that forges a row.
const HOSTILE_ARGV0: &str = "evil\x1b]0;pwned\x07\x1b[2J\n      1 root  FORGED";

#[test]
fn command_lines_are_drawn_escaped() {
    let sleepers = Sleepers::named(&[HOSTILE_ARGV0]);
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &sleepers.pids());
    let env = scenario.env();
    let session = PtySession::spawn(&common::torchtop_binary(), &[], &env_refs(&env), 200, 40);
    assert!(
        session.wait_for(PATIENCE, |s| s.contains(r"evil\e]0;pwned\x07\e[2J\n")),
        "the command is not shown escaped:\n{}",
        session.screen()
    );
}
