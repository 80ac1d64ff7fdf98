//! What a torchtop agent inside a training process reports about PyTorch's caching allocator.

use serde::{Deserialize, Serialize};

/// Allocator figures for one CUDA device of one process, taken from `torch.cuda.memory_stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct DeviceAllocatorStats {
    pub index: u32,
    pub allocated_bytes: Option<u64>,
    pub reserved_bytes: Option<u64>,
    pub active_bytes: Option<u64>,
    pub inactive_split_bytes: Option<u64>,
    pub requested_bytes: Option<u64>,
    pub peak_allocated_bytes: Option<u64>,
    pub segments: Option<u64>,
    pub alloc_retries: Option<u64>,
    pub ooms: Option<u64>,
    /// NVML's memory for the process on this GPU minus reserved: CUDA context, cuBLAS, NCCL.
    pub non_pytorch_bytes: Option<u64>,
}

/// Everything the agent of one process has said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TorchInfo {
    pub python: Option<String>,
    pub torch: Option<String>,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub alloc_conf: Option<String>,
    pub step: Option<u64>,
    pub step_time_seconds: Option<f64>,
    pub devices: Vec<DeviceAllocatorStats>,
    /// Seconds since the agent last sent stats.
    pub age_seconds: Option<f64>,
}
