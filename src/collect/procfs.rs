//! Parsers and readers for the /proc files torchtop uses.
//!
//! Every parser takes the file's text and returns a typed value or a [`ParseError`] that names
//! the file and what was wrong; none of them panics on garbled input. The readers are thin:
//! they take a proc root (`/proc` in production, a fixture tree in tests), read one file with
//! as few syscalls as possible (open, read until EOF, close) and hand the text to a parser.
//! A file that is gone, or a pid that died while it was read, comes back as
//! [`ProcError::Gone`], so callers can tell a vanished process from an unreadable file.

use std::ffi::CStr;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::model::{LaunchEnv, LoadAverage};

/// What was wrong with a file's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The file, as a /proc path pattern ("/proc/PID/stat").
    pub file: &'static str,
    pub reason: String,
}

impl ParseError {
    fn new(file: &'static str, reason: impl Into<String>) -> Self {
        ParseError {
            file,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} could not be parsed: {}", self.file, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Why a /proc file could not be read.
#[derive(Debug)]
pub enum ProcError {
    /// The file is not there, or its process exited while it was read.
    Gone(PathBuf),
    /// The kernel refused to show it (another user's environ, hidepid, ...).
    Denied(PathBuf),
    /// Any other read failure.
    Io(PathBuf, io::Error),
    /// It was read but its contents made no sense.
    Parse(PathBuf, ParseError),
}

impl ProcError {
    fn from_io(path: &Path, err: io::Error) -> Self {
        if err.kind() == io::ErrorKind::NotFound || err.raw_os_error() == Some(libc::ESRCH) {
            ProcError::Gone(path.to_path_buf())
        } else if err.kind() == io::ErrorKind::PermissionDenied {
            ProcError::Denied(path.to_path_buf())
        } else {
            ProcError::Io(path.to_path_buf(), err)
        }
    }

    pub fn is_gone(&self) -> bool {
        matches!(self, ProcError::Gone(_))
    }
}

impl fmt::Display for ProcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcError::Gone(p) => {
                write!(f, "{} is gone (the process may have exited)", p.display())
            }
            ProcError::Denied(p) => write!(f, "permission to read {} was denied", p.display()),
            ProcError::Io(p, e) => write!(f, "{} could not be read: {e}", p.display()),
            ProcError::Parse(p, e) => write!(f, "{}: {}", p.display(), e.reason),
        }
    }
}

impl std::error::Error for ProcError {}

// ---------------------------------------------------------------------------------------------
// System-wide files
// ---------------------------------------------------------------------------------------------

/// The /proc/meminfo keys torchtop shows, in bytes. A key the kernel did not list is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemInfo {
    pub total_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
    pub swap_total_bytes: Option<u64>,
    pub swap_free_bytes: Option<u64>,
}

pub fn parse_meminfo(text: &str) -> Result<MemInfo, ParseError> {
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
    }
    if recognised_lines == 0 {
        return Err(ParseError::new(FILE, "no \"Key: value\" lines"));
    }
    Ok(info)
}

