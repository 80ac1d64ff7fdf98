//! A process that holds a GPU, joined with what /proc says about it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::cgroup::{Cgroup, PlacementLabel, ProcessContainer, ShmInfo, SlurmTask};
use super::torch::TorchInfo;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessKind {
    Compute,
    Graphics,
    /// Listed by NVML both as compute and as graphics.
    Both,
}

impl ProcessKind {
    pub fn short(self) -> &'static str {
        match self {
            ProcessKind::Compute => "C",
            ProcessKind::Graphics => "G",
            ProcessKind::Both => "C+G",
        }
    }
}

/// The `gpu` of a row without a GPU: no GPU has this index, so lookups by index find none.
pub const NO_GPU: u32 = u32::MAX;

/// One (process, GPU) pair. A process on two GPUs appears twice. A process with a torchtop
/// agent that NVML does not list (CPU-only training, or before its first CUDA call) has one
/// row with [`no_gpu`](Self::no_gpu) set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub gpu: u32,
    pub kind: ProcessKind,
    pub gpu_memory_bytes: Option<u64>,
    /// SM utilization from NVML's process-utilization samples.
    pub sm_percent: Option<u32>,
    /// Memory-bandwidth, encoder and decoder utilization from the same samples (nvitop's
    /// %GMBW, %ENC, %DEC).
    #[serde(default)]
    pub memory_bandwidth_percent: Option<u32>,
    #[serde(default)]
    pub encoder_percent: Option<u32>,
    #[serde(default)]
    pub decoder_percent: Option<u32>,
    /// False when the pid is not in this machine's /proc (another container, or already gone).
    pub visible: bool,
    /// Shared with the collector's cache of the process (and the previous snapshots): the
    /// same text is not copied into every row of every tick.
    pub user: Option<Arc<str>>,
    pub uid: Option<u32>,
    pub command: Option<Arc<str>>,
    pub ppid: Option<u32>,
    /// Start time in clock ticks since boot (/proc/PID/stat field 22): with the pid, the
    /// process's identity.
    pub start_ticks: Option<u64>,
    pub cpu_percent: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub running_seconds: Option<f64>,
    pub nice: Option<i32>,
    /// One-letter state from /proc/PID/stat (R, S, D, T, Z, ...); `None` where not visible.
    #[serde(default)]
    pub state: Option<char>,
    /// Direct children (DataLoader workers and the like): how many, and their summed CPU%.
    pub children_count: Option<u32>,
    pub children_cpu_percent: Option<f64>,
    /// Launcher variables (rank, CUDA_VISIBLE_DEVICES, ...); `None` where environ is unreadable.
    pub env: Option<Arc<LaunchEnv>>,
    /// Allocator figures published by an agent inside the process; `None` without one. Shared
    /// by the process's rows and kept by the sampler between ticks: a tick copies no text.
    pub torch: Option<Arc<TorchInfo>>,
    /// Where `torch` is `None` but the process's agent socket accepted torchtop's connection:
    /// how long the agent has said nothing since (it says hello at once when its process
    /// runs, so the process is stopped or its interpreter held). `None` otherwise.
    #[serde(default)]
    pub agent_silent_seconds: Option<f64>,
    /// Listed for its agent only: it holds no GPU memory NVML knows of, and `gpu` is
    /// [`NO_GPU`]. JSON says so with `"gpu": null`.
    #[serde(skip)]
    pub no_gpu: bool,
    /// Its pid came from the driver (NVML, amd-smi), which reports the host's pids whatever
    /// namespace torchtop runs in; a pid from this /proc (an agent, fdinfo) is not.
    #[serde(skip)]
    pub driver_pid: bool,
    /// Its control group and limits; `None` where /proc/PID/cgroup is unreadable. Shared with
    /// the cgroup reader and the other rows in the cgroup: a tick does not copy it per row.
    #[serde(default)]
    pub cgroup: Option<Arc<Cgroup>>,
    /// Its `/dev/shm`, read for processes with children (DataLoader workers).
    #[serde(default)]
    pub shm: Option<ShmInfo>,
    /// Its Slurm task, from SLURM_* in its environment or its cgroup path; shared with the
    /// collector's cache of the process.
    #[serde(default)]
    pub slurm: Option<Arc<SlurmTask>>,
    /// Its pid in each nested pid namespace, outermost (this /proc's) first, from the NSpid
    /// line of /proc/PID/status; listed only when it has more than one (a containerized
    /// process: the last is the pid `ps` shows inside its container). Shared with the
    /// collector's cache of the process.
    #[serde(default)]
    pub ns_pids: Option<Arc<[u32]>>,
    /// Its Apptainer (Singularity) or enroot container, which its cgroup (a Slurm job's,
    /// shared with processes outside the container) does not name; `None` outside one, or
    /// where it cannot be told (its environ and root unreadable, as another user's are when
    /// torchtop is not root). Shared with the collector's cache.
    #[serde(default)]
    pub container: Option<Arc<ProcessContainer>>,
}

