//! `ecc`: a GPU's volatile ECC error counts rising.
//!
//! Volatile counts restart at driver load; a fall is a reset, not a change. Any rise within the
//! window fires: uncorrected errors (data was corrupted) are critical, corrected ones a warning.

use crate::config::EccConfig;
use crate::model::{Severity, Subject, Warning};

use super::{counter_rise, fmt_opt, fmt_seconds, warning, GpuPoint, Inputs, Point};

pub(crate) const ID: &str = "ecc";

const REMEDY: &str = "Uncorrected errors corrupt results: stop the jobs on this GPU, check \
nvidia-smi -q -d ECC and the retired or remapped pages (nvidia-smi -q -d \
PAGE_RETIREMENT,ROW_REMAPPER), then reset the GPU or reboot; if errors come back, have the GPU \
replaced. A few corrected errors are handled by the hardware, but a steady rise is a sign of \
failing memory.";

pub(crate) fn check(inputs: &Inputs, config: &EccConfig) -> Vec<Warning> {
    inputs
        .gpus
        .iter()
        .filter_map(|(&index, window)| rising(index, window.recent(config.window_seconds), config))
        .collect()
}

fn rising(index: u32, points: &[Point<GpuPoint>], config: &EccConfig) -> Option<Warning> {
    let corrected = counter_rise(points, |g| g.ecc_corrected);
    let uncorrected = counter_rise(points, |g| g.ecc_uncorrected);
    let new_corrected = corrected.map_or(0, |(rise, _)| rise);
    let new_uncorrected = uncorrected.map_or(0, |(rise, _)| rise);
    if new_corrected == 0 && new_uncorrected == 0 {
        return None;
    }
    let severity = if new_uncorrected > 0 {
        Severity::Critical
    } else {
        Severity::Warn
    };
    let mut parts = Vec::new();
    if new_uncorrected > 0 {
        parts.push(format!("{new_uncorrected} new uncorrected"));
    }
    if new_corrected > 0 {
        parts.push(format!("{new_corrected} new corrected"));
    }
    let message = format!(
        "GPU {index} reported {} ECC error{} in the last {}",
        parts.join(" and "),
        if new_corrected + new_uncorrected == 1 {
            ""
        } else {
            "s"
        },
        fmt_seconds(config.window_seconds),
    );
    let evidence = vec![
        ("new uncorrected", new_uncorrected.to_string()),
        ("new corrected", new_corrected.to_string()),
        (
            "volatile uncorrected",
            fmt_opt(uncorrected.map(|(_, now)| now)),
        ),
        ("volatile corrected", fmt_opt(corrected.map(|(_, now)| now))),
    ];
    Some(warning(
        ID,
        severity,
        Subject::Gpu { index },
        message,
        evidence,
        REMEDY,
    ))
}

#[cfg(test)]
mod tests {
    use crate::config::RulesConfig;
    use crate::model::{Severity, Snapshot, Subject};
    use crate::rules::testkit::*;

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
    fn a_new_uncorrected_error_is_critical() {
        let warnings = replay_default(10, counts(|_| 5, |s| u64::from(s >= 8)));
        let w = find(&warnings, "ecc", &Subject::Gpu { index: 0 });
        assert_eq!(w.severity, Severity::Critical);
        assert!(
            w.message.contains("1 new uncorrected ECC error"),
            "{}",
            w.message
        );
    }

    #[test]
    fn steady_counts_and_a_reset_stay_silent() {
        let steady = replay_default(10, counts(|_| 7, |_| 1));
        assert!(with_id(&steady, "ecc").is_empty(), "{steady:#?}");
        let reset = replay_default(10, counts(|s| if s < 5 { 9 } else { 0 }, |_| 0));
        assert!(with_id(&reset, "ecc").is_empty(), "{reset:#?}");
    }

    #[test]
    fn an_old_rise_ages_out_of_a_shorter_window() {
        let old_rise = counts(|s| u64::from(s >= 2) * 4, |_| 0);
        assert_eq!(with_id(&replay_default(60, &old_rise), "ecc").len(), 1);
        let mut config = RulesConfig::default();
        config.ecc.window_seconds = 30.0;
        assert!(with_id(&replay(config, 60, old_rise), "ecc").is_empty());
    }
}
