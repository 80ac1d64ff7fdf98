//! Reads a process's cgroup and its limits, each cgroup once per refresh however many
//! processes share it.
//!
//! Sources: /proc/PID/cgroup for the path; below the cgroup mount (`/sys/fs/cgroup`):
//! - v2 (the mount has `cgroup.controllers`): memory.max, memory.current, memory.swap.max,
//!   memory.events, cpu.max, cpuset.cpus.effective, pids.max;
//! - v1: memory/{memory.limit_in_bytes, usage_in_bytes, memsw.limit_in_bytes, oom_control,
//!   failcnt}, cpu/{cpu.cfs_quota_us, cpu.cfs_period_us}, cpuset/cpuset.effective_cpus,
//!   pids/pids.max.
//!
//! The files of the cgroups in use are kept open and re-read with one `pread` each (for at
//! most [`MAX_KEPT_GROUPS`] cgroups; a file that is missing is looked for again every
//! [`CGROUP_RESCAN`]); where they are is found once per /proc/PID/cgroup text, and under v1
//! looked at again every [`CGROUP_RESCAN`] ([`dirs`]). The OOM counter file is not read again
//! where the OOM watch read it in the same refresh. The settings (memory.max, memory.swap.max,
//! cpu.max, the cpuset, pids.max) are read every [`SETTINGS_EVERY`], the usage and the
//! counters each refresh.
//!
//! The memory limit that binds may be an ancestor's (a Slurm job's above its step's cgroup, a
//! pod's above its container's): the ancestors' limits are read with the settings, and the use
//! of those with one each refresh ([`ancestors`]).
//!
//! While memory is at [`MEMBER_SCAN_FRACTION`] of the limit that binds or more, cgroup.procs
//! and each member's stat are read too, to name the biggest members.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::Cgroup;
use crate::sys::cgroup as cg;
use crate::sys::kept::{self, KeptFile};
#[cfg(test)]
use crate::sys::proc as procfs;
use crate::sys::PidMap;

use super::container::classify_path;
use super::oom_watch::OomCounts;
use super::proc_path::ProcPath;
use super::scheduler::slurm_from_path;
use ancestors::Ancestors;
use dirs::CgroupDirs;
use dirs::FoundDirs;
use figures::{list_members, set_cpuset, Figures};

/// From this share of memory.max on, the members of a cgroup are listed (below the default
/// 0.9 of `cgroup-memory`, so its message can name them).
pub(crate) const MEMBER_SCAN_FRACTION: f64 = 0.8;
/// The most members whose stat is read for one cgroup in one refresh.
const MAX_MEMBERS_SCANNED: usize = 1024;
/// How many of the biggest members are kept.
const BIGGEST_KEPT: usize = 5;
/// How often a known process's /proc/PID/cgroup is read again: a process moves to another
/// cgroup rarely (systemd, `docker update`), and a thousand GPU processes each read every
/// refresh cost more than everything else the default view reads.
pub(crate) const CGROUP_RESCAN: Duration = Duration::from_secs(5);
/// How often a cgroup's settings are read again: memory.max, memory.swap.max, cpu.max, the
/// cpuset and pids.max (v1: their equivalents). They change only when someone sets them
/// (`docker update`, `systemctl set-property`); the usage and the counters are read each
/// refresh.
pub(crate) const SETTINGS_EVERY: Duration = Duration::from_secs(5);

#[cfg(test)]
mod ancestor_tests;
mod ancestors;
mod dirs;
mod figures;

/// The most cgroups whose files are kept open (up to nine each); the files of the others are
/// opened for each reading, as before.
const MAX_KEPT_GROUPS: usize = 16;
/// The most read from one limit or counter file.
const LIMIT_FILE_BYTES: usize = 4096;

