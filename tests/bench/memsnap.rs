//! How fast `torchtop snapshot` opens a big memory snapshot, and how much memory it takes:
//! `cargo bench --bench memsnap`.
//!
//! Builds a snapshot of about a million trace entries (about 100 MB; `TORCHTOP_MEMSNAP_ENTRIES`
//! changes the count) with tests/fixtures/memsnap/make_fixtures.py, which writes what torch
//! writes: a new frame list per event over shared frame dicts. Then runs
//! `torchtop snapshot FILE --json` (read, convert, analyse, print) a few times and prints the
//! wall time, the CPU time and the peak resident memory of each run, against the goal of 2 s
//! and 4x the file.
//! It prints figures; it asserts none.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEFAULT_ENTRIES: u64 = 900_000;
const RUNS: usize = 3;

fn main() {
    let entries = std::env::var("TORCHTOP_MEMSNAP_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ENTRIES);
    let dir = std::env::temp_dir().join(format!("torchtop-memsnap-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let file = dir.join("big.pickle");
    let started = Instant::now();
    generate(entries, &file);
    let bytes = std::fs::metadata(&file).expect("the snapshot").len();
    println!(
        "memsnap: {entries} trace entries, {:.1} MB file (generated in {:.1} s)",
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    for run in 1..=RUNS {
        let (wall, cpu, peak_rss) = open(&file);
        println!(
            "memsnap: run {run}: torchtop snapshot --json took {:.2} s ({:.2} s of CPU), peak RSS \
             {:.1} MB = {:.2}x the file (goal: 2 s and 4x)",
            wall.as_secs_f64(),
            cpu.as_secs_f64(),
            peak_rss as f64 / 1e6,
            peak_rss as f64 / bytes as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn generate(entries: u64, file: &Path) {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/memsnap/make_fixtures.py");
    let status = Command::new("python3")
        .arg(script)
        .args(["--big", &entries.to_string()])
        .arg(file)
        .status()
        .expect("python3 runs make_fixtures.py");
    assert!(status.success(), "make_fixtures.py --big failed");
}

/// Runs the binary once; returns its wall time, its CPU time (user and system: what a busy
/// machine does not inflate) and its peak resident set in bytes.
#[expect(
    clippy::zombie_processes,
    reason = "the child is reaped by wait4, which also gives its resource usage"
)]
fn open(file: &Path) -> (Duration, Duration, u64) {
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_torchtop"))
        .arg("snapshot")
        .arg(file)
        .arg("--json")
        .stdout(Stdio::null())
        .spawn()
        .expect("torchtop starts");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for (std's Child is never waited on
    // here), and both pointers are to live locals.
    let waited = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) };
    let wall = started.elapsed();
    assert_eq!(waited, pid, "wait4 failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "torchtop snapshot failed"
    );
    let seconds = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let cpu = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    // Linux reports ru_maxrss in kilobytes.
    (wall, cpu, usage.ru_maxrss as u64 * 1024)
}
