//! Warnings as pure functions of the snapshot history.
//!
//! This module owns the [`Engine`]: fed one [`Snapshot`] at a time, it keeps short bounded
//! windows of the figures the rules need (per GPU, per (pid, GPU), per (pid, torch device) and
//! for the host), calls one pure function per rule over them, and returns the warnings most
//! severe first. Each rule lives in its own file with its thresholds' table, gathered in [`RulesConfig`]. Time is
//! the snapshot's own (`unix_seconds`, `time`), never the wall clock, so a replayed history gives
//! the same warnings.
//!
//! Rule ids: `gpu-lost`, `gpu-unresponsive`, `driver-missing`, `ecc`, `training-stalled`,
//! `wrong-gpu`, `oom`, `oom-killed`, `oom-risk`, `cgroup-memory`, `leak`, `fragmentation`,
//! `zombie-memory`, `swap`, `shm-small`, `imbalance`, `throttle`, `cpu-oversubscribed`,
//! `gpu-starved`: the order of [`IMPACT`], which sorts warnings of one severity.
//! Each process warning gets a `job` evidence row when its process is a rank of a job, else a
//! `gpu` row (its lowest GPU) when it has none: [`Warning::group`] groups on them.
//!
//! Two facts the rules rely on from the collectors:
//! - `DeviceAllocatorStats::index` is the process's own torch ordinal (`cuda:N`), which maps to
//!   an NVML GPU through the process's `CUDA_VISIBLE_DEVICES` (see [`torch_device_on`]).
//! - `GpuSample::throttle_reasons` holds the names in
//!   [`THROTTLE_REASON_NAMES`](throttle::THROTTLE_REASON_NAMES).

mod cgroup_memory;
mod cpu_oversubscribed;
mod ecc;
mod fragmentation;
mod gpu_starved;
mod health;
mod imbalance;
pub(crate) mod jobs;
mod leak;
mod oom;
mod oom_killed;
mod oom_risk;
mod order;
mod rank_gone;
mod seen;
mod shm_small;
mod slots;
mod swap;
mod thresholds;
mod throttle;
mod torch_device;
pub(crate) mod training;
mod training_stalled;
mod window;
mod wording;
mod wrong_gpu;
mod zombie_memory;

#[cfg(test)]
mod testkit;

use std::collections::{BTreeMap, HashMap};

use crate::config::Seconds;
use crate::model::{
    DeviceAllocatorStats, GpuProcess, Snapshot, Subject, Warning, GPU_EVIDENCE, JOB_EVIDENCE,
};
#[cfg(test)]
pub(crate) use jobs::group_jobs;
pub(crate) use jobs::group_jobs_into;
pub(crate) use jobs::{job_key, job_rank};
use order::{JobIndex, PidIndex, Rows};
pub(crate) use seen::Held;
use seen::{FirstSeen, SeenKey};
use slots::Slots;
pub use thresholds::RulesConfig;
pub(crate) use torch_device::torch_device_on;
use training_stalled::StepTrack;
pub(crate) use window::{
    counter_rise, covering, mean, AllocPoint, GpuPoint, HostPoint, Inputs, Point, ProcPoint,
    Tracked, Window,
};
pub(crate) use wording::{
    fmt_bytes, fmt_opt, fmt_opt_bytes, fmt_percent, fmt_seconds, held_on_gpu_evidence,
    holds_on_gpu, warning, BYTES_PER_MIB,
};

/// Rule ids by the harm they announce, most first: within one severity, warnings come in this
/// order (the machine's health, then lost work, then advice). Ids not listed come last, by id.
/// The `w` view's grouping (app::warning_groups) ranks health, `oom-risk`, `leak`,
/// `fragmentation`, `zombie-memory`/`swap` the same way.
pub(crate) const IMPACT: &[&str] = &[
    health::LOST,
    health::UNRESPONSIVE,
    health::DRIVER_MISSING,
    ecc::ID,
    training_stalled::ID,
    rank_gone::ID,
    wrong_gpu::ID,
    oom::ID,
    oom_killed::ID,
    oom_risk::ID,
    cgroup_memory::ID,
    leak::ID,
    fragmentation::ID,
    zombie_memory::ID,
    swap::ID,
    shm_small::ID,
    imbalance::ID,
    throttle::ID,
    cpu_oversubscribed::ID,
    gpu_starved::ID,
];

