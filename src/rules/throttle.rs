//! `throttle`: a GPU under load whose clocks are held down by power or heat.
//!
//! Reads `GpuSample::throttle_reasons`, whose names the NVML collector produces exactly as:
//! `sw_power_cap` (the board reached its power limit), `hw_slowdown` (hardware slowdown, heat or
//! power), `hw_thermal_slowdown`, `hw_power_brake_slowdown` (an external power brake) and
//! `sw_thermal_slowdown` (the driver cooling the GPU). Only the configured reasons count, and
//! only in samples whose utilization reaches the load threshold. A power-capped GPU at full
//! load goes in and out of its cap every second or two, and a GPU near the load threshold in
//! and out of load: judged on each sample alone, the warning came and went every tick, its
//! "since" with it. So it is judged on a window: the GPU was under load in at least half of
//! it, and held down in `min_share_percent` (a quarter) of those samples. A power cap alone is `info`
//! (common and often intended); any slowdown in the window is `warn`.
//!
//! A window is judged only once it holds [`MIN_SAMPLES`] (3) samples spanning at least half of
//! `window_seconds` (15 s of the default 30): `torchtop --once` has a single sample, and told
//! of sustained throttling "in 1 of 1 samples". The monitor warns from 15 s after it starts.

use serde::{Deserialize, Serialize};

use crate::config::{Percent, Seconds};
use std::fmt;

use crate::format::shown;
use crate::model::{GpuSample, Severity};

use super::slots::{Show, Slots, SubjectRef};
use super::window::{GpuPoint, Point};
use super::Inputs;

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
    /// The window judged. Default 30.
    pub(crate) window_seconds: Seconds,
    /// The share of the window's samples under load that a counted reason held down. Default 25.
    pub(crate) min_share_percent: Percent,
}

/// The bit of each of [`THROTTLE_REASON_NAMES`] in [`GpuPoint::throttle`]; unknown names none.
pub(crate) fn reason_bits<'a>(reasons: impl IntoIterator<Item = &'a String>) -> u8 {
    reasons
        .into_iter()
        .filter_map(|r| THROTTLE_REASON_NAMES.iter().position(|n| n == r))
        .fold(0, |bits, at| bits | 1 << at)
}

/// The bit of `sw_power_cap`, the one reason that is only `info`.
const POWER_CAP_BIT: u8 = 1;

/// The fewest samples a window needs before it is judged: a sustained hold is not seen in one.
const MIN_SAMPLES: usize = 3;

/// The share of `window_seconds` those samples must span, for the same reason: at a fast
/// refresh three samples are a fraction of a second.
const MIN_SPAN_SHARE: f64 = 0.5;

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            enabled: true,
            min_utilization_percent: Percent::new(50.0),
            reasons: THROTTLE_REASON_NAMES
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            window_seconds: Seconds::new(30.0),
            min_share_percent: Percent::new(25.0),
        }
    }
}

pub(crate) const ID: &str = "throttle";

const REMEDY: &str = "For heat (thermal or hw slowdown): check cooling, airflow, fans, dust and \
the inlet temperature, and nvidia-smi -q -d TEMPERATURE,PERFORMANCE. For power (sw_power_cap): \
the board is at its power limit; check nvidia-smi -q -d POWER and, if the power supply allows, \
raise the limit within the board's maximum (nvidia-smi -pl), or accept the clocks. \
hw_power_brake_slowdown means the system's power brake fired: check the power supply.";

/// Adds a warning for each GPU held down under load over the window, written in place (see
/// [`Slots`]): its figures change from tick to tick, its room does not.
pub(crate) fn check(inputs: &Inputs, config: &ThrottleConfig, found: &mut Slots) {
    let counted = reason_bits(&config.reasons);
    for gpu in &inputs.snapshot.gpus {
        let Some(window) = inputs.gpus.get(&gpu.index) else {
            continue;
        };
        let recent = window.recent(config.window_seconds.get());
        if let Some(held) = held_down(recent, config, counted) {
            warn(gpu, &held, config, found);
        }
    }
}

