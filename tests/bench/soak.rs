//! The soak benchmark (`cargo bench --bench soak`): does torchtop's memory stay flat in a long
//! run? It runs the release binary at `-d 0.1` against the fake NVML, with one stand-in-torch
//! agent started under `torchtop run` and GPU processes that come and go every few seconds,
//! samples the monitor's VmRSS once a second after a warm-up, and prints the growth in MiB per
//! hour (least squares over the measured window). Not part of `cargo test`: it is a
//! measurement, not a pass/fail test.
//!
//! The rules' windows are cut to `TORCHTOP_SOAK_WINDOW` seconds (default 20) through a config
//! file, so every window has filled well before the warm-up ends; with
//! `TORCHTOP_SOAK_WINDOW=default` the built-in windows (the longest is 600 s) stay, and the
//! warm-up must then be longer than that. The TUI's sparklines keep 300 s: their memory is
//! reserved up front but touched, and so counted in RSS, as they fill, hence the default
//! warm-up of 320 s.
//!
//! Arguments: `--seconds N` (measured window, default 180; or `TORCHTOP_SOAK_SECONDS`).
//! Environment: `TORCHTOP_SOAK_WARMUP` (default 320), `TORCHTOP_SOAK_CHURN` (seconds between
//! process list changes, default 3), `TORCHTOP_SOAK_MODE` (`tui`, the default, in a
//! pseudo-terminal; or `json`, the `--json` stream), `TORCHTOP_SOAK_AGENT` (`off`: no agent, to
//! tell its share apart; `restart`: a new agent process at each churn), `TORCHTOP_BENCH_BINARY`
//! (measure another build), `TORCHTOP_SOAK_PROGRAM=nvtop` (measure nvtop from `PATH` instead,
//! at its fastest refresh, 0.1 s).

#[path = "../common/mod.rs"]
mod common;
mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::fake_nvml::{env_refs, ScenarioFile};
use common::pty::PtySession;

/// Sleepers that stand in for GPU processes; two of them are replaced at each churn.
const POOL: usize = 8;
const REPLACED_PER_CHURN: usize = 2;

struct Options {
    seconds: f64,
    warmup: f64,
    churn: f64,
    window: Option<f64>,
    json: bool,
    agent: bool,
    /// Restart the agent's process at each churn, so its pid and connection churn too.
    restart_agent: bool,
}

impl Options {
    fn parse() -> Self {
        let args: Vec<String> = std::env::args().collect();
        let from_args = args
            .iter()
            .position(|a| a == "--seconds")
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok());
        let window = match std::env::var("TORCHTOP_SOAK_WINDOW").as_deref() {
            Ok("default") => None,
            _ => Some(support::seconds_from_env("TORCHTOP_SOAK_WINDOW", 20.0)),
        };
        Options {
            seconds: from_args
                .unwrap_or_else(|| support::seconds_from_env("TORCHTOP_SOAK_SECONDS", 180.0)),
            warmup: support::seconds_from_env("TORCHTOP_SOAK_WARMUP", 320.0),
            churn: support::seconds_from_env("TORCHTOP_SOAK_CHURN", 3.0).max(0.5),
            window,
            json: std::env::var("TORCHTOP_SOAK_MODE").as_deref() == Ok("json"),
            agent: std::env::var("TORCHTOP_SOAK_AGENT").as_deref() != Ok("off"),
            restart_agent: std::env::var("TORCHTOP_SOAK_AGENT").as_deref() == Ok("restart"),
        }
    }
}

/// The stand-in training process: `torchtop run` starts the agent in it.
struct Agent {
    child: Child,
}

