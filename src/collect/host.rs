//! The host collector: host totals, and /proc joined onto the GPU process rows.
//!
//! What it reads, so that its cost stays near the 5 ms of CPU per second budget:
//! - [`HostCollector::sample_host`], once per refresh: meminfo, stat and loadavg, kept open
//!   and re-read with one `pread` each, and vmstat for its OOM-kill count while a kill could
//!   name a GPU process, a child or a cgroup, else every 5 s; the uptime from the boot-time
//!   clock (the file under another proc root); the two vm sysctls every 10 s ([`readings`]).
//!   The hostname is read once.
//! - [`HostCollector::join_processes`], once per refresh: for each distinct GPU pid its `stat`
//!   (kept open and re-read with one `pread`, parsed in place), the `children` files of all
//!   its threads every [`CHILDREN_RESCAN`] (workers appear within that time), and each child's
//!   `stat` (kept open too). `status`, `cmdline` and `environ` are read once per identity (pid,
//!   start time, name) and cached ([`identity`]); host processes that hold no GPU are not
//!   touched at all. The uptime is `sample_host`'s reading.
//! - [`HostCollector::tree_table`], only while the tree view is open: a listing of the proc
//!   root, each new pid's `stat` once, and the `stat` of the tree's rows on screen ([`table`]).
//! - [`HostCollector::process_table`] (the procfs benchmark): every pid's `stat`, plus
//!   `status` and `cmdline` once per identity.
//!
//! CPU% is the growth of utime + stime since the previous sample of the same identity, over
//! the wall time between the samples (100% = one core busy). Caches of pids not seen for
//! [`EVICT_AFTER`] are dropped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::GpuProcess;
use crate::sys::proc::{self as procfs, CpuTimes, PidStat};

use super::placement::{Placement, Refresh};
use crate::sys::{clock_ticks_per_second, page_size_bytes, PidMap};
use identity::Identity;

/// How often the `children` files of every thread of a GPU process are read.
pub(crate) const CHILDREN_RESCAN: Duration = Duration::from_secs(5);
/// Cached facts about a pid that has not been seen for this long are dropped.
pub(crate) const EVICT_AFTER: Duration = Duration::from_secs(30);
/// Two samples closer than this give the previous CPU% again instead of a noisy new one (the
/// tree view and the GPU rows may sample the same pid within one refresh, a few milliseconds
/// apart). Below `--once`'s 40 ms window: at 50 ms, `--once` never gave a process's CPU%.
const MIN_CPU_INTERVAL: Duration = Duration::from_millis(20);

pub struct HostCollector {
    root: PathBuf,
    clock_ticks: u64,
    page_size: u64,
    hostname: Option<std::sync::Arc<str>>,
    previous_cpu: Option<CpuTimes>,
    identities: PidMap<u32, Identity>,
    cpu_samples: PidMap<u32, CpuSample>,
    user_names: HashMap<u32, Arc<str>>,
    last_eviction: Option<Instant>,
    /// The stat files of the GPU processes, kept open: they are read every refresh.
    stat_files: procfs::OpenStatFiles,
    /// Cgroups, containers, schedulers, `/dev/shm` and OOM kills ([`Placement`]).
    placement: Placement,
    /// Stats read into again and again (a GPU process's, its child's), for their buffers.
    scratch_stats: [PidStat; 2],
    /// The rows of the join under way, by pid (kept for its capacity).
    joined: PidMap<u32, Option<JoinedProcess>>,
    /// Every pid of the proc root as last read, for the tree view ([`table`]).
    table: table::HostTable,
    /// The last reading of each GPU process, for rows off screen ([`off_screen`]).
    off_screen: off_screen::OffScreen,
    /// The children read in the join of one process, kept with it for the refreshes it is
    /// not read (reused for its capacity).
    children_read: Vec<off_screen::Child>,
    /// The system-wide files, kept open, and what was last read of them ([`readings`]).
    readings: readings::Readings,
    /// The buffers of the walks of the GPU processes' children ([`children`]).
    child_walker: children::ChildWalker,
    /// This /proc is a PID namespace's below the host's: a driver's pid names another process
    /// here, or none, so driver rows are left unjoined (not visible, never offered a signal).
    driver_pids_foreign: bool,
}

