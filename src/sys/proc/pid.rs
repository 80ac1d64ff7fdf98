//! One process's /proc files: stat, status, cmdline, environ, its threads and their children.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use super::host::parse_kib_value;
use super::{pid_dir, read_bytes, read_parsed, ParseError, ProcError};
use crate::format::within_bytes;
use crate::model::{ContainerVars, LaunchEnv};

/// The fields of /proc/PID/stat torchtop uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PidStat {
    pub(crate) pid: u32,
    pub(crate) comm: String,
    pub(crate) state: char,
    pub(crate) ppid: u32,
    /// The kernel's PF_* flags (field 9).
    pub(crate) flags: u32,
    /// Clock ticks spent in user and in kernel mode.
    pub(crate) utime: u64,
    pub(crate) stime: u64,
    pub(crate) nice: i32,
    pub(crate) num_threads: u32,
    /// Clock ticks since boot when the process started.
    pub(crate) start_ticks: u64,
    pub(crate) rss_pages: u64,
}

impl PidStat {
    pub(crate) fn cpu_ticks(&self) -> u64 {
        self.utime.saturating_add(self.stime)
    }

    /// Kernel threads have no command line and no memory of their own.
    pub(crate) fn is_kernel_thread(&self) -> bool {
        const PF_KTHREAD: u32 = 0x0020_0000;
        self.flags & PF_KTHREAD != 0
    }
}

/// Parses /proc/PID/stat. The name (field 2) may hold spaces and parentheses, so it runs from
/// the first '(' to the LAST ')'.
pub(crate) fn parse_pid_stat(text: &str) -> Result<PidStat, ParseError> {
    let mut stat = PidStat::default();
    parse_pid_stat_into(text, &mut stat)?;
    Ok(stat)
}

/// [`parse_pid_stat`] into `stat`, whose name's buffer is reused: this runs for every GPU
/// process at every refresh. On error `stat` holds part of the fields.
pub(crate) fn parse_pid_stat_into(text: &str, stat: &mut PidStat) -> Result<(), ParseError> {
    /// The rss field (24 in proc(5)) in the fields after the name.
    const RSS: usize = 24 - 3;
    const FILE: &str = "/proc/PID/stat";
    let open = text
        .find('(')
        .ok_or_else(|| ParseError::new(FILE, "no '(' before the process name"))?;
    let close = text
        .rfind(')')
        .filter(|close| *close > open)
        .ok_or_else(|| ParseError::new(FILE, "no ')' after the process name"))?;
    stat.pid = parse_field(FILE, "pid", text[..open].trim())?;
    // Fields from 3 (state) on; index i here is field i + 3 of proc(5).
    let mut rest = [""; RSS + 1];
    let mut count = 0;
    for word in text[close + 1..].split_ascii_whitespace().take(RSS + 1) {
        rest[count] = word;
        count += 1;
    }
    if count <= RSS {
        return Err(ParseError::new(
            FILE,
            format!(
                "{count} fields after the name, at least {} expected",
                RSS + 1
            ),
        ));
    }
    stat.state = rest[0]
        .chars()
        .next()
        .filter(|_| rest[0].len() == 1)
        .ok_or_else(|| ParseError::new(FILE, format!("state \"{}\" is not one letter", rest[0])))?;
    stat.ppid = parse_field(FILE, "ppid", rest[4 - 3])?;
    stat.flags = parse_field(FILE, "flags", rest[9 - 3])?;
    stat.utime = parse_field(FILE, "utime", rest[14 - 3])?;
    stat.stime = parse_field(FILE, "stime", rest[15 - 3])?;
    stat.nice = parse_field(FILE, "nice", rest[19 - 3])?;
    stat.num_threads = parse_field(FILE, "num_threads", rest[20 - 3])?;
    stat.start_ticks = parse_field(FILE, "starttime", rest[22 - 3])?;
    stat.rss_pages = parse_field(FILE, "rss", rest[RSS])?;
    let comm = &text[open + 1..close];
    if stat.comm != comm {
        comm.clone_into(&mut stat.comm);
    }
    Ok(())
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PidStatus {
    /// The command name (`Name:`), `None` when the line is missing.
    pub(crate) name: Option<String>,
    /// The state letter (`State:`): R, S, D, T, t, Z, ...
    pub(crate) state: Option<char>,
    /// The pid of the process tracing this one; 0 when none.
    pub(crate) tracer_pid: u32,
    /// The real uid (first number of the Uid line).
    pub(crate) uid: u32,
    /// Real, effective, saved and filesystem uids, when the Uid line has all four.
    pub(crate) uids: Option<[u32; 4]>,
    /// The effective capability set (`CapEff:`), when the line is there.
    pub(crate) cap_eff: Option<u64>,
    /// `None` for kernel threads and zombies, which have no VmRSS line.
    pub(crate) vm_rss_bytes: Option<u64>,
}

pub(crate) fn parse_pid_status(text: &str) -> Result<PidStatus, ParseError> {
    const FILE: &str = "/proc/PID/status";
    let mut status = PidStatus {
        name: None,
        state: None,
        tracer_pid: 0,
        uid: 0,
        uids: None,
        cap_eff: None,
        vm_rss_bytes: None,
    };
    let mut uid = None;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let value = rest.trim();
        match key {
            "Name" => status.name = Some(value.to_string()),
            "State" => status.state = value.chars().next(),
            "TracerPid" => status.tracer_pid = value.parse().unwrap_or(0),
            "CapEff" => status.cap_eff = u64::from_str_radix(value, 16).ok(),
            "Uid" => {
                let words: Vec<&str> = value.split_whitespace().collect();
                let first = words
                    .first()
                    .ok_or_else(|| ParseError::new(FILE, "the Uid line is empty"))?;
                uid = Some(parse_field(FILE, "Uid", first)?);
                let all: Option<Vec<u32>> = words.iter().map(|w| w.parse().ok()).collect();
                status.uids = all.and_then(|all| all.try_into().ok());
            }
            "VmRSS" => {
                let bytes = parse_kib_value(rest)
                    .map_err(|reason| ParseError::new(FILE, format!("VmRSS: {reason}")))?;
                status.vm_rss_bytes = Some(bytes);
            }
            _ => {}
        }
    }
    status.uid = uid.ok_or_else(|| ParseError::new(FILE, "no Uid line"))?;
    Ok(status)
}

