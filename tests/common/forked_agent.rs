//! Fake agents with a pid each: a socket `<dir>/<pid>.sock` that a forked child of this process
//! listens on (so `SO_PEERCRED`, the socket's name and a live process agree), while this process
//! accepts and talks. Hundreds of them cost hundreds of sleeping children, not threads. Used by
//! the agent hub's unit tests (through `#[path]`), its integration tests and the attack benchmark.
// Shared by several test binaries, each of which uses a part: `pub` is their interface.
#![allow(dead_code, unreachable_pub)]

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One fake agent; its child is killed and reaped on drop.
pub struct ForkedAgent {
    pub pid: u32,
    pub listener: UnixListener,
}

impl ForkedAgent {
    /// Forks a child that listens on `<dir>/<child pid>.sock` and then sleeps.
    pub fn bind(dir: &Path) -> Self {
        Self::bind_as(dir, None)
    }

    /// [`ForkedAgent::bind`], with the child switching to `uid` (and the same gid) before it
    /// listens, so that `SO_PEERCRED` names that user: another user's agent, when run as root.
    pub fn bind_as(dir: &Path, uid: Option<u32>) -> Self {
        let (go_read, go_write) = pipe();
        let (ready_read, ready_write) = pipe();
        // SAFETY: plain socket(2) call; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
        // SAFETY: fd is a fresh descriptor nothing else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: fork(2); the child makes only async-signal-safe calls (prctl, read, setres*id,
        // listen, write, pause), as the child of a multi-threaded process must.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", io::Error::last_os_error());
        if child == 0 {
            // SAFETY: async-signal-safe system calls on descriptors this process holds.
            unsafe {
                // Only the parent keeps these ends, so a parent that dies unblocks the read.
                libc::close(go_write.as_raw_fd());
                libc::close(ready_read.as_raw_fd());
                let mut byte = 0u8;
                libc::read(go_read.as_raw_fd(), std::ptr::addr_of_mut!(byte).cast(), 1);
                if let Some(uid) = uid {
                    // Raw system calls: glibc's wrappers would try to signal the parent's threads.
                    libc::syscall(libc::SYS_setresgid, uid, uid, uid);
                    libc::syscall(libc::SYS_setresuid, uid, uid, uid);
                }
                // After the uid change, which clears it.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                libc::listen(socket.as_raw_fd(), 128);
                libc::write(ready_write.as_raw_fd(), std::ptr::addr_of!(byte).cast(), 1);
                loop {
                    libc::pause();
                }
            }
        }
        let pid = child as u32;
        bind(&socket, &dir.join(format!("{pid}.sock")));
        drop((go_read, ready_write));
        let mut byte = [0u8];
        std::fs::File::from(go_write).write_all(&byte).unwrap();
        std::fs::File::from(ready_read)
            .read_exact(&mut byte)
            .unwrap();
        ForkedAgent {
            pid,
            listener: UnixListener::from(socket),
        }
    }

    /// The next connection (blocking), or `None` after `timeout`.
    pub fn accept(&self, timeout: Duration) -> Option<UnixStream> {
        self.listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + timeout;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    return Some(stream);
                }
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => return None,
            }
        }
    }
}

impl Drop for ForkedAgent {
    fn drop(&mut self) {
        let pid = self.pid as libc::pid_t;
        // SAFETY: signalling and reaping our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe: {}", io::Error::last_os_error());
    // SAFETY: both descriptors are fresh and owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn bind(socket: &OwnedFd, path: &Path) {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    assert!(bytes.len() < addr.sun_path.len(), "socket path too long");
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: addr is a valid sockaddr_un of `len` bytes.
    let rc = unsafe { libc::bind(socket.as_raw_fd(), std::ptr::addr_of!(addr).cast(), len) };
    assert_eq!(
        rc,
        0,
        "bind {}: {}",
        path.display(),
        io::Error::last_os_error()
    );
}

/// A thread that accepts on every agent's socket and writes a greeting to each connection,
/// until it is stopped or dropped; the connections stay open until then.
pub struct Greeter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<UnixStream>>>,
}

impl Greeter {
    pub fn start(listeners: Vec<UnixListener>, greeting: Vec<u8>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || greet_all(&listeners, &greeting, &stopped));
        Greeter {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops greeting; returns the connections, still open.
    pub fn stop(mut self) -> Vec<UnixStream> {
        self.finish()
    }

    fn finish(&mut self) -> Vec<UnixStream> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .map(|t| t.join().expect("the greeter thread"))
            .unwrap_or_default()
    }
}

impl Drop for Greeter {
    fn drop(&mut self) {
        self.finish();
    }
}

fn greet_all(listeners: &[UnixListener], greeting: &[u8], stop: &AtomicBool) -> Vec<UnixStream> {
    let mut streams = Vec::new();
    for listener in listeners {
        listener.set_nonblocking(true).unwrap();
    }
    while !stop.load(Ordering::SeqCst) {
        for listener in listeners {
            if let Ok((mut stream, _)) = listener.accept() {
                let _ = stream.write_all(greeting);
                streams.push(stream);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    streams
}
