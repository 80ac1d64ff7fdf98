//! What the tests promise a CI machine: they never skip there, and they never time anything.
//! Locally a missing program (python3, gdb, prometheus, promtool, curl, openssl...) skips the
//! test with a printed line; under CI (`CI` set, as `.ci/run` exports it) it fails the test, so
//! that CI never passes a test it did not run. And a test polls for what it waits on, against
//! one generous deadline that only keeps a broken test from hanging.
//!
//! Used by the integration tests (through `tests/common`) and by the library's unit tests
//! (through `#[path]`), so it needs nothing but std.
#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a test polls for something that should happen at once, before it gives up. Only a
/// guard against hanging: nothing a test asserts depends on it, so it can be generous enough for
/// a loaded CI machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Whether this is a CI run: `CI` is set and not empty.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// Stands a test down because this machine lacks something: prints `skipped: <why>`, or fails
/// the test under CI. The caller returns after it.
#[track_caller]
pub fn skip_or_fail(why: &str) {
    assert!(!in_ci(), "CI is set, so this test may not skip: {why}");
    println!("skipped: {why}");
}

/// Whether `program` can be started here (`program --version`). When it cannot, the test stands
/// down through [`skip_or_fail`] (a failure under CI) and the caller returns:
/// `if !require_program("gdb") { return; }`.
#[track_caller]
pub fn require_program(program: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        skip_or_fail(&format!(
            "{program} is not installed (.ci/run installs what the tests need)"
        ));
    }
    found
}