/// /proc/PID/cmdline: arguments separated (and usually ended) by NUL, joined with spaces.
/// `None` when empty, as for kernel threads and zombies; callers show `[comm]` instead.
pub(crate) fn parse_cmdline(text: &str) -> Option<String> {
    let args: Vec<&str> = text.trim_end_matches('\0').split('\0').collect();
    let line = args.join(" ");
    (!line.trim().is_empty()).then_some(line)
}

/// Picks the launcher variables out of /proc/PID/environ (NUL-separated `KEY=value`).
/// Entries without '=' are skipped; a rank that is not a number is left `None`.
pub(crate) fn parse_environ(text: &str) -> LaunchEnv {
    let mut env = LaunchEnv::default();
    for entry in text.split('\0') {
        let Some((key, value)) = entry.split_once('=') else {
            continue;
        };
        let text = || Some(value.to_string());
        let cut = || Some(within_bytes(value, ContainerVars::MOST_BYTES).to_string());
        let number = || value.trim().parse::<u32>().ok();
        match key {
            "CUDA_VISIBLE_DEVICES" => env.cuda_visible_devices = text(),
            "HIP_VISIBLE_DEVICES" => env.hip_visible_devices = text(),
            "ROCR_VISIBLE_DEVICES" => env.rocr_visible_devices = text(),
            "RANK" => env.rank = number(),
            "LOCAL_RANK" => env.local_rank = number(),
            "WORLD_SIZE" => env.world_size = number(),
            "TORCHELASTIC_RUN_ID" => env.torchelastic_run_id = text(),
            "MASTER_ADDR" => env.master_addr = text(),
            "MASTER_PORT" => env.master_port = text(),
            "PYTORCH_CUDA_ALLOC_CONF" => env.pytorch_cuda_alloc_conf = text(),
            "SLURM_JOB_ID" => env.slurm_job_id = text(),
            "SLURM_STEP_ID" => env.slurm_step_id = text(),
            "SLURM_PROCID" => env.slurm_procid = number(),
            "SLURM_LOCALID" => env.slurm_localid = number(),
            "SLURM_NTASKS" => env.slurm_ntasks = number(),
            "SLURM_JOB_USER" => env.slurm_job_user = text(),
            "POD_NAME" => env.pod_name = text(),
            "HOSTNAME" => env.hostname = text(),
            "APPTAINER_CONTAINER" => env.container_vars.apptainer_container = cut(),
            "APPTAINER_NAME" => env.container_vars.apptainer_name = cut(),
            "SINGULARITY_CONTAINER" => env.container_vars.singularity_container = cut(),
            "SINGULARITY_NAME" => env.container_vars.singularity_name = cut(),
            "OMP_NUM_THREADS" => env.omp_num_threads = number(),
            "TORCHTOP_AGENT_DIR" => env.agent_dir_vars.torchtop_agent_dir = text(),
            "XDG_RUNTIME_DIR" => env.agent_dir_vars.xdg_runtime_dir = text(),
            _ => {}
        }
    }
    env
}

