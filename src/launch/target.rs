//! What /proc says about a process to attach to, and about torchtop itself: owner, state,
//! tracer, parent, executable, environment variables, mapped files and capabilities.
//!
//! All the hand parsing of /proc text for `run`/`attach` lives here, so that a later refactor
//! can move it to a shared module. Every read is bounded: a hostile process controls its
//! environment and the names of the files it maps.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// The most /proc text read from one file (maps of a process with libtorch is about 1 MiB).
const PROC_TEXT_LIMIT: u64 = 64 << 20;
const CAP_SYS_PTRACE: u32 = 19;

/// A process as /proc/PID/status and /proc/PID/exe describe it.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) pid: u32,
    pub(crate) comm: String,
    /// Real, effective, saved and filesystem uids.
    pub(crate) uids: [u32; 4],
    /// The state letter: R, S, D, T, t, Z, ...
    pub(crate) state: char,
    pub(crate) tracer_pid: u32,
    pub(crate) exe: Option<PathBuf>,
}

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MapLine {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) perms: String,
    pub(crate) offset: u64,
    pub(crate) dev_major: u32,
    pub(crate) dev_minor: u32,
    pub(crate) inode: u64,
    /// The file (or `[vdso]`, `[stack]`, ...); empty for anonymous memory.
    pub(crate) path: String,
}

impl MapLine {
    pub(crate) fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    pub(crate) fn same_file(&self, other: &MapLine) -> bool {
        self.inode != 0
            && (self.dev_major, self.dev_minor, self.inode)
                == (other.dev_major, other.dev_minor, other.inode)
    }
}

fn read_bounded(path: &str) -> io::Result<Vec<u8>> {
    let mut data = Vec::new();
    File::open(path)?
        .take(PROC_TEXT_LIMIT)
        .read_to_end(&mut data)?;
    Ok(data)
}

/// `Name:`-style field of a status text.
fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name).map(str::trim))
}

impl Target {
    /// Reads /proc/PID/status and /proc/PID/exe. Fails with a sentence when there is no such
    /// process or its status cannot be read.
    pub(crate) fn inspect(pid: u32) -> Result<Target, String> {
        let status = read_bounded(&format!("/proc/{pid}/status")).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => format!("No process has pid {pid}."),
            _ => format!("Cannot read /proc/{pid}/status: {e}."),
        })?;
        Target::from_status(pid, &String::from_utf8_lossy(&status))
            .map(|t| Target {
                exe: std::fs::read_link(format!("/proc/{pid}/exe")).ok(),
                ..t
            })
            .ok_or_else(|| {
                format!("Cannot read the owner of process {pid} from /proc/{pid}/status.")
            })
    }

    fn from_status(pid: u32, status: &str) -> Option<Target> {
        let uids: Vec<u32> = status_field(status, "Uid:")?
            .split_whitespace()
            .filter_map(|u| u.parse().ok())
            .collect();
        Some(Target {
            pid,
            comm: status_field(status, "Name:").unwrap_or("?").to_string(),
            uids: uids.try_into().ok()?,
            state: status_field(status, "State:")
                .and_then(|s| s.chars().next())
                .unwrap_or('?'),
            tracer_pid: status_field(status, "TracerPid:")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            exe: None,
        })
    }

    /// The effective uid: whose files the process reads and writes.
    pub(crate) fn owner(&self) -> u32 {
        self.uids[1]
    }

    /// The executable's path as the kernel shows it, " (deleted)" suffix included.
    pub(crate) fn exe_text(&self) -> Option<String> {
        self.exe.as_ref().map(|e| e.to_string_lossy().into_owned())
    }

    /// Its memory map. Fails with a sentence when /proc/PID/maps cannot be read.
    pub(crate) fn maps(&self) -> Result<Vec<MapLine>, String> {
        let text = read_bounded(&format!("/proc/{}/maps", self.pid))
            .map_err(|e| format!("Cannot read the memory map of process {}: {e}.", self.pid))?;
        Ok(parse_maps(&String::from_utf8_lossy(&text)))
    }

    /// One variable of its environment as it was at exec, or `None`.
    pub(crate) fn environ_var(&self, name: &str) -> Result<Option<OsString>, String> {
        let environ = read_bounded(&format!("/proc/{}/environ", self.pid))
            .map_err(|e| format!("Cannot read the environment of process {}: {e}.", self.pid))?;
        Ok(environ_lookup(&environ, name))
    }
}

