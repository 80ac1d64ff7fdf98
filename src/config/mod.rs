//! The TOML config file: thresholds and windows for the warning rules.
//!
//! This module owns the [`Config`] type, its defaults (which must equal
//! `assets/config.default.toml`, the file `--print-config` prints), and [`load`], which reads a
//! file and names the key and the line of anything wrong in it. Unknown keys are rejected so a
//! typo never silently keeps a default. Sizes are in MiB and windows in seconds of sample time.

use serde::{Deserialize, Serialize};

mod container;
mod loading;
mod ui;
mod units;
mod validate;

pub(crate) use container::{
    CgroupMemoryConfig, CpuOversubscribedConfig, OomKilledConfig, ShmSmallConfig,
};
pub(crate) use units::{Fraction, NonNegative, Percent, Seconds};

pub use loading::load;
pub use ui::{default_path, ThemeName, UiConfig};
pub(crate) use ui::{HistoryMetric, Panels, REFRESH_CHOICES};
// Tests parse config text without a file; the program always goes through `load`.
#[cfg(test)]
pub(crate) use loading::parse;

/// The commented default config, as `torchtop --print-config` prints it.
pub(crate) const DEFAULT_CONFIG_TOML: &str = include_str!("../../assets/config.default.toml");

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[rules.*]`: one table per warning rule.
    pub rules: RulesConfig,
    /// `[cluster]`: `torchtop cluster`.
    pub(crate) cluster: ClusterConfig,
    /// `[ui]`: the screen as F2 saved it, read leniently by [`UiConfig::from_value`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ui: Option<toml::Value>,
}

impl Config {
    /// The `[ui]` table, or the defaults and a sentence when it is garbled.
    pub fn ui(&self) -> (UiConfig, Option<String>) {
        UiConfig::from_value(self.ui.as_ref())
    }
}

/// `torchtop cluster`: where Prometheus is, and when a rank is a straggler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ClusterConfig {
    /// The Prometheus to read, as `--prometheus` gives it.
    pub(crate) prometheus: Option<String>,
    /// A rank is a straggler when its step time is more than this percent above the median.
    pub(crate) straggler_percent: f64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            prometheus: None,
            straggler_percent: 20.0,
        }
    }
}

/// One table per rule, named like the rule id with `_` for `-`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct RulesConfig {
    pub(crate) oom_risk: OomRiskConfig,
    pub(crate) fragmentation: FragmentationConfig,
    pub(crate) leak: LeakConfig,
    pub(crate) gpu_starved: GpuStarvedConfig,
    pub(crate) imbalance: ImbalanceConfig,
    pub(crate) swap: SwapConfig,
    pub(crate) throttle: ThrottleConfig,
    pub(crate) zombie_memory: ZombieMemoryConfig,
    pub(crate) ecc: EccConfig,
    pub(crate) health: HealthConfig,
    pub(crate) wrong_gpu: WrongGpuConfig,
    pub(crate) training_stalled: TrainingStalledConfig,
    pub(crate) cgroup_memory: CgroupMemoryConfig,
    pub(crate) oom_killed: OomKilledConfig,
    pub(crate) shm_small: ShmSmallConfig,
    pub(crate) cpu_oversubscribed: CpuOversubscribedConfig,
}

/// `oom-risk`: memory near the GPU's total, and allocator OOMs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct OomRiskConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Share of the GPU's total memory that used (or a process's reserved) memory must reach.
    /// Default 0.95.
    pub(crate) memory_fraction: Fraction,
    /// Critical while num_ooms rose within this many seconds. Default 300.
    pub(crate) oom_window_seconds: Seconds,
}

impl Default for OomRiskConfig {
    fn default() -> Self {
        OomRiskConfig {
            enabled: true,
            memory_fraction: Fraction::new(0.95),
            oom_window_seconds: Seconds::new(300.0),
        }
    }
}

/// `fragmentation`: inactive-split memory and allocation retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct FragmentationConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Share of reserved memory that inactive-split memory must reach. Default 0.3.
    pub(crate) inactive_split_fraction: Fraction,
    /// The least inactive-split memory that counts, in MiB. Default 1024.
    pub(crate) min_inactive_split_mib: NonNegative,
    /// Warn while num_alloc_retries rose within this many seconds. Default 60.
    pub(crate) retries_window_seconds: Seconds,
}

impl Default for FragmentationConfig {
    fn default() -> Self {
        FragmentationConfig {
            enabled: true,
            inactive_split_fraction: Fraction::new(0.3),
            min_inactive_split_mib: NonNegative::new(1024.0),
            retries_window_seconds: Seconds::new(60.0),
        }
    }
}

/// `leak`: allocated memory that keeps rising as a trend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct LeakConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The span over which memory must keep rising. Default 120.
    pub(crate) window_seconds: Seconds,
    /// The fewest samples in the window for a trend to count. Default 6.
    pub(crate) min_samples: u32,
    /// The least total rise over the window, in MiB. Default 256.
    pub(crate) min_rise_mib: NonNegative,
    /// The largest fall allowed in one step, and below the window's start, in MiB. Default 64.
    pub(crate) max_fallback_mib: NonNegative,
    /// The least share of steps that must not fall. Default 0.6.
    pub(crate) min_rising_steps_fraction: Fraction,
    /// The largest share of the total rise one step may carry. Default 0.5.
    pub(crate) max_single_step_fraction: Fraction,
}

impl Default for LeakConfig {
    fn default() -> Self {
        LeakConfig {
            enabled: true,
            window_seconds: Seconds::new(120.0),
            min_samples: 6,
            min_rise_mib: NonNegative::new(256.0),
            max_fallback_mib: NonNegative::new(64.0),
            min_rising_steps_fraction: Fraction::new(0.6),
            max_single_step_fraction: Fraction::new(0.5),
        }
    }
}

/// `gpu-starved`: GPU memory held while the SMs idle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct GpuStarvedConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The span over which utilization must stay low. Default 60.
    pub(crate) window_seconds: Seconds,
    /// Mean SM utilization over the window below this percentage counts as low. Default 30.
    pub(crate) max_utilization_percent: Percent,
    /// The least GPU memory the process must hold, in MiB. Default 1024.
    pub(crate) min_memory_mib: NonNegative,
    /// Mean CPU% per DataLoader worker from which the workers look saturated. Default 80.
    pub(crate) worker_busy_percent: NonNegative,
    /// CPU% of the training process from which it looks saturated. Default 90.
    pub(crate) main_busy_percent: NonNegative,
    /// Host CPU% from which the host looks saturated. Default 90.
    pub(crate) host_busy_percent: Percent,
}

impl Default for GpuStarvedConfig {
    fn default() -> Self {
        GpuStarvedConfig {
            enabled: true,
            window_seconds: Seconds::new(60.0),
            max_utilization_percent: Percent::new(30.0),
            min_memory_mib: NonNegative::new(1024.0),
            worker_busy_percent: NonNegative::new(80.0),
            main_busy_percent: NonNegative::new(90.0),
            host_busy_percent: Percent::new(90.0),
        }
    }
}

/// `imbalance`: the ranks of one job differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ImbalanceConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The span over which the ranks are compared. Default 30.
    pub(crate) window_seconds: Seconds,
    /// Memory spread as a share of the largest rank's memory. Default 0.2.
    pub(crate) memory_spread_fraction: Fraction,
    /// The least memory spread that counts, in MiB. Default 1024.
    pub(crate) min_memory_spread_mib: NonNegative,
    /// Utilization spread in percentage points. Default 30.
    pub(crate) utilization_spread_percent: Percent,
}

impl Default for ImbalanceConfig {
    fn default() -> Self {
        ImbalanceConfig {
            enabled: true,
            window_seconds: Seconds::new(30.0),
            memory_spread_fraction: Fraction::new(0.2),
            min_memory_spread_mib: NonNegative::new(1024.0),
            utilization_spread_percent: Percent::new(30.0),
        }
    }
}

/// `swap`: host memory pressure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SwapConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The span over which swap growth is measured. Default 60.
    pub(crate) window_seconds: Seconds,
    /// The least swap growth over the window, in MiB. Default 64.
    pub(crate) min_growth_mib: NonNegative,
    /// Available RAM below this share of total counts as low. Default 0.1.
    pub(crate) available_fraction: Fraction,
}

impl Default for SwapConfig {
    fn default() -> Self {
        SwapConfig {
            enabled: true,
            window_seconds: Seconds::new(60.0),
            min_growth_mib: NonNegative::new(64.0),
            available_fraction: Fraction::new(0.1),
        }
    }
}

/// The throttle-reason names the NVML collector produces.
pub(crate) const THROTTLE_REASON_NAMES: [&str; 5] = [
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
];

/// `throttle`: clocks held down by power or heat under load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ThrottleConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Utilization from which a GPU counts as under load. Default 50.
    pub(crate) min_utilization_percent: Percent,
    /// The reasons that raise the warning. Default: all of [`THROTTLE_REASON_NAMES`].
    pub(crate) reasons: Vec<String>,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            enabled: true,
            min_utilization_percent: Percent::new(50.0),
            reasons: THROTTLE_REASON_NAMES
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        }
    }
}

/// `zombie-memory`: GPU memory held by a pid missing from /proc.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ZombieMemoryConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// How long the pid must have been missing. Default 2.
    pub(crate) min_seconds: Seconds,
}

impl Default for ZombieMemoryConfig {
    fn default() -> Self {
        ZombieMemoryConfig {
            enabled: true,
            min_seconds: Seconds::new(2.0),
        }
    }
}

/// `ecc`: volatile ECC error counts rising.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct EccConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Warn while the counts rose within this many seconds. Default 600.
    pub(crate) window_seconds: Seconds,
}

impl Default for EccConfig {
    fn default() -> Self {
        EccConfig {
            enabled: true,
            window_seconds: Seconds::new(600.0),
        }
    }
}

/// `gpu-lost`, `gpu-unresponsive` and `driver-missing`: the GPUs and the driver themselves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct HealthConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// A GPU the driver has not answered for this long is unresponsive. Default 10.
    pub(crate) unresponsive_seconds: Seconds,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            enabled: true,
            unresponsive_seconds: Seconds::new(10.0),
        }
    }
}

/// `wrong-gpu`: a process holds memory on a GPU its CUDA_VISIBLE_DEVICES does not list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct WrongGpuConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The least memory that counts, in MiB. Default 64.
    pub(crate) min_memory_mib: NonNegative,
}

impl Default for WrongGpuConfig {
    fn default() -> Self {
        WrongGpuConfig {
            enabled: true,
            min_memory_mib: NonNegative::new(64.0),
        }
    }
}

/// `training-stalled`: an agent still reports, but its step counter stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TrainingStalledConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Stalled once the step has not moved for this many median step times. Default 10.
    pub(crate) step_time_factor: NonNegative,
    /// ... and for at least this many seconds (evaluation and checkpoints pause the step
    /// counter too). Default 300.
    pub(crate) min_seconds: Seconds,
}

impl Default for TrainingStalledConfig {
    fn default() -> Self {
        TrainingStalledConfig {
            enabled: true,
            step_time_factor: NonNegative::new(10.0),
            min_seconds: Seconds::new(300.0),
        }
    }
}

/// The default config text, commented.
pub fn print_default() -> &'static str {
    DEFAULT_CONFIG_TOML
}

#[cfg(test)]
mod tests;
