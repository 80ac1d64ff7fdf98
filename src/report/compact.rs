//! The compact form of the `--json` stream (`--json --compact`): each line is still one JSON
//! document per snapshot, but it leaves out what a reader of the earlier lines already has.
//!
//! - Each GPU (by `index`) and each process row (by `pid` and `gpu`) is listed on every line,
//!   so a missing one is gone. The first time one is listed it has all its non-null fields;
//!   after that only its key and the fields that changed since the previous line (a field that
//!   became null is written as `null`). A missing field means "as before".
//! - `running_seconds` of a process is written only the first time (add the time since).
//! - A process's `cgroup` object, once written, likewise lists only the fields that changed
//!   (its path and limits seldom do); its `memory_current_bytes` and
//!   `memory_limit_used_bytes`, which move with the page cache every refresh, are written again
//!   only once they have moved by 1% or more from the figure last written.
//! - Elsewhere (driver, host, jobs) `null` fields are left out.
//! - A warning is written in full the first time it appears (a new id, subject, severity or
//!   `since`); after that only `id`, `severity`, `subject`, `group` and `since`, with
//!   `"repeat": true`.
//!
//! Every line carries `"compact": true` next to `schema`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::model::Snapshot;

/// The warning fields kept in a repeat.
const WARNING_KEPT: &[&str] = &["id", "severity", "subject", "group", "since"];

/// Fields written only the first time their row is listed.
const FIRST_ONLY: &[&str] = &["running_seconds"];

/// Object fields of a row that, after their first time, list only their changed fields.
const NESTED_CHANGES: &[&str] = &["cgroup"];

/// What the lines written so far have said.
#[derive(Debug, Default)]
pub(crate) struct Compactor {
    gpus: HashMap<Vec<u64>, Map<String, Value>>,
    processes: HashMap<Vec<u64>, Map<String, Value>>,
    warnings: HashSet<String>,
}

impl Compactor {
    /// The compact line for `snapshot`.
    pub(crate) fn line(&mut self, snapshot: &Snapshot) -> String {
        let mut doc = serde_json::to_value(snapshot).unwrap_or(Value::Null);
        if let Some(object) = doc.as_object_mut() {
            for (key, value) in object.iter_mut() {
                if key != "gpus" && key != "processes" {
                    strip_nulls(value);
                }
            }
            object.insert("compact".into(), Value::Bool(true));
        }
        self.gpus = changes(&mut doc, "gpus", &["index"], &self.gpus);
        self.processes = changes(&mut doc, "processes", &["pid", "gpu"], &self.processes);
        self.warnings(&mut doc);
        crate::format::json::line(&doc).unwrap_or_default()
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

/// Replaces each row of `doc[list]` by its key fields and what changed since `before`; returns
/// the rows as they are now, for the next line.
fn changes(
    doc: &mut Value,
    list: &str,
    keys: &[&str],
    before: &HashMap<Vec<u64>, Map<String, Value>>,
) -> HashMap<Vec<u64>, Map<String, Value>> {
    let mut now = HashMap::new();
    for row in array(doc, list) {
        let Some(object) = row.as_object_mut() else {
            continue;
        };
        let key: Vec<u64> = keys
            .iter()
            .map(|k| object.get(*k).and_then(Value::as_u64).unwrap_or(u64::MAX))
            .collect();
        let mut current = object.clone();
        match before.get(&key) {
            None => {
                object.retain(|_, v| !v.is_null());
                object.values_mut().for_each(strip_nulls);
            }
            Some(previous) => {
                object.retain(|k, v| {
                    keys.contains(&k.as_str())
                        || (!FIRST_ONLY.contains(&k.as_str())
                            && previous.get(k).unwrap_or(&Value::Null) != v)
                });
                for name in NESTED_CHANGES {
                    let was = previous.get(*name).and_then(Value::as_object);
                    let is = object.get_mut(*name).and_then(Value::as_object_mut);
                    if let (Some(was), Some(is)) = (was, is) {
                        is.retain(|k, v| was.get(k).unwrap_or(&Value::Null) != v);
                        hold_small_moves(was, is, &mut current, name);
                        if is.is_empty() {
                            object.remove(*name);
                        }
                    }
                }
            }
        }
        now.insert(key, current);
    }
    now
}

/// Leaves out a cgroup's memory use (its own, and that of the cgroup setting its limit) that
/// moved by less than 1% since it was last written, and keeps the written figure as the
/// baseline in `current`, so the error never accumulates.
fn hold_small_moves(
    was: &Map<String, Value>,
    is: &mut Map<String, Value>,
    current: &mut Map<String, Value>,
    name: &str,
) {
    const FIELDS: [&str; 2] = ["memory_current_bytes", "memory_limit_used_bytes"];
    for field in FIELDS {
        let (Some(old), Some(new)) = (
            was.get(field).and_then(Value::as_u64),
            is.get(field).and_then(Value::as_u64),
        ) else {
            continue;
        };
        if old.abs_diff(new) < old / 100 {
            is.remove(field);
            let baseline = current.get_mut(name).and_then(Value::as_object_mut);
            if let Some(baseline) = baseline {
                baseline.insert(field.into(), Value::from(old));
            }
        }
    }
}

fn array<'a>(doc: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    doc.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
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
        assert!(
            second["gpus"][0].get("utilization_percent").is_none(),
            "unchanged"
        );
        assert_eq!(second["gpus"][0]["index"], 0);
        assert!(second["processes"][0].get("command").is_none());
        assert_eq!(second["processes"][0]["pid"], 7);
        let third: Value = serde_json::from_str(&compactor.line(&snapshot("t9"))).unwrap();
        assert_eq!(
            third["warnings"][0]["message"], "a long sentence",
            "a new since"
        );
    }

