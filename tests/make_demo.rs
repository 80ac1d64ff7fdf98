//! Builds `assets/demo.ttrec`, the recording `torchtop replay --demo` plays. Ignored by
//! `cargo test`; `tests/fixtures/demo/make_demo.sh` runs it (about 4 minutes).
//!
//! The story, in real time at 1 s refresh, against the fake NVML (scenario rewritten every half
//! second) and 8 ranks of a DDP job under a torchrun stand-in, each with the agent and the
//! stand-in torch (allocator figures from `control.json`, written here):
//! - 20 s to 150 s: a notebook kernel holds a little memory on GPU 0;
//! - from 30 s: rank 3 fragments (inactive-split memory grows to a third of reserved, and
//!   cudaMalloc retries start at 118 s);
//! - from 60 s: rank 5 leaks about 10 GiB a minute;
//! - from 100 s: GPU 6 heats up, and from 110 s its clocks are held down (thermal slowdown):
//!   it runs at 99% while the others wait for it at 60%, and every step takes 0.66 s, not 0.42;
//! - 180 s to 215 s: an evaluation job shares GPU 7;
//! - about 212 s: rank 5's reserved memory passes 95% of the GPU; from 205 s its allocator has to
//!   free its cache and retry cudaMalloc (oom-risk warns); at 225 s it hits CUDA out of memory.
//!
//! `torchtop record` records it; then the host part is dressed as a production node (the build
//! machine has 2 cores and no GPU, in a container): host name, RAM, CPUs and load, no
//! container, the ranks' CPU and RSS, users and their login sessions' cgroups, and the process
//! table cut to the job's own processes. A GPU process the story did not start fails the build
//! (root's monitor lists every user's agents). GPU, allocator and warning
//! figures are left as recorded. The NVML library is named as on a production node
//! (`libnvidia-ml.so.1`), not by the build machine's path to the fake one.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fake_nvml::ScenarioFile;
use torchtop::model::Snapshot;
use torchtop::record::reader::Cursor;
use torchtop::record::writer::FileWriter;
use torchtop::record::{RecordOptions, Recording};

const SECONDS: f64 = 240.0;
const GIB: f64 = (1u64 << 30) as f64;
const TOTAL_MIB: f64 = 81_559.0;
/// NVML's memory for a rank beyond PyTorch's reserved: the CUDA context and NCCL's buffers.
const CONTEXT_MIB: f64 = 1_434.0;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Deterministic jitter in [-1, 1).
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

fn ramp(t: f64, start: f64, duration: f64) -> f64 {
    ((t - start) / duration).clamp(0.0, 1.0)
}

/// One rank's allocator at time `t`.
struct RankState {
    allocated: f64,
    reserved: f64,
    inactive: f64,
    segments: u64,
    retries: u64,
    ooms: u64,
}

fn rank_state(rank: u32, t: f64, j: &mut Jitter) -> RankState {
    let r = f64::from(rank);
    let mut s = RankState {
        allocated: 44.5 * GIB + r * 0.07 * GIB + j.next() * 0.12 * GIB,
        reserved: 51.2 * GIB + r * 0.05 * GIB,
        inactive: 1.1 * GIB + j.next() * 0.08 * GIB,
        segments: 372 + u64::from(rank),
        retries: 0,
        ooms: 0,
    };
    if rank == 3 {
        let f = ramp(t, 30.0, 120.0);
        s.reserved += 16.5 * GIB * f;
        s.inactive += 20.5 * GIB * f;
        s.segments += (900.0 * f) as u64;
        s.retries = [118.0, 131.0, 146.0].iter().filter(|&&at| t >= at).count() as u64;
    }
    if rank == 5 {
        // A leak never gives memory back: no jitter once it starts.
        let f = ramp(t, 60.0, 165.0);
        if t >= 60.0 {
            s.allocated = 44.6 * GIB + 26.5 * GIB * f;
        }
        s.reserved = s.reserved.max(s.allocated + 6.6 * GIB);
        // Near the GPU's limit cudaMalloc fails and the allocator frees its cache to retry.
        s.retries = [205.0, 214.0, 221.0].iter().filter(|&&at| t >= at).count() as u64;
        if t >= 225.0 {
            s.ooms = 1;
            s.allocated = 50.2 * GIB + j.next() * 0.1 * GIB;
        }
    }
    s
}