#[derive(Debug, Clone, Copy)]
struct CpuSample {
    start_ticks: u64,
    ticks: u64,
    at: Instant,
    percent: Option<f64>,
    last_seen: Instant,
}

/// The /proc side of one GPU process row, but for the strings, which are cloned from the
/// cached [`Identity`] straight into each row (once a row, not twice).
#[derive(Debug, Clone, Copy)]
struct JoinedProcess {
    uid: Option<u32>,
    ppid: u32,
    start_ticks: u64,
    cpu_percent: Option<f64>,
    rss_bytes: u64,
    running_seconds: Option<f64>,
    nice: i32,
    state: char,
    children_count: Option<u32>,
    children_cpu_percent: Option<f64>,
}

/// The pid exited (or was replaced) while its files were being read.
struct Vanished;

impl HostCollector {
    /// `proc_root` is "/proc" in production, a fixture tree in tests.
    pub fn new(proc_root: PathBuf) -> Self {
        Self::with_fs_root(proc_root, PathBuf::from("/"))
    }

    /// `fs_root` is where `/sys/fs/cgroup` and the container marker files are: "/" in
    /// production, a fixture tree in tests.
    pub fn with_fs_root(proc_root: PathBuf, fs_root: PathBuf) -> Self {
        Self::with_units(
            proc_root,
            fs_root,
            clock_ticks_per_second(),
            page_size_bytes(),
        )
    }

    fn with_units(root: PathBuf, fs_root: PathBuf, clock_ticks: u64, page_size: u64) -> Self {
        HostCollector {
            driver_pids_foreign: procfs::in_nested_pid_namespace(&root),
            readings: readings::Readings::new(&root),
            child_walker: children::ChildWalker::default(),
            placement: Placement::new(root.clone(), fs_root, page_size),
            root,
            clock_ticks,
            page_size,
            hostname: None,
            previous_cpu: None,
            identities: PidMap::default(),
            cpu_samples: PidMap::default(),
            user_names: HashMap::new(),
            last_eviction: None,
            stat_files: procfs::OpenStatFiles::default(),
            joined: PidMap::default(),
            scratch_stats: Default::default(),
            table: table::HostTable::default(),
            off_screen: off_screen::OffScreen::default(),
            children_read: Vec::new(),
        }
    }

    /// Fills the host fields of every row from /proc. A pid on several GPUs is read once; a
    /// pid that is not (or no longer) in /proc gets `visible = false` and `None` host fields.
    pub fn join_processes(&mut self, processes: &mut [GpuProcess]) {
        self.join_processes_at(processes, Instant::now(), Refresh::New, None);
    }

    /// As [`HostCollector::join_processes`], reading again only the rows whose pid is in
    /// `on_screen` (sorted) and the others every [`off_screen::OFF_SCREEN_EVERY`]; `None`
    /// reads every row.
    pub(crate) fn join_processes_on_screen(
        &mut self,
        processes: &mut [GpuProcess],
        on_screen: Option<&[u32]>,
    ) {
        self.join_processes_at(processes, Instant::now(), Refresh::New, on_screen);
    }

    /// As [`HostCollector::join_processes`], for rows found later in the same refresh (agents
    /// whose process holds no GPU): what the first join watched for OOM kills is kept.
    pub(crate) fn join_more_processes(&mut self, processes: &mut [GpuProcess]) {
        self.join_processes_at(processes, Instant::now(), Refresh::Same, None);
    }