    #[test]
    fn a_cgroup_lists_only_its_changed_fields_after_the_first_line() {
        let mut compactor = Compactor::default();
        let with_memory = |bytes: u64| {
            let mut snap = snapshot("t0");
            snap.processes[0].cgroup = Some(std::sync::Arc::new(crate::model::Cgroup {
                path: "/docker/x".into(),
                memory_current_bytes: Some(bytes),
                // The use of the cgroup above that sets the limit, which holds this one.
                memory_limit_used_bytes: Some(bytes * 4),
                ..Default::default()
            }));
            snap
        };
        let first: Value = serde_json::from_str(&compactor.line(&with_memory(1))).unwrap();
        assert_eq!(first["processes"][0]["cgroup"]["path"], "/docker/x");
        let second: Value = serde_json::from_str(&compactor.line(&with_memory(2))).unwrap();
        let cgroup = second["processes"][0]["cgroup"].as_object().unwrap();
        assert_eq!(cgroup.len(), 2, "{cgroup:?}");
        assert_eq!(cgroup["memory_current_bytes"], 2);
        assert_eq!(cgroup["memory_limit_used_bytes"], 8);
        let third: Value = serde_json::from_str(&compactor.line(&with_memory(2))).unwrap();
        assert!(third["processes"][0].get("cgroup").is_none());
        // Moves under 1% of the written figure wait until they add up to 1%.
        let mut written = Vec::new();
        let mut written_above = Vec::new();
        for bytes in [1000, 1005, 1009, 1011, 1012] {
            let line: Value = serde_json::from_str(&compactor.line(&with_memory(bytes))).unwrap();
            let cgroup = &line["processes"][0]["cgroup"];
            written.push(cgroup["memory_current_bytes"].as_u64());
            written_above.push(cgroup["memory_limit_used_bytes"].as_u64());
        }
        assert_eq!(written, [Some(1000), None, None, Some(1011), None]);
        assert_eq!(written_above, [Some(4000), None, None, Some(4044), None]);
    }

    /// A reader that applies each line's changes to what it has gets every row as it is.
    #[test]
    fn applying_the_changes_rebuilds_every_row() {
        let mut compactor = Compactor::default();
        let mut rows: HashMap<u64, Map<String, Value>> = HashMap::new();
        for step in 0..4u32 {
            let mut snap = snapshot("t0");
            snap.gpus[0].utilization_percent = (step != 2).then_some(step * 10);
            snap.gpus[0].temperature_c = Some(40 + step / 2);
            if step == 3 {
                snap.gpus[0].name = Some("renamed".into());
            }
            let line: Value = serde_json::from_str(&compactor.line(&snap)).unwrap();
            let row = rows.entry(0).or_default();
            for (k, v) in line["gpus"][0].as_object().unwrap() {
                row.insert(k.clone(), v.clone());
            }
            row.retain(|_, v| !v.is_null());
            let mut full = serde_json::to_value(&snap.gpus[0]).unwrap();
            strip_nulls(&mut full);
            assert_eq!(&Value::Object(row.clone()), &full, "step {step}");
        }
    }
}