fn environ_lookup(environ: &[u8], name: &str) -> Option<OsString> {
    environ.split(|&b| b == 0).find_map(|entry| {
        let rest = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        Some(OsString::from_vec(rest.to_vec()))
    })
}

/// Parses maps text; lines that do not parse are skipped.
pub(crate) fn parse_maps(text: &str) -> Vec<MapLine> {
    text.lines().filter_map(parse_map_line).collect()
}

fn parse_map_line(line: &str) -> Option<MapLine> {
    let mut rest = line;
    let mut next = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (field, tail) = trimmed.split_at(end);
        rest = tail;
        Some(field).filter(|f| !f.is_empty())
    };
    let (start, end) = next()?.split_once('-')?;
    let perms = next()?.to_string();
    let offset = u64::from_str_radix(next()?, 16).ok()?;
    let (major, minor) = next()?.split_once(':')?;
    let inode = next()?.parse().ok()?;
    Some(MapLine {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset,
        dev_major: u32::from_str_radix(major, 16).ok()?,
        dev_minor: u32::from_str_radix(minor, 16).ok()?,
        inode,
        path: rest.trim_start().to_string(),
    })
}

/// The parent pid from /proc/PID/stat, or `None` once the process is gone.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` descends from torchtop itself (what Yama's ptrace_scope 1 allows).
pub(crate) fn is_descendant_of_us(pid: u32) -> bool {
    let me = std::process::id();
    let mut current = pid;
    for _ in 0..4096 {
        match parent_of(current) {
            Some(parent) if parent == me => return true,
            Some(parent) if parent > 1 && parent != current => current = parent,
            _ => return false,
        }
    }
    false
}

/// Whether torchtop's effective capabilities include CAP_SYS_PTRACE.
pub(crate) fn we_have_cap_sys_ptrace() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status_field(&status, "CapEff:")
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// kernel.yama.ptrace_scope, or `None` without Yama.
pub(crate) fn yama_ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The last path component of a /proc path text.
pub(crate) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields() {
        let status = "Name:\tpython3\nState:\tS (sleeping)\nTracerPid:\t77\nUid:\t1\t2\t3\t4\n";
        let t = Target::from_status(9, status).unwrap();
        assert_eq!(
            (t.comm.as_str(), t.state, t.tracer_pid),
            ("python3", 'S', 77)
        );
        assert_eq!(t.uids, [1, 2, 3, 4]);
        assert_eq!(t.owner(), 2);
        assert!(Target::from_status(9, "Name:\tx\nUid:\t1\t2\n").is_none());
    }

    #[test]
    fn maps_lines_with_odd_names() {
        let text = "55a0-55a1 r--p 00000000 fe:00 18504    /usr/bin/python3.11\n\
                    7f00-7f10 r-xp 00003000 103:0a 21536 /opt/my dir/libpython3.11.so.1.0\n\
                    7ffd-7ffe r-xp 00000000 00:00 0                          [vdso]\n\
                    7000-7001 rw-p 00000000 00:00 0 \n\
                    garbage line\n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 4);
        assert_eq!(maps[0].path, "/usr/bin/python3.11");
        assert_eq!(
            (maps[0].dev_major, maps[0].dev_minor, maps[0].inode),
            (0xfe, 0, 18504)
        );
        assert_eq!(maps[1].path, "/opt/my dir/libpython3.11.so.1.0");
        assert_eq!((maps[1].dev_major, maps[1].dev_minor), (0x103, 0xa));
        assert!(maps[1].executable() && !maps[0].executable());
        assert_eq!(
            (maps[1].start, maps[1].end, maps[1].offset),
            (0x7f00, 0x7f10, 0x3000)
        );
        assert_eq!(maps[2].path, "[vdso]");
        assert_eq!(maps[3].path, "");
    }

    #[test]
    fn environ_entries() {
        let env = b"A=1\0TORCHTOP_AGENT_DIR=/x/y\0TORCHTOP_AGENT_DIRX=no\0B";
        assert_eq!(
            environ_lookup(env, "TORCHTOP_AGENT_DIR"),
            Some(OsString::from("/x/y"))
        );
        assert_eq!(environ_lookup(env, "B"), None);
        assert_eq!(environ_lookup(env, "C"), None);
    }

    #[test]
    fn our_own_child_descends_from_us() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(is_descendant_of_us(child.id()));
        assert!(!is_descendant_of_us(1));
        let _ = child.kill();
        let _ = child.wait();
    }
}
