//! The system-wide /proc files: memory, CPU time, load, uptime and the sysctls torchtop shows
//! or checks.

use std::path::Path;

use super::{read_parsed, ParseError, ProcError, MAX_FILE_BYTES};
use crate::model::LoadAverage;
use crate::sys::kept::{as_text, KeptFile};

/// The /proc/meminfo keys torchtop shows, in bytes. A key the kernel did not list is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct MemInfo {
    pub(crate) total_bytes: Option<u64>,
    pub(crate) available_bytes: Option<u64>,
    pub(crate) swap_total_bytes: Option<u64>,
    pub(crate) swap_free_bytes: Option<u64>,
}

pub(crate) fn parse_meminfo(text: &str) -> Result<MemInfo, ParseError> {
    const FILE: &str = "/proc/meminfo";
    let mut info = MemInfo::default();
    let mut recognised_lines = 0;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        recognised_lines += 1;
        let slot = match key.trim() {
            "MemTotal" => &mut info.total_bytes,
            "MemAvailable" => &mut info.available_bytes,
            "SwapTotal" => &mut info.swap_total_bytes,
            "SwapFree" => &mut info.swap_free_bytes,
            _ => continue,
        };
        *slot = Some(
            parse_kib_value(rest)
                .map_err(|reason| ParseError::new(FILE, format!("{}: {reason}", key.trim())))?,
        );
        let all = [
            info.total_bytes,
            info.available_bytes,
            info.swap_total_bytes,
            info.swap_free_bytes,
        ];
        if all.iter().all(Option::is_some) {
            break;
        }
    }
    if recognised_lines == 0 {
        return Err(ParseError::new(FILE, "no \"Key: value\" lines"));
    }
    Ok(info)
}

/// "   16318480 kB" -> bytes. The kernel writes "kB" but means KiB.
pub(super) fn parse_kib_value(rest: &str) -> Result<u64, String> {
    let mut words = rest.split_whitespace();
    let number = words.next().ok_or("the value is missing")?;
    let value: u64 = number
        .parse()
        .map_err(|_| format!("\"{number}\" is not a number"))?;
    match words.next() {
        None => Ok(value),
        Some("kB") => value
            .checked_mul(1024)
            .ok_or_else(|| format!("{value} kB overflows")),
        Some(unit) => Err(format!("unknown unit \"{unit}\"")),
    }
}

/// CPU time counters (in clock ticks) of the aggregate "cpu" line of /proc/stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CpuTimes {
    /// Every tick counted on the line except guest time, which is already inside user/nice.
    pub(crate) total: u64,
    /// idle + iowait: time the CPUs had nothing to run.
    pub(crate) idle: u64,
}

impl CpuTimes {
    /// Busy share of all CPUs between `earlier` and `self`, 0-100; `None` when no time passed
    /// or the counters went backwards (a different boot, a fixture rewritten).
    pub(crate) fn busy_percent_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let idle = self.idle.checked_sub(earlier.idle)?;
        if total == 0 || idle > total {
            return None;
        }
        Some((total - idle) as f64 * 100.0 / total as f64)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ProcStat {
    pub(crate) cpu: CpuTimes,
    /// Number of "cpuN" lines: the online CPUs.
    pub(crate) cpu_count: u32,
}

pub(crate) fn parse_stat(text: &str) -> Result<ProcStat, ParseError> {
    const FILE: &str = "/proc/stat";
    let mut cpu = None;
    let mut cpu_count = 0u32;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            // The cpu lines come first; what follows (the interrupt counts of a big machine
            // run to tens of KiB) is not looked through.
            if cpu.is_some() {
                break;
            }
            continue;
        };
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            cpu_count += 1;
        } else if rest.starts_with(' ') {
            cpu = Some(parse_cpu_line(rest).map_err(|reason| ParseError::new(FILE, reason))?);
        }
    }
    let cpu = cpu.ok_or_else(|| ParseError::new(FILE, "no aggregate \"cpu\" line"))?;
    Ok(ProcStat { cpu, cpu_count })
}

