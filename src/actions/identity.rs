//! The check that a pid still belongs to the process the user saw: its start time (field 22 of
//! /proc/PID/stat) against the one in its [`ProcessIdentity`].

use std::io;
use std::path::{Path, PathBuf};

use super::ActionError;
use crate::model::ProcessIdentity;
use crate::sys::proc::{parse_pid_stat, PidStat};

/// The /proc every action reads; tests of the parsing use their own roots.
pub(crate) use crate::sys::proc::PROC_ROOT;

/// The identity `pid` has now, read from `proc_root` (normally "/proc").
pub fn current_identity(proc_root: &Path, pid: u32) -> Result<ProcessIdentity, ActionError> {
    let stat = read_stat(proc_root, pid)?;
    Ok(ProcessIdentity::new(pid, stat.start_ticks))
}

/// Checks that `target` is still running under its pid, and returns its current stat fields.
/// A zombie counts as exited: it can no longer act on a signal or a priority.
pub(crate) fn verify_identity(
    proc_root: &Path,
    target: &ProcessIdentity,
) -> Result<PidStat, ActionError> {
    let stat = read_stat(proc_root, target.pid)?;
    if stat.start_ticks != target.start_ticks {
        return Err(ActionError::Reused { pid: target.pid });
    }
    if matches!(stat.state, 'Z' | 'X') && !has_other_threads(proc_root, target.pid) {
        return Err(ActionError::Exited { pid: target.pid });
    }
    Ok(stat)
}

/// The thread ids of `pid` (its main thread included), from /proc/PID/task.
pub(crate) fn thread_ids(proc_root: &Path, pid: u32) -> Result<Vec<u32>, ActionError> {
    let dir = task_dir(proc_root, pid);
    let entries = std::fs::read_dir(&dir).map_err(|e| read_error(pid, &dir, &e))?;
    let mut tids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// A zombie main thread whose other threads still run is a live process (the main thread
/// called pthread_exit); with no other threads it is a process waiting to be reaped.
fn has_other_threads(proc_root: &Path, pid: u32) -> bool {
    thread_ids(proc_root, pid).is_ok_and(|tids| tids.iter().any(|&tid| tid != pid))
}

fn read_stat(proc_root: &Path, pid: u32) -> Result<PidStat, ActionError> {
    let path = proc_root.join(pid.to_string()).join("stat");
    let line = std::fs::read_to_string(&path).map_err(|e| read_error(pid, &path, &e))?;
    parse_pid_stat(&line).map_err(|_| {
        ActionError::Io(format!(
            "could not identify process {pid}: {} is garbled",
            path.display()
        ))
    })
}

fn task_dir(proc_root: &Path, pid: u32) -> PathBuf {
    proc_root.join(pid.to_string()).join("task")
}

/// A missing /proc entry, or one that vanishes while being read (ESRCH), means the process
/// has exited.
fn read_error(pid: u32, path: &Path, error: &io::Error) -> ActionError {
    if error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ESRCH) {
        ActionError::Exited { pid }
    } else {
        ActionError::Io(format!(
            "could not identify process {pid}: reading {} failed: {error}",
            path.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake /proc (`.0`) under the system temp dir, removed on drop.
    struct FakeProc(PathBuf, #[allow(dead_code)] tempfile::TempDir);

    impl FakeProc {
        fn new(name: &str) -> Self {
            let root = tempfile::Builder::new()
                .prefix(&format!("torchtop-identity-{name}-"))
                .tempdir()
                .unwrap();
            FakeProc(root.path().to_path_buf(), root)
        }

        fn add(&self, pid: u32, stat: &str, tids: &[u32]) {
            let dir = self.0.join(pid.to_string());
            std::fs::create_dir_all(dir.join("task")).unwrap();
            std::fs::write(dir.join("stat"), stat).unwrap();
            for tid in tids {
                std::fs::create_dir_all(dir.join("task").join(tid.to_string())).unwrap();
            }
        }
    }

    fn stat_line(pid: u32, comm: &str, state: char, nice: i32, start: u64) -> String {
        // Fields 4..=18 and 20..=21 are filler; 19 is nice and 22 the start time.
        let filler_4_to_18 = "1 1 1 0 -1 4194304 100 0 0 0 5 3 0 0 20";
        format!("{pid} ({comm}) {state} {filler_4_to_18} {nice} 1 0 {start} 12345 678 0\n")
    }

    #[test]
    fn current_identity_reads_the_start_time_from_a_proc_root() {
        let fake = FakeProc::new("read");
        fake.add(7, &stat_line(7, "torchrun", 'S', 0, 4242), &[7]);
        let id = current_identity(&fake.0, 7).unwrap();
        assert_eq!(id, ProcessIdentity::new(7, 4242));
    }

    #[test]
    fn a_missing_pid_has_exited_and_a_garbled_one_is_an_io_sentence() {
        let fake = FakeProc::new("errors");
        fake.add(8, "8 (cut short", &[8]);
        assert_eq!(
            current_identity(&fake.0, 9),
            Err(ActionError::Exited { pid: 9 })
        );
        let garbled = current_identity(&fake.0, 8).unwrap_err().to_string();
        assert!(
            garbled.starts_with("could not identify process 8: ") && garbled.ends_with("garbled"),
            "{garbled}"
        );
    }

    #[test]
    fn verify_refuses_another_start_time_and_a_zombie() {
        let fake = FakeProc::new("verify");
        fake.add(10, &stat_line(10, "python", 'S', 3, 100), &[10]);
        fake.add(11, &stat_line(11, "python", 'Z', 0, 200), &[11]);
        // A zombie main thread whose other thread still runs is alive.
        fake.add(12, &stat_line(12, "python", 'Z', 0, 300), &[12, 13]);

        let stat = verify_identity(&fake.0, &ProcessIdentity::new(10, 100)).unwrap();
        assert_eq!(stat.nice, 3);
        assert_eq!(
            verify_identity(&fake.0, &ProcessIdentity::new(10, 101)),
            Err(ActionError::Reused { pid: 10 })
        );
        assert_eq!(
            verify_identity(&fake.0, &ProcessIdentity::new(11, 200)),
            Err(ActionError::Exited { pid: 11 })
        );
        assert!(verify_identity(&fake.0, &ProcessIdentity::new(12, 300)).is_ok());
    }
}