/// The cgroups read, each once per refresh, with their files kept open ([`KeptFile`]) while
/// processes in them are shown.
pub(crate) struct CgroupReader {
    proc_root: PathBuf,
    /// The cgroup mount: `/sys/fs/cgroup`.
    mount: PathBuf,
    page_size: u64,
    unified: Option<bool>,
    /// Counts the refreshes, for [`Group::read_in`].
    refresh: u64,
    /// The cgroups in use, by a number given at first use.
    groups: PidMap<u64, Group>,
    /// The numbers of the cgroups in use, by where their files are (texts that differ only in
    /// controllers torchtop does not read name the same cgroup).
    group_ids: HashMap<CgroupDirs, u64>,
    next_group_id: u64,
    /// Where the files are, by the text of /proc/PID/cgroup, found again every
    /// [`CGROUP_RESCAN`]: finding them checks each controller's directory, a path walk each,
    /// which processes in one cgroup (a job's ranks and workers) would otherwise repeat.
    dirs_by_text: HashMap<String, FoundDirs>,
    /// /proc/PID/cgroup of the processes asked for by [`CgroupReader::of_known_process`].
    texts: PidMap<u32, KnownText>,
    /// Where /proc/PID/cgroup is, built anew for each process in one buffer.
    text_path: ProcPath,
    /// Read buffers, reused: one for most files, one for v1's period, one for the cpuset
    /// (compared with the kept list after the other files are read).
    buffers: [Vec<u8>; 3],
}

/// A process's cgroup as this refresh read it.
pub(crate) struct Found<'a> {
    /// Shared with the rows: replaced by a new one only when a reading changes it.
    pub(crate) cgroup: &'a Arc<Cgroup>,
    /// The file that counts the cgroup's OOM kills.
    pub(crate) oom_file: Option<&'a Path>,
    /// Whether this is the first process of the refresh in the cgroup.
    pub(crate) first_in_refresh: bool,
}

/// One process's /proc/PID/cgroup as last read.
struct KnownText {
    start_ticks: u64,
    text: String,
    read_at: Instant,
    asked_at: Instant,
    /// The cgroup the text names, and when that was found: until [`CGROUP_RESCAN`] later, a
    /// refresh goes straight to it (hashing the text and the paths for each process each
    /// refresh cost more than reading the files).
    group: Option<(u64, Instant)>,
}

/// One cgroup in use: its files, and its reading of the refresh [`Group::read_in`].
struct Group {
    /// By the index of the file's name in [`V2_FILES`] or [`V1_FILES`].
    files: Vec<Option<KeptFile>>,
    /// Whether the files stay open between readings ([`MAX_KEPT_GROUPS`]).
    keep_open: bool,
    /// As last read; shared with the rows of the snapshots that show it, so a reading that
    /// changes nothing keeps it (and a change replaces it, leaving theirs as it was).
    cgroup: Arc<Cgroup>,
    oom_file: Option<PathBuf>,
    /// Where cgroup.procs is, for the members.
    memory_dir: Option<PathBuf>,
    read_in: Option<u64>,
    /// When the settings were last read ([`Group::read`]).
    settings_at: Option<Instant>,
    /// The memory limits above the cgroup.
    ancestors: Ancestors,
}

/// Which directory of [`CgroupDirs`] a file is in.
#[derive(Clone, Copy)]
enum Dir {
    Memory,
    Cpu,
    Cpuset,
    Pids,
}

/// The files read of a v2 cgroup (the indices are [`Group::files`]').
const V2_FILES: [(Dir, &str); 7] = [
    (Dir::Memory, "memory.max"),
    (Dir::Memory, "memory.current"),
    (Dir::Memory, "memory.swap.max"),
    (Dir::Memory, "memory.events"),
    (Dir::Cpu, "cpu.max"),
    (Dir::Cpuset, "cpuset.cpus.effective"),
    (Dir::Pids, "pids.max"),
];

/// The files read of a v1 cgroup.
const V1_FILES: [(Dir, &str); 9] = [
    (Dir::Memory, "memory.limit_in_bytes"),
    (Dir::Memory, "memory.usage_in_bytes"),
    (Dir::Memory, "memory.memsw.limit_in_bytes"),
    (Dir::Memory, "memory.oom_control"),
    (Dir::Memory, "memory.failcnt"),
    (Dir::Cpu, "cpu.cfs_quota_us"),
    (Dir::Cpu, "cpu.cfs_period_us"),
    (Dir::Cpuset, "cpuset.effective_cpus"),
    (Dir::Pids, "pids.max"),
];

impl CgroupReader {
    pub(crate) fn new(proc_root: PathBuf, mount: PathBuf, page_size: u64) -> Self {
        CgroupReader {
            proc_root,
            mount,
            page_size,
            unified: None,
            refresh: 0,
            groups: PidMap::default(),
            group_ids: HashMap::new(),
            next_group_id: 0,
            dirs_by_text: HashMap::new(),
            texts: PidMap::default(),
            text_path: ProcPath::default(),
            buffers: [Vec::new(), Vec::new(), Vec::new()],
        }
    }