/// "user nice system idle iowait irq softirq steal guest guest_nice"; old kernels list fewer.
/// Parsed in place (this runs every refresh): the first 8 counters are summed.
fn parse_cpu_line(rest: &str) -> Result<CpuTimes, String> {
    let mut counted = 0usize;
    let mut total = 0u64;
    let mut idle = 0u64;
    for word in rest.split_ascii_whitespace() {
        let value = word
            .parse::<u64>()
            .map_err(|_| format!("cpu line: \"{word}\" is not a number"))?;
        if counted < 8 {
            total = total
                .checked_add(value)
                .ok_or("cpu line counters overflow")?;
        }
        if counted == 3 || counted == 4 {
            idle += value;
        }
        counted += 1;
    }
    if counted < 4 {
        return Err(format!(
            "cpu line has {counted} counters, at least 4 expected"
        ));
    }
    Ok(CpuTimes { total, idle })
}

pub(crate) fn parse_loadavg(text: &str) -> Result<LoadAverage, ParseError> {
    const FILE: &str = "/proc/loadavg";
    let mut words = text.split_whitespace();
    let mut next = |name: &str| -> Result<f64, ParseError> {
        let word = words
            .next()
            .ok_or_else(|| ParseError::new(FILE, format!("the {name} load is missing")))?;
        parse_finite(word)
            .ok_or_else(|| ParseError::new(FILE, format!("{name} load \"{word}\" is not a number")))
    };
    Ok(LoadAverage {
        one: next("1-minute")?,
        five: next("5-minute")?,
        fifteen: next("15-minute")?,
    })
}

/// Seconds since boot, the first number of /proc/uptime.
pub(crate) fn parse_uptime(text: &str) -> Result<f64, ParseError> {
    const FILE: &str = "/proc/uptime";
    let word = text
        .split_whitespace()
        .next()
        .ok_or_else(|| ParseError::new(FILE, "the file is empty"))?;
    parse_finite(word)
        .filter(|v| *v >= 0.0)
        .ok_or_else(|| ParseError::new(FILE, format!("\"{word}\" is not a number of seconds")))
}