/// Where `id` stands in [`IMPACT`]; the warnings panel orders its groups by it too.
pub(crate) fn impact_rank(id: &str) -> usize {
    IMPACT.iter().position(|i| *i == id).unwrap_or(IMPACT.len())
}

/// How long each kind of window keeps its points: the longest span any rule reads of it. One
/// horizon for all (the ECC rule's 600 s) kept every process's points ten times longer than
/// any process rule reads them: about 100 KB per GPU process at 1 Hz.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Horizons {
    /// Read by ecc and gpu-starved.
    gpus: f64,
    /// Read by gpu-starved, imbalance, leak and zombie-memory.
    processes: f64,
    /// Read by leak, fragmentation and oom-risk.
    allocators: f64,
    /// Read by swap.
    host: f64,
}

impl Horizons {
    fn of(config: &RulesConfig) -> Self {
        let longest = |spans: &[Seconds]| spans.iter().map(|s| s.get()).fold(0.0, f64::max);
        Horizons {
            gpus: longest(&[
                config.ecc.window_seconds,
                config.gpu_starved.window_seconds,
                config.throttle.window_seconds,
            ]),
            processes: longest(&[
                config.gpu_starved.window_seconds,
                config.imbalance.window_seconds,
                config.leak.window_seconds,
                config.zombie_memory.min_seconds,
            ]),
            allocators: longest(&[
                config.leak.window_seconds,
                config.fragmentation.retries_window_seconds,
                config.oom_risk.oom_window_seconds,
            ]),
            host: longest(&[config.swap.window_seconds]),
        }
    }
}

/// The warnings engine: owns the windows and the first-seen times.
#[derive(Debug, Clone)]
pub(crate) struct Engine {
    config: RulesConfig,
    keep: Horizons,
    gpus: BTreeMap<u32, Window<GpuPoint>>,
    processes: BTreeMap<(u32, u32), Tracked<ProcPoint>>,
    allocators: BTreeMap<(u32, u32), Tracked<AllocPoint>>,
    host: Window<HostPoint>,
    steps: BTreeMap<u32, StepTrack>,
    /// Room for the pids `steps` met in a sample.
    step_pids: Vec<u32>,
    /// The jobs seen and the ranks that left them, for rank-gone.
    ranks: rank_gone::Memory,
    /// When each warning held now was first seen, by its id's place in [`IMPACT`] and its
    /// subject; kept from tick to tick, so a warning that goes on holding costs no new key.
    first_seen: HashMap<SeenKey, FirstSeen>,
    /// The key looked up in `first_seen`, rewritten for each warning.
    seen_key: SeenKey,
    /// This tick's warnings, in the room of the last ones.
    slots: Slots,
    /// The snapshot's jobs by pid, and room for grouping processes, refilled each tick.
    job_index: JobIndex,
    pid_index: PidIndex,
    rows: Rows,
    /// How many samples were recorded: the stamp of the keys each one saw.
    samples: u64,
}

impl Engine {
    pub(crate) fn new(config: RulesConfig) -> Self {
        Engine {
            keep: Horizons::of(&config),
            config,
            gpus: BTreeMap::new(),
            processes: BTreeMap::new(),
            allocators: BTreeMap::new(),
            host: Window::default(),
            steps: BTreeMap::new(),
            step_pids: Vec::new(),
            ranks: rank_gone::Memory::default(),
            first_seen: HashMap::new(),
            seen_key: SeenKey::default(),
            slots: Slots::default(),
            job_index: JobIndex::default(),
            pid_index: PidIndex::default(),
            rows: Rows::default(),
            samples: 0,
        }
    }

