//! The tree view's host process table, kept between refreshes, so that a refresh costs a
//! listing of the proc root and the `stat` of the rows on screen rather than of every process.
//!
//! Each refresh ([`HostCollector::tree_table`]):
//! - the proc root is listed: each pid with the inode of its directory (the kernel gives the
//!   directory of another process under a reused pid another inode). The listing costs the
//!   kernel about a microsecond a process, so it is skipped while /proc/loadavg says that no
//!   process was created or exited, and otherwise comes at most once per [`LISTED_PER_SECOND`]
//!   processes' worth of seconds (every 2 s at 10,000 processes), or at once when a GPU
//!   process is not in the table;
//! - a pid seen for the first time, or under a new inode, has its `stat` read once: parent,
//!   name and start time, which is all that building the tree needs of it;
//! - a pid that is gone is dropped, and the processes whose parent it was are read again (the
//!   kernel has given them a new parent);
//! - the tree is built on the table ([`crate::model::tree`]: the GPU processes, their
//!   ancestors and their descendants), and only its members go out in the snapshot;
//! - the members on screen (every member when nothing says which: a recording) have their
//!   `stat` read again, and each member its owner and command line once; the other members
//!   keep the figures of their last read, marked [`HostProcess::stale`].
//!
//! [`HostCollector::process_table`], the full scan this replaced (every pid's `stat` each
//! time), stays for the procfs benchmark, which compares it with sysinfo's.
//!
//! Between reads a process can change only its parent (when its parent exits: handled above),
//! its name and command line (at exec: read again when the row is next on screen), and its
//! figures (kept, marked stale).

use std::time::{Duration, Instant};

use crate::model::tree::build_tree;
use crate::model::{GpuProcess, HostProcess};
use crate::sys::proc::{self as procfs, PidStat};

use super::HostCollector;

/// How many processes' worth of the proc root may be listed per second: the gap between
/// listings grows with the table (0.2 s at 1,000 processes, 2 s at 10,000).
const LISTED_PER_SECOND: usize = 5_000;
/// The longest gap between two listings while processes come and go.
const MAX_LISTING_GAP: Duration = Duration::from_secs(5);

/// The whole proc root as last listed, in pid order.
#[derive(Debug, Default)]
pub(super) struct HostTable {
    processes: Vec<HostProcess>,
    /// Beside each process: what this reader keeps about it.
    kept: Vec<Kept>,
    listed_at: Option<Instant>,
    /// /proc/loadavg's thread count and last pid at the last listing.
    activity: Option<(u64, u64)>,
    /// The GPU pids the last listing did not find (another container's), sorted.
    missing: Vec<u32>,
}

impl HostTable {
    fn position(&self, pid: u32) -> Option<usize> {
        self.processes.binary_search_by_key(&pid, |p| p.pid).ok()
    }

    /// Whether the proc root must be listed again now.
    fn listing_due(&self, gpu: &[GpuProcess], activity: Option<(u64, u64)>, now: Instant) -> bool {
        let Some(at) = self.listed_at else {
            return true;
        };
        // A new GPU process the table lacks would be drawn without its family.
        let unknown = |p: &&GpuProcess| {
            self.position(p.pid).is_none() && self.missing.binary_search(&p.pid).is_err()
        };
        if gpu.iter().any(|p| unknown(&p)) {
            return true;
        }
        if activity.is_some() && activity == self.activity {
            return false;
        }
        let per_process = Duration::from_secs(1) / u32::try_from(LISTED_PER_SECOND).unwrap_or(1);
        let gap = per_process * u32::try_from(self.processes.len()).unwrap_or(u32::MAX);
        now.saturating_duration_since(at) >= gap.min(MAX_LISTING_GAP)
    }
}

#[derive(Debug, Clone, Copy)]
struct Kept {
    /// The inode of `/proc/PID` when the pid was first listed.
    inode: u64,
    /// Whether `uid`, `user` and `command` have been read (members only).
    identified: bool,
}

