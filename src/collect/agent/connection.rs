//! Opening one agent connection: which directory entries are agent sockets, a connect that never
//! waits, and the peer check (`SO_PEERCRED`: the server must be the directory's owner).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::sys::peer_credentials;

/// The pid in a socket file's name, `<decimal pid>.sock`; `None` for any other name.
pub(crate) fn socket_file_pid(name: &OsStr) -> Option<u32> {
    let digits = name.as_bytes().strip_suffix(b".sock")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits)
        .ok()?
        .parse()
        .ok()
        .filter(|&pid| pid > 0)
}

/// Why a connection could not be opened.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    pub(crate) reason: String,
    /// The socket is someone else's or breaks the rules, not merely unreachable.
    pub(crate) bad_input: bool,
}

/// A connected, checked, non-blocking stream and the pid of the process serving it.
pub(crate) struct Opened {
    pub(crate) stream: UnixStream,
    pub(crate) peer_pid: u32,
}

/// Connects to `path` without waiting and checks that `owner` serves it.
pub(crate) fn open(path: &Path, file_pid: u32, owner: u32) -> Result<Opened, Refusal> {
    let unreachable = |reason: String| Refusal {
        reason,
        bad_input: false,
    };
    let stream = connect_nonblocking(path).map_err(unreachable)?;
    let (peer_pid, peer_uid) = peer_credentials(&stream)
        .map_err(|e| unreachable(format!("cannot read the peer's credentials: {e}")))?;
    if peer_uid != owner {
        return Err(Refusal {
            reason: format!(
                "{} is served by uid {peer_uid}, but the directory belongs to uid {owner}",
                path.display()
            ),
            bad_input: true,
        });
    }
    Ok(Opened {
        stream,
        peer_pid: if peer_pid > 0 { peer_pid } else { file_pid },
    })
}

/// A Unix-socket connect that fails instead of waiting when the agent's backlog is full. The
/// stream stays non-blocking: the reader thread polls it, and a command that does not fit in
/// the socket's buffer fails at once instead of stalling the sampler.
fn connect_nonblocking(path: &Path) -> Result<UnixStream, String> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(format!(
            "{} is too long for a Unix socket path",
            path.display()
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cannot create a socket: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: addr is a valid sockaddr_un of `len` bytes and fd is an open socket.
    let rc = unsafe {
        libc::connect(
            owned.as_raw_fd(),
            std::ptr::addr_of!(addr).cast::<libc::sockaddr>(),
            len,
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::EAGAIN) => format!(
                "{} is not accepting connections (backlog full)",
                path.display()
            ),
            Some(libc::ECONNREFUSED) => format!("nothing listens on {}", path.display()),
            _ => format!("cannot connect to {}: {err}", path.display()),
        });
    }
    Ok(UnixStream::from(owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_file_names() {
        assert_eq!(socket_file_pid(OsStr::new("123.sock")), Some(123));
        for bad in [
            "x.sock",
            ".sock",
            "0.sock",
            "123.sock.tmp",
            "123",
            "-1.sock",
            "99999999999.sock",
        ] {
            assert_eq!(socket_file_pid(OsStr::new(bad)), None, "{bad}");
        }
    }
}
