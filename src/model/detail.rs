//! What the detail view (`Enter`) shows of one process beyond the table's row: the files of
//! /proc that cost too much to read for every process every tick (the full command line, the
//! cwd, the launcher and CUDA environment, the cgroup) and the process's children. The sampler
//! reads them only while the view is open, for that one pid.

/// The environment variables the detail view shows, by exact name.
pub const DETAIL_ENV_NAMES: &[&str] = &[
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMP_NUM_THREADS",
    // The Slurm task, whose rank and job the table shows (its other variables are many).
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "SLURM_JOB_USER",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
];

/// The environment variables the detail view shows, by prefix.
pub const DETAIL_ENV_PREFIXES: &[&str] = &["CUDA_", "NCCL_", "PYTORCH_", "TORCH_"];

/// At most this many variables are kept: a process chooses its own environment.
pub const MAX_DETAIL_ENV: usize = 64;
/// At most this many characters of one variable's value are kept.
pub const MAX_DETAIL_VALUE_CHARS: usize = 512;
/// At most this many characters of the command line are kept.
pub const MAX_DETAIL_COMMAND_CHARS: usize = 8192;
/// At most this many children are listed.
pub const MAX_DETAIL_CHILDREN: usize = 256;

/// Whether the detail view shows the variable `name`.
pub fn detail_env_wanted(name: &str) -> bool {
    DETAIL_ENV_NAMES.contains(&name) || DETAIL_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The detail of one process, as read at one tick. Texts are raw (untrusted): the screen
/// escapes them.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessDetail {
    pub pid: u32,
    /// The full command line (arguments joined by spaces), or why it could not be read.
    pub command: Result<Option<String>, String>,
    /// The working directory, or why it could not be read (another user's process needs root).
    pub cwd: Result<String, String>,
    /// The chosen variables, sorted by name, or why environ could not be read.
    pub env: Result<Vec<(String, String)>, String>,
    /// The process's cgroup (v2 path, or the v1 lines joined), or why it could not be read.
    pub cgroup: Result<String, String>,
    /// Direct children (DataLoader workers and the like), by pid.
    pub children: Vec<ChildProcess>,
    /// Children beyond [`MAX_DETAIL_CHILDREN`], not listed.
    pub children_left_out: usize,
}

/// One child of the process in the detail view.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChildProcess {
    pub pid: u32,
    /// The short name from /proc/PID/stat.
    pub comm: String,
    pub state: Option<char>,
    /// CPU% since the previous read; `None` on the first.
    pub cpu_percent: Option<f64>,
    pub rss_bytes: Option<u64>,
}