    /// The rows of processes that hold no GPU (an agent's process before its first CUDA
    /// call, a CPU rank), which the sampler adds to the snapshot only after the rules ran:
    /// still running, for the ranks of a job. Refilled in place before each evaluation.
    pub(crate) fn note_rows_without_gpu(&mut self, rows: &[GpuProcess]) {
        self.ranks.note_without_gpu(rows);
    }

    /// Writes the ranks that left each job into the snapshot's jobs (see
    /// [`rank_gone::Memory::gone_into`]); after [`Engine::evaluate_into`], on the snapshot
    /// with every row.
    pub(crate) fn gone_ranks_into(&self, snapshot: &mut Snapshot) {
        self.ranks.gone_into(snapshot);
    }

    /// Records the snapshot and returns the warnings that hold now: most severe first, then by
    /// [`IMPACT`], then by subject; one per (id, subject), its `since` kept while it holds
    /// without a break.
    pub(crate) fn evaluate(&mut self, snapshot: &Snapshot) -> Vec<Warning> {
        let mut warnings = Vec::new();
        self.evaluate_into(snapshot, &mut warnings);
        warnings
    }

    /// [`Engine::evaluate`] into `warnings`, rewritten in the room of the warnings it held: a
    /// tick whose warnings read as those `warnings` held allocates nothing for them.
    pub(crate) fn evaluate_into(&mut self, snapshot: &Snapshot, warnings: &mut Vec<Warning>) {
        self.record(snapshot);
        self.job_index.fill(&snapshot.jobs);
        self.pid_index.fill(&snapshot.processes);
        let inputs = Inputs {
            held: Held::new(&self.first_seen, self.samples - 1),
            snapshot,
            gpus: &self.gpus,
            processes: &self.processes,
            allocators: &self.allocators,
            host: &self.host,
            steps: &self.steps,
            ranks: &self.ranks,
            job_index: &self.job_index,
            pid_index: &self.pid_index,
        };
        self.slots.start();
        run_rules(&inputs, &self.config, &mut self.slots, &mut self.rows);
        name_jobs(&mut self.slots, snapshot);
        self.finish(snapshot);
        self.slots.copy_found_into(warnings);
    }

    fn record(&mut self, snapshot: &Snapshot) {
        let t = snapshot.unix_seconds;
        let keep = self.keep;
        for gpu in &snapshot.gpus {
            let point = GpuPoint {
                utilization_percent: gpu.utilization_percent,
                memory_used_bytes: gpu.memory_used_bytes,
                ecc_corrected: gpu.ecc_volatile_corrected,
                ecc_uncorrected: gpu.ecc_volatile_uncorrected,
                throttle: gpu
                    .throttle_reasons
                    .as_ref()
                    .map_or(0, |reasons| throttle::reason_bits(reasons.iter())),
            };
            self.gpus
                .entry(gpu.index)
                .or_default()
                .push(t, point, keep.gpus);
        }
        self.gpus.retain(|index, _| snapshot.gpu(*index).is_some());

        // 0 is never a sample's count, so a fresh key has not been seen.
        self.samples += 1;
        let sample = self.samples;
        for process in &snapshot.processes {
            let tracked = self
                .processes
                .entry((process.pid, process.gpu))
                .or_default();
            let before = tracked.latest_of(process.start_ticks).copied();
            tracked.push_once(
                sample,
                process.start_ticks,
                t,
                || proc_point(process, snapshot, before.as_ref(), t),
                keep.processes,
            );
            let devices = process.torch.iter().flat_map(|torch| &torch.devices);
            for device in devices {
                self.allocators
                    .entry((process.pid, device.index))
                    .or_default()
                    .push_once(
                        sample,
                        process.start_ticks,
                        t,
                        || alloc_point(device),
                        keep.allocators,
                    );
            }
        }
        self.processes.retain(|_, tracked| tracked.seen == sample);
        self.allocators.retain(|_, tracked| tracked.seen == sample);

        let host = &snapshot.host;
        let point = HostPoint {
            swap_used_bytes: host.swap.used_bytes,
            memory_available_bytes: host.memory.available_bytes,
            memory_total_bytes: host.memory.total_bytes,
        };
        self.host.push(t, point, keep.host);
        training_stalled::record(&mut self.steps, &mut self.step_pids, snapshot);
        self.ranks.record(snapshot);
    }