/// "   16318480 kB" -> bytes. The kernel writes "kB" but means KiB.
fn parse_kib_value(rest: &str) -> Result<u64, String> {
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
pub struct CpuTimes {
    /// Every tick counted on the line except guest time, which is already inside user/nice.
    pub total: u64,
    /// idle + iowait: time the CPUs had nothing to run.
    pub idle: u64,
}

impl CpuTimes {
    /// Busy share of all CPUs between `earlier` and `self`, 0-100; `None` when no time passed
    /// or the counters went backwards (a different boot, a fixture rewritten).
    pub fn busy_percent_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let idle = self.idle.checked_sub(earlier.idle)?;
        if total == 0 || idle > total {
            return None;
        }
        Some((total - idle) as f64 * 100.0 / total as f64)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcStat {
    pub cpu: CpuTimes,
    /// Number of "cpuN" lines: the online CPUs.
    pub cpu_count: u32,
}

pub fn parse_stat(text: &str) -> Result<ProcStat, ParseError> {
    const FILE: &str = "/proc/stat";
    let mut cpu = None;
    let mut cpu_count = 0u32;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
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
fn parse_cpu_line(rest: &str) -> Result<CpuTimes, String> {
    let values = rest
        .split_whitespace()
        .map(|word| {
            word.parse::<u64>()
                .map_err(|_| format!("cpu line: \"{word}\" is not a number"))
        })
        .collect::<Result<Vec<u64>, String>>()?;
    if values.len() < 4 {
        return Err(format!(
            "cpu line has {} counters, at least 4 expected",
            values.len()
        ));
    }
    let counted = &values[..values.len().min(8)];
    let total = counted.iter().try_fold(0u64, |sum, v| sum.checked_add(*v));
    let total = total.ok_or("cpu line counters overflow")?;
    let idle = values[3] + values.get(4).copied().unwrap_or(0);
    Ok(CpuTimes { total, idle })
}

pub fn parse_loadavg(text: &str) -> Result<LoadAverage, ParseError> {
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
pub fn parse_uptime(text: &str) -> Result<f64, ParseError> {
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
pub fn parse_sysctl_u32(file: &'static str, text: &str) -> Result<u32, ParseError> {
    let word = text.trim();
    word.parse()
        .map_err(|_| ParseError::new(file, format!("\"{word}\" is not an unsigned number")))
}

/// /proc/sys/kernel/hostname; `None` when empty.
pub fn parse_hostname(text: &str) -> Option<String> {
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_string())
}

// ---------------------------------------------------------------------------------------------
// Per-process files
// ---------------------------------------------------------------------------------------------

/// The fields of /proc/PID/stat torchtop uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidStat {
    pub pid: u32,
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    /// The kernel's PF_* flags (field 9).
    pub flags: u32,
    /// Clock ticks spent in user and in kernel mode.
    pub utime: u64,
    pub stime: u64,
    pub nice: i32,
    pub num_threads: u32,
    /// Clock ticks since boot when the process started.
    pub start_ticks: u64,
    pub rss_pages: u64,
}

impl PidStat {
    pub fn cpu_ticks(&self) -> u64 {
        self.utime.saturating_add(self.stime)
    }

    /// Kernel threads have no command line and no memory of their own.
    pub fn is_kernel_thread(&self) -> bool {
        const PF_KTHREAD: u32 = 0x0020_0000;
        self.flags & PF_KTHREAD != 0
    }
}

/// Parses /proc/PID/stat. The name (field 2) may hold spaces and parentheses, so it runs from
/// the first '(' to the LAST ')'.
pub fn parse_pid_stat(text: &str) -> Result<PidStat, ParseError> {
    const FILE: &str = "/proc/PID/stat";
    let open = text
        .find('(')
        .ok_or_else(|| ParseError::new(FILE, "no '(' before the process name"))?;
    let close = text
        .rfind(')')
        .filter(|close| *close > open)
        .ok_or_else(|| ParseError::new(FILE, "no ')' after the process name"))?;
    let pid = parse_field(FILE, "pid", text[..open].trim())?;
    let comm = text[open + 1..close].to_string();
    // Fields from 3 (state) on; index i here is field i + 3 of proc(5).
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    const RSS: usize = 24 - 3;
    if rest.len() <= RSS {
        return Err(ParseError::new(
            FILE,
            format!(
                "{} fields after the name, at least {} expected",
                rest.len(),
                RSS + 1
            ),
        ));
    }
    let state = rest[0]
        .chars()
        .next()
        .filter(|_| rest[0].len() == 1)
        .ok_or_else(|| ParseError::new(FILE, format!("state \"{}\" is not one letter", rest[0])))?;
    Ok(PidStat {
        pid,
        comm,
        state,
        ppid: parse_field(FILE, "ppid", rest[4 - 3])?,
        flags: parse_field(FILE, "flags", rest[9 - 3])?,
        utime: parse_field(FILE, "utime", rest[14 - 3])?,
        stime: parse_field(FILE, "stime", rest[15 - 3])?,
        nice: parse_field(FILE, "nice", rest[19 - 3])?,
        num_threads: parse_field(FILE, "num_threads", rest[20 - 3])?,
        start_ticks: parse_field(FILE, "starttime", rest[22 - 3])?,
        rss_pages: parse_field(FILE, "rss", rest[RSS])?,
    })
}

fn parse_field<T: std::str::FromStr>(
    file: &'static str,
    name: &str,
    word: &str,
) -> Result<T, ParseError> {
    word.parse()
        .map_err(|_| ParseError::new(file, format!("{name} \"{word}\" is not a number")))
}

/// The fields of /proc/PID/status torchtop uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidStatus {
    /// The real uid (first number of the Uid line).
    pub uid: u32,
    /// `None` for kernel threads and zombies, which have no VmRSS line.
    pub vm_rss_bytes: Option<u64>,
}

pub fn parse_pid_status(text: &str) -> Result<PidStatus, ParseError> {
    const FILE: &str = "/proc/PID/status";
    let mut uid = None;
    let mut vm_rss_bytes = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Uid:") {
            let word = rest
                .split_whitespace()
                .next()
                .ok_or_else(|| ParseError::new(FILE, "the Uid line is empty"))?;
            uid = Some(parse_field(FILE, "Uid", word)?);
        } else if let Some(rest) = line.strip_prefix("VmRSS:") {
            let bytes = parse_kib_value(rest)
                .map_err(|reason| ParseError::new(FILE, format!("VmRSS: {reason}")))?;
            vm_rss_bytes = Some(bytes);
        }
    }
    let uid = uid.ok_or_else(|| ParseError::new(FILE, "no Uid line"))?;
    Ok(PidStatus { uid, vm_rss_bytes })
}

