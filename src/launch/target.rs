//! What /proc says about a process to attach to, and about torchtop itself: owner, state,
//! tracer, parent, executable, environment variables, mapped files and capabilities. The
//! parsing is [`crate::sys::proc`]'s, shared with the collectors and the actions; here the
//! failures become the sentences `run` and `attach` print.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::sys::proc::{self, MapLine, ProcError, PROC_ROOT};

const CAP_SYS_PTRACE: u32 = 19;

/// A process as /proc/PID/status and /proc/PID/exe describe it.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) pid: u32,
    pub(crate) comm: String,
    /// Real, effective, saved and filesystem uids.
    pub(crate) uids: [u32; 4],
    /// The state letter: R, S, D, T, t, Z, ...
    pub(crate) state: char,
    pub(crate) tracer_pid: u32,
    pub(crate) exe: Option<PathBuf>,
}

impl Target {
    /// Reads /proc/PID/status and /proc/PID/exe. Fails with a sentence when there is no such
    /// process or its status cannot be read.
    pub(crate) fn inspect(pid: u32) -> Result<Target, String> {
        let path = proc::pid_dir(Path::new(PROC_ROOT), pid).join("status");
        let text = proc::read_text(&path).map_err(|e| match e {
            ProcError::Gone(_) => format!("No process has pid {pid}."),
            e => format!("Cannot read /proc/{pid}/status: {e}."),
        })?;
        Target::from_status(pid, &text)
            .map(|t| Target {
                exe: std::fs::read_link(format!("/proc/{pid}/exe")).ok(),
                ..t
            })
            .ok_or_else(|| {
                format!("Cannot read the owner of process {pid} from /proc/{pid}/status.")
            })
    }

    fn from_status(pid: u32, text: &str) -> Option<Target> {
        let status = proc::parse_pid_status(text).ok()?;
        Some(Target {
            pid,
            comm: status.name.unwrap_or_else(|| "?".to_string()),
            uids: status.uids?,
            state: status.state.unwrap_or('?'),
            tracer_pid: status.tracer_pid,
            exe: None,
        })
    }

    /// The effective uid: whose files the process reads and writes.
    pub(crate) fn owner(&self) -> u32 {
        self.uids[1]
    }

    /// The executable's path as the kernel shows it, " (deleted)" suffix included.
    pub(crate) fn exe_text(&self) -> Option<String> {
        self.exe.as_ref().map(|e| e.to_string_lossy().into_owned())
    }

    /// Its memory map. Fails with a sentence when /proc/PID/maps cannot be read.
    pub(crate) fn maps(&self) -> Result<Vec<MapLine>, String> {
        let path = proc::pid_dir(Path::new(PROC_ROOT), self.pid).join("maps");
        let text = proc::read_text(&path)
            .map_err(|e| format!("Cannot read the memory map of process {}: {e}.", self.pid))?;
        Ok(proc::parse_maps(&text))
    }

    /// One variable of its environment as it was at exec, or `None`.
    pub(crate) fn environ_var(&self, name: &str) -> Result<Option<OsString>, String> {
        proc::read_environ_var(Path::new(PROC_ROOT), self.pid, name)
            .map_err(|e| format!("Cannot read the environment of process {}: {e}.", self.pid))
    }
}

/// The parent pid from /proc/PID/stat, or `None` once the process is gone.
fn parent_of(pid: u32) -> Option<u32> {
    proc::read_pid_stat(Path::new(PROC_ROOT), pid)
        .ok()
        .map(|stat| stat.ppid)
}

/// Whether `pid` descends from torchtop itself (what Yama's ptrace_scope 1 allows).
pub(crate) fn is_descendant_of_us(pid: u32) -> bool {
    let me = std::process::id();
    let mut current = pid;
    for _ in 0..4096 {
        match parent_of(current) {
            Some(parent) if parent == me => return true,
            Some(parent) if parent > 1 && parent != current => current = parent,
            _ => return false,
        }
    }
    false
}

/// Whether torchtop's effective capabilities include CAP_SYS_PTRACE.
pub(crate) fn we_have_cap_sys_ptrace() -> bool {
    proc::read_pid_status(Path::new(PROC_ROOT), std::process::id())
        .ok()
        .and_then(|status| status.cap_eff)
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// kernel.yama.ptrace_scope, or `None` without Yama.
pub(crate) fn yama_ptrace_scope() -> Option<u32> {
    proc::read_yama_ptrace_scope(Path::new(PROC_ROOT))
}

/// The last path component of a /proc path text.
pub(crate) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields() {
        let status = "Name:\tpython3\nState:\tS (sleeping)\nTracerPid:\t77\nUid:\t1\t2\t3\t4\n";
        let t = Target::from_status(9, status).unwrap();
        assert_eq!(
            (t.comm.as_str(), t.state, t.tracer_pid),
            ("python3", 'S', 77)
        );
        assert_eq!(t.uids, [1, 2, 3, 4]);
        assert_eq!(t.owner(), 2);
        assert!(Target::from_status(9, "Name:\tx\nUid:\t1\t2\n").is_none());
    }

    #[test]
    fn our_own_child_descends_from_us() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(is_descendant_of_us(child.id()));
        assert!(!is_descendant_of_us(1));
        let _ = child.kill();
        let _ = child.wait();
    }
}