    fn finish(&mut self, snapshot: &Snapshot) {
        let found = self.slots.found_mut();
        // Of each (id, subject) the most severe, the first found of equals: grouped by a
        // stable sort, not each compared with every other (a thousand cgroups can warn).
        found.sort_by(|a, b| {
            (a.id.cmp(&b.id))
                .then_with(|| subject_order(&a.subject).cmp(&subject_order(&b.subject)))
                .then_with(|| b.severity.cmp(&a.severity))
        });
        let mut kept = 0;
        for i in 0..found.len() {
            let w = &found[i];
            let duplicate = kept > 0 && {
                let k = &found[kept - 1];
                k.id == w.id && k.subject == w.subject
            };
            if !duplicate {
                found.swap(kept, i);
                kept += 1;
            }
        }
        // Distinct now, so the order is total.
        found[..kept].sort_unstable_by(|a, b| {
            b.severity
                .cmp(&a.severity)
                .then_with(|| impact_rank(&a.id).cmp(&impact_rank(&b.id)))
                .then_with(|| a.id.cmp(&b.id))
                .then_with(|| subject_order(&a.subject).cmp(&subject_order(&b.subject)))
        });
        self.slots.truncate(kept);
        let stamp = self.samples;
        let mut now = None;
        for warning in self.slots.found_mut() {
            self.seen_key
                .set(impact_rank(&warning.id), &warning.subject);
            if !self.first_seen.contains_key(&self.seen_key) {
                let seen = FirstSeen {
                    id: String::new(),
                    since: String::new(),
                    stamp,
                };
                self.first_seen.insert(self.seen_key.clone(), seen);
            }
            let Some(seen) = self.first_seen.get_mut(&self.seen_key) else {
                continue;
            };
            // An id outside IMPACT shares its place with the other such ids: checked here.
            if seen.stamp + 1 < stamp || seen.id != warning.id {
                seen.id.clone_from(&warning.id);
                seen.since
                    .clone_from(now.get_or_insert_with(|| snapshot_time(snapshot)));
            }
            seen.stamp = stamp;
            warning.since.clone_from(&seen.since);
        }
        self.first_seen.retain(|_, seen| seen.stamp == stamp);
    }
}

/// Names the cause of each process warning in its evidence, for [`Warning::group`]: a `job` row
/// when the process is a rank of a job, else a `gpu` row (its lowest GPU) unless it has one.
fn name_jobs(slots: &mut Slots, snapshot: &Snapshot) {
    for at in 0..slots.found().len() {
        let warning = &slots.found()[at];
        let Subject::Process { pid } = warning.subject else {
            continue;
        };
        let has = |name: &str| warning.evidence.iter().any(|(n, _)| n == name);
        let job = snapshot
            .jobs
            .iter()
            .find(|j| j.ranks.iter().any(|r| r.pid == pid));
        let gpu = snapshot
            .processes
            .iter()
            .filter(|p| p.pid == pid)
            .map(|p| p.gpu)
            .min();
        match (job, gpu) {
            (Some(job), _) if !has(JOB_EVIDENCE) => {
                slots.add_row(at, JOB_EVIDENCE, format_args!("{}", job.id));
            }
            (None, Some(gpu)) if !has(GPU_EVIDENCE) => {
                slots.add_row(at, GPU_EVIDENCE, format_args!("{gpu}"));
            }
            _ => {}
        }
    }
}

