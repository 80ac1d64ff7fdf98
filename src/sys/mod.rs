//! The operating system below torchtop: /proc ([`proc`]) and the few system calls several
//! layers share (who we are, who is on the other end of a socket, units of /proc figures, user
//! names). Nothing here knows about GPUs, rules or the screen.

pub(crate) mod cgroup;
pub(crate) mod proc;

use std::ffi::CStr;
use std::io;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;

/// Clock ticks per second (USER_HZ), the unit of /proc/PID/stat times; 100 if sysconf fails.
pub(crate) fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// The page size, the unit of the rss field of /proc/PID/stat; 4096 if sysconf fails.
pub(crate) fn page_size_bytes() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

/// The login name of a uid from the passwd database (files, LDAP, ... through NSS); `None`
/// when there is no entry, as for uids that exist only inside a container. This may block on
/// a network lookup, so callers cache the answer.
pub(crate) fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: passwd is plain data that getpwuid_r fills in.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call and buf.len() is buf's true length; the
        // strings in `entry` point into buf, which outlives their use below.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut entry,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || result.is_null() || entry.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success pw_name is a NUL-terminated string inside buf.
        let name = unsafe { CStr::from_ptr(entry.pw_name) };
        return Some(name.to_string_lossy().into_owned());
    }
}

/// The effective uid of this process.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The (pid, uid) of the process on the other end, from `SO_PEERCRED`: the listener for a
/// client, the connecting process for a server.
pub(crate) fn peer_credentials(stream: &UnixStream) -> io::Result<(u32, u32)> {
    // SAFETY: ucred is plain old data; all-zero is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len point to writable memory of the sizes passed.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((u32::try_from(cred.pid).unwrap_or(0), cred.uid))
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
