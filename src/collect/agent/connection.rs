//! Opening one agent connection: which directory entries are agent sockets, a connect that never
//! waits, and the peer check (`SO_PEERCRED`: the server must be the directory's owner, and the
//! process of the pid it names must still be that user's: a listener can hand its socket to a
//! child and end, leaving its pid to be reused by another user's process).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::format::path::named;
use crate::sys::peer_credentials;
use crate::sys::proc::{read_pid_stat, read_pid_status};

/// An agent socket's name, parsed: `<decimal pid>.sock`, or `<decimal pid>.<decimal pid
/// namespace inode>.sock`, the name an agent takes when the live agent of a process with the
/// same pid in another PID namespace holds `<pid>.sock` (containers that share one directory).
/// The pid is the one the agent's own namespace gives it, as in the plain form. The hub keys
/// sockets by directory and this whole name, so two such agents are two connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SocketName {
    pub(crate) pid: u32,
    /// The inode of the agent's PID namespace, when the name carries one.
    pub(crate) pid_ns: Option<u64>,
}

/// The longest namespace inode in a name: `u64::MAX` has 20 digits.
const MAX_NAMESPACE_DIGITS: usize = 20;

/// [`SocketName`] of a directory entry; `None` for any other name (a name form this monitor
/// does not know included), which the hub ignores.
pub(crate) fn socket_file_name(name: &OsStr) -> Option<SocketName> {
    let stem = name.as_bytes().strip_suffix(b".sock")?;
    let (pid, pid_ns) = match stem.iter().position(|&b| b == b'.') {
        None => (stem, None),
        Some(dot) => (&stem[..dot], Some(namespace_inode(&stem[dot + 1..])?)),
    };
    if pid.is_empty() || !pid.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let pid = std::str::from_utf8(pid).ok()?.parse().ok()?;
    (pid > 0).then_some(SocketName { pid, pid_ns })
}

/// A namespace inode as an agent writes it: digits without a leading zero, so that one socket
/// has one name, and no more of them than a `u64` holds.
fn namespace_inode(digits: &[u8]) -> Option<u64> {
    let canonical = digits.first().is_some_and(|&d| d != b'0')
        && digits.len() <= MAX_NAMESPACE_DIGITS
        && digits.iter().all(u8::is_ascii_digit);
    canonical.then(|| std::str::from_utf8(digits).ok()?.parse().ok())?
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
    /// When that process started (`/proc/PID/stat`), so that its figures are never put on a
    /// later process given the same pid; `None` when the peer's pid is not known here.
    pub(crate) start_ticks: Option<u64>,
}

/// Connects to the socket `path` (by the path `through`, which leads to the same socket through
/// the directory as it was opened and checked) without waiting, and checks that `owner` serves
/// it.
pub(crate) fn open(
    path: &Path,
    through: &Path,
    file: SocketName,
    owner: u32,
) -> Result<Opened, Refusal> {
    let unreachable = |reason: String| Refusal {
        reason,
        bad_input: false,
    };
    let stream = connect_nonblocking(path, through).map_err(unreachable)?;
    let (peer_pid, peer_uid) = peer_credentials(&stream)
        .map_err(|e| unreachable(format!("cannot read the peer's credentials: {e}")))?;
    if peer_uid != owner {
        return Err(Refusal {
            reason: format!(
                "{} is served by uid {peer_uid}, but the directory belongs to uid {owner}",
                named(path)
            ),
            bad_input: true,
        });
    }
    if peer_pid == 0 {
        if file.pid_ns.is_some() {
            // A name with a namespace carries a pid of that namespace, not one of the host's
            // (NVML's): taken as a pid here, it put one process's figures on another's row.
            return Err(unreachable(format!(
                "{} is served from a PID namespace this monitor cannot see, and its name \
                 gives no pid here (run torchtop in the host's PID namespace to read it)",
                named(path)
            )));
        }
        // The server is in a pid namespace this one cannot see: its own name is all there is
        // (the host's pid, which NVML reports, when the agent runs on the host).
        return Ok(Opened {
            stream,
            peer_pid: file.pid,
            start_ticks: None,
        });
    }
    let start_ticks = check_peer_process(path, peer_pid, peer_uid)?;
    Ok(Opened {
        stream,
        peer_pid,
        start_ticks: Some(start_ticks),
    })
}

/// The start time of `pid`, once its process is known to be wholly `uid`'s: its real and its
/// effective uid both. Either alone let a listener that then ran a setuid program (real uid the
/// user's, effective root's) put the user's figures on a row that shows root's process.
fn check_peer_process(path: &Path, pid: u32, uid: u32) -> Result<u64, Refusal> {
    let proc = Path::new("/proc");
    let gone = || Refusal {
        reason: format!("pid {pid}, which serves {}, has ended", named(path)),
        bad_input: false,
    };
    let stat = read_pid_stat(proc, pid).map_err(|_| gone())?;
    let status = read_pid_status(proc, pid).map_err(|_| gone())?;
    let [real, effective, ..] = status.uids.unwrap_or([status.uid; 4]);
    if real == uid && effective == uid {
        return Ok(stat.start_ticks);
    }
    let why = if real == uid {
        format!("runs with the rights of uid {effective}")
    } else if effective == uid {
        format!("is uid {real}'s process, run with uid {uid}'s rights (a setuid program)")
    } else {
        format!(
            "is now uid {real}'s process: the process that listened has ended and its pid \
             was reused"
        )
    };
    Err(Refusal {
        reason: format!(
            "{} is served by uid {uid} as pid {pid}, but pid {pid} {why}",
            named(path)
        ),
        bad_input: true,
    })
}

