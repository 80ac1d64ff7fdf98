//! The overhead benchmark (`cargo bench --bench overhead`): the release binary in a
//! pseudo-terminal against fake-NVML scenarios, measured from /proc as an outside observer.
//!
//! For each scenario it reports CPU milliseconds per second of wall time, RSS (now and peak),
//! wake-ups per second (context switches of all threads), the pages a tick touches (see
//! `footprint`), time from spawn to the first frame, and `--once --json` latency. When nvtop
//! or nvitop is on PATH it runs them on the same scenario at the same time and prints
//! torchtop's CPU ratio to each: the figure that counts on a noisy machine. Not part of
//! `cargo test`: it is a measurement, not a pass/fail test.
//!
//! Then: the slope of CPU per GPU process at 16 GPUs, what a wake-up and a page cost on this
//! machine, wake-ups per thread with nothing changing, the sampler's allocations per tick (a
//! counting allocator, in this process), each key's latency with two busy cores, and the
//! agent's cost per interval (a Python script).
//!
//! Environment: TORCHTOP_BENCH_SECONDS (measured window, default 20), TORCHTOP_BENCH_WARMUP
//! (default 3), TORCHTOP_BENCH_FILL_SECONDS (default 0: skipped; 610 fills the longest rule
//! window, 600 s, and reports RSS at 8 GPUs/64 and 16 GPUs/1,000 processes after it),
//! TORCHTOP_BENCH_PYTHON (a Python with torch for the agent's cost; default python3; with
//! torch it also trains with and without the agent, TORCHTOP_BENCH_STEP_SECONDS an arm, default 10),
//! TORCHTOP_BENCH_ONLY (run only the scenarios whose name contains it, and only the sections
//! named in it: `slope`, `machine`, `wakeups`, `allocs`, `keys`, `agent`, `fill`; e.g.
//! `16 GPUs|slope`; `with agents` runs only the allocations with agents connected).

#[path = "overhead/agents.rs"]
mod agents;
#[path = "overhead/alloc.rs"]
mod alloc;
#[path = "../common/mod.rs"]
mod common;
#[path = "overhead/footprint.rs"]
mod footprint;
#[path = "overhead/keys.rs"]
mod keys;
#[path = "overhead/measure.rs"]
mod measure;
mod support;

#[global_allocator]
static COUNTING: alloc::Counting = alloc::Counting;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fake_nvml::{env_refs, fill_pids, many_gpus_scenario, ScenarioFile, Sleepers};
use common::pty::PtySession;
use measure::{measure, Usage};

struct Scenario {
    name: &'static str,
    fixture: Fixture,
    gpu_processes: usize,
    idle_host_processes: usize,
    /// Keys sent once the first frame is drawn (`t` opens the tree view).
    keys: &'static [u8],
    /// Whether nvtop and nvitop run beside it (not for the tree view, which they lack).
    compare: bool,
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
    /// As `Generated`, with every figure constant: nothing changes but the clock.
    Still {
        gpus: usize,
    },
    /// One GPU as `Still`, at rest: no utilization, idle power, little memory.
    Idle,
}

const fn scenario(
    name: &'static str,
    fixture: Fixture,
    gpu_processes: usize,
    idle_host_processes: usize,
) -> Scenario {
    Scenario {
        name,
        fixture,
        gpu_processes,
        idle_host_processes,
        keys: b"",
        compare: true,
    }
}

const FOUR: Fixture = Fixture::File("four_gpus_20_procs.toml");
const EIGHT: Fixture = Fixture::File("eight_gpus.toml");
const SIXTEEN: Fixture = Fixture::Generated { gpus: 16 };

/// One GPU with no processes, nothing running on it: the machine between jobs.
const IDLE_ONE: Fixture = Fixture::Idle;

const SCENARIOS: [Scenario; 11] = [
    scenario("1 idle GPU", IDLE_ONE, 0, 0),
    scenario("1 idle GPU + 2000 idle", IDLE_ONE, 0, 2000),
    scenario("4 GPUs, 20 procs", FOUR, 20, 0),
    scenario("8 GPUs, 64 procs", EIGHT, 64, 0),
    scenario("4 GPUs, 20 procs + 2000 idle", FOUR, 20, 2000),
    scenario("8 GPUs, 64 procs + 2000 idle", EIGHT, 64, 2000),
    scenario("16 GPUs, 10 procs", SIXTEEN, 10, 0),
    scenario("16 GPUs, 100 procs", SIXTEEN, 100, 0),
    scenario("16 GPUs, 1000 procs", SIXTEEN, 1000, 0),
    scenario(
        "8 GPUs, 64 procs, nothing changing",
        Fixture::Still { gpus: 8 },
        64,
        0,
    ),
    Scenario {
        keys: b"t",
        compare: false,
        ..scenario(
            "4 GPUs, 20 procs + 10000 host procs, tree view",
            FOUR,
            20,
            10_000,
        )
    },
];

