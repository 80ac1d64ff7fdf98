//! Hand-built snapshots and histories for the rule tests.

use crate::model::{
    DeviceAllocatorStats, GpuProcess, GpuSample, ProcessKind, Snapshot, Subject, TorchInfo, Warning,
};
use crate::rules::RulesConfig;

use super::Engine;

pub(crate) const MIB: u64 = 1 << 20;
pub(crate) const GIB: u64 = 1 << 30;

pub(crate) fn rfc3339(t: f64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(t);
    humantime::format_rfc3339_seconds(time).to_string()
}

/// An empty snapshot at `t` seconds since the epoch.
pub(crate) fn snapshot(t: f64) -> Snapshot {
    Snapshot {
        schema: crate::model::snapshot::SCHEMA_VERSION,
        time: rfc3339(t),
        unix_seconds: t,
        ..Default::default()
    }
}

pub(crate) fn gpu(index: u32, used: u64, total: u64, utilization: u32) -> GpuSample {
    GpuSample {
        index,
        name: Some("Test GPU".into()),
        memory_used_bytes: Some(used),
        memory_total_bytes: Some(total),
        utilization_percent: Some(utilization),
        ..Default::default()
    }
}

/// A visible compute process holding `memory` on `gpu`.
pub(crate) fn process(pid: u32, gpu: u32, memory: u64) -> GpuProcess {
    GpuProcess {
        gpu_memory_bytes: Some(memory),
        visible: true,
        command: Some(format!("python train.py --pid {pid}").into()),
        start_ticks: Some(1_000 + u64::from(pid)),
        ppid: Some(1),
        ..GpuProcess::new(pid, gpu, ProcessKind::Compute)
    }
}

pub(crate) fn device(index: u32, allocated: u64, reserved: u64) -> DeviceAllocatorStats {
    DeviceAllocatorStats {
        index,
        allocated_bytes: Some(allocated),
        reserved_bytes: Some(reserved),
        inactive_split_bytes: Some(0),
        alloc_retries: Some(0),
        ooms: Some(0),
        ..Default::default()
    }
}

pub(crate) fn with_ooms(mut device: DeviceAllocatorStats, ooms: u64) -> DeviceAllocatorStats {
    device.ooms = Some(ooms);
    device
}

pub(crate) fn torch_on(devices: Vec<DeviceAllocatorStats>) -> TorchInfo {
    TorchInfo {
        devices,
        ..Default::default()
    }
}

/// Feeds one snapshot per second from `start` for `seconds`, built by `make(t)`, and returns
/// the warnings of the last evaluation.
pub(crate) fn replay(
    config: RulesConfig,
    seconds: u32,
    make: impl Fn(u32) -> Snapshot,
) -> Vec<Warning> {
    let mut engine = Engine::new(config);
    let mut last = Vec::new();
    for step in 0..=seconds {
        // As the sampler does: jobs are grouped before the rules run.
        let mut snapshot = make(step);
        snapshot.jobs = super::group_jobs(&snapshot.processes);
        last = engine.evaluate(&snapshot);
        last.iter().for_each(assert_written_as_panels);
    }
    last
}

/// The units the panels' formatters write straight after the number: "64C", "412W",
/// "1755MHz", "98%", "512B" to "1.0TiB". Taken from the formatters, so a change there moves
/// what the rules are held to.
fn glued_units() -> Vec<String> {
    use crate::format::{bytes, shown};
    let mut written = vec![
        shown::celsius(Some(64)).to_string(),
        shown::watts(Some(412.0)).to_string(),
        shown::power_of_limit(Some(412.0), Some(700.0)).to_string(),
        shown::mhz(Some(1755)).to_string(),
        shown::percent(Some(98)).to_string(),
        crate::format::percent_whole(98.0),
    ];
    written.extend((0..5).map(|power| bytes(5 << (10 * power))));
    let unit = |text: &String| {
        let figure = |c: char| c.is_ascii_digit() || matches!(c, '.' | '/');
        text.trim_start_matches(figure).to_string()
    };
    written.iter().map(unit).collect()
}

/// Why a warning's text writes a figure otherwise than the panels do: a unit they glue to
/// the number written after a space ("64 °C", "412/700 W", "1755 MHz"), or a degree sign,
/// which no panel writes.
pub(crate) fn not_as_panels(warning: &Warning) -> Option<String> {
    let units = glued_units();
    let texts = std::iter::once(&warning.message).chain(warning.evidence.iter().map(|(_, v)| v));
    for text in texts {
        if text.contains('°') {
            return Some(format!("a degree sign in {text:?}"));
        }
        for unit in &units {
            let spaced = format!(" {unit}");
            for (at, _) in text.match_indices(&spaced) {
                let number_before = text[..at].ends_with(|c: char| c.is_ascii_digit());
                let rest = &text[at + spaced.len()..];
                let word_ends = !rest.starts_with(|c: char| c.is_alphanumeric());
                if number_before && word_ends {
                    return Some(format!("{unit:?} after a space in {text:?}"));
                }
            }
        }
    }
    None
}

/// Panics with [`not_as_panels`]'s reason.
pub(crate) fn assert_written_as_panels(warning: &Warning) {
    if let Some(why) = not_as_panels(warning) {
        panic!(
            "{}: {why}; the panels write it with crate::format",
            warning.id
        );
    }
}

/// `replay` with the default config.
pub(crate) fn replay_default(seconds: u32, make: impl Fn(u32) -> Snapshot) -> Vec<Warning> {
    replay(RulesConfig::default(), seconds, make)
}

/// The warnings with this id.
pub(crate) fn with_id<'a>(warnings: &'a [Warning], id: &str) -> Vec<&'a Warning> {
    warnings.iter().filter(|w| w.id == id).collect()
}

/// The one warning with this id and subject; panics with the list when missing.
pub(crate) fn find<'a>(warnings: &'a [Warning], id: &str, subject: &Subject) -> &'a Warning {
    warnings
        .iter()
        .find(|w| w.id == id && &w.subject == subject)
        .inspect(|w| assert_written_as_panels(w))
        .unwrap_or_else(|| panic!("no {id} on {subject:?} in {warnings:#?}"))
}

/// The evidence value under `name`.
pub(crate) fn evidence<'a>(warning: &'a Warning, name: &str) -> &'a str {
    warning
        .evidence
        .iter()
        .find(|(n, _)| n == name)
        .map_or_else(
            || panic!("no evidence {name} in {:#?}", warning.evidence),
            |(_, v)| v.as_str(),
        )
}

/// Snapshot times start here so `since` looks like a real date.
pub(crate) const T0: f64 = 1_700_000_000.0;

pub(crate) fn at(step: u32) -> Snapshot {
    snapshot(T0 + f64::from(step))
}
