//! `shm-small`: a training process runs DataLoader workers while its `/dev/shm` (seen through
//! /proc/PID/root) is smaller than the configured share per worker, or nearly full. Workers
//! hand every batch to the main process through shared memory; when it runs out they die with
//! "bus error" or "No space left on device". Docker gives a container 64 MiB by default.

use serde::{Deserialize, Serialize};

use crate::config::{Fraction, NonNegative};
use crate::model::{GpuProcess, ProcessKind, Severity, Subject, Warning};

use super::{fmt_bytes, fmt_opt_bytes, fmt_percent, warning, Inputs, BYTES_PER_MIB};

/// `shm-small`: `/dev/shm` too small or nearly full for the DataLoader workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ShmSmallConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The least `/dev/shm` per DataLoader worker, in MiB. Default 128.
    pub(crate) min_mib_per_worker: NonNegative,
    /// Share of `/dev/shm` in use from which it counts as nearly full. Default 0.9.
    pub(crate) full_fraction: Fraction,
}

impl Default for ShmSmallConfig {
    fn default() -> Self {
        ShmSmallConfig {
            enabled: true,
            min_mib_per_worker: NonNegative::new(128.0),
            full_fraction: Fraction::new(0.9),
        }
    }
}

pub(crate) const ID: &str = "shm-small";

const REMEDY: &str = "Give the container a bigger /dev/shm: `docker run --shm-size=8g` (or \
`--ipc=host` to share the host's); in Kubernetes mount an emptyDir with `medium: Memory` (and a \
sizeLimit) at /dev/shm. Until then fewer DataLoader workers or a smaller prefetch_factor need \
less of it.";

pub(crate) fn check(inputs: &Inputs, config: &ShmSmallConfig) -> Vec<Warning> {
    let processes = &inputs.snapshot.processes;
    let mut found = Vec::new();
    for process in processes {
        // The first row of each pid.
        let could = process.visible
            && process.kind != ProcessKind::Graphics
            && process.children_count.is_some_and(|n| n > 0)
            && process.shm.is_some();
        if !could
            || !inputs
                .process(process.pid)
                .is_some_and(|p| std::ptr::eq(p, process))
        {
            continue;
        }
        let subject = Subject::Process { pid: process.pid };
        let bar = (inputs.held).bar(ID, &subject, config.full_fraction.get());
        found.extend(short_of_shm(process, bar, config));
    }
    found
}

/// `full_bar`: the share of `/dev/shm` in use from which it is nearly full (lower while the
/// warning holds: batches come and go in it every step).
fn short_of_shm(process: &GpuProcess, full_bar: f64, config: &ShmSmallConfig) -> Option<Warning> {
    if !process.visible || process.kind == ProcessKind::Graphics {
        return None;
    }
    let workers = process.children_count.filter(|n| *n > 0)?;
    let shm = process.shm.as_ref()?;
    let needed = f64::from(workers) * config.min_mib_per_worker.get() * BYTES_PER_MIB;
    let small = shm.size_bytes.filter(|&size| (size as f64) < needed);
    let full_share = match (shm.used_bytes, shm.size_bytes) {
        (Some(used), Some(size)) if size > 0 => Some(used as f64 / size as f64),
        _ => None,
    };
    let full = full_share.filter(|&s| s >= full_bar);
    let mut findings = Vec::new();
    if small.is_some() {
        findings.push(format!(
            "{} for {workers} DataLoader workers (at least {} wanted)",
            fmt_opt_bytes(shm.size_bytes),
            fmt_bytes(needed)
        ));
    }
    if let Some(share) = full {
        findings.push(format!(
            "{} of {} in use ({})",
            fmt_opt_bytes(shm.used_bytes),
            fmt_opt_bytes(shm.size_bytes),
            fmt_percent(share * 100.0)
        ));
    }
    if findings.is_empty() {
        return None;
    }
    let message = format!(
        "pid {}'s /dev/shm is too small: {}",
        process.pid,
        findings.join(", and ")
    );
    let evidence = vec![
        ("/dev/shm size", fmt_opt_bytes(shm.size_bytes)),
        ("/dev/shm used", fmt_opt_bytes(shm.used_bytes)),
        ("workers", workers.to_string()),
        ("wanted", fmt_bytes(needed)),
    ];
    Some(warning(
        ID,
        Severity::Warn,
        Subject::Process { pid: process.pid },
        message,
        evidence,
        REMEDY,
    ))
}

#[cfg(test)]
mod tests {
    use crate::model::{ShmInfo, Snapshot, Subject};
    use crate::rules::testkit::*;

    fn with_shm(workers: u32, size: u64, used: Option<u64>) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            let mut p = process(50, 0, GIB);
            p.children_count = Some(workers);
            p.shm = Some(ShmInfo {
                size_bytes: Some(size),
                used_bytes: used,
            });
            snap.processes = vec![p];
            snap
        }
    }

    #[test]
    fn docker_default_with_eight_workers_fires() {
        let warnings = replay_default(0, with_shm(8, 64 * MIB, None));
        let w = find(&warnings, "shm-small", &Subject::Process { pid: 50 });
        assert!(
            w.message
                .contains("64.0MiB for 8 DataLoader workers (at least 1.0GiB wanted)"),
            "{}",
            w.message
        );
        assert!(w.remedy.contains("--shm-size") && w.remedy.contains("medium: Memory"));
    }

    #[test]
    fn a_nearly_full_shm_fires_and_a_roomy_one_or_no_workers_does_not() {
        let full = replay_default(0, with_shm(2, 8 * GIB, Some(15 * GIB / 2)));
        assert!(find(&full, "shm-small", &Subject::Process { pid: 50 })
            .message
            .contains("7.5GiB of 8.0GiB in use (94%)"));
        assert!(with_id(
            &replay_default(0, with_shm(8, 8 * GIB, Some(GIB))),
            "shm-small"
        )
        .is_empty());
        assert!(with_id(&replay_default(0, with_shm(0, 64 * MIB, None)), "shm-small").is_empty());
    }

    /// As oom-risk's: batches coming and going in a /dev/shm at 90 % raised and cleared the
    /// warning every tick.
    #[test]
    fn a_shm_wavering_at_the_bar_keeps_one_warning_until_it_falls_clearly_below() {
        let mut engine = crate::rules::Engine::new(crate::rules::RulesConfig::default());
        let held: Vec<bool> = [91, 89, 91, 88, 86, 89]
            .into_iter()
            .enumerate()
            .map(|(step, percent)| {
                let used = 8 * GIB * percent / 100;
                let snap = with_shm(2, 8 * GIB, Some(used))(u32::try_from(step).unwrap());
                !with_id(&engine.evaluate(&snap), "shm-small").is_empty()
            })
            .collect();
        assert_eq!(held, [true, true, true, true, false, false]);
    }
}
