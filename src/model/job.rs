//! A distributed job (torchrun, DDP, FSDP) as grouped from its processes; the grouping itself
//! lives in [`crate::rules::jobs`].

use serde::{Deserialize, Serialize};

/// One process of a job on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRank {
    pub pid: u32,
    /// The NVML GPU index.
    pub gpu: u32,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
}

/// The processes of one distributed job on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Human-readable and stable while the job runs: "torchelastic run abc", "job
    /// localhost:29500", "job under pid 1234".
    pub id: String,
    /// Ordered by rank, then pid and GPU.
    pub ranks: Vec<JobRank>,
}
