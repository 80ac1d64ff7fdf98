//! A warning raised by the rules: what was seen, on what, since when, and what to do.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warn,
    Critical,
}

/// What a warning is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Subject {
    Gpu { index: u32 },
    Process { pid: u32 },
    Job { id: String },
    Host,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    pub id: String,
    pub severity: Severity,
    pub subject: Subject,
    pub message: String,
    /// The figures that triggered it, as name/value pairs.
    pub evidence: Vec<(String, String)>,
    pub remedy: String,
    /// RFC 3339 time the condition was first seen.
    pub since: String,
}
