//! Tests of the config file: the defaults, the checks, and the line and key each error names.

use std::path::Path;

use super::*;
use crate::config::key_span;
use crate::rules::RulesConfig;

#[test]
fn the_default_file_parses_to_the_rust_defaults() {
    let parsed = parse(DEFAULT_CONFIG_TOML).expect("default config parses");
    assert_eq!(parsed, Config::default());
    assert_eq!(print_default(), DEFAULT_CONFIG_TOML);
}

/// The `[ui]` table is written there as a comment (F2 writes it); it must still say the defaults.
/// A review: it said `hidden_columns = []` while four columns are hidden by default.
#[test]
fn the_commented_ui_table_of_the_default_file_is_the_default() {
    let start = DEFAULT_CONFIG_TOML
        .find("\n# [ui]\n")
        .expect("a commented [ui] table");
    let text: String = DEFAULT_CONFIG_TOML[start + 1..]
        .lines()
        .map(|line| line.strip_prefix("# ").unwrap_or(line))
        .map(|line| format!("{line}\n"))
        .collect();
    let table: toml::Table = toml::from_str(&text).expect("the commented table parses");
    let (ui, problem) = crate::config::UiConfig::from_value(table.get("ui"), Some(&text));
    assert_eq!(problem, None);
    assert_eq!(ui, crate::config::UiConfig::default(), "{text}");
    let written = table["ui"].as_table().unwrap();
    for key in ["theme", "history", "hidden_columns", "panels"] {
        assert!(written.contains_key(key), "{key} not written: {text}");
    }
    assert_eq!(written["panels"].as_table().unwrap().len(), 6, "{text}");
}

#[test]
fn every_default_key_is_written_in_the_default_file() {
    let defaults: toml::Table = toml::from_str(&toml::to_string(&Config::default()).unwrap())
        .expect("the defaults serialize to TOML");
    let mut missing = Vec::new();
    for (table, rules) in &defaults {
        let toml::Value::Table(rules) = rules else {
            continue;
        };
        for (rule, keys) in rules {
            let keys: Vec<String> = match keys {
                toml::Value::Table(keys) => keys.keys().map(|k| format!("{rule}.{k}")).collect(),
                _ => vec![rule.clone()],
            };
            for key in keys {
                let full = format!("{table}.{key}");
                if key_span(DEFAULT_CONFIG_TOML, &full).is_none() {
                    missing.push(full);
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "missing from assets/config.default.toml: {missing:?}"
    );
}

#[test]
fn an_empty_file_and_a_partial_file_keep_the_other_defaults() {
    assert_eq!(parse("").unwrap(), Config::default());
    let config = parse("[rules.leak]\nwindow_seconds = 30\n").unwrap();
    assert_eq!(config.rules.leak.window_seconds.get(), 30.0);
    assert_eq!(config.rules.leak.min_samples, 6);
    assert_eq!(config.rules.oom_risk, RulesConfig::default().oom_risk);
}

#[test]
fn an_unknown_key_is_named_with_its_line() {
    let text = "[rules.leak]\nwindow_seconds = 30\nwindow_secs = 30\n";
    let error = parse(text).unwrap_err();
    assert!(error.contains("line 3"), "{error}");
    assert!(error.contains("`rules.leak.window_secs`"), "{error}");
}

#[test]
fn an_unknown_table_is_named_with_its_line() {
    let text = "# comment\n[rules.lek]\nwindow_seconds = 30\n";
    let error = parse(text).unwrap_err();
    assert!(error.contains("rules.lek"), "{error}");
    assert!(error.contains("line 2"), "{error}");
}

#[test]
fn a_wrong_type_names_the_key_and_the_line() {
    let text = "# thresholds\n[rules]\noom_risk.memory_fraction = \"high\"\n";
    let error = parse(text).unwrap_err();
    assert!(error.contains("line 3"), "{error}");
    assert!(
        error.contains("`rules.oom_risk.memory_fraction`"),
        "{error}"
    );
    assert!(error.contains("string"), "{error}");
}

#[test]
fn a_syntax_error_names_the_line() {
    let error = parse("[rules.swap]\nwindow_seconds = = 3\n").unwrap_err();
    assert!(error.contains("line 2"), "{error}");
}

#[test]
fn an_out_of_range_value_names_the_key_and_the_line() {
    let text = "[rules.oom_risk]\n\nmemory_fraction = 1.5\n";
    let error = parse(text).unwrap_err();
    assert_eq!(
        error,
        "line 3: key `rules.oom_risk.memory_fraction` must be a fraction from 0 to 1 (got 1.5)"
    );
    let error = parse("[rules.throttle]\nreasons = [\"hot\"]\n").unwrap_err();
    assert!(
        error.starts_with("line 2: key `rules.throttle.reasons`"),
        "{error}"
    );
    assert!(error.contains("\"hot\""), "{error}");
}

#[test]
fn load_names_the_file_and_reads_it() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let good = dir.join("good.toml");
    std::fs::write(&good, "[rules.swap]\navailable_fraction = 0.25\n").unwrap();
    assert_eq!(
        load(&good).unwrap().rules.swap.available_fraction.get(),
        0.25
    );
    let bad_file = dir.join("bad.toml");
    std::fs::write(&bad_file, "[rules.swap]\nfoo = 1\n").unwrap();
    let error = load(&bad_file).unwrap_err();
    assert!(error.contains("bad.toml"), "{error}");
    assert!(error.contains("line 2"), "{error}");
    let missing = load(&dir.join("missing.toml")).unwrap_err();
    assert!(missing.contains("cannot read config file"), "{missing}");
}

#[test]
fn an_endless_file_is_refused_after_one_mib() {
    let error = load(Path::new("/dev/zero")).unwrap_err();
    assert!(error.contains("larger than 1 MiB"), "{error}");
}

#[test]
fn windows_are_bounded() {
    let error = parse("[rules.leak]\nwindow_seconds = 1e308\n").unwrap_err();
    assert_eq!(
        error,
        "line 2: key `rules.leak.window_seconds` must be between 0 and 86400 seconds (got 1e308)"
    );
    assert!(parse("[rules.ecc]\nwindow_seconds = 86400\n").is_ok());
}

/// A FIFO nobody writes to: open() used to wait for a writer for ever, silently.
#[test]
fn a_pipe_nobody_writes_to_gets_a_sentence_and_a_written_one_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.fifo");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let (done, answer) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let _ = done.send(load(&path).map(|_| ()));
    });
    let error = answer
        .recv_timeout(crate::test_ci::PATIENCE)
        .expect("reading a FIFO nobody writes to returned")
        .unwrap_err();
    assert!(
        error.contains("is a pipe") && error.contains("nothing came"),
        "{error}"
    );

    let path = fifo.clone();
    let writer = std::thread::spawn(move || {
        std::fs::write(&path, "[rules.swap]\navailable_fraction = 0.25\n").unwrap();
    });
    let config = load(&fifo).unwrap();
    writer.join().unwrap();
    assert_eq!(config.rules.swap.available_fraction.get(), 0.25);
}
