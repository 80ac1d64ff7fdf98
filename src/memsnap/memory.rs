//! The memory guard: a snapshot file that would take more memory than torchtop may still use is
//! refused with a sentence before it is read. The file may come from another user's process (an
//! agent's snapshot, opened by root's monitor), and being killed for memory, silently, inside a
//! Slurm job or a pod, is no way to say a file is too big.
//!
//! What torchtop may still use is the lower of the machine's MemAvailable and what the memory
//! limits of torchtop's own cgroup and its ancestors still allow.

use std::path::{Path, PathBuf};

use crate::format::bytes;
use crate::model::Limit;
use crate::sys::cgroup as cg;

/// How many times its size a snapshot takes in memory at the peak of reading, with room to
/// spare. Measured (peak RSS of `torchtop snapshot FILE --json`, 2026-12-02): 6.4 for a trace of
/// 3 million frameless entries with only action, address and size (69 MB), the worst found; 4.6
/// for one whose entries also carry their own strings (`_record_memory_history(context=None)`,
/// 138 MB); 2.5 for the benchmark's 99 MB snapshot with frames.
pub(super) const MEMORY_PER_FILE_BYTE: u64 = 7;

/// The memory torchtop may still take, and which limit set it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Room {
    pub(super) bytes: u64,
    /// Completes "more than the N that …": "of memory available", or the cgroup's file.
    pub(super) source: String,
}

/// A sentence when reading a file of `file_bytes` would take more memory than torchtop may
/// still use. `None` when it fits, or when neither /proc/meminfo nor the cgroup can tell.
pub(super) fn too_big_for_memory(file_bytes: u64) -> Option<String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let own = cg::read_small(Path::new("/proc/self/cgroup"));
    let room = room(
        meminfo.as_deref(),
        own.as_deref(),
        Path::new("/sys/fs/cgroup"),
    )?;
    refusal(file_bytes, &room)
}

/// The sentence for a file of `file_bytes` that does not fit in `room`.
pub(super) fn refusal(file_bytes: u64, room: &Room) -> Option<String> {
    let needs = file_bytes.saturating_mul(MEMORY_PER_FILE_BYTE);
    (needs > room.bytes).then(|| {
        format!(
            "is {}, and reading it would take about {}, more than the {} {}; open it on a \
             machine (or in a job) with more memory",
            bytes(file_bytes),
            bytes(needs),
            bytes(room.bytes),
            room.source
        )
    })
}

/// The lower of MemAvailable (from the text of /proc/meminfo) and the room the cgroup named
/// by the text of /proc/self/cgroup has left, below the cgroup mount `mount`.
pub(super) fn room(meminfo: Option<&str>, own_cgroup: Option<&str>, mount: &Path) -> Option<Room> {
    let available = meminfo
        .and_then(|text| crate::sys::proc::parse_meminfo(text).ok())
        .and_then(|info| info.available_bytes)
        .map(|bytes| Room {
            bytes,
            source: "of memory available".to_string(),
        });
    let cgroup = own_cgroup.and_then(|text| cgroup_room(text, mount));
    match (available, cgroup) {
        (Some(a), Some(c)) => Some(if c.bytes < a.bytes { c } else { a }),
        (a, c) => a.or(c),
    }
}

/// The least room left under a memory limit, over torchtop's cgroup and its ancestors up to
/// the mount (a limit set on a parent, such as a Slurm job's above its step, binds too).
fn cgroup_room(own_cgroup: &str, mount: &Path) -> Option<Room> {
    let groups = cg::parse_proc_cgroup(own_cgroup)?;
    let (base, path, files) = if mount.join("cgroup.controllers").is_file() {
        let files = (
            "memory.max",
            "memory.current",
            cg::parse_limit as fn(&str) -> _,
        );
        (mount.to_path_buf(), groups.unified?, files)
    } else {
        let files: LimitFiles = (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            cg::parse_v1_bytes_limit,
        );
        (
            mount.join("memory"),
            groups.v1_path("memory")?.to_string(),
            files,
        )
    };
    let leaf = cg::join_below(&base, &path)?;
    leaf.ancestors()
        .take_while(|dir| dir.starts_with(&base))
        .filter_map(|dir| limit_room(dir, files))
        .min_by_key(|room| room.bytes)
}

/// A cgroup version's memory files: the limit, the usage, and how the limit reads.
type LimitFiles = (&'static str, &'static str, fn(&str) -> Option<Limit>);

/// The room left in one cgroup directory with a memory limit: limit − usage.
fn limit_room(dir: &Path, (limit_file, usage_file, parse): LimitFiles) -> Option<Room> {
    let limit_path: PathBuf = dir.join(limit_file);
    let Limit::Value(limit) = parse(&cg::read_small(&limit_path)?)? else {
        return None;
    };
    let usage = cg::parse_number(&cg::read_small(&dir.join(usage_file))?)?;
    Some(Room {
        bytes: limit.saturating_sub(usage),
        source: format!(
            "that torchtop's cgroup still allows (limit {}, {} in use: {})",
            bytes(limit),
            bytes(usage),
            limit_path.display()
        ),
    })
}
