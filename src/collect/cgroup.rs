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
//! While memory is at [`MEMBER_SCAN_FRACTION`] of its limit or more, cgroup.procs and each
//! member's stat are read too, to name the biggest members.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::model::{Cgroup, CgroupMember};
use crate::sys::cgroup::{self as cg, ProcCgroups};
use crate::sys::proc as procfs;

use super::container::classify_path;
use super::scheduler::slurm_from_path;

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

/// Where one cgroup's files are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CgroupDirs {
    pub(crate) version: u8,
    /// v2: the one directory; v1: the memory controller's.
    pub(crate) memory: Option<PathBuf>,
    cpu: Option<PathBuf>,
    cpuset: Option<PathBuf>,
    pids: Option<PathBuf>,
    /// The path shown: the unified one, or v1's memory path.
    path: String,
}

impl CgroupDirs {
    /// The file whose `oom_kill` counts kills in this cgroup.
    pub(crate) fn oom_file(&self) -> Option<PathBuf> {
        let name = if self.version == 2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        self.memory.as_ref().map(|d| d.join(name))
    }
}

/// The per-refresh cache of cgroups read.
pub(crate) struct CgroupReader {
    proc_root: PathBuf,
    /// The cgroup mount: `/sys/fs/cgroup`.
    mount: PathBuf,
    page_size: u64,
    unified: Option<bool>,
    this_refresh: HashMap<CgroupDirs, Cgroup>,
    /// Where the files are, by the text of /proc/PID/cgroup, this refresh: finding them
    /// checks each controller's directory, a path walk each, which processes in one cgroup
    /// (a job's ranks and workers) would otherwise repeat.
    dirs_this_refresh: HashMap<String, Option<CgroupDirs>>,
    /// /proc/PID/cgroup of the processes asked for by [`CgroupReader::of_known_process`].
    texts: HashMap<u32, KnownText>,
}

/// One process's /proc/PID/cgroup as last read.
struct KnownText {
    start_ticks: u64,
    text: String,
    read_at: Instant,
    asked_at: Instant,
}

impl CgroupReader {
    pub(crate) fn new(proc_root: PathBuf, mount: PathBuf, page_size: u64) -> Self {
        CgroupReader {
            proc_root,
            mount,
            page_size,
            unified: None,
            this_refresh: HashMap::new(),
            dirs_this_refresh: HashMap::new(),
            texts: HashMap::new(),
        }
    }

    /// Forgets the cgroups read: the next refresh reads them again.
    pub(crate) fn new_refresh(&mut self) {
        self.this_refresh.clear();
        self.dirs_this_refresh.clear();
        let now = Instant::now();
        self.texts
            .retain(|_, known| now.saturating_duration_since(known.asked_at) < 6 * CGROUP_RESCAN);
    }

    /// The cgroup of `pid` with its limits, and where its files are; `None` where
    /// /proc/PID/cgroup is unreadable or names no usable path.
    #[cfg(test)]
    pub(crate) fn of_process(&mut self, pid: u32) -> Option<(Cgroup, CgroupDirs)> {
        let text = cg::read_small(&procfs::pid_dir(&self.proc_root, pid).join("cgroup"))?;
        self.of_text(&text)
    }

    /// As [`CgroupReader::of_process`] for the process (`pid`, `start_ticks`), whose
    /// /proc/PID/cgroup is read again only every [`CGROUP_RESCAN`] (the first time again
    /// sooner by up to that, by pid, so that processes seen together are read apart).
    pub(crate) fn of_known_process(
        &mut self,
        pid: u32,
        start_ticks: u64,
        now: Instant,
    ) -> Option<(Cgroup, CgroupDirs)> {
        let fresh = self.texts.get(&pid).is_some_and(|known| {
            known.start_ticks == start_ticks
                && now.saturating_duration_since(known.read_at) < CGROUP_RESCAN
        });
        if !fresh {
            let path = procfs::pid_dir(&self.proc_root, pid).join("cgroup");
            let Some(text) = cg::read_small(&path) else {
                self.texts.remove(&pid);
                return None;
            };
            let first = self
                .texts
                .get(&pid)
                .is_none_or(|k| k.start_ticks != start_ticks);
            let stagger = CGROUP_RESCAN * (pid % 10) / 10;
            let read_at = if first {
                now.checked_sub(stagger).unwrap_or(now)
            } else {
                now
            };
            let known = KnownText {
                start_ticks,
                text,
                read_at,
                asked_at: now,
            };
            self.texts.insert(pid, known);
        }
        let known = self.texts.get_mut(&pid)?;
        known.asked_at = now;
        let text = std::mem::take(&mut known.text);
        let found = self.of_text(&text);
        if let Some(known) = self.texts.get_mut(&pid) {
            known.text = text;
        }
        found
    }

