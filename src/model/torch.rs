//! What a torchtop agent inside a training process reports about PyTorch's caching allocator,
//! with the figures the sampler derives from it (the physical GPU behind each torch device, the
//! headroom left on that GPU, the allocation churn between two reports).

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
    /// NVML's memory for the process on this GPU minus reserved: the CUDA context, NCCL's
    /// buffers, other libraries' own cudaMalloc (cuBLAS and cuDNN workspaces are inside reserved).
    pub non_pytorch_bytes: Option<u64>,
    /// `reserved_bytes.all.peak`.
    #[serde(default)]
    pub peak_reserved_bytes: Option<u64>,
    /// `reserved_bytes.large_pool.current`: blocks over 1 MiB.
    #[serde(default)]
    pub large_pool_reserved_bytes: Option<u64>,
    /// `reserved_bytes.small_pool.current`: blocks of 1 MiB or less.
    #[serde(default)]
    pub small_pool_reserved_bytes: Option<u64>,
    /// `allocation.all.allocated`: allocations made since the start (or the last reset).
    #[serde(default)]
    pub allocations_total: Option<u64>,
    /// `allocation.all.freed`: allocations freed since the start (or the last reset).
    #[serde(default)]
    pub frees_total: Option<u64>,
    /// `oversize_allocations.current`: live allocations larger than `max_split_size`.
    #[serde(default)]
    pub oversize_allocations: Option<u64>,
    /// `oversize_segments.current`: segments holding them.
    #[serde(default)]
    pub oversize_segments: Option<u64>,
    /// `max_split_size`: blocks larger than this are never split; `None` when unlimited.
    #[serde(default)]
    pub max_split_size_bytes: Option<u64>,
    /// The device's UUID as torch reports it (`get_device_properties(i).uuid`).
    #[serde(default)]
    pub uuid: Option<String>,
    /// The NVML index of the physical GPU behind `cuda:index`, where it could be told.
    #[serde(default)]
    pub gpu: Option<u32>,
    /// That GPU's total memory.
    #[serde(default)]
    pub device_total_bytes: Option<u64>,
    /// That GPU's total minus what NVML says is used on it, by everyone.
    #[serde(default)]
    pub headroom_bytes: Option<u64>,
    /// Allocations per second between the agent's last two reports.
    #[serde(default)]
    pub allocations_per_second: Option<f64>,
    /// Frees per second between the agent's last two reports.
    #[serde(default)]
    pub frees_per_second: Option<f64>,
}

impl DeviceAllocatorStats {
    /// Becomes a copy of `source`, reusing this one's text buffer: no allocation once it has
    /// room.
    pub(crate) fn refill_from(&mut self, source: &DeviceAllocatorStats) {
        let mut uuid = self.uuid.take();
        refill_text(&mut uuid, source.uuid.as_deref());
        // Every other field is `Copy`.
        *self = DeviceAllocatorStats { uuid, ..*source };
    }

    /// Reserved minus allocated: memory the allocator holds and can reuse without cudaMalloc.
    pub fn cached_bytes(&self) -> Option<u64> {
        Some(self.reserved_bytes?.saturating_sub(self.allocated_bytes?))
    }
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
    /// `CUDA_VISIBLE_DEVICES` as the agent saw it in its own process.
    #[serde(default)]
    pub cuda_visible_devices: Option<String>,
    /// The agent's clock when it took its latest stats, seconds since the epoch.
    #[serde(default)]
    pub stats_unix_seconds: Option<f64>,
}

impl TorchInfo {
    /// Becomes a copy of `source`, reusing this one's text and device buffers: no allocation
    /// once they have room.
    pub(crate) fn refill_from(&mut self, source: &TorchInfo) {
        let mut python = self.python.take();
        refill_text(&mut python, source.python.as_deref());
        let mut torch = self.torch.take();
        refill_text(&mut torch, source.torch.as_deref());
        let mut alloc_conf = self.alloc_conf.take();
        refill_text(&mut alloc_conf, source.alloc_conf.as_deref());
        let mut visible = self.cuda_visible_devices.take();
        refill_text(&mut visible, source.cuda_visible_devices.as_deref());
        let mut devices = std::mem::take(&mut self.devices);
        refill_devices(&mut devices, &source.devices);
        // Every other field is `Copy`.
        *self = TorchInfo {
            python,
            torch,
            alloc_conf,
            devices,
            cuda_visible_devices: visible,
            ..*source
        };
    }
}

/// `into` becomes a copy of `source`, element by element, reusing the elements' buffers.
pub(crate) fn refill_devices(
    into: &mut Vec<DeviceAllocatorStats>,
    source: &[DeviceAllocatorStats],
) {
    into.truncate(source.len());
    for (kept, device) in into.iter_mut().zip(source) {
        kept.refill_from(device);
    }
    let kept = into.len();
    into.extend(source[kept..].iter().cloned());
}

/// `into` becomes `source`, reusing its buffer.
pub(crate) fn refill_text(into: &mut Option<String>, source: Option<&str>) {
    match (into.as_mut(), source) {
        (Some(kept), Some(text)) => {
            kept.clear();
            kept.push_str(text);
        }
        _ => *into = source.map(str::to_string),
    }
}