impl Agent {
    fn start(binary: &Path, agent_dir: &Path) -> Self {
        let script =
            "import time, torch\ntorch.cuda._fake_init((0,))\nwhile True:\n    time.sleep(0.05)\n";
        let fake_torch = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/fake_torch");
        let child = Command::new(binary)
            .args(["run", "--", "python3", "-c", script])
            .env("PYTHONPATH", fake_torch)
            .env("TORCHTOP_AGENT_DIR", agent_dir)
            .env("TORCHTOP_AGENT_INTERVAL_MS", "100")
            .stdin(Stdio::null())
            .spawn()
            .expect("start the stand-in training process under torchtop run");
        let socket = agent_dir.join(format!("{}.sock", child.id()));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "the agent socket never appeared");
            std::thread::sleep(Duration::from_millis(50));
        }
        Agent { child }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sleeper() -> Child {
    Command::new("sleep")
        .arg("3600")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn a sleep process")
}

/// Two GPUs: the agent's process and half the pool on GPU 0, the other half on GPU 1.
fn scenario_text(agent_pid: Option<u32>, pool: &[Child]) -> String {
    let mut text = String::new();
    for gpu in 0..2 {
        text.push_str(&format!(
            "[[gpu]]\nname = \"Soak GPU {gpu}\"\nmemory_total_mib = 81920\n\
             memory_used_mib = {{ fn = \"noise\", mean = 40000, amplitude = 20000, interval_s = 1 }}\n\
             utilization_gpu = {{ fn = \"sine\", mean = 50, amplitude = 40, period_s = 7 }}\n"
        ));
        if let (0, Some(agent_pid)) = (gpu, agent_pid) {
            text.push_str(&format!(
                "[[gpu.process]]\npid = {agent_pid}\nused_memory_mib = 4000\nsm_percent = 60\n"
            ));
        }
        for child in pool.iter().skip(gpu * POOL / 2).take(POOL / 2) {
            text.push_str(&format!(
                "[[gpu.process]]\npid = {}\nused_memory_mib = 1000\nsm_percent = 20\n",
                child.id()
            ));
        }
    }
    text
}

fn config_file(dir: &Path, window: f64) -> PathBuf {
    let path = dir.join("soak.toml");
    let text = format!(
        "[rules.oom_risk]\noom_window_seconds = {window}\n\
         [rules.fragmentation]\nretries_window_seconds = {window}\n\
         [rules.leak]\nwindow_seconds = {window}\n\
         [rules.gpu_starved]\nwindow_seconds = {window}\n\
         [rules.imbalance]\nwindow_seconds = {window}\n\
         [rules.swap]\nwindow_seconds = {window}\n\
         [rules.ecc]\nwindow_seconds = {window}\n"
    );
    std::fs::write(&path, text).expect("write the soak config");
    path
}

/// The monitor under test, in a pseudo-terminal or as a `--json` stream read to the end.
enum Monitor {
    Tui(PtySession),
    Json(Child),
}