/// /proc/PID/cmdline: arguments separated (and usually ended) by NUL, joined with spaces.
/// `None` when empty, as for kernel threads and zombies; callers show `[comm]` instead.
pub fn parse_cmdline(text: &str) -> Option<String> {
    let args: Vec<&str> = text.trim_end_matches('\0').split('\0').collect();
    let line = args.join(" ");
    (!line.trim().is_empty()).then_some(line)
}

/// Picks the launcher variables out of /proc/PID/environ (NUL-separated `KEY=value`).
/// Entries without '=' are skipped; a rank that is not a number is left `None`.
pub fn parse_environ(text: &str) -> LaunchEnv {
    let mut env = LaunchEnv::default();
    for entry in text.split('\0') {
        let Some((key, value)) = entry.split_once('=') else {
            continue;
        };
        let text = || Some(value.to_string());
        let number = || value.trim().parse::<u32>().ok();
        match key {
            "CUDA_VISIBLE_DEVICES" => env.cuda_visible_devices = text(),
            "RANK" => env.rank = number(),
            "LOCAL_RANK" => env.local_rank = number(),
            "WORLD_SIZE" => env.world_size = number(),
            "TORCHELASTIC_RUN_ID" => env.torchelastic_run_id = text(),
            "MASTER_ADDR" => env.master_addr = text(),
            "MASTER_PORT" => env.master_port = text(),
            "PYTORCH_CUDA_ALLOC_CONF" => env.pytorch_cuda_alloc_conf = text(),
            _ => {}
        }
    }
    env
}

/// /proc/PID/task/TID/children: the pids the thread forked, space-separated.
pub fn parse_children(text: &str) -> Result<Vec<u32>, ParseError> {
    text.split_whitespace()
        .map(|word| parse_field("/proc/PID/task/TID/children", "child pid", word))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Readers
// ---------------------------------------------------------------------------------------------

/// Reads a small file with open + read until EOF + close; `std::fs::read` would also stat it
/// for a size hint, which /proc files do not have. Bytes that are not UTF-8 (command lines
/// may hold any) are replaced.
pub fn read_text(path: &Path) -> Result<String, ProcError> {
    let mut file = File::open(path).map_err(|e| ProcError::from_io(path, e))?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ProcError::from_io(path, e)),
        }
    }
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

