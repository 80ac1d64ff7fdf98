//! The host: memory, swap, CPU and the vm settings the articles tell users to check.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::cgroup::OomKillEvent;

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
    /// Shared (`Arc`) with the collector, which reads it once.
    pub hostname: Option<std::sync::Arc<str>>,
    pub memory: MemoryInfo,
    pub swap: SwapInfo,
    pub vm: VmSettings,
    /// Busy share of all CPUs since the previous sample, 0-100. `None` on the first sample.
    pub cpu_percent: Option<f64>,
    pub cpu_count: Option<u32>,
    pub load: Option<LoadAverage>,
    pub uptime_seconds: Option<f64>,
    /// `oom_kill` of /proc/vmstat: the OOM killer's kills since boot (kernel 4.13+).
    #[serde(default)]
    pub oom_kill_count: Option<u64>,
    /// The OOM kills seen in this monitor's last hour (host-wide or in a GPU process's
    /// cgroup), oldest first, bounded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oom_kills: Vec<OomKillEvent>,
    /// The container runtime torchtop itself runs in (`docker`, `podman`, `kubernetes`,
    /// `containerd`, `lxc`, ...), `None` on the host. NVML then reports host pids, which this
    /// /proc does not show. Shared with the collector, which looks once.
    #[serde(default)]
    pub container: Option<Arc<str>>,
    /// The driver's pids are another PID namespace's (the host's): torchtop runs in a
    /// namespace below it, a container without `--pid=host`, and never looks them up in this
    /// /proc. A container that shares the host's namespace is not such a place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pids_foreign: bool,
}
