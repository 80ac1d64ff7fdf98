//! The agent attack benchmark (`cargo bench --bench agent_attack`): what hostile agents cost the
//! monitor. It runs the release `torchtop --json -d 0.5` against the fake NVML and, one attack at
//! a time:
//! - **hostile**: 400 agents (each a process of its own; as root they run as uid 65534, in that
//!   user's socket directory), each sending a hello and then 1 MiB without a newline, again
//!   whenever the monitor reconnects;
//! - **devices**: one agent, listed by NVML as a GPU process, that reports 5,000 devices every
//!   200 ms;
//! - **trickle**: one agent that sends a 1 MiB line 7 bytes at a time, a write every 100 µs.
//!
//! For each it prints the monitor's largest VmRSS, its VmHWM, its most threads and the CPU
//! seconds it used. Not part of `cargo test`: it is a measurement, not a pass/fail test.
//!
//! Environment: `TORCHTOP_ATTACK_SECONDS` (each attack's length, default 30; the trickle runs
//! until its line is sent), `TORCHTOP_ATTACK` (a comma-separated subset of
//! `hostile,devices,trickle`), `TORCHTOP_BENCH_BINARY` (measure another build).

#[path = "../common/mod.rs"]
mod common;
mod support;

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::fake_nvml::ScenarioFile;
use common::forked_agent::ForkedAgent;

const MIB: usize = 1 << 20;
const HELLO: &str = r#"{"v":1,"type":"hello","pid":1,"argv":["train.py"],"python":"3.12.3","torch":"2.11.0","interval_ms":200}"#;

/// What was seen of the monitor during one attack.
struct Figures {
    rss_mib: f64,
    hwm_mib: f64,
    threads: u64,
    cpu_seconds: f64,
    seconds: f64,
}

/// The monitor under attack: `torchtop --json`, its output read and thrown away.
struct Monitor {
    child: Child,
}

impl Monitor {
    fn start(binary: &Path, library: &Path, scenario: &ScenarioFile, agents: &Path) -> Self {
        let mut child = Command::new(binary)
            .args(["--json", "-d", "0.5"])
            .env("TORCHTOP_NVML_LIB", library)
            .env("TORCHTOP_FAKE_NVML_SCENARIO", scenario.path())
            .env("TORCHTOP_AGENT_DIR", agents)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start torchtop --json");
        let mut out = child.stdout.take().expect("piped stdout");
        thread::spawn(move || {
            let mut buffer = vec![0u8; 1 << 16];
            while matches!(out.read(&mut buffer), Ok(n) if n > 0) {}
        });
        Monitor { child }
    }

