//! `torchtop attach PID`: starts the agent inside a Python process that runs without it.
//!
//! Python 3.14+ gets `sys.remote_exec` (PEP 768) from an interpreter of the same version;
//! older Pythons get gdb: take the GIL with `PyGILState_Ensure`, run the start code with
//! `PyRun_SimpleString`, release the GIL, detach. Every refusal names its cause: no such
//! process, another user, not Python, no gdb, or ptrace not permitted (with
//! `kernel.yama.ptrace_scope`).

use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::prepare_site_dir;
use crate::collect::agent::{default_socket_dir, effective_uid, socket_dir_from};

const SOCKET_WAIT: Duration = Duration::from_secs(10);
const INJECT_TIMEOUT: Duration = Duration::from_secs(30);
const CAP_SYS_PTRACE: u32 = 19;

/// What /proc says about the process to attach to.
#[derive(Debug, Clone)]
struct Target {
    pid: u32,
    comm: String,
    /// Real, effective, saved and filesystem uids.
    uids: [u32; 4],
    exe: Option<PathBuf>,
    maps_libpython: Option<String>,
}

/// Starts the agent inside process `pid` and waits (up to 10 s) for its socket. Returns a
/// sentence naming the socket, or one saying exactly why it could not.
pub fn attach(pid: u32) -> Result<String, String> {
    let target = Target::inspect(pid)?;
    check_same_user(&target, effective_uid())?;
    let version = python_version(&target)?;
    let (socket_dir, handoff) = target_socket_dir(&target)?;
    let socket = socket_dir.join(format!("{pid}.sock"));
    if UnixStream::connect(&socket).is_ok() {
        return Ok(format!(
            "Process {pid} already runs the torchtop agent; its socket is {}.",
            socket.display()
        ));
    }
    check_ptrace(&target)?;
    let site = prepare_site_dir(&socket_dir, handoff)?;
    let files = AttachFiles::new(&site, pid);
    files.write_start_script(&site, &socket_dir, handoff)?;
    let method = if version >= (3, 14) {
        remote_exec(&target, version, &files.script)?;
        "sys.remote_exec"
    } else {
        gdb_inject(&target, &files)?;
        "gdb"
    };
    let outcome = wait_for_agent(pid, &socket, &files.result, method);
    files.remove();
    outcome.map(|path| {
        format!(
            "Started the torchtop agent in process {pid} (Python {}.{}) through {method}; its socket is {}.",
            version.0,
            version.1,
            path.display()
        )
    })
}