    /// Starts a refresh: each cgroup is read again at its first use in it. The files of the
    /// cgroups not used in the refresh before are closed.
    pub(crate) fn new_refresh(&mut self) {
        self.refresh += 1;
        let previous = self.refresh - 1;
        self.groups
            .retain(|_, group| group.read_in.is_some_and(|r| r >= previous));
        let groups = &self.groups;
        self.group_ids.retain(|_, id| groups.contains_key(id));
        let now = Instant::now();
        let recent = |at: Instant| now.saturating_duration_since(at) < 6 * CGROUP_RESCAN;
        self.texts.retain(|_, known| recent(known.asked_at));
        self.dirs_by_text.retain(|_, found| recent(found.used_at));
    }

    /// The cgroup of `pid` with its limits, and the file that counts its OOM kills; `None`
    /// where /proc/PID/cgroup is unreadable or names no usable path.
    #[cfg(test)]
    pub(crate) fn of_process(&mut self, pid: u32) -> Option<(Cgroup, Option<PathBuf>)> {
        let text = cg::read_small(&procfs::pid_dir(&self.proc_root, pid).join("cgroup"))?;
        let (cgroup, oom_file) = self.of_text(&text, Instant::now())?;
        Some((cgroup.clone(), oom_file.map(Path::to_path_buf)))
    }

    /// The cgroup of the process (`pid`, `start_ticks`) with its limits, and the file that
    /// counts its OOM kills; `None` where /proc/PID/cgroup is unreadable or names no usable
    /// path. Its /proc/PID/cgroup is read again only every [`CGROUP_RESCAN`] (the first time
    /// again sooner by up to that, by pid, so that processes seen together are read apart).
    /// `oom` gives the counters of an OOM file already read in this refresh
    /// ([`OomWatch::fresh`](super::oom_watch::OomWatch::fresh)), which are not read again.
    pub(crate) fn of_known_process(
        &mut self,
        pid: u32,
        start_ticks: u64,
        now: Instant,
        oom: impl Fn(&Path) -> Option<OomCounts>,
    ) -> Option<Found<'_>> {
        let fresh = self.texts.get(&pid).is_some_and(|known| {
            known.start_ticks == start_ticks
                && now.saturating_duration_since(known.read_at) < CGROUP_RESCAN
        });
        if !fresh && !self.read_text(pid, start_ticks, now) {
            self.texts.remove(&pid);
            return None;
        }
        let known = self.texts.get_mut(&pid)?;
        known.asked_at = now;
        let groups = &self.groups;
        let resolved = known.group.filter(|(id, at)| {
            now.saturating_duration_since(*at) < CGROUP_RESCAN && groups.contains_key(id)
        });
        let id = if let Some((id, _)) = resolved {
            id
        } else {
            let text = std::mem::take(&mut known.text);
            let id = self.find_group(&text, now);
            let known = self.texts.get_mut(&pid)?;
            known.text = text;
            known.group = id.map(|id| (id, now));
            id?
        };
        self.read_group(id, now, oom)
    }

    /// Reads /proc/PID/cgroup again into [`CgroupReader::texts`] (a new text only when it
    /// changed); false when it is unreadable.
    fn read_text(&mut self, pid: u32, start_ticks: u64, now: Instant) -> bool {
        let path = self
            .text_path
            .pid(&self.proc_root, pid)
            .name("cgroup")
            .path();
        let limit = usize::try_from(cg::MAX_CGROUP_FILE_BYTES).unwrap_or(usize::MAX);
        let Ok(bytes) = kept::read_once(path, &mut self.buffers[0], limit) else {
            return false;
        };
        let text = kept::as_text(bytes);
        let stagger = CGROUP_RESCAN * (pid % 10) / 10;
        match self.texts.get_mut(&pid) {
            Some(known) if known.start_ticks == start_ticks => {
                if known.text != text {
                    known.text = text.into_owned();
                    known.group = None;
                }
                known.read_at = now;
            }
            _ => {
                // The first time, the next read comes sooner by up to a rescan, by pid.
                let known = KnownText {
                    start_ticks,
                    text: text.into_owned(),
                    read_at: now.checked_sub(stagger).unwrap_or(now),
                    asked_at: now,
                    group: None,
                };
                self.texts.insert(pid, known);
            }
        }
        true
    }

    #[cfg(test)]
    fn of_text(&mut self, text: &str, now: Instant) -> Option<(&Cgroup, Option<&Path>)> {
        let id = self.find_group(text, now)?;
        let found = self.read_group(id, now, |_| None)?;
        Some((&**found.cgroup, found.oom_file))
    }

    /// The number of the cgroup `text` names, finding where its files are (again every
    /// [`CGROUP_RESCAN`] under cgroup v1, where which controller directories exist can change;
    /// under v2 the directory follows from the text alone, so it is found once per text).
    fn find_group(&mut self, text: &str, now: Instant) -> Option<u64> {
        let v1 = !self.is_unified();
        match self.dirs_by_text.get_mut(text) {
            Some(found) if v1 && now.saturating_duration_since(found.found_at) >= CGROUP_RESCAN => {
                found.look_again(now);
            }
            Some(_) => {}
            None => {
                let unified = self.is_unified();
                let found = FoundDirs::find(text, &self.mount, unified, now);
                self.dirs_by_text.insert(text.to_string(), found);
            }
        }
        let found = self.dirs_by_text.get_mut(text)?;
        found.used_at = now;
        let dirs = found.dirs.as_ref()?;
        if let Some(&id) = self.group_ids.get(dirs) {
            return Some(id);
        }
        let id = self.next_group_id;
        self.next_group_id += 1;
        let keep_open = self.groups.len() < MAX_KEPT_GROUPS;
        self.groups
            .insert(id, Group::new(dirs, keep_open, &self.mount));
        self.group_ids.insert(dirs.clone(), id);
        Some(id)
    }

    /// Cgroup `id` as read in this refresh (read now if it was not yet).
    fn read_group(
        &mut self,
        id: u64,
        now: Instant,
        oom: impl Fn(&Path) -> Option<OomCounts>,
    ) -> Option<Found<'_>> {
        let group = self.groups.get_mut(&id)?;
        let first = group.read_in != Some(self.refresh);
        if first {
            group.read_in = Some(self.refresh);
            let fresh = group.oom_file.as_deref().and_then(oom);
            group.read(&mut self.buffers, now, fresh);
            let near_limit = group
                .cgroup
                .memory_fraction()
                .is_some_and(|f| f >= MEMBER_SCAN_FRACTION);
            if let (true, Some(dir)) = (near_limit, &group.memory_dir) {
                let cgroup = Arc::make_mut(&mut group.cgroup);
                list_members(&self.proc_root, self.page_size, dir, cgroup);
            }
        }
        Some(Found {
            cgroup: &group.cgroup,
            oom_file: group.oom_file.as_deref(),
            first_in_refresh: first,
        })
    }

    fn is_unified(&mut self) -> bool {
        let mount = &self.mount;
        *self
            .unified
            .get_or_insert_with(|| mount.join("cgroup.controllers").exists())
    }
}

