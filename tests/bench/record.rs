//! The recording benchmark (`cargo bench --bench record`): what recording costs on the 8-GPU
//! scenario (tests/fixtures/eight_gpus.toml on the fake NVML) with 64 real GPU processes, 8 of
//! them stand-in training ranks with an agent (the stand-in torch), at 1 s refresh.
//!
//! - Size: `torchtop record -d 1` for TORCHTOP_BENCH_RECORD_SECONDS (default 300): the file's
//!   bytes per second, extrapolated to MB (10^6 bytes) per day, against the 50 MB budget.
//! - CPU: two monitors in pseudo-terminals (120x40) on the same scenario at the same time, one
//!   of them recording (`R`), over TORCHTOP_BENCH_REPEATS (default 5) windows of
//!   TORCHTOP_BENCH_SECONDS (default 60) each after TORCHTOP_BENCH_WARMUP (default 5): CPU ms/s
//!   of each (all threads, from schedstat), and the difference as a share of the monitor's own
//!   CPU, against the 10% budget. The two swap roles from one window to the next, so that
//!   whatever favours one of them (its place in the scheduler, the order they were started)
//!   weighs on both sides; the median and the spread of the windows are printed.
//! - The writer alone: the recorded snapshots written again in this process, µs per frame
//!   (TORCHTOP_BENCH_WRITER_ROUNDS rounds, default 5), next to what serializing them as
//!   `--json` lines and reading them back cost; and which parts of a snapshot take the bytes
//!   (the file written again with one part left out).
//!
//! With TORCHTOP_BENCH_RECORDING=FILE only the writer figures are measured, on that recording
//! (`assets/demo.ttrec` is one): a minute's check of the writer's speed, without the scenario.
//!
//! A measurement, not a pass/fail test: it prints the figures.

#[path = "../common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use torchtop::model::Snapshot;
use torchtop::record::reader::Cursor;
use torchtop::record::writer::FileWriter;
use torchtop::record::{RecordOptions, Recording};

