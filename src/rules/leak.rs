//! `leak`: a process's memory that keeps rising as a trend and never falls back.
//!
//! The series is the allocator's `allocated_bytes` per torch device where an agent reports it,
//! else NVML's memory for the (process, GPU) pair; the evidence says which. Over a full window
//! it fires only when every test of a trend holds: enough samples, a total rise above the
//! minimum, a positive least-squares slope, most steps not falling, no step falling (and the
//! series never dropping below its start) by more than the tolerance, and no single step
//! carrying most of the rise. So one jump, a saw-tooth or a plateau stay quiet.

use serde::{Deserialize, Serialize};

use crate::config::{Fraction, NonNegative, Seconds};
use crate::model::{Severity, Subject, Warning};

use super::{
    covering, fmt_bytes, fmt_percent, fmt_seconds, warning, AllocPoint, Inputs, Point, ProcPoint,
    BYTES_PER_MIB,
};

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

pub(crate) const ID: &str = "leak";

const REMEDY: &str = "Record the allocator's history \
(torch.cuda.memory._record_memory_history(max_entries=100000)), take a memory snapshot (the `s` \
key, or torch.cuda.memory._dump_snapshot) and look at the stacks whose allocations keep growing. \
Usual causes: tensors kept across steps with their graphs (total_loss += loss instead of \
loss.item()), lists of outputs or metrics that only grow, caches keyed by input.";

/// Without an agent the series is NVML's figure, the caching allocator's reserved memory,
/// which never falls: a cache still growing to fit new shapes rises the same way.
const NVML_REMEDY: &str = "Without an agent this is NVML's figure, which includes PyTorch's \
cache: reserved memory that is never given back, so a cache still growing to fit new batch \
shapes looks the same as a leak. Attach the agent (torchtop attach PID) to see allocated \
memory apart from the cache; if allocated memory keeps rising too, record the allocator's \
history (torch.cuda.memory._record_memory_history(max_entries=100000)) and take a snapshot \
(the `s` key) to see which stacks keep allocating.";

/// What the trend tests measured on a series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Trend {
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) span_seconds: f64,
    pub(crate) slope_per_second: f64,
    pub(crate) samples: usize,
    pub(crate) non_falling_steps: f64,
}

/// Where the series came from, for the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Allocator { device: u32 },
    Nvml { gpu: u32 },
}

pub(crate) fn check(inputs: &Inputs, config: &LeakConfig) -> Vec<Warning> {
    let mut found = Vec::new();
    for ((pid, device), points) in covering(inputs.allocators, config.window_seconds.get()) {
        let value = |a: &AllocPoint| a.allocated_bytes;
        if !rises_enough(points, value, config) {
            continue;
        }
        let series = known(points, value);
        found.extend(leaking(pid, Source::Allocator { device }, &series, config));
    }
    for ((pid, gpu), points) in covering(inputs.processes, config.window_seconds.get()) {
        // A range of the ordered map, not a scan of it: this runs once per GPU process.
        let has_agent = (inputs.allocators.range((pid, 0)..=(pid, u32::MAX)).next()).is_some();
        if has_agent {
            continue;
        }
        let value = |p: &ProcPoint| p.gpu_memory_bytes;
        if !rises_enough(points, value, config) {
            continue;
        }
        let series = known(points, value);
        found.extend(leaking(pid, Source::Nvml { gpu }, &series, config));
    }
    found
}

