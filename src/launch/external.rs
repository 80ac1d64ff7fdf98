//! The outside programs `torchtop attach` may use: gdb (a fallback when the ptrace injector
//! fails) and, for Python 3.14+, an interpreter of the target's version for `sys.remote_exec`.
//!
//! Both are found on torchtop's own PATH, never through the target (its executable is never
//! run). Their scripts live in the fresh scratch directory torchtop created for this attach.
//! gdb loads only libpython's and libc's symbols (`auto-solib-add off`): with libtorch mapped,
//! loading everything takes minutes while the target stays frozen.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::inject::InjectError;
use super::target::Target;
use super::trusted::TrustedDir;

/// Runs `cmd` with its output captured, killing it after `timeout`; `Ok((success, out, err))`.
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
        .map_err(|e| format!("Cannot run {what}: {e}."))?;
    let collect = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(pipe) = pipe {
                let _ = pipe.take(1 << 20).read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
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
                    "{what} did not finish within {} s and was stopped.",
                    timeout.as_secs()
                ));
            }
            Err(e) => return Err(format!("Cannot wait for {what}: {e}.")),
        }
    };
    Ok((
        status.success(),
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default(),
    ))
}

/// `name` on torchtop's own PATH.
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Characters gdb's C string and Python's single-quoted string both pass through unchanged.
fn gdb_safe(path: &Path) -> Option<String> {
    let text = path.to_str()?;
    text.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+@%,=:".contains(c))
        .then(|| text.to_string())
}

/// Makes the target run `script` through gdb: take the GIL, `PyRun_SimpleString`, release.
pub(crate) fn gdb_inject(
    gdb: &Path,
    target: &Target,
    scratch: &TrustedDir,
    script: &Path,
    timeout: Duration,
) -> Result<(), InjectError> {
    let pid = target.pid;
    let path = gdb_safe(script).ok_or_else(|| {
        InjectError::Failed(format!(
            "The path {} has characters that cannot be passed through gdb.",
            script.display()
        ))
    })?;
    // An error in a sourced gdb file stops the rest of it: no PyRun without the GIL.
    let commands = format!(
        "sharedlibrary libpython\n\
         sharedlibrary libc[.]so\n\
         set $torchtop_gil = (int)PyGILState_Ensure()\n\
         print (int)PyRun_SimpleString(\"exec(open('{path}').read())\")\n\
         call (void)PyGILState_Release($torchtop_gil)\n"
    );
    scratch
        .write_new_file("attach.gdb", commands.as_bytes(), 0o600)
        .map_err(InjectError::Failed)?;
    let mut cmd = Command::new(gdb);
    cmd.args(["--batch", "--nx", "-q"])
        .args([
            "-iex",
            "set auto-load off",
            "-iex",
            "set auto-solib-add off",
        ])
        .arg("-p")
        .arg(pid.to_string())
        .arg("-x")
        .arg(scratch.path().join("attach.gdb"))
        .args(["-ex", "detach"]);
    let (_, out, err) = output_within(cmd, timeout, "gdb").map_err(|e| {
        InjectError::Failed(format!(
            "{e} Process {pid} was frozen while gdb held it; gdb's exit lets it run on."
        ))
    })?;
    interpret_gdb_output(pid, &out, &err)
}

pub(crate) fn interpret_gdb_output(pid: u32, out: &str, err: &str) -> Result<(), InjectError> {
    let result = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("$1 = "))
        .map(str::trim);
    let last = || {
        err.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .trim()
            .to_string()
    };
    match result {
        Some("0") => Ok(()),
        Some(_) => Err(InjectError::Failed(format!(
            "The agent's start code raised inside process {pid}; the traceback went to that process's stderr."
        ))),
        None if err.contains("ptrace: Operation not permitted") || err.contains("Could not attach") => {
            Err(InjectError::Denied(format!("gdb: {}", last())))
        }
        None if err.contains("No symbol") => Err(InjectError::Failed(format!(
            "gdb found no Python C API (PyGILState_Ensure) in process {pid}."
        ))),
        None => Err(InjectError::Failed(format!(
            "gdb could not start the agent in process {pid}: {}.",
            last()
        ))),
    }
}

/// Python 3.14+: `sys.remote_exec(pid, script)` from an interpreter of the same version on
/// torchtop's PATH. `Ok(None)`: there is no such interpreter.
pub(crate) fn remote_exec(
    target: &Target,
    version: (u32, u32),
    script: &Path,
    timeout: Duration,
) -> Result<Option<()>, InjectError> {
    let wanted = format!("python{}.{}", version.0, version.1);
    let Some(interpreter) = find_on_path(&wanted) else {
        return Ok(None);
    };
    let mut cmd = Command::new(&interpreter);
    cmd.args([
        "-I",
        "-c",
        "import sys; sys.remote_exec(int(sys.argv[1]), sys.argv[2])",
    ])
    .arg(target.pid.to_string())
    .arg(script);
    let (ok, _, err) =
        output_within(cmd, timeout, "sys.remote_exec").map_err(InjectError::Failed)?;
    if ok {
        return Ok(Some(()));
    }
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no error text")
        .trim()
        .to_string();
    if last.contains("PermissionError") || last.contains("Operation not permitted") {
        return Err(InjectError::Denied(format!("sys.remote_exec: {last}")));
    }
    Err(InjectError::Failed(format!(
        "sys.remote_exec into process {} failed: {last}.",
        target.pid
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdb_outcomes_are_explained() {
        assert!(interpret_gdb_output(1, "$1 = 0\n", "").is_ok());
        let raised = interpret_gdb_output(1, "$1 = -1\n", "").unwrap_err();
        assert!(raised.text().contains("raised"));
        let denied = interpret_gdb_output(1, "", "ptrace: Operation not permitted.\n");
        assert!(matches!(denied, Err(InjectError::Denied(_))));
        let nosym = interpret_gdb_output(
            1,
            "",
            "No symbol \"PyGILState_Ensure\" in current context.\n",
        );
        assert!(nosym.unwrap_err().text().contains("no Python C API"));
    }

    #[test]
    fn gdb_safe_paths() {
        assert!(gdb_safe(Path::new("/tmp/torchtop-attach-ab12/attach.py")).is_some());
        assert!(gdb_safe(Path::new("/tmp/it's")).is_none());
        assert!(gdb_safe(Path::new("/tmp/a\"b")).is_none());
    }

    #[test]
    fn slow_programs_are_stopped() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let err = output_within(cmd, Duration::from_millis(100), "sleep").unwrap_err();
        assert!(err.contains("did not finish"), "{err}");
    }
}