    fn join_processes_at(
        &mut self,
        processes: &mut [GpuProcess],
        now: Instant,
        refresh: Refresh,
        on_screen: Option<&[u32]>,
    ) {
        let uptime = self.uptime(now);
        self.placement.begin(refresh);
        let mut joined = std::mem::take(&mut self.joined);
        joined.clear();
        for row in processes.iter_mut() {
            if self.is_foreign(row) {
                apply_join(row, None, None);
                continue;
            }
            let found = *joined
                .entry(row.pid)
                .or_insert_with(|| self.join_or_reuse(row.pid, on_screen, uptime, now));
            apply_join(row, found.as_ref(), self.identities.get(&row.pid));
        }
        self.joined = joined;
        self.placement.join(processes, refresh);
        self.evict_stale(now);
    }

    /// The kept reading of a row off screen while it is fresh enough, else a new one.
    fn join_or_reuse(
        &mut self,
        pid: u32,
        on_screen: Option<&[u32]>,
        uptime: Option<f64>,
        now: Instant,
    ) -> Option<JoinedProcess> {
        let reused = (self.off_screen).reuse(pid, on_screen, now, uptime, self.clock_ticks);
        if let Some((kept, children)) = reused {
            for child in children {
                // Seen at the last read, so the watch has its name already.
                let (pid, start, rss) = (child.pid, child.start_ticks, child.rss_bytes);
                self.placement.see_child(pid, start, rss, String::new);
            }
            // Still tracked: its caches must not be evicted while it is not read.
            if let Some(identity) = self.identities.get_mut(&pid) {
                identity.last_seen = now;
            }
            if let Some(sample) = self.cpu_samples.get_mut(&pid) {
                sample.last_seen = now;
            }
            return Some(kept);
        }
        self.children_read.clear();
        let found = self.join_one(pid, uptime, now).ok();
        self.off_screen.keep(pid, found, &self.children_read, now);
        found
    }

    /// Takes the first sample CPU% needs of each distinct pid of `processes` and of its
    /// children, and caches what does not change (identity, children), without the cgroups
    /// and the rest of [`HostCollector::join_processes`]: `--once` joins only after its CPU
    /// window, so that each file is read once where once is enough.
    pub(crate) fn prime_processes(&mut self, processes: &[GpuProcess]) {
        let now = Instant::now();
        let mut done = std::collections::HashSet::new();
        for row in processes {
            if !self.is_foreign(row) && done.insert(row.pid) {
                let _ = self.join_one(row.pid, None, now);
            }
        }
    }

    /// Whether `row`'s pid is the host's while this /proc is a nested namespace's.
    fn is_foreign(&self, row: &GpuProcess) -> bool {
        row.driver_pid && self.driver_pids_foreign
    }

    /// [`HostCollector::join_one_into`] with the kept scratch stat, whose name's buffer is
    /// reused from pid to pid.
    fn join_one(
        &mut self,
        pid: u32,
        uptime: Option<f64>,
        now: Instant,
    ) -> Result<JoinedProcess, Vanished> {
        let mut stat = std::mem::take(&mut self.scratch_stats[0]);
        let joined = self.join_one_into(pid, &mut stat, uptime, now);
        self.scratch_stats[0] = stat;
        joined
    }

    fn join_one_into(
        &mut self,
        pid: u32,
        stat: &mut PidStat,
        uptime: Option<f64>,
        now: Instant,
    ) -> Result<JoinedProcess, Vanished> {
        self.stat_files
            .read_into(&self.root, pid, stat)
            .map_err(|_| Vanished)?;
        let stat = &*stat;
        // Cached here, borrowed below: cloning the whole identity each tick cost an allocation
        // per string per process.
        self.identity(stat, true, now)?;
        let cpu_percent = self.cpu_percent(stat, now);
        let (children_count, children_cpu_percent) = match self.take_child_pids(pid, now) {
            Some(children) => {
                let (count, cpu) = self.children_cpu(&children, now);
                if let Some(identity) = self.identities.get_mut(&pid) {
                    identity.children = Some(children);
                }
                (Some(count), cpu)
            }
            None => (None, None),
        };
        let identity = self.identities.get(&pid).ok_or(Vanished)?;
        let started = stat.start_ticks as f64 / self.clock_ticks as f64;
        Ok(JoinedProcess {
            uid: identity.uid,
            ppid: stat.ppid,
            start_ticks: stat.start_ticks,
            cpu_percent,
            rss_bytes: stat.rss_pages.saturating_mul(self.page_size),
            // Whole clock ticks: the difference of two decimals carries float noise
            // (104.39999999999998) into JSON otherwise.
            running_seconds: uptime
                .map(|up| round_to_ticks((up - started).max(0.0), self.clock_ticks)),
            nice: stat.nice,
            state: stat.state,
            children_count,
            children_cpu_percent,
        })
    }

