//! `torchtop attach PID`: starts the agent inside a Python process that runs without it.
//!
//! The order of the checks: the process exists, belongs to us (or we are root), is not stopped
//! or traced, and maps an ELF that exports the Python C API (read from the file, never by
//! running anything of the target's). Then Yama. Then the start code (see [`super::start_code`])
//! goes in, by the first of these that works:
//! - Python 3.14+: `sys.remote_exec` from a same-version interpreter on torchtop's PATH;
//! - the ptrace injector ([`super::inject`]): `Py_AddPendingCall(PyRun_SimpleString, code)`,
//!   with the code in the target's memory;
//! - gdb, when the injector failed for a reason other than permission.
//!
//! Root attaching another user's process uses the injector alone: gdb and `sys.remote_exec`
//! attach by pid, and that process can make the injector fail (a small `RLIMIT_AS`) and then
//! hand its pid to a root process in the fraction of a second before gdb attaches.
//!
//! The target is held by its pidfd ([`HeldProcess`]) from before the first /proc read to the
//! last step: a target that exits and has its pid taken by another process (a root one, say)
//! stops the attach instead of sending the injection, a re-sent signal or a check there. The
//! ptrace injector checks it after it has seized the pid, so what it stops is the process that
//! was checked; gdb and `sys.remote_exec` attach by pid themselves, so it is checked just
//! before and after them.
//!
//! Root attaching another user's process writes nothing where that user or their environment
//! points: the agent picks and creates its socket directory itself, as that user. torchtop's
//! only files are in a directory it creates fresh for the call (see [`super::scratch`]), and
//! they are removed when it returns, success or not.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::external::{find_on_path, gdb_inject, remote_exec};
use super::inject::{find_python, queue_code, InjectError, PythonImage};
use super::scratch::{Outcome, Scratch};
use super::start_code::start_code;
use super::target::{file_name, Target};
use super::yama::{self, PtraceRights, ALTERNATIVES};
use crate::protocol::{default_socket_dir, socket_dir_from};
use crate::sys::pidfd::HeldProcess;
use crate::sys::proc::MapLine;
use crate::sys::{connect_unix_nonblocking, effective_uid, peer_credentials};

/// How the start code gets into the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    /// `sys.remote_exec` on 3.14+, else the ptrace injector, else gdb.
    #[default]
    Auto,
    /// The ptrace injector only.
    Injector,
    /// gdb only.
    Gdb,
    /// `sys.remote_exec` only.
    RemoteExec,
}

/// Knobs for [`attach_with`]; [`attach`] uses the defaults.
#[derive(Debug, Clone)]
pub struct AttachOptions {
    pub method: Method,
    /// How long to wait for the agent once the start code is in (default 10 s).
    pub agent_wait: Duration,
    /// The limit for the injection itself: ptrace stops, gdb, remote_exec (default 30 s).
    pub inject_timeout: Duration,
    /// Where the scratch directory goes (default: the temporary directory, else /tmp).
    pub scratch_base: Option<PathBuf>,
    /// The gdb to use (default: `gdb` on PATH).
    pub gdb: Option<PathBuf>,
}

impl Default for AttachOptions {
    fn default() -> Self {
        AttachOptions {
            method: Method::Auto,
            agent_wait: Duration::from_secs(10),
            inject_timeout: Duration::from_secs(30),
            scratch_base: None,
            gdb: None,
        }
    }
}

/// Starts the agent inside process `pid` and waits for its socket. Returns a sentence naming
/// the socket, or one saying why it could not and what to do instead.
pub fn attach(pid: u32) -> Result<String, String> {
    attach_with(pid, &AttachOptions::default())
}

/// [`attach`] with explicit options.
pub fn attach_with(pid: u32, options: &AttachOptions) -> Result<String, String> {
    attach_inner(pid, options).map_err(|e| format!("{e} {ALTERNATIVES}"))
}

/// Queues Python `code` to run on the main thread of `pid` with the ptrace injector, and
/// returns once it is queued. For tests of the injector itself.
pub fn inject_python(pid: u32, code: &str, timeout: Duration) -> Result<(), String> {
    let (held, target) = hold_and_inspect(pid)?;
    let maps = target.maps()?;
    let image = python_image(&target, &maps)?;
    queue_code(&held, &image, &maps, code, timeout).map_err(|e| e.text().to_string())
}

