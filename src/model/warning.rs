//! A warning raised by the rules: what was seen, on what, since when, and what to do; with the
//! group key the views and machines group on, and the evidence as figures.

use serde::{Deserialize, Serialize, Serializer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warn,
    Critical,
}

/// A one-shot report's exit status while a warning at `warn` level holds (with `--fail-on
/// warn`).
pub const EXIT_WARN: u8 = 3;
/// A one-shot report's exit status while a critical warning holds (unless `--fail-on never`).
pub const EXIT_CRITICAL: u8 = 4;

/// The exit status of a one-shot report (`torchtop --once`, `torchtop cluster --once`) whose
/// most severe warning is `worst`: [`EXIT_CRITICAL`] for a critical one, [`EXIT_WARN`] for one
/// at warn level when `fail_at` is `warn`, else 0. With `fail_at` `None` (`--fail-on never`),
/// always 0. One rule, here below both reports, so that the two cannot drift apart.
pub fn once_exit_status(worst: Option<Severity>, fail_at: Option<Severity>) -> u8 {
    let Some(fail_at) = fail_at else {
        return 0;
    };
    match worst {
        Some(worst) if worst < fail_at => 0,
        Some(Severity::Critical) => EXIT_CRITICAL,
        Some(Severity::Warn) => EXIT_WARN,
        _ => 0,
    }
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

impl Subject {
    /// The subject as people read it: "GPU 0", "pid 5", "job 127.0.0.1:29500" (job ids already
    /// say what they are, so none is prefixed twice), "host". Job ids are untrusted text: escape
    /// before drawing.
    pub fn label(&self) -> String {
        match self {
            Subject::Gpu { index } => format!("GPU {index}"),
            Subject::Process { pid } => format!("pid {pid}"),
            Subject::Job { id } if id.starts_with("job ") => id.clone(),
            Subject::Job { id } => format!("job {id}"),
            Subject::Host => "host".to_string(),
        }
    }
}

/// The evidence row that names the job a process warning's process belongs to; the engine adds
/// it, and [`Warning::group`] groups on it.
pub const JOB_EVIDENCE: &str = "job";

/// The evidence row that names the GPU a process warning is about (the lowest, when the process
/// holds several); [`Warning::group`] groups a process outside any job on it.
pub const GPU_EVIDENCE: &str = "gpu";

#[derive(Debug, Clone, PartialEq, Deserialize)]
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

impl Warning {
    /// The stable key several warnings with one cause share: the id and the cause. A job or
    /// GPU warning is its own cause; a process warning's cause is its job (its `job` evidence
    /// row), else its GPU (its `gpu` row), else the process. "leak@job 127.0.0.1:29500",
    /// "ecc@GPU 1", "swap@host", "wrong-gpu@GPU 3".
    pub fn group(&self) -> String {
        let row = |name: &str| {
            self.evidence
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let cause = match (&self.subject, row(JOB_EVIDENCE), row(GPU_EVIDENCE)) {
            (Subject::Process { .. }, Some(id), _) => Subject::Job { id: id.to_string() },
            (Subject::Process { .. }, None, Some(gpu)) => match gpu.trim().parse() {
                Ok(index) => Subject::Gpu { index },
                Err(_) => self.subject.clone(),
            },
            (subject, _, _) => subject.clone(),
        };
        format!("{}@{}", self.id, cause.label())
    }

    /// The evidence as figures: each row's text, with its number and unit where the text is one
    /// figure ("20.0GiB", "98%", "3", "45 s"), else only the text.
    pub fn facts(&self) -> Vec<Fact> {
        self.evidence
            .iter()
            .map(|(name, text)| Fact::read(name, text))
            .collect()
    }
}

/// One evidence row as a machine reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    pub name: String,
    /// The number the text shows, as shown (20.0 for "20.0GiB"); `None` when the text is not
    /// one figure.
    pub number: Option<f64>,
    /// The unit after the number ("GiB", "%", "s", "MiB/min"); `None` for a bare count.
    pub unit: Option<String>,
    pub text: String,
}

impl Fact {
    fn read(name: &str, text: &str) -> Fact {
        let trimmed = text.trim();
        let split = trimmed
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
            .unwrap_or(trimmed.len());
        let (digits, rest) = trimmed.split_at(split);
        let number = digits.parse::<f64>().ok().filter(|n| n.is_finite());
        let unit = rest.trim();
        // One figure: a number, then at most one short word with no spaces ("GiB", "%",
        // "°C"). A word that starts with punctuation makes it something else: a bus id
        // ("00000000:02:00.0"), a clock ("12:34"), a range ("0-3").
        let unit_like = unit
            .chars()
            .next()
            .is_none_or(|c| c.is_alphabetic() || matches!(c, '%' | '°' | 'µ'));
        let one_figure = number.is_some()
            && unit_like
            && !unit.contains(char::is_whitespace)
            && unit.len() <= 12;
        Fact {
            name: name.to_string(),
            number: number.filter(|_| one_figure),
            unit: (one_figure && !unit.is_empty()).then(|| unit.to_string()),
            text: text.to_string(),
        }
    }
}

/// The JSON form of a warning: the fields above plus `group` and `facts` (schema 1 gains them;
/// nothing is removed or renamed).
#[derive(Serialize)]
struct WarningOut<'a> {
    id: &'a str,
    severity: Severity,
    subject: &'a Subject,
    group: String,
    message: &'a str,
    evidence: &'a [(String, String)],
    facts: Vec<Fact>,
    remedy: &'a str,
    since: &'a str,
}