/// What a window says of a GPU's clocks: samples under load, those held down by a counted
/// reason, and which reasons held them.
struct HeldDown {
    loaded: usize,
    held: usize,
    reasons: u8,
}

fn held_down(recent: &[Point<GpuPoint>], config: &ThrottleConfig, counted: u8) -> Option<HeldDown> {
    if !long_enough(recent, config) {
        return None;
    }
    let threshold = config.min_utilization_percent.get();
    let loaded = || {
        recent.iter().filter(|p| {
            p.v.utilization_percent
                .is_some_and(|u| f64::from(u) >= threshold)
        })
    };
    let held = || loaded().filter(|p| p.v.throttle & counted != 0);
    let summary = HeldDown {
        loaded: loaded().count(),
        held: held().count(),
        reasons: held().fold(0, |bits, p| bits | (p.v.throttle & counted)),
    };
    let share = config.min_share_percent.get() / 100.0;
    let enough = summary.held > 0
        && 2 * summary.loaded >= recent.len()
        && summary.held as f64 >= share * summary.loaded as f64;
    enough.then_some(summary)
}

/// Whether `recent` holds enough samples, over enough of the window, to tell a sustained hold.
fn long_enough(recent: &[Point<GpuPoint>], config: &ThrottleConfig) -> bool {
    let span = match (recent.first(), recent.last()) {
        (Some(first), Some(last)) => last.t - first.t,
        _ => return false,
    };
    recent.len() >= MIN_SAMPLES && span >= MIN_SPAN_SHARE * config.window_seconds.get()
}

fn warn(gpu: &GpuSample, held: &HeldDown, config: &ThrottleConfig, found: &mut Slots) {
    let severity = if held.reasons == POWER_CAP_BIT {
        Severity::Info
    } else {
        Severity::Warn
    };
    let reasons = Show(|f: &mut fmt::Formatter| {
        let named = THROTTLE_REASON_NAMES.iter().enumerate();
        let mut held_by = named.filter(|(at, _)| held.reasons & 1 << at != 0);
        if let Some((_, first)) = held_by.next() {
            f.write_str(first)?;
        }
        held_by.try_for_each(|(_, name)| write!(f, ", {name}"))
    });
    // Every figure as the GPU panel writes it: "64C", "412/700W", "1755MHz".
    let utilization = shown::percent(gpu.utilization_percent);
    let temperature = gpu.temperature_c.map(|t| shown::celsius(Some(t)));
    let power = (gpu.power_w).map(|p| shown::power_of_limit(Some(p), gpu.power_limit_w));
    let details = Show(|f: &mut fmt::Formatter| {
        if let Some(t) = &temperature {
            write!(f, ", {t}")?;
        }
        if let Some(p) = &power {
            write!(f, ", {p}")?;
        }
        Ok(())
    });
    let window = shown::span(config.window_seconds.get());
    let subject = SubjectRef::Gpu(gpu.index);
    let mut warning = found.write(ID, severity, subject, REMEDY);
    warning.message(format_args!(
        "GPU {}'s clocks are held down by {reasons} in {} of {} samples under load in the last \
         {window} ({utilization} utilization now{details})",
        gpu.index, held.held, held.loaded
    ));
    warning.row("reasons", format_args!("{reasons}"));
    warning.row(
        "held down",
        format_args!(
            "{} of {} samples under load in {window}",
            held.held, held.loaded
        ),
    );
    warning.row("utilization", format_args!("{utilization}"));
    warning.row(
        "temperature",
        format_args!("{}", shown::celsius(gpu.temperature_c)),
    );
    warning.row(
        "power",
        format_args!("{}", shown::power_of_limit(gpu.power_w, gpu.power_limit_w)),
    );
    warning.row("sm clock", format_args!("{}", shown::mhz(gpu.sm_clock_mhz)));
    warning.row("fan", format_args!("{}", shown::percent(gpu.fan_percent)));
}