fn read_parsed<T>(
    path: PathBuf,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, ProcError> {
    let text = read_text(&path)?;
    parse(&text).map_err(|e| ProcError::Parse(path, e))
}

pub fn pid_dir(root: &Path, pid: u32) -> PathBuf {
    root.join(pid.to_string())
}

pub fn read_meminfo(root: &Path) -> Result<MemInfo, ProcError> {
    read_parsed(root.join("meminfo"), parse_meminfo)
}

pub fn read_stat(root: &Path) -> Result<ProcStat, ProcError> {
    read_parsed(root.join("stat"), parse_stat)
}

pub fn read_loadavg(root: &Path) -> Result<LoadAverage, ProcError> {
    read_parsed(root.join("loadavg"), parse_loadavg)
}

pub fn read_uptime(root: &Path) -> Result<f64, ProcError> {
    read_parsed(root.join("uptime"), parse_uptime)
}

pub fn read_swappiness(root: &Path) -> Result<u32, ProcError> {
    read_parsed(root.join("sys/vm/swappiness"), |text| {
        parse_sysctl_u32("/proc/sys/vm/swappiness", text)
    })
}

pub fn read_overcommit_memory(root: &Path) -> Result<u32, ProcError> {
    read_parsed(root.join("sys/vm/overcommit_memory"), |text| {
        parse_sysctl_u32("/proc/sys/vm/overcommit_memory", text)
    })
}

pub fn read_hostname(root: &Path) -> Result<Option<String>, ProcError> {
    read_parsed(root.join("sys/kernel/hostname"), |text| {
        Ok(parse_hostname(text))
    })
}

pub fn read_pid_stat(root: &Path, pid: u32) -> Result<PidStat, ProcError> {
    read_parsed(pid_dir(root, pid).join("stat"), parse_pid_stat)
}

/// `/proc/PID/stat` files kept open between refreshes: reading an open one again is one
/// `pread`, where opening it costs a path walk, an open and a close each time. A file whose
/// process exited reads as an error (its pid may since belong to another process, which the
/// caller then opens afresh).
#[derive(Default)]
pub struct OpenStatFiles {
    files: std::collections::HashMap<u32, File>,
    buffer: Vec<u8>,
}

impl OpenStatFiles {
    pub fn read(&mut self, root: &Path, pid: u32) -> Result<PidStat, ProcError> {
        if let Some(stat) = self.read_open(pid) {
            return Ok(stat);
        }
        let path = pid_dir(root, pid).join("stat");
        let file = File::open(&path).map_err(|e| ProcError::from_io(&path, e))?;
        self.files.insert(pid, file);
        self.read_open(pid).ok_or(ProcError::Gone(path))
    }

    /// Closes the files of processes not in `keep`.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.files.retain(|pid, _| keep(*pid));
    }

    fn read_open(&mut self, pid: u32) -> Option<PidStat> {
        use std::os::unix::fs::FileExt;
        let file = self.files.get(&pid)?;
        self.buffer.resize(4096, 0);
        let read = file.read_at(&mut self.buffer, 0);
        let parsed = match read {
            Ok(n) if n > 0 => std::str::from_utf8(&self.buffer[..n])
                .ok()
                .and_then(|text| parse_pid_stat(text).ok()),
            _ => None,
        };
        if parsed.is_none() {
            self.files.remove(&pid);
        }
        parsed
    }
}

pub fn read_pid_status(root: &Path, pid: u32) -> Result<PidStatus, ProcError> {
    read_parsed(pid_dir(root, pid).join("status"), parse_pid_status)
}

pub fn read_cmdline(root: &Path, pid: u32) -> Result<Option<String>, ProcError> {
    read_parsed(pid_dir(root, pid).join("cmdline"), |text| {
        Ok(parse_cmdline(text))
    })
}