impl Serialize for Warning {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WarningOut {
            id: &self.id,
            severity: self.severity,
            subject: &self.subject,
            group: self.group(),
            message: &self.message,
            evidence: &self.evidence,
            facts: self.facts(),
            remedy: &self.remedy,
            since: &self.since,
        }
        .serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warning(subject: Subject, evidence: &[(&str, &str)]) -> Warning {
        Warning {
            id: "leak".into(),
            severity: Severity::Warn,
            subject,
            message: "m".into(),
            evidence: evidence
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            remedy: "r".into(),
            since: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn the_exit_status_follows_the_worst_warning_at_the_fail_on_level() {
        use Severity::{Critical, Info, Warn};
        let at = |worst, fail_at| once_exit_status(worst, fail_at);
        assert_eq!(at(Some(Critical), Some(Critical)), EXIT_CRITICAL);
        assert_eq!(at(Some(Critical), Some(Warn)), EXIT_CRITICAL);
        assert_eq!(at(Some(Warn), Some(Critical)), 0);
        assert_eq!(at(Some(Warn), Some(Warn)), EXIT_WARN);
        assert_eq!(at(Some(Info), Some(Warn)), 0);
        assert_eq!(at(None, Some(Warn)), 0);
        assert_eq!(at(Some(Critical), None), 0, "--fail-on never");
    }

    #[test]
    fn the_group_is_the_job_of_a_process_else_the_subject() {
        let ranked = warning(
            Subject::Process { pid: 5 },
            &[("job", "job 127.0.0.1:29500")],
        );
        assert_eq!(ranked.group(), "leak@job 127.0.0.1:29500");
        let alone = warning(Subject::Process { pid: 5 }, &[]);
        assert_eq!(alone.group(), "leak@pid 5");
        let on_gpu = warning(Subject::Process { pid: 5 }, &[("gpu", "3")]);
        assert_eq!(on_gpu.group(), "leak@GPU 3");
        let run = warning(
            Subject::Job {
                id: "torchelastic run abc".into(),
            },
            &[],
        );
        assert_eq!(run.group(), "leak@job torchelastic run abc");
    }

    #[test]
    fn facts_read_one_figure_and_leave_prose_alone() {
        let w = warning(
            Subject::Host,
            &[
                ("gpu memory", "20.0GiB"),
                ("util", "98%"),
                ("count", "3"),
                ("rate", "484.0MiB/min"),
                ("verdict", "3 of 4 ranks"),
                ("reasons", "sw_power_cap"),
                ("bus id", "00000000:02:00.0"),
                ("at", "12:34"),
                ("temperature", "91°C"),
            ],
        );
        let facts = w.facts();
        let pick = |i: usize| (facts[i].number, facts[i].unit.as_deref());
        assert_eq!(pick(0), (Some(20.0), Some("GiB")));
        assert_eq!(pick(1), (Some(98.0), Some("%")));
        assert_eq!(pick(2), (Some(3.0), None));
        assert_eq!(pick(3), (Some(484.0), Some("MiB/min")));
        assert_eq!(pick(4), (None, None));
        assert_eq!(pick(5), (None, None));
        assert_eq!(facts[4].text, "3 of 4 ranks");
        assert_eq!(pick(6), (None, None), "a bus id is not a figure");
        assert_eq!(pick(7), (None, None), "a time of day is not a figure");
        assert_eq!(pick(8), (Some(91.0), Some("°C")));
    }

    #[test]
    fn json_keeps_the_schema_1_fields_and_adds_group_and_facts() {
        let w = warning(Subject::Gpu { index: 1 }, &[("new uncorrected", "4")]);
        let doc = serde_json::to_value(&w).unwrap();
        assert_eq!(doc["evidence"][0][1], "4");
        assert_eq!(doc["group"], "leak@GPU 1");
        assert_eq!(doc["facts"][0]["number"], 4.0);
        let back: Warning = serde_json::from_value(doc).unwrap();
        assert_eq!(back, w);
    }
}