/// /proc/PID/task/TID/children: the pids the thread forked, space-separated.
pub(crate) fn parse_children(text: &str) -> Result<Vec<u32>, ParseError> {
    text.split_whitespace()
        .map(|word| parse_field("/proc/PID/task/TID/children", "child pid", word))
        .collect()
}

pub(crate) fn read_pid_stat(root: &Path, pid: u32) -> Result<PidStat, ProcError> {
    read_parsed(pid_dir(root, pid).join("stat"), parse_pid_stat)
}

/// Half the soft limit on open files, so that sockets, the terminal and the GPU library keep
/// room; between 16 and 4,096.
fn keep_open_at_most() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    soft.map_or(4096, |n| usize::try_from(n / 2).unwrap_or(4096))
        .clamp(16, 4096)
}

/// `/proc/PID/stat` files kept open between refreshes: reading an open one again is one
/// `pread`, where opening it costs a path walk, an open and a close each time. A file whose
/// process exited reads as an error (its pid may since belong to another process, which the
/// caller then opens afresh). At most half the open-file limit is kept open: the processes
/// beyond (a thousand GPU processes under the common limit of 1,024) are read by path.
#[derive(Default)]
pub(crate) struct OpenStatFiles {
    files: crate::sys::PidMap<u32, File>,
    buffer: Vec<u8>,
    /// How many files may be kept open; read from the limit at first use.
    most: Option<usize>,
}

impl OpenStatFiles {
    #[cfg(test)]
    pub(crate) fn read(&mut self, root: &Path, pid: u32) -> Result<PidStat, ProcError> {
        let mut stat = PidStat::default();
        self.read_into(root, pid, &mut stat)?;
        Ok(stat)
    }

    /// [`read_pid_stat`] into `stat`, through the file kept open for `pid` (opened now if it is
    /// not yet), whose name's buffer is then reused; beyond the files that may be kept open (or
    /// out of descriptors), by path.
    pub(crate) fn read_into(
        &mut self,
        root: &Path,
        pid: u32,
        stat: &mut PidStat,
    ) -> Result<(), ProcError> {
        if self.read_open(pid, stat) {
            return Ok(());
        }
        let most = *self.most.get_or_insert_with(keep_open_at_most);
        if self.files.len() >= most {
            *stat = read_pid_stat(root, pid)?;
            return Ok(());
        }
        let path = pid_dir(root, pid).join("stat");
        let file = match File::open(&path) {
            Ok(file) => file,
            // Out of descriptors after all (other files of this process): read it by path.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                *stat = read_pid_stat(root, pid)?;
                return Ok(());
            }
            Err(e) => return Err(ProcError::from_io(&path, e)),
        };
        self.files.insert(pid, file);
        if self.read_open(pid, stat) {
            Ok(())
        } else {
            Err(ProcError::Gone(path))
        }
    }

    #[cfg(test)]
    pub(crate) fn keeping_at_most(most: usize) -> Self {
        OpenStatFiles {
            most: Some(most),
            ..Self::default()
        }
    }

    #[cfg(test)]
    pub(crate) fn kept_open(&self) -> usize {
        self.files.len()
    }

    /// Closes the files of processes not in `keep`.
    pub(crate) fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.files.retain(|pid, _| keep(*pid));
    }

    /// Reads the kept file of `pid` into `stat`; false (and the file closed) when there is
    /// none, or it no longer reads as a process's stat.
    fn read_open(&mut self, pid: u32, stat: &mut PidStat) -> bool {
        use std::os::unix::fs::FileExt;
        let Some(file) = self.files.get(&pid) else {
            return false;
        };
        if self.buffer.is_empty() {
            self.buffer.resize(4096, 0);
        }
        let parsed = match file.read_at(&mut self.buffer, 0) {
            Ok(n) if n > 0 => std::str::from_utf8(&self.buffer[..n])
                .ok()
                .is_some_and(|text| parse_pid_stat_into(text, stat).is_ok()),
            _ => false,
        };
        if !parsed {
            self.files.remove(&pid);
        }
        parsed
    }
}

