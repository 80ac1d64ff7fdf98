//! `fragmentation`: cached memory the allocator cannot hand out or give back.
//!
//! Fires for one process's allocator on one device when its inactive-split memory (free pieces
//! of partly used segments: reused only for requests that fit a piece, released by
//! `empty_cache()` only under `expandable_segments:True`, which unmaps free pages inside
//! segments) stays both a large share of reserved memory and large in absolute terms over the
//! whole window (`info`: memory held idle; a sample taken mid-step catches normal caching), or
//! when `num_alloc_retries` (cache flushed and cudaMalloc retried after a failure) rose within
//! the window (`warn`: steps stalled on it, from fragmentation or from a job simply near the
//! GPU's capacity). Skipped under the `cudaMallocAsync` backend, whose counters are zero by
//! construction.

use serde::{Deserialize, Serialize};

use crate::config::{Fraction, NonNegative, Seconds};
use crate::model::{Severity, Subject, Warning};

use super::{
    counter_rise, fmt_opt, fmt_opt_bytes, fmt_percent, fmt_seconds, warning, AllocPoint, Inputs,
    Point, BYTES_PER_MIB,
};

/// `fragmentation`: inactive-split memory and allocation retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct FragmentationConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Share of reserved memory that inactive-split memory must hold at over the window.
    /// Default 0.3.
    pub(crate) inactive_split_fraction: Fraction,
    /// The least inactive-split memory that counts, in MiB. Default 1024.
    pub(crate) min_inactive_split_mib: NonNegative,
    /// Warn while num_alloc_retries rose within this many seconds; the inactive-split share must
    /// hold over as long. Default 60.
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

pub(crate) const ID: &str = "fragmentation";

const EXPANDABLE: &str = "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so segments grow \
in place instead of being split.";

const STEADY_SHAPES: &str = "Keep tensor shapes steady (pad or bucket variable-length batches) so \
freed blocks fit the next request; call torch.cuda.empty_cache() only where it helps, after a \
one-off peak such as evaluation, not every step.";

const LOWER_PEAK: &str = "Retries also come from a job simply near the GPU's capacity: reduce \
its peak memory (a smaller batch, activation checkpointing, mixed precision).";

fn expandable(alloc_conf: Option<&str>) -> bool {
    alloc_conf.is_some_and(|c| c.contains("expandable_segments:True"))
}

/// The remedy, noting when expandable segments are already on, and peak memory after retries.
fn remedy(alloc_conf: Option<&str>, retried: bool) -> String {
    let mut remedy = match alloc_conf {
        Some(conf) if expandable(alloc_conf) => {
            format!("expandable_segments is already on ({conf}). {STEADY_SHAPES}")
        }
        _ => format!("{EXPANDABLE} {STEADY_SHAPES}"),
    };
    if retried {
        remedy.push(' ');
        remedy.push_str(LOWER_PEAK);
    }
    remedy
}

pub(crate) fn check(inputs: &Inputs, config: &FragmentationConfig) -> Vec<Warning> {
    inputs
        .allocators
        .iter()
        .filter_map(|(&(pid, index), tracked)| {
            let alloc_conf = inputs.process(pid).and_then(alloc_conf);
            let seconds = config.retries_window_seconds.get();
            let watched = tracked.window.covering(seconds);
            let points = tracked.window.recent(seconds);
            fragmented(pid, index, points, watched, alloc_conf, config)
        })
        .collect()
}

/// The allocator settings the process runs with: from its agent, else from its environment.
/// Borrowed: read for every allocator every tick, copied only into a warning.
fn alloc_conf(process: &crate::model::GpuProcess) -> Option<&str> {
    let from_agent = process.torch.as_ref().and_then(|t| t.alloc_conf.as_deref());
    from_agent.or_else(|| process.env.as_ref()?.pytorch_cuda_alloc_conf.as_deref())
}