/// A scenario's text with the pids filled in.
fn scenario_text(fixture: Fixture, processes: usize, pids: &[u32]) -> String {
    match fixture {
        Fixture::File(name) => fill_pids(&common::fake_nvml::fixture_text(name), pids),
        Fixture::Generated { gpus } => fill_pids(&many_gpus_scenario(gpus, processes), pids),
        Fixture::Still { gpus } => fill_pids(&still_scenario(gpus, processes), pids),
        Fixture::Idle => still_scenario(1, 0)
            .replace("utilization_gpu = 55", "utilization_gpu = 0")
            .replace("power_w = 450", "power_w = 70")
            .replace("memory_used_mib = 40000", "memory_used_mib = 500"),
    }
}

/// `many_gpus_scenario` with every moving figure replaced by a constant.
fn still_scenario(gpus: usize, processes: usize) -> String {
    let moving = many_gpus_scenario(gpus, processes);
    moving
        .lines()
        .map(|line| match line.split_once(" = { fn") {
            Some((key, _)) if key == "pcie_rx_kbs" => format!("{key} = 400000"),
            Some((key, _)) if key == "sm_percent" => format!("{key} = 20"),
            Some((key, _)) if key == "memory_used_mib" => format!("{key} = 40000"),
            Some((key, _)) if key == "power_w" => format!("{key} = 450"),
            Some((key, _)) => format!("{key} = 55"),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
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
    let library = support::release_fake_library();
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
    println!("| scenario | tool | CPU ms/s | RSS MiB (peak) | wake-ups/s | pages a tick (code) | first frame ms | --once --json ms | CPU ratio |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let tools = Tools {
        binary,
        library,
        nvtop,
        nvitop,
    };
    let mut sixteen = Vec::new();
    for scenario in SCENARIOS.iter().filter(|s| wanted(s.name)) {
        let cpu = run_scenario(scenario, &tools, window, warmup);
        if matches!(scenario.fixture, Fixture::Generated { gpus: 16 }) {
            sixteen.push((scenario.gpu_processes as f64, cpu));
        }
    }
    if wanted("slope") {
        print_slope(&sixteen);
    }
    if wanted("machine") {
        print_machine_costs();
    }
    if wanted("wakeups") {
        print_thread_wakeups(&tools, window);
    }
    if wanted("allocs") {
        print_allocations(&tools.library);
    }
    // Named apart so that `TORCHTOP_BENCH_ONLY='with agents'` runs it alone.
    if wanted("allocs with agents") {
        print_allocations_with_agents(&tools.library);
    }
    if wanted("keys") {
        print_key_latencies(&tools);
    }
    if wanted("agent") {
        print_agent_cost();
    }
    if wanted("fill") {
        print_filled_rss(&tools);
    }
}

/// Whether `TORCHTOP_BENCH_ONLY` (`|`-separated parts) lets a scenario or a section run: all
/// of them when it is unset.
fn wanted(name: &str) -> bool {
    std::env::var("TORCHTOP_BENCH_ONLY").map_or(true, |only| {
        only.split('|')
            .any(|part| !part.is_empty() && name.contains(part))
    })
}

/// The programs measured and the fake library they read.
struct Tools {
    binary: PathBuf,
    library: PathBuf,
    nvtop: Option<PathBuf>,
    nvitop: Option<PathBuf>,
}

impl Tools {
    fn env(&self, scenario: &ScenarioFile) -> Vec<(String, String)> {
        vec![
            (
                "TORCHTOP_NVML_LIB".to_string(),
                self.library.display().to_string(),
            ),
            (
                "TORCHTOP_FAKE_NVML_SCENARIO".to_string(),
                scenario.path().display().to_string(),
            ),
        ]
    }

    /// torchtop in a 120x40 terminal, once its first frame shows the GPUs (and the time
    /// from spawn to it, if it came).
    fn start(&self, env: &[(String, String)]) -> (PtySession, Option<f64>) {
        let started = Instant::now();
        let session = PtySession::spawn(&self.binary, &[], &env_refs(env), 120, 40);
        let first_frame = session
            .wait_for(Duration::from_secs(10), |s| s.contains("H100"))
            .then(|| started.elapsed().as_secs_f64() * 1000.0);
        (session, first_frame)
    }

    fn others(&self, env: &[(String, String)]) -> Vec<(&'static str, PtySession)> {
        let mut env = env.to_vec();
        let dir = self.library.parent().unwrap().display().to_string();
        env.push(("LD_LIBRARY_PATH".into(), dir));
        let mut others = Vec::new();
        if let Some(nvtop) = &self.nvtop {
            let args = ["-d", "10"];
            others.push((
                "nvtop",
                PtySession::spawn(nvtop, &args, &env_refs(&env), 120, 40),
            ));
        }
        if let Some(nvitop) = &self.nvitop {
            let args = ["--monitor", "full", "--interval", "1"];
            others.push((
                "nvitop",
                PtySession::spawn(nvitop, &args, &env_refs(&env), 120, 40),
            ));
        }
        others
    }
}

fn run_scenario(scenario: &Scenario, tools: &Tools, window: Duration, warmup: Duration) -> f64 {
    let gpu_procs = Sleepers::spawn(scenario.gpu_processes);
    let _idle = Sleepers::spawn(scenario.idle_host_processes);
    let text = scenario_text(scenario.fixture, scenario.gpu_processes, &gpu_procs.pids());
    let file = ScenarioFile::new(&text);
    let env = tools.env(&file);
    let (mut torchtop, first_frame) = tools.start(&env);
    if !scenario.keys.is_empty() {
        torchtop.send(scenario.keys);
    }
    let others = if scenario.compare {
        tools.others(&env)
    } else {
        Vec::new()
    };
    std::thread::sleep(warmup);
    let mut pids = vec![torchtop.pid().unwrap()];
    pids.extend(others.iter().map(|(_, s)| s.pid().unwrap()));
    let usage = measure(&pids, window);
    let pages = footprint::pages_touched(&pids, PAGES_WINDOW);
    let once_ms = once_latency_ms(&tools.binary, &env);
    let ours = usage[0];
    println!(
        "| {} | torchtop | {:.2} | {:.1} ({:.1}) | {:.1} | {} | {} | {:.1} | |",
        scenario.name,
        ours.cpu_ms_per_s,
        ours.rss_mib,
        ours.peak_rss_mib,
        ours.wakeups_per_s,
        shown_pages(pages[0]),
        first_frame.map_or("no frame".into(), |ms| format!("{ms:.0}")),
        once_ms
    );
    for (((name, _), theirs), pages) in others.iter().zip(&usage[1..]).zip(&pages[1..]) {
        print_other(scenario.name, name, (theirs, *pages), &ours);
    }
    ours.cpu_ms_per_s
}

/// How long the pages each program touches are counted: three ticks.
const PAGES_WINDOW: Duration = Duration::from_secs(3);

fn shown_pages(pages: Option<footprint::Pages>) -> String {
    pages.map_or("N/A".into(), |p| format!("{} ({})", p.all, p.code))
}

fn print_other(
    scenario: &str,
    name: &str,
    theirs: (&Usage, Option<footprint::Pages>),
    ours: &Usage,
) {
    let (usage, pages) = theirs;
    println!(
        "| {scenario} | {name} | {:.2} | {:.1} ({:.1}) | {:.1} | {} | | | torchtop/{name} = {:.2} |",
        usage.cpu_ms_per_s,
        usage.rss_mib,
        usage.peak_rss_mib,
        usage.wakeups_per_s,
        shown_pages(pages),
        ours.cpu_ms_per_s / usage.cpu_ms_per_s
    );
}

/// The cost of one more GPU process at 16 GPUs between each pair of process counts, in µs of
/// CPU per second per process: roughly equal figures mean a linear cost.
fn print_slope(runs: &[(f64, f64)]) {
    println!();
    for pair in runs.windows(2) {
        let [(few, cpu_few), (many, cpu_many)] = pair else {
            continue;
        };
        let slope_us = (cpu_many - cpu_few) * 1000.0 / (many - few);
        println!(
            "slope at 16 GPUs, {few} to {many} GPU processes: {slope_us:.1} µs of CPU per second per process"
        );
    }
}

/// What a wake-up and a page touched after it cost on this machine, after the sleeps of a
/// 1 Hz monitor and of a 100 Hz one: what the CPU figures above are made of.
fn print_machine_costs() {
    println!();
    for (sleep, wakes) in [
        (Duration::from_secs(1), 10),
        (Duration::from_millis(10), 300),
    ] {
        let (wake_us, page_us) = footprint::wake_and_page_cost(sleep, wakes, 1024);
        println!(
            "this machine, after {} ms of sleep: a wake-up costs {wake_us:.0} µs of CPU, \
             and each page touched after it {page_us:.2} µs more",
            sleep.as_millis()
        );
    }
}

/// Which threads wake, with nothing changing (8 GPUs, 64 processes, constant figures).
fn print_thread_wakeups(tools: &Tools, window: Duration) {
    let procs = Sleepers::spawn(64);
    let file = ScenarioFile::new(&scenario_text(
        Fixture::Still { gpus: 8 },
        64,
        &procs.pids(),
    ));
    let (torchtop, _) = tools.start(&tools.env(&file));
    std::thread::sleep(Duration::from_secs(3));
    let rates = measure::wakeups_by_thread(torchtop.pid().unwrap(), window);
    let total: f64 = rates.iter().map(|(_, v, p)| v + p).sum();
    println!();
    println!("wake-ups per second by thread, nothing changing, 8 GPUs/64 procs: {total:.1} in all");
    for (name, slept, preempted) in rates {
        println!(
            "  {name}: {:.1} ({slept:.1} went to sleep, {preempted:.1} preempted)",
            slept + preempted
        );
    }
}

/// The sampler's allocations per tick in steady state, at 8 GPUs/64 and 16 GPUs/1,000: after
/// 10 ticks, and again once every process's rule window has filled (the leak rule's 120 s is
/// the longest of those; the GPUs' ECC window of 600 s still grows, by doubling).
fn print_allocations(library: &Path) {
    println!();
    let filled = 1_300;
    for (name, fixture, processes) in [
        ("8 GPUs, 64 procs", EIGHT, 64),
        ("16 GPUs, 1000 procs", SIXTEEN, 1000),
    ] {
        let procs = Sleepers::spawn(processes);
        let file = ScenarioFile::new(&scenario_text(fixture, processes, &procs.pids()));
        let phases = alloc::per_tick(library, file.path(), &[(10, 20), (filled, 20)]);
        let [(calls, bytes), (calls_filled, bytes_filled)] = phases[..] else {
            unreachable!("two phases asked, two measured");
        };
        println!(
            "sampler allocations per tick, {name}: {calls:.0} ({:.1} KiB) after 10 ticks; \
             {calls_filled:.0} ({:.1} KiB) after {} s, the process windows full",
            bytes / 1024.0,
            bytes_filled / 1024.0,
            (10 + 20 + filled) / 10
        );
    }
}

/// The sampler's allocations per tick at 8 GPUs/64 procs with stand-in agents connected, each
/// sending stats every tick (100 ms here, as the ticks; 1 s and 1 s in the monitor by default):
/// four agents are GPU processes, a fifth holds no GPU (an agent-only row).
fn print_allocations_with_agents(library: &Path) {
    let procs = Sleepers::spawn(60);
    let template = common::fake_nvml::fixture_text("eight_gpus.toml");
    let every = Duration::from_millis(100);
    let phases = agents::per_tick_with_agents(
        library,
        &template,
        &procs.pids(),
        (5, 4),
        every,
        &[(30, 20), (1_300, 20)],
    );
    for (figures, when) in phases
        .iter()
        .zip(["after 30 ticks", "after 135 s, the windows full"])
    {
        println!(
            "sampler allocations per tick, 8 GPUs, 64 procs, 5 agents sending stats every tick, \
             {when}: {:.1} ({:.1} KiB), {:.1} of them on the sampler's thread (the rest: the \
             agents' reader parsing their lines, the GPU worker)",
            figures.calls,
            figures.bytes / 1024.0,
            figures.calls_here
        );
    }
}

/// Each key's latency, median / worst of 5 rounds, with two cores busy: at each scale the
/// issue names, the last with 10,000 host processes in the open tree view.
fn print_key_latencies(tools: &Tools) {
    println!();
    for (name, fixture, processes, idle) in [
        ("8 GPUs, 64 procs", EIGHT, 64, 0),
        ("16 GPUs, 1000 procs", SIXTEEN, 1000, 0),
        (
            "4 GPUs, 20 procs + 10000 host procs, tree view",
            FOUR,
            20,
            10_000,
        ),
    ] {
        let procs = Sleepers::spawn(processes);
        let _idle = Sleepers::spawn(idle);
        let file = ScenarioFile::new(&scenario_text(fixture, processes, &procs.pids()));
        let (mut torchtop, _) = tools.start(&tools.env(&file));
        if idle > 0 {
            open_tree(&mut torchtop);
        }
        let keys = keys::keys(idle > 0);
        let _busy = keys::BusyCores::spin(2);
        std::thread::sleep(Duration::from_secs(2));
        println!("key latency, {name}, 2 busy cores (ms, median / worst of 5):");
        for (key, times) in keys::latencies(&mut torchtop, &keys, 5) {
            println!("  {key}: {}", keys::summary(&times));
        }
    }
}

/// Opens the tree view and waits until its title shows.
fn open_tree(session: &mut PtySession) {
    session.send(b"t");
    if !session.wait_for(Duration::from_secs(10), |s| s.contains("(tree,")) {
        println!("(the tree view did not open within 10 s)");
    }
}

/// The agent's cost per stats interval: `tests/bench/agent_interval_cost.py`.
fn print_agent_cost() {
    let python = std::env::var("TORCHTOP_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bench/agent_interval_cost.py");
    println!();
    match Command::new(&python).arg(&script).output() {
        Ok(out) => print!("{}", String::from_utf8_lossy(&out.stdout)),
        Err(e) => println!("agent cost: cannot run {python}: {e}"),
    }
    print_agent_step_cost(&python);
}

/// Steps/s of a real training loop with and without the agent, and the agent thread's CPU
/// (`tests/bench/agent_step_cost.py`): on CUDA when this Python's torch sees a GPU, else on the
/// CPU; only with a Python that has torch.
fn print_agent_step_cost(python: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bench/agent_step_cost.py");
    let seconds = seconds_from_env("TORCHTOP_BENCH_STEP_SECONDS", 10);
    println!();
    let has_torch = Command::new(python)
        .args(["-W", "ignore", "-c", "import torch"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_torch {
        println!("agent in a training loop: skipped ({python} cannot import torch; TORCHTOP_BENCH_PYTHON names one that can)");
        return;
    }
    let out = Command::new(python)
        .args(["-W", "ignore::UserWarning"])
        .arg(&script)
        .args(["--seconds", &seconds.as_secs().to_string(), "--rounds", "3"])
        .env("TORCHTOP_BIN", support::torchtop_binary())
        .output();
    match out {
        Ok(out) if out.status.success() => print!("{}", String::from_utf8_lossy(&out.stdout)),
        Ok(out) => println!(
            "agent in a training loop: the script failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => println!("agent in a training loop: cannot run {python}: {e}"),
    }
}

/// RSS after the longest rule window (600 s) has filled, when asked for.
fn print_filled_rss(tools: &Tools) {
    let fill = seconds_from_env("TORCHTOP_BENCH_FILL_SECONDS", 0);
    println!();
    if fill.is_zero() {
        println!(
            "RSS after the longest rule window: skipped (TORCHTOP_BENCH_FILL_SECONDS=610 runs it)"
        );
        return;
    }
    let runs: Vec<_> = [
        ("8 GPUs, 64 procs", EIGHT, 64),
        ("16 GPUs, 1000 procs", SIXTEEN, 1000),
    ]
    .into_iter()
    .map(|(name, fixture, processes)| {
        let procs = Sleepers::spawn(processes);
        let file = ScenarioFile::new(&scenario_text(fixture, processes, &procs.pids()));
        let (torchtop, _) = tools.start(&tools.env(&file));
        (name, procs, file, torchtop)
    })
    .collect();
    std::thread::sleep(fill);
    for (name, _, _, torchtop) in &runs {
        let pid = torchtop.pid().unwrap();
        println!(
            "RSS after {} s, {name}: {:.1} MiB (peak {:.1})",
            fill.as_secs(),
            measure::status_kib(pid, "VmRSS:") / 1024.0,
            measure::status_kib(pid, "VmHWM:") / 1024.0
        );
    }
}
