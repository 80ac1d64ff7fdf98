//! The memory limits above a cgroup: a limit set on an ancestor binds its whole subtree, so a
//! Slurm task's cgroup without a limit of its own is held by its job's, and a container's by
//! its pod's. The limit that binds is the one with the least room left (limit − use), each
//! against its own cgroup's use: an ancestor's memory.current counts all its children, the
//! cgroup's siblings included, so the child's own use says nothing about the ancestor's room.
//!
//! Each ancestor's limit file (v2 memory.max, v1 memory.limit_in_bytes) is read with the
//! cgroup's other settings, every [`SETTINGS_EVERY`](super::SETTINGS_EVERY); the use (v2
//! memory.current, v1 memory.usage_in_bytes) each refresh, only of the ancestors with a limit.
//! The root of the hierarchy sets none and is not read.

use std::path::Path;
use std::time::Instant;

use super::dirs::CgroupDirs;
use super::{CGROUP_RESCAN, LIMIT_FILE_BYTES};
use crate::model::Limit;
use crate::sys::cgroup as cg;
use crate::sys::kept::KeptFile;

/// One ancestor cgroup's memory files.
struct Level {
    /// Its path, as /proc/PID/cgroup writes paths: "/slurm/uid_1000/job_42".
    path: String,
    limit_file: KeptFile,
    used_file: KeptFile,
    /// Its limit as last read; `None` for `max`, or where the file is missing or unreadable.
    limit: Option<u64>,
}

/// The ancestors of one cgroup, from its parent up to the last below the hierarchy's root.
pub(super) struct Ancestors {
    levels: Vec<Level>,
    v2: bool,
}

/// The limit that binds, and whose it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Binding {
    pub(super) max: u64,
    pub(super) used: Option<u64>,
    /// The ancestor that sets it (an index into [`Ancestors`]), or `None`: the cgroup itself.
    level: Option<usize>,
}

impl Ancestors {
    /// The ancestors of the cgroup at `dirs`, whose hierarchy is mounted at `mount` (v1: the
    /// mount of all controllers, `/sys/fs/cgroup`).
    pub(super) fn new(dirs: &CgroupDirs, mount: &Path) -> Self {
        let v2 = dirs.version == 2;
        let root = if v2 {
            mount.to_path_buf()
        } else {
            mount.join("memory")
        };
        let names: (&str, &str) = if v2 {
            ("memory.max", "memory.current")
        } else {
            ("memory.limit_in_bytes", "memory.usage_in_bytes")
        };
        let levels = dirs.memory.as_deref().map_or_else(Vec::new, |own| {
            own.ancestors()
                .skip(1)
                .take_while(|dir| dir.starts_with(&root) && *dir != root)
                .filter_map(|dir| {
                    let below = dir.strip_prefix(&root).ok()?;
                    Some(Level {
                        path: format!("/{}", below.display()),
                        limit_file: KeptFile::new(dir.join(names.0)),
                        used_file: KeptFile::new(dir.join(names.1)),
                        limit: None,
                    })
                })
                .collect()
        });
        Ancestors { levels, v2 }
    }

    /// Reads the ancestors' limits again (with `settings_due`) and the use of those with one;
    /// returns the limit that binds among them and the cgroup's own (`own`: its limit and use).
    pub(super) fn binding(
        &mut self,
        own: (Option<Limit>, Option<u64>),
        settings_due: bool,
        buffer: &mut Vec<u8>,
        now: Instant,
    ) -> Option<Binding> {
        let own = own.0.and_then(Limit::value).map(|max| Binding {
            max,
            used: own.1,
            level: None,
        });
        let parse: fn(&str) -> Option<Limit> = if self.v2 {
            cg::parse_limit
        } else {
            cg::parse_v1_bytes_limit
        };
        let mut best = own;
        for (index, level) in self.levels.iter_mut().enumerate() {
            if settings_due {
                level.limit = read(&mut level.limit_file, buffer, now)
                    .and_then(parse)
                    .and_then(Limit::value);
            }
            let Some(max) = level.limit else {
                continue;
            };
            let used = read(&mut level.used_file, buffer, now).and_then(cg::parse_number);
            let here = Binding {
                max,
                used,
                level: Some(index),
            };
            if best.is_none_or(|best| room(here) < room(best)) {
                best = Some(here);
            }
        }
        best
    }

    /// The path of the cgroup that sets `binding`; `own` is the cgroup's own path.
    pub(super) fn path_of<'a>(&'a self, binding: &Binding, own: &'a str) -> &'a str {
        match binding.level.and_then(|i| self.levels.get(i)) {
            Some(level) => &level.path,
            None => own,
        }
    }

    /// Closes the files until the next reading.
    pub(super) fn close(&mut self) {
        for level in &mut self.levels {
            level.limit_file.close();
            level.used_file.close();
        }
    }
}

/// The room left under a limit, for choosing the one that binds: where the use is unknown,
/// the limit itself (the most room it can leave), so that a limit whose use is known and
/// nearer wins.
fn room(binding: Binding) -> (u64, u64) {
    let left = binding
        .used
        .map_or(binding.max, |used| binding.max.saturating_sub(used));
    (left, binding.max)
}

fn read<'b>(file: &mut KeptFile, buffer: &'b mut Vec<u8>, now: Instant) -> Option<&'b str> {
    let bytes = file
        .read_retrying(buffer, LIMIT_FILE_BYTES, now, CGROUP_RESCAN)
        .ok()?;
    std::str::from_utf8(bytes).ok()
}