fn step_seconds(t: f64) -> f64 {
    if t >= 110.0 {
        0.66
    } else {
        0.42
    }
}

/// `control.json`: what each rank's stand-in torch reports.
fn control(t: f64, j: &mut Jitter) -> String {
    let ranks: Vec<String> = (0..8)
        .map(|rank| {
            let s = rank_state(rank, t, j);
            format!(
                "\"{rank}\": {{\"step_s\": {}, \"stats\": {{\"allocated_bytes.all.current\": {a}, \
                 \"allocated_bytes.all.peak\": {peak}, \"reserved_bytes.all.current\": {res}, \
                 \"reserved_bytes.all.peak\": {res}, \"active_bytes.all.current\": {act}, \
                 \"inactive_split_bytes.all.current\": {ina}, \"requested_bytes.all.current\": {req}, \
                 \"segment.all.current\": {seg}, \"num_alloc_retries\": {ret}, \"num_ooms\": {oom}}}}}",
                step_seconds(t),
                a = s.allocated as u64,
                peak = (s.allocated + 2.1 * GIB) as u64,
                res = s.reserved as u64,
                act = (s.allocated + 0.4 * GIB) as u64,
                ina = s.inactive as u64,
                req = (s.allocated * 0.997) as u64,
                seg = s.segments,
                ret = s.retries,
                oom = s.ooms,
            )
        })
        .collect();
    format!("{{{}}}\n", ranks.join(", "))
}

/// The processes besides the ranks, and when they hold a GPU.
struct Extra {
    pid: u32,
    gpu: u32,
    mib: f64,
    sm: u32,
}

fn scenario_text(t: f64, ranks: &[u32; 8], extras: &[Extra], j: &mut Jitter) -> String {
    let mut out = String::from(
        "[system]\ndriver_version = \"550.54.15\"\nnvml_version = \"12.550.54.15\"\ncuda_driver_version = 12040\n",
    );
    let straggling = t >= 110.0;
    for gpu in 0..8u32 {
        let s = rank_state(gpu, t, j);
        let rank_mib = s.reserved / (1u64 << 20) as f64 + CONTEXT_MIB;
        let extra_mib: f64 = extras.iter().filter(|e| e.gpu == gpu).map(|e| e.mib).sum();
        let hot = gpu == 6;
        let util = match (hot, straggling) {
            (true, true) => 99.0,
            (false, true) => 61.0 + j.next() * 3.0,
            _ => 95.0 + j.next() * 2.0,
        };
        let temperature = if hot {
            64.0 + 24.0 * ramp(t, 100.0, 20.0)
        } else {
            63.0 + j.next() * 1.5 + if straggling { -4.0 } else { 0.0 }
        };
        let power = match (hot, straggling) {
            (true, true) => 700.0,
            (false, true) => 390.0 + j.next() * 25.0,
            _ => 610.0 + j.next() * 30.0,
        };
        let clock = if hot && straggling { 1350 } else { 1980 };
        let throttle = if hot && straggling { 0x48 } else { 0 };
        out.push_str(&format!(
            "\n[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"GPU-6c1e{gpu:04x}-5b2d-4f3a-9e61-7d20c3a1{gpu:04x}\"\n\
             memory_total_mib = {TOTAL_MIB}\npower_limit_w = 700\nnum_fans = 0\nunsupported = [\"fan\"]\n\
             utilization_gpu = {util:.0}\nutilization_memory = {:.0}\nmemory_used_mib = {:.0}\n\
             temperature_c = {temperature:.0}\npower_w = {power:.1}\nclock_graphics_mhz = {clock}\n\
             clock_sm_mhz = {clock}\npcie_rx_kbs = {:.0}\npcie_tx_kbs = {:.0}\nthrottle_reasons = {throttle}\n\
             \n[[gpu.process]]\npid = {}\nused_memory_mib = {rank_mib:.0}\nsm_percent = {:.0}\n",
            util * 0.45,
            rank_mib + extra_mib + 250.0,
            9.0e5 + j.next() * 2.0e5,
            8.5e5 + j.next() * 2.0e5,
            ranks[gpu as usize],
            (util - 2.0).max(0.0),
        ));
        for extra in extras.iter().filter(|e| e.gpu == gpu) {
            out.push_str(&format!(
                "\n[[gpu.process]]\npid = {}\nused_memory_mib = {:.0}\nsm_percent = {}\n",
                extra.pid, extra.mib, extra.sm
            ));
        }
    }
    out
}