impl GpuProcess {
    /// A row for a pid of this /proc (fdinfo, an agent), before /proc has been joined in.
    pub fn new(pid: u32, gpu: u32, kind: ProcessKind) -> Self {
        GpuProcess {
            pid,
            gpu,
            kind,
            gpu_memory_bytes: None,
            sm_percent: None,
            memory_bandwidth_percent: None,
            encoder_percent: None,
            decoder_percent: None,
            visible: false,
            user: None,
            uid: None,
            command: None,
            ppid: None,
            start_ticks: None,
            cpu_percent: None,
            rss_bytes: None,
            running_seconds: None,
            nice: None,
            state: None,
            children_count: None,
            children_cpu_percent: None,
            env: None,
            torch: None,
            agent_silent_seconds: None,
            no_gpu: false,
            driver_pid: false,
            cgroup: None,
            shm: None,
            slurm: None,
            ns_pids: None,
            container: None,
        }
    }

    /// Where it runs, as the CONTAINER column writes it ([`PlacementLabel`]).
    pub fn placement_label(&self) -> PlacementLabel<'_> {
        PlacementLabel {
            cgroup: self.cgroup.as_deref(),
            container: self.container.as_deref(),
            slurm: self.slurm.as_deref(),
        }
    }

    /// For a row with [`agent_silent_seconds`](Self::agent_silent_seconds): what its agent
    /// says nothing of, from the process's state, as one clause.
    pub fn why_agent_silent(&self) -> &'static str {
        match self.state {
            Some('T' | 't') => "the process is stopped (state T)",
            Some('D') => "the process waits on a disk or a network filesystem (state D)",
            _ => "native code holds its Python interpreter, or it is deadlocked",
        }
    }

    /// A row for a pid the driver reported (see [`GpuProcess::driver_pid`]).
    pub fn from_driver(pid: u32, gpu: u32, kind: ProcessKind) -> Self {
        GpuProcess {
            driver_pid: true,
            ..GpuProcess::new(pid, gpu, kind)
        }
    }

    /// The row of a process whose agent spoke but which NVML does not list.
    pub fn agent_only(pid: u32, torch: Arc<TorchInfo>) -> Self {
        GpuProcess {
            no_gpu: true,
            torch: Some(torch),
            ..GpuProcess::new(pid, NO_GPU, ProcessKind::Compute)
        }
    }
}

/// (De)serializes the rows of a snapshot with `"gpu": null` for a row without a GPU.
pub(crate) mod rows_serde {
    use serde::de::Error as _;
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    use super::{GpuProcess, NO_GPU};