fn run_rules(inputs: &Inputs, config: &RulesConfig, found: &mut Slots, rows: &mut Rows) {
    found.extend(oom::check(inputs));
    if config.health.enabled {
        found.extend(health::check(inputs, &config.health));
    }
    if config.wrong_gpu.enabled {
        found.extend(wrong_gpu::check(inputs, &config.wrong_gpu));
    }
    if config.training_stalled.enabled {
        found.extend(training_stalled::check(inputs, &config.training_stalled));
    }
    if config.rank_gone.enabled {
        found.extend(rank_gone::check(inputs, &config.rank_gone));
    }
    if config.oom_risk.enabled {
        found.extend(oom_risk::check(inputs, &config.oom_risk));
    }
    if config.fragmentation.enabled {
        found.extend(fragmentation::check(inputs, &config.fragmentation));
    }
    if config.leak.enabled {
        found.extend(leak::check(inputs, &config.leak));
    }
    if config.gpu_starved.enabled {
        found.extend(gpu_starved::check(inputs, &config.gpu_starved, rows));
    }
    if config.imbalance.enabled {
        found.extend(imbalance::check(inputs, &config.imbalance));
    }
    if config.swap.enabled {
        found.extend(swap::check(inputs, &config.swap));
    }
    if config.throttle.enabled {
        throttle::check(inputs, &config.throttle, found);
    }
    if config.zombie_memory.enabled {
        found.extend(zombie_memory::check(inputs, &config.zombie_memory));
    }
    if config.ecc.enabled {
        found.extend(ecc::check(inputs, &config.ecc));
    }
    if config.cgroup_memory.enabled {
        found.extend(cgroup_memory::check(inputs, &config.cgroup_memory));
    }
    if config.oom_killed.enabled {
        found.extend(oom_killed::check(inputs, &config.oom_killed));
    }
    if config.shm_small.enabled {
        found.extend(shm_small::check(inputs, &config.shm_small));
    }
    if config.cpu_oversubscribed.enabled {
        cpu_oversubscribed::check(inputs, &config.cpu_oversubscribed, found, rows);
    }
}

/// What the rules keep of `process` at `t`, given the point recorded before it.
fn proc_point(
    process: &GpuProcess,
    snapshot: &Snapshot,
    before: Option<&Point<ProcPoint>>,
    t: f64,
) -> ProcPoint {
    ProcPoint {
        visible: process.visible,
        missing_since: missing_since(process.visible, before, t),
        gpu_memory_bytes: process.gpu_memory_bytes,
        sm_percent: process.sm_percent,
        gpu_utilization_percent: snapshot
            .gpu(process.gpu)
            .and_then(|g| g.utilization_percent),
        cpu_percent: process.cpu_percent,
        children_count: process.children_count,
        children_cpu_percent: process.children_cpu_percent,
        host_cpu_percent: snapshot.host.cpu_percent,
    }
}

/// When a pid missing from /proc at `t` was last seen there (the point before, when visible),
/// or since when it has been missing as the point before says; `t` for a first point.
fn missing_since(visible: bool, before: Option<&Point<ProcPoint>>, t: f64) -> Option<f64> {
    if visible {
        return None;
    }
    let since = match before {
        Some(point) if point.v.visible => point.t,
        Some(point) => point.v.missing_since.unwrap_or(point.t),
        None => t,
    };
    Some(since.min(t))
}

fn alloc_point(device: &DeviceAllocatorStats) -> AllocPoint {
    AllocPoint {
        allocated_bytes: device.allocated_bytes,
        reserved_bytes: device.reserved_bytes,
        inactive_split_bytes: device.inactive_split_bytes,
        alloc_retries: device.alloc_retries,
        ooms: device.ooms,
    }
}

/// The snapshot's time as RFC 3339; made from `unix_seconds` when the text is missing.
fn snapshot_time(snapshot: &Snapshot) -> String {
    if !snapshot.time.is_empty() {
        return snapshot.time.clone();
    }
    let seconds = snapshot.unix_seconds;
    // Up to the last second of year 9999, the most RFC 3339 can write.
    if !(0.0..=253_402_300_799.0).contains(&seconds) {
        return "N/A".to_string();
    }
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(seconds);
    humantime::format_rfc3339_seconds(time).to_string()
}

/// Orders subjects GPU, process, job, host, each by number or name.
pub(super) fn subject_order(subject: &Subject) -> (u8, u32, &str) {
    match subject {
        Subject::Gpu { index } => (0, *index, ""),
        Subject::Process { pid } => (1, *pid, ""),
        Subject::Job { id } => (2, 0, id),
        Subject::Host => (3, 0, ""),
    }
}

#[cfg(test)]
mod tests;