pub(crate) fn read_pid_status(root: &Path, pid: u32) -> Result<PidStatus, ProcError> {
    read_parsed(pid_dir(root, pid).join("status"), parse_pid_status)
}

pub(crate) fn read_cmdline(root: &Path, pid: u32) -> Result<Option<String>, ProcError> {
    read_parsed(pid_dir(root, pid).join("cmdline"), |text| {
        Ok(parse_cmdline(text))
    })
}

/// One variable of the process's environment as it was at exec, or `None`.
pub(crate) fn read_environ_var(
    root: &Path,
    pid: u32,
    name: &str,
) -> Result<Option<OsString>, ProcError> {
    let environ = read_bytes(&pid_dir(root, pid).join("environ"))?;
    Ok(environ_lookup(&environ, name))
}

/// The value of `name` in NUL-separated `KEY=value` bytes, as the kernel keeps them.
pub(crate) fn environ_lookup(environ: &[u8], name: &str) -> Option<OsString> {
    environ.split(|&b| b == 0).find_map(|entry| {
        let rest = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        Some(OsString::from_vec(rest.to_vec()))
    })
}

/// The mount namespace of `pid` (the number in its `ns/mnt` link, `mnt:[N]`): which
/// filesystem its paths name. `None` where the link cannot be read.
pub(crate) fn read_mount_namespace(root: &Path, pid: u32) -> Option<u64> {
    mount_namespace_at(&pid_dir(root, pid))
}

/// The mount namespace of the process reading `root` (its `self`), as [`read_mount_namespace`]
/// reads another's: a fixture tree gives its own.
pub(crate) fn read_self_mount_namespace(root: &Path) -> Option<u64> {
    mount_namespace_at(&root.join("self"))
}

/// This process's mount namespace, as [`read_mount_namespace`] reads another's.
pub(crate) fn own_mount_namespace() -> Option<u64> {
    mount_namespace_at(Path::new("/proc/self"))
}

fn mount_namespace_at(dir: &Path) -> Option<u64> {
    let link = std::fs::read_link(dir.join("ns/mnt")).ok()?;
    let text = link.to_str()?;
    text.strip_prefix("mnt:[")?.strip_suffix(']')?.parse().ok()
}

pub(crate) fn read_environ(root: &Path, pid: u32) -> Result<LaunchEnv, ProcError> {
    read_parsed(pid_dir(root, pid).join("environ"), |text| {
        Ok(parse_environ(text))
    })
}

/// The thread ids of a process (the entries of /proc/PID/task).
pub(crate) fn read_thread_ids(root: &Path, pid: u32) -> Result<Vec<u32>, ProcError> {
    let dir = pid_dir(root, pid).join("task");
    let entries = std::fs::read_dir(&dir).map_err(|e| ProcError::from_io(&dir, e))?;
    Ok(entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

/// The children forked by one thread of a process.
pub(crate) fn read_thread_children(root: &Path, pid: u32, tid: u32) -> Result<Vec<u32>, ProcError> {
    let path = pid_dir(root, pid)
        .join("task")
        .join(tid.to_string())
        .join("children");
    read_parsed(path, parse_children)
}

/// The numeric entries of the proc root: every process (thread-group leader) on the host.
pub(crate) fn read_pids(root: &Path) -> Result<Vec<u32>, ProcError> {
    let entries = std::fs::read_dir(root).map_err(|e| ProcError::from_io(root, e))?;
    Ok(entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

/// The numeric entries of the proc root with the inode of each: the kernel gives the directory
/// of each process its own inode, so a pid listed under another inode is another process.
pub(crate) fn read_pid_entries(root: &Path) -> Result<Vec<(u32, u64)>, ProcError> {
    use std::os::unix::fs::DirEntryExt;
    let entries = std::fs::read_dir(root).map_err(|e| ProcError::from_io(root, e))?;
    Ok(entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid = entry.file_name().to_str()?.parse().ok()?;
            Some((pid, entry.ino()))
        })
        .collect())
}