/// Holds process `pid` and reads what /proc says of it, checking after the read that it is
/// still the process held (so the read was not of another that took its pid).
fn hold_and_inspect(pid: u32) -> Result<(HeldProcess, Target), String> {
    let held = HeldProcess::hold(pid).map_err(|e| match (e.raw_os_error(), thread_of(pid)) {
        (Some(libc::ESRCH), _) => format!("No process has pid {pid}."),
        (_, Some(process)) => {
            format!("{pid} is a thread of process {process}: attach to {process}.")
        }
        _ => format!("Cannot hold process {pid} by a pidfd: {e}."),
    })?;
    let target = Target::inspect(pid)?;
    still_running(&held)?;
    Ok((held, target))
}

/// Whether every uid of the target is `me`, so that whatever its pid could lead to is our own:
/// root's process with a user's real or saved uid can become that user again and hand its
/// pid over, so gdb and sys.remote_exec, which attach by pid, are kept for such processes.
fn only_ours(target: &Target, me: u32) -> bool {
    target.uids.iter().all(|&u| u == me)
}

/// The process that `tid` is a thread of, when it is not a process's main thread (a pidfd
/// names processes only, so a thread id cannot be held).
fn thread_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let tgid: u32 = (status.lines())
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()?;
    (tgid != tid).then_some(tgid)
}

/// Fails with a sentence once the held process has exited: its pid may be another's by now.
fn still_running(held: &HeldProcess) -> Result<(), String> {
    if held.is_running() {
        Ok(())
    } else {
        Err(format!(
            "Process {} has exited; nothing was started in it, nor in any process that took its pid.",
            held.pid()
        ))
    }
}

