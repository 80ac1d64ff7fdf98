//! One process held by its pidfd, the kernel's handle to one process: a pid that its process
//! gives up can be taken by another, but a pidfd keeps naming the first. `torchtop attach` holds
//! its target this way from its first /proc read to its last step, so that a target that exits
//! and has its pid taken (by a root process, say) is never the one injected or signalled.
//! Without pidfds (before Linux 5.3, or under a seccomp filter that refuses the call) the pid
//! and its start time stand in, as the actions check them.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{self, Pid, PidfdFlags};

use super::proc::{read_pid_stat, PROC_ROOT};

/// The process that had a pid when it was held.
#[derive(Debug)]
pub(crate) struct HeldProcess {
    pid: u32,
    fd: Option<OwnedFd>,
    /// Field 22 of /proc/PID/stat when it was held.
    start_ticks: u64,
}

impl HeldProcess {
    /// Holds the process that has `pid` now. Fails with ESRCH when there is none, or when it
    /// exited while it was being held (what was read of it may be another process's).
    pub(crate) fn hold(pid: u32) -> io::Result<HeldProcess> {
        let gone = || io::Error::from_raw_os_error(libc::ESRCH);
        let raw = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(gone)?;
        let fd = match process::pidfd_open(raw, PidfdFlags::empty()) {
            Ok(fd) => Some(fd),
            Err(Errno::NOSYS | Errno::PERM) => None,
            Err(e) => return Err(e.into()),
        };
        // Read after the pidfd is open and checked after: the start time is then its process's.
        let start_ticks = read_pid_stat(Path::new(PROC_ROOT), pid)
            .map_err(|_| gone())?
            .start_ticks;
        let held = HeldProcess {
            pid,
            fd,
            start_ticks,
        };
        if held.is_running() {
            Ok(held)
        } else {
            Err(gone())
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the held process still runs. While it does, its pid is its own: whatever was
    /// read of that pid since it was held, and whatever holds that pid now (a ptrace seize),
    /// is this process's.
    pub(crate) fn is_running(&self) -> bool {
        match &self.fd {
            // A pidfd polls readable once its process has exited.
            Some(fd) => {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                let now = Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                matches!(poll(&mut fds, Some(&now)), Ok(0))
            }
            None => read_pid_stat(Path::new(PROC_ROOT), self.pid)
                .is_ok_and(|stat| stat.start_ticks == self.start_ticks && stat.state != 'Z'),
        }
    }

    /// Sends signal number `signal` to the held process: through its pidfd, which cannot reach
    /// another process; without one, by pid once its start time is checked. Any number the
    /// kernel takes, real-time ones included: these are signals the process was sent and a
    /// tracer held back (rustix's `Signal` names only the classic ones).
    pub(crate) fn signal(&self, signal: i32) -> io::Result<()> {
        let rc = match &self.fd {
            // SAFETY: pidfd_send_signal(2) with a pidfd we own, a signal number the kernel
            // checks, no siginfo (null) and no flags: no memory of ours is read or written.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            },
            None if self.is_running() => {
                let pid = libc::pid_t::try_from(self.pid).map_err(|_| Errno::SRCH)?;
                // SAFETY: kill(2) on one process (the pid is positive); it takes no memory.
                i64::from(unsafe { libc::kill(pid, signal) })
            }
            None => return Err(io::Error::from_raw_os_error(libc::ESRCH)),
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_child_runs_until_it_ends_and_no_pid_is_held_twice() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let held = HeldProcess::hold(child.id()).unwrap();
        assert_eq!(held.pid(), child.id());
        assert!(held.is_running());
        // A real-time signal too: the injector gives back whatever the process was sent.
        held.signal(libc::SIGRTMIN()).unwrap();
        held.signal(libc::SIGKILL).unwrap();
        let _ = child.wait();
        assert!(!held.is_running(), "it was killed and reaped");
        let error = held.signal(libc::SIGTERM).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ESRCH), "{error}");
        let error = HeldProcess::hold(child.id()).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ESRCH), "{error}");
    }

    #[test]
    fn an_exited_but_unreaped_child_does_not_run() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let held = HeldProcess::hold(child.id());
        // `true` may have exited before it was held; once it has, it never runs again.
        crate::test_ci::wait_until("true to exit", || {
            held.as_ref().map_or(true, |h| !h.is_running())
        });
        let _ = child.wait();
    }
}
