//! How rules word a warning: sizes, spans and percentages as the screen shows them, the common
//! opening and evidence rows of a per-(process, GPU) message, and the [`Warning`] constructor.

use crate::model::{Severity, Subject, Warning};

pub(crate) const BYTES_PER_MIB: f64 = 1024.0 * 1024.0;

// Figures in sentences look exactly as they do on the screen: one format module for both.
pub(crate) use crate::format::{
    bytes_f64 as fmt_bytes, opt_bytes as fmt_opt_bytes, percent_whole as fmt_percent,
    span as fmt_seconds,
};

pub(crate) fn fmt_opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| crate::format::NA.to_string(), |v| v.to_string())
}

/// The opening of a per-(process, GPU) message: "pid 5 holds 20.0GiB on GPU 0".
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
