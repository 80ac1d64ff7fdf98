//! The overhead benchmark (`cargo bench --bench overhead`): the release binary in a
//! pseudo-terminal against fake-NVML scenarios, measured from /proc as an outside observer.
//!
//! For each scenario it reports CPU milliseconds per second of wall time, RSS (now and peak),
//! wake-ups per second (context switches of all threads), time from spawn to the first frame,
//! and `--once --json` latency. When nvtop or nvitop is on PATH it runs them on the same
//! scenario at the same time and prints torchtop's CPU ratio to each: the figure that counts on
//! a noisy machine. Not part of `cargo test`: it is a measurement, not a pass/fail test.
//!
//! Environment: TORCHTOP_BENCH_SECONDS (measured window, default 20), TORCHTOP_BENCH_WARMUP
//! (default 3).

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fake_nvml::{env_refs, fill_pids, many_gpus_scenario, ScenarioFile, Sleepers};
use common::pty::PtySession;

struct Scenario {
    name: &'static str,
    fixture: Fixture,
    gpu_processes: usize,
    idle_host_processes: usize,
}

/// Where a scenario's text comes from: a file in tests/fixtures, or written here (the large
/// ones, which would be thousands of lines as a file).
#[derive(Clone, Copy)]
enum Fixture {
    File(&'static str),
    /// GPUs and processes, the processes spread over the GPUs in turn.
    Generated {
        gpus: usize,
    },
}

const SCENARIOS: [Scenario; 6] = [
    Scenario {
        name: "4 GPUs, 20 procs",
        fixture: Fixture::File("four_gpus_20_procs.toml"),
        gpu_processes: 20,
        idle_host_processes: 0,
    },
    Scenario {
        name: "8 GPUs, 64 procs",
        fixture: Fixture::File("eight_gpus.toml"),
        gpu_processes: 64,
        idle_host_processes: 0,
    },
    Scenario {
        name: "4 GPUs, 20 procs + 2000 idle",
        fixture: Fixture::File("four_gpus_20_procs.toml"),
        gpu_processes: 20,
        idle_host_processes: 2000,
    },
    Scenario {
        name: "8 GPUs, 64 procs + 2000 idle",
        fixture: Fixture::File("eight_gpus.toml"),
        gpu_processes: 64,
        idle_host_processes: 2000,
    },
    Scenario {
        name: "16 GPUs, 16 procs",
        fixture: Fixture::Generated { gpus: 16 },
        gpu_processes: 16,
        idle_host_processes: 0,
    },
    Scenario {
        name: "16 GPUs, 1000 procs",
        fixture: Fixture::Generated { gpus: 16 },
        gpu_processes: 1000,
        idle_host_processes: 0,
    },
];

/// What was measured of one running program over the window.
#[derive(Debug, Clone, Copy)]
struct Usage {
    cpu_ms_per_s: f64,
    rss_mib: f64,
    peak_rss_mib: f64,
    wakeups_per_s: f64,
}

/// CPU time in ns and context switches, summed over every thread of `pid`.
fn cpu_and_switches(pid: u32) -> Option<(u64, u64)> {
    let mut cpu_ns = 0u64;
    let mut switches = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let dir = task.ok()?.path();
        let schedstat = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
        cpu_ns += schedstat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        for line in status.lines() {
            if line.starts_with("voluntary_ctxt_switches")
                || line.starts_with("nonvoluntary_ctxt_switches")
            {
                switches += line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            }
        }
    }
    Some((cpu_ns, switches))
}

