//! The `[rules]` table of the config file: one table per warning rule, each defined beside its
//! rule (`oom_risk.rs` holds `OomRiskConfig`, and so on), and the checks that span a rule's keys
//! or that a value's type cannot make on its own (fractions, percentages, windows and sizes
//! check themselves as they are read: see `crate::config`), each failure naming its full key.

use serde::{Deserialize, Serialize};

use super::cgroup_memory::CgroupMemoryConfig;
use super::cpu_oversubscribed::CpuOversubscribedConfig;
use super::ecc::EccConfig;
use super::fragmentation::FragmentationConfig;
use super::gpu_starved::GpuStarvedConfig;
use super::health::HealthConfig;
use super::imbalance::ImbalanceConfig;
use super::leak::LeakConfig;
use super::oom_killed::OomKilledConfig;
use super::oom_risk::OomRiskConfig;
use super::rank_gone::RankGoneConfig;
use super::shm_small::ShmSmallConfig;
use super::swap::SwapConfig;
use super::throttle::ThrottleConfig;
use super::throttle::THROTTLE_REASON_NAMES;
use super::training_stalled::TrainingStalledConfig;
use super::wrong_gpu::WrongGpuConfig;
use super::zombie_memory::ZombieMemoryConfig;

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
    pub(crate) rank_gone: RankGoneConfig,
    pub(crate) cgroup_memory: CgroupMemoryConfig,
    pub(crate) oom_killed: OomKilledConfig,
    pub(crate) shm_small: ShmSmallConfig,
    pub(crate) cpu_oversubscribed: CpuOversubscribedConfig,
}

impl RulesConfig {
    /// Checks value ranges; on failure, the full key and what is wrong with it.
    pub(crate) fn check(&self) -> Result<(), (String, String)> {
        // The kills are kept an hour, so the warning cannot be held longer.
        if self.oom_killed.hold_seconds.get() > 3600.0 {
            return Err((
                "rules.oom_killed.hold_seconds".to_string(),
                format!(
                    "must be between 0 and 3600 seconds (got {})",
                    self.oom_killed.hold_seconds.get()
                ),
            ));
        }
        if self.leak.min_samples < 2 {
            return Err((
                "rules.leak.min_samples".to_string(),
                format!("must be 2 or more (got {})", self.leak.min_samples),
            ));
        }
        if let Some(unknown) = self
            .throttle
            .reasons
            .iter()
            .find(|r| !THROTTLE_REASON_NAMES.contains(&r.as_str()))
        {
            return Err((
                "rules.throttle.reasons".to_string(),
                format!(
                    "has an unknown reason \"{unknown}\" (known: {})",
                    THROTTLE_REASON_NAMES.join(", ")
                ),
            ));
        }
        Ok(())
    }
}