fn attach_inner(pid: u32, options: &AttachOptions) -> Result<String, String> {
    let (held, target) = hold_and_inspect(pid)?;
    let me = effective_uid();
    check_same_user(&target, me)?;
    check_state(&target)?;
    let maps = target.maps()?;
    let image = python_image(&target, &maps)?;
    let version = python_version(&target, &image)?;
    // Our own process: our socket directory, where our monitor looks. Another user's: the
    // agent follows that user's rules itself, and creates the directory as that user.
    let agent_dir = (target.owner() == me).then(default_socket_dir);
    if let Some(socket) = running_agent(&target, agent_dir.as_deref()) {
        return Ok(format!(
            "Process {pid} already runs the torchtop agent; its socket is {}.",
            socket.display()
        ));
    }
    let rights = PtraceRights::of(pid);
    yama::check(rights, pid)?;
    let scratch = Scratch::create(options.scratch_base.as_deref(), target.owner())?;
    let deadline = unix_now() + (options.agent_wait + options.inject_timeout).as_secs_f64();
    let code = start_code(agent_dir.as_deref(), &scratch.result_path(), deadline);
    let method = inject(
        options, &held, &target, &image, &maps, version, &code, &scratch,
    )
    .map_err(|e| match e {
        InjectError::Denied(why) => yama::denied(rights, pid, &why),
        InjectError::Failed(why) | InjectError::Gone(why) => why,
    })?;
    let socket = wait_for_agent(&held, &scratch, method, options.agent_wait)?;
    Ok(format!(
        "Started the torchtop agent in process {pid} (Python {}.{}) through {method}; its socket is {}.",
        version.0,
        version.1,
        socket.display()
    ))
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn check_same_user(target: &Target, me: u32) -> Result<(), String> {
    if me == 0 || target.uids.iter().all(|&u| u == me) {
        return Ok(());
    }
    Err(format!(
        "Process {} ({}) belongs to uid {} and torchtop runs as uid {me}: attach as that user or as root.",
        target.pid,
        target.comm,
        target.owner()
    ))
}

fn check_state(target: &Target) -> Result<(), String> {
    let pid = target.pid;
    match target.state {
        'Z' | 'X' => Err(format!("Process {pid} has exited.")),
        _ if target.tracer_pid != 0 => Err(format!(
            "Process {pid} is already traced by process {} (a debugger?); detach that first.",
            target.tracer_pid
        )),
        'T' => Err(format!(
            "Process {pid} is stopped; let it run first (`kill -CONT {pid}`)."
        )),
        _ => Ok(()),
    }
}

fn python_image(target: &Target, maps: &[MapLine]) -> Result<PythonImage, String> {
    let exe = target.exe_text();
    find_python(target.pid, maps, exe.as_deref())?.ok_or_else(|| {
        format!(
            "Process {} ({}) is not a Python interpreter: neither its executable ({}) nor a mapped libpython exports the Python C API.",
            target.pid,
            target.comm,
            exe.as_deref().unwrap_or("unreadable")
        )
    })
}

/// `(major, minor)` from a name like `python3.11`, `libpython3.12.so.1.0` or `python3.14t`.
fn python_version_in(name: &str) -> Option<(u32, u32)> {
    let start = name.rfind("python")? + "python".len();
    let (major, tail) = name[start..].split_once('.')?;
    let minor: String = tail.chars().take_while(char::is_ascii_digit).collect();
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// From `Py_Version` in the ELF (3.11+), else the name of libpython or of the executable.
fn python_version(target: &Target, image: &PythonImage) -> Result<(u32, u32), String> {
    let exe = target.exe_text().unwrap_or_default();
    image
        .version
        .or_else(|| python_version_in(file_name(&image.path)))
        .or_else(|| python_version_in(file_name(&exe)))
        .ok_or_else(|| {
            format!(
                "Cannot tell which Python version process {} runs: {} has no Py_Version (Python before 3.11) and neither its name nor the executable's carries a version.",
                target.pid, image.path
            )
        })
}

/// The socket of an agent that `target` already serves, if one answers where it would be.
fn running_agent(target: &Target, agent_dir: Option<&Path>) -> Option<PathBuf> {
    let dir = match agent_dir {
        Some(dir) => dir.to_path_buf(),
        None => socket_dir_from(
            target.environ_var("TORCHTOP_AGENT_DIR").ok()?.as_deref(),
            target.environ_var("XDG_RUNTIME_DIR").ok()?.as_deref(),
            target.owner(),
        ),
    };
    let socket = dir.join(format!("{}.sock", target.pid));
    served_by(&socket, target.pid).then_some(socket)
}

/// Whether `socket` answers and its listener is process `pid`. The path may be the target's
/// choice, so it must be named `<pid>.sock` and be a socket itself (not a symlink to another
/// service's); connecting then reads and writes nothing, and never waits (a listener can keep
/// its backlog full: a blocking connect would hold root's attach for ever).
fn served_by(socket: &Path, pid: u32) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let named_for_pid = socket
        .file_name()
        .is_some_and(|n| n.to_string_lossy() == format!("{pid}.sock"));
    let is_socket = std::fs::symlink_metadata(socket).is_ok_and(|m| m.file_type().is_socket());
    if !named_for_pid || !is_socket {
        return false;
    }
    connect_unix_nonblocking(socket)
        .ok()
        .and_then(|s| peer_credentials(&s).ok())
        .is_some_and(|(peer, _)| peer == pid)
}

// Each argument is one fact the methods need; bundling them would only rename them.
#[allow(clippy::too_many_arguments)]
fn inject(
    options: &AttachOptions,
    held: &HeldProcess,
    target: &Target,
    image: &PythonImage,
    maps: &[MapLine],
    version: (u32, u32),
    code: &str,
    scratch: &Scratch,
) -> Result<&'static str, InjectError> {
    let timeout = options.inject_timeout;
    let injector = || queue_code(held, image, maps, code, timeout).map(|()| "ptrace");
    let gdb = || {
        let gdb = options
            .gdb
            .clone()
            .or_else(|| find_on_path("gdb"))
            .ok_or_else(|| InjectError::Failed("gdb is not installed.".to_string()))?;
        let script = scratch.write_script(code).map_err(InjectError::Failed)?;
        checked_by_pid(held, || {
            gdb_inject(&gdb, target, scratch.dir(), &script, timeout)
        })
        .map(|()| "gdb")
    };
    let remote = || -> Result<Option<&'static str>, InjectError> {
        let script = scratch.write_script(code).map_err(InjectError::Failed)?;
        let ran = checked_by_pid(held, || remote_exec(target, version, &script, timeout))?;
        Ok(ran.map(|()| "sys.remote_exec"))
    };
    match options.method {
        Method::Injector => injector(),
        Method::Gdb => gdb(),
        Method::RemoteExec => remote()?.ok_or_else(|| {
            InjectError::Failed(format!(
                "sys.remote_exec needs python{}.{} (the target's version) on PATH, and there is none.",
                version.0, version.1
            ))
        }),
        Method::Auto => {
            // Only where the pid could not lead anywhere worse than the user's own processes.
            let by_pid = only_ours(target, effective_uid());
            if by_pid && version >= (3, 14) {
                match remote() {
                    Ok(Some(method)) => return Ok(method),
                    Err(e @ (InjectError::Denied(_) | InjectError::Gone(_))) => return Err(e),
                    Ok(None) | Err(InjectError::Failed(_)) => {}
                }
            }
            match injector() {
                Err(InjectError::Failed(why)) if !by_pid => Err(InjectError::Failed(format!(
                    "{why} gdb is not tried on another user's process as root: it attaches by pid, which the process could hand to another between torchtop's check and gdb's attach."
                ))),
                Err(InjectError::Failed(why)) => gdb().map_err(|e| match e {
                    InjectError::Denied(g) => InjectError::Denied(format!("{why} {g}")),
                    InjectError::Failed(g) => {
                        InjectError::Failed(format!("{why} The gdb fallback failed too: {g}"))
                    }
                    InjectError::Gone(g) => InjectError::Gone(g),
                }),
                other => other,
            }
        }
    }
}