    /// CPU% of `stat`'s process since its previous sample; `None` on first sight.
    fn cpu_percent(&mut self, stat: &PidStat, now: Instant) -> Option<f64> {
        let ticks = stat.cpu_ticks();
        let fresh = CpuSample {
            start_ticks: stat.start_ticks,
            ticks,
            at: now,
            percent: None,
            last_seen: now,
        };
        let sample = self.cpu_samples.entry(stat.pid).or_insert(fresh);
        if sample.start_ticks != stat.start_ticks {
            *sample = fresh;
            return None;
        }
        sample.last_seen = now;
        let elapsed = now.saturating_duration_since(sample.at);
        if elapsed < MIN_CPU_INTERVAL {
            return sample.percent;
        }
        let busy_seconds = ticks.saturating_sub(sample.ticks) as f64 / self.clock_ticks as f64;
        let percent = busy_seconds * 100.0 / elapsed.as_secs_f64();
        sample.ticks = ticks;
        sample.at = now;
        sample.percent = Some(percent);
        Some(percent)
    }

    /// Direct children of `pid`, from the children files of its threads, taken out of its
    /// identity for the caller to put back. `None` when the kernel has no such files (built
    /// without CONFIG_PROC_CHILDREN).
    fn take_child_pids(&mut self, pid: u32, now: Instant) -> Option<Vec<u32>> {
        let root = self.root.as_path();
        let identity = self.identities.get_mut(&pid)?;
        let due = identity
            .children_scanned_at
            .is_none_or(|at| now.saturating_duration_since(at) >= CHILDREN_RESCAN);
        if !due {
            return identity.children.take();
        }
        // The previous walk's list, refilled: its capacity is reused.
        let mut children = identity.children.take().unwrap_or_default();
        let any_read = self.child_walker.walk(root, pid, &mut children)?;
        // After the first walk the next comes sooner for some pids than for others, so that a
        // thousand GPU processes seen together are not walked again all in the same refresh.
        let first = identity.children_scanned_at.is_none();
        identity.children_scanned_at = Some(if first {
            now.checked_sub(rescan_offset(pid)).unwrap_or(now)
        } else {
            now
        });
        identity.children = None;
        any_read.then_some(children)
    }

    /// How many of `children` are DataLoader workers, and their summed CPU% (`None` while none
    /// of them has two samples yet). PyTorch names its workers' threads `pt_data_worker`
    /// (`torch.multiprocessing._set_thread_name`), which names the process: where any child
    /// has that name, only those are workers, so that torch.compile's compile workers or a
    /// logger's child do not count as data loading; else (a torch before the name, or no
    /// torch) every child does.
    fn children_cpu(&mut self, children: &[u32], now: Instant) -> (u32, Option<f64>) {
        let mut all = Workers::default();
        let mut named = Workers::default();
        let mut stat = std::mem::take(&mut self.scratch_stats[1]);
        for &child in children {
            if self
                .stat_files
                .read_into(&self.root, child, &mut stat)
                .is_err()
            {
                continue;
            }
            let rss = Some(stat.rss_pages.saturating_mul(self.page_size));
            let comm = &stat.comm;
            self.placement
                .see_child(child, stat.start_ticks, rss, || comm.clone());
            self.children_read.push(off_screen::Child {
                pid: child,
                start_ticks: stat.start_ticks,
                rss_bytes: rss,
            });
            let percent = self.cpu_percent(&stat, now);
            all.add(percent);
            if stat.comm == DATALOADER_WORKER_NAME {
                named.add(percent);
            }
        }
        self.scratch_stats[1] = stat;
        let workers = if named.count > 0 { named } else { all };
        let total = if workers.count == 0 {
            Some(0.0)
        } else {
            workers.cpu
        };
        (workers.count, total)
    }

