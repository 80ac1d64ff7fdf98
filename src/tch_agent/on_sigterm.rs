//! The socket removed when SIGTERM ends the program. SIGTERM's default disposition ends a
//! process without running `atexit`, so the exit hook never sees it, yet the protocol asks an
//! agent to remove its socket then too (assets/agent-protocol.md, "Permissions and trust"), as
//! the Python agent does. Where SIGTERM still has its default disposition when the agent
//! starts, a handler removes the socket and the process then dies of SIGTERM as it would have;
//! a program that handles or ignores SIGTERM keeps its own way, whether it set it before the
//! agent started or after. The handler is armed before the socket is put where a launcher can
//! find it: a SIGTERM sent as soon as the socket appeared (a test does that) left it behind.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use super::socket::FileId;

/// The most names the socket may have: its staging name and the two it is put in place under.
const NAMES: usize = 3;
/// The names under which the handler removes the socket (leaked, NUL-terminated paths), null
/// while no agent runs. Armed before the socket is put in place, it may be under any of them.
static SOCKETS: [AtomicPtr<libc::c_char>; NAMES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; NAMES];
/// The process that created the socket: a forked child that dies of SIGTERM leaves it alone.
static OWNER: AtomicU32 = AtomicU32::new(0);
/// The socket file bound (device, inode): a file at the path that is not that one (another
/// agent's, of our pid in another PID namespace, once ours was gone) is left alone.
static FILE_DEV: AtomicU64 = AtomicU64::new(0);
static FILE_INO: AtomicU64 = AtomicU64::new(0);

/// The socket `file`, made by this process, is removed if SIGTERM ends it, under whichever of
/// `paths` it is then (at most [`NAMES`]; the file alone is removed, never another at a path).
/// Installs the handler only where SIGTERM has its default disposition; a path with a NUL byte
/// in it (which no socket has) is not armed. Fits [`super::socket::BeforePlacing`].
pub(super) fn arm(paths: &[&Path], file: FileId) {
    let mut raw = [std::ptr::null_mut(); NAMES];
    for (slot, path) in raw.iter_mut().zip(paths) {
        if let Ok(path) = CString::new(path.as_os_str().as_bytes()) {
            // Leaked: a handler may read it at any moment, so it is never freed. A few paths per
            // start.
            *slot = path.into_raw();
        }
    }
    arm_raw(raw, file);
}

/// [`arm`] with the paths already made, using only async-signal-safe calls (for a forked test
/// child).
fn arm_raw(paths: [*mut libc::c_char; NAMES], file: FileId) {
    OWNER.store(std::process::id(), Ordering::Release);
    FILE_DEV.store(file.0, Ordering::Release);
    FILE_INO.store(file.1, Ordering::Release);
    for (slot, path) in SOCKETS.iter().zip(paths) {
        slot.store(path, Ordering::Release);
    }
    install();
}

/// The agent stopped and removed its socket itself: the handler, if installed, only dies.
pub(super) fn disarm() {
    for slot in &SOCKETS {
        slot.store(std::ptr::null_mut(), Ordering::Release);
    }
}

/// Installs [`on_sigterm`] where SIGTERM has its default disposition.
fn install() {
    // SAFETY: sigaction with a null new action only reads the current one into `current`,
    // a zeroed sigaction (a valid value of that C struct).
    let default = unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGTERM, std::ptr::null(), &raw mut current) == 0
            && current.sa_sigaction == libc::SIG_DFL
    };
    if !default {
        return;
    }
    // SAFETY: `on_sigterm` is an extern "C" fn(c_int) that makes only async-signal-safe calls
    // and never unwinds; the action is fully initialized (zeroed, then set).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigterm as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // Reset to the default on entry: the SIGTERM raised below then ends the process as
        // soon as the handler returns (SIGTERM stays blocked until then).
        action.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
        libc::sigemptyset(&raw mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &raw const action, std::ptr::null_mut());
    }
}

/// Removes the socket if this process made it and it is still the file bound, then dies of
/// SIGTERM.
/// Called by a handler installed after it (tokio's and signal-hook's call the one they found),
/// it does nothing: that program handles SIGTERM itself, and a SIGTERM raised under its
/// handler would come straight back to it, for ever.
extern "C" fn on_sigterm(_signal: libc::c_int) {
    // SAFETY: sigaction, getpid and raise are async-signal-safe; `current` is a zeroed C struct
    // the call fills.
    unsafe {
        // Entered from the kernel, SA_RESETHAND has put the default back already.
        let mut current: libc::sigaction = std::mem::zeroed();
        let ours = libc::sigaction(libc::SIGTERM, std::ptr::null(), &raw mut current) == 0
            && current.sa_sigaction == libc::SIG_DFL;
        if !ours {
            return;
        }
        if libc::getpid() as u32 == OWNER.load(Ordering::Acquire) {
            for slot in &SOCKETS {
                remove_if_bound(slot.load(Ordering::Acquire));
            }
        }
        libc::raise(libc::SIGTERM);
    }
}

