//! How rules word a warning: sizes, spans and percentages as the screen shows them, the common
//! opening and evidence rows of a per-(process, GPU) message, and the [`Warning`] constructor.

use crate::model::{Severity, Subject, Warning};

pub(crate) const BYTES_PER_MIB: f64 = 1024.0 * 1024.0;

/// A size the way the screen shows it: "512 MiB", "20.1 GiB".
pub(crate) fn fmt_bytes(bytes: f64) -> String {
    let gib = bytes / (BYTES_PER_MIB * 1024.0);
    if gib.abs() >= 1.0 {
        format!("{gib:.1} GiB")
    } else {
        format!("{:.0} MiB", bytes / BYTES_PER_MIB)
    }
}

pub(crate) fn fmt_opt_bytes(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "N/A".to_string(), |b| fmt_bytes(b as f64))
}

pub(crate) fn fmt_opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "N/A".to_string(), |v| v.to_string())
}

pub(crate) fn fmt_percent(value: f64) -> String {
    format!("{value:.0}%")
}

/// A span of seconds as "45 s", "2 min", "1.5 h".
pub(crate) fn fmt_seconds(seconds: f64) -> String {
    if seconds < 120.0 {
        format!("{seconds:.0} s")
    } else if seconds < 7200.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

/// The opening of a per-(process, GPU) message: "pid 5 holds 20.0 GiB on GPU 0".
pub(crate) fn holds_on_gpu(pid: u32, gpu: u32, memory: Option<u64>) -> String {
    format!("pid {pid} holds {} on GPU {gpu}", fmt_opt_bytes(memory))
}

/// The evidence rows that go with [`holds_on_gpu`]; a rule appends its own.
pub(crate) fn held_on_gpu_evidence(gpu: u32, memory: Option<u64>) -> Vec<(&'static str, String)> {
    vec![
        ("gpu", gpu.to_string()),
        ("gpu memory", fmt_opt_bytes(memory)),
    ]
}

/// A warning with `since` left empty; the engine fills it in.
pub(crate) fn warning(
    id: &str,
    severity: Severity,
    subject: Subject,
    message: String,
    evidence: Vec<(&str, String)>,
    remedy: &str,
) -> Warning {
    Warning {
        id: id.to_string(),
        severity,
        subject,
        message,
        evidence: evidence
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect(),
        remedy: remedy.to_string(),
        since: String::new(),
    }
}
