//! The range checks toml cannot express: fractions in 0..=1, windows of at most a day, and
//! the other bounds each rule needs, each failure naming its full key.

use super::{RulesConfig, THROTTLE_REASON_NAMES};

/// The longest rule window, in seconds: a day. Longer windows would only thin the history.
pub(crate) const MAX_WINDOW_SECONDS: f64 = 86_400.0;

impl RulesConfig {
    /// Checks value ranges; on failure, the full key and what is wrong with it.
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        let fractions = [
            ("oom_risk.memory_fraction", self.oom_risk.memory_fraction),
            (
                "fragmentation.inactive_split_fraction",
                self.fragmentation.inactive_split_fraction,
            ),
            (
                "leak.min_rising_steps_fraction",
                self.leak.min_rising_steps_fraction,
            ),
            (
                "leak.max_single_step_fraction",
                self.leak.max_single_step_fraction,
            ),
            (
                "imbalance.memory_spread_fraction",
                self.imbalance.memory_spread_fraction,
            ),
            ("swap.available_fraction", self.swap.available_fraction),
        ];
        for (key, value) in fractions {
            if !(0.0..=1.0).contains(&value) {
                return Err(bad(key, value, "must be a fraction from 0 to 1"));
            }
        }
        let percents = [
            (
                "gpu_starved.max_utilization_percent",
                self.gpu_starved.max_utilization_percent,
            ),
            (
                "imbalance.utilization_spread_percent",
                self.imbalance.utilization_spread_percent,
            ),
            (
                "throttle.min_utilization_percent",
                self.throttle.min_utilization_percent,
            ),
            (
                "gpu_starved.host_busy_percent",
                self.gpu_starved.host_busy_percent,
            ),
        ];
        for (key, value) in percents {
            if !(0.0..=100.0).contains(&value) {
                return Err(bad(key, value, "must be a percentage from 0 to 100"));
            }
        }
        let windows = [
            (
                "oom_risk.oom_window_seconds",
                self.oom_risk.oom_window_seconds,
            ),
            (
                "fragmentation.retries_window_seconds",
                self.fragmentation.retries_window_seconds,
            ),
            ("leak.window_seconds", self.leak.window_seconds),
            (
                "gpu_starved.window_seconds",
                self.gpu_starved.window_seconds,
            ),
            ("imbalance.window_seconds", self.imbalance.window_seconds),
            ("swap.window_seconds", self.swap.window_seconds),
            ("zombie_memory.min_seconds", self.zombie_memory.min_seconds),
            ("ecc.window_seconds", self.ecc.window_seconds),
            (
                "health.unresponsive_seconds",
                self.health.unresponsive_seconds,
            ),
            (
                "training_stalled.min_seconds",
                self.training_stalled.min_seconds,
            ),
        ];
        for (key, value) in windows {
            if !(0.0..=MAX_WINDOW_SECONDS).contains(&value) {
                return Err(bad(key, value, "must be between 0 and 86400 seconds"));
            }
        }
        let non_negative = [
            (
                "fragmentation.min_inactive_split_mib",
                self.fragmentation.min_inactive_split_mib,
            ),
            ("leak.min_rise_mib", self.leak.min_rise_mib),
            ("leak.max_fallback_mib", self.leak.max_fallback_mib),
            (
                "gpu_starved.min_memory_mib",
                self.gpu_starved.min_memory_mib,
            ),
            (
                "gpu_starved.worker_busy_percent",
                self.gpu_starved.worker_busy_percent,
            ),
            (
                "gpu_starved.main_busy_percent",
                self.gpu_starved.main_busy_percent,
            ),
            (
                "imbalance.min_memory_spread_mib",
                self.imbalance.min_memory_spread_mib,
            ),
            ("swap.min_growth_mib", self.swap.min_growth_mib),
            ("wrong_gpu.min_memory_mib", self.wrong_gpu.min_memory_mib),
            (
                "training_stalled.step_time_factor",
                self.training_stalled.step_time_factor,
            ),
        ];
        for (key, value) in non_negative {
            if !value.is_finite() || value < 0.0 {
                return Err(bad(key, value, "must be a number of 0 or more"));
            }
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

fn bad(key: &str, value: f64, rule: &str) -> (String, String) {
    // 1e308 would otherwise be written out in 309 digits.
    let shown = if value.abs() >= 1e9 {
        format!("{value:e}")
    } else {
        value.to_string()
    };
    (format!("rules.{key}"), format!("{rule} (got {shown})"))
}
