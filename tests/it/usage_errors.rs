//! Malformed flag values of the subcommands exit 2, the usage error of the README's exit status
//! table, whether clap reads them or the subcommand does after it; a well-formed value that
//! fails later (an unreachable Prometheus) stays 1. An environment variable set but empty is
//! no flag given an empty value: it counts as unset.

use crate::common;

use std::process::{Command, Output};

use common::fake_nvml::{fake_nvml_library_dir, ScenarioFile};
use common::output_within_patience;

fn torchtop(args: &[&str]) -> Output {
    output_within_patience(
        Command::new(common::torchtop_binary())
            .args(args)
            .env_remove("TORCHTOP_PROMETHEUS")
            .env("XDG_CONFIG_HOME", "/nonexistent/torchtop-usage-errors"),
    )
}

/// A review: `torchtop cluster --prometheus not-a-url --once` exited 1 with its sentence.
#[test]
fn malformed_flag_values_of_every_subcommand_exit_2_with_a_sentence() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let config = scratch.path().join("config.toml");
    std::fs::write(&config, "[cluster]\nprometheus = \"prometheus:9090\"\n").unwrap();
    let config = config.to_str().unwrap();
    let web = scratch.path().join("web.yml");
    std::fs::write(&web, "tls_server_config: [\n").unwrap();
    let web = web.to_str().unwrap();
    let cases: [(&[&str], &str); 10] = [
        (
            &["cluster", "--prometheus", "not-a-url", "--once"],
            "is not a URL",
        ),
        (
            &["cluster", "--prometheus", "ftp://h:21", "--once"],
            "not an http",
        ),
        (&["cluster", "--once"], "say where Prometheus is"),
        (
            &["--config", config, "cluster", "--once"],
            "give Prometheus as",
        ),
        (
            &["serve", "--listen", "nowhere:port"],
            "not an address to listen on",
        ),
        (
            &["serve", "--listen", "127.0.0.1:0", "--web.config.file", web],
            "web.yml",
        ),
        (&["record", "--duration", "soon"], "soon"),
        (&["record", "--max-size", "big"], "big"),
        (
            &["replay", "--demo", "--json", "--from", "noon-ish"],
            "noon-ish",
        ),
        (&["replay", "--demo", "--speed", "3"], "'3'"),
    ];
    for (args, sentence) in cases {
        let output = torchtop(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(sentence), "{args:?}: {stderr}");
    }
    // Well formed and unreachable is not a usage error.
    let output = torchtop(&["cluster", "--prometheus", "http://127.0.0.1:1", "--once"]);
    assert_eq!(output.status.code(), Some(1));
}

/// A README review: `serve` and `cluster` read only `--config`, never the default file that
/// the monitor, `--once` and `record` read, so a rule turned off there still alerted from
/// `serve`, and a typo in it went unsaid.
#[test]
fn serve_and_cluster_read_the_default_config_file() {
    let home = tempfile::tempdir().expect("a scratch directory");
    let dir = home.path().join("torchtop");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("config.toml");
    std::fs::write(&file, "[rules.leek]\nenabled = false\n").unwrap();
    let with_home = |args: &[&str]| {
        output_within_patience(
            Command::new(common::torchtop_binary())
                .args(args)
                .env_remove("TORCHTOP_PROMETHEUS")
                .env("XDG_CONFIG_HOME", home.path()),
        )
    };
    let output = with_home(&["serve", "--listen", "127.0.0.1:0"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("leek"), "{stderr}");

    std::fs::write(&file, "[cluster]\nprometheus = \"http://127.0.0.1:1\"\n").unwrap();
    let output = with_home(&["cluster", "--once"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "read, then unreachable: {stderr}"
    );
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
}

/// A review: `TORCHTOP_READONLY= torchtop --once` stopped with "invalid value '' for
/// '--readonly'", and `TORCHTOP_NVML_LIB=` with "a value is required for '--nvml-lib <PATH>'":
/// flags never typed. Empty, as `NO_COLOR=`, they count as unset.
#[test]
fn an_empty_environment_variable_counts_as_unset() {
    let scenario = ScenarioFile::new("[[gpu]]\nname = \"Fake One\"\n");
    let once = |name: &str| {
        let mut command = Command::new(common::torchtop_binary());
        command
            .args(["--once", "--json"])
            .envs(scenario.env())
            .env("XDG_CONFIG_HOME", "/nonexistent/torchtop-usage-errors")
            // The default library name finds the fake one where TORCHTOP_NVML_LIB is unset.
            .env("LD_LIBRARY_PATH", fake_nvml_library_dir())
            .env(name, "");
        output_within_patience(&mut command)
    };
    for name in ["TORCHTOP_READONLY", "TORCHTOP_NVML_LIB"] {
        let output = once(name);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{name}=: {stderr}");
        let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(doc["gpus"][0]["name"], "Fake One", "{name}=: {doc}");
    }
    // A subcommand's variable too: the sentence for no Prometheus, not an empty URL's.
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["cluster", "--once"])
            .env("TORCHTOP_PROMETHEUS", "")
            .env("XDG_CONFIG_HOME", "/nonexistent/torchtop-usage-errors"),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("say where Prometheus is"), "{stderr}");
}

/// A review: `torchtop --readonly replay --demo` said "unexpected argument '--demo'": the flag
/// took an optional value and swallowed the subcommand, so an alias `torchtop --readonly`
/// broke every one. It takes none now.
#[test]
fn readonly_before_a_subcommand_leaves_it_a_subcommand() {
    let output = torchtop(&["--readonly", "replay", "--demo", "--summary"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!output.stdout.is_empty());
    // Refused by the subcommand itself, past clap.
    for (args, sentence) in [
        (
            &["--readonly", "serve", "--listen", "nowhere:port"][..],
            "not an address to listen on",
        ),
        (&["--readonly", "record", "--duration", "soon"], "soon"),
    ] {
        let output = torchtop(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(sentence), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("unexpected argument"),
            "{args:?}: {stderr}"
        );
    }
}
