//! Thresholds of the container and cgroup rules: `cgroup-memory`, `oom-killed`, `shm-small`
//! and `cpu-oversubscribed`.

use serde::{Deserialize, Serialize};

use super::{Fraction, NonNegative, Seconds};

/// `cgroup-memory`: a training process's cgroup near its memory limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CgroupMemoryConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Share of memory.max that memory.current must reach. Default 0.9.
    pub(crate) memory_fraction: Fraction,
}

impl Default for CgroupMemoryConfig {
    fn default() -> Self {
        CgroupMemoryConfig {
            enabled: true,
            memory_fraction: Fraction::new(0.9),
        }
    }
}

/// `oom-killed`: the kernel's OOM killer ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct OomKilledConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// How long the warning stays after the kill, in seconds (at most 3600, as long as the
    /// kills are kept). Default 3600.
    pub(crate) hold_seconds: Seconds,
}

impl Default for OomKilledConfig {
    fn default() -> Self {
        OomKilledConfig {
            enabled: true,
            hold_seconds: Seconds::new(3600.0),
        }
    }
}

/// `shm-small`: `/dev/shm` too small or nearly full for the DataLoader workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ShmSmallConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The least `/dev/shm` per DataLoader worker, in MiB. Default 128.
    pub(crate) min_mib_per_worker: NonNegative,
    /// Share of `/dev/shm` in use from which it counts as nearly full. Default 0.9.
    pub(crate) full_fraction: Fraction,
}

impl Default for ShmSmallConfig {
    fn default() -> Self {
        ShmSmallConfig {
            enabled: true,
            min_mib_per_worker: NonNegative::new(128.0),
            full_fraction: Fraction::new(0.9),
        }
    }
}

/// `cpu-oversubscribed`: more worker and OpenMP threads than the cgroup's CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CpuOversubscribedConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Warn when the threads exceed the allowed CPUs times this. Default 1.0.
    pub(crate) max_ratio: NonNegative,
}

impl Default for CpuOversubscribedConfig {
    fn default() -> Self {
        CpuOversubscribedConfig {
            enabled: true,
            max_ratio: NonNegative::new(1.0),
        }
    }
}
