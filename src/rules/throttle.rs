//! `throttle`: a GPU under load whose clocks are held down by power or heat.
//!
//! Reads `GpuSample::throttle_reasons`, whose names the NVML collector produces exactly as:
//! `sw_power_cap` (the board reached its power limit), `hw_slowdown` (hardware slowdown, heat or
//! power), `hw_thermal_slowdown`, `hw_power_brake_slowdown` (an external power brake) and
//! `sw_thermal_slowdown` (the driver cooling the GPU). Only the configured reasons count, and
//! only while utilization reaches the load threshold. A power cap alone is `info` (common and
//! often intended); any slowdown is `warn`.

use serde::{Deserialize, Serialize};

use crate::config::Percent;
use std::fmt;

use crate::model::{GpuSample, Severity};

use super::slots::{Na, Show, Slots, SubjectRef};
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

pub(crate) const ID: &str = "throttle";

const REMEDY: &str = "For heat (thermal or hw slowdown): check cooling, airflow, fans, dust and \
the inlet temperature, and nvidia-smi -q -d TEMPERATURE,PERFORMANCE. For power (sw_power_cap): \
the board is at its power limit; check nvidia-smi -q -d POWER and, if the power supply allows, \
raise the limit within the board's maximum (nvidia-smi -pl), or accept the clocks. \
hw_power_brake_slowdown means the system's power brake fired: check the power supply.";

/// Adds a warning for each GPU under load held down by a counted reason, written in place
/// (see [`Slots`]): its figures change from tick to tick, its room does not.
pub(crate) fn check(inputs: &Inputs, config: &ThrottleConfig, found: &mut Slots) {
    for gpu in &inputs.snapshot.gpus {
        throttled(gpu, config, found);
    }
}

fn throttled(gpu: &GpuSample, config: &ThrottleConfig, found: &mut Slots) -> Option<()> {
    let utilization = gpu.utilization_percent?;
    if f64::from(utilization) < config.min_utilization_percent.get() {
        return None;
    }
    let reasons = gpu.throttle_reasons.as_ref()?;
    // Iterated, not collected: a GPU under load without a counted reason costs no allocation.
    let active =
        || (reasons.iter().map(String::as_str)).filter(|r| config.reasons.iter().any(|c| c == r));
    // No counted reason: no warning.
    active().next()?;
    let severity = if active().all(|r| r == "sw_power_cap") {
        Severity::Info
    } else {
        Severity::Warn
    };
    let active_text = Show(|f: &mut fmt::Formatter| {
        for (i, reason) in active().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(reason)?;
        }
        Ok(())
    });
    let temperature = gpu
        .temperature_c
        .map(|t| Show(move |f: &mut fmt::Formatter| write!(f, "{t} °C")));
    let power = match (gpu.power_w, gpu.power_limit_w) {
        (Some(p), Some(l)) => Some(Power(p, Some(l))),
        (Some(p), None) => Some(Power(p, None)),
        _ => None,
    };
    let details = Show(|f: &mut fmt::Formatter| {
        if let Some(t) = &temperature {
            write!(f, ", {t}")?;
        }
        if let Some(p) = &power {
            write!(f, ", {p}")?;
        }
        Ok(())
    });
    let subject = SubjectRef::Gpu(gpu.index);
    let mut warning = found.write(ID, severity, subject, REMEDY);
    warning.message(format_args!(
        "GPU {}'s clocks are held down by {active_text} ({utilization}% utilization{details})",
        gpu.index
    ));
    warning.row("reasons", format_args!("{active_text}"));
    warning.row("utilization", format_args!("{utilization}%"));
    warning.row("temperature", format_args!("{}", Na(temperature)));
    warning.row("power", format_args!("{}", Na(power)));
    let sm_clock = gpu
        .sm_clock_mhz
        .map(|c| Show(move |f: &mut fmt::Formatter| write!(f, "{c} MHz")));
    warning.row("sm clock", format_args!("{}", Na(sm_clock)));
    let fan = gpu
        .fan_percent
        .map(|p| Show(move |f: &mut fmt::Formatter| write!(f, "{p}%")));
    warning.row("fan", format_args!("{}", Na(fan)));
    Some(())
}

/// "300/300 W", or "300 W" without a limit.
struct Power(f64, Option<f64>);

impl fmt::Display for Power {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(limit) => write!(f, "{:.0}/{limit:.0} W", self.0),
            None => write!(f, "{:.0} W", self.0),
        }
    }
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

    #[test]
    fn thermal_slowdown_under_load_warns_with_temperature_and_power() {
        let warnings = replay_default(0, |_| hot(&["hw_thermal_slowdown", "sw_power_cap"], 98));
        let w = find(&warnings, "throttle", &Subject::Gpu { index: 2 });
        assert_eq!(w.severity, Severity::Warn);
        assert_eq!(evidence(w, "reasons"), "hw_thermal_slowdown, sw_power_cap");
        assert_eq!(evidence(w, "temperature"), "89 °C");
        assert_eq!(evidence(w, "power"), "300/300 W");
        assert!(w.remedy.contains("cooling"));
    }

    #[test]
    fn a_power_cap_alone_is_info() {
        let warnings = replay_default(0, |_| hot(&["sw_power_cap"], 98));
        assert_eq!(
            find(&warnings, "throttle", &Subject::Gpu { index: 2 }).severity,
            Severity::Info
        );
    }

    #[test]
    fn an_idle_gpu_or_no_reasons_stay_silent() {
        assert!(with_id(
            &replay_default(0, |_| hot(&["hw_slowdown"], 10)),
            "throttle"
        )
        .is_empty());
        assert!(with_id(&replay_default(0, |_| hot(&[], 99)), "throttle").is_empty());
        let mut unknown = hot(&["hw_slowdown"], 99);
        unknown.gpus[0].utilization_percent = None;
        assert!(with_id(&replay_default(0, |_| unknown.clone()), "throttle").is_empty());
    }

    #[test]
    fn reasons_left_out_of_the_config_do_not_count() {
        let mut config = RulesConfig::default();
        config.throttle.reasons = vec!["hw_thermal_slowdown".into()];
        let warnings = replay(config, 0, |_| hot(&["sw_power_cap"], 98));
        assert!(with_id(&warnings, "throttle").is_empty(), "{warnings:#?}");
    }

    #[test]
    fn a_lower_load_threshold_fires_where_the_default_does_not() {
        assert!(with_id(
            &replay_default(0, |_| hot(&["hw_slowdown"], 30)),
            "throttle"
        )
        .is_empty());
        let mut config = RulesConfig::default();
        config.throttle.min_utilization_percent = crate::config::Percent::new(20.0);
        assert_eq!(
            with_id(
                &replay(config, 0, |_| hot(&["hw_slowdown"], 30)),
                "throttle"
            )
            .len(),
            1
        );
    }
}