/// A Unix-socket connect that fails instead of waiting when the agent's backlog is full. The
/// stream stays non-blocking: the reader thread polls it, and a command that does not fit in
/// the socket's buffer fails at once instead of stalling the sampler.
fn connect_nonblocking(path: &Path, through: &Path) -> Result<UnixStream, String> {
    crate::sys::connect_unix_nonblocking(through).map_err(|e| match e.raw_os_error() {
        Some(libc::ENAMETOOLONG) => format!("{} is too long for a Unix socket path", named(path)),
        Some(libc::EAGAIN) => format!(
            "{} is not accepting connections (backlog full)",
            named(path)
        ),
        Some(libc::ECONNREFUSED) => format!("nothing listens on {}", named(path)),
        _ => format!("cannot connect to {}: {e}", named(path)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(name: &str) -> Option<SocketName> {
        socket_file_name(OsStr::new(name))
    }

    #[test]
    fn socket_file_names() {
        let plain = |pid| Some(SocketName { pid, pid_ns: None });
        assert_eq!(parsed("123.sock"), plain(123));
        // As before the namespace form: leading zeros in a pid are read.
        assert_eq!(parsed("0123.sock"), plain(123));
        assert_eq!(parsed("4294967295.sock"), plain(u32::MAX));
        for bad in [
            "x.sock",
            ".sock",
            "0.sock",
            "123.sock.tmp",
            "123",
            "-1.sock",
            "+1.sock",
            " 1.sock",
            "99999999999.sock",
            "4294967296.sock",
            "123.sock.new",
            "1.SOCK",
        ] {
            assert_eq!(parsed(bad), None, "{bad}");
        }
    }

    #[test]
    fn socket_file_names_with_a_pid_namespace() {
        let tagged = |pid, ns| {
            Some(SocketName {
                pid,
                pid_ns: Some(ns),
            })
        };
        assert_eq!(parsed("1.4026532175.sock"), tagged(1, 4_026_532_175));
        assert_eq!(parsed("7.4026531836.sock"), tagged(7, 4_026_531_836));
        assert_eq!(
            parsed("1.18446744073709551615.sock"),
            tagged(1, u64::MAX),
            "the largest inode a name can carry"
        );
        assert_ne!(parsed("1.4026532175.sock"), parsed("1.sock"));
        assert_ne!(parsed("1.4026532175.sock"), parsed("1.4026532176.sock"));
        for bad in [
            "1.18446744073709551616.sock",
            "1.000000000000000000001.sock",
            "1.04026532175.sock",
            "1.0.sock",
            "1..sock",
            ".4026532175.sock",
            "0.4026532175.sock",
            "x.4026532175.sock",
            "1.x.sock",
            "1.-4.sock",
            "1.2.3.sock",
            "1.4026532175.sock.new",
            "1.4026532175 .sock",
            "99999999999.4026532175.sock",
        ] {
            assert_eq!(parsed(bad), None, "{bad}");
        }
    }

    /// The names the agents make (the tch agent's, in the protocol module) are the names the
    /// hub reads.
    #[test]
    fn the_agents_names_are_read_back() {
        let dir = Path::new("/run/user/1000/torchtop");
        let names = crate::protocol::sockets::agent_socket_names(dir, 7, Some(4_026_532_175));
        let read: Vec<_> = (names.names.iter())
            .map(|path| socket_file_name(path.file_name().unwrap()))
            .collect();
        let name = |pid_ns| Some(SocketName { pid: 7, pid_ns });
        assert_eq!(read, [name(None), name(Some(4_026_532_175))]);
        assert_eq!(socket_file_name(names.staging.file_name().unwrap()), None);
    }

    /// A process of two users at once (here real uid 65534, effective root, as after a
    /// setuid program) is neither user's agent.
    #[test]
    fn a_process_whose_real_and_effective_uids_differ_serves_neither() {
        if crate::sys::effective_uid() != 0 {
            return; // setresuid to another user needs root; CI runs as root
        }
        let script = "import os, sys, time\n\
                      os.setresuid(65534, 0, 0)\n\
                      print('ready', flush=True)\n\
                      time.sleep(60)\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut ready = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready).unwrap();
        assert_eq!(ready.trim(), "ready");
        let path = Path::new("/tmp/torchtop-65534/1.sock");
        let as_nobody = check_peer_process(path, child.id(), 65534);
        let as_root = check_peer_process(path, child.id(), 0);
        let _ = child.kill();
        let _ = child.wait();
        let refused = as_nobody.unwrap_err();
        assert!(
            refused.reason.contains("runs with the rights of uid 0"),
            "{}",
            refused.reason
        );
        let refused = as_root.unwrap_err();
        assert!(
            refused
                .reason
                .contains("is uid 65534's process, run with uid 0's rights"),
            "{}",
            refused.reason
        );
    }
}