    fn of_text(&mut self, text: &str) -> Option<(Cgroup, CgroupDirs)> {
        let dirs = if let Some(known) = self.dirs_this_refresh.get(text) {
            known.clone()?
        } else {
            let dirs = cg::parse_proc_cgroup(text).and_then(|groups| self.dirs(&groups));
            self.dirs_this_refresh
                .insert(text.to_string(), dirs.clone());
            dirs?
        };
        if let Some(known) = self.this_refresh.get(&dirs) {
            return Some((known.clone(), dirs));
        }
        let cgroup = self.read(&dirs);
        self.this_refresh.insert(dirs.clone(), cgroup.clone());
        Some((cgroup, dirs))
    }

    fn is_unified(&mut self) -> bool {
        let mount = &self.mount;
        *self
            .unified
            .get_or_insert_with(|| mount.join("cgroup.controllers").exists())
    }

    fn dirs(&mut self, groups: &ProcCgroups) -> Option<CgroupDirs> {
        if self.is_unified() {
            let path = groups.unified.clone()?;
            let dir = cg::join_below(&self.mount, &path)?;
            return Some(CgroupDirs {
                version: 2,
                memory: Some(dir.clone()),
                cpu: Some(dir.clone()),
                cpuset: Some(dir.clone()),
                pids: Some(dir),
                path,
            });
        }
        let v1 = |controller: &str, mount_dir: &str| {
            let path = groups.v1_path(controller)?;
            // Distributions mount cpu alone or as "cpu,cpuacct": the one that is there.
            cg::join_below(&self.mount.join(mount_dir), path).filter(|d| d.is_dir())
        };
        let path = groups
            .v1_path("memory")
            .or_else(|| groups.v1_path("cpu"))?
            .to_string();
        Some(CgroupDirs {
            version: 1,
            memory: v1("memory", "memory"),
            cpu: v1("cpu", "cpu").or_else(|| v1("cpu", "cpu,cpuacct")),
            cpuset: v1("cpuset", "cpuset"),
            pids: v1("pids", "pids"),
            path,
        })
    }

