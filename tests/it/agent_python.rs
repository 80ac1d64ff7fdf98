//! Runs the Python agent's unittest suite (tests/python) so that `cargo test` covers it: the
//! whole suite under `python3`, and the agent's own modules under every other CPython 3.8+ found
//! on this machine (`$TORCHTOP_TEST_PYTHONS`, `python3.N` on PATH, pyenv's versions).
//!
//! The real-torch DataLoader test in the suite needs an interpreter that can `import torch`:
//! `$TORCHTOP_TEST_TORCH_PYTHON`, else `target/torch-ci/venv/bin/python`; it says when it skips.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs `python -m unittest discover` over tests/python; None when `python` is not installed.
fn run_suite(python: &str, pattern: &str) -> Option<Output> {
    match Command::new(python)
        .args([
            "-m",
            "unittest",
            "discover",
            "-s",
            "tests/python",
            "-p",
            pattern,
            "-v",
        ])
        .current_dir(ROOT)
        .env_remove("PYTHONPATH")
        .env_remove("TORCHTOP_AGENT_DIR")
        .output()
    {
        Ok(output) => Some(output),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("cannot run {python}: {e}"),
    }
}

/// Checks that the suite passed and ran at least `min` tests; returns how many ran.
fn check_report(python: &str, output: &Output, min: usize) -> usize {
    // unittest reports on stderr.
    let report = String::from_utf8_lossy(&output.stderr);
    println!("{report}");
    assert!(
        output.status.success(),
        "the Python agent's tests failed under {python}:\n{report}"
    );
    let ran: usize = report
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .expect("unittest printed no 'Ran N tests' line");
    assert!(
        ran >= min,
        "only {ran} Python tests ran under {python}; discovery lost some"
    );
    assert!(
        report.trim_end().ends_with("OK") || report.contains("\nOK"),
        "{report}"
    );
    ran
}

#[test]
fn python_agent_unittests_pass() {
    let Some(output) = run_suite("python3", "test*.py") else {
        common::skip_or_fail("python3 is not installed, so the Python agent's tests cannot run");
        return;
    };
    check_report("python3", &output, 50);
}

#[test]
fn python_agent_unittests_pass_on_other_pythons() {
    let listing = Command::new("python3")
        .args([
            "-c",
            "import sys; sys.path.insert(0, 'tests/python')\n\
             from agent_testlib import other_pythons\n\
             mine = sys.version_info[:2]\n\
             for v, p in sorted(other_pythons().items()):\n    \
                 if v != mine: print('%d.%d %s' % (v[0], v[1], p))",
        ])
        .current_dir(ROOT)
        .output();
    let Ok(listing) = listing else {
        common::skip_or_fail("python3 is not installed");
        return;
    };
    assert!(
        listing.status.success(),
        "listing the other interpreters failed: {}",
        String::from_utf8_lossy(&listing.stderr)
    );
    let others: Vec<(String, String)> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter_map(|l| {
            let (version, path) = l.split_once(' ')?;
            Some((version.to_string(), path.to_string()))
        })
        .collect();
    if others.is_empty() {
        println!(
            "skipped: no CPython 3.8+ besides python3 here (set TORCHTOP_TEST_PYTHONS to add some)"
        );
        return;
    }
    for (version, path) in &others {
        assert!(Path::new(path).is_absolute(), "{path}");
        let output = run_suite(path, "test_agent*.py").expect("the interpreter went away");
        let ran = check_report(path, &output, 45);
        println!("Python {version} ({path}): {ran} agent tests passed");
    }
}