fn parse_finite(word: &str) -> Option<f64> {
    word.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// A /proc/sys file holding one unsigned number (vm.swappiness, vm.overcommit_memory).
pub(crate) fn parse_sysctl_u32(file: &'static str, text: &str) -> Result<u32, ParseError> {
    let word = text.trim();
    word.parse()
        .map_err(|_| ParseError::new(file, format!("\"{word}\" is not an unsigned number")))
}

/// /proc/sys/kernel/hostname; `None` when empty.
pub(crate) fn parse_hostname(text: &str) -> Option<String> {
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// The last two fields of /proc/loadavg: the number of threads on the host and the last pid
/// given out. While both stay the same, no process or thread has been created (that moves the
/// last pid) or has exited (that lowers the count without moving the last pid).
pub(crate) fn parse_loadavg_activity(text: &str) -> Option<(u64, u64)> {
    let mut words = text.split_ascii_whitespace().skip(3);
    let threads = words.next()?.split_once('/')?.1.parse().ok()?;
    let last_pid = words.next()?.parse().ok()?;
    Some((threads, last_pid))
}

pub(crate) fn read_hostname(root: &Path) -> Result<Option<String>, ProcError> {
    read_parsed(root.join("sys/kernel/hostname"), |text| {
        Ok(parse_hostname(text))
    })
}

/// The inode the kernel gives the initial PID namespace (`PROC_PID_INIT_INO`, fixed since
/// Linux 3.8).
const INITIAL_PID_NAMESPACE: &str = "pid:[4026531836]";

/// Whether the reader of `root` (its `self`) is in a PID namespace below the host's: inside a
/// container without `--pid=host`. Pids from the driver (NVML, amd-smi) are the host's, and
/// the same number in this /proc is another process. `false` where the link cannot be read
/// (no `CONFIG_PID_NS`, or a fixture tree without it).
pub(crate) fn in_nested_pid_namespace(root: &Path) -> bool {
    std::fs::read_link(root.join("self/ns/pid"))
        .is_ok_and(|link| link.as_os_str() != INITIAL_PID_NAMESPACE)
}

/// kernel.yama.ptrace_scope, or `None` without Yama.
pub(crate) fn read_yama_ptrace_scope(root: &Path) -> Option<u32> {
    read_parsed(root.join("sys/kernel/yama/ptrace_scope"), |text| {
        parse_sysctl_u32("/proc/sys/kernel/yama/ptrace_scope", text)
    })
    .ok()
}

/// The most read of /proc/vmstat (a few KiB), for its `oom_kill` line.
const VMSTAT_BYTES: usize = 64 << 10;

/// The system-wide files read every refresh, kept open ([`KeptFile`]) and read into one
/// reused buffer, so that a refresh costs one `pread` per file and no allocation.
#[derive(Debug)]
pub(crate) struct HostFiles {
    meminfo: KeptFile,
    stat: KeptFile,
    loadavg: KeptFile,
    uptime: KeptFile,
    vmstat: KeptFile,
    swappiness: KeptFile,
    overcommit: KeptFile,
    buffer: Vec<u8>,
}

impl HostFiles {
    pub(crate) fn new(root: &Path) -> Self {
        let file = |name: &str| KeptFile::new(root.join(name));
        HostFiles {
            meminfo: file("meminfo"),
            stat: file("stat"),
            loadavg: file("loadavg"),
            uptime: file("uptime"),
            vmstat: file("vmstat"),
            swappiness: file("sys/vm/swappiness"),
            overcommit: file("sys/vm/overcommit_memory"),
            buffer: Vec::new(),
        }
    }

    pub(crate) fn meminfo(&mut self) -> Result<MemInfo, ProcError> {
        parsed(&mut self.meminfo, &mut self.buffer, parse_meminfo)
    }

    pub(crate) fn stat(&mut self) -> Result<ProcStat, ProcError> {
        parsed(&mut self.stat, &mut self.buffer, parse_stat)
    }

    /// The load averages, and the activity fields of [`parse_loadavg_activity`].
    pub(crate) fn loadavg(&mut self) -> Result<(LoadAverage, Option<(u64, u64)>), ProcError> {
        parsed(&mut self.loadavg, &mut self.buffer, |text| {
            Ok((parse_loadavg(text)?, parse_loadavg_activity(text)))
        })
    }

    pub(crate) fn uptime(&mut self) -> Result<f64, ProcError> {
        parsed(&mut self.uptime, &mut self.buffer, parse_uptime)
    }

    /// The host's OOM-kill count (`oom_kill` of /proc/vmstat, Linux 4.13 on).
    pub(crate) fn oom_kill_count(&mut self) -> Option<u64> {
        let bytes = self.vmstat.read(&mut self.buffer, VMSTAT_BYTES).ok()?;
        crate::sys::cgroup::keyed_value(&as_text(bytes), "oom_kill")
    }

    pub(crate) fn swappiness(&mut self) -> Result<u32, ProcError> {
        parsed(&mut self.swappiness, &mut self.buffer, |text| {
            parse_sysctl_u32("/proc/sys/vm/swappiness", text)
        })
    }

    pub(crate) fn overcommit_memory(&mut self) -> Result<u32, ProcError> {
        parsed(&mut self.overcommit, &mut self.buffer, |text| {
            parse_sysctl_u32("/proc/sys/vm/overcommit_memory", text)
        })
    }

    /// How many of the files are open now.
    #[cfg(test)]
    pub(crate) fn open_count(&self) -> usize {
        [
            &self.meminfo,
            &self.stat,
            &self.loadavg,
            &self.uptime,
            &self.vmstat,
            &self.swappiness,
            &self.overcommit,
        ]
        .iter()
        .filter(|f| f.is_open())
        .count()
    }
}

/// One kept file read and parsed; errors as the path readers give them.
fn parsed<T>(
    file: &mut KeptFile,
    buffer: &mut Vec<u8>,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, ProcError> {
    let limit = usize::try_from(MAX_FILE_BYTES).unwrap_or(usize::MAX);
    let bytes = file
        .read(buffer, limit)
        .map_err(|e| ProcError::from_io(file.path(), e))?;
    parse(&as_text(bytes)).map_err(|e| ProcError::Parse(file.path().to_path_buf(), e))
}