impl HostCollector {
    /// Every process in the proc root, each read afresh (the procfs benchmark's full scan).
    pub fn process_table(&mut self) -> Vec<HostProcess> {
        self.process_table_at(Instant::now())
    }

    fn process_table_at(&mut self, now: Instant) -> Vec<HostProcess> {
        let pids = procfs::read_pids(&self.root).unwrap_or_default();
        let uptime = self.uptime(now);
        let mut table = Vec::with_capacity(pids.len());
        for pid in pids {
            let Ok(stat) = procfs::read_pid_stat(&self.root, pid) else {
                continue;
            };
            let Ok(identity) = self.identity(&stat, false, now) else {
                continue;
            };
            let (uid, user, cmdline) = (
                identity.uid,
                identity.user.as_deref().map(str::to_string),
                identity.cmdline.clone(),
            );
            table.push(HostProcess {
                pid,
                ppid: stat.ppid,
                start_ticks: stat.start_ticks,
                uid,
                user,
                command: cmdline.flatten(),
                state: stat.state,
                cpu_percent: self.cpu_percent(&stat, now),
                rss_bytes: Some(stat.rss_pages.saturating_mul(self.page_size)),
                nice: Some(stat.nice),
                running_seconds: uptime
                    .map(|up| (up - stat.start_ticks as f64 / self.clock_ticks as f64).max(0.0)),
                comm: stat.comm,
                stale: false,
            });
        }
        self.evict_stale(now);
        table
    }

    /// The members of the tree view of `gpu` (the GPU processes, their ancestors and their
    /// descendants), in pid order. `on_screen` names the pids whose rows are drawn, sorted:
    /// only those are read again; `None` reads every member again.
    pub(crate) fn tree_table(
        &mut self,
        gpu: &[GpuProcess],
        on_screen: Option<&[u32]>,
    ) -> Vec<HostProcess> {
        self.tree_table_at(gpu, on_screen, Instant::now())
    }

    pub(super) fn tree_table_at(
        &mut self,
        gpu: &[GpuProcess],
        on_screen: Option<&[u32]>,
        now: Instant,
    ) -> Vec<HostProcess> {
        let uptime = self.uptime(now);
        let activity = self.loadavg_activity(now);
        if self.table.listing_due(gpu, activity, now) {
            let Ok(mut listed) = procfs::read_pid_entries(&self.root) else {
                self.table = HostTable::default();
                return Vec::new();
            };
            listed.sort_unstable();
            let gone = self.merge_listing(&listed, uptime);
            if !gone.is_empty() {
                self.reread_orphans(&gone);
            }
            self.table.listed_at = Some(now);
            self.table.activity = activity;
            let mut missing: Vec<u32> = gpu.iter().map(|p| p.pid).collect();
            missing.retain(|&pid| self.table.position(pid).is_none());
            missing.sort_unstable();
            missing.dedup();
            self.table.missing = missing;
        }
        let members: Vec<usize> = build_tree(gpu, &self.table.processes)
            .iter()
            .filter_map(|row| row.host)
            .collect();
        let mut out = Vec::with_capacity(members.len());
        for i in members {
            let pid = self.table.processes[i].pid;
            let shown = on_screen.is_none_or(|pids| pids.binary_search(&pid).is_ok());
            if shown || !self.table.kept[i].identified {
                if !self.read_member(i, uptime, now) {
                    continue;
                }
            } else {
                let running = self.running_seconds(self.table.processes[i].start_ticks, uptime);
                let row = &mut self.table.processes[i];
                row.stale = true;
                row.running_seconds = running;
            }
            out.push(self.table.processes[i].clone());
        }
        out.sort_unstable_by_key(|p| p.pid);
        self.evict_stale(now);
        out
    }

