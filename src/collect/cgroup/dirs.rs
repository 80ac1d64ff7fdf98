//! Where a cgroup's files are ([`CgroupDirs`]), found from the text of /proc/PID/cgroup
//! ([`FoundDirs`]): under v2 the one directory the text names, found once per text; under v1
//! the directory of each controller read, whose presence is looked at again every
//! [`CGROUP_RESCAN`](super::CGROUP_RESCAN) without building anything unless one came or went.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::sys::cgroup as cg;

/// Where one cgroup's files are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CgroupDirs {
    pub(crate) version: u8,
    /// v2: the one directory; v1: the memory controller's.
    pub(crate) memory: Option<PathBuf>,
    pub(super) cpu: Option<PathBuf>,
    pub(super) cpuset: Option<PathBuf>,
    pub(super) pids: Option<PathBuf>,
    /// The path shown: the unified one, or v1's memory path.
    pub(super) path: String,
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

/// Where the files of the cgroup a /proc/PID/cgroup text names are (`None`: nowhere usable).
pub(super) struct FoundDirs {
    pub(super) dirs: Option<CgroupDirs>,
    /// v1: where each directory of [`V1_DIRS`] would be for this text, and whether it was
    /// there at the last look. A rescan looks at these again, and builds [`FoundDirs::dirs`]
    /// anew only when one came or went (building them each rescan cost some twenty
    /// allocations, the sampler's last in steady state).
    v1: [Option<(PathBuf, bool)>; V1_DIRS.len()],
    pub(super) found_at: Instant,
    pub(super) used_at: Instant,
}

/// The v1 controller directories looked for: (controller, the directory below the mount).
/// Distributions mount cpu alone or as "cpu,cpuacct": the one that is there is used.
const V1_DIRS: [(&str, &str); 5] = [
    ("memory", "memory"),
    ("cpu", "cpu"),
    ("cpu", "cpu,cpuacct"),
    ("cpuset", "cpuset"),
    ("pids", "pids"),
];

impl FoundDirs {
    /// Where the files of the cgroup `text` names are, found for the first time (`mount`:
    /// the cgroup mount; `unified`: whether it is cgroup v2's).
    pub(super) fn find(text: &str, mount: &Path, unified: bool, now: Instant) -> FoundDirs {
        let mut found = FoundDirs {
            dirs: None,
            v1: Default::default(),
            found_at: now,
            used_at: now,
        };
        let Some(groups) = cg::parse_proc_cgroup(text) else {
            return found;
        };
        if unified {
            found.dirs = groups.unified.clone().and_then(|path| {
                let dir = cg::join_below(mount, &path)?;
                Some(CgroupDirs {
                    version: 2,
                    memory: Some(dir.clone()),
                    cpu: Some(dir.clone()),
                    cpuset: Some(dir.clone()),
                    pids: Some(dir),
                    path,
                })
            });
            return found;
        }
        for (slot, (controller, mount_dir)) in found.v1.iter_mut().zip(V1_DIRS) {
            let path = groups.v1_path(controller);
            let dir = path.and_then(|path| cg::join_below(&mount.join(mount_dir), path));
            *slot = dir.map(|dir| {
                let there = dir.is_dir();
                (dir, there)
            });
        }
        let path = groups.v1_path("memory").or_else(|| groups.v1_path("cpu"));
        found.dirs = path.map(|path| v1_dirs(&found.v1, path.to_string()));
        found
    }

    /// v1: looks again at which controller directories are there; a change finds the files
    /// anew (the cgroup's path shown stays: it comes from the text).
    pub(super) fn look_again(&mut self, now: Instant) {
        self.found_at = now;
        let mut changed = false;
        for (dir, there) in self.v1.iter_mut().flatten() {
            let now_there = dir.is_dir();
            changed |= now_there != *there;
            *there = now_there;
        }
        if let (true, Some(dirs)) = (changed, &self.dirs) {
            self.dirs = Some(v1_dirs(&self.v1, dirs.path.clone()));
        }
    }
}

/// The v1 directories of [`V1_DIRS`] that are there, as [`CgroupDirs`].
fn v1_dirs(found: &[Option<(PathBuf, bool)>; V1_DIRS.len()], path: String) -> CgroupDirs {
    let there = |i: usize| match &found[i] {
        Some((dir, true)) => Some(dir.clone()),
        _ => None,
    };
    CgroupDirs {
        version: 1,
        memory: there(0),
        cpu: there(1).or_else(|| there(2)),
        cpuset: there(3),
        pids: there(4),
        path,
    }
}
