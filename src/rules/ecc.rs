//! `ecc`: a GPU's memory errors.
//!
//! Critical whenever the volatile uncorrected count is above 0 (data was corrupted since the
//! driver loaded; present from the start counts, not only a rise), or the GPU waits for a reset
//! to retire pages or remap rows, or a row remapping failed. A warning when the corrected count
//! rose within the window (the hardware fixed them, but a steady rise means failing memory).
//! Volatile counts restart at driver load; a fall is a reset, not a change.

use serde::{Deserialize, Serialize};

use crate::config::Seconds;
use crate::model::{GpuSample, GpuVendor, Severity, Subject, Warning};

use super::{counter_rise, fmt_opt, fmt_seconds, warning, GpuPoint, Inputs, Point};

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

pub(crate) const ID: &str = "ecc";

const REMEDY: &str = "Uncorrected errors corrupt results: stop the jobs on this GPU, check \
nvidia-smi -q -d ECC and the retired or remapped pages (nvidia-smi -q -d \
PAGE_RETIREMENT,ROW_REMAPPER), then reset the GPU or reboot (pending retirements and remappings \
take effect only then); if errors come back, have the GPU replaced. A few corrected errors are \
handled by the hardware, but a steady rise is a sign of failing memory.";

/// The same for an AMD GPU, with ROCm's tool.
const REMEDY_AMD: &str = "Uncorrected errors corrupt results: stop the jobs on this GPU, check \
amd-smi metric --ecc and the retired pages (amd-smi bad-pages), then reset the GPU (amd-smi reset \
--gpureset) or reboot; if errors come back, have the GPU replaced. A few corrected errors are \
handled by the hardware, but a steady rise is a sign of failing memory.";

pub(crate) fn check(inputs: &Inputs, config: &EccConfig) -> Vec<Warning> {
    inputs
        .gpus
        .iter()
        .filter_map(|(&index, window)| {
            let gpu = inputs.snapshot.gpu(index)?;
            errors(gpu, window.recent(config.window_seconds.get()), config)
        })
        .collect()
}