/// Whether the known values of `points` rise from the first to the last by at least the
/// configured rise, over enough samples: [`rising_trend`]'s first tests, taken without
/// copying the series, so that the processes whose memory holds steady (nearly all, each
/// tick) cost no allocation. The rise is read from the two ends first and the known values
/// counted only when it is enough, so that a steady process's window is read at its ends, not
/// through all its pages.
fn rises_enough<T>(
    points: &[Point<T>],
    value: impl Fn(&T) -> Option<u64>,
    config: &LeakConfig,
) -> bool {
    let first = points.iter().find_map(|p| value(&p.v));
    let last = points.iter().rev().find_map(|p| value(&p.v));
    let (Some(first), Some(last)) = (first, last) else {
        return false;
    };
    let rise = last as f64 - first as f64;
    if rise <= 0.0 || rise < config.min_rise_mib.get() * BYTES_PER_MIB {
        return false;
    }
    let needed = (config.min_samples as usize).max(2);
    points
        .iter()
        .filter_map(|p| value(&p.v))
        .take(needed)
        .count()
        >= needed
}

/// The (time, bytes) pairs where the value is known; gaps are skipped, not read as zero.
fn known<T>(points: &[Point<T>], value: impl Fn(&T) -> Option<u64>) -> Vec<(f64, f64)> {
    points
        .iter()
        .filter_map(|p| value(&p.v).map(|b| (p.t, b as f64)))
        .collect()
}

fn leaking(
    pid: u32,
    source: Source,
    series: &[(f64, f64)],
    config: &LeakConfig,
) -> Option<Warning> {
    let trend = rising_trend(series, config)?;
    let rise = trend.end - trend.start;
    let per_minute = trend.slope_per_second * 60.0;
    let (what, where_, source_text) = match source {
        Source::Allocator { device } => (
            "allocated memory",
            format!("cuda:{device}"),
            "torch allocated_bytes (agent)".to_string(),
        ),
        Source::Nvml { gpu } => (
            "GPU memory",
            format!("GPU {gpu}"),
            "NVML process memory (no agent)".to_string(),
        ),
    };
    let message = format!(
        "pid {pid}'s {what} on {where_} rose {} in {} ({}/min) without falling back",
        fmt_bytes(rise),
        fmt_seconds(trend.span_seconds),
        fmt_bytes(per_minute),
    );
    let evidence = vec![
        ("source", source_text),
        ("on", where_),
        ("window start", fmt_bytes(trend.start)),
        ("now", fmt_bytes(trend.end)),
        ("rise", fmt_bytes(rise)),
        ("rate", format!("{}/min", fmt_bytes(per_minute))),
        ("samples", trend.samples.to_string()),
        (
            "steps not falling",
            fmt_percent(trend.non_falling_steps * 100.0),
        ),
    ];
    let remedy = match source {
        Source::Allocator { .. } => REMEDY,
        Source::Nvml { .. } => NVML_REMEDY,
    };
    Some(warning(
        ID,
        Severity::Warn,
        Subject::Process { pid },
        message,
        evidence,
        remedy,
    ))
}

/// The trend of a (time, bytes) series when it passes every test of a leak.
pub(crate) fn rising_trend(series: &[(f64, f64)], config: &LeakConfig) -> Option<Trend> {
    let samples = series.len();
    if samples < (config.min_samples as usize).max(2) {
        return None;
    }
    let (start_t, start) = *series.first()?;
    let (end_t, end) = *series.last()?;
    let rise = end - start;
    let tolerance = config.max_fallback_mib.get() * BYTES_PER_MIB;
    if rise <= 0.0 || rise < config.min_rise_mib.get() * BYTES_PER_MIB {
        return None;
    }
    let steps: Vec<f64> = series.windows(2).map(|w| w[1].1 - w[0].1).collect();
    let largest_fall = steps.iter().copied().fold(0.0, |m: f64, d| m.max(-d));
    let lowest = series.iter().map(|&(_, b)| b).fold(f64::INFINITY, f64::min);
    if largest_fall > tolerance || lowest < start - tolerance {
        return None;
    }
    let non_falling_steps = steps.iter().filter(|&&d| d >= 0.0).count() as f64 / steps.len() as f64;
    if non_falling_steps < config.min_rising_steps_fraction.get() {
        return None;
    }
    let largest_step = steps.iter().copied().fold(0.0, f64::max);
    if largest_step > config.max_single_step_fraction.get() * rise {
        return None;
    }
    let slope_per_second = least_squares_slope(series)?;
    if slope_per_second <= 0.0 {
        return None;
    }
    Some(Trend {
        start,
        end,
        span_seconds: end_t - start_t,
        slope_per_second,
        samples,
        non_falling_steps,
    })
}

