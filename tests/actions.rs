//! Signals and renice against real child processes: delivery, identity refusals, and the
//! error sentences an unprivileged user gets.
//!
//! Some tests need a child that is this very test binary: `helper_*` tests are ignored in
//! normal runs and do their work only when started by a test with `TORCHTOP_TEST_ROLE` set.

#[path = "common/ci.rs"]
mod ci;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ci::{assert_no_fatal_signal_on_its_way, PATIENCE};
use torchtop::actions::{
    adjust_nice, current_identity, renice, send_signal, ActionError, ProcessIdentity, Signal,
};

const ROLE: &str = "TORCHTOP_TEST_ROLE";
const TARGET_PID: &str = "TORCHTOP_TEST_TARGET_PID";
const TARGET_START: &str = "TORCHTOP_TEST_TARGET_START";
const TARGET_SIGNAL: &str = "TORCHTOP_TEST_TARGET_SIGNAL";
const RENICE_TARGET: &str = "TORCHTOP_TEST_RENICE_TARGET";
const READY: &str = "TORCHTOP-HELPER-READY";
const RESULT: &str = "TORCHTOP-RESULT ";
/// The uid and gid of `nobody`.
const NOBODY: u32 = 65534;

/// A child that is killed and reaped when the test ends, whatever happens.
struct Reaped(Child);

