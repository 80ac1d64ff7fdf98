//! What one reading of a cgroup's files gives ([`Figures`]; the cpuset list and count), set
//! on the kept [`Cgroup`] only where it changed; and its biggest members, listed while it is
//! near its memory limit.

use std::path::Path;

use crate::model::{Cgroup, CgroupMember, CpuMax, Limit};
use crate::sys::cgroup as cg;
use crate::sys::proc as procfs;

use super::{BIGGEST_KEPT, MAX_MEMBERS_SCANNED};

/// The limits and counters of one reading of a cgroup (all but the cpuset).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Figures {
    pub(super) memory_max: Option<Limit>,
    pub(super) memory_current_bytes: Option<u64>,
    pub(super) memory_swap_max: Option<Limit>,
    pub(super) oom_kills: Option<u64>,
    pub(super) memory_max_hits: Option<u64>,
    pub(super) cpu_max: Option<CpuMax>,
    pub(super) pids_max: Option<Limit>,
}

impl Figures {
    pub(super) fn of(c: &Cgroup) -> Self {
        Figures {
            memory_max: c.memory_max,
            memory_current_bytes: c.memory_current_bytes,
            memory_swap_max: c.memory_swap_max,
            oom_kills: c.oom_kills,
            memory_max_hits: c.memory_max_hits,
            cpu_max: c.cpu_max,
            pids_max: c.pids_max,
        }
    }

    pub(super) fn set(self, c: &mut Cgroup) {
        c.memory_max = self.memory_max;
        c.memory_current_bytes = self.memory_current_bytes;
        c.memory_swap_max = self.memory_swap_max;
        c.oom_kills = self.oom_kills;
        c.memory_max_hits = self.memory_max_hits;
        c.cpu_max = self.cpu_max;
        c.pids_max = self.pids_max;
    }
}

/// The cpuset list and its count; the kept text is replaced only when it changed.
pub(super) fn set_cpuset(cgroup: &mut Cgroup, list: Option<&str>) {
    if cgroup.cpuset_cpus.as_deref() != list {
        cgroup.cpuset_cpus = list.map(str::to_string);
    }
    cgroup.cpuset_count = list.and_then(cg::count_cpu_list);
}

/// Fills in the member count and the biggest members by RSS.
pub(super) fn list_members(proc_root: &Path, page_size: u64, dir: &Path, cgroup: &mut Cgroup) {
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
        .filter_map(|&pid| procfs::read_pid_stat(proc_root, pid).ok())
        .map(|stat| CgroupMember {
            pid: stat.pid,
            ppid: stat.ppid,
            rss_bytes: stat.rss_pages.saturating_mul(page_size),
            comm: stat.comm,
        })
        .collect();
    members.sort_by(|a, b| b.rss_bytes.cmp(&a.rss_bytes).then(a.pid.cmp(&b.pid)));
    members.truncate(BIGGEST_KEPT);
    cgroup.biggest_members = members;
}