/// A stand-in training rank: the stand-in torch on one GPU, a step every 0.25 s.
const RANK_SCRIPT: &str = "import os, time, torch\n\
torch.cuda._fake_init((int(os.environ['LOCAL_RANK']),))\n\
try:\n    import torchtop_agent\nexcept ImportError:\n    torchtop_agent = None\n\
while True:\n    time.sleep(0.25)\n    if torchtop_agent:\n        torchtop_agent.step()\n";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn seconds_from_env(key: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(key)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// The 8 ranks, started under `torchtop run` so that each gets the agent.
struct Ranks {
    children: Vec<Child>,
}

impl Ranks {
    fn start(binary: &Path, agent_dir: &Path) -> Ranks {
        let children: Vec<Child> = (0..8)
            .map(|rank| {
                Command::new(binary)
                    .args(["run", "--", "python3", "-c", RANK_SCRIPT])
                    .env("PYTHONPATH", repo().join("tests/python/fake_torch"))
                    .env("TORCHTOP_AGENT_DIR", agent_dir)
                    .env("RANK", rank.to_string())
                    .env("LOCAL_RANK", rank.to_string())
                    .env("WORLD_SIZE", "8")
                    .env("MASTER_ADDR", "127.0.0.1")
                    .env("MASTER_PORT", "29500")
                    .stdin(Stdio::null())
                    .spawn()
                    .expect("start a rank under torchtop run")
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        for child in &children {
            let socket = agent_dir.join(format!("{}.sock", child.id()));
            while !socket.exists() {
                assert!(
                    Instant::now() < deadline,
                    "no agent socket {}",
                    socket.display()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ranks { children }
    }

    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(std::result::Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Some(file) = std::env::var_os("TORCHTOP_BENCH_RECORDING") {
        let work = tempfile::tempdir().expect("a temporary directory");
        println!(
            "torchtop recording benchmark: the writer on {}",
            Path::new(&file).display()
        );
        writer_figures(Path::new(&file), work.path());
        return;
    }
    let record_for = seconds_from_env("TORCHTOP_BENCH_RECORD_SECONDS", 300);
    let window = seconds_from_env("TORCHTOP_BENCH_SECONDS", 60);
    let warmup = seconds_from_env("TORCHTOP_BENCH_WARMUP", 5);
    let repeats = count_from_env("TORCHTOP_BENCH_REPEATS", 5);
    let binary = common::torchtop_binary();
    let work = tempfile::tempdir().expect("a temporary directory");
    let agent_dir = work.path().join("agents");
    let ranks = Ranks::start(&binary, &agent_dir);
    let sleepers = Sleepers::spawn(56);
    // GPU g holds pids 8g..8g+7 in the fixture: its first one is rank g, the others sleep.
    let mut pids = Vec::with_capacity(64);
    for gpu in 0..8 {
        pids.push(ranks.pids()[gpu]);
        pids.extend_from_slice(&sleepers.pids()[gpu * 7..gpu * 7 + 7]);
    }
    let scenario = ScenarioFile::from_fixture("eight_gpus.toml", &pids);
    let mut env = scenario.env();
    env.push(("TORCHTOP_AGENT_DIR".into(), agent_dir.display().to_string()));
    env.push((
        "TORCHTOP_RECORD_DIR".into(),
        work.path().display().to_string(),
    ));
    println!(
        "torchtop recording benchmark: 8 GPUs, 64 GPU processes (8 with an agent), 1 s refresh"
    );

    let file = work.path().join("bench.ttrec");
    let started = Instant::now();
    let mut recorder = Command::new(&binary)
        .args(["record", "-o"])
        .arg(&file)
        .args(["-d", "1", "--duration"])
        .arg(format!("{}s", record_for.as_secs()))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start torchtop record");

    cpu_figures(&binary, &env, window, warmup, repeats);

    let status = recorder.wait().expect("wait for torchtop record");
    let wall = started.elapsed().as_secs_f64();
    assert!(status.success(), "torchtop record failed: {status}");
    size_figures(&file, wall);
    writer_figures(&file, work.path());
}

fn count_from_env(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// The median, smallest and largest of `values`.
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        f64::midpoint(sorted[n / 2 - 1], sorted[n / 2])
    };
    (median, sorted[0], sorted[n - 1])
}

/// Starts (or stops) the recording of `session` with `R` and waits until it shows.
fn toggle_recording(session: &mut PtySession, on: bool) {
    session.send(b"R");
    let shown = if on {
        session.wait_for(Duration::from_secs(10), |s| s.contains("REC"))
    } else {
        session.wait_for(Duration::from_secs(10), |s| s.contains("recording saved"))
    };
    assert!(
        shown,
        "the recording did not {}:\n{}",
        if on { "start" } else { "stop" },
        session.screen()
    );
}

fn cpu_figures(
    binary: &Path,
    env: &[(String, String)],
    window: Duration,
    warmup: Duration,
    repeats: usize,
) {
    let mut sessions = [
        PtySession::spawn(binary, &[], &env_refs(env), 120, 40),
        PtySession::spawn(binary, &[], &env_refs(env), 120, 40),
    ];
    for session in &sessions {
        assert!(
            session.wait_for(Duration::from_secs(15), |s| s.contains("H100")),
            "no first frame:\n{}",
            session.screen()
        );
    }
    let pids = [sessions[0].pid().unwrap(), sessions[1].pid().unwrap()];
    println!();
    println!(
        "| window | recording monitor | plain CPU ms/s | recording CPU ms/s | cost ms/s | cost % |"
    );
    println!("|---|---|---|---|---|---|");
    let (mut plain, mut costs, mut shares) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..repeats {
        let recording = round % 2;
        if round > 0 {
            toggle_recording(&mut sessions[1 - recording], false);
        }
        toggle_recording(&mut sessions[recording], true);
        std::thread::sleep(warmup);
        let before: Vec<u64> = pids.iter().map(|p| cpu_ns(*p)).collect();
        let t0 = Instant::now();
        std::thread::sleep(window);
        let wall = t0.elapsed().as_secs_f64();
        let ms: Vec<f64> = pids
            .iter()
            .zip(&before)
            .map(|(p, b)| cpu_ns(*p).saturating_sub(*b) as f64 / 1e6 / wall)
            .collect();
        let (base, with) = (ms[1 - recording], ms[recording]);
        let extra = with - base;
        println!(
            "| {} | {} | {base:.2} | {with:.2} | {extra:+.2} | {:+.1}% |",
            round + 1,
            ["A", "B"][recording],
            extra / base * 100.0
        );
        plain.push(base);
        costs.push(extra);
        shares.push(extra / base * 100.0);
    }
    let last = (repeats - 1) % 2;
    toggle_recording(&mut sessions[last], false);
    let (plain, plain_lo, plain_hi) = spread(&plain);
    let (cost, cost_lo, cost_hi) = spread(&costs);
    let (share, share_lo, share_hi) = spread(&shares);
    println!();
    println!(
        "| over {repeats} windows of {} s | median | spread |",
        window.as_secs()
    );
    println!("|---|---|---|");
    println!("| the monitor's own CPU (TUI) | {plain:.2} ms/s | {plain_lo:.2} to {plain_hi:.2} |");
    println!("| recording's cost | {cost:+.2} ms/s | {cost_lo:+.2} to {cost_hi:+.2} |");
    println!(
        "| recording's cost, share of the monitor's own | {share:+.1}% | {share_lo:+.1}% to \
         {share_hi:+.1}% (budget < 10%) |"
    );
}

fn size_figures(file: &Path, wall: f64) {
    let bytes = std::fs::metadata(file).expect("the recording").len();
    let recording = Recording::open(file).expect("open the recording");
    let frames = recording.frames().len();
    let span = match (recording.frames().first(), recording.frames().last()) {
        (Some(a), Some(b)) => b.time - a.time + 1.0,
        _ => wall,
    };
    let per_second = bytes as f64 / span;
    let per_day = per_second * 86_400.0 / 1e6;
    println!();
    println!("| recording | figure |");
    println!("|---|---|");
    println!("| frames | {frames} over {span:.0} s |");
    println!(
        "| file | {bytes} bytes ({:.0} bytes per frame) |",
        bytes as f64 / frames.max(1) as f64
    );
    println!("| extrapolated | {per_day:.1} MB per day at 1 Hz (budget 50 MB) |");
    if !recording.issues.is_empty() {
        println!("| issues | {} |", recording.issues.join("; "));
    }
}

/// Every frame of the recording at `file`, decoded.
fn snapshots(file: &Path) -> (Recording, Vec<Arc<Snapshot>>) {
    let mut recording = Recording::open(file).expect("open the recording");
    let mut cursor = Cursor::default();
    let snapshots = (0..recording.frames().len())
        .map(|i| Arc::new(recording.snapshot(&mut cursor, i).expect("decode a frame")))
        .collect();
    (recording, snapshots)
}

/// Writes `snapshots` as a new recording in `dir` (at zstd `level`, or the writer's own);
/// returns µs per frame and bytes.
fn write_all(snapshots: &[Arc<Snapshot>], dir: &Path, level: Option<i32>) -> (f64, u64) {
    let path = dir.join("again.ttrec");
    let _ = std::fs::remove_file(&path);
    let started = Instant::now();
    let mut writer = FileWriter::create(RecordOptions {
        path: path.clone(),
        max_size: None,
        interval_seconds: 1.0,
    })
    .expect("create a file");
    if let Some(level) = level {
        writer = writer.with_zstd_level(level);
    }
    for snapshot in snapshots {
        writer.write(snapshot).expect("write a frame");
    }
    let bytes = writer.finish().expect("finish");
    let us = started.elapsed().as_secs_f64() * 1e6 / snapshots.len().max(1) as f64;
    std::fs::remove_file(&path).expect("remove the file written");
    (us, bytes)
}

fn writer_figures(file: &Path, dir: &Path) {
    let (mut recording, snapshots) = snapshots(file);
    let n = snapshots.len().max(1) as f64;
    let rounds = count_from_env("TORCHTOP_BENCH_WRITER_ROUNDS", 5);
    let mut write_us = Vec::new();
    let mut bytes = 0;
    for _ in 0..rounds {
        let (us, b) = write_all(&snapshots, dir, None);
        write_us.push(us);
        bytes = b;
    }
    let (write_us, write_lo, write_hi) = spread(&write_us);
    let started = Instant::now();
    let mut json_bytes = 0usize;
    for snapshot in &snapshots {
        json_bytes += serde_json::to_string(snapshot.as_ref()).unwrap().len() + 1;
    }
    let json_us = started.elapsed().as_secs_f64() * 1e6 / n;
    let started = Instant::now();
    let mut cursor = Cursor::default();
    for i in 0..recording.frames().len() {
        recording.snapshot(&mut cursor, i).expect("decode a frame");
    }
    let read_us = started.elapsed().as_secs_f64() * 1e6 / n;
    println!();
    println!(
        "| in this process, per frame ({} frames) | figure |",
        snapshots.len()
    );
    println!("|---|---|");
    println!(
        "| recording writer (delta, zstd, file), median of {rounds} rounds | {write_us:.0} us \
         ({write_lo:.0} to {write_hi:.0}; {:.0} bytes) |",
        bytes as f64 / n
    );
    println!(
        "| `--json` line for comparison | {json_us:.0} us ({:.0} bytes) |",
        json_bytes as f64 / n
    );
    println!("| reading a frame back (replay) | {read_us:.0} us |");
    println!();
    println!("| zstd level (one round) | writer per frame | bytes per frame |");
    println!("|---|---|---|");
    for level in [1, 3, 6, 9] {
        let (us, b) = write_all(&snapshots, dir, Some(level));
        println!("| {level} | {us:.0} us | {:.0} |", b as f64 / n);
    }
    bytes_by_part(&snapshots, dir, bytes);
}

/// What each part of a snapshot costs in the file: the recording written again without it.
fn bytes_by_part(snapshots: &[Arc<Snapshot>], dir: &Path, all: u64) {
    type Cut = fn(&mut Snapshot);
    let parts: [(&str, Cut); 8] = [
        ("processes' running time", |s| {
            s.processes
                .iter_mut()
                .for_each(|p| p.running_seconds = None);
        }),
        ("processes' SM %", |s| {
            s.processes.iter_mut().for_each(|p| p.sm_percent = None);
        }),
        ("processes' CPU %", |s| {
            s.processes.iter_mut().for_each(|p| {
                p.cpu_percent = None;
                p.children_cpu_percent = None;
            });
        }),
        ("agents' figures (torch)", |s| {
            s.processes.iter_mut().for_each(|p| p.torch = None);
        }),
        ("warnings", |s| s.warnings.clear()),
        ("GPUs", |s| s.gpus.clear()),
        ("host", |s| {
            s.host = torchtop::model::HostSnapshot::default();
        }),
        ("host process table", |s| s.host_processes.clear()),
    ];
    let n = snapshots.len().max(1) as f64;
    println!();
    println!("| the same frames without | bytes per frame | share of the file |");
    println!("|---|---|---|");
    println!("| (nothing left out) | {:.0} | |", all as f64 / n);
    for (name, cut) in parts {
        let cut: Vec<Arc<Snapshot>> = snapshots
            .iter()
            .map(|s| {
                let mut s = s.as_ref().clone();
                cut(&mut s);
                Arc::new(s)
            })
            .collect();
        let (_, bytes) = write_all(&cut, dir, None);
        println!(
            "| {name} | {:.0} | {:.0}% |",
            bytes as f64 / n,
            (all as f64 - bytes as f64) / all.max(1) as f64 * 100.0
        );
    }
}