impl Reaped {
    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn is_running(&mut self) -> bool {
        self.0.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `sleep 60` with the default action for every signal the tests send, whatever the test
/// runner was started under: `nohup` ignores SIGHUP and a shell's background job SIGINT, and an
/// ignored disposition survives exec, so the child would outlive the signal a test sends it.
fn spawn_sleep() -> Reaped {
    let mut cmd = Command::new("sleep");
    cmd.arg("60");
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls.
    unsafe {
        cmd.pre_exec(|| {
            for signal in [
                libc::SIGHUP,
                libc::SIGINT,
                libc::SIGUSR1,
                libc::SIGUSR2,
                libc::SIGTERM,
            ] {
                if libc::signal(signal, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Reaped(cmd.spawn().expect("spawn sleep"))
}

fn proc_root() -> &'static Path {
    Path::new("/proc")
}

fn identity(pid: u32) -> ProcessIdentity {
    current_identity(proc_root(), pid).expect("identity of a live child")
}

/// Field `n` (1-based, as in proc(5)) of a stat file, parsed here independently of the crate.
fn stat_field(path: &Path, n: usize) -> String {
    let line = std::fs::read_to_string(path).expect("read stat");
    let after_comm = &line[line.rfind(')').expect("comm") + 1..];
    after_comm
        .split_whitespace()
        .nth(n - 3)
        .expect("field")
        .to_string()
}

fn state_of(pid: u32) -> char {
    let path = PathBuf::from(format!("/proc/{pid}/stat"));
    stat_field(&path, 3).chars().next().expect("state")
}

/// The nice value of every thread of `pid`, read from /proc/PID/task/TID/stat.
fn thread_nices(pid: u32) -> Vec<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("task dir");
    tasks
        .map(|t| {
            let stat = t.expect("task entry").path().join("stat");
            stat_field(&stat, 19).parse().expect("nice")
        })
        .collect()
}

/// Polls until the state of `pid` is `wanted`; returns the last state seen, after [`PATIENCE`]
/// at the most.
fn wait_for_state(pid: u32, wanted: impl Fn(char) -> bool) -> char {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let state = state_of(pid);
        if wanted(state) || Instant::now() > deadline {
            return state;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

// ---------------------------------------------------------------------------------------
// Delivery

fn assert_reaped_by(signal: Signal) {
    let mut child = spawn_sleep();
    let id = identity(child.pid());
    send_signal(&id, signal).unwrap_or_else(|e| panic!("{signal}: {e}"));
    let status = child.0.wait().expect("wait");
    assert_eq!(status.signal(), Some(signal.number()), "{signal}");
}

#[test]
fn sigterm_is_delivered_and_the_child_dies_of_it() {
    assert_reaped_by(Signal::Term);
}

#[test]
fn sigkill_is_delivered_and_the_child_dies_of_it() {
    assert_reaped_by(Signal::Kill);
}

#[test]
fn int_hup_usr1_usr2_each_arrive_as_themselves() {
    for signal in [Signal::Int, Signal::Hup, Signal::Usr1, Signal::Usr2] {
        assert_reaped_by(signal);
    }
}

#[test]
fn stop_and_cont_show_in_the_proc_state() {
    let mut child = spawn_sleep();
    let id = identity(child.pid());
    send_signal(&id, Signal::Stop).unwrap();
    assert_eq!(wait_for_state(id.pid, |s| s == 'T'), 'T');
    send_signal(&id, Signal::Cont).unwrap();
    let resumed = wait_for_state(id.pid, |s| s != 'T');
    assert!(matches!(resumed, 'S' | 'R'), "state after CONT: {resumed}");
    assert!(child.is_running());
}

// ---------------------------------------------------------------------------------------
// Identity refusals

#[test]
fn a_reused_pid_is_refused_and_the_process_is_left_alone() {
    let mut child = spawn_sleep();
    let real = identity(child.pid());
    let nices_before = thread_nices(real.pid);
    let seen_earlier = ProcessIdentity::new(real.pid, real.start_ticks.wrapping_sub(1));

    let refused = send_signal(&seen_earlier, Signal::Kill).unwrap_err();
    assert_eq!(refused, ActionError::Reused { pid: real.pid });
    assert_eq!(
        refused.to_string(),
        format!(
            "process {} has exited; its pid now belongs to another program",
            real.pid
        )
    );
    assert_eq!(
        renice(&seen_earlier, 12),
        Err(ActionError::Reused { pid: real.pid })
    );

    assert!(child.is_running());
    assert_no_fatal_signal_on_its_way(real.pid);
    assert_eq!(thread_nices(real.pid), nices_before);
}

#[test]
fn a_vanished_pid_has_exited() {
    let mut child = spawn_sleep();
    let id = identity(child.pid());
    child.0.kill().unwrap();
    child.0.wait().unwrap();

    let error = send_signal(&id, Signal::Term).unwrap_err();
    assert_eq!(error, ActionError::Exited { pid: id.pid });
    assert_eq!(error.to_string(), format!("process {} has exited", id.pid));
    assert_eq!(renice(&id, 5), Err(ActionError::Exited { pid: id.pid }));
}

#[test]
fn a_zombie_waiting_to_be_reaped_has_exited() {
    let mut child = spawn_sleep();
    let id = identity(child.pid());
    child.0.kill().unwrap();
    assert_eq!(wait_for_state(id.pid, |s| s == 'Z'), 'Z');
    assert_eq!(
        send_signal(&id, Signal::Term),
        Err(ActionError::Exited { pid: id.pid })
    );
}

// ---------------------------------------------------------------------------------------
// Renice

/// Starts this binary as a process with several threads and waits until they exist.
fn spawn_threaded_helper() -> Reaped {
    let mut cmd = helper_command("helper_many_threads", "threads");
    cmd.stdout(Stdio::piped());
    let mut child = Reaped(cmd.spawn().expect("spawn threaded helper"));
    let stdout = child.0.stdout.take().expect("stdout");
    let ready = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains(READY));
    assert!(ready, "threaded helper did not start");
    child
}

#[test]
fn renice_sets_every_thread_and_reads_back_from_proc() {
    let helper = spawn_threaded_helper();
    let id = identity(helper.pid());
    assert!(
        thread_nices(id.pid).len() >= 4,
        "helper has too few threads"
    );

    assert_eq!(renice(&id, 7), Ok(7));
    assert_eq!(thread_nices(id.pid), vec![7; thread_nices(id.pid).len()]);

    assert_eq!(adjust_nice(&id, 1), Ok(8));
    assert!(thread_nices(id.pid).iter().all(|&n| n == 8));

    if is_root() {
        assert_eq!(renice(&id, -3), Ok(-3));
        assert!(thread_nices(id.pid).iter().all(|&n| n == -3));
    }
}

#[test]
fn an_out_of_range_nice_value_changes_nothing() {
    let child = spawn_sleep();
    let id = identity(child.pid());
    let nices_before = thread_nices(id.pid);
    let error = renice(&id, 20).unwrap_err();
    assert_eq!(
        error.to_string(),
        "nice value 20 is out of range: it must be from -20 to 19"
    );
    // Relative to the child's nice, which it inherits from the test run (`nice cargo test`
    // makes it 10): -40 is out of range from any starting point.
    assert!(
        matches!(
            adjust_nice(&id, -40),
            Err(ActionError::InvalidNice { value }) if value < -20
        ),
        "{:?}",
        adjust_nice(&id, -40)
    );
    assert_eq!(thread_nices(id.pid), nices_before);
}

// ---------------------------------------------------------------------------------------
// Permission errors, seen by an unprivileged user

#[test]
fn an_unprivileged_user_gets_permission_sentences() {
    let mut target = spawn_sleep();
    let target_id = identity(target.pid());
    let target_nices = thread_nices(target_id.pid);

    // As root the helper drops to `nobody` and acts on our child; already unprivileged, it
    // acts on some other user's process with CONT, harmless if it were ever delivered.
    let (signal_target, signal) = if is_root() {
        (Some(target_id), "TERM")
    } else {
        (process_of_another_user(), "CONT")
    };
    let mut cmd = helper_command("helper_unprivileged", "unprivileged");
    if let Some(other) = signal_target {
        cmd.env(TARGET_PID, other.pid.to_string())
            .env(TARGET_START, other.start_ticks.to_string())
            .env(TARGET_SIGNAL, signal);
    }
    if is_root() {
        cmd.env(RENICE_TARGET, "1");
        drop_privileges(&mut cmd);
    }

    let (helper_pid, results) = run_helper(cmd);
    let result = |key: &str| {
        results
            .iter()
            .find_map(|(k, v)| (k == key).then(|| v.clone()))
            .unwrap_or_else(|| panic!("helper reported no {key}: {results:?}"))
    };

    assert_ne!(result("uid"), "0", "the helper kept root");
    if let Some(ProcessIdentity { pid, .. }) = signal_target {
        assert_eq!(
            result("signal"),
            format!("not permitted to signal process {pid}: it belongs to another user")
        );
    }
    if is_root() {
        assert_eq!(
            result("renice-other"),
            format!(
                "not permitted to change the priority of process {}: \
                 it belongs to another user",
                target_id.pid
            )
        );
        assert!(target.is_running(), "the refused SIGTERM was delivered");
        assert_no_fatal_signal_on_its_way(target_id.pid);
        assert_eq!(thread_nices(target_id.pid), target_nices);
    }
    assert_eq!(
        result("raise-own"),
        format!(
            "not permitted to raise the priority of process {helper_pid}: \
             that needs root or CAP_SYS_NICE"
        )
    );
    assert_eq!(result("lower-own"), "ok 19");
}

/// In the forked child, before exec: no supplementary groups, no nice headroom, then `nobody`.
fn drop_privileges(cmd: &mut Command) {
    let no_headroom = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls.
    unsafe {
        cmd.pre_exec(move || {
            let failed = libc::setrlimit(libc::RLIMIT_NICE, &raw const no_headroom) != 0
                || libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0;
            if failed {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        });
    }
}

/// Runs the helper to completion; returns its pid and its `key value` result lines.
fn run_helper(mut cmd: Command) -> (u32, Vec<(String, String)>) {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    // `_copy_dir` holds a copy of this binary, if one was needed, until the helper is done.
    let (child, _copy_dir) = match cmd.spawn() {
        Ok(child) => (child, None),
        // The unprivileged user may not reach the build directory: run a copy from /tmp.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let copy_dir = world_readable_copy_of_this_binary();
            let copy = copy_dir.path().join("helper");
            let mut moved = Command::new(&copy);
            moved.args(cmd.get_args());
            for (key, value) in cmd.get_envs() {
                if let Some(value) = value {
                    moved.env(key, value);
                }
            }
            if is_root() {
                drop_privileges(&mut moved);
            }
            moved.stdout(Stdio::piped()).stderr(Stdio::piped());
            let child = moved.spawn().expect("spawn the helper copy");
            (child, Some(copy_dir))
        }
        Err(e) => panic!("could not start the unprivileged helper: {e}"),
    };
    let pid = child.id();
    let output = child.wait_with_output().expect("helper output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "helper failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results = stdout
        .lines()
        .filter_map(|line| {
            let rest = &line[line.find(RESULT)? + RESULT.len()..];
            let (key, value) = rest.split_once(' ')?;
            Some((key.to_string(), value.to_string()))
        })
        .collect();
    (pid, results)
}

/// A directory every user may enter, holding a copy of this binary named `helper`.
fn world_readable_copy_of_this_binary() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("torchtop-actions-helper-")
        .tempdir()
        .expect("a scratch directory");
    let open = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(dir.path(), open.clone()).expect("chmod the directory");
    let copy = dir.path().join("helper");
    std::fs::copy(std::env::current_exe().expect("current_exe"), &copy).expect("copy helper");
    std::fs::set_permissions(&copy, open).expect("chmod");
    dir
}

/// Some process owned by another uid, for a non-root run.
fn process_of_another_user() -> Option<ProcessIdentity> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() != me))
        .find_map(|pid| current_identity(proc_root(), pid).ok())
}

fn helper_command(test_name: &str, role: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args([
        test_name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role);
    cmd
}

fn role_is(role: &str) -> bool {
    std::env::var(ROLE).is_ok_and(|r| r == role)
}

fn report(key: &str, value: impl std::fmt::Display) {
    println!("{RESULT}{key} {value}");
    let _ = std::io::stdout().flush();
}

fn outcome<T: std::fmt::Display>(result: Result<T, ActionError>) -> String {
    match result {
        Ok(value) => format!("ok {value}"),
        Err(error) => error.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Helper roles, run only as children of the tests above.

#[test]
#[ignore = "run by renice_sets_every_thread_and_reads_back_from_proc as its child"]
fn helper_many_threads() {
    if !role_is("threads") {
        return;
    }
    for _ in 0..3 {
        std::thread::spawn(|| std::thread::sleep(Duration::from_secs(600)));
    }
    // Wait until the threads are listed before saying so.
    let deadline = Instant::now() + PATIENCE;
    while thread_nices(std::process::id()).len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("{READY}");
    let _ = std::io::stdout().flush();
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
#[ignore = "run by an_unprivileged_user_gets_permission_sentences as its child"]
fn helper_unprivileged() {
    if !role_is("unprivileged") {
        return;
    }
    // SAFETY: getuid cannot fail.
    report("uid", unsafe { libc::getuid() });
    let target = std::env::var(TARGET_PID)
        .ok()
        .zip(std::env::var(TARGET_START).ok())
        .and_then(|(pid, start)| {
            Some(ProcessIdentity::new(pid.parse().ok()?, start.parse().ok()?))
        });
    if let Some(target) = target {
        let signal = std::env::var(TARGET_SIGNAL)
            .ok()
            .and_then(|name| Signal::from_name(&name))
            .unwrap_or(Signal::Cont);
        report(
            "signal",
            outcome(send_signal(&target, signal).map(|()| "sent")),
        );
        if std::env::var(RENICE_TARGET).is_ok() {
            report("renice-other", outcome(renice(&target, 10)));
        }
    }
    let me = current_identity(proc_root(), std::process::id()).expect("own identity");
    report("raise-own", outcome(renice(&me, -20)));
    report("lower-own", outcome(renice(&me, 19)));
}