/// Unlinks `path` if it is the socket file bound; nothing for a null path. Async-signal-safe.
fn remove_if_bound(path: *const libc::c_char) {
    if path.is_null() {
        return;
    }
    let bound = (
        FILE_DEV.load(Ordering::Acquire),
        FILE_INO.load(Ordering::Acquire),
    );
    // SAFETY: lstat and unlink are async-signal-safe; `stat` is a zeroed C struct lstat fills;
    // `path` is a NUL-terminated string that is never freed.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        if libc::lstat(path, &raw mut stat) == 0
            && stat.st_mode & libc::S_IFMT == libc::S_IFSOCK
            && (stat.st_dev, stat.st_ino) == bound
        {
            libc::unlink(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;

    use super::*;

    /// How a forked child ended: `Ok(signal)` if a signal ended it, `Err(exit code)` otherwise.
    fn reap(child: libc::pid_t) -> Result<i32, i32> {
        let mut status = 0;
        // SAFETY: waitpid on our own child, with a valid status pointer.
        let reaped = unsafe { libc::waitpid(child, &raw mut status, 0) };
        assert_eq!(reaped, child, "{}", std::io::Error::last_os_error());
        if libc::WIFSIGNALED(status) {
            Ok(libc::WTERMSIG(status))
        } else {
            Err(libc::WEXITSTATUS(status))
        }
    }

    /// A bound socket in a fresh directory, and its path as the handler takes it.
    fn socket() -> (tempfile::TempDir, PathBuf, UnixListener, Armed) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("4242.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let raw = CString::new(path.as_os_str().as_bytes())
            .unwrap()
            .into_raw();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let armed = Armed(raw, (meta.dev(), meta.ino()));
        (dir, path, listener, armed)
    }

    /// What [`arm_raw`] takes: the path and the file bound there.
    #[derive(Clone, Copy)]
    struct Armed(*mut libc::c_char, FileId);

    impl Armed {
        fn arm(self) {
            arm_raw([std::ptr::null_mut(), self.0, std::ptr::null_mut()], self.1);
        }
    }

    /// Runs `body` in a forked child, which then exits with the code `body` returns, and says
    /// how the child ended: `Ok(signal)` if a signal ended it, `Err(exit code)` otherwise.
    /// `body` must make only async-signal-safe calls (the test harness has other threads).
    fn in_child(body: impl FnOnce() -> i32) -> Result<i32, i32> {
        // SAFETY: fork(2); the child runs `body`, which keeps to async-signal-safe calls and
        // atomic stores, then `_exit`, never returning into the test harness.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
        if child == 0 {
            let code = body();
            // SAFETY: _exit has no preconditions.
            unsafe { libc::_exit(code) };
        }
        reap(child)
    }

    /// Arms the handler for `armed` and raises SIGTERM.
    fn arm_and_raise(armed: Armed) {
        armed.arm();
        // SAFETY: raise has no preconditions.
        unsafe { libc::raise(libc::SIGTERM) };
    }

    #[test]
    fn sigterm_removes_the_socket_and_still_ends_the_process() {
        let (_dir, path, _listener, armed) = socket();
        let ended = in_child(|| {
            arm_and_raise(armed);
            0
        });
        assert_eq!(ended, Ok(libc::SIGTERM), "it dies of SIGTERM");
        assert!(!path.exists(), "the socket is removed");
    }

    #[test]
    fn a_program_that_ignores_sigterm_keeps_its_way_and_its_socket() {
        let (_dir, path, _listener, armed) = socket();
        let ended = in_child(|| {
            // SAFETY: signal(2) with SIG_IGN.
            unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
            arm_and_raise(armed);
            0
        });
        assert_eq!(ended, Err(0), "SIGTERM stays ignored");
        assert!(path.exists(), "nothing removed the socket");
    }

    /// A forked child of the agent's process shares the handler but not the socket.
    #[test]
    fn a_forked_child_dying_of_sigterm_leaves_its_parents_socket() {
        let (_dir, path, _listener, armed) = socket();
        let ended = in_child(|| {
            armed.arm();
            let forked = in_child(|| {
                // SAFETY: raise has no preconditions.
                unsafe { libc::raise(libc::SIGTERM) };
                0
            });
            let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
            // SAFETY: lstat fills `stat`, which is not read.
            let kept = unsafe { libc::lstat(armed.0, stat.as_mut_ptr()) } == 0;
            if forked != Ok(libc::SIGTERM) || !kept {
                return 3;
            }
            arm_and_raise(armed);
            0
        });
        assert_eq!(
            ended,
            Ok(libc::SIGTERM),
            "exit 3: the forked child removed the socket or did not die of SIGTERM"
        );
        assert!(!path.exists(), "the agent's own process removed it");
    }

    /// Set by [`chaining`], the handler a program installs after the agent's.
    static CHAINED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    /// A program's own SIGTERM handler that calls the one it found, as tokio's and
    /// signal-hook's do.
    extern "C" fn chaining(signal: libc::c_int) {
        on_sigterm(signal);
        CHAINED.store(true, Ordering::SeqCst);
    }

    /// A review: called by a later handler, the agent's raised SIGTERM under that handler, which
    /// called it again, for ever (a thread spinning, the program's shutdown never done).
    #[test]
    fn a_later_handler_that_calls_the_agents_keeps_its_process_and_socket() {
        let (_dir, path, _listener, armed) = socket();
        let ended = in_child(|| {
            let chaining = chaining as extern "C" fn(libc::c_int) as libc::sighandler_t;
            // SAFETY: alarm ends a child that loops; signal installs a handler that makes only
            // async-signal-safe calls.
            unsafe {
                libc::alarm(10);
                armed.arm();
                libc::signal(libc::SIGTERM, chaining);
                libc::raise(libc::SIGTERM);
            }
            if CHAINED.load(Ordering::SeqCst) {
                0
            } else {
                5
            }
        });
        assert_eq!(ended, Err(0), "SIGALRM (14): it looped");
        assert!(
            path.exists(),
            "the program's own shutdown removes it, at exit"
        );
    }

    /// Armed while the socket still had its staging name, as the agent now arms: SIGTERM once
    /// it was put in place removes it there, and leaves another socket at the third name.
    #[test]
    fn armed_before_placing_it_removes_the_socket_under_the_name_it_got() {
        let (dir, staging, _listener, armed) = socket();
        let placed = dir.path().join("4242.9.sock");
        let other = dir.path().join("4243.sock");
        let _theirs = UnixListener::bind(&other).unwrap();
        let raw = |path: &PathBuf| {
            CString::new(path.as_os_str().as_bytes())
                .unwrap()
                .into_raw()
        };
        let paths = [armed.0, raw(&other), raw(&placed)];
        let ended = in_child(|| {
            arm_raw(paths, armed.1);
            // SAFETY: link and unlink on NUL-terminated paths; raise has no preconditions.
            unsafe {
                if libc::link(paths[0], paths[2]) != 0 || libc::unlink(paths[0]) != 0 {
                    return 6;
                }
                libc::raise(libc::SIGTERM);
            }
            0
        });
        assert_eq!(
            ended,
            Ok(libc::SIGTERM),
            "exit 6: could not link it in place"
        );
        assert!(!placed.exists(), "the socket put in place outlived SIGTERM");
        assert!(!staging.exists());
        assert!(other.exists(), "another agent's socket was removed");
    }

    #[test]
    fn a_stopped_agent_leaves_the_file_at_its_path_alone() {
        let (_dir, path, _listener, armed) = socket();
        let ended = in_child(|| {
            armed.arm();
            disarm();
            // SAFETY: raise has no preconditions.
            unsafe { libc::raise(libc::SIGTERM) };
            0
        });
        assert_eq!(ended, Ok(libc::SIGTERM));
        assert!(path.exists(), "a later agent's socket at that path stays");
    }

    /// Another agent of our pid (in another PID namespace) took the path once ours was gone
    /// from it: SIGTERM removed that one, which vanished from every monitor.
    #[test]
    fn sigterm_leaves_a_socket_at_the_path_that_is_not_the_one_bound() {
        let (dir, path, listener, armed) = socket();
        drop(listener);
        // Moved away rather than removed, so that the new socket cannot get its inode number.
        std::fs::rename(&path, dir.path().join("gone")).unwrap();
        let _theirs = UnixListener::bind(&path).unwrap();
        let ended = in_child(|| {
            arm_and_raise(armed);
            0
        });
        assert_eq!(ended, Ok(libc::SIGTERM), "it dies of SIGTERM");
        assert!(path.exists(), "the other agent's socket was removed");
    }
}