fn least_squares_slope(series: &[(f64, f64)]) -> Option<f64> {
    let n = series.len() as f64;
    let mean_t = series.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_v = series.iter().map(|p| p.1).sum::<f64>() / n;
    let (num, den) = series.iter().fold((0.0, 0.0), |(num, den), &(t, v)| {
        (
            num + (t - mean_t) * (v - mean_v),
            den + (t - mean_t).powi(2),
        )
    });
    (den > 0.0).then(|| num / den)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Snapshot;
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    /// One process with an agent whose allocated memory follows `bytes(step)`.
    fn agent_history(bytes: impl Fn(u32) -> u64 + Copy) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            snap.gpus = vec![gpu(0, 40 * GIB, 80 * GIB, 90)];
            let mut p = process(77, 0, 40 * GIB);
            p.torch = Some(std::sync::Arc::new(torch_on(vec![device(
                0,
                bytes(step),
                30 * GIB,
            )])));
            snap.processes = vec![p];
            snap
        }
    }

    /// One process without an agent whose NVML memory follows `bytes(step)`.
    fn nvml_history(bytes: impl Fn(u32) -> u64 + Copy) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            snap.gpus = vec![gpu(0, 40 * GIB, 80 * GIB, 90)];
            snap.processes = vec![process(78, 0, bytes(step))];
            snap
        }
    }

    #[test]
    fn a_steady_rise_fires_with_the_allocator_as_source() {
        // +8 MiB a second for two minutes: about 960 MiB.
        let warnings = replay_default(120, agent_history(|s| 10 * GIB + u64::from(s) * 8 * MIB));
        let w = find(&warnings, "leak", &Subject::Process { pid: 77 });
        assert_eq!(evidence(w, "source"), "torch allocated_bytes (agent)");
        assert_eq!(evidence(w, "rise"), "960.0MiB");
        assert_eq!(evidence(w, "rate"), "480.0MiB/min");
        assert!(w.remedy.contains("_record_memory_history"));
        assert!(w.remedy.contains("`s`"));
    }

    #[test]
    fn a_steady_rise_without_an_agent_fires_from_nvml() {
        let warnings = replay_default(120, nvml_history(|s| 10 * GIB + u64::from(s) * 8 * MIB));
        let w = find(&warnings, "leak", &Subject::Process { pid: 78 });
        assert_eq!(evidence(w, "source"), "NVML process memory (no agent)");
        // NVML's figure holds the allocator's cache: the remedy says so and names the agent,
        // where it sent the user to the `s` key, which needs one.
        assert!(w.remedy.contains("torchtop attach"), "{}", w.remedy);
        assert!(w.remedy.contains("cache"), "{}", w.remedy);
    }

    #[test]
    fn a_process_with_an_agent_is_judged_by_its_allocator_alone() {
        // NVML's figure rises (the caching allocator reserves more), the allocated bytes hold:
        // no leak for pid 77. Pid 78 beside it has no agent, and its NVML rise still counts.
        let rising = |s: u32| 10 * GIB + u64::from(s) * 8 * MIB;
        let both = |step: u32| {
            let mut snap = agent_history(|_| 10 * GIB)(step);
            snap.processes[0].gpu_memory_bytes = Some(rising(step));
            snap.processes.push(process(78, 0, rising(step)));
            snap
        };
        let warnings = replay_default(120, both);
        let leaks = with_id(&warnings, "leak");
        assert_eq!(leaks.len(), 1, "{leaks:#?}");
        assert_eq!(leaks[0].subject, Subject::Process { pid: 78 });
    }

    #[test]
    fn a_noisy_rise_within_the_tolerance_fires() {
        // Every fifth sample dips 20 MiB: within the tolerance, and most steps still rise.
        let wobble = |s: u32| 10 * GIB + u64::from(s) * 8 * MIB - u64::from(s % 5 == 4) * 20 * MIB;
        let warnings = replay_default(120, agent_history(wobble));
        assert_eq!(with_id(&warnings, "leak").len(), 1, "{warnings:#?}");
    }

    #[test]
    fn a_single_jump_does_not_fire() {
        let jump = |s: u32| if s < 60 { 10 * GIB } else { 12 * GIB };
        let warnings = replay_default(120, agent_history(jump));
        assert!(with_id(&warnings, "leak").is_empty(), "{warnings:#?}");
    }

    #[test]
    fn a_saw_tooth_does_not_fire() {
        // Rises about 1 GiB over 20 s, then frees it, six times over, on a slow upward drift: the
        // window ends higher than it starts and most steps rise, but memory keeps falling back.
        let saw = |s: u32| 10 * GIB + u64::from(s % 20) * 50 * MIB + u64::from(s) * 3 * MIB;
        let warnings = replay_default(120, agent_history(saw));
        assert!(with_id(&warnings, "leak").is_empty(), "{warnings:#?}");
    }

    #[test]
    fn a_flat_series_and_a_short_history_do_not_fire() {
        let flat = replay_default(200, agent_history(|_| 10 * GIB));
        assert!(with_id(&flat, "leak").is_empty(), "{flat:#?}");
        // Rising, but watched for less than the window.
        let short = replay_default(60, agent_history(|s| 10 * GIB + u64::from(s) * 64 * MIB));
        assert!(with_id(&short, "leak").is_empty(), "{short:#?}");
    }

    #[test]
    fn a_slow_rise_fires_only_with_a_lower_minimum() {
        // +1 MiB a second: 120 MiB over the window, under the default 256 MiB.
        let slow = agent_history(|s| 10 * GIB + u64::from(s) * MIB);
        assert!(with_id(&replay_default(120, &slow), "leak").is_empty());
        let mut config = RulesConfig::default();
        config.leak.min_rise_mib = crate::config::NonNegative::new(100.0);
        assert_eq!(with_id(&replay(config, 120, slow), "leak").len(), 1);
    }

    #[test]
    fn only_a_series_that_rises_enough_is_copied_for_the_trend_tests() {
        let config = LeakConfig::default();
        let points = |step: u64| -> Vec<Point<Option<u64>>> {
            (0..20)
                .map(|i| Point {
                    t: i as f64,
                    v: (i != 3).then_some(GIB + i * step),
                })
                .collect()
        };
        let value = |v: &Option<u64>| *v;
        assert!(!rises_enough(&points(0), value, &config), "steady");
        assert!(
            !rises_enough(&points(MIB), value, &config),
            "19 MiB, under 256"
        );
        assert!(rises_enough(&points(100 * MIB), value, &config));
        assert!(
            !rises_enough(&points(100 * MIB)[..1], value, &config),
            "one sample"
        );
    }

    #[test]
    fn the_trend_tests_reject_a_fall_below_the_start() {
        let config = LeakConfig::default();
        let mib = MIB as f64;
        let dip: Vec<(f64, f64)> = (0..20)
            .map(|i| {
                let v = if i == 1 {
                    900.0
                } else {
                    1000.0 + f64::from(i) * 30.0
                };
                (f64::from(i), v * mib)
            })
            .collect();
        assert!(rising_trend(&dip, &config).is_none());
        let clean: Vec<(f64, f64)> = (0..20)
            .map(|i| (f64::from(i), (1000.0 + f64::from(i) * 30.0) * mib))
            .collect();
        let trend = rising_trend(&clean, &config).expect("a clean rise");
        assert!((trend.slope_per_second - 30.0 * mib).abs() < 1.0);
        assert_eq!(trend.non_falling_steps, 1.0);
    }
}
