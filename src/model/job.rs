//! A distributed job (torchrun, DDP, FSDP) as grouped from its processes; the grouping itself
//! lives in [`crate::rules::jobs`].

use serde::{Deserialize, Serialize};

/// One process of a job on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRank {
    pub pid: u32,
    /// The NVML GPU index; [`super::NO_GPU`] for a rank that holds none (JSON: null).
    #[serde(with = "gpu_or_null")]
    pub gpu: u32,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
}

/// The processes of one distributed job on this host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Human-readable and stable while the job runs: "torchelastic run abc", "job
    /// localhost:29500", "job under pid 1234".
    pub id: String,
    /// Ordered by rank, then pid and GPU.
    pub ranks: Vec<JobRank>,
    /// The ranks seen in this job that have left it (exited, or gone from /proc and the GPUs)
    /// while others still run, in the order they were first seen; a job down to one process
    /// stays listed for them. Recordings made before this field read as none gone.
    #[serde(default)]
    pub gone: Vec<GoneRank>,
}

/// A rank that left its job, as it was last seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoneRank {
    pub pid: u32,
    /// The GPU it held; [`super::NO_GPU`] for none (JSON: null).
    #[serde(with = "gpu_or_null")]
    pub gpu: u32,
    pub rank: Option<u32>,
    /// How long ago the monitor first missed it.
    pub gone_seconds: f64,
}

/// [`JobRank::gpu`] in JSON: null for [`super::NO_GPU`], as a process row says it.
mod gpu_or_null {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::super::NO_GPU;

    // serde's `with` passes the field by reference.
    #[allow(clippy::trivially_copy_pass_by_ref)]
    pub(super) fn serialize<S: Serializer>(gpu: &u32, serializer: S) -> Result<S::Ok, S::Error> {
        if *gpu == NO_GPU {
            serializer.serialize_none()
        } else {
            serializer.serialize_some(gpu)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
        Ok(Option::<u32>::deserialize(deserializer)?.unwrap_or(NO_GPU))
    }
}