impl Monitor {
    fn start(binary: &Path, args: &[&str], env: &[(String, String)], json: bool) -> Self {
        if !json {
            return Monitor::Tui(PtySession::spawn(binary, args, &env_refs(env), 160, 50));
        }
        let mut child = Command::new(binary)
            .arg("--json")
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start torchtop --json");
        let mut out = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            let mut buffer = vec![0u8; 1 << 16];
            while matches!(out.read(&mut buffer), Ok(n) if n > 0) {}
        });
        Monitor::Json(child)
    }

    fn pid(&self) -> u32 {
        match self {
            Monitor::Tui(session) => session.pid().expect("the TUI's pid"),
            Monitor::Json(child) => child.id(),
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if let Monitor::Json(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "the benchmark's script, read top to bottom"
)]
fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let options = Options::parse();
    let binary = support::torchtop_binary();
    let library = support::release_fake_library();
    let scratch = tempfile::Builder::new()
        .prefix("torchtop-soak")
        .tempdir()
        .expect("create a scratch directory");
    let agent_dir = scratch.path().join("agents");
    let mut agent = options.agent.then(|| Agent::start(&binary, &agent_dir));
    let mut agent_pid = agent.as_ref().map(|a| a.child.id());
    let mut pool: Vec<Child> = (0..POOL).map(|_| sleeper()).collect();
    let scenario = ScenarioFile::new(&scenario_text(agent_pid, &pool));
    let mut env = vec![
        (
            "TORCHTOP_NVML_LIB".to_string(),
            library.display().to_string(),
        ),
        (
            "TORCHTOP_FAKE_NVML_SCENARIO".to_string(),
            scenario.path().display().to_string(),
        ),
    ];
    env.push(("TORCHTOP_AGENT_DIR".into(), agent_dir.display().to_string()));
    let config = options.window.map(|w| config_file(scratch.path(), w));
    let mut args = vec!["-d", "0.1"];
    if let Some(config) = &config {
        args.extend(["--config", config.to_str().expect("a UTF-8 path")]);
    }
    // nvtop in its place, for comparison: the same scenario, its delay in tenths of a second.
    let nvtop = std::env::var("TORCHTOP_SOAK_PROGRAM").as_deref() == Ok("nvtop");
    let binary = if nvtop {
        args = vec!["-d", "1"];
        let dir = library.parent().expect("the library's directory");
        env.push(("LD_LIBRARY_PATH".into(), dir.display().to_string()));
        PathBuf::from("nvtop")
    } else {
        binary
    };
    println!(
        "torchtop soak: {} ({}), -d 0.1, agent: {}, {} of {POOL} GPU processes replaced every {} s, \
         rule windows {}, {} s warm-up, {} s measured",
        binary.display(),
        if options.json { "--json" } else { "TUI" },
        match (options.agent, options.restart_agent) {
            (false, _) => "no",
            (true, false) => "one",
            (true, true) => "one, restarted at each churn",
        },
        REPLACED_PER_CHURN,
        options.churn,
        options.window.map_or("as built in".into(), |w| format!("{w} s")),
        options.warmup,
        options.seconds,
    );
    let monitor = Monitor::start(&binary, &args, &env, options.json);
    let pid = monitor.pid();
    let started = Instant::now();
    let total = Duration::from_secs_f64(options.warmup + options.seconds);
    let churn = Duration::from_secs_f64(options.churn);
    let mut next_churn = started + churn;
    let mut next_sample = started + Duration::from_secs_f64(options.warmup);
    let mut next_report = next_sample;
    let mut victim = 0usize;
    let mut samples: Vec<(f64, f64)> = Vec::new();
    while started.elapsed() < total {
        let now = Instant::now();
        if now >= next_churn {
            for _ in 0..REPLACED_PER_CHURN {
                let old = std::mem::replace(&mut pool[victim % POOL], sleeper());
                reap(old);
                victim += 1;
            }
            if options.restart_agent {
                drop(agent.take());
                agent = Some(Agent::start(&binary, &agent_dir));
                agent_pid = agent.as_ref().map(|a| a.child.id());
            }
            scenario.rewrite(&scenario_text(agent_pid, &pool));
            next_churn += churn;
        }
        if now >= next_sample {
            let Some(rss) = support::status_kib(pid, "VmRSS:") else {
                panic!("torchtop (pid {pid}) exited during the soak");
            };
            let t = now.duration_since(started).as_secs_f64();
            samples.push((t, rss as f64 / 1024.0));
            next_sample += Duration::from_secs(1);
            if now >= next_report {
                println!(
                    "t = {t:6.0} s  VmRSS {:7.2} MiB  threads {}",
                    rss as f64 / 1024.0,
                    support::threads(pid).unwrap_or(0)
                );
                next_report += Duration::from_secs(30);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = samples.first().map_or(f64::NAN, |s| s.1);
    let last = samples.last().map_or(f64::NAN, |s| s.1);
    let per_hour = support::slope(&samples).map_or(f64::NAN, |mib_per_s| mib_per_s * 3600.0);
    println!(
        "VmRSS after warm-up {first:.2} MiB, at the end {last:.2} MiB, VmHWM {:.2} MiB, \
         {} samples",
        support::status_kib(pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0,
        samples.len()
    );
    println!("growth: {per_hour:.2} MiB per hour (least squares over the measured window)");
    drop(monitor);
    for child in pool {
        reap(child);
    }
}

fn reap(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}