    fn read(&self, dirs: &CgroupDirs) -> Cgroup {
        let file = |dir: &Option<PathBuf>, name: &str| {
            dir.as_ref().and_then(|d| cg::read_small(&d.join(name)))
        };
        let (container, pod) = classify_path(&dirs.path);
        let (slurm_job, slurm_step) = slurm_from_path(&dirs.path).unzip();
        let mut cgroup = Cgroup {
            path: dirs.path.clone(),
            version: dirs.version,
            container,
            pod,
            slurm_job,
            slurm_step: slurm_step.flatten(),
            ..Default::default()
        };
        if dirs.version == 2 {
            let events = file(&dirs.memory, "memory.events");
            cgroup.memory_max = file(&dirs.memory, "memory.max").and_then(|t| cg::parse_limit(&t));
            cgroup.memory_current_bytes =
                file(&dirs.memory, "memory.current").and_then(|t| cg::parse_number(&t));
            cgroup.memory_swap_max =
                file(&dirs.memory, "memory.swap.max").and_then(|t| cg::parse_limit(&t));
            cgroup.oom_kills = events.as_ref().and_then(|t| cg::keyed_value(t, "oom_kill"));
            cgroup.memory_max_hits = events.as_ref().and_then(|t| cg::keyed_value(t, "max"));
            cgroup.cpu_max = file(&dirs.cpu, "cpu.max").and_then(|t| cg::parse_cpu_max(&t));
            cgroup.cpuset_cpus = file(&dirs.cpuset, "cpuset.cpus.effective");
            cgroup.pids_max = file(&dirs.pids, "pids.max").and_then(|t| cg::parse_limit(&t));
        } else {
            let bytes_limit =
                |name| file(&dirs.memory, name).and_then(|t| cg::parse_v1_bytes_limit(&t));
            cgroup.memory_max = bytes_limit("memory.limit_in_bytes");
            cgroup.memory_swap_max = bytes_limit("memory.memsw.limit_in_bytes");
            cgroup.memory_current_bytes =
                file(&dirs.memory, "memory.usage_in_bytes").and_then(|t| cg::parse_number(&t));
            cgroup.oom_kills = file(&dirs.memory, "memory.oom_control")
                .and_then(|t| cg::keyed_value(&t, "oom_kill"));
            cgroup.memory_max_hits =
                file(&dirs.memory, "memory.failcnt").and_then(|t| cg::parse_number(&t));
            cgroup.cpu_max = match (
                file(&dirs.cpu, "cpu.cfs_quota_us"),
                file(&dirs.cpu, "cpu.cfs_period_us"),
            ) {
                (Some(q), Some(p)) => cg::parse_v1_cpu_quota(&q, &p),
                _ => None,
            };
            cgroup.cpuset_cpus = file(&dirs.cpuset, "cpuset.effective_cpus");
            cgroup.pids_max = file(&dirs.pids, "pids.max").and_then(|t| cg::parse_limit(&t));
        }
        cgroup.cpuset_cpus = cgroup
            .cpuset_cpus
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        cgroup.cpuset_count = cgroup.cpuset_cpus.as_deref().and_then(cg::count_cpu_list);
        if cgroup
            .memory_fraction()
            .is_some_and(|f| f >= MEMBER_SCAN_FRACTION)
        {
            if let Some(dir) = &dirs.memory {
                self.list_members(dir, &mut cgroup);
            }
        }
        cgroup
    }

    /// Fills in the member count and the biggest members by RSS.
    fn list_members(&self, dir: &Path, cgroup: &mut Cgroup) {
        let Some(text) = cg::read_small(&dir.join("cgroup.procs")) else {
            return;
        };
        let pids: Vec<u32> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        cgroup.member_count = u32::try_from(pids.len()).ok();
        let mut members: Vec<CgroupMember> = pids
            .iter()
            .take(MAX_MEMBERS_SCANNED)
            .filter_map(|&pid| procfs::read_pid_stat(&self.proc_root, pid).ok())
            .map(|stat| CgroupMember {
                pid: stat.pid,
                ppid: stat.ppid,
                rss_bytes: stat.rss_pages.saturating_mul(self.page_size),
                comm: stat.comm,
            })
            .collect();
        members.sort_by(|a, b| b.rss_bytes.cmp(&a.rss_bytes).then(a.pid.cmp(&b.pid)));
        members.truncate(BIGGEST_KEPT);
        cgroup.biggest_members = members;
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
        let path = |r: &mut CgroupReader, at| r.of_known_process(7, 100, at).unwrap().0.path;
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
        let other = reader.of_known_process(7, 999, t0 + Duration::from_secs(2));
        assert_eq!(other.unwrap().0.path, "/other");
    }

    #[test]
    fn where_a_cgroup_is_is_found_once_a_refresh() {
        let dir = v1_tree();
        let mut reader = reader(dir.path());
        assert_eq!(reader.of_process(7).unwrap().0.cpuset_count, Some(8));
        // The cpuset hierarchy goes away: the processes of this refresh share what was found,
        // the next refresh looks again.
        std::fs::remove_dir_all(dir.path().join("sys/fs/cgroup/cpuset")).unwrap();
        assert_eq!(reader.of_process(8).unwrap().0.cpuset_count, Some(8));
        reader.new_refresh();
        assert_eq!(reader.of_process(8).unwrap().0.cpuset_count, None);
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
        assert!(dirs.oom_file().unwrap().ends_with("memory.oom_control"));
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
        assert_eq!(cgroup.label(), "x.scope");
        assert!(reader(dir.path()).of_process(10).is_none());
    }
}