/// Runs a method that attaches by pid itself (gdb, `sys.remote_exec`), with the held process
/// checked just before and after: a pid that changed hands in between is said, never hidden.
fn checked_by_pid<T>(
    held: &HeldProcess,
    run: impl FnOnce() -> Result<T, InjectError>,
) -> Result<T, InjectError> {
    still_running(held).map_err(InjectError::Gone)?;
    let outcome = run()?;
    if !held.is_running() {
        return Err(InjectError::Gone(format!(
            "Process {} exited while it was being attached to, so the start code may have gone to a process that took its pid; check that process.",
            held.pid()
        )));
    }
    Ok(outcome)
}

/// Waits for the start code's report, then checks that the socket it names is the target's.
fn wait_for_agent(
    held: &HeldProcess,
    scratch: &Scratch,
    method: &str,
    wait: Duration,
) -> Result<PathBuf, String> {
    let pid = held.pid();
    let deadline = Instant::now() + wait;
    loop {
        still_running(held)?;
        match scratch.outcome() {
            Some(Outcome::Started(socket)) if served_by(&socket, pid) && held.is_running() => {
                return Ok(socket)
            }
            Some(Outcome::Started(socket)) => {
                return Err(format!(
                    "Process {pid} reported an agent socket at {}, but no agent of process {pid} answers there.",
                    socket.display()
                ))
            }
            Some(Outcome::Failed(why)) => {
                return Err(format!("The agent did not start in process {pid}: {why}."))
            }
            None if Instant::now() >= deadline => {
                return Err(format!(
                    "Process {pid} did not run the agent's start code within {} s of its injection through {method}. It runs when the main thread next executes Python bytecode, so a main thread stuck in a C call (a hung collective, a long sleep, a join) delays it; past the deadline it will start nothing.",
                    wait.as_secs()
                ))
            }
            None => thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(uids: [u32; 4], state: char, tracer: u32) -> Target {
        Target {
            pid: 42,
            comm: "train".to_string(),
            uids,
            state,
            tracer_pid: tracer,
            exe: Some(PathBuf::from("/usr/bin/python3")),
        }
    }

    /// A review: gdb and sys.remote_exec were kept for root's process by its effective uid
    /// alone, though a real or saved uid of a user lets it become that user again.
    #[test]
    fn only_a_process_with_every_uid_ours_may_be_attached_by_pid() {
        assert!(only_ours(&target([0; 4], 'S', 0), 0));
        assert!(!only_ours(&target([1000, 0, 0, 0], 'S', 0), 0));
        assert!(!only_ours(&target([0, 0, 1000, 0], 'S', 0), 0));
        assert!(!only_ours(&target([1000; 4], 'S', 0), 0));
    }

    /// A review: a thread id got "Cannot hold process N by a pidfd: No such file or directory".
    #[test]
    fn a_thread_id_is_named_as_a_thread_of_its_process() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
                .unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let refused = hold_and_inspect(tid).err().unwrap();
        drop(done_tx);
        thread.join().unwrap();
        let process = std::process::id();
        assert_eq!(
            refused,
            format!("{tid} is a thread of process {process}: attach to {process}.")
        );
    }

    /// A review: root's attach connected to a socket the target chose with a blocking connect,
    /// and a target that kept its backlog full held root there for ever.
    #[test]
    fn a_socket_with_a_full_backlog_is_not_waited_on() {
        use rustix::net::{self, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let dir = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        let path = dir.path().join(format!("{pid}.sock"));
        let listener = net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        net::bind(&listener, &SocketAddrUnix::new(&path).unwrap()).unwrap();
        net::listen(&listener, 0).unwrap();
        // Fill the backlog (never accepted) until a connect that does not wait is refused.
        let mut filling = Vec::new();
        while let Ok(stream) = connect_unix_nonblocking(&path) {
            filling.push(stream);
            assert!(filling.len() < 64, "a backlog of 0 took 64 connections");
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let socket = path.clone();
        std::thread::spawn(move || tx.send(served_by(&socket, pid)));
        let served = rx
            .recv_timeout(crate::test_ci::PATIENCE)
            .expect("served_by waited on a full backlog");
        assert!(!served);
    }

    /// gdb and sys.remote_exec attach by pid: a process that exits meanwhile is said, and one
    /// gone before is never tried.
    #[test]
    fn a_method_that_attaches_by_pid_is_checked_before_and_after() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let held = HeldProcess::hold(child.id()).unwrap();
        let outcome = checked_by_pid(&held, || {
            child.kill().unwrap();
            child.wait().unwrap();
            Ok(())
        });
        let Err(InjectError::Gone(why)) = outcome else {
            panic!("{outcome:?}");
        };
        assert!(
            why.contains("may have gone to a process that took its pid"),
            "{why}"
        );
        let mut ran = false;
        let outcome = checked_by_pid(&held, || {
            ran = true;
            Ok(())
        });
        assert!(matches!(outcome, Err(InjectError::Gone(_))), "{outcome:?}");
        assert!(!ran, "never tried on a process that has exited");
    }

    #[test]
    fn versions_from_names() {
        assert_eq!(python_version_in("python3.11"), Some((3, 11)));
        assert_eq!(python_version_in("libpython3.12.so.1.0"), Some((3, 12)));
        assert_eq!(python_version_in("python3.14t"), Some((3, 14)));
        assert_eq!(python_version_in("python3"), None);
        assert_eq!(python_version_in("bash"), None);
    }

    #[test]
    fn version_sources_in_order() {
        let t = target([5; 4], 'S', 0);
        let image = |path: &str, version| PythonImage {
            path: path.to_string(),
            add_pending_call: 1,
            run_simple_string: 2,
            version,
        };
        let from_symbol = image("/usr/lib/libpython3.10.so", Some((3, 12)));
        assert_eq!(python_version(&t, &from_symbol), Ok((3, 12)));
        let from_lib = image("/usr/lib/libpython3.10.so.1.0", None);
        assert_eq!(python_version(&t, &from_lib), Ok((3, 10)));
        let unknown = python_version(&t, &image("/usr/bin/python3", None)).unwrap_err();
        assert!(
            unknown.contains("Cannot tell which Python version"),
            "{unknown}"
        );
    }

    #[test]
    fn other_users_are_refused_unless_root() {
        let t = target([1000; 4], 'S', 0);
        assert!(check_same_user(&t, 1000).is_ok());
        assert!(check_same_user(&t, 0).is_ok());
        let err = check_same_user(&t, 1001).unwrap_err();
        assert!(
            err.contains("belongs to uid 1000") && err.contains("uid 1001"),
            "{err}"
        );
        let setuid = target([1000, 0, 0, 0], 'S', 0);
        assert!(
            check_same_user(&setuid, 1000).is_err(),
            "all uids must match"
        );
    }

    #[test]
    fn stopped_traced_and_dead_processes_are_named() {
        assert!(check_state(&target([0; 4], 'T', 0))
            .unwrap_err()
            .contains("kill -CONT 42"));
        assert!(check_state(&target([0; 4], 't', 99))
            .unwrap_err()
            .contains("traced by process 99"));
        assert!(check_state(&target([0; 4], 'Z', 0))
            .unwrap_err()
            .contains("has exited"));
        assert!(check_state(&target([0; 4], 'R', 0)).is_ok());
    }

    #[test]
    fn only_a_real_socket_named_for_the_pid_counts_as_its_agent() {
        let temp = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let real = temp.path().join(format!("{me}.sock"));
        let _listener = std::os::unix::net::UnixListener::bind(&real).unwrap();
        assert!(served_by(&real, me));
        assert!(!served_by(&real, me + 1), "another pid's listener");
        let other = temp.path().join("elsewhere");
        std::fs::create_dir(&other).unwrap();
        let link = other.join(format!("{me}.sock"));
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(!served_by(&link, me), "a symlink to some socket");
        let renamed = temp.path().join("agent.sock");
        std::fs::hard_link(&real, &renamed).unwrap();
        assert!(!served_by(&renamed, me), "a socket not named for the pid");
    }

    #[test]
    fn missing_process_is_named_with_the_alternatives() {
        let err = attach(999_999_999).unwrap_err();
        assert!(err.starts_with("No process has pid 999999999."), "{err}");
        assert!(
            err.contains("torchtop run --") && err.contains("torchtop_agent.start()"),
            "{err}"
        );
    }
}
