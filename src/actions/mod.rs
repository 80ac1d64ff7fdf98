//! Signals and renice, with identity checks and typed errors.
//!
//! This module owns every change torchtop makes to other processes. A process is named by a
//! [`ProcessIdentity`] (pid plus start time), and every action first checks that the pid still
//! belongs to the process the user saw; a recycled pid is refused with
//! [`ActionError::Reused`]. Signals go through a pidfd where the kernel has one, so the check
//! and the signal hit the same process. Failures are [`ActionError`]s whose `Display` is a
//! sentence fit for the status line.
//!
//! Everything here is a direct system call: no shell and no external program is ever run, and
//! nothing panics. Each call is short but does block on /proc reads, so callers on the UI task
//! should run it with `spawn_blocking`.

pub(crate) mod identity;
pub(crate) mod renice;
pub(crate) mod request;
pub(crate) mod signal;

use std::fmt;

pub use crate::model::ProcessIdentity;
pub use identity::current_identity;
pub use renice::{adjust_nice, renice, NICE_MAX, NICE_MIN};
pub(crate) use request::{perform, Action, ActionReport, ActionRequest, ActionTarget};
pub use signal::{send_signal, Signal};

/// What torchtop was refused permission to do, for [`ActionError::NotPermitted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// Sending any signal (EPERM from kill or pidfd_send_signal).
    Signal,
    /// Lowering the nice value, which needs root or CAP_SYS_NICE (EACCES from setpriority).
    RaisePriority,
    /// Changing the nice value of another user's process (EPERM from setpriority).
    ChangePriority,
}

/// Why an action did not happen. `Display` is one sentence for the status line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// The process is gone (no /proc entry, a zombie, or ESRCH from the kernel).
    #[error("process {pid} has exited")]
    Exited { pid: u32 },
    /// The pid exists but has another start time: the process the user saw has exited and the
    /// pid was given to another program.
    #[error("process {pid} has exited; its pid now belongs to another program")]
    Reused { pid: u32 },
    /// The kernel refused: the process belongs to another user, or the change needs privilege.
    #[error("not permitted to {what} process {pid}{}", what.because())]
    NotPermitted { pid: u32, what: Denied },
    /// A nice value outside -20..=19.
    #[error("nice value {value} is out of range: it must be from {NICE_MIN} to {NICE_MAX}")]
    InvalidNice { value: i32 },
    /// A pid that must never be acted on (0 names the caller's process group to kill(2), and
    /// values above i32::MAX name groups or nothing).
    #[error("{pid} is not a process id torchtop can act on")]
    InvalidPid { pid: u32 },
    /// Anything else, already phrased as a sentence.
    #[error("{0}")]
    Io(String),
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Denied::Signal => "signal",
            Denied::RaisePriority => "raise the priority of",
            Denied::ChangePriority => "change the priority of",
        })
    }
}

impl Denied {
    /// Why the kernel refused, as the end of the sentence.
    fn because(self) -> &'static str {
        match self {
            Denied::Signal | Denied::ChangePriority => ": it belongs to another user",
            Denied::RaisePriority => ": that needs root or CAP_SYS_NICE",
        }
    }
}

/// Refuses pids that kill(2) or setpriority(2) would read as "me" or as a process group.
pub(crate) fn checked_pid(pid: u32) -> Result<libc::pid_t, ActionError> {
    match libc::pid_t::try_from(pid) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(ActionError::InvalidPid { pid }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_name_the_pid_and_the_reason() {
        let cases = [
            (ActionError::Exited { pid: 1234 }, "process 1234 has exited"),
            (
                ActionError::Reused { pid: 1234 },
                "process 1234 has exited; its pid now belongs to another program",
            ),
            (
                ActionError::NotPermitted {
                    pid: 1234,
                    what: Denied::Signal,
                },
                "not permitted to signal process 1234: it belongs to another user",
            ),
            (
                ActionError::NotPermitted {
                    pid: 1234,
                    what: Denied::RaisePriority,
                },
                "not permitted to raise the priority of process 1234: \
                 that needs root or CAP_SYS_NICE",
            ),
            (
                ActionError::InvalidNice { value: 25 },
                "nice value 25 is out of range: it must be from -20 to 19",
            ),
        ];
        for (error, sentence) in cases {
            assert_eq!(error.to_string(), sentence);
        }
    }

    #[test]
    fn pid_zero_and_group_pids_are_refused() {
        assert_eq!(checked_pid(0), Err(ActionError::InvalidPid { pid: 0 }));
        assert_eq!(
            checked_pid(u32::MAX),
            Err(ActionError::InvalidPid { pid: u32::MAX })
        );
        assert_eq!(checked_pid(1234), Ok(1234));
    }
}