/// Writes `text` to `path` in one step (aside, then renamed over).
fn replace(path: &Path, text: &str) {
    let staging = path.with_extension("new");
    std::fs::write(&staging, text).unwrap();
    std::fs::rename(&staging, path).unwrap();
}

/// A process started for the demo, killed (with its process group) on drop.
struct Started(Child);

impl Started {
    fn spawn(command: &mut Command) -> Started {
        use std::os::unix::process::CommandExt;
        Started(
            command
                .process_group(0)
                .stdin(Stdio::null())
                .spawn()
                .expect("start a demo process"),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        // SAFETY: kill has no memory effects; the group is the one this child leads.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

/// The pids of the 8 ranks, by LOCAL_RANK, once their agents listen.
fn rank_pids(agents: &Path) -> [u32; 8] {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut found = [0u32; 8];
        for entry in std::fs::read_dir(agents).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_suffix(".sock")
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            for var in environ.split(|b| *b == 0) {
                if let Some(rank) = var.strip_prefix(b"LOCAL_RANK=") {
                    if let Some(rank) = std::str::from_utf8(rank)
                        .ok()
                        .and_then(|r| r.parse::<usize>().ok())
                    {
                        found[rank.min(7)] = pid;
                    }
                }
            }
        }
        if found.iter().all(|&p| p != 0) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "the ranks' agents did not all start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "rebuilds assets/demo.ttrec in about 4 minutes: tests/fixtures/demo/make_demo.sh"]
fn make_demo() {
    let work = tempfile::tempdir().unwrap();
    let job = work.path().join("job");
    std::fs::create_dir(&job).unwrap();
    for script in ["torchrun", "train.py", "ipykernel_launcher.py", "eval.py"] {
        std::fs::copy(
            repo().join("tests/fixtures/demo").join(script),
            job.join(script),
        )
        .unwrap();
    }
    let agents = work.path().join("agents");
    let mut j = Jitter(7);
    replace(&job.join("control.json"), &control(0.0, &mut j));
    let binary = common::torchtop_binary();
    let launcher = Started::spawn(
        Command::new(&binary)
            .args([
                "run",
                "--",
                "python3",
                "torchrun",
                "--nproc-per-node",
                "8",
                "train.py",
                "--config",
                "llama-7b.yaml",
            ])
            .current_dir(&job)
            .env("PYTHONPATH", repo().join("tests/python/fake_torch"))
            .env("TORCHTOP_AGENT_DIR", &agents)
            .env("TORCHTOP_AGENT_INTERVAL_MS", "1000"),
    );
    let ranks = rank_pids(&agents);
    println!("ranks: {ranks:?}, launcher {}", launcher.pid());
    let scenario = ScenarioFile::new(&scenario_text(0.0, &ranks, &[], &mut j));
    let raw = work.path().join("raw.ttrec");
    let mut record = Command::new(&binary)
        .args(["record", "-o"])
        .arg(&raw)
        .args(["-d", "1", "--duration", "241s"])
        .envs(scenario.env())
        .env("TORCHTOP_AGENT_DIR", &agents)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let python =
        |args: &[&str]| Started::spawn(Command::new("python3").args(args).current_dir(&job));
    let mut notebook: Option<Started> = None;
    let mut evaluation: Option<Started> = None;
    while record.try_wait().unwrap().is_none() {
        let t = started.elapsed().as_secs_f64();
        if (20.0..153.0).contains(&t) && notebook.is_none() {
            notebook = Some(python(&[
                "-m",
                "ipykernel_launcher",
                "-f",
                "/home/bob/.local/share/jupyter/runtime/kernel-7f3a.json",
            ]));
        }
        if t >= 153.0 {
            notebook = None;
        }
        if (180.0..218.0).contains(&t) && evaluation.is_none() {
            evaluation = Some(python(&["eval.py", "--ckpt", "checkpoints/step-12000.pt"]));
        }
        if t >= 218.0 {
            evaluation = None;
        }
        // The GPU lets go of a process before it exits, as the driver does.
        let mut extras = Vec::new();
        if let Some(p) = notebook.as_ref().filter(|_| t < 150.0) {
            extras.push(Extra {
                pid: p.pid(),
                gpu: 0,
                mib: 900.0,
                sm: 0,
            });
        }
        if let Some(p) = evaluation.as_ref().filter(|_| t < 215.0) {
            extras.push(Extra {
                pid: p.pid(),
                gpu: 7,
                mib: 3_100.0,
                sm: 55,
            });
        }
        replace(&job.join("control.json"), &control(t, &mut j));
        scenario.rewrite(&scenario_text(t, &ranks, &extras, &mut j));
        std::thread::sleep(Duration::from_millis(500));
        assert!(t < SECONDS + 30.0, "torchtop record did not stop");
    }
    assert!(record.wait().unwrap().success());
    drop((notebook, evaluation, launcher));
    let mut roles: HashMap<u32, Role> = HashMap::new();
    let out = repo().join("assets/demo.ttrec");
    dress_and_write(&raw, &out, &ranks, &mut roles);
    let size = std::fs::metadata(&out).unwrap().len();
    println!("wrote {} ({size} bytes)", out.display());
    assert!(size <= 2 << 20, "the demo must stay under 2 MiB");
}

/// What a process is in the story, for dressing it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    Launcher,
    Rank,
    Worker,
    Notebook,
    Evaluation,
}

fn role_of(command: Option<&str>, pid: u32, ranks: &[u32; 8]) -> Option<Role> {
    let command = command?;
    Some(if ranks.contains(&pid) {
        Role::Rank
    } else if command.contains("torchrun --nproc-per-node") {
        Role::Launcher
    } else if command.contains("train.py") {
        Role::Worker
    } else if command.contains("ipykernel_launcher") {
        Role::Notebook
    } else if command.contains("eval.py") {
        Role::Evaluation
    } else {
        return None;
    })
}

fn user(role: Role) -> (&'static str, u32) {
    match role {
        Role::Notebook => ("bob", 1002),
        Role::Evaluation => ("carol", 1003),
        _ => ("alice", 1001),
    }
}

/// CPU% and RSS of a process of `role` (a node's figures, with jitter).
fn load(role: Role, j: &mut Jitter) -> (f64, u64) {
    let (cpu, rss_gib) = match role {
        Role::Launcher => (0.3, 0.4),
        Role::Rank => (99.0, 31.0),
        Role::Worker => (71.0, 2.3),
        Role::Notebook => (0.7, 2.1),
        Role::Evaluation => (102.0, 12.0),
    };
    let cpu = (cpu * (1.0 + j.next() * 0.04) * 10.0).round() / 10.0;
    (cpu.max(0.0), ((rss_gib + j.next() * 0.05) * GIB) as u64)
}

/// "python3 ..." for a command line that starts with an interpreter's full path (pyenv's shims
/// exec the real interpreter by its path).
fn tidy<T: AsRef<str> + From<String>>(command: &mut Option<T>) {
    if let Some(text) = command.as_mut() {
        if let Some((first, rest)) = text.as_ref().split_once(' ') {
            if first.starts_with('/') && first.ends_with("/python3") {
                *text = format!("python3 {rest}").into();
            }
        }
    }
}

fn dress(
    snapshot: &mut Snapshot,
    t: f64,
    ranks: &[u32; 8],
    roles: &mut HashMap<u32, Role>,
    j: &mut Jitter,
) {
    // `--json` shows it: the fake library's path named the build machine's checkout.
    snapshot.driver.library = torchtop::cli::DEFAULT_NVML_LIB.into();
    let host = &mut snapshot.host;
    host.hostname = Some("gpu-node-07".into());
    let total: u64 = 2_164_327_907_328;
    let used = (412.0 + t * 0.02 + j.next() * 0.3) * GIB;
    host.memory.total_bytes = Some(total);
    host.memory.used_bytes = Some(used as u64);
    host.memory.available_bytes = Some(total - used as u64);
    host.swap.total_bytes = Some(8 << 30);
    host.swap.used_bytes = Some(0);
    host.vm.swappiness = Some(10);
    host.vm.overcommit_memory = Some(0);
    host.cpu_count = Some(192);
    host.cpu_percent = Some(((21.5 + j.next() * 1.5) * 10.0).round() / 10.0);
    host.load = Some(torchtop::model::LoadAverage {
        one: ((41.0 + j.next() * 2.0) * 100.0).round() / 100.0,
        five: 40.12,
        fifteen: 38.6,
    });
    host.uptime_seconds = Some(1_036_800.0 + t.round());
    // The build machine runs in a container with 2 CPUs; the node runs on bare metal.
    host.container = None;
    host.pids_foreign = false;
    for p in &mut snapshot.processes {
        tidy(&mut p.command);
        let Some(role) = roles
            .get(&p.pid)
            .copied()
            .or_else(|| role_of(p.command.as_deref(), p.pid, ranks))
        else {
            // The recording ran as root, whose monitor lists every user's agents: another
            // user's (a test's, a review's) would land in the demo.
            panic!(
                "pid {} ({:?}) is not part of the story: make the demo again on a quiet machine",
                p.pid, p.command
            );
        };
        roles.insert(p.pid, role);
        let (name, uid) = user(role);
        p.user = Some(name.into());
        p.uid = Some(uid);
        let (cpu, rss) = load(role, j);
        p.cpu_percent = Some(cpu);
        p.rss_bytes = Some(rss);
        if role == Role::Rank {
            p.children_count = Some(4);
            p.children_cpu_percent = Some(((284.0 + j.next() * 8.0) * 10.0).round() / 10.0);
        }
        p.cgroup = Some(Arc::new(session_cgroup(uid)));
    }
    owned_by_alice(snapshot);
    let table = std::mem::take(&mut snapshot.host_processes);
    for mut h in table {
        tidy(&mut h.command);
        let Some(role) = role_of(h.command.as_deref(), h.pid, ranks) else {
            continue;
        };
        roles.insert(h.pid, role);
        let (name, uid) = user(role);
        h.user = Some(name.into());
        h.uid = Some(uid);
        let (cpu, rss) = load(role, j);
        h.cpu_percent = Some(cpu);
        h.rss_bytes = Some(rss);
        if role == Role::Launcher || role == Role::Notebook || role == Role::Evaluation {
            h.ppid = 1;
        }
        snapshot.host_processes.push(h);
    }
}

/// A user's login session on the node, in place of the build machine's container cgroup (its
/// path, its 2-CPU cpuset and its memory figures were the build machine's): no limits, every
/// CPU of the node.
fn session_cgroup(uid: u32) -> torchtop::model::Cgroup {
    torchtop::model::Cgroup {
        path: format!("/user.slice/user-{uid}.slice/session-{}.scope", uid - 960),
        version: 2,
        memory_max: Some(torchtop::model::Limit::Max),
        memory_swap_max: Some(torchtop::model::Limit::Max),
        oom_kills: Some(0),
        memory_max_hits: Some(0),
        cpu_max: Some(torchtop::model::CpuMax {
            quota_us: None,
            period_us: 100_000,
        }),
        cpuset_cpus: Some("0-191".into()),
        cpuset_count: Some(192),
        pids_max: Some(torchtop::model::Limit::Max),
        ..Default::default()
    }
}

/// The job's id names its processes' user, recorded as the build machine's: the dressed
/// user's name instead, wherever the id was written.
fn owned_by_alice(snapshot: &mut Snapshot) {
    let fix = |text: &mut String| {
        if text.contains(" (root)") {
            *text = text.replace(" (root)", " (alice)");
        }
    };
    for job in &mut snapshot.jobs {
        fix(&mut job.id);
    }
    for warning in &mut snapshot.warnings {
        if let torchtop::model::Subject::Job { id } = &mut warning.subject {
            fix(id);
        }
        fix(&mut warning.message);
        for (_, value) in &mut warning.evidence {
            fix(value);
        }
    }
}

fn dress_and_write(raw: &Path, out: &PathBuf, ranks: &[u32; 8], roles: &mut HashMap<u32, Role>) {
    let mut recording = Recording::open(raw).unwrap();
    assert!(recording.issues.is_empty(), "{:?}", recording.issues);
    let _ = std::fs::remove_file(out);
    let mut writer = FileWriter::create(RecordOptions {
        path: out.clone(),
        max_size: None,
        interval_seconds: 1.0,
    })
    .unwrap();
    let mut cursor = Cursor::default();
    let mut j = Jitter(11);
    let start = recording.frames().first().map_or(0.0, |f| f.time);
    for i in 0..recording.frames().len() {
        let mut snapshot = recording.snapshot(&mut cursor, i).unwrap();
        let t = snapshot.unix_seconds - start;
        dress(&mut snapshot, t, ranks, roles, &mut j);
        writer.write(&Arc::new(snapshot)).unwrap();
    }
    writer.finish().unwrap();
}