    /// Replaces the table with `listed` (sorted): known pids under the same inode are kept as
    /// they are, new ones read. Returns the pids that are gone, sorted.
    fn merge_listing(&mut self, listed: &[(u32, u64)], uptime: Option<f64>) -> Vec<u32> {
        let old_processes = std::mem::take(&mut self.table.processes);
        let old_kept = std::mem::take(&mut self.table.kept);
        let mut gone = Vec::new();
        let mut kept_rows = old_processes.into_iter().zip(old_kept).peekable();
        let mut table = HostTable {
            processes: Vec::with_capacity(listed.len()),
            kept: Vec::with_capacity(listed.len()),
            ..HostTable::default()
        };
        for &(pid, inode) in listed {
            while let Some((row, _)) = kept_rows.next_if(|(row, _)| row.pid < pid) {
                gone.push(row.pid);
            }
            match kept_rows.next_if(|(row, _)| row.pid == pid) {
                Some((row, kept)) if kept.inode == inode => {
                    table.processes.push(row);
                    table.kept.push(kept);
                    continue;
                }
                Some((row, _)) => gone.push(row.pid),
                None => {}
            }
            let Ok(stat) = procfs::read_pid_stat(&self.root, pid) else {
                continue;
            };
            table.processes.push(self.structure_row(stat, uptime));
            table.kept.push(Kept {
                inode,
                identified: false,
            });
        }
        gone.extend(kept_rows.map(|(row, _)| row.pid));
        self.table.processes = table.processes;
        self.table.kept = table.kept;
        gone
    }

    /// Reads the parent again of each process whose parent (as kept) is among `gone`
    /// (sorted): the kernel has given it another. Its figures stay as they were.
    fn reread_orphans(&mut self, gone: &[u32]) {
        for row in &mut self.table.processes {
            if gone.binary_search(&row.ppid).is_err() {
                continue;
            }
            // Gone too, or another process under the pid: the next listing settles it.
            if let Ok(stat) = procfs::read_pid_stat(&self.root, row.pid) {
                if stat.start_ticks == row.start_ticks {
                    row.ppid = stat.ppid;
                }
            }
        }
    }

    /// Reads `stat` of row `i` again, and its owner and command line when not known for this
    /// process (first time as a member, or after an exec renamed it). False when the process
    /// is gone (or its pid is another's) since the listing: the next listing settles it.
    fn read_member(&mut self, i: usize, uptime: Option<f64>, now: Instant) -> bool {
        let pid = self.table.processes[i].pid;
        let known_start = self.table.processes[i].start_ticks;
        let Ok(stat) = procfs::read_pid_stat(&self.root, pid) else {
            return false;
        };
        let identified = self.table.kept[i].identified;
        if identified && stat.start_ticks != known_start {
            return false;
        }
        let cpu_percent = self.cpu_percent(&stat, now);
        let Ok(identity) = self.identity(&stat, false, now) else {
            return false;
        };
        let (uid, user, command) = (
            identity.uid,
            identity.user.as_deref().map(str::to_string),
            identity.cmdline.clone().flatten(),
        );
        let mut row = self.structure_row(stat, uptime);
        row.uid = uid;
        row.user = user;
        row.command = command;
        row.cpu_percent = cpu_percent;
        self.table.processes[i] = row;
        self.table.kept[i].identified = true;
        true
    }

    /// A row from `stat` alone: no owner, command line or CPU% yet.
    fn structure_row(&self, stat: PidStat, uptime: Option<f64>) -> HostProcess {
        HostProcess {
            pid: stat.pid,
            ppid: stat.ppid,
            start_ticks: stat.start_ticks,
            uid: None,
            user: None,
            command: None,
            state: stat.state,
            cpu_percent: None,
            rss_bytes: Some(stat.rss_pages.saturating_mul(self.page_size)),
            nice: Some(stat.nice),
            running_seconds: self.running_seconds(stat.start_ticks, uptime),
            comm: stat.comm,
            stale: false,
        }
    }

    fn running_seconds(&self, start_ticks: u64, uptime: Option<f64>) -> Option<f64> {
        uptime.map(|up| (up - start_ticks as f64 / self.clock_ticks as f64).max(0.0))
    }
}

#[cfg(test)]
mod tests;
