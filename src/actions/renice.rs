//! Changing the nice value of a whole process.
//!
//! On Linux, setpriority(PRIO_PROCESS, id) changes only the thread with that id, so a
//! PyTorch process (main thread, CUDA and DataLoader-pin threads, OpenMP pool) would keep
//! most of its threads at the old value. torchtop therefore sets every thread listed in
//! /proc/PID/task, main thread first, then reads the value back from /proc/PID/stat.
//!
//! There is no pidfd form of setpriority, so the start time is checked just before the change
//! and again in the read-back; a pid recycled in between (which needs the whole pid space to
//! wrap in microseconds) is reported as [`ActionError::Reused`] rather than passed over.

use std::path::Path;

use super::identity::{thread_ids, verify_identity, PROC_ROOT};
use rustix::process::{setpriority_process, Pid};

use super::{checked_pid, ActionError, Denied, ProcessIdentity};

/// The highest priority (lowest nice value) Linux allows.
pub const NICE_MIN: i32 = -20;
/// The lowest priority (highest nice value) Linux allows.
pub const NICE_MAX: i32 = 19;

/// Sets the nice value of every thread of `target` to `nice` and returns the value read back
/// from /proc. Lowering the nice value below the current one needs root or CAP_SYS_NICE.
pub fn renice(target: &ProcessIdentity, nice: i32) -> Result<i32, ActionError> {
    renice_in(Path::new(PROC_ROOT), target, nice)
}

/// Moves the nice value of `target` by `delta` from its value now (F7: -1, F8: +1), as read
/// from /proc at the time of the action rather than from a possibly stale row.
pub fn adjust_nice(target: &ProcessIdentity, delta: i32) -> Result<i32, ActionError> {
    let proc_root = Path::new(PROC_ROOT);
    let current = verify_identity(proc_root, target)?.nice;
    renice_in(proc_root, target, current.saturating_add(delta))
}

fn renice_in(proc_root: &Path, target: &ProcessIdentity, nice: i32) -> Result<i32, ActionError> {
    if !(NICE_MIN..=NICE_MAX).contains(&nice) {
        return Err(ActionError::InvalidNice { value: nice });
    }
    let pid = checked_pid(target.pid)?;
    verify_identity(proc_root, target)?;
    // The main thread first: its errors describe the process as a whole.
    set_thread_nice(pid, nice).map_err(|errno| renice_error(target.pid, errno))?;
    for tid in thread_ids(proc_root, target.pid)? {
        if tid == target.pid {
            continue;
        }
        let Ok(tid) = libc::pid_t::try_from(tid) else {
            continue;
        };
        match set_thread_nice(tid, nice) {
            // The thread ended after it was listed.
            Ok(()) | Err(libc::ESRCH) => {}
            Err(errno) => return Err(renice_error(target.pid, errno)),
        }
    }
    Ok(verify_identity(proc_root, target)?.nice)
}

/// Errors are the errno, so the caller can tell a thread that ended (ESRCH) from a refusal.
fn set_thread_nice(tid: libc::pid_t, nice: i32) -> Result<(), i32> {
    // A tid of 0 would mean "this process": never renice torchtop by mistake.
    let tid = Pid::from_raw(tid).ok_or(libc::ESRCH)?;
    setpriority_process(Some(tid), nice).map_err(rustix::io::Errno::raw_os_error)
}

fn renice_error(pid: u32, errno: i32) -> ActionError {
    match errno {
        libc::EACCES => ActionError::NotPermitted {
            pid,
            what: Denied::RaisePriority,
        },
        libc::EPERM => ActionError::NotPermitted {
            pid,
            what: Denied::ChangePriority,
        },
        libc::ESRCH => ActionError::Exited { pid },
        errno => ActionError::Io(format!(
            "could not change the priority of process {pid}: {}",
            std::io::Error::from_raw_os_error(errno)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_values_are_refused_before_any_lookup() {
        // Pid 0 would be refused too; the range check must come first and name the value.
        let target = ProcessIdentity::new(0, 0);
        assert_eq!(
            renice(&target, 20),
            Err(ActionError::InvalidNice { value: 20 })
        );
        assert_eq!(
            renice(&target, -21),
            Err(ActionError::InvalidNice { value: -21 })
        );
        assert_eq!(renice(&target, 0), Err(ActionError::InvalidPid { pid: 0 }));
    }

    #[test]
    fn errno_maps_to_the_right_refusal() {
        assert_eq!(
            renice_error(9, libc::EACCES),
            ActionError::NotPermitted {
                pid: 9,
                what: Denied::RaisePriority
            }
        );
        assert_eq!(
            renice_error(9, libc::EPERM),
            ActionError::NotPermitted {
                pid: 9,
                what: Denied::ChangePriority
            }
        );
        assert_eq!(renice_error(9, libc::ESRCH), ActionError::Exited { pid: 9 });
    }
}
