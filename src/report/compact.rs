//! The compact form of the `--json` stream (`--json --compact`): each line is still a whole
//! snapshot document, but what a reader of the previous lines already has is left out.
//!
//! - `null` fields are left out (a missing key reads as null).
//! - A GPU's fixed fields ([`GPU_FIXED`]) and a process's ([`PROCESS_FIXED`]) are written the
//!   first time that GPU or (pid, GPU) is seen, and again only when they change.
//! - A warning is written in full the first time it appears (a new id, subject, severity or
//!   `since`); after that only `id`, `severity`, `subject`, `group` and `since`, with
//!   `"repeat": true`.
//!
//! Every line carries `"compact": true` next to `schema`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::model::Snapshot;

/// GPU fields that do not change while it stays in place.
const GPU_FIXED: &[&str] = &[
    "name",
    "uuid",
    "bus_id",
    "memory_total_bytes",
    "power_limit_w",
];
/// Process fields that do not change while it runs.
const PROCESS_FIXED: &[&str] = &[
    "kind",
    "user",
    "uid",
    "command",
    "ppid",
    "start_ticks",
    "env",
];
/// The warning fields kept in a repeat.
const WARNING_KEPT: &[&str] = &["id", "severity", "subject", "group", "since"];

/// What the lines written so far have said.
#[derive(Debug, Default)]
pub(crate) struct Compactor {
    gpus: HashMap<u64, Map<String, Value>>,
    processes: HashMap<(u64, u64), Map<String, Value>>,
    warnings: HashSet<String>,
}

impl Compactor {
    /// The compact line for `snapshot`.
    pub(crate) fn line(&mut self, snapshot: &Snapshot) -> String {
        let mut doc = serde_json::to_value(snapshot).unwrap_or(Value::Null);
        strip_nulls(&mut doc);
        if let Some(object) = doc.as_object_mut() {
            object.insert("compact".into(), Value::Bool(true));
        }
        self.fixed_fields(&mut doc);
        self.warnings(&mut doc);
        serde_json::to_string(&doc).unwrap_or_default()
    }

    fn fixed_fields(&mut self, doc: &mut Value) {
        let mut gpus_now = HashMap::new();
        for gpu in array(doc, "gpus") {
            let key = number(gpu, "index");
            let fixed = drop_if_seen(gpu, GPU_FIXED, self.gpus.get(&key));
            gpus_now.insert(key, fixed);
        }
        self.gpus = gpus_now;
        let mut processes_now = HashMap::new();
        for process in array(doc, "processes") {
            let key = (number(process, "pid"), number(process, "gpu"));
            let fixed = drop_if_seen(process, PROCESS_FIXED, self.processes.get(&key));
            processes_now.insert(key, fixed);
        }
        self.processes = processes_now;
    }

    fn warnings(&mut self, doc: &mut Value) {
        let mut now = HashSet::new();
        for warning in array(doc, "warnings") {
            let key = WARNING_KEPT
                .iter()
                .map(|k| warning.get(*k).map(Value::to_string).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\u{1}");
            if self.warnings.contains(&key) {
                if let Some(object) = warning.as_object_mut() {
                    object.retain(|k, _| WARNING_KEPT.contains(&k.as_str()));
                    object.insert("repeat".into(), Value::Bool(true));
                }
            }
            now.insert(key);
        }
        self.warnings = now;
    }
}

fn array<'a>(doc: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    doc.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

fn number(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(u64::MAX)
}

/// Removes the `fixed` fields of `item` when they are what `seen` holds; returns them as now.
fn drop_if_seen(
    item: &mut Value,
    fixed: &[&str],
    seen: Option<&Map<String, Value>>,
) -> Map<String, Value> {
    let Some(object) = item.as_object_mut() else {
        return Map::new();
    };
    let current: Map<String, Value> = fixed
        .iter()
        .filter_map(|k| Some((k.to_string(), object.get(*k)?.clone())))
        .collect();
    if seen == Some(&current) {
        for key in fixed {
            object.remove(*key);
        }
    }
    current
}

fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(object) => {
            object.retain(|_, v| !v.is_null());
            object.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuProcess, GpuSample, ProcessKind, Severity, Subject, Warning};

    fn snapshot(since: &str) -> Snapshot {
        let mut s = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        s.gpus.push(GpuSample {
            index: 0,
            name: Some("H100".into()),
            utilization_percent: Some(50),
            ..Default::default()
        });
        let mut p = GpuProcess::new(7, 0, ProcessKind::Compute);
        p.command = Some("python train.py".into());
        s.processes.push(p);
        s.warnings.push(Warning {
            id: "ecc".into(),
            severity: Severity::Critical,
            subject: Subject::Gpu { index: 0 },
            message: "a long sentence".into(),
            evidence: vec![("volatile uncorrected".into(), "4".into())],
            remedy: "a long remedy".into(),
            since: since.into(),
        });
        s
    }

    #[test]
    fn prose_and_fixed_fields_come_once_and_again_when_they_change() {
        let mut compactor = Compactor::default();
        let first: Value = serde_json::from_str(&compactor.line(&snapshot("t0"))).unwrap();
        assert_eq!(first["warnings"][0]["message"], "a long sentence");
        assert_eq!(first["gpus"][0]["name"], "H100");
        assert_eq!(first["processes"][0]["command"], "python train.py");
        assert!(
            first["gpus"][0].get("power_w").is_none(),
            "nulls are left out"
        );
        let second: Value = serde_json::from_str(&compactor.line(&snapshot("t0"))).unwrap();
        let repeat = &second["warnings"][0];
        assert_eq!(repeat["repeat"], true);
        assert_eq!(repeat["since"], "t0");
        assert_eq!(repeat["group"], "ecc@GPU 0");
        assert!(repeat.get("message").is_none() && repeat.get("remedy").is_none());
        assert!(second["gpus"][0].get("name").is_none());
        assert_eq!(second["gpus"][0]["utilization_percent"], 50);
        assert!(second["processes"][0].get("command").is_none());
        let third: Value = serde_json::from_str(&compactor.line(&snapshot("t9"))).unwrap();
        assert_eq!(
            third["warnings"][0]["message"], "a long sentence",
            "a new since"
        );
    }
}
