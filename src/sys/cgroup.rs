//! Control groups as the kernel writes them: /proc/PID/cgroup, the limit and event files of
//! cgroup v2 and of the v1 memory, cpu, cpuset and pids hierarchies, and the `/dev/shm` line
//! of /proc/PID/mountinfo. Parsers take text and never panic; readers take a root and read
//! small files with a bound and `O_NOFOLLOW`.
//!
//! The cgroup path comes from /proc/PID/cgroup, which the kernel writes; but a user with a
//! delegated subtree (systemd user services) names its own cgroups, and the kernel does not
//! escape those names. So a path is only ever joined below the cgroup mount after checking that
//! every component is a plain name ([`join_below`]), and a /proc/PID/cgroup with two unified
//! lines is refused.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use crate::model::{CpuMax, Limit};

/// The most read from one cgroup file: cgroup.procs of a busy container is the biggest.
pub(crate) const MAX_CGROUP_FILE_BYTES: u64 = 256 << 10;

/// The v1 controllers torchtop reads.
pub(crate) const V1_CONTROLLERS: [&str; 4] = ["memory", "cpu", "cpuset", "pids"];

/// One process's cgroups, from /proc/PID/cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ProcCgroups {
    /// The `0::PATH` line (cgroup v2).
    pub(crate) unified: Option<String>,
    /// The v1 hierarchies of [`V1_CONTROLLERS`], by controller.
    pub(crate) v1: Vec<(&'static str, String)>,
}

impl ProcCgroups {
    pub(crate) fn v1_path(&self, controller: &str) -> Option<&str> {
        self.v1
            .iter()
            .find(|(c, _)| *c == controller)
            .map(|(_, p)| p.as_str())
    }
}

/// Parses /proc/PID/cgroup: `ID:CONTROLLERS:PATH` lines. `None` when it names two unified
/// paths (a crafted cgroup name with a newline) or no path at all.
pub(crate) fn parse_proc_cgroup(text: &str) -> Option<ProcCgroups> {
    let mut found = ProcCgroups::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        // The kernel's mark on a cgroup removed under its process: the container is still
        // the one the path names.
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        if id == "0" && controllers.is_empty() {
            if found.unified.is_some() {
                return None;
            }
            found.unified = Some(path.to_string());
            continue;
        }
        for controller in controllers.split(',') {
            if let Some(known) = V1_CONTROLLERS.iter().find(|c| **c == controller) {
                if found.v1_path(known).is_some() {
                    return None;
                }
                found.v1.push((known, path.to_string()));
            }
        }
    }
    (found.unified.is_some() || !found.v1.is_empty()).then_some(found)
}

