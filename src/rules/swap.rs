//! `swap`: host memory pressure, which stalls DataLoader workers and the training process.
//!
//! Fires when swap in use grew by the minimum over a full window (and is in use now), or when
//! available RAM is below the configured share of total; critical when both hold. The message
//! always gives vm.swappiness, which the articles tell users to check.

use serde::{Deserialize, Serialize};

use crate::config::{Fraction, NonNegative, Seconds};
use crate::model::{Severity, Subject, VmSettings, Warning};

use super::{
    fmt_bytes, fmt_opt, fmt_opt_bytes, fmt_percent, fmt_seconds, warning, HostPoint, Inputs, Point,
    BYTES_PER_MIB,
};

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

pub(crate) const ID: &str = "swap";

const REMEDY: &str = "Use less host memory: fewer or lighter DataLoader workers (each holds its \
own copy of the dataset object), a smaller prefetch_factor, data loaded lazily or memory-mapped \
instead of held in lists; add RAM; lower vm.swappiness (e.g. sysctl vm.swappiness=10) so the \
kernel swaps training memory out less eagerly.";

pub(crate) fn check(inputs: &Inputs, config: &SwapConfig) -> Vec<Warning> {
    let window = inputs
        .host
        .covering(config.window_seconds.get())
        .unwrap_or(&[]);
    let latest = inputs.host.latest().map(|p| p.v);
    latest
        .and_then(|now| pressure(&now, window, &inputs.snapshot.host.vm, config))
        .into_iter()
        .collect()
}

fn pressure(
    now: &HostPoint,
    window: &[Point<HostPoint>],
    vm: &VmSettings,
    config: &SwapConfig,
) -> Option<Warning> {
    let growth = swap_growth(window).filter(|&g| {
        g > 0
            && g as f64 >= config.min_growth_mib.get() * BYTES_PER_MIB
            && now.swap_used_bytes.is_some_and(|u| u > 0)
    });
    let available_share = match (now.memory_available_bytes, now.memory_total_bytes) {
        (Some(available), Some(total)) if total > 0 => Some(available as f64 / total as f64),
        _ => None,
    };
    let low_ram = available_share.filter(|&s| s < config.available_fraction.get());
    let mut findings = Vec::new();
    if let Some(grown) = growth {
        findings.push(format!(
            "swap in use grew by {} to {} in {}",
            fmt_bytes(grown as f64),
            fmt_opt_bytes(now.swap_used_bytes),
            fmt_seconds(config.window_seconds.get()),
        ));
    }
    if let Some(share) = low_ram {
        findings.push(format!(
            "only {} of {} RAM is available ({})",
            fmt_opt_bytes(now.memory_available_bytes),
            fmt_opt_bytes(now.memory_total_bytes),
            fmt_percent(share * 100.0),
        ));
    }
    if findings.is_empty() {
        return None;
    }
    let severity = if growth.is_some() && low_ram.is_some() {
        Severity::Critical
    } else {
        Severity::Warn
    };
    let message = format!(
        "The host is short of memory: {}; vm.swappiness is {}",
        findings.join(", and "),
        fmt_opt(vm.swappiness),
    );
    let evidence = vec![
        ("swap used", fmt_opt_bytes(now.swap_used_bytes)),
        ("swap growth", fmt_opt_bytes(swap_growth(window))),
        ("available", fmt_opt_bytes(now.memory_available_bytes)),
        ("total", fmt_opt_bytes(now.memory_total_bytes)),
        (
            "available share",
            fmt_opt(available_share.map(|s| fmt_percent(s * 100.0))),
        ),
        ("vm.swappiness", fmt_opt(vm.swappiness)),
        ("vm.overcommit_memory", fmt_opt(vm.overcommit_memory)),
    ];
    Some(warning(
        ID,
        severity,
        Subject::Host,
        message,
        evidence,
        REMEDY,
    ))
}

/// Swap used now minus at the window's start, when both are known and it grew.
fn swap_growth(window: &[Point<HostPoint>]) -> Option<u64> {
    let first = window.iter().find_map(|p| p.v.swap_used_bytes)?;
    let last = window.iter().rev().find_map(|p| p.v.swap_used_bytes)?;
    Some(last.saturating_sub(first))
}

#[cfg(test)]
mod tests {
    use crate::model::{Severity, Snapshot, Subject};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    fn host(swap: impl Fn(u32) -> u64 + Copy, available: u64) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            snap.host.memory.total_bytes = Some(64 * GIB);
            snap.host.memory.available_bytes = Some(available);
            snap.host.swap.total_bytes = Some(8 * GIB);
            snap.host.swap.used_bytes = Some(swap(step));
            snap.host.vm.swappiness = Some(60);
            snap
        }
    }

    #[test]
    fn growing_swap_fires_and_names_swappiness() {
        let warnings = replay_default(60, host(|s| GIB + u64::from(s) * 4 * MIB, 20 * GIB));
        let w = find(&warnings, "swap", &Subject::Host);
        assert_eq!(w.severity, Severity::Warn);
        assert!(w.message.contains("grew by 240.0MiB"), "{}", w.message);
        assert!(w.message.contains("vm.swappiness is 60"), "{}", w.message);
        assert_eq!(evidence(w, "vm.swappiness"), "60");
        assert!(w.remedy.contains("vm.swappiness"));
    }

    #[test]
    fn low_available_ram_fires_at_once_and_both_together_are_critical() {
        let low = replay_default(0, host(|_| 0, 3 * GIB));
        let w = find(&low, "swap", &Subject::Host);
        assert!(
            w.message
                .contains("only 3.0GiB of 64.0GiB RAM is available (5%)"),
            "{}",
            w.message
        );
        let both = replay_default(60, host(|s| GIB + u64::from(s) * 4 * MIB, 3 * GIB));
        assert_eq!(
            find(&both, "swap", &Subject::Host).severity,
            Severity::Critical
        );
    }

    #[test]
    fn steady_swap_and_plenty_of_ram_stay_silent() {
        let warnings = replay_default(120, host(|_| 2 * GIB, 30 * GIB));
        assert!(with_id(&warnings, "swap").is_empty(), "{warnings:#?}");
        let unknown = replay_default(5, at);
        assert!(with_id(&unknown, "swap").is_empty(), "{unknown:#?}");
    }

    #[test]
    fn a_higher_available_share_fires_where_the_default_does_not() {
        let tight = host(|_| 0, 10 * GIB);
        assert!(with_id(&replay_default(0, &tight), "swap").is_empty());
        let mut config = RulesConfig::default();
        config.swap.available_fraction = crate::config::Fraction::new(0.2);
        assert_eq!(with_id(&replay(config, 0, tight), "swap").len(), 1);
    }
}
