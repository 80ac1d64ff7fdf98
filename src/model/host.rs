//! The host: memory, swap, CPU and the vm settings the articles tell users to check.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MemoryInfo {
    pub total_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
    /// total - available, as `free` reports "used" on current kernels.
    pub used_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SwapInfo {
    pub total_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct VmSettings {
    pub swappiness: Option<u32>,
    pub overcommit_memory: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct LoadAverage {
    pub one: f64,
    pub five: f64,
    pub fifteen: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HostSnapshot {
    pub hostname: Option<String>,
    pub memory: MemoryInfo,
    pub swap: SwapInfo,
    pub vm: VmSettings,
    /// Busy share of all CPUs since the previous sample, 0-100. `None` on the first sample.
    pub cpu_percent: Option<f64>,
    pub cpu_count: Option<u32>,
    pub load: Option<LoadAverage>,
    pub uptime_seconds: Option<f64>,
}