/// `base` joined with the cgroup `path`, when every component of the path is a plain name.
pub(crate) fn join_below(base: &Path, path: &str) -> Option<PathBuf> {
    let mut joined = base.to_path_buf();
    for component in Path::new(path.trim_start_matches('/')).components() {
        match component {
            Component::Normal(name) => joined.push(name),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(joined)
}

/// Reads a small file: at most [`MAX_CGROUP_FILE_BYTES`], not through a symlink at its end.
/// `None` when it is missing or unreadable; the cgroup files are optional by nature (a
/// controller not enabled, an old kernel).
pub(crate) fn read_small(path: &Path) -> Option<String> {
    read_small_bounded(path, MAX_CGROUP_FILE_BYTES)
}

/// [`read_small`] with another bound.
pub(crate) fn read_small_bounded(path: &Path, limit: u64) -> Option<String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// A v2 limit file: `max` or a number.
pub(crate) fn parse_limit(text: &str) -> Option<Limit> {
    match text.trim() {
        "max" => Some(Limit::Max),
        number => number.parse().ok().map(Limit::Value),
    }
}

/// v1's memory.limit_in_bytes: the kernel writes a number near 2^63 for "no limit".
pub(crate) fn parse_v1_bytes_limit(text: &str) -> Option<Limit> {
    let value: i64 = text.trim().parse().ok()?;
    match u64::try_from(value) {
        Ok(v) if v < 1 << 62 => Some(Limit::Value(v)),
        _ => Some(Limit::Max),
    }
}

/// A file holding one number (memory.current, memory.usage_in_bytes, memory.failcnt).
pub(crate) fn parse_number(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The value of `key` in a flat keyed file ("key value" lines: memory.events,
/// memory.oom_control, /proc/vmstat).
pub(crate) fn keyed_value(text: &str, key: &str) -> Option<u64> {
    // Searched for, not split line by line: vmstat has some 170 lines, read every refresh.
    let bytes = text.as_bytes();
    memchr::memmem::find_iter(bytes, key.as_bytes()).find_map(|at| {
        let starts_line = at == 0 || bytes[at - 1] == b'\n';
        // The needle is UTF-8, so `at + key.len()` is a character boundary.
        let rest = &text[at + key.len()..];
        if !starts_line || !rest.starts_with([' ', '\t']) {
            return None;
        }
        let line = rest.lines().next()?;
        line.split_ascii_whitespace().next()?.parse().ok()
    })
}

/// cpu.max: `QUOTA PERIOD`, QUOTA being `max` or microseconds.
pub(crate) fn parse_cpu_max(text: &str) -> Option<CpuMax> {
    let mut words = text.split_whitespace();
    let quota = words.next()?;
    let period_us: u64 = words.next()?.parse().ok()?;
    let quota_us = match quota {
        "max" => None,
        number => Some(number.parse().ok()?),
    };
    Some(CpuMax {
        quota_us,
        period_us,
    })
}

/// v1's cpu.cfs_quota_us (-1 for none) and cpu.cfs_period_us.
pub(crate) fn parse_v1_cpu_quota(quota: &str, period: &str) -> Option<CpuMax> {
    let quota: i64 = quota.trim().parse().ok()?;
    let period_us: u64 = period.trim().parse().ok()?;
    Some(CpuMax {
        quota_us: u64::try_from(quota).ok(),
        period_us,
    })
}

/// How many CPUs a cpuset list names ("0-7,16,18-19" is 11); `None` when garbled. Ranges are
/// counted, not expanded, so a hostile "0-4294967295" costs nothing.
pub(crate) fn count_cpu_list(text: &str) -> Option<u32> {
    let text = text.trim();
    if text.is_empty() {
        return Some(0);
    }
    let mut count: u64 = 0;
    for part in text.split(',') {
        let (first, last) = if let Some((a, b)) = part.split_once('-') {
            (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)
        } else {
            let one = part.parse::<u64>().ok()?;
            (one, one)
        };
        count = count.checked_add(last.checked_sub(first)? + 1)?;
    }
    u32::try_from(count).ok()
}

/// What /proc/PID/mountinfo says of the mount at `/dev/shm`: its file system type and the
/// `size=` of its options in bytes (tmpfs writes it when it is not the default). The last
/// mount there wins, as it hides the ones below.
pub(crate) fn parse_shm_mount(text: &str) -> Option<(String, Option<u64>)> {
    let mut found = None;
    for line in text.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        if before.split_whitespace().nth(4) != Some("/dev/shm") {
            continue;
        }
        let mut words = after.split_whitespace();
        let fstype = words.next().unwrap_or_default().to_string();
        let options = words.nth(1).unwrap_or_default();
        let size = options
            .split(',')
            .find_map(|o| o.strip_prefix("size="))
            .and_then(parse_size_option);
        found = Some((fstype, size));
    }
    found
}

/// tmpfs's `size=`: bytes with an optional k, m or g suffix (a % of RAM is not resolved).
fn parse_size_option(text: &str) -> Option<u64> {
    let (digits, factor) = match text.chars().last()? {
        'k' | 'K' => (&text[..text.len() - 1], 1u64 << 10),
        'm' | 'M' => (&text[..text.len() - 1], 1 << 20),
        'g' | 'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(factor)
}

/// The NSpid line of /proc/PID/status: the pid in each pid namespace from the reader's down.
pub(crate) fn parse_nspid(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace()
        .take(32)
        .map(|w| w.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_cgroup_v2_v1_and_crafted_names() {
        let v2 = parse_proc_cgroup("0::/system.slice/docker-abc.scope\n").unwrap();
        assert_eq!(
            v2.unified.as_deref(),
            Some("/system.slice/docker-abc.scope")
        );
        let v1 = parse_proc_cgroup(
            "12:pids:/docker/ab\n5:cpu,cpuacct:/docker/ab\n4:memory:/docker/ab\n\
             3:cpuset:/docker/ab\n1:name=systemd:/docker/ab\n0::/\n",
        )
        .unwrap();
        assert_eq!(v1.v1_path("memory"), Some("/docker/ab"));
        assert_eq!(v1.v1_path("cpu"), Some("/docker/ab"));
        assert_eq!(v1.unified.as_deref(), Some("/"));
        // A cgroup named "x\n0::/victim" would add a second unified line.
        assert_eq!(parse_proc_cgroup("0::/user.slice/x\n0::/victim\n"), None);
        let removed = parse_proc_cgroup("0::/system.slice/docker-abc.scope (deleted)\n").unwrap();
        assert_eq!(
            removed.unified.as_deref(),
            Some("/system.slice/docker-abc.scope")
        );
        assert_eq!(parse_proc_cgroup("garbage"), None);
        assert_eq!(parse_proc_cgroup(""), None);
    }

    #[test]
    fn paths_with_parent_components_are_refused() {
        let base = Path::new("/sys/fs/cgroup");
        assert_eq!(
            join_below(base, "/a/b.scope"),
            Some(PathBuf::from("/sys/fs/cgroup/a/b.scope"))
        );
        assert_eq!(join_below(base, "/"), Some(base.to_path_buf()));
        assert_eq!(join_below(base, "/a/../../etc"), None);
    }

    #[test]
    fn limits_and_counters() {
        assert_eq!(parse_limit("max\n"), Some(Limit::Max));
        assert_eq!(parse_limit("8589934592\n"), Some(Limit::Value(8 << 30)));
        assert_eq!(parse_limit("lots"), None);
        assert_eq!(
            parse_v1_bytes_limit("9223372036854771712\n"),
            Some(Limit::Max)
        );
        assert_eq!(
            parse_v1_bytes_limit("1073741824"),
            Some(Limit::Value(1 << 30))
        );
        let events = "low 0\nhigh 0\nmax 17\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(keyed_value(events, "oom_kill"), Some(2));
        assert_eq!(keyed_value(events, "max"), Some(17));
        assert_eq!(keyed_value(events, "absent"), None);
        assert_eq!(keyed_value("oom_kill x\n", "oom_kill"), None);
        assert_eq!(
            keyed_value("xoom_kill 3\noom_kills 4\noom_kill 5", "oom_kill"),
            Some(5)
        );
    }

    #[test]
    fn cpu_quota_and_cpusets() {
        let four = parse_cpu_max("400000 100000\n").unwrap();
        assert_eq!(four.cpus(), Some(4.0));
        assert_eq!(parse_cpu_max("max 100000").unwrap().cpus(), None);
        assert_eq!(parse_cpu_max("max"), None);
        assert_eq!(parse_v1_cpu_quota("-1", "100000").unwrap().quota_us, None);
        assert_eq!(
            parse_v1_cpu_quota("150000", "100000").unwrap().cpus(),
            Some(1.5)
        );
        assert_eq!(count_cpu_list("0-7,16,18-19\n"), Some(11));
        assert_eq!(count_cpu_list(""), Some(0));
        assert_eq!(count_cpu_list("0-4294967295"), None);
        assert_eq!(count_cpu_list("7-3"), None);
        assert_eq!(count_cpu_list("a-b"), None);
    }

    #[test]
    fn shm_mount_from_mountinfo() {
        let text = "\
771 770 0:47 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755\n\
775 771 0:51 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k\n";
        assert_eq!(
            parse_shm_mount(text),
            Some(("tmpfs".to_string(), Some(64 << 20)))
        );
        let host = "30 25 0:26 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,inode64\n";
        assert_eq!(parse_shm_mount(host), Some(("tmpfs".to_string(), None)));
        assert_eq!(parse_shm_mount("no such line\n"), None);
        assert_eq!(parse_size_option("2g"), Some(2 << 30));
        assert_eq!(parse_size_option("50%"), None);
    }

    #[test]
    fn nspid_lists_the_nested_pids() {
        let status = "Name:\tpython\nNSpid:\t4242\t17\t1\nUid:\t0\t0\t0\t0\n";
        assert_eq!(parse_nspid(status), Some(vec![4242, 17, 1]));
        assert_eq!(parse_nspid("Name:\tx\n"), None);
        assert_eq!(parse_nspid("NSpid:\t12\tx\n"), None);
    }
}