#[cfg(test)]
mod tests {
    use crate::model::{Severity, Snapshot, Subject};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    fn hot(reasons: &[&str], utilization: u32) -> Snapshot {
        let mut snap = at(0);
        let mut g = gpu(2, 10 * GIB, 80 * GIB, utilization);
        g.temperature_c = Some(89);
        g.power_w = Some(300.0);
        g.power_limit_w = Some(300.0);
        g.throttle_reasons = Some(
            reasons
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        );
        snap.gpus = vec![g];
        snap
    }

    /// Seconds of one sample a second that [`super::long_enough`] judges: half the default
    /// window.
    const WATCHED: u32 = 15;

    /// `hot` at second `t`.
    fn hot_at(t: u32, reasons: &[&str], utilization: u32) -> Snapshot {
        let mut snapshot = hot(reasons, utilization);
        snapshot.unix_seconds = at(t).unix_seconds;
        snapshot
    }

    #[test]
    fn thermal_slowdown_under_load_warns_with_temperature_and_power() {
        let warnings = replay_default(WATCHED, |t| {
            hot_at(t, &["hw_thermal_slowdown", "sw_power_cap"], 98)
        });
        let w = find(&warnings, "throttle", &Subject::Gpu { index: 2 });
        assert_eq!(w.severity, Severity::Warn);
        assert_eq!(evidence(w, "reasons"), "sw_power_cap, hw_thermal_slowdown");
        assert_eq!(evidence(w, "temperature"), "89C");
        assert_eq!(evidence(w, "power"), "300/300W");
        assert!(w.remedy.contains("cooling"));
    }

    /// A review: the message said "(87% utilization now, 64 °C, 412/700 W)" and the evidence
    /// "1755 MHz" where the GPU panel writes 64C, 412/700W and 1755MHz.
    #[test]
    fn figures_are_written_as_the_gpu_panel_writes_them() {
        let warnings = replay_default(WATCHED, |t| {
            let mut snapshot = hot_at(t, &["hw_thermal_slowdown"], 87);
            let gpu = &mut snapshot.gpus[0];
            (gpu.temperature_c, gpu.power_w) = (Some(64), Some(412.0));
            (gpu.power_limit_w, gpu.sm_clock_mhz) = (Some(700.0), Some(1755));
            snapshot
        });
        let w = find(&warnings, "throttle", &Subject::Gpu { index: 2 });
        assert!(
            w.message
                .ends_with("in the last 30 s (87% utilization now, 64C, 412/700W)"),
            "{}",
            w.message
        );
        assert_eq!(evidence(w, "temperature"), "64C");
        assert_eq!(evidence(w, "power"), "412/700W");
        assert_eq!(evidence(w, "sm clock"), "1755MHz");
        assert_eq!(evidence(w, "utilization"), "87%");
    }

    /// A user's review: `torchtop --once` warned of throttling "in 1 of 1 samples ... in the
    /// last 30 s". One sample, or three in a fraction of the window, are not a sustained hold.
    #[test]
    fn a_single_sample_or_a_short_watch_stays_silent() {
        let held = |t: u32| hot_at(t, &["hw_thermal_slowdown"], 98);
        assert!(with_id(&replay_default(0, held), "throttle").is_empty());
        let before = replay_default(WATCHED - 1, held);
        assert!(with_id(&before, "throttle").is_empty(), "{before:#?}");
        let mut engine = crate::rules::Engine::new(RulesConfig::default());
        let fast = |tenths: u32| {
            let mut snapshot = held(0);
            snapshot.unix_seconds += f64::from(tenths) / 10.0;
            snapshot
        };
        let mut warnings = Vec::new();
        for tenths in 0..10 {
            warnings = engine.evaluate(&fast(tenths));
        }
        assert!(with_id(&warnings, "throttle").is_empty(), "{warnings:#?}");
        let watched = replay_default(WATCHED, held);
        let w = find(&watched, "throttle", &Subject::Gpu { index: 2 });
        assert_eq!(
            evidence(w, "held down"),
            "16 of 16 samples under load in 30 s"
        );
    }

