//! Reads the detail view's files for the one process it shows, each tick while it is open,
//! on the sampler thread (never the UI task): the environ and cwd of another user's process
//! can be slow or refused, and reading them for every process would cost every tick.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use crate::model::detail::{MAX_DETAIL_CHILDREN, MAX_DETAIL_COMMAND_CHARS};
use crate::model::{ChildProcess, ProcessDetail};
use crate::sys::proc as procfs;
use crate::sys::{clock_ticks_per_second, page_size_bytes};

#[derive(Default)]
pub(crate) struct DetailReader {
    /// The process the view shows; `None` while it is closed.
    pid: Option<u32>,
    /// Each child's CPU ticks at the previous read, for its CPU%.
    child_ticks: HashMap<u32, (u64, Instant)>,
}

impl DetailReader {
    /// Starts reading `pid` each tick, or stops with `None`.
    pub(crate) fn follow(&mut self, pid: Option<u32>) {
        if self.pid != pid {
            self.child_ticks.clear();
        }
        self.pid = pid;
    }

    /// The detail of the followed process now, or `None` when the view is closed.
    pub(crate) fn read(&mut self, root: &Path) -> Option<ProcessDetail> {
        let pid = self.pid?;
        let sentence = |e: procfs::ProcError| e.to_string();
        let command = procfs::read_cmdline(root, pid)
            .map(|c| c.map(|c| c.chars().take(MAX_DETAIL_COMMAND_CHARS).collect()))
            .map_err(sentence);
        let cwd = procfs::read_cwd(root, pid).map_err(sentence);
        let env = procfs::read_detail_env(root, pid).map_err(sentence);
        let cgroup = procfs::read_cgroup(root, pid).map_err(sentence);
        let pids = procfs::read_children(root, pid).unwrap_or_default();
        let children_left_out = pids.len().saturating_sub(MAX_DETAIL_CHILDREN);
        let children = self.children(root, &pids[..pids.len().min(MAX_DETAIL_CHILDREN)]);
        Some(ProcessDetail {
            pid,
            command,
            cwd,
            env,
            cgroup,
            children,
            children_left_out,
        })
    }

    fn children(&mut self, root: &Path, pids: &[u32]) -> Vec<ChildProcess> {
        let now = Instant::now();
        let hz = clock_ticks_per_second() as f64;
        let page = page_size_bytes();
        let mut seen = HashMap::new();
        let children = pids
            .iter()
            .filter_map(|&pid| {
                let stat = procfs::read_pid_stat(root, pid).ok()?;
                let ticks = stat.cpu_ticks();
                let cpu_percent = self.child_ticks.get(&pid).and_then(|(before, then)| {
                    let seconds = now.duration_since(*then).as_secs_f64();
                    (seconds > 0.0 && ticks >= *before)
                        .then(|| (ticks - before) as f64 / hz / seconds * 100.0)
                });
                seen.insert(pid, (ticks, now));
                Some(ChildProcess {
                    pid,
                    comm: stat.comm.clone(),
                    state: Some(stat.state),
                    cpu_percent,
                    rss_bytes: Some(stat.rss_pages.saturating_mul(page)),
                })
            })
            .collect();
        self.child_ticks = seen;
        children
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_while_followed_and_measures_child_cpu_on_the_second_read() {
        let root = Path::new(procfs::PROC_ROOT);
        let mut reader = DetailReader::default();
        assert!(reader.read(root).is_none());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        reader.follow(Some(std::process::id()));
        let first = reader.read(root).unwrap();
        let second = reader.read(root).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(first.cwd.is_ok() && first.command.is_ok());
        let find = |d: &ProcessDetail| d.children.iter().find(|c| c.pid == child.id()).cloned();
        assert_eq!(find(&first).unwrap().cpu_percent, None);
        assert!(find(&second).unwrap().cpu_percent.is_some());
        reader.follow(None);
        assert!(reader.read(root).is_none());
    }
}