    /// Samples the monitor every 100 ms while `running` holds (and at most `limit`).
    fn watch(&self, limit: Duration, running: impl Fn() -> bool) -> Figures {
        let pid = self.child.id();
        let started = Instant::now();
        let cpu_before = support::cpu_seconds(pid).unwrap_or(0.0);
        let (mut rss, mut threads) = (0u64, 0u64);
        while started.elapsed() < limit && running() {
            rss = rss.max(support::status_kib(pid, "VmRSS:").unwrap_or(0));
            threads = threads.max(support::threads(pid).unwrap_or(0));
            thread::sleep(Duration::from_millis(100));
        }
        Figures {
            rss_mib: rss as f64 / 1024.0,
            hwm_mib: support::status_kib(pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0,
            threads,
            cpu_seconds: support::cpu_seconds(pid).unwrap_or(0.0) - cpu_before,
            seconds: started.elapsed().as_secs_f64(),
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A socket directory owned by `uid` (when we are root and one is given), mode 0700.
fn agent_dir(scratch: &Path, name: &str, uid: Option<u32>) -> PathBuf {
    let dir = scratch.join(name);
    std::fs::create_dir(&dir).expect("create the agent directory");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    if let Some(uid) = uid {
        std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).expect("chown the agent directory");
    }
    dir
}

/// Accepts on every listener until `stop`, and sends `payload` to each connection, as fast as
/// the monitor reads it.
fn feed(listeners: Vec<UnixListener>, payload: Arc<Vec<u8>>, stop: Arc<AtomicBool>) {
    let mut feeds: Vec<(UnixStream, usize)> = Vec::new();
    for listener in &listeners {
        listener.set_nonblocking(true).unwrap();
    }
    while !stop.load(Ordering::Relaxed) {
        let mut progress = false;
        for listener in &listeners {
            if let Ok((stream, _)) = listener.accept() {
                stream.set_nonblocking(true).unwrap();
                feeds.push((stream, 0));
                progress = true;
            }
        }
        feeds.retain_mut(|(stream, sent)| {
            if *sent == payload.len() {
                return true;
            }
            match stream.write(&payload[*sent..]) {
                Ok(n) => {
                    *sent += n;
                    progress = true;
                    true
                }
                Err(e) => e.kind() == ErrorKind::WouldBlock,
            }
        });
        if !progress {
            thread::sleep(Duration::from_millis(2));
        }
    }
}

fn hostile(binary: &Path, library: &Path, scratch: &Path, seconds: Duration) -> Figures {
    let root = effective_uid() == 0;
    let uid = root.then_some(65534);
    let dir = agent_dir(scratch, "hostile", uid);
    let agents: Vec<ForkedAgent> = (0..400).map(|_| ForkedAgent::bind_as(&dir, uid)).collect();
    let scenario = ScenarioFile::new("[[gpu]]\nname = \"Attacked GPU\"\n");
    let mut payload = format!("{HELLO}\n").into_bytes();
    payload.resize(payload.len() + MIB, b'x');
    let stop = Arc::new(AtomicBool::new(false));
    let listeners = agents
        .iter()
        .map(|a| a.listener.try_clone().unwrap())
        .collect();
    let feeder = {
        let (payload, stop) = (Arc::new(payload), Arc::clone(&stop));
        thread::spawn(move || feed(listeners, payload, stop))
    };
    let monitor = Monitor::start(binary, library, &scenario, &dir);
    let figures = monitor.watch(seconds, || true);
    stop.store(true, Ordering::Relaxed);
    drop(monitor);
    let _ = feeder.join();
    figures
}

fn devices(binary: &Path, library: &Path, scratch: &Path, seconds: Duration) -> Figures {
    let dir = agent_dir(scratch, "devices", None);
    let agent = ForkedAgent::bind(&dir);
    let scenario = ScenarioFile::new(&format!(
        "[[gpu]]\nname = \"Attacked GPU\"\nmemory_used_mib = 9000\n\
         [[gpu.process]]\npid = {}\nused_memory_mib = 8000\n",
        agent.pid
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let listener = agent.listener.try_clone().unwrap();
    let flag = Arc::clone(&stop);
    let sender = thread::spawn(move || {
        let devices: Vec<String> = (0..5000)
            .map(|i| {
                format!(
                    r#"{{"index":{i},"stats":{{"allocated_bytes.all.current":{},"reserved_bytes.all.current":{}}}}}"#,
                    1000 + i,
                    2000 + i
                )
            })
            .collect();
        let mut seq = 0;
        while !flag.load(Ordering::Relaxed) {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let _ = writeln!(stream, "{HELLO}");
            while !flag.load(Ordering::Relaxed) {
                seq += 1;
                let line = format!(
                    r#"{{"v":1,"type":"stats","seq":{seq},"ts":1.0,"devices":[{}]}}"#,
                    devices.join(",")
                );
                if writeln!(stream, "{line}").is_err() {
                    break;
                }
                thread::sleep(Duration::from_millis(200));
            }
        }
    });
    let monitor = Monitor::start(binary, library, &scenario, &dir);
    let figures = monitor.watch(seconds, || true);
    stop.store(true, Ordering::Relaxed);
    drop(monitor);
    drop(agent);
    let _ = sender.join();
    figures
}

fn trickle(binary: &Path, library: &Path, scratch: &Path) -> Figures {
    let dir = agent_dir(scratch, "trickle", None);
    let agent = ForkedAgent::bind(&dir);
    let scenario = ScenarioFile::new("[[gpu]]\nname = \"Attacked GPU\"\n");
    let done = Arc::new(AtomicBool::new(false));
    let listener = agent.listener.try_clone().unwrap();
    let flag = Arc::clone(&done);
    let sender = thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            flag.store(true, Ordering::Relaxed);
            return;
        };
        let _ = writeln!(stream, "{HELLO}");
        let mut line = br#"{"v":1,"type":"stats","seq":1,"devices":[],"pad":""#.to_vec();
        line.resize(MIB - 2, b'x');
        line.extend_from_slice(b"\"}\n");
        let mut next = Instant::now();
        for piece in line.chunks(7) {
            while Instant::now() < next {
                std::hint::spin_loop();
            }
            next += Duration::from_micros(100);
            if stream.write_all(piece).is_err() {
                break;
            }
        }
        flag.store(true, Ordering::Relaxed);
    });
    let monitor = Monitor::start(binary, library, &scenario, &dir);
    let figures = monitor.watch(Duration::from_secs(600), || !done.load(Ordering::Relaxed));
    drop(monitor);
    drop(agent);
    let _ = sender.join();
    figures
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds =
        Duration::from_secs_f64(support::seconds_from_env("TORCHTOP_ATTACK_SECONDS", 30.0));
    let wanted =
        std::env::var("TORCHTOP_ATTACK").unwrap_or_else(|_| "hostile,devices,trickle".into());
    let binary = support::torchtop_binary();
    let library = support::release_fake_library();
    let scratch = tempfile::Builder::new()
        .prefix("torchtop-attack")
        .tempdir()
        .expect("create a scratch directory");
    // The hostile user's directory must be reachable by that user.
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    println!(
        "torchtop agent attacks: {} (--json -d 0.5)",
        binary.display()
    );
    println!();
    println!("| attack | seconds | VmRSS max MiB | VmHWM MiB | threads max | CPU s |");
    println!("|---|---|---|---|---|---|");
    for name in wanted.split(',') {
        let figures = match name.trim() {
            "hostile" => hostile(&binary, &library, scratch.path(), seconds),
            "devices" => devices(&binary, &library, scratch.path(), seconds),
            "trickle" => trickle(&binary, &library, scratch.path()),
            other => {
                eprintln!("unknown attack {other:?}: choose among hostile, devices, trickle");
                continue;
            }
        };
        let label = match name.trim() {
            "hostile" => "400 agents, 1 MiB unfinished line each",
            "devices" => "1 agent, 5,000 devices every 200 ms",
            _ => "1 MiB line in 7-byte writes, 1 per 100 µs",
        };
        println!(
            "| {label} | {:.0} | {:.1} | {:.1} | {} | {:.2} |",
            figures.seconds, figures.rss_mib, figures.hwm_mib, figures.threads, figures.cpu_seconds
        );
    }
}