fn status_kib(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Measures several programs over the same window, so they share the same load.
fn measure(pids: &[u32], window: Duration) -> Vec<Usage> {
    let before: Vec<_> = pids
        .iter()
        .map(|p| cpu_and_switches(*p).unwrap_or((0, 0)))
        .collect();
    let started = Instant::now();
    std::thread::sleep(window);
    let wall = started.elapsed().as_secs_f64();
    pids.iter()
        .zip(before)
        .map(|(pid, (cpu0, sw0))| {
            let (cpu1, sw1) = cpu_and_switches(*pid).unwrap_or((cpu0, sw0));
            Usage {
                cpu_ms_per_s: (cpu1 - cpu0) as f64 / 1e6 / wall,
                rss_mib: status_kib(*pid, "VmRSS:") / 1024.0,
                peak_rss_mib: status_kib(*pid, "VmHWM:") / 1024.0,
                wakeups_per_s: (sw1 - sw0) as f64 / wall,
            }
        })
        .collect()
}

/// The fake library built with optimizations, so its own cost weighs little in the figures.
fn release_fake_library() -> PathBuf {
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
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        target.join("release").join("libnvidia_ml.so"),
        dir.join("libnvidia-ml.so.1"),
    )
    .unwrap();
    dir.join("libnvidia-ml.so.1")
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

fn once_latency_ms(binary: &Path, env: &[(String, String)]) -> f64 {
    let mut runs: Vec<f64> = (0..9)
        .map(|_| {
            let started = Instant::now();
            let output = Command::new(binary)
                .args(["--once", "--json"])
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .output()
                .expect("run torchtop --once --json");
            assert!(output.status.success());
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn seconds_from_env(key: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(key)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let window = seconds_from_env("TORCHTOP_BENCH_SECONDS", 20);
    let warmup = seconds_from_env("TORCHTOP_BENCH_WARMUP", 3);
    let binary = common::torchtop_binary();
    let library = release_fake_library();
    let library_dir = library.parent().unwrap().to_path_buf();
    let nvtop = on_path("nvtop");
    let nvitop = on_path("nvitop");
    println!(
        "torchtop overhead benchmark: 1 s refresh, {}s window after {}s warm-up",
        window.as_secs(),
        warmup.as_secs()
    );
    println!(
        "nvtop: {}; nvitop: {}",
        nvtop
            .as_ref()
            .map_or("not installed".into(), |p| p.display().to_string()),
        nvitop
            .as_ref()
            .map_or("not installed".into(), |p| p.display().to_string())
    );
    println!();
    println!("| scenario | tool | CPU ms/s | RSS MiB (peak) | wake-ups/s | first frame ms | --once --json ms | CPU ratio |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut sixteen = Vec::new();
    for scenario in &SCENARIOS {
        let cpu = run_scenario(
            scenario,
            &binary,
            &library,
            &library_dir,
            nvtop.as_deref(),
            nvitop.as_deref(),
            window,
            warmup,
        );
        if matches!(scenario.fixture, Fixture::Generated { gpus: 16 }) {
            sixteen.push((scenario.gpu_processes as f64, cpu));
        }
    }
    print_slope(&sixteen);
}

#[allow(clippy::too_many_arguments)]
fn run_scenario(
    scenario: &Scenario,
    binary: &Path,
    library: &Path,
    library_dir: &Path,
    nvtop: Option<&Path>,
    nvitop: Option<&Path>,
    window: Duration,
    warmup: Duration,
) -> f64 {
    let gpu_procs = Sleepers::spawn(scenario.gpu_processes);
    let _idle = Sleepers::spawn(scenario.idle_host_processes);
    let file = match scenario.fixture {
        Fixture::File(name) => ScenarioFile::from_fixture(name, &gpu_procs.pids()),
        Fixture::Generated { gpus } => ScenarioFile::new(&fill_pids(
            &many_gpus_scenario(gpus, scenario.gpu_processes),
            &gpu_procs.pids(),
        )),
    };
    let env = vec![
        (
            "TORCHTOP_NVML_LIB".to_string(),
            library.display().to_string(),
        ),
        (
            "TORCHTOP_FAKE_NVML_SCENARIO".to_string(),
            file.path().display().to_string(),
        ),
    ];
    let started = Instant::now();
    let torchtop = PtySession::spawn(binary, &[], &env_refs(&env), 120, 40);
    let first_frame = torchtop
        .wait_for(Duration::from_secs(10), |s| s.contains("H100"))
        .then(|| started.elapsed().as_secs_f64() * 1000.0);
    let mut others: Vec<(&str, PtySession)> = Vec::new();
    let mut compare_env = env.clone();
    compare_env.push(("LD_LIBRARY_PATH".into(), library_dir.display().to_string()));
    if let Some(nvtop) = nvtop {
        others.push((
            "nvtop",
            PtySession::spawn(nvtop, &["-d", "10"], &env_refs(&compare_env), 120, 40),
        ));
    }
    if let Some(nvitop) = nvitop {
        others.push((
            "nvitop",
            PtySession::spawn(
                nvitop,
                &["--monitor", "full", "--interval", "1"],
                &env_refs(&compare_env),
                120,
                40,
            ),
        ));
    }
    std::thread::sleep(warmup);
    let mut pids = vec![torchtop.pid().unwrap()];
    pids.extend(others.iter().map(|(_, s)| s.pid().unwrap()));
    let usage = measure(&pids, window);
    let once_ms = once_latency_ms(binary, &env);
    let ours = usage[0];
    println!(
        "| {} | torchtop | {:.2} | {:.1} ({:.1}) | {:.1} | {} | {:.1} | |",
        scenario.name,
        ours.cpu_ms_per_s,
        ours.rss_mib,
        ours.peak_rss_mib,
        ours.wakeups_per_s,
        first_frame.map_or("no frame".into(), |ms| format!("{ms:.0}")),
        once_ms
    );
    for ((name, _), theirs) in others.iter().zip(&usage[1..]) {
        println!(
            "| {} | {name} | {:.2} | {:.1} ({:.1}) | {:.1} | | | torchtop/{name} = {:.2} |",
            scenario.name,
            theirs.cpu_ms_per_s,
            theirs.rss_mib,
            theirs.peak_rss_mib,
            theirs.wakeups_per_s,
            ours.cpu_ms_per_s / theirs.cpu_ms_per_s
        );
    }
    drop(others);
    drop(torchtop);
    ours.cpu_ms_per_s
}

/// The cost of one more GPU process: torchtop's CPU between the fewest and the most processes
/// on the same GPUs, in µs per second per process.
fn print_slope(runs: &[(f64, f64)]) {
    if let [(few, cpu_few), .., (many, cpu_many)] = runs {
        let slope_us = (cpu_many - cpu_few) * 1000.0 / (many - few);
        println!();
        println!(
            "slope at 16 GPUs, {few} to {many} GPU processes: {slope_us:.1} µs of CPU per second per process"
        );
    }
}