impl Group {
    fn new(dirs: &CgroupDirs, keep_open: bool, mount: &Path) -> Self {
        let names: &[(Dir, &str)] = if dirs.version == 2 {
            &V2_FILES
        } else {
            &V1_FILES
        };
        let files = names
            .iter()
            .map(|(dir, name)| {
                let dir = match dir {
                    Dir::Memory => &dirs.memory,
                    Dir::Cpu => &dirs.cpu,
                    Dir::Cpuset => &dirs.cpuset,
                    Dir::Pids => &dirs.pids,
                };
                Some(KeptFile::new(dir.as_ref()?.join(name)))
            })
            .collect();
        let (container, pod) = classify_path(&dirs.path);
        let (slurm_job, slurm_step) = slurm_from_path(&dirs.path).unzip();
        Group {
            files,
            keep_open,
            cgroup: Arc::new(Cgroup {
                path: dirs.path.clone(),
                version: dirs.version,
                container,
                pod,
                slurm_job,
                slurm_step: slurm_step.flatten(),
                ..Default::default()
            }),
            oom_file: dirs.oom_file(),
            memory_dir: dirs.memory.clone(),
            read_in: None,
            settings_at: None,
            ancestors: Ancestors::new(dirs, mount),
        }
    }

    /// The text of file `index` in `buffer`; `None` when it is missing or unreadable.
    fn text<'b>(&mut self, index: usize, buffer: &'b mut Vec<u8>, now: Instant) -> Option<&'b str> {
        let file = self.files.get_mut(index)?.as_mut()?;
        let bytes = file
            .read_retrying(buffer, LIMIT_FILE_BYTES, now, CGROUP_RESCAN)
            .ok()?;
        std::str::from_utf8(bytes).ok()
    }

    /// Reads the limits and counters again into [`Group::cgroup`]; the path's container, pod
    /// and Slurm job were found once. The cgroup is copied (when shared) only where a figure
    /// changed.
    /// `oom`: the counters of the OOM file as already read in this refresh, if they were.
    /// The settings (the limits, the quota, the cpuset) are read every [`SETTINGS_EVERY`];
    /// what moves (the usage, the counters) every time.
    fn read(&mut self, buffers: &mut [Vec<u8>; 3], now: Instant, oom: Option<OomCounts>) {
        let [buffer, second, cpuset] = buffers;
        let v2 = self.cgroup.version == 2;
        let oom = oom.or_else(|| {
            let text = self.text(3, buffer, now)?;
            Some(OomCounts {
                oom_kill: cg::keyed_value(text, "oom_kill"),
                max: cg::keyed_value(text, "max"),
            })
        });
        let mut figures = Figures::of(&self.cgroup);
        figures.oom_kills = oom.and_then(|counts| counts.oom_kill);
        figures.memory_current_bytes = self.text(1, buffer, now).and_then(cg::parse_number);
        figures.memory_max_hits = if v2 {
            oom.and_then(|counts| counts.max)
        } else {
            self.text(4, buffer, now).and_then(cg::parse_number)
        };
        let settings_due = self
            .settings_at
            .is_none_or(|at| now.saturating_duration_since(at) >= SETTINGS_EVERY);
        let mut list = None;
        if settings_due {
            self.settings_at = Some(now);
            self.read_settings(&mut figures, buffer, second, now);
            let index = if v2 { 5 } else { 7 };
            let text = self.text(index, cpuset, now).map(str::trim);
            list = Some(text.filter(|t| !t.is_empty()));
        }
        let own = (figures.memory_max, figures.memory_current_bytes);
        let binding = self.ancestors.binding(own, settings_due, buffer, now);
        let kept = &*self.cgroup;
        let binding_path = binding.map(|b| self.ancestors.path_of(&b, &kept.path));
        let same = Figures::of(kept) == figures
            && list.is_none_or(|list| kept.cpuset_cpus.as_deref() == list)
            && kept.member_count.is_none()
            && kept.biggest_members.is_empty()
            && kept.memory_limit_bytes == binding.map(|b| b.max)
            && kept.memory_limit_used_bytes == binding.and_then(|b| b.used)
            && kept.memory_limit_path.as_deref() == binding_path;
        if !same {
            let new_path = (kept.memory_limit_path.as_deref() != binding_path)
                .then(|| binding_path.map(str::to_string));
            let c = Arc::make_mut(&mut self.cgroup);
            figures.set(c);
            if let Some(list) = list {
                set_cpuset(c, list);
            }
            c.memory_limit_bytes = binding.map(|b| b.max);
            c.memory_limit_used_bytes = binding.and_then(|b| b.used);
            if let Some(path) = new_path {
                c.memory_limit_path = path;
            }
            c.member_count = None;
            c.biggest_members.clear();
        }
        if !self.keep_open {
            self.files.iter_mut().flatten().for_each(KeptFile::close);
            self.ancestors.close();
        }
    }

    /// Reads the limits and the quota into `figures`.
    fn read_settings(
        &mut self,
        figures: &mut Figures,
        buffer: &mut Vec<u8>,
        second: &mut Vec<u8>,
        now: Instant,
    ) {
        if self.cgroup.version == 2 {
            figures.memory_max = self.text(0, buffer, now).and_then(cg::parse_limit);
            figures.memory_swap_max = self.text(2, buffer, now).and_then(cg::parse_limit);
            figures.cpu_max = self.text(4, buffer, now).and_then(cg::parse_cpu_max);
            figures.pids_max = self.text(6, buffer, now).and_then(cg::parse_limit);
            return;
        }
        let bytes_limit = cg::parse_v1_bytes_limit;
        figures.memory_max = self.text(0, buffer, now).and_then(bytes_limit);
        figures.memory_swap_max = self.text(2, buffer, now).and_then(bytes_limit);
        figures.cpu_max = match (self.text(5, buffer, now), self.text(6, second, now)) {
            (Some(q), Some(p)) => cg::parse_v1_cpu_quota(q, p),
            _ => None,
        };
        figures.pids_max = self.text(8, buffer, now).and_then(cg::parse_limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Limit;

    const ID: &str = "3f2a1b9c0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn stat(pid: u32, ppid: u32, comm: &str, rss_pages: u64) -> String {
        format!(
            "{pid} ({comm}) S {ppid} {pid} {ppid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 1000 \
             {rss_pages} 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0\n"
        )
    }

    /// A cgroup v1 host (no cgroup.controllers at the mount) with a Docker container.
    fn v1_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let lines = format!(
            "11:pids:/docker/{ID}\n6:cpu,cpuacct:/docker/{ID}\n5:memory:/docker/{ID}\n\
             3:cpuset:/docker/{ID}\n1:name=systemd:/docker/{ID}\n"
        );
        for (pid, ppid, comm, pages) in [(7, 1, "python3", 2048), (8, 7, "pt_data_worker", 4096)] {
            write(root, &format!("proc/{pid}/cgroup"), &lines);
            write(
                root,
                &format!("proc/{pid}/stat"),
                &stat(pid, ppid, comm, pages),
            );
        }
        let memory = format!("sys/fs/cgroup/memory/docker/{ID}");
        write(
            root,
            &format!("{memory}/memory.limit_in_bytes"),
            "1073741824\n",
        );
        write(
            root,
            &format!("{memory}/memory.usage_in_bytes"),
            "1000000000\n",
        );
        write(
            root,
            &format!("{memory}/memory.memsw.limit_in_bytes"),
            "9223372036854771712\n",
        );
        write(
            root,
            &format!("{memory}/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        );
        write(root, &format!("{memory}/memory.failcnt"), "31\n");
        write(root, &format!("{memory}/cgroup.procs"), "7\n8\n");
        let cpu = format!("sys/fs/cgroup/cpu,cpuacct/docker/{ID}");
        write(root, &format!("{cpu}/cpu.cfs_quota_us"), "200000\n");
        write(root, &format!("{cpu}/cpu.cfs_period_us"), "100000\n");
        write(
            root,
            &format!("sys/fs/cgroup/cpuset/docker/{ID}/cpuset.effective_cpus"),
            "0-7\n",
        );
        write(
            root,
            &format!("sys/fs/cgroup/pids/docker/{ID}/pids.max"),
            "max\n",
        );
        dir
    }

    fn reader(root: &Path) -> CgroupReader {
        CgroupReader::new(root.join("proc"), root.join("sys/fs/cgroup"), 4096)
    }

    #[test]
    fn a_known_process_s_cgroup_is_read_again_every_rescan() {
        let dir = v1_tree();
        let mut reader = reader(dir.path());
        let t0 = Instant::now();
        let path = |r: &mut CgroupReader, at| {
            r.of_known_process(7, 100, at, |_| None)
                .unwrap()
                .cgroup
                .path
                .clone()
        };
        assert_eq!(path(&mut reader, t0), format!("/docker/{ID}"));
        // Moved to another cgroup: seen at the next read (pid 7: 3.5 s sooner the first time).
        write(
            dir.path(),
            "proc/7/cgroup",
            "5:memory:/moved
",
        );
        reader.new_refresh();
        assert_eq!(
            path(&mut reader, t0 + Duration::from_secs(1)),
            format!("/docker/{ID}")
        );
        reader.new_refresh();
        assert_eq!(path(&mut reader, t0 + Duration::from_secs(2)), "/moved");
        // Another process under the pid is read at once.
        write(
            dir.path(),
            "proc/7/cgroup",
            "5:memory:/other
",
        );
        let other = reader.of_known_process(7, 999, t0 + Duration::from_secs(2), |_| None);
        assert_eq!(other.unwrap().cgroup.path, "/other");
    }

    #[test]
    fn a_v1_controller_directory_that_comes_is_found_at_the_next_rescan() {
        let dir = v1_tree();
        let cpuset = dir.path().join("sys/fs/cgroup/cpuset");
        std::fs::remove_dir_all(&cpuset).unwrap();
        let mut reader = reader(dir.path());
        let t0 = Instant::now();
        let mut count = |at| {
            reader.new_refresh();
            let found = reader.of_known_process(8, 100, at, |_| None).unwrap();
            found.cgroup.cpuset_count
        };
        assert_eq!(count(t0), None);
        write(
            dir.path(),
            &format!("sys/fs/cgroup/cpuset/docker/{ID}/cpuset.effective_cpus"),
            "0-3\n",
        );
        assert_eq!(
            count(t0 + Duration::from_secs(1)),
            None,
            "not looked for yet"
        );
        assert_eq!(count(t0 + CGROUP_RESCAN), Some(4));
        // And goes again.
        std::fs::remove_dir_all(&cpuset).unwrap();
        assert_eq!(count(t0 + 2 * CGROUP_RESCAN), None);
    }

    #[test]
    fn an_oom_file_read_in_the_refresh_is_not_read_again() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "sys/fs/cgroup/cgroup.controllers", "memory\n");
        write(
            dir.path(),
            "sys/fs/cgroup/g/memory.events",
            "max 1\noom_kill 1\n",
        );
        write(dir.path(), "proc/9/cgroup", "0::/g\n");
        let mut reader = reader(dir.path());
        let events = dir.path().join("sys/fs/cgroup/g/memory.events");
        let sampled = OomCounts {
            oom_kill: Some(7),
            max: Some(3),
        };
        let now = Instant::now();
        let oom = |file: &Path| (file == events).then_some(sampled);
        let cgroup = reader.of_known_process(9, 100, now, oom).unwrap().cgroup;
        assert_eq!(
            (cgroup.oom_kills, cgroup.memory_max_hits),
            (Some(7), Some(3))
        );
        reader.new_refresh();
        let cgroup = reader
            .of_known_process(9, 100, now, |_| None)
            .unwrap()
            .cgroup;
        assert_eq!(
            (cgroup.oom_kills, cgroup.memory_max_hits),
            (Some(1), Some(1))
        );
    }

    #[test]
    fn where_a_cgroup_is_is_found_once_a_refresh() {
        let dir = v1_tree();
        let mut reader = reader(dir.path());
        let text = std::fs::read_to_string(dir.path().join("proc/7/cgroup")).unwrap();
        let t0 = Instant::now();
        let mut count = |at| reader.of_text(&text, at).unwrap().0.cpuset_count;
        assert_eq!(count(t0), Some(8));
        // The cpuset hierarchy goes away: the processes of this refresh share what was found,
        // a refresh once the settings are due looks again.
        std::fs::remove_dir_all(dir.path().join("sys/fs/cgroup/cpuset")).unwrap();
        assert_eq!(count(t0), Some(8));
        reader.new_refresh();
        assert_eq!(
            reader
                .of_text(&text, t0 + SETTINGS_EVERY)
                .unwrap()
                .0
                .cpuset_count,
            None
        );
    }

    #[test]
    fn v1_hierarchies_give_the_same_figures_as_v2() {
        let dir = v1_tree();
        let (cgroup, dirs) = reader(dir.path()).of_process(7).unwrap();
        assert_eq!(cgroup.version, 1);
        assert_eq!(cgroup.path, format!("/docker/{ID}"));
        assert_eq!(cgroup.memory_max, Some(Limit::Value(1 << 30)));
        assert_eq!(cgroup.memory_current_bytes, Some(1_000_000_000));
        assert_eq!(cgroup.memory_swap_max, Some(Limit::Max));
        assert_eq!(cgroup.oom_kills, Some(2));
        assert_eq!(cgroup.memory_max_hits, Some(31));
        assert_eq!(cgroup.allowed_cpus(), Some(2.0));
        assert_eq!(cgroup.cpuset_count, Some(8));
        assert_eq!(cgroup.pids_max, Some(Limit::Max));
        assert_eq!(cgroup.container.as_ref().unwrap().runtime, "docker");
        assert!(dirs.unwrap().ends_with("memory.oom_control"));
        // 93% of the limit: the members are listed, biggest first.
        assert_eq!(cgroup.member_count, Some(2));
        let biggest: Vec<(u32, u64)> = cgroup
            .biggest_members
            .iter()
            .map(|m| (m.pid, m.rss_bytes))
            .collect();
        assert_eq!(biggest, [(8, 4096 * 4096), (7, 2048 * 4096)]);
    }

    #[test]
    fn a_cgroup_is_read_once_per_refresh() {
        let dir = v1_tree();
        let mut reader = reader(dir.path());
        let first = reader.of_process(7).unwrap().0;
        let memory = dir.path().join(format!("sys/fs/cgroup/memory/docker/{ID}"));
        std::fs::write(memory.join("memory.usage_in_bytes"), "5\n").unwrap();
        assert_eq!(
            reader.of_process(8).unwrap().0,
            first,
            "the same cgroup, this refresh"
        );
        reader.new_refresh();
        let again = reader.of_process(8).unwrap().0;
        assert_eq!(again.memory_current_bytes, Some(5));
        assert_eq!(
            again.member_count, None,
            "far below the limit: members are not read"
        );
    }

    #[test]
    fn the_files_of_at_most_so_many_cgroups_stay_open() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "sys/fs/cgroup/cgroup.controllers", "memory\n");
        let count = MAX_KEPT_GROUPS + 4;
        let mut reader = reader(dir.path());
        let now = Instant::now();
        for i in 0..count {
            write(
                dir.path(),
                &format!("sys/fs/cgroup/g{i}/memory.current"),
                &format!("{i}\n"),
            );
            let text = format!("0::/g{i}\n");
            let (cgroup, _) = reader.of_text(&text, now).unwrap();
            assert_eq!(cgroup.memory_current_bytes, Some(i as u64));
        }
        let open = |reader: &CgroupReader| {
            let files = reader
                .groups
                .values()
                .flat_map(|g| g.files.iter().flatten());
            files.filter(|f| f.is_open()).count()
        };
        assert_eq!(open(&reader), MAX_KEPT_GROUPS, "one file each is there");
        // Kept open, a file still shows what is written to it; a cgroup removed reads as none.
        reader.new_refresh();
        write(dir.path(), "sys/fs/cgroup/g0/memory.current", "77\n");
        std::fs::remove_dir_all(dir.path().join("sys/fs/cgroup/g1")).unwrap();
        let (g0, _) = reader.of_text("0::/g0\n", now).unwrap();
        assert_eq!(g0.memory_current_bytes, Some(77));
        let (g1, _) = reader.of_text("0::/g1\n", now).unwrap();
        assert_eq!(g1.memory_current_bytes, None);
        // The cgroups not used in a refresh are closed at the next.
        reader.new_refresh();
        assert!(open(&reader) <= 1);
    }

    #[test]
    fn a_reading_that_changes_nothing_keeps_the_shared_cgroup() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "sys/fs/cgroup/cgroup.controllers", "memory\n");
        write(dir.path(), "sys/fs/cgroup/g/memory.current", "5\n");
        write(dir.path(), "sys/fs/cgroup/g/cpuset.cpus.effective", "0-3\n");
        write(dir.path(), "proc/9/cgroup", "0::/g\n");
        let mut reader = reader(dir.path());
        let t0 = Instant::now();
        let read_at = |reader: &mut CgroupReader, now| {
            reader.new_refresh();
            Arc::clone(
                reader
                    .of_known_process(9, 100, now, |_| None)
                    .unwrap()
                    .cgroup,
            )
        };
        let read = |reader: &mut CgroupReader| read_at(reader, t0);
        let first = read(&mut reader);
        let same = read(&mut reader);
        assert!(Arc::ptr_eq(&first, &same), "nothing changed: shared");
        write(dir.path(), "sys/fs/cgroup/g/memory.current", "6\n");
        let changed = read(&mut reader);
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(changed.memory_current_bytes, Some(6));
        assert_eq!(
            first.memory_current_bytes,
            Some(5),
            "the earlier rows keep theirs"
        );
        // A setting is read again once SETTINGS_EVERY has passed.
        write(dir.path(), "sys/fs/cgroup/g/cpuset.cpus.effective", "0-7\n");
        assert_eq!(read(&mut reader).cpuset_cpus.as_deref(), Some("0-3"));
        let cpus = read_at(&mut reader, t0 + SETTINGS_EVERY);
        assert_eq!(
            (cpus.cpuset_cpus.as_deref(), cpus.cpuset_count),
            (Some("0-7"), Some(8))
        );
        assert_eq!(changed.cpuset_cpus.as_deref(), Some("0-3"));
    }

    #[test]
    fn missing_files_are_none() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "sys/fs/cgroup/cgroup.controllers", "memory\n");
        write(dir.path(), "proc/9/cgroup", "0::/user.slice/x.scope\n");
        std::fs::create_dir_all(dir.path().join("sys/fs/cgroup/user.slice/x.scope")).unwrap();
        let (cgroup, _) = reader(dir.path()).of_process(9).unwrap();
        assert_eq!(cgroup.version, 2);
        assert_eq!(
            (cgroup.memory_max, cgroup.cpu_max, cgroup.oom_kills),
            (None, None, None)
        );
        assert_eq!(cgroup.label().to_string(), "x.scope");
        assert!(reader(dir.path()).of_process(10).is_none());
    }
}