impl Target {
    fn inspect(pid: u32) -> Result<Target, String> {
        let status =
            fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => format!("no process has pid {pid}"),
                _ => format!("cannot read /proc/{pid}/status: {e}"),
            })?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name).map(|rest| rest.trim().to_string()))
        };
        let uids: Vec<u32> = field("Uid:")
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|u| u.parse().ok())
            .collect();
        let uids: [u32; 4] = uids.try_into().map_err(|_| {
            format!("cannot read the owner of process {pid} from /proc/{pid}/status")
        })?;
        let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        Ok(Target {
            pid,
            comm: field("Name:").unwrap_or_else(|| "?".to_string()),
            uids,
            exe: fs::read_link(format!("/proc/{pid}/exe")).ok(),
            maps_libpython: maps.lines().find_map(|l| {
                l.split_whitespace()
                    .last()
                    .filter(|p| file_name(p).starts_with("libpython"))
                    .map(str::to_string)
            }),
        })
    }

    fn exe_is_python(&self) -> bool {
        self.exe
            .as_deref()
            .is_some_and(|e| file_name(&e.to_string_lossy()).starts_with("python"))
    }

    /// A path that executes the target's own interpreter binary.
    fn exe_for_running(&self) -> Option<PathBuf> {
        let exe = self.exe.as_ref()?;
        if exe.to_string_lossy().ends_with(" (deleted)") {
            return Some(PathBuf::from(format!("/proc/{}/exe", self.pid)));
        }
        Some(exe.clone())
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn check_same_user(target: &Target, me: u32) -> Result<(), String> {
    if me == 0 || target.uids.iter().all(|&u| u == me) {
        return Ok(());
    }
    Err(format!(
        "process {} ({}) belongs to uid {} and torchtop runs as uid {me}: attach as that user or as root",
        target.pid, target.comm, target.uids[1]
    ))
}

/// `(major, minor)` from a name like `python3.11`, `libpython3.12.so.1.0` or `python3.14t`.
fn python_version_in(name: &str) -> Option<(u32, u32)> {
    let start = name.rfind("python")? + "python".len();
    let rest = &name[start..];
    let (major, tail) = rest.split_once('.')?;
    let minor: String = tail.chars().take_while(char::is_ascii_digit).collect();
    Some((major.parse().ok()?, minor.parse().ok()?))
}

fn python_version(target: &Target) -> Result<(u32, u32), String> {
    let exe_name = target
        .exe
        .as_ref()
        .map(|e| file_name(&e.to_string_lossy()).to_string());
    let from_names = exe_name
        .as_deref()
        .filter(|_| target.exe_is_python())
        .and_then(python_version_in)
        .or_else(|| {
            target
                .maps_libpython
                .as_deref()
                .map(file_name)
                .and_then(python_version_in)
        });
    if let Some(version) = from_names {
        return Ok(version);
    }
    if target.exe_is_python() {
        if let Some(exe) = target.exe_for_running() {
            return ask_interpreter_version(&exe);
        }
    }
    Err(format!(
        "process {} ({}) is not a Python interpreter: its executable is {} and it maps no libpython",
        target.pid,
        target.comm,
        target.exe.as_ref().map_or("unreadable".to_string(), |e| e.display().to_string())
    ))
}

fn ask_interpreter_version(exe: &Path) -> Result<(u32, u32), String> {
    let out = Command::new(exe)
        .args([
            "-I",
            "-c",
            "import sys; print('%d.%d' % sys.version_info[:2])",
        ])
        .output()
        .map_err(|e| format!("cannot run {} to learn its version: {e}", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (major, minor) = text.trim().split_once('.').unwrap_or(("", ""));
    match (major.parse(), minor.parse()) {
        (Ok(major), Ok(minor)) => Ok((major, minor)),
        _ => Err(format!(
            "cannot tell which Python version {} is",
            exe.display()
        )),
    }
}

/// Where the target's agent will put its socket, and the uid to hand new directories to.
fn target_socket_dir(target: &Target) -> Result<(PathBuf, Option<u32>), String> {
    let me = effective_uid();
    let owner = target.uids[1];
    if owner == me {
        return Ok((default_socket_dir(), None));
    }
    // Root attaching another user's process: use that process's own rules and make the
    // directories its user's, or its agent would refuse them.
    let environ = fs::read(format!("/proc/{}/environ", target.pid))
        .map_err(|e| format!("cannot read the environment of process {}: {e}", target.pid))?;
    let var = |name: &str| {
        environ.split(|&b| b == 0).find_map(|entry| {
            let rest = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
            Some(std::ffi::OsStr::from_bytes(rest).to_os_string())
        })
    };
    let dir = socket_dir_from(
        var("TORCHTOP_AGENT_DIR").as_deref(),
        var("XDG_RUNTIME_DIR").as_deref(),
        owner,
    );
    Ok((dir, Some(owner)))
}

fn ptrace_scope() -> Option<u32> {
    fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn has_cap_sys_ptrace() -> bool {
    let Ok(status) = fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

fn scope_text(scope: Option<u32>) -> String {
    scope.map_or(
        "kernel.yama.ptrace_scope is not set (no Yama)".to_string(),
        |s| format!("kernel.yama.ptrace_scope = {s}"),
    )
}

/// Refuses early where Yama would refuse the attach anyway, with the reason.
fn check_ptrace(target: &Target) -> Result<(), String> {
    let scope = ptrace_scope();
    let privileged = has_cap_sys_ptrace();
    let why = match scope {
        Some(3) => Some("ptrace is disabled entirely until reboot".to_string()),
        Some(2) if !privileged => Some("only processes with CAP_SYS_PTRACE may attach; run torchtop attach as root".to_string()),
        // The tracer is gdb or a helper interpreter, never an ancestor of the target.
        Some(1) if !privileged => Some(
            "only a process's ancestors may trace it, and the injector is not one; run torchtop attach as root, or set kernel.yama.ptrace_scope to 0"
                .to_string(),
        ),
        _ => None,
    };
    match why {
        Some(why) => Err(format!(
            "ptrace is not permitted on process {} ({}): {why}",
            target.pid,
            scope_text(scope)
        )),
        None => Ok(()),
    }
}

/// The per-attach files in the site directory: the start script, its result, the gdb script.
struct AttachFiles {
    agent: PathBuf,
    script: PathBuf,
    result: PathBuf,
    gdb_script: PathBuf,
}

impl AttachFiles {
    fn new(site: &Path, pid: u32) -> Self {
        let nonce = format!("{pid}-{}-{}", std::process::id(), nanos_now());
        AttachFiles {
            agent: site.join("torchtop_agent.py"),
            script: site.join(format!("attach-{nonce}.py")),
            result: site.join(format!("attach-{nonce}.json")),
            gdb_script: site.join(format!("attach-{nonce}.gdb")),
        }
    }

    fn write_start_script(
        &self,
        site: &Path,
        socket_dir: &Path,
        handoff: Option<u32>,
    ) -> Result<(), String> {
        let code = start_script(&self.agent, socket_dir, &self.result);
        fs::write(&self.script, code)
            .map_err(|e| format!("cannot write {}: {e}", self.script.display()))?;
        if let Some(uid) = handoff {
            std::os::unix::fs::lchown(&self.script, Some(uid), None)
                .map_err(|e| format!("cannot hand {} to uid {uid}: {e}", self.script.display()))?;
        }
        debug_assert!(self.script.starts_with(site));
        Ok(())
    }

    fn remove(&self) {
        for path in [&self.script, &self.result, &self.gdb_script] {
            let _ = fs::remove_file(path);
        }
    }
}

fn nanos_now() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A JSON string literal is also a valid Python string literal.
fn py_str(path: &Path) -> String {
    Value::String(path.to_string_lossy().into_owned()).to_string()
}

/// Python code run inside the target: load the agent from the site directory without touching
/// sys.path, start it, and record the outcome in `result` for torchtop to read.
fn start_script(agent: &Path, socket_dir: &Path, result: &Path) -> String {
    format!(
        r#"def _torchtop_attach(agent_path, socket_dir, result_path):
    import importlib.util, json, os, sys
    outcome = {{"path": None, "error": None}}
    try:
        module = sys.modules.get("torchtop_agent")
        if module is None:
            spec = importlib.util.spec_from_file_location("torchtop_agent", agent_path)
            module = importlib.util.module_from_spec(spec)
            sys.modules["torchtop_agent"] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules["torchtop_agent"]
                raise
        outcome["path"] = module.start(socket_dir=socket_dir)
        if outcome["path"] is None:
            outcome["error"] = getattr(module, "last_error", None) or "the agent refused to start"
    except Exception as e:
        outcome["error"] = "%s: %s" % (type(e).__name__, e)
    try:
        fd = os.open(result_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(outcome, f)
    except OSError:
        pass


_torchtop_attach({}, {}, {})
del _torchtop_attach
"#,
        py_str(agent),
        py_str(socket_dir),
        py_str(result)
    )
}

/// Runs `cmd` with its output captured, killing it after `timeout`.
fn output_within(
    mut cmd: Command,
    timeout: Duration,
    what: &str,
) -> Result<(bool, String, String), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    let collect = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = collect(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = collect(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{what} did not finish within {} s and was stopped",
                    timeout.as_secs()
                ));
            }
            Err(e) => return Err(format!("cannot wait for {what}: {e}")),
        }
    };
    let out = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    Ok((status.success(), out, err))
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn ptrace_denied(target: &Target) -> String {
    format!(
        "ptrace is not permitted on process {} ({}): {}; a container may also need CAP_SYS_PTRACE",
        target.pid,
        target.comm,
        scope_text(ptrace_scope())
    )
}

fn remote_exec(target: &Target, version: (u32, u32), script: &Path) -> Result<(), String> {
    let wanted = format!("python{}.{}", version.0, version.1);
    let interpreter = target
        .exe_for_running()
        .filter(|_| target.exe_is_python())
        .or_else(|| find_on_path(&wanted))
        .ok_or_else(|| {
            format!("sys.remote_exec needs {wanted} (the target's version), and none is on PATH")
        })?;
    let mut cmd = Command::new(&interpreter);
    cmd.args([
        "-I",
        "-c",
        "import sys; sys.remote_exec(int(sys.argv[1]), sys.argv[2])",
    ])
    .arg(target.pid.to_string())
    .arg(script);
    let (ok, _, err) = output_within(cmd, INJECT_TIMEOUT, "sys.remote_exec")?;
    if ok {
        return Ok(());
    }
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no error text")
        .trim()
        .to_string();
    if last.contains("PermissionError") || last.contains("Operation not permitted") {
        return Err(ptrace_denied(target));
    }
    Err(format!(
        "sys.remote_exec into process {} failed: {last}",
        target.pid
    ))
}

/// Characters gdb's C string and Python's single-quoted string both pass through unchanged.
fn gdb_safe(path: &Path) -> Option<String> {
    let text = path.to_str()?;
    text.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+@%,=:".contains(c))
        .then(|| text.to_string())
}

fn gdb_inject(target: &Target, files: &AttachFiles) -> Result<(), String> {
    let gdb = find_on_path("gdb").ok_or_else(|| {
        format!(
            "gdb is not installed; torchtop attach needs it for Python before 3.14 (process {} runs an older Python)",
            target.pid
        )
    })?;
    let script = gdb_safe(&files.script).ok_or_else(|| {
        format!(
            "the path {} has characters that cannot be passed through gdb",
            files.script.display()
        )
    })?;
    // An error in a sourced gdb file stops the rest of it: no PyRun without the GIL.
    let commands = format!(
        "set $torchtop_gil = (int)PyGILState_Ensure()\n\
         print (int)PyRun_SimpleString(\"exec(compile(open('{script}').read(), '{script}', 'exec'), {{'__name__': 'torchtop_attach'}})\")\n\
         call (void)PyGILState_Release($torchtop_gil)\n"
    );
    fs::write(&files.gdb_script, commands)
        .map_err(|e| format!("cannot write {}: {e}", files.gdb_script.display()))?;
    let mut cmd = Command::new(gdb);
    cmd.args(["--batch", "--nx", "-q", "-iex", "set auto-load off", "-p"])
        .arg(target.pid.to_string())
        .arg("-x")
        .arg(&files.gdb_script)
        .args(["-ex", "detach"]);
    let (_, out, err) = output_within(cmd, INJECT_TIMEOUT, "gdb")?;
    interpret_gdb_output(target, &out, &err)
}

fn interpret_gdb_output(target: &Target, out: &str, err: &str) -> Result<(), String> {
    let result = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("$1 = "))
        .map(str::trim);
    match result {
        Some("0") => Ok(()),
        Some(_) => Err(format!(
            "the agent's start code raised inside process {}; the traceback went to that process's stderr",
            target.pid
        )),
        None if err.contains("ptrace: Operation not permitted") || err.contains("Could not attach") => {
            Err(ptrace_denied(target))
        }
        None if err.contains("No symbol") => Err(format!(
            "process {} exports no Python C API (PyGILState_Ensure); gdb cannot start code in it",
            target.pid
        )),
        None => {
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim();
            Err(format!("gdb could not start the agent in process {}: {last}", target.pid))
        }
    }
}

fn wait_for_agent(pid: u32, socket: &Path, result: &Path, method: &str) -> Result<PathBuf, String> {
    let deadline = Instant::now() + SOCKET_WAIT;
    loop {
        if UnixStream::connect(socket).is_ok() {
            return Ok(socket.to_path_buf());
        }
        if let Some(error) = failed_outcome(result) {
            return Err(format!("the agent did not start in process {pid}: {error}"));
        }
        if Instant::now() >= deadline {
            let hint = if method == "sys.remote_exec" {
                " sys.remote_exec runs the code when the main thread next executes Python bytecode; a main thread stuck in a C call (a hung collective, for one) delays it"
            } else {
                ""
            };
            return Err(format!(
                "no agent socket appeared at {} within {} s after injecting through {method}.{hint}",
                socket.display(),
                SOCKET_WAIT.as_secs()
            ));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn failed_outcome(result: &Path) -> Option<String> {
    let text = fs::read_to_string(result).ok()?;
    let outcome: Value = serde_json::from_str(&text).ok()?;
    if outcome.get("path").is_some_and(|p| !p.is_null()) {
        return None;
    }
    Some(
        outcome
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("unknown error")
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(uids: [u32; 4], exe: &str, lib: Option<&str>) -> Target {
        Target {
            pid: 42,
            comm: "train".to_string(),
            uids,
            exe: Some(PathBuf::from(exe)),
            maps_libpython: lib.map(str::to_string),
        }
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
    fn python_detection() {
        let t = target([5; 4], "/usr/bin/python3.12", None);
        assert_eq!(python_version(&t), Ok((3, 12)));
        let t = target(
            [5; 4],
            "/opt/app/server",
            Some("/usr/lib/libpython3.10.so.1.0"),
        );
        assert_eq!(python_version(&t), Ok((3, 10)));
        let err = python_version(&target([5; 4], "/usr/bin/bash", None)).unwrap_err();
        assert!(
            err.contains("is not a Python interpreter") && err.contains("/usr/bin/bash"),
            "{err}"
        );
    }

    #[test]
    fn other_users_are_refused_unless_root() {
        let t = target([1000, 1000, 1000, 1000], "/usr/bin/python3.11", None);
        assert!(check_same_user(&t, 1000).is_ok());
        assert!(check_same_user(&t, 0).is_ok());
        let err = check_same_user(&t, 1001).unwrap_err();
        assert!(
            err.contains("belongs to uid 1000") && err.contains("uid 1001"),
            "{err}"
        );
        let setuid = target([1000, 0, 0, 0], "/usr/bin/python3.11", None);
        assert!(
            check_same_user(&setuid, 1000).is_err(),
            "all uids must match"
        );
    }

    #[test]
    fn gdb_outcomes_are_explained() {
        let t = target([0; 4], "/usr/bin/python3.11", None);
        assert!(interpret_gdb_output(&t, "$1 = 0\n", "").is_ok());
        assert!(interpret_gdb_output(&t, "$1 = -1\n", "")
            .unwrap_err()
            .contains("raised"));
        let denied =
            interpret_gdb_output(&t, "", "ptrace: Operation not permitted.\n").unwrap_err();
        assert!(
            denied.contains("ptrace is not permitted") && denied.contains("ptrace_scope"),
            "{denied}"
        );
        let nosym = interpret_gdb_output(
            &t,
            "",
            "No symbol \"PyGILState_Ensure\" in current context.\n",
        );
        assert!(nosym.unwrap_err().contains("exports no Python C API"));
    }

    #[test]
    fn start_script_is_valid_python_with_quoted_paths() {
        let code = start_script(
            Path::new("/a/torchtop_agent.py"),
            Path::new("/d\"ir"),
            Path::new("/r.json"),
        );
        assert!(
            code.contains(r#"_torchtop_attach("/a/torchtop_agent.py", "/d\"ir", "/r.json")"#),
            "{code}"
        );
        if find_on_path("python3").is_some() {
            let out = Command::new("python3")
                .args(["-c", "import ast,sys; ast.parse(sys.stdin.read())"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    use std::io::Write;
                    c.stdin.take().unwrap().write_all(code.as_bytes())?;
                    c.wait_with_output()
                })
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn gdb_safe_paths() {
        assert!(gdb_safe(Path::new("/tmp/torchtop-0/site-ab12/attach-1-2-3.py")).is_some());
        assert!(gdb_safe(Path::new("/tmp/it's")).is_none());
        assert!(gdb_safe(Path::new("/tmp/a\"b")).is_none());
    }

    #[test]
    fn missing_process_is_named() {
        assert_eq!(
            attach(999_999_999).unwrap_err(),
            "no process has pid 999999999"
        );
    }
}
