//! Sending a signal to exactly the process the user saw.
//!
//! The order matters: a pidfd is opened first, then the start time is checked, then the
//! signal goes through the pidfd. A pidfd keeps naming the process it was opened on even if
//! that process exits and its pid is recycled, so once the check passes the signal cannot
//! reach another program. On kernels without pidfds (before 5.3) the check is followed by
//! kill(2), which leaves a window of a few microseconds.

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::Path;

use super::identity::{verify_identity, PROC_ROOT};
use rustix::process::{self, Pid, PidfdFlags};

use super::{checked_pid, ActionError, Denied, ProcessIdentity};

/// The signals torchtop offers, in the order of the F9 menu.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    Term,
    Kill,
    Int,
    Hup,
    Stop,
    Cont,
    Usr1,
    Usr2,
}

impl Signal {
    /// Every signal, in menu order.
    pub(crate) const ALL: [Signal; 8] = [
        Signal::Term,
        Signal::Kill,
        Signal::Int,
        Signal::Hup,
        Signal::Stop,
        Signal::Cont,
        Signal::Usr1,
        Signal::Usr2,
    ];

    /// The name without the SIG prefix, as menus show it: "TERM".
    pub(crate) fn short_name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
            Signal::Int => "INT",
            Signal::Hup => "HUP",
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
            Signal::Usr1 => "USR1",
            Signal::Usr2 => "USR2",
        }
    }

    /// The full name: "SIGTERM".
    pub(crate) fn name(self) -> String {
        format!("SIG{}", self.short_name())
    }

    /// The number on this platform (15 for SIGTERM on Linux).
    pub fn number(self) -> i32 {
        match self {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
            Signal::Int => libc::SIGINT,
            Signal::Hup => libc::SIGHUP,
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
            Signal::Usr1 => libc::SIGUSR1,
            Signal::Usr2 => libc::SIGUSR2,
        }
    }

    #[cfg(test)]
    pub(crate) fn from_number(number: i32) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.number() == number)
    }

    /// Accepts "TERM", "SIGTERM" or "term".
    pub fn from_name(name: &str) -> Option<Signal> {
        let upper = name.trim().to_ascii_uppercase();
        let short = upper.strip_prefix("SIG").unwrap_or(&upper);
        Signal::ALL.into_iter().find(|s| s.short_name() == short)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SIG{}", self.short_name())
    }
}

/// Sends `signal` to `target` if, and only if, its pid still has the start time the user saw.
pub fn send_signal(target: &ProcessIdentity, signal: Signal) -> Result<(), ActionError> {
    send_signal_in(
        Path::new(PROC_ROOT),
        target,
        signal,
        Method::PidfdIfAvailable,
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    PidfdIfAvailable,
    /// The path taken on kernels without pidfds; selectable so tests cover it everywhere.
    #[cfg_attr(not(test), allow(dead_code))]
    KillOnly,
}

fn send_signal_in(
    proc_root: &Path,
    target: &ProcessIdentity,
    signal: Signal,
    method: Method,
) -> Result<(), ActionError> {
    let pid = checked_pid(target.pid)?;
    let pidfd = match method {
        Method::PidfdIfAvailable => open_pidfd(pid, target.pid)?,
        Method::KillOnly => None,
    };
    // Checked after the pidfd is open: from here on the pidfd names the checked process.
    verify_identity(proc_root, target)?;
    match pidfd {
        Some(fd) => signal_pidfd(&fd, target.pid, signal),
        None => signal_pid(pid, target.pid, signal),
    }
}

/// `Ok(None)` where the kernel has no pidfd_open (ENOSYS), or where a seccomp filter refuses
/// unknown system calls with EPERM (older container runtimes do; pidfd_open itself never
/// needs permission).
fn open_pidfd(pid: libc::pid_t, target: u32) -> Result<Option<OwnedFd>, ActionError> {
    let Some(pid) = Pid::from_raw(pid) else {
        return Err(ActionError::InvalidPid { pid: target });
    };
    match process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) => match e.raw_os_error() {
            libc::ENOSYS | libc::EPERM => Ok(None),
            libc::ESRCH => Err(ActionError::Exited { pid: target }),
            libc::EINVAL => Err(ActionError::Io(format!(
                "cannot signal {target}: it is a thread, not a process"
            ))),
            errno => Err(os_error(target, "open", errno)),
        },
    }
}

/// The kernel's signal for ours; every [`Signal`] is a named POSIX signal, so this only fails
/// if that list ever grows a number the kernel does not name.
fn kernel_signal(target: u32, signal: Signal) -> Result<process::Signal, ActionError> {
    process::Signal::from_named_raw(signal.number())
        .ok_or_else(|| os_error(target, "signal", libc::EINVAL))
}

fn signal_pidfd(fd: &OwnedFd, target: u32, signal: Signal) -> Result<(), ActionError> {
    process::pidfd_send_signal(fd, kernel_signal(target, signal)?)
        .map_err(|e| signal_error(target, e.raw_os_error()))
}

fn signal_pid(pid: libc::pid_t, target: u32, signal: Signal) -> Result<(), ActionError> {
    // `pid` is positive (checked_pid), so it names one process, never a group.
    let Some(pid) = Pid::from_raw(pid) else {
        return Err(ActionError::InvalidPid { pid: target });
    };
    process::kill_process(pid, kernel_signal(target, signal)?)
        .map_err(|e| signal_error(target, e.raw_os_error()))
}

fn signal_error(target: u32, errno: i32) -> ActionError {
    match errno {
        libc::EPERM => ActionError::NotPermitted {
            pid: target,
            what: Denied::Signal,
        },
        libc::ESRCH => ActionError::Exited { pid: target },
        errno => os_error(target, "signal", errno),
    }
}

fn os_error(target: u32, verb: &str, errno: i32) -> ActionError {
    ActionError::Io(format!(
        "could not {verb} process {target}: {}",
        std::io::Error::from_raw_os_error(errno)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::current_identity;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    #[test]
    fn names_and_numbers_round_trip() {
        assert_eq!(Signal::ALL.len(), 8);
        for signal in Signal::ALL {
            assert_eq!(Signal::from_number(signal.number()), Some(signal));
            assert_eq!(Signal::from_name(&signal.name()), Some(signal));
            assert_eq!(
                Signal::from_name(&signal.short_name().to_lowercase()),
                Some(signal)
            );
        }
        assert_eq!(Signal::Term.number(), 15);
        assert_eq!(Signal::Kill.to_string(), "SIGKILL");
        assert_eq!(Signal::from_name("SIGSEGV"), None);
        assert_eq!(Signal::from_number(0), None);
    }

    #[test]
    fn the_kill_fallback_checks_identity_then_delivers() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let proc_root = Path::new(PROC_ROOT);
        let id = current_identity(proc_root, child.id()).unwrap();

        let stale = ProcessIdentity::new(id.pid, id.start_ticks + 1);
        let refused = send_signal_in(proc_root, &stale, Signal::Kill, Method::KillOnly);
        assert_eq!(refused, Err(ActionError::Reused { pid: id.pid }));
        assert!(
            child.try_wait().unwrap().is_none(),
            "a refused signal arrived"
        );

        send_signal_in(proc_root, &id, Signal::Term, Method::KillOnly).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn pid_zero_is_never_signalled() {
        let zero = ProcessIdentity::new(0, 0);
        assert_eq!(
            send_signal(&zero, Signal::Term),
            Err(ActionError::InvalidPid { pid: 0 })
        );
    }
}
