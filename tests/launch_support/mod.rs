//! Helpers shared by the `torchtop run`/`attach` tests: the Python interpreters on this machine,
//! children that are killed when a test ends, running a child as another user, and reading an
//! agent's stats through `AgentHub`. A test binary that uses it has `ci` (tests/common/ci.rs) at
//! its root.
// Shared by several test binaries, each of which uses a part: `pub` is their interface.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use torchtop::collect::agent::AgentHub;
use torchtop::model::TorchInfo;

/// The uid and gid of `nobody`.
pub const NOBODY: u32 = 65534;

pub fn fake_torch_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/fake_torch")
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Each distinct CPython 3 on this machine worth attaching to: the `python3` on PATH (its real
/// executable, through pyenv's shims) and the system's /usr/bin/python3. On the build machine
/// these are pyenv's 3.11 (linked to libpython3.11.so) and Debian's 3.11 (libpython linked in
/// statically), the two layouts the injector must handle.
pub fn interpreters() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    for candidate in ["python3", "/usr/bin/python3"] {
        let Ok(out) = Command::new(candidate)
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
        else {
            continue;
        };
        let exe = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let Ok(real) = exe.canonicalize() else {
            continue;
        };
        if out.status.success() && !found.contains(&real) {
            found.push(real);
        }
    }
    found
}

/// A child that is killed and reaped when the test ends, whatever happens.
pub struct Killed(pub Child);

impl Killed {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn first_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.trim().to_string()
}

/// Starts `python -c code` with the stand-in torch on its path; returns it and its stdout.
pub fn spawn_python(python: &Path, code: &str) -> (Killed, BufReader<ChildStdout>) {
    let mut child = Command::new(python)
        .args(["-c", code])
        .env("PYTHONPATH", fake_torch_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (Killed(child), stdout)
}

/// In the forked child, before exec: no supplementary groups, then `nobody`.
pub fn as_nobody(cmd: &mut Command) -> &mut Command {
    as_user(cmd, NOBODY)
}

/// In the forked child, before exec: no supplementary groups, then `uid` (and the group of the
/// same number), which no account needs to have.
pub fn as_user(cmd: &mut Command, uid: u32) -> &mut Command {
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls.
    unsafe {
        cmd.pre_exec(move || {
            let failed = libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0;
            if failed {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        })
    }
}

/// Polls `AgentHub` on `dir` until it has allocator stats for `pid`.
pub fn stats_for(dir: &Path, pid: u32) -> TorchInfo {
    let mut hub = AgentHub::new(dir.to_path_buf());
    let deadline = Instant::now() + crate::ci::PATIENCE;
    loop {
        let infos = hub.poll();
        if let Some(info) = infos.get(&pid).filter(|i| !i.devices.is_empty()) {
            return info.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no stats for pid {pid}; hub log: {:?}",
            hub.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `cond` every 10 ms; false once `limit` has passed without it holding.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A python that `nobody` can run (pyenv's lives under /root, which nobody cannot enter).
pub fn python_for_nobody() -> Option<PathBuf> {
    interpreters().into_iter().find(|python| {
        as_nobody(Command::new(python).args(["-c", "pass"]))
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Starts `python -c code` as nobody with exactly `env`; waits for its first line.
pub fn nobody_python(python: &Path, code: &str, env: &[(&str, &Path)]) -> Killed {
    python_as(NOBODY, python, code, env)
}

/// Starts `python -c code` as `uid` with exactly `env`; waits for its first line.
pub fn python_as(uid: u32, python: &Path, code: &str, env: &[(&str, &Path)]) -> Killed {
    let mut cmd = Command::new(python);
    cmd.args(["-c", code]).env_clear().stdout(Stdio::piped());
    for (key, value) in env {
        cmd.env(key, value);
    }
    let mut child = as_user(&mut cmd, uid).spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let child = Killed(child);
    assert_eq!(first_line(&mut out), "ready");
    child
}

/// A scratch directory that `nobody` can pass through.
pub fn open_base() -> tempfile::TempDir {
    let base = tempfile::Builder::new()
        .prefix("tt-root-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    base
}

pub fn dir_of(path: &Path, uid: u32, mode: u32) -> PathBuf {
    std::fs::create_dir(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
    path.to_path_buf()
}

/// (name, owner uid) of each entry of `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<(String, u32)> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let uid = std::fs::symlink_metadata(e.path()).unwrap().uid();
            (e.file_name().to_string_lossy().into_owned(), uid)
        })
        .collect();
    entries.sort();
    entries
}