pub fn read_environ(root: &Path, pid: u32) -> Result<LaunchEnv, ProcError> {
    read_parsed(pid_dir(root, pid).join("environ"), |text| {
        Ok(parse_environ(text))
    })
}

/// The thread ids of a process (the entries of /proc/PID/task).
pub fn read_thread_ids(root: &Path, pid: u32) -> Result<Vec<u32>, ProcError> {
    let dir = pid_dir(root, pid).join("task");
    let entries = std::fs::read_dir(&dir).map_err(|e| ProcError::from_io(&dir, e))?;
    Ok(entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

/// The children forked by one thread of a process.
pub fn read_thread_children(root: &Path, pid: u32, tid: u32) -> Result<Vec<u32>, ProcError> {
    let path = pid_dir(root, pid)
        .join("task")
        .join(tid.to_string())
        .join("children");
    read_parsed(path, parse_children)
}

/// The numeric entries of the proc root: every process (thread-group leader) on the host.
pub fn read_pids(root: &Path) -> Result<Vec<u32>, ProcError> {
    let entries = std::fs::read_dir(root).map_err(|e| ProcError::from_io(root, e))?;
    Ok(entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

// ---------------------------------------------------------------------------------------------
// System constants and user names
// ---------------------------------------------------------------------------------------------

/// Clock ticks per second (USER_HZ), the unit of /proc/PID/stat times; 100 if sysconf fails.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// The page size, the unit of the rss field of /proc/PID/stat; 4096 if sysconf fails.
pub fn page_size_bytes() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

/// The login name of a uid from the passwd database (files, LDAP, ... through NSS); `None`
/// when there is no entry, as for uids that exist only inside a container. This may block on
/// a network lookup, so callers cache the answer.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: passwd is plain data that getpwuid_r fills in.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call and buf.len() is buf's true length; the
        // strings in `entry` point into buf, which outlives their use below.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut entry,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || result.is_null() || entry.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success pw_name is a NUL-terminated string inside buf.
        let name = unsafe { CStr::from_ptr(entry.pw_name) };
        return Some(name.to_string_lossy().into_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       65843012 kB\n\
MemFree:         1234567 kB\n\
MemAvailable:   40000000 kB\n\
Buffers:          123456 kB\n\
SwapCached:            0 kB\n\
SwapTotal:       8388604 kB\n\
SwapFree:        8000000 kB\n\
HugePages_Total:       0\n\
Hugepagesize:       2048 kB\n";

    #[test]
    fn meminfo_converts_kib_to_bytes() {
        let info = parse_meminfo(MEMINFO).unwrap();
        assert_eq!(info.total_bytes, Some(65843012 * 1024));
        assert_eq!(info.available_bytes, Some(40000000 * 1024));
        assert_eq!(info.swap_total_bytes, Some(8388604 * 1024));
        assert_eq!(info.swap_free_bytes, Some(8000000 * 1024));
    }

    #[test]
    fn meminfo_missing_keys_are_none() {
        // Kernels before 3.14 have no MemAvailable; a container may hide swap.
        let info = parse_meminfo("MemTotal: 1000 kB\nMemFree: 10 kB\n").unwrap();
        assert_eq!(info.total_bytes, Some(1024000));
        assert_eq!(info.available_bytes, None);
        assert_eq!(info.swap_total_bytes, None);
        assert_eq!(info.swap_free_bytes, None);
    }

    #[test]
    fn meminfo_garbage_is_an_error() {
        assert!(parse_meminfo("").is_err());
        assert!(parse_meminfo("\u{0}\u{1}binary junk").is_err());
        let err = parse_meminfo("MemTotal: lots kB\n").unwrap_err();
        assert!(err.reason.contains("MemTotal"), "{err}");
        assert!(parse_meminfo("MemTotal: 5 MB\n").is_err());
        assert!(parse_meminfo("MemTotal:\n").is_err());
        assert!(parse_meminfo("MemTotal: 18446744073709551615 kB\n").is_err());
    }

    const STAT: &str = "cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0\n\
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0\n\
cpu1 1335649 39126 523016 13413542 3427 0 3004 0 24024 0\n\
cpu10 1 2 3 4 5 6 7 8 9 10\n\
intr 114930548 113199788 3 0 5 263 0 4 [... lots more numbers ...]\n\
ctxt 1990473\n\
btime 1062191376\n\
processes 2915\n\
procs_running 1\n\
procs_blocked 0\n";

    #[test]
    fn stat_sums_the_aggregate_line_and_counts_cpus() {
        let stat = parse_stat(STAT).unwrap();
        assert_eq!(stat.cpu_count, 3);
        assert_eq!(
            stat.cpu.total,
            10132153 + 290696 + 3084719 + 46828483 + 16683 + 25195
        );
        assert_eq!(stat.cpu.idle, 46828483 + 16683);
    }

    #[test]
    fn stat_accepts_old_kernels_with_four_counters() {
        let stat = parse_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(stat.cpu, CpuTimes { total: 10, idle: 4 });
        assert_eq!(stat.cpu_count, 1);
    }

    #[test]
    fn stat_garbage_is_an_error() {
        assert!(parse_stat("").is_err());
        assert!(parse_stat("cpu0 1 2 3 4\n").is_err());
        assert!(parse_stat("cpu 1 2\n").is_err());
        assert!(parse_stat("cpu 1 2 x 4\n").is_err());
    }

    #[test]
    fn cpu_busy_percent_from_deltas() {
        let before = CpuTimes {
            total: 1000,
            idle: 800,
        };
        let after = CpuTimes {
            total: 1400,
            idle: 1100,
        };
        assert_eq!(after.busy_percent_since(&before), Some(25.0));
        assert_eq!(before.busy_percent_since(&after), None);
        assert_eq!(before.busy_percent_since(&before), None);
    }

    #[test]
    fn loadavg_parses_three_numbers() {
        let load = parse_loadavg("0.52 1.25 3.00 2/1234 56789\n").unwrap();
        assert_eq!(load.one, 0.52);
        assert_eq!(load.five, 1.25);
        assert_eq!(load.fifteen, 3.0);
        assert!(parse_loadavg("0.5 1.0\n").is_err());
        assert!(parse_loadavg("a b c\n").is_err());
        assert!(parse_loadavg("nan 1 1\n").is_err());
    }

    #[test]
    fn uptime_parses_seconds() {
        assert_eq!(parse_uptime("350735.47 234388.90\n").unwrap(), 350735.47);
        assert!(parse_uptime("").is_err());
        assert!(parse_uptime("-4 1").is_err());
        assert!(parse_uptime("soon").is_err());
    }

    #[test]
    fn sysctl_numbers() {
        assert_eq!(parse_sysctl_u32("/proc/sys/vm/swappiness", "60\n"), Ok(60));
        assert_eq!(
            parse_sysctl_u32("/proc/sys/vm/overcommit_memory", "2\n"),
            Ok(2)
        );
        let err = parse_sysctl_u32("/proc/sys/vm/swappiness", "sixty\n").unwrap_err();
        assert!(err.to_string().contains("/proc/sys/vm/swappiness"), "{err}");
        assert!(parse_sysctl_u32("/proc/sys/vm/swappiness", "").is_err());
        assert!(parse_sysctl_u32("/proc/sys/vm/swappiness", "-1").is_err());
    }

    #[test]
    fn hostname_is_trimmed_and_empty_is_none() {
        assert_eq!(parse_hostname("gpu-node-7\n"), Some("gpu-node-7".into()));
        assert_eq!(parse_hostname("\n"), None);
    }

    /// A real line from a Python process, with the kernel's 52 fields.
    const PID_STAT: &str = "4242 (python3) S 4200 4242 4200 34816 4242 4194304 123456 0 12 0 \
1500 250 0 0 20 0 37 0 987654 12345678912 250000 18446744073709551615 94000000 94100000 \
140000000 0 0 0 0 16781312 134234626 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn pid_stat_fields() {
        let stat = parse_pid_stat(PID_STAT).unwrap();
        assert_eq!(stat.pid, 4242);
        assert_eq!(stat.comm, "python3");
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 4200);
        assert_eq!(stat.flags, 4194304);
        assert!(!stat.is_kernel_thread());
        assert_eq!(stat.utime, 1500);
        assert_eq!(stat.stime, 250);
        assert_eq!(stat.cpu_ticks(), 1750);
        assert_eq!(stat.nice, 0);
        assert_eq!(stat.num_threads, 37);
        assert_eq!(stat.start_ticks, 987654);
        assert_eq!(stat.rss_pages, 250000);
    }

    #[test]
    fn pid_stat_name_with_spaces_and_parentheses() {
        let text = PID_STAT.replace("(python3)", "(my (weird) proc)");
        let stat = parse_pid_stat(&text).unwrap();
        assert_eq!(stat.comm, "my (weird) proc");
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 4200);
        assert_eq!(stat.start_ticks, 987654);

        let text = PID_STAT.replace("(python3)", "(a) S 1 2 3)");
        let stat = parse_pid_stat(&text).unwrap();
        assert_eq!(stat.comm, "a) S 1 2 3");
        assert_eq!(stat.ppid, 4200);
    }

    #[test]
    fn pid_stat_of_a_kernel_thread() {
        let text = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 3 0 0 20 0 1 0 2 0 0 \
18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        let stat = parse_pid_stat(text).unwrap();
        assert!(stat.is_kernel_thread());
        assert_eq!(stat.rss_pages, 0);
    }

    #[test]
    fn pid_stat_negative_nice() {
        let text = PID_STAT.replace(" 20 0 37 ", " 39 -19 37 ");
        assert_eq!(parse_pid_stat(&text).unwrap().nice, -19);
    }

    #[test]
    fn pid_stat_garbage_is_an_error() {
        assert!(parse_pid_stat("").is_err());
        assert!(parse_pid_stat("4242 python3 S 1").is_err());
        assert!(parse_pid_stat("4242 (python3) S 4200 4242").is_err());
        assert!(parse_pid_stat(")( 1 2 3").is_err());
        let err = parse_pid_stat(&PID_STAT.replace(" 987654 ", " soon ")).unwrap_err();
        assert!(err.reason.contains("starttime"), "{err}");
        assert!(parse_pid_stat(&PID_STAT.replace(") S ", ") SS ")).is_err());
        assert!(parse_pid_stat(&PID_STAT.replace("4242 (", "x (")).is_err());
    }

    const PID_STATUS: &str = "Name:\tpython3\n\
Umask:\t0022\n\
State:\tS (sleeping)\n\
Tgid:\t4242\n\
Pid:\t4242\n\
PPid:\t4200\n\
Uid:\t1001\t1001\t1001\t1001\n\
Gid:\t1001\t1001\t1001\t1001\n\
VmPeak:\t 20000000 kB\n\
VmRSS:\t  1000000 kB\n\
Threads:\t37\n";

    #[test]
    fn pid_status_uid_and_rss() {
        let status = parse_pid_status(PID_STATUS).unwrap();
        assert_eq!(status.uid, 1001);
        assert_eq!(status.vm_rss_bytes, Some(1000000 * 1024));
    }

    #[test]
    fn pid_status_of_kernel_thread_has_no_rss() {
        let status = parse_pid_status("Name:\tkworker/0:1\nUid:\t0\t0\t0\t0\n").unwrap();
        assert_eq!(status.uid, 0);
        assert_eq!(status.vm_rss_bytes, None);
    }

    #[test]
    fn pid_status_garbage_is_an_error() {
        assert!(parse_pid_status("").is_err());
        assert!(parse_pid_status("Name:\tx\n").is_err());
        assert!(parse_pid_status("Uid:\n").is_err());
        assert!(parse_pid_status("Uid:\tme\n").is_err());
        assert!(parse_pid_status("Uid:\t1\nVmRSS:\tbig kB\n").is_err());
    }

    #[test]
    fn cmdline_joins_arguments() {
        assert_eq!(
            parse_cmdline("python\0train.py\0--lr\x000.1\0"),
            Some("python train.py --lr 0.1".into())
        );
        // setproctitle-style rewrites have no NULs and may lack the final one.
        assert_eq!(
            parse_cmdline("ray::Worker idle"),
            Some("ray::Worker idle".into())
        );
        // An empty argument inside is kept as an empty word.
        assert_eq!(parse_cmdline("echo\0\0x\0"), Some("echo  x".into()));
    }

    #[test]
    fn cmdline_empty_is_none() {
        assert_eq!(parse_cmdline(""), None);
        assert_eq!(parse_cmdline("\0"), None);
    }

    #[test]
    fn environ_launch_variables() {
        let text = "HOME=/root\0CUDA_VISIBLE_DEVICES=0,1\0RANK=3\0LOCAL_RANK=1\0\
WORLD_SIZE=8\0TORCHELASTIC_RUN_ID=job-17\0MASTER_ADDR=10.0.0.1\0MASTER_PORT=29500\0\
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\0PATH=/usr/bin\0";
        let env = parse_environ(text);
        assert_eq!(env.cuda_visible_devices.as_deref(), Some("0,1"));
        assert_eq!(env.rank, Some(3));
        assert_eq!(env.local_rank, Some(1));
        assert_eq!(env.world_size, Some(8));
        assert_eq!(env.torchelastic_run_id.as_deref(), Some("job-17"));
        assert_eq!(env.master_addr.as_deref(), Some("10.0.0.1"));
        assert_eq!(env.master_port.as_deref(), Some("29500"));
        assert_eq!(
            env.pytorch_cuda_alloc_conf.as_deref(),
            Some("expandable_segments:True")
        );
    }

    #[test]
    fn environ_missing_and_bad_values() {
        assert_eq!(parse_environ(""), LaunchEnv::default());
        let env = parse_environ("RANK=zero\0junk-without-equals\0CUDA_VISIBLE_DEVICES=\0");
        assert_eq!(env.rank, None);
        // Set but empty hides every GPU, which is not the same as unset.
        assert_eq!(env.cuda_visible_devices.as_deref(), Some(""));
        // A value may itself hold '='.
        let env = parse_environ("PYTORCH_CUDA_ALLOC_CONF=a=b\0");
        assert_eq!(env.pytorch_cuda_alloc_conf.as_deref(), Some("a=b"));
    }

    #[test]
    fn children_list() {
        assert_eq!(parse_children("1001 1002 "), Ok(vec![1001, 1002]));
        assert_eq!(parse_children(""), Ok(vec![]));
        assert!(parse_children("1001 x").is_err());
    }

    #[test]
    fn readers_report_a_missing_file_as_gone() {
        let root = Path::new("/nonexistent-torchtop-proc-root");
        assert!(read_meminfo(root).unwrap_err().is_gone());
        assert!(read_pid_stat(root, 1).unwrap_err().is_gone());
    }

    #[test]
    fn readers_work_on_the_real_proc() {
        let root = Path::new("/proc");
        let me = std::process::id();
        let stat = read_pid_stat(root, me).unwrap();
        assert_eq!(stat.pid, me);
        assert!(stat.num_threads >= 1);
        assert!(read_meminfo(root).unwrap().total_bytes.unwrap() > 0);
        assert!(read_stat(root).unwrap().cpu_count >= 1);
        assert!(read_uptime(root).unwrap() > 0.0);
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        assert_eq!(read_pid_status(root, me).unwrap().uid, uid);
    }

    #[test]
    fn units_and_users() {
        assert!(clock_ticks_per_second() >= 1);
        assert!(page_size_bytes().is_power_of_two());
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(user_name(3_999_999_999), None);
    }
}
