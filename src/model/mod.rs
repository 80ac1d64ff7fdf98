//! Plain data shared by every part of torchtop: what the collectors publish and what the UI,
//! the rules and `--once` read. Nothing here does I/O. Every value a source may fail to report
//! is an `Option`; `None` is shown as N/A and serialized as JSON `null`, never as 0.

pub mod cgroup;
pub mod detail;
pub(crate) mod filter;
pub mod gpu;
pub(crate) mod history;
pub mod host;
pub mod identity;
pub mod job;
pub mod oom;
pub mod process;
pub(crate) mod rocm_visible;
pub mod snapshot;
pub mod torch;
pub(crate) mod tree;
pub mod warning;

pub use cgroup::{
    Cgroup, CgroupMember, ContainerRef, CpuMax, Limit, OomKillEvent, PlacementLabel, PodRef,
    ProcessContainer, ShmInfo, SlurmTask, VanishedProcess,
};
pub use detail::{ChildProcess, ProcessDetail};
pub use gpu::{DriverInfo, GpuSample, GpuState, GpuVendor, Implausible, MigDevice};
pub(crate) use history::History;
pub use host::{HostSnapshot, LoadAverage, MemoryInfo, SwapInfo, VmSettings};
pub use identity::ProcessIdentity;
pub use job::{GoneRank, Job, JobRank};
pub use oom::{MemsnapReady, OomReport, OpenedFile};
pub use process::{
    AgentDirVars, ContainerVars, GpuProcess, HostProcess, LaunchEnv, ProcessKind, NO_GPU,
};
pub use snapshot::Snapshot;
pub use torch::{DeviceAllocatorStats, TorchInfo};
pub use warning::{
    once_exit_status, Fact, Severity, Subject, Warning, EXIT_CRITICAL, EXIT_WARN, GPU_EVIDENCE,
    JOB_EVIDENCE,
};