fn errors(gpu: &GpuSample, points: &[Point<GpuPoint>], config: &EccConfig) -> Option<Warning> {
    let index = gpu.index;
    let corrected = counter_rise(points, |g| g.ecc_corrected);
    let new_corrected = corrected.map_or(0, |(rise, _)| rise);
    let uncorrected = gpu.ecc_volatile_uncorrected.unwrap_or(0);
    let retire_pending = gpu.retired_pages_pending == Some(true);
    let remap_pending = gpu.remapped_rows_pending == Some(true);
    let remap_failed = gpu.remapped_rows_failed == Some(true);
    let mut parts = Vec::new();
    if uncorrected > 0 {
        parts.push(format!(
            "{uncorrected} uncorrected ECC error{} since the driver loaded",
            plural(uncorrected)
        ));
    }
    if retire_pending {
        parts.push("retired pages wait for a reset".to_string());
    }
    if remap_pending {
        parts.push("remapped rows wait for a reset".to_string());
    }
    if remap_failed {
        parts.push("a row remapping failed".to_string());
    }
    let critical = !parts.is_empty();
    if new_corrected > 0 {
        parts.push(format!(
            "{new_corrected} new corrected ECC error{} in the last {}",
            plural(new_corrected),
            fmt_seconds(config.window_seconds.get())
        ));
    }
    if parts.is_empty() {
        return None;
    }
    let severity = if critical {
        Severity::Critical
    } else {
        Severity::Warn
    };
    let message = format!("GPU {index} reports {}", parts.join("; "));
    let yes_no = |v: Option<bool>| fmt_opt(v.map(|b| if b { "yes" } else { "no" }));
    let evidence = vec![
        (
            "volatile uncorrected",
            fmt_opt(gpu.ecc_volatile_uncorrected),
        ),
        ("new corrected", new_corrected.to_string()),
        ("volatile corrected", fmt_opt(corrected.map(|(_, now)| now))),
        ("retired pages pending", yes_no(gpu.retired_pages_pending)),
        ("remapped rows pending", yes_no(gpu.remapped_rows_pending)),
        ("remapped rows failed", yes_no(gpu.remapped_rows_failed)),
    ];
    Some(warning(
        ID,
        severity,
        Subject::Gpu { index },
        message,
        evidence,
        match gpu.vendor {
            GpuVendor::Nvidia => REMEDY,
            GpuVendor::Amd => REMEDY_AMD,
        },
    ))
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{Severity, Snapshot, Subject};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    fn counts(corrected: fn(u32) -> u64, uncorrected: fn(u32) -> u64) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            let mut g = gpu(0, GIB, 80 * GIB, 50);
            g.ecc_enabled = Some(true);
            g.ecc_volatile_corrected = Some(corrected(step));
            g.ecc_volatile_uncorrected = Some(uncorrected(step));
            snap.gpus = vec![g];
            snap
        }
    }

    #[test]
    fn rising_corrected_errors_warn() {
        let warnings = replay_default(10, counts(|s| u64::from(s / 3), |_| 0));
        let w = find(&warnings, "ecc", &Subject::Gpu { index: 0 });
        assert_eq!(w.severity, Severity::Warn);
        assert_eq!(evidence(w, "new corrected"), "3");
        assert_eq!(evidence(w, "volatile corrected"), "3");
    }

    #[test]
    fn uncorrected_errors_present_from_the_start_are_critical_at_once() {
        let warnings = replay_default(0, counts(|_| 0, |_| 4));
        let w = find(&warnings, "ecc", &Subject::Gpu { index: 0 });
        assert_eq!(w.severity, Severity::Critical);
        assert!(
            w.message.contains("4 uncorrected ECC errors"),
            "{}",
            w.message
        );
        let later = replay_default(100, counts(|_| 7, |_| 1));
        assert_eq!(
            find(&later, "ecc", &Subject::Gpu { index: 0 }).severity,
            Severity::Critical
        );
    }

    #[test]
    fn the_remedy_names_the_vendor_s_own_tool() {
        let nvidia = replay_default(0, counts(|_| 0, |_| 1));
        let remedy = &find(&nvidia, "ecc", &Subject::Gpu { index: 0 }).remedy;
        assert!(remedy.contains("nvidia-smi -q -d ECC"), "{remedy}");
        let amd = replay_default(0, |step| {
            let mut snap = counts(|_| 0, |_| 1)(step);
            snap.gpus[0].vendor = crate::model::GpuVendor::Amd;
            snap
        });
        let remedy = &find(&amd, "ecc", &Subject::Gpu { index: 0 }).remedy;
        assert!(remedy.contains("amd-smi metric --ecc"), "{remedy}");
        assert!(!remedy.contains("nvidia"), "{remedy}");
    }

    #[test]
    fn pending_retirements_and_remappings_are_critical() {
        for pending in ["retired", "remapped"] {
            let warnings = replay_default(0, |step| {
                let mut snap = counts(|_| 0, |_| 0)(step);
                if pending == "retired" {
                    snap.gpus[0].retired_pages_pending = Some(true);
                } else {
                    snap.gpus[0].remapped_rows_pending = Some(true);
                }
                snap
            });
            let w = find(&warnings, "ecc", &Subject::Gpu { index: 0 });
            assert_eq!(w.severity, Severity::Critical, "{pending}");
            assert!(w.message.contains("wait for a reset"), "{}", w.message);
        }
    }

    #[test]
    fn steady_corrected_counts_and_a_reset_stay_silent() {
        let steady = replay_default(10, counts(|_| 7, |_| 0));
        assert!(with_id(&steady, "ecc").is_empty(), "{steady:#?}");
        let reset = replay_default(10, counts(|s| if s < 5 { 9 } else { 0 }, |_| 0));
        assert!(with_id(&reset, "ecc").is_empty(), "{reset:#?}");
    }

    #[test]
    fn an_old_rise_ages_out_of_a_shorter_window() {
        let old_rise = counts(|s| u64::from(s >= 2) * 4, |_| 0);
        assert_eq!(with_id(&replay_default(60, &old_rise), "ecc").len(), 1);
        let mut config = RulesConfig::default();
        config.ecc.window_seconds = crate::config::Seconds::new(30.0);
        assert!(with_id(&replay(config, 60, old_rise), "ecc").is_empty());
    }
}
