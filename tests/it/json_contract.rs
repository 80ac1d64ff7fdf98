//! The `--json` contract, pinned: every field name and where it sits, as an insta snapshot of
//! the key paths of one `--once --json` document. A field renamed, moved or dropped fails here;
//! a field added shows up as a reviewed snapshot change (`cargo insta review`). Values are left
//! out on purpose: they depend on the machine, and the value tests live in `once_fake_nvml`.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;

use common::fake_nvml::{ScenarioFile, Sleepers};
use common::output_within_patience;
use serde_json::Value;

/// Arrays whose elements are not described: which warnings fire depends on the host (swap,
/// RAM), so their shape is pinned by the warning unit tests instead.
const NOT_DESCENDED: [&str; 1] = ["warnings"];

/// Every key path in `value`: `a.b` for objects, `a[].c` for the keys of any element.
fn key_paths(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                out.insert(path.clone());
                if !NOT_DESCENDED.contains(&key.as_str()) {
                    key_paths(child, &path, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                key_paths(item, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_json_field_names_are_the_documented_contract() {
    let sleepers = Sleepers::spawn(2);
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &sleepers.pids());
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["--once", "--json"])
            .envs(scenario.env()),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).expect("--once --json prints JSON");
    assert_eq!(
        doc["schema"], 1,
        "the schema version is part of the contract"
    );
    let mut paths = BTreeSet::new();
    key_paths(&doc, "", &mut paths);
    let listing: Vec<String> = paths.into_iter().collect();
    insta::assert_snapshot!("once_json_key_paths", listing.join("\n"));
}