    fn evict_stale(&mut self, now: Instant) {
        let due = self
            .last_eviction
            .is_none_or(|at| now.saturating_duration_since(at) >= EVICT_AFTER / 3);
        if !due {
            return;
        }
        self.last_eviction = Some(now);
        let fresh = |seen: Instant| now.saturating_duration_since(seen) < EVICT_AFTER;
        self.identities.retain(|_, id| fresh(id.last_seen));
        self.cpu_samples.retain(|_, s| fresh(s.last_seen));
        // The GPU processes have identities; their children, CPU samples only.
        let (identities, samples) = (&self.identities, &self.cpu_samples);
        self.stat_files
            .retain(|pid| identities.contains_key(&pid) || samples.contains_key(&pid));
        self.off_screen.retain(|pid| identities.contains_key(&pid));
    }
}

/// The name PyTorch gives its DataLoader workers (`torch/utils/data/_utils/worker.py`).
const DATALOADER_WORKER_NAME: &str = "pt_data_worker";

/// A count of children and their summed CPU%, `None` until one has two samples.
#[derive(Default)]
struct Workers {
    count: u32,
    cpu: Option<f64>,
}

impl Workers {
    fn add(&mut self, percent: Option<f64>) {
        self.count += 1;
        if let Some(percent) = percent {
            self.cpu = Some(self.cpu.unwrap_or(0.0) + percent);
        }
    }
}

/// How much sooner than [`CHILDREN_RESCAN`] the second walk of `pid`'s children comes: one
/// of ten steps across the interval, by pid, which spreads the walks over the refreshes.
fn rescan_offset(pid: u32) -> Duration {
    CHILDREN_RESCAN * (pid % 10) / 10
}

fn checked_difference(total: Option<u64>, part: Option<u64>) -> Option<u64> {
    total?.checked_sub(part?)
}

fn apply_join(row: &mut GpuProcess, joined: Option<&JoinedProcess>, identity: Option<&Identity>) {
    let identity = joined.and(identity);
    row.visible = joined.is_some();
    row.uid = joined.and_then(|j| j.uid);
    row.user = identity.and_then(|i| i.user.clone());
    row.command = identity.and_then(|i| i.display.clone());
    row.ppid = joined.map(|j| j.ppid);
    row.start_ticks = joined.map(|j| j.start_ticks);
    row.cpu_percent = joined.and_then(|j| j.cpu_percent);
    row.rss_bytes = joined.map(|j| j.rss_bytes);
    row.running_seconds = joined.and_then(|j| j.running_seconds);
    row.nice = joined.map(|j| j.nice);
    row.state = joined.map(|j| j.state);
    row.env = identity.and_then(|i| i.env.as_ref()?.clone());
    row.children_count = joined.and_then(|j| j.children_count);
    row.children_cpu_percent = joined.and_then(|j| j.children_cpu_percent);
}

/// `seconds` rounded to the nearest 1/`ticks_per_second`, the resolution of /proc times.
fn round_to_ticks(seconds: f64, ticks_per_second: u64) -> f64 {
    let per = ticks_per_second.max(1) as f64;
    (seconds * per).round() / per
}

mod children;
mod identity;
mod off_screen;
mod readings;
mod table;

#[cfg(test)]
mod tests;
