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

/// Every key path in `value`: `a.b` for objects, `a[].c` for the keys of any element; the
/// fields named in `leaves` are not descended into.
fn key_paths(value: &Value, prefix: &str, leaves: &[&str], out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                out.insert(path.clone());
                if !leaves.contains(&key.as_str()) {
                    key_paths(child, &path, leaves, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                key_paths(item, &format!("{prefix}[]"), leaves, out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_json_field_names_are_the_documented_contract() {
    let sleepers = Sleepers::spawn(2);
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &sleepers.pids());
    // An empty agents' directory: an agent running on the machine (a user's, under the default
    // directory) added its row and the torch fields to the listing.
    let agents = tempfile::tempdir().unwrap();
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["--once", "--json"])
            .envs(scenario.env())
            .env("TORCHTOP_AGENT_DIR", agents.path().join("agents")),
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
    key_paths(&doc, "", &NOT_DESCENDED, &mut paths);
    let listing: Vec<String> = paths.iter().cloned().collect();
    insta::assert_snapshot!("once_json_key_paths", listing.join("\n"));
    assert_documented(&paths);
}

/// A user review: fifteen fields of `--once --json` (AMD's, cgroup figures, Slurm variables)
/// were in the document and nowhere in the README. The demo's last frame adds what one idle
/// GPU lacks: the agent's figures, cgroups, jobs, warnings and an out-of-memory report.
#[test]
fn every_json_field_is_named_in_the_readme() {
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["replay", "--demo", "--json", "--from", "-2s"]),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut paths = BTreeSet::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let doc: Value = serde_json::from_str(line).expect("replay --json prints JSON lines");
        key_paths(&doc, "", &[], &mut paths);
    }
    assert!(
        paths.contains("processes[].torch.devices[].headroom_bytes"),
        "{paths:?}"
    );
    assert_documented(&paths);
}

/// Each field's name is written in the README as `name`, `parent.name` or "name".
fn assert_documented(paths: &BTreeSet<String>) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("the README");
    let missing: Vec<&String> = (paths.iter())
        .filter(|path| {
            let name = path.rsplit(['.', ']']).next().unwrap_or(path);
            !readme.contains(&format!("`{name}`"))
                && !readme.contains(&format!(".{name}`"))
                && !readme.contains(&format!("\"{name}\""))
        })
        .collect();
    assert!(missing.is_empty(), "not named in the README: {missing:?}");
}