    #[test]
    fn a_power_cap_alone_is_info() {
        let warnings = replay_default(WATCHED, |t| hot_at(t, &["sw_power_cap"], 98));
        assert_eq!(
            find(&warnings, "throttle", &Subject::Gpu { index: 2 }).severity,
            Severity::Info
        );
    }

    #[test]
    fn an_idle_gpu_or_no_reasons_stay_silent() {
        assert!(with_id(
            &replay_default(WATCHED, |t| hot_at(t, &["hw_slowdown"], 10)),
            "throttle"
        )
        .is_empty());
        assert!(with_id(&replay_default(WATCHED, |t| hot_at(t, &[], 99)), "throttle").is_empty());
        let unknown = |t: u32| {
            let mut snapshot = hot_at(t, &["hw_slowdown"], 99);
            snapshot.gpus[0].utilization_percent = None;
            snapshot
        };
        assert!(with_id(&replay_default(WATCHED, unknown), "throttle").is_empty());
    }

    #[test]
    fn reasons_left_out_of_the_config_do_not_count() {
        let mut config = RulesConfig::default();
        config.throttle.reasons = vec!["hw_thermal_slowdown".into()];
        let warnings = replay(config, WATCHED, |t| hot_at(t, &["sw_power_cap"], 98));
        assert!(with_id(&warnings, "throttle").is_empty(), "{warnings:#?}");
    }

    /// A power-capped GPU at full load goes in and out of its cap: the warning came and went
    /// with every sample, and its "since" was new each time.
    #[test]
    fn a_gpu_in_and_out_of_its_cap_has_one_steady_warning() {
        let flapping = |t: u32| {
            if t % 2 == 0 {
                hot_at(t, &["sw_power_cap"], 97)
            } else {
                hot_at(t, &[], 97)
            }
        };
        let mut engine = crate::rules::Engine::new(RulesConfig::default());
        let mut since = Vec::new();
        for t in 0..60 {
            let warnings = engine.evaluate(&flapping(t));
            if t < WATCHED {
                continue;
            }
            let throttle = with_id(&warnings, "throttle");
            assert_eq!(throttle.len(), 1, "second {t}: {warnings:#?}");
            since.push(throttle[0].since.clone());
        }
        since.dedup();
        assert_eq!(since.len(), 1, "the warning started again: {since:?}");
    }

    /// A GPU held down now and then (a few samples of a window) is not held down.
    #[test]
    fn a_reason_in_a_few_samples_of_the_window_stays_silent() {
        let now_and_then = |t: u32| {
            if t % 5 == 4 {
                hot_at(t, &["hw_slowdown"], 97)
            } else {
                hot_at(t, &[], 97)
            }
        };
        assert!(with_id(&replay_default(40, now_and_then), "throttle").is_empty());
    }

    /// Thermal slowdown held while utilization wanders around the load threshold: samples
    /// below it do not count, and the warning stays.
    #[test]
    fn thermal_slowdown_near_the_load_threshold_stays_up() {
        let wandering =
            |t: u32| hot_at(t, &["sw_thermal_slowdown"], [60, 40, 65][(t % 3) as usize]);
        let mut engine = crate::rules::Engine::new(RulesConfig::default());
        for t in 0..40 {
            let warnings = engine.evaluate(&wandering(t));
            if t < WATCHED {
                continue;
            }
            let w = find(&warnings, "throttle", &Subject::Gpu { index: 2 });
            assert_eq!(w.severity, Severity::Warn, "second {t}");
        }
    }

    #[test]
    fn a_lower_load_threshold_fires_where_the_default_does_not() {
        assert!(with_id(
            &replay_default(WATCHED, |t| hot_at(t, &["hw_slowdown"], 30)),
            "throttle"
        )
        .is_empty());
        let mut config = RulesConfig::default();
        config.throttle.min_utilization_percent = crate::config::Percent::new(20.0);
        assert_eq!(
            with_id(
                &replay(config, WATCHED, |t| hot_at(t, &["hw_slowdown"], 30)),
                "throttle"
            )
            .len(),
            1
        );
    }
}
