//! The operating system below torchtop: /proc ([`proc`]) and the few system calls several
//! layers share (who we are, who is on the other end of a socket, units of /proc figures, user
//! names, which core a thread runs on). Nothing here knows about GPUs, rules or the screen.

pub(crate) mod alarm;
pub(crate) mod cgroup;
pub(crate) mod kept;
pub(crate) mod pidfd;
pub(crate) mod proc;
pub(crate) mod sched;

/// A map keyed by pid (or another small number): hashed with aHash, as SipHash cost more than
/// the lookups' other work in the per-refresh join (the keys are the kernel's, not a peer's).
pub(crate) type PidMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;

use std::io;
use std::os::unix::net::UnixStream;

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

/// Clock ticks per second (USER_HZ), the unit of /proc/PID/stat times, from the auxiliary
/// vector; 100 (the value on every mainstream Linux) if the kernel gave none.
pub(crate) fn clock_ticks_per_second() -> u64 {
    Some(rustix::param::clock_ticks_per_second())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// The page size, the unit of the rss field of /proc/PID/stat.
pub(crate) fn page_size_bytes() -> u64 {
    rustix::param::page_size() as u64
}

/// The login name of a uid from the passwd database (files, LDAP, ... through NSS); `None`
/// when there is no entry, as for uids that exist only inside a container. This may block on
/// a network lookup, so callers cache the answer.
pub(crate) fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|user| user.name)
}

/// Whether the passwd database (through NSS, so perhaps over the network) knows a user of
/// this login name.
pub(crate) fn user_exists(name: &str) -> bool {
    nix::unistd::User::from_name(name).ok().flatten().is_some()
}

/// Whether `signal` was ignored (SIG_IGN) when this process started, as `nohup` leaves
/// SIGHUP: a program run that way must leave it ignored, or it dies at logout after all.
pub(crate) fn ignored(signal: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `current`, a
    // zeroed sigaction (a valid value of that C struct).
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &raw mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}

/// The effective uid of this process.
pub(crate) fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The user who ran torchtop: the real uid, or under `sudo` the uid sudo came from
/// (`SUDO_UID`, set by sudo in our own environment), so "only my processes" means the
/// admin's own jobs and not root's.
pub(crate) fn invoking_uid() -> u32 {
    let real = rustix::process::getuid().as_raw();
    if real != 0 {
        return real;
    }
    std::env::var("SUDO_UID")
        .ok()
        .and_then(|uid| uid.trim().parse().ok())
        .unwrap_or(real)
}

/// Connects to the Unix socket at `path` without waiting: a listener whose backlog is full
/// gives `EAGAIN` at once instead of holding the caller (the listener may be another user's,
/// and keep it full on purpose). The stream is left non-blocking. `path` too long for a socket
/// address gives `ENAMETOOLONG`.
pub(crate) fn connect_unix_nonblocking(path: &std::path::Path) -> io::Result<UnixStream> {
    use rustix::net::{self, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let addr =
        SocketAddrUnix::new(path).map_err(|_| io::Error::from_raw_os_error(libc::ENAMETOOLONG))?;
    let socket = net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    net::connect(&socket, &addr)?;
    Ok(UnixStream::from(socket))
}

/// Refuses a directory that another user could swap or fill between our check and our write:
/// it and every directory above it must be owned by us or root, and writable by nobody else
/// (a sticky directory such as /tmp excepted). Root saving F2's settings under `sudo -E` into
/// a path a user chose, or recording into a directory a user owns, must not become a write
/// wherever that user likes (a parent renamed and replaced by a symlink between two writes).
/// Both the path as given and the path it resolves to are checked, since the writes go through
/// the path as given: a symlink on the way must be ours or root's, in a directory that is.
pub(crate) fn refuse_unsafe_directory(dir: &std::path::Path) -> io::Result<()> {
    let given = std::path::absolute(dir)?;
    let resolved = std::fs::canonicalize(dir)?;
    for step in given.ancestors().chain(resolved.ancestors()) {
        refuse_unsafe_step(step)?;
    }
    Ok(())
}

/// One directory or symlink on the way to where we write; see [`refuse_unsafe_directory`].
fn refuse_unsafe_step(step: &std::path::Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = effective_uid();
    let meta = std::fs::symlink_metadata(step)?;
    let owner_ok = meta.uid() == me || meta.uid() == 0;
    // A symlink's own mode means nothing; its owner alone can replace it (in a sticky directory).
    let others_write =
        !meta.file_type().is_symlink() && meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0;
    if owner_ok && !others_write {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} belongs to another user or others can write to it",
            crate::format::escape(&step.to_string_lossy())
        ),
    ))
}

/// The (pid, uid) of the process on the other end, from `SO_PEERCRED`: the listener for a
/// client, the connecting process for a server. The pid is 0 when the peer lives in another
/// pid namespace, which is why this goes through nix (a plain integer) rather than rustix
/// (whose non-zero `Pid` cannot hold that 0).
pub(crate) fn peer_credentials(stream: &UnixStream) -> io::Result<(u32, u32)> {
    let cred = getsockopt(stream, PeerCredentials)?;
    Ok((u32::try_from(cred.pid()).unwrap_or(0), cred.uid()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_users() {
        assert!(clock_ticks_per_second() >= 1);
        assert!(page_size_bytes().is_power_of_two());
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(user_name(3_999_999_999), None);
    }

    #[test]
    fn peer_credentials_name_the_other_end() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(
            peer_credentials(&a).unwrap(),
            (std::process::id(), effective_uid())
        );
    }
}
