//! What the soak and agent-attack benchmarks share: the release fake NVML library, the
//! torchtop binary under test, and figures of a running process read from /proc.
// Shared by several benchmark binaries, each of which uses a part: `pub` is their interface.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary to measure: `TORCHTOP_BENCH_BINARY` when set (to compare two builds), else the
/// one cargo built for this benchmark.
pub fn torchtop_binary() -> PathBuf {
    std::env::var_os("TORCHTOP_BENCH_BINARY").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_torchtop")),
        PathBuf::from,
    )
}

/// The fake library built with optimizations, so its own cost weighs little in the figures.
pub fn release_fake_library() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = root.join("target").join("fake-nvml-release");
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "fake-nvml",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(root)
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .expect("run cargo");
    assert!(status.success(), "building the fake NVML library failed");
    let dir = target.join("lib");
    std::fs::create_dir_all(&dir).expect("create the library directory");
    let installed = dir.join("libnvidia-ml.so.1");
    let staging = dir.join(format!(".libnvidia-ml.so.1.{}", std::process::id()));
    std::fs::copy(target.join("release").join("libnvidia_ml.so"), &staging)
        .expect("copy the fake library");
    std::fs::rename(&staging, &installed).expect("install the fake library");
    installed
}

/// A `kB` field of /proc/PID/status (VmRSS, VmHWM...) in KiB; `None` once the process is gone.
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// The number of threads of `pid`.
pub fn threads(pid: u32) -> Option<u64> {
    status_kib(pid, "Threads:")
}

/// CPU time of every thread of `pid` so far, in seconds (utime + stime from /proc/PID/stat).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks)
}

/// Seconds from the environment variable `key`, else `default`.
pub fn seconds_from_env(key: &str, default: f64) -> f64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .unwrap_or(default)
}

/// The least-squares slope of `points` (x, y).
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}