/// `points` are the window's recent points, `watched` those covering all of it (None while it
/// has not been watched that long).
fn fragmented(
    pid: u32,
    index: u32,
    points: &[Point<AllocPoint>],
    watched: Option<&[Point<AllocPoint>]>,
    alloc_conf: Option<&str>,
    config: &FragmentationConfig,
) -> Option<Warning> {
    if alloc_conf.is_some_and(|c| c.contains("cudaMallocAsync")) {
        return None;
    }
    let latest = points.last()?.v;
    let split = watched.and_then(|w| held_share(w, config));
    let retries = counter_rise(points, |a| a.alloc_retries).filter(|&(rise, _)| rise > 0);
    if split.is_none() && retries.is_none() {
        return None;
    }
    let mut reasons = Vec::new();
    if let Some(share) = split {
        reasons.push(format!(
            "{} of its {} reserved is free space inside partly used segments (at least {} over \
             the last {}): it serves only requests that fit a piece, and {}",
            fmt_opt_bytes(latest.inactive_split_bytes),
            fmt_opt_bytes(latest.reserved_bytes),
            fmt_percent(share * 100.0),
            fmt_seconds(config.retries_window_seconds.get()),
            if expandable(alloc_conf) {
                "empty_cache() releases only its whole free pages"
            } else {
                "empty_cache() cannot release it"
            },
        ));
    }
    if let Some((rise, _)) = retries {
        reasons.push(format!(
            "cudaMalloc failed and was retried after a cache flush {rise} time{} in the last {}",
            if rise == 1 { "" } else { "s" },
            fmt_seconds(config.retries_window_seconds.get()),
        ));
    }
    let message = format!(
        "pid {pid}'s allocator on cuda:{index} {}: {}",
        if retries.is_some() {
            "shows fragmentation or memory pressure"
        } else {
            "is fragmented"
        },
        reasons.join("; ")
    );
    let evidence = vec![
        ("device", format!("cuda:{index}")),
        ("reserved", fmt_opt_bytes(latest.reserved_bytes)),
        ("allocated", fmt_opt_bytes(latest.allocated_bytes)),
        ("inactive split", fmt_opt_bytes(latest.inactive_split_bytes)),
        (
            "split share",
            fmt_opt(
                split
                    .or_else(|| ratio(&latest))
                    .map(|s| fmt_percent(s * 100.0)),
            ),
        ),
        (
            "num_alloc_retries",
            fmt_opt(retries.map(|(_, now)| now).or(latest.alloc_retries)),
        ),
        ("PYTORCH_CUDA_ALLOC_CONF", fmt_opt(alloc_conf)),
    ];
    // Memory held idle is worth knowing; a cudaMalloc that failed is a step that stalled.
    let severity = if retries.is_some() {
        Severity::Warn
    } else {
        Severity::Info
    };
    let mut found = warning(
        ID,
        severity,
        Subject::Process { pid },
        message,
        evidence,
        "",
    );
    found.remedy = remedy(alloc_conf, retries.is_some());
    Some(found)
}

fn ratio(point: &AllocPoint) -> Option<f64> {
    let split = point.inactive_split_bytes? as f64;
    let reserved = point.reserved_bytes.filter(|&r| r > 0)? as f64;
    Some(split / reserved)
}

/// The inactive-split share of reserved memory, when it passes both thresholds.
fn split_share(point: &AllocPoint, config: &FragmentationConfig) -> Option<f64> {
    let share = ratio(point)?;
    let large_enough =
        point.inactive_split_bytes? as f64 >= config.min_inactive_split_mib.get() * BYTES_PER_MIB;
    (share >= config.inactive_split_fraction.get() && large_enough).then_some(share)
}

/// The least inactive-split share over the points, when every point passes both thresholds:
/// split memory that comes and goes within a step is the cache at work.
fn held_share(points: &[Point<AllocPoint>], config: &FragmentationConfig) -> Option<f64> {
    (points.iter())
        .map(|p| split_share(&p.v, config))
        .try_fold(f64::INFINITY, |least, share| Some(least.min(share?)))
        .filter(|s| s.is_finite())
}

#[cfg(test)]
mod tests {
    use crate::model::{DeviceAllocatorStats, Severity, Snapshot, Subject};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    fn with_stats(step: u32, stats: DeviceAllocatorStats, conf: Option<&str>) -> Snapshot {
        let mut snap = at(step);
        snap.gpus = vec![gpu(0, 40 * GIB, 80 * GIB, 90)];
        let mut p = process(9, 0, 40 * GIB);
        let mut torch = torch_on(vec![stats]);
        torch.alloc_conf = conf.map(str::to_string);
        p.torch = Some(std::sync::Arc::new(torch));
        snap.processes = vec![p];
        snap
    }

    fn split(reserved: u64, inactive: u64) -> DeviceAllocatorStats {
        let mut d = device(0, reserved / 2, reserved);
        d.inactive_split_bytes = Some(inactive);
        d
    }