    pub(crate) fn serialize<S: Serializer>(rows: &[GpuProcess], s: S) -> Result<S::Ok, S::Error> {
        let mut values = Vec::with_capacity(rows.len());
        for row in rows {
            let mut value = serde_json::to_value(row).map_err(S::Error::custom)?;
            if row.no_gpu {
                value["gpu"] = Value::Null;
            }
            values.push(value);
        }
        values.serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<GpuProcess>, D::Error> {
        let values = Vec::<Value>::deserialize(d)?;
        values
            .into_iter()
            .map(|mut value| {
                let no_gpu = value.get("gpu").is_some_and(Value::is_null);
                if no_gpu {
                    value["gpu"] = Value::from(NO_GPU);
                }
                let mut row: GpuProcess =
                    serde_json::from_value(value).map_err(D::Error::custom)?;
                row.no_gpu = no_gpu;
                Ok(row)
            })
            .collect()
    }
}

/// The launcher's variables from /proc/PID/environ, read once per process where readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LaunchEnv {
    pub cuda_visible_devices: Option<String>,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub torchelastic_run_id: Option<String>,
    pub master_addr: Option<String>,
    pub master_port: Option<String>,
    pub pytorch_cuda_alloc_conf: Option<String>,
    /// The distributed launcher that started the process, when its parent is one (`torchrun`,
    /// `torch.distributed.run`, `deepspeed`, `accelerate`, `mpirun`, ...), from the parent's
    /// command line; not an environment variable.
    #[serde(default)]
    pub launcher: Option<String>,
    /// ROCm's device filters (AMD GPUs), applied before `HIP_VISIBLE_DEVICES`.
    #[serde(default)]
    pub rocr_visible_devices: Option<String>,
    #[serde(default)]
    pub hip_visible_devices: Option<String>,
    /// SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_JOB_USER.
    #[serde(default)]
    pub slurm_job_id: Option<String>,
    #[serde(default)]
    pub slurm_step_id: Option<String>,
    #[serde(default)]
    pub slurm_procid: Option<u32>,
    #[serde(default)]
    pub slurm_localid: Option<u32>,
    #[serde(default)]
    pub slurm_ntasks: Option<u32>,
    #[serde(default)]
    pub slurm_job_user: Option<String>,
    /// POD_NAME (set by a Downward API field) and HOSTNAME (a pod's name in Kubernetes).
    #[serde(default)]
    pub pod_name: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
    /// OMP_NUM_THREADS: torch's intra-op threads (its default is the host's cores).
    #[serde(default)]
    pub omp_num_threads: Option<u32>,
    /// TORCHTOP_AGENT_DIR and XDG_RUNTIME_DIR, from which the process's agent picks its socket
    /// directory: root's monitor reads another user's agents there. Not recorded: a replay
    /// connects to no agent.
    #[serde(skip)]
    pub agent_dir_vars: AgentDirVars,
    /// What Apptainer (Singularity) sets inside its containers, from which the collector names
    /// the process's container (`GpuProcess::container`); not recorded here.
    #[serde(skip)]
    pub container_vars: ContainerVars,
}

/// APPTAINER_CONTAINER, APPTAINER_NAME, SINGULARITY_CONTAINER and SINGULARITY_NAME as the
/// process's environment holds them, cut to [`ContainerVars::MOST_BYTES`]: the process's own
/// text, not yet cleaned for display.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerVars {
    pub apptainer_container: Option<String>,
    pub apptainer_name: Option<String>,
    pub singularity_container: Option<String>,
    pub singularity_name: Option<String>,
}

impl ContainerVars {
    /// The most kept of one value: a path is at most 4,096 bytes (PATH_MAX).
    pub const MOST_BYTES: usize = 4096;
}

/// What, with its uid, names the directory a process's agent serves in
/// (`crate::protocol::socket_dir_from`): two variables, and the filesystem the path is in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentDirVars {
    pub torchtop_agent_dir: Option<String>,
    pub xdg_runtime_dir: Option<String>,
    /// The process's mount namespace (a container's filesystem is another), where readable.
    pub mount_ns: Option<u64>,
}

/// Any host process, as the tree view and the job grouping see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HostProcess {
    pub pid: u32,
    pub ppid: u32,
    pub start_ticks: u64,
    pub uid: Option<u32>,
    pub user: Option<String>,
    /// The short name from /proc/PID/stat.
    pub comm: String,
    /// The full command line; `None` where unreadable or empty (kernel threads, zombies).
    pub command: Option<String>,
    /// One-letter state from /proc/PID/stat (R, S, D, Z, T, ...).
    pub state: char,
    pub cpu_percent: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub nice: Option<i32>,
    /// Seconds since the process started (a DataLoader worker's TIME in the tree view).
    #[serde(default)]
    pub running_seconds: Option<f64>,
    /// The state, CPU%, RSS and nice are from an earlier refresh: the tree view reads again
    /// only the rows on screen, and the others keep their last figures until they are.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
}