    #[test]
    fn a_large_inactive_split_share_fires_and_names_expandable_segments() {
        let warnings = replay_default(60, |s| with_stats(s, split(20 * GIB, 8 * GIB), None));
        let w = find(&warnings, "fragmentation", &Subject::Process { pid: 9 });
        assert_eq!(evidence(w, "split share"), "40%");
        assert_eq!(evidence(w, "inactive split"), "8.0GiB");
        assert!(w
            .remedy
            .contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
        // Split pieces are reused for requests that fit; only empty_cache() cannot free them.
        assert!(!w.message.contains("neither reuse"), "{}", w.message);
        assert!(
            w.message.contains("empty_cache() cannot release it"),
            "{}",
            w.message
        );
        assert_eq!(w.severity, Severity::Info, "no cudaMalloc failed");
    }

    #[test]
    fn a_healthy_allocator_and_a_tiny_process_stay_silent() {
        let healthy = replay_default(3, |s| with_stats(s, split(20 * GIB, GIB), None));
        assert!(
            with_id(&healthy, "fragmentation").is_empty(),
            "{healthy:#?}"
        );
        // 50% split, but only 100 MiB of it: below the absolute minimum.
        let tiny = replay_default(3, |s| with_stats(s, split(200 * MIB, 100 * MIB), None));
        assert!(with_id(&tiny, "fragmentation").is_empty(), "{tiny:#?}");
    }

    #[test]
    fn rising_alloc_retries_fire_and_a_steady_count_does_not() {
        let retries = |count: u64| {
            let mut d = split(20 * GIB, 0);
            d.alloc_retries = Some(count);
            d
        };
        let rising = replay_default(4, |s| with_stats(s, retries(u64::from(s / 2)), None));
        let w = find(&rising, "fragmentation", &Subject::Process { pid: 9 });
        assert!(w.message.contains("retried"), "{}", w.message);
        // A review: retries equally mean a job near the GPU's capacity.
        assert!(
            w.message.contains("shows fragmentation or memory pressure"),
            "{}",
            w.message
        );
        assert!(w.remedy.contains("reduce its peak memory"), "{}", w.remedy);
        assert_eq!(evidence(w, "num_alloc_retries"), "2");
        assert_eq!(
            w.severity,
            Severity::Warn,
            "steps stalled on a failed cudaMalloc"
        );
        let steady = replay_default(4, |s| with_stats(s, retries(5), None));
        assert!(with_id(&steady, "fragmentation").is_empty(), "{steady:#?}");
    }

    #[test]
    fn the_remedy_notices_expandable_segments_already_on_and_async_is_skipped() {
        let on = Some("expandable_segments:True");
        let warnings = replay_default(60, |s| with_stats(s, split(20 * GIB, 8 * GIB), on));
        let w = find(&warnings, "fragmentation", &Subject::Process { pid: 9 });
        assert!(
            w.remedy.starts_with("expandable_segments is already on"),
            "{}",
            w.remedy
        );
        // A review: expandable segments let empty_cache() unmap free pages inside segments.
        assert!(
            w.message
                .contains("empty_cache() releases only its whole free pages"),
            "{}",
            w.message
        );
        let r#async = Some("backend:cudaMallocAsync");
        let quiet = replay_default(60, |s| with_stats(s, split(20 * GIB, 8 * GIB), r#async));
        assert!(with_id(&quiet, "fragmentation").is_empty());
    }

    #[test]
    fn a_lower_minimum_makes_a_small_process_fire() {
        let mut config = RulesConfig::default();
        config.fragmentation.min_inactive_split_mib = crate::config::NonNegative::new(50.0);
        let warnings = replay(config, 60, |s| {
            with_stats(s, split(200 * MIB, 100 * MIB), None)
        });
        assert_eq!(with_id(&warnings, "fragmentation").len(), 1);
    }

    /// A review: the share was judged on the latest sample, taken mid-step, and 24 of 77 GiB
    /// (31%) of normal caching fired. It must hold over the whole window, watched that long.
    #[test]
    fn a_split_share_must_hold_over_the_window() {
        let mid_step = replay_default(60, |s| {
            let inactive = if s == 60 { 24 * GIB } else { 5 * GIB };
            with_stats(s, split(77 * GIB, inactive), None)
        });
        assert!(
            with_id(&mid_step, "fragmentation").is_empty(),
            "{mid_step:#?}"
        );
        let not_watched_long =
            replay_default(30, |s| with_stats(s, split(77 * GIB, 24 * GIB), None));
        assert!(with_id(&not_watched_long, "fragmentation").is_empty());
        let held = replay_default(60, |s| with_stats(s, split(77 * GIB, 24 * GIB), None));
        let w = find(&held, "fragmentation", &Subject::Process { pid: 9 });
        assert_eq!(evidence(w, "split share"), "31%");
    }
}
