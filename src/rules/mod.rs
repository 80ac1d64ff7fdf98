//! Warnings as pure functions of the snapshot history.
//!
//! This module owns the [`Engine`]: fed one [`Snapshot`] at a time, it keeps short bounded
//! windows of the figures the rules need (per GPU, per (pid, GPU), per (pid, torch device) and
//! for the host), calls one pure function per rule over them, and returns the warnings most
//! severe first. Each rule lives in its own file and its thresholds in [`RulesConfig`]. Time is
//! the snapshot's own (`unix_seconds`, `time`), never the wall clock, so a replayed history gives
//! the same warnings.
//!
//! Rule ids: `gpu-lost`, `gpu-unresponsive`, `driver-missing`, `ecc`, `training-stalled`,
//! `wrong-gpu`, `oom-risk`, `leak`, `fragmentation`, `zombie-memory`, `swap`, `imbalance`,
//! `throttle`, `gpu-starved`, `oom`: the order of [`IMPACT`], which sorts warnings of one
//! severity.
//! Each process warning gets a `job` evidence row when its process is a rank of a job, else a
//! `gpu` row (its lowest GPU) when it has none: [`Warning::group`] groups on them.
//!
//! Two facts the rules rely on from the collectors:
//! - `DeviceAllocatorStats::index` is the process's own torch ordinal (`cuda:N`), which maps to
//!   an NVML GPU through the process's `CUDA_VISIBLE_DEVICES` (see [`torch_device_on`]).
//! - `GpuSample::throttle_reasons` holds the names in
//!   [`THROTTLE_REASON_NAMES`](crate::config::THROTTLE_REASON_NAMES).

mod ecc;
mod fragmentation;
mod gpu_starved;
mod health;
mod imbalance;
pub(crate) mod jobs;
mod leak;
mod oom;
mod oom_risk;
mod swap;
mod throttle;
pub(crate) mod training;
mod training_stalled;
mod wrong_gpu;
mod zombie_memory;

#[cfg(test)]
mod testkit;

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub(crate) use crate::config::RulesConfig;
use crate::model::{
    DeviceAllocatorStats, GpuProcess, GpuSample, Severity, Snapshot, Subject, Warning,
    GPU_EVIDENCE, JOB_EVIDENCE,
};
pub(crate) use jobs::group_jobs;
use training_stalled::StepTrack;

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
    wrong_gpu::ID,
    oom::ID,
    oom_risk::ID,
    leak::ID,
    fragmentation::ID,
    zombie_memory::ID,
    swap::ID,
    imbalance::ID,
    throttle::ID,
    gpu_starved::ID,
];

/// Where `id` stands in [`IMPACT`].
fn impact_rank(id: &str) -> usize {
    IMPACT.iter().position(|i| *i == id).unwrap_or(IMPACT.len())
}

/// The most points one window keeps; past it the older half is thinned to every second point,
/// so a long window at a fast refresh keeps its time span at a coarser grain.
const MAX_POINTS: usize = 4096;

/// One value at one sample time (seconds since the epoch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point<T> {
    pub(crate) t: f64,
    pub(crate) v: T,
}

/// A time-ordered, bounded series of points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Window<T> {
    points: Vec<Point<T>>,
}

impl<T> Default for Window<T> {
    fn default() -> Self {
        Window { points: Vec::new() }
    }
}

impl<T> Window<T> {
    /// Adds a point and forgets what is older than `keep_seconds` before it, keeping one point
    /// at or before that edge so a full window always has its starting point.
    pub(crate) fn push(&mut self, t: f64, v: T, keep_seconds: f64) {
        if !t.is_finite() {
            return;
        }
        match self.points.last() {
            // The clock went back: the old points no longer line up with the new ones.
            Some(last) if t < last.t => self.points.clear(),
            Some(last) if t == last.t => {
                self.points.pop();
            }
            _ => {}
        }
        self.points.push(Point { t, v });
        let cutoff = t - keep_seconds;
        let older = self.points.partition_point(|p| p.t <= cutoff);
        self.points.drain(..older.saturating_sub(1));
        if self.points.len() > MAX_POINTS {
            let half = self.points.len() / 2;
            let mut i = 0;
            self.points.retain(|_| {
                let keep = i >= half || i % 2 == 0;
                i += 1;
                keep
            });
        }
    }

    pub(crate) fn latest(&self) -> Option<&Point<T>> {
        self.points.last()
    }

    /// The points spanning at least the last `seconds`, starting at the newest point at or
    /// before that edge; `None` while the window has not been watched that long.
    pub(crate) fn covering(&self, seconds: f64) -> Option<&[Point<T>]> {
        let newest = self.points.last()?.t;
        let at_or_before = self.points.partition_point(|p| p.t <= newest - seconds);
        (at_or_before > 0).then(|| &self.points[at_or_before - 1..])
    }

    /// The points of the last `seconds`, however long the window has been watched.
    pub(crate) fn recent(&self, seconds: f64) -> &[Point<T>] {
        let Some(newest) = self.points.last().map(|p| p.t) else {
            return &[];
        };
        let start = self.points.partition_point(|p| p.t < newest - seconds);
        &self.points[start..]
    }
}

/// A window that belongs to one process: cleared when the pid is reused by another process.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tracked<T> {
    start_ticks: Option<u64>,
    pub(crate) window: Window<T>,
}

impl<T> Tracked<T> {
    fn push(&mut self, start_ticks: Option<u64>, t: f64, v: T, keep_seconds: f64) {
        if let (Some(old), Some(new)) = (self.start_ticks, start_ticks) {
            if old != new {
                self.window = Window::default();
            }
        }
        self.start_ticks = start_ticks.or(self.start_ticks);
        self.window.push(t, v, keep_seconds);
    }
}

/// What the rules read of one GPU at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct GpuPoint {
    pub(crate) utilization_percent: Option<u32>,
    pub(crate) memory_used_bytes: Option<u64>,
    pub(crate) ecc_corrected: Option<u64>,
    pub(crate) ecc_uncorrected: Option<u64>,
}

/// What the rules read of one (process, GPU) pair at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct ProcPoint {
    pub(crate) visible: bool,
    pub(crate) gpu_memory_bytes: Option<u64>,
    pub(crate) sm_percent: Option<u32>,
    /// The whole GPU's utilization, for processes NVML gives no SM figure for.
    pub(crate) gpu_utilization_percent: Option<u32>,
    pub(crate) cpu_percent: Option<f64>,
    pub(crate) children_count: Option<u32>,
    pub(crate) children_cpu_percent: Option<f64>,
    pub(crate) host_cpu_percent: Option<f64>,
}

/// What the rules read of one process's allocator on one torch device at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct AllocPoint {
    pub(crate) allocated_bytes: Option<u64>,
    pub(crate) reserved_bytes: Option<u64>,
    pub(crate) inactive_split_bytes: Option<u64>,
    pub(crate) alloc_retries: Option<u64>,
    pub(crate) ooms: Option<u64>,
}

/// What the rules read of the host at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct HostPoint {
    pub(crate) swap_used_bytes: Option<u64>,
    pub(crate) memory_available_bytes: Option<u64>,
    pub(crate) memory_total_bytes: Option<u64>,
}

/// Everything a rule may read: the current snapshot and the windows. Read-only.
pub(crate) struct Inputs<'a> {
    pub(crate) snapshot: &'a Snapshot,
    pub(crate) gpus: &'a BTreeMap<u32, Window<GpuPoint>>,
    /// Keyed by (pid, NVML GPU index).
    pub(crate) processes: &'a BTreeMap<(u32, u32), Tracked<ProcPoint>>,
    /// Keyed by (pid, torch device index).
    pub(crate) allocators: &'a BTreeMap<(u32, u32), Tracked<AllocPoint>>,
    pub(crate) host: &'a Window<HostPoint>,
    /// Keyed by pid: the step counters of the processes with an agent.
    pub(crate) steps: &'a BTreeMap<u32, StepTrack>,
}

impl Inputs<'_> {
    /// The first process row of a pid in the current snapshot.
    pub(crate) fn process(&self, pid: u32) -> Option<&GpuProcess> {
        self.snapshot.processes.iter().find(|p| p.pid == pid)
    }
}

/// Each tracked window with its (pid, GPU or torch device) key and the points spanning at least
/// the last `seconds`; windows not watched that long yet are left out.
pub(crate) fn covering<T>(
    tracked: &BTreeMap<(u32, u32), Tracked<T>>,
    seconds: f64,
) -> impl Iterator<Item = ((u32, u32), &[Point<T>])> {
    tracked
        .iter()
        .filter_map(move |(&key, t)| Some((key, t.window.covering(seconds)?)))
}

/// The warnings engine: owns the windows and the first-seen times.
#[derive(Debug, Clone)]
pub(crate) struct Engine {
    config: RulesConfig,
    keep_seconds: f64,
    gpus: BTreeMap<u32, Window<GpuPoint>>,
    processes: BTreeMap<(u32, u32), Tracked<ProcPoint>>,
    allocators: BTreeMap<(u32, u32), Tracked<AllocPoint>>,
    host: Window<HostPoint>,
    steps: BTreeMap<u32, StepTrack>,
    first_seen: HashMap<(String, SubjectKey), String>,
}

impl Engine {
    pub(crate) fn new(config: RulesConfig) -> Self {
        let keep_seconds = config.longest_window_seconds();
        Engine {
            config,
            keep_seconds,
            gpus: BTreeMap::new(),
            processes: BTreeMap::new(),
            allocators: BTreeMap::new(),
            host: Window::default(),
            steps: BTreeMap::new(),
            first_seen: HashMap::new(),
        }
    }

    /// Records the snapshot and returns the warnings that hold now: most severe first, then by
    /// [`IMPACT`], then by subject; one per (id, subject), its `since` kept while it holds
    /// without a break.
    pub(crate) fn evaluate(&mut self, snapshot: &Snapshot) -> Vec<Warning> {
        self.record(snapshot);
        let inputs = Inputs {
            snapshot,
            gpus: &self.gpus,
            processes: &self.processes,
            allocators: &self.allocators,
            host: &self.host,
            steps: &self.steps,
        };
        let mut found = run_rules(&inputs, &self.config);
        name_jobs(&mut found, snapshot);
        self.finish(found, snapshot)
    }

    fn record(&mut self, snapshot: &Snapshot) {
        let t = snapshot.unix_seconds;
        let keep = self.keep_seconds;
        for gpu in &snapshot.gpus {
            let point = GpuPoint {
                utilization_percent: gpu.utilization_percent,
                memory_used_bytes: gpu.memory_used_bytes,
                ecc_corrected: gpu.ecc_volatile_corrected,
                ecc_uncorrected: gpu.ecc_volatile_uncorrected,
            };
            self.gpus.entry(gpu.index).or_default().push(t, point, keep);
        }
        self.gpus.retain(|index, _| snapshot.gpu(*index).is_some());

        let mut seen_processes = BTreeSet::new();
        let mut seen_allocators = BTreeSet::new();
        for process in &snapshot.processes {
            if seen_processes.insert((process.pid, process.gpu)) {
                let point = proc_point(process, snapshot);
                self.processes
                    .entry((process.pid, process.gpu))
                    .or_default()
                    .push(process.start_ticks, t, point, keep);
            }
            let devices = process.torch.iter().flat_map(|torch| &torch.devices);
            for device in devices {
                if seen_allocators.insert((process.pid, device.index)) {
                    self.allocators
                        .entry((process.pid, device.index))
                        .or_default()
                        .push(process.start_ticks, t, alloc_point(device), keep);
                }
            }
        }
        self.processes.retain(|key, _| seen_processes.contains(key));
        self.allocators
            .retain(|key, _| seen_allocators.contains(key));

        let host = &snapshot.host;
        let point = HostPoint {
            swap_used_bytes: host.swap.used_bytes,
            memory_available_bytes: host.memory.available_bytes,
            memory_total_bytes: host.memory.total_bytes,
        };
        self.host.push(t, point, keep);
        training_stalled::record(&mut self.steps, snapshot);
    }

    fn finish(&mut self, mut found: Vec<Warning>, snapshot: &Snapshot) -> Vec<Warning> {
        found.sort_by(|a, b| {
            b.severity
                .cmp(&a.severity)
                .then_with(|| impact_rank(&a.id).cmp(&impact_rank(&b.id)))
                .then_with(|| a.id.cmp(&b.id))
                .then_with(|| SubjectKey::of(&a.subject).cmp(&SubjectKey::of(&b.subject)))
        });
        let mut kept: Vec<Warning> = Vec::with_capacity(found.len());
        for warning in found {
            let duplicate = kept
                .iter()
                .any(|k| k.id == warning.id && k.subject == warning.subject);
            if !duplicate {
                kept.push(warning);
            }
        }
        let now = snapshot_time(snapshot);
        let mut first_seen = HashMap::with_capacity(kept.len());
        for warning in &mut kept {
            let key = (warning.id.clone(), SubjectKey::of(&warning.subject));
            let since = self
                .first_seen
                .get(&key)
                .cloned()
                .unwrap_or_else(|| now.clone());
            warning.since = since.clone();
            first_seen.insert(key, since);
        }
        self.first_seen = first_seen;
        kept
    }
}

/// Names the cause of each process warning in its evidence, for [`Warning::group`]: a `job` row
/// when the process is a rank of a job, else a `gpu` row (its lowest GPU) unless it has one.
fn name_jobs(found: &mut [Warning], snapshot: &Snapshot) {
    for warning in found.iter_mut() {
        let Subject::Process { pid } = warning.subject else {
            continue;
        };
        let has = |w: &Warning, name: &str| w.evidence.iter().any(|(n, _)| n == name);
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
            (Some(job), _) if !has(warning, JOB_EVIDENCE) => warning
                .evidence
                .push((JOB_EVIDENCE.to_string(), job.id.clone())),
            (None, Some(gpu)) if !has(warning, GPU_EVIDENCE) => warning
                .evidence
                .push((GPU_EVIDENCE.to_string(), gpu.to_string())),
            _ => {}
        }
    }
}

fn run_rules(inputs: &Inputs, config: &RulesConfig) -> Vec<Warning> {
    let mut found = oom::check(inputs);
    if config.health.enabled {
        found.extend(health::check(inputs, &config.health));
    }
    if config.wrong_gpu.enabled {
        found.extend(wrong_gpu::check(inputs, &config.wrong_gpu));
    }
    if config.training_stalled.enabled {
        found.extend(training_stalled::check(inputs, &config.training_stalled));
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
        found.extend(gpu_starved::check(inputs, &config.gpu_starved));
    }
    if config.imbalance.enabled {
        found.extend(imbalance::check(inputs, &config.imbalance));
    }
    if config.swap.enabled {
        found.extend(swap::check(inputs, &config.swap));
    }
    if config.throttle.enabled {
        found.extend(throttle::check(inputs, &config.throttle));
    }
    if config.zombie_memory.enabled {
        found.extend(zombie_memory::check(inputs, &config.zombie_memory));
    }
    if config.ecc.enabled {
        found.extend(ecc::check(inputs, &config.ecc));
    }
    found
}

fn proc_point(process: &GpuProcess, snapshot: &Snapshot) -> ProcPoint {
    ProcPoint {
        visible: process.visible,
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

/// Orders subjects GPU, process, job, host, each by number or name; also the first-seen key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct SubjectKey(u8, u32, String);

impl SubjectKey {
    fn of(subject: &Subject) -> Self {
        match subject {
            Subject::Gpu { index } => SubjectKey(0, *index, String::new()),
            Subject::Process { pid } => SubjectKey(1, *pid, String::new()),
            Subject::Job { id } => SubjectKey(2, 0, id.clone()),
            Subject::Host => SubjectKey(3, 0, String::new()),
        }
    }
}

/// The allocator stats of `process` that belong to the NVML GPU its row is for.
///
/// Torch numbers devices after `CUDA_VISIBLE_DEVICES` (indices or `GPU-` UUIDs, possibly
/// abbreviated); without that variable torch ordinal N is taken to be NVML GPU N. Where the
/// environment is unreadable and the process uses one device, that device is the one.
pub(crate) fn torch_device_on<'a>(
    process: &'a GpuProcess,
    gpus: &[GpuSample],
) -> Option<&'a DeviceAllocatorStats> {
    let devices = &process.torch.as_ref()?.devices;
    let ordinal = match &process.env {
        Some(env) => match &env.cuda_visible_devices {
            Some(list) => visible_position(list, process.gpu, gpus)?,
            None => process.gpu,
        },
        None if devices.len() == 1 => return devices.first(),
        None => process.gpu,
    };
    devices.iter().find(|d| d.index == ordinal)
}

fn visible_position(list: &str, gpu_index: u32, gpus: &[GpuSample]) -> Option<u32> {
    let uuid = gpus
        .iter()
        .find(|g| g.index == gpu_index)
        .and_then(|g| g.uuid.as_deref());
    let position = list.split(',').map(str::trim).position(|entry| {
        entry.parse::<u32>().ok() == Some(gpu_index)
            || uuid.is_some_and(|u| {
                entry.len() >= 5 && entry.starts_with("GPU-") && u.starts_with(entry)
            })
    })?;
    u32::try_from(position).ok()
}

/// How much a counter rose between the first and last known values of `points`, ignoring
/// resets (a driver reload or a restarted agent counts from zero again): the sum of the rises
/// between consecutive known values, and the latest value.
pub(crate) fn counter_rise<T>(
    points: &[Point<T>],
    value: impl Fn(&T) -> Option<u64>,
) -> Option<(u64, u64)> {
    let mut known = points.iter().filter_map(|p| value(&p.v));
    let mut previous = known.next()?;
    let mut rise = 0u64;
    for current in known {
        rise = rise.saturating_add(current.saturating_sub(previous));
        previous = current;
    }
    Some((rise, previous))
}

/// The mean of the known values.
pub(crate) fn mean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, count) = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (count > 0).then(|| sum / count as f64)
}

pub(crate) const BYTES_PER_MIB: f64 = 1024.0 * 1024.0;

/// A size the way the screen shows it: "512 MiB", "20.1 GiB".
pub(crate) fn fmt_bytes(bytes: f64) -> String {
    let gib = bytes / (BYTES_PER_MIB * 1024.0);
    if gib.abs() >= 1.0 {
        format!("{gib:.1} GiB")
    } else {
        format!("{:.0} MiB", bytes / BYTES_PER_MIB)
    }
}

pub(crate) fn fmt_opt_bytes(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "N/A".to_string(), |b| fmt_bytes(b as f64))
}

pub(crate) fn fmt_opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "N/A".to_string(), |v| v.to_string())
}

pub(crate) fn fmt_percent(value: f64) -> String {
    format!("{value:.0}%")
}

/// A span of seconds as "45 s", "2 min", "1.5 h".
pub(crate) fn fmt_seconds(seconds: f64) -> String {
    if seconds < 120.0 {
        format!("{seconds:.0} s")
    } else if seconds < 7200.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

/// The opening of a per-(process, GPU) message: "pid 5 holds 20.0 GiB on GPU 0".
pub(crate) fn holds_on_gpu(pid: u32, gpu: u32, memory: Option<u64>) -> String {
    format!("pid {pid} holds {} on GPU {gpu}", fmt_opt_bytes(memory))
}

/// The evidence rows that go with [`holds_on_gpu`]; a rule appends its own.
pub(crate) fn held_on_gpu_evidence(gpu: u32, memory: Option<u64>) -> Vec<(&'static str, String)> {
    vec![
        ("gpu", gpu.to_string()),
        ("gpu memory", fmt_opt_bytes(memory)),
    ]
}

/// A warning with `since` left empty; the engine fills it in.
pub(crate) fn warning(
    id: &str,
    severity: Severity,
    subject: Subject,
    message: String,
    evidence: Vec<(&str, String)>,
    remedy: &str,
) -> Warning {
    Warning {
        id: id.to_string(),
        severity,
        subject,
        message,
        evidence: evidence
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect(),
        remedy: remedy.to_string(),
        since: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::*;
    use super::*;
    use crate::model::{LaunchEnv, TorchInfo};

    #[test]
    fn a_window_covers_only_after_it_has_been_watched_long_enough() {
        let mut window = Window::default();
        for t in 0..10 {
            window.push(f64::from(t), t, 5.0);
        }
        let covering = window.covering(5.0).expect("watched 9 s");
        assert_eq!(covering.first().map(|p| p.v), Some(4));
        assert_eq!(covering.last().map(|p| p.v), Some(9));
        assert!(window.covering(20.0).is_none());
        assert_eq!(window.recent(2.0).len(), 3);
        assert_eq!(window.covering(0.0).map(<[_]>::len), Some(1));
    }

    #[test]
    fn a_window_stays_bounded_and_restarts_when_the_clock_goes_back() {
        let mut window = Window::default();
        for t in 0..20_000 {
            window.push(f64::from(t) * 0.01, t, 1_000.0);
        }
        assert!(window.points.len() <= MAX_POINTS);
        assert!(
            window.covering(150.0).is_some(),
            "thinning keeps the time span"
        );
        window.push(1.0, 7, 1_000.0);
        assert_eq!(window.points.len(), 1);
        window.push(f64::NAN, 8, 1_000.0);
        assert_eq!(window.latest().map(|p| p.v), Some(7));
    }

    #[test]
    fn counter_rise_sums_rises_and_ignores_resets() {
        let points: Vec<Point<Option<u64>>> = [Some(3), None, Some(5), Some(0), Some(2)]
            .into_iter()
            .enumerate()
            .map(|(i, v)| Point { t: i as f64, v })
            .collect();
        assert_eq!(counter_rise(&points, |v| *v), Some((4, 2)));
        let flat: Vec<Point<Option<u64>>> = vec![Point { t: 0.0, v: Some(1) }];
        assert_eq!(counter_rise(&flat, |v| *v), Some((0, 1)));
        assert_eq!(counter_rise(&flat[..0], |v| *v), None);
    }

    #[test]
    fn torch_devices_map_through_cuda_visible_devices() {
        let gpus = vec![
            GpuSample {
                index: 2,
                uuid: Some("GPU-abcdef12-0000".into()),
                ..Default::default()
            },
            GpuSample {
                index: 3,
                uuid: Some("GPU-99999999-0000".into()),
                ..Default::default()
            },
        ];
        let mut process = process(10, 3, 1 << 30);
        process.torch = Some(TorchInfo {
            devices: vec![device(0, 1, 2), device(1, 3, 4)],
            ..Default::default()
        });
        process.env = Some(LaunchEnv {
            cuda_visible_devices: Some("2,3".into()),
            ..Default::default()
        });
        assert_eq!(torch_device_on(&process, &gpus).map(|d| d.index), Some(1));
        process.env.as_mut().unwrap().cuda_visible_devices = Some("GPU-9999, GPU-abcd".into());
        assert_eq!(torch_device_on(&process, &gpus).map(|d| d.index), Some(0));
        process.env.as_mut().unwrap().cuda_visible_devices = Some("0".into());
        assert_eq!(torch_device_on(&process, &gpus), None);
        process.env.as_mut().unwrap().cuda_visible_devices = None;
        assert_eq!(
            torch_device_on(&process, &gpus),
            None,
            "cuda:3 is not reported"
        );
    }

    #[test]
    fn warnings_come_most_severe_first_then_by_id_and_subject() {
        let mut engine = Engine::new(RulesConfig::default());
        let mut snap = snapshot(100.0);
        snap.gpus = vec![
            gpu(1, 97 * GIB / 100 * 80, 80 * GIB, 90),
            gpu(0, 97 * GIB / 100 * 80, 80 * GIB, 90),
        ];
        snap.gpus[0].throttle_reasons = Some(vec!["hw_thermal_slowdown".into()]);
        let mut oom = process(7, 0, 10 * GIB);
        oom.torch = Some(torch_on(vec![with_ooms(device(0, GIB, 2 * GIB), 1)]));
        snap.processes.push(oom.clone());
        engine.evaluate(&snap);
        let mut later = snapshot(101.0);
        later.gpus = snap.gpus.clone();
        oom.torch = Some(torch_on(vec![with_ooms(device(0, GIB, 2 * GIB), 2)]));
        later.processes.push(oom);
        let warnings = engine.evaluate(&later);
        let order: Vec<(&str, Severity, Subject)> = warnings
            .iter()
            .map(|w| (w.id.as_str(), w.severity, w.subject.clone()))
            .collect();
        assert_eq!(
            order,
            vec![
                ("oom-risk", Severity::Critical, Subject::Process { pid: 7 }),
                ("oom-risk", Severity::Warn, Subject::Gpu { index: 0 }),
                ("oom-risk", Severity::Warn, Subject::Gpu { index: 1 }),
                ("throttle", Severity::Warn, Subject::Gpu { index: 1 }),
            ]
        );
        // A process outside any job is grouped on its GPU, as the `w` view groups it.
        assert_eq!(warnings[0].group(), "oom-risk@GPU 0");
    }

    #[test]
    fn since_is_kept_while_the_condition_holds_and_reset_after_a_break() {
        let mut engine = Engine::new(RulesConfig::default());
        let full = |t: f64| {
            let mut snap = snapshot(t);
            snap.gpus = vec![gpu(0, 79 * GIB, 80 * GIB, 90)];
            snap
        };
        let calm = |t: f64| {
            let mut snap = snapshot(t);
            snap.gpus = vec![gpu(0, 10 * GIB, 80 * GIB, 90)];
            snap
        };
        let first = engine.evaluate(&full(1_000.0));
        assert_eq!(first[0].since, rfc3339(1_000.0));
        let second = engine.evaluate(&full(1_001.0));
        assert_eq!(second[0].since, rfc3339(1_000.0));
        assert!(engine.evaluate(&calm(1_002.0)).is_empty());
        let again = engine.evaluate(&full(1_003.0));
        assert_eq!(again[0].since, rfc3339(1_003.0));
    }

    #[test]
    fn since_falls_back_to_unix_seconds_when_the_time_text_is_missing() {
        let mut snap = snapshot(0.0);
        snap.time.clear();
        snap.unix_seconds = 1_700_000_000.0;
        assert_eq!(snapshot_time(&snap), "2023-11-14T22:13:20Z");
        snap.unix_seconds = f64::NAN;
        assert_eq!(snapshot_time(&snap), "N/A");
    }

    #[test]
    fn a_config_file_changes_what_fires() {
        let snap = |t: f64| {
            let mut snap = snapshot(t);
            snap.gpus = vec![gpu(0, 70 * GIB, 80 * GIB, 90)];
            snap
        };
        let mut default_engine = Engine::new(RulesConfig::default());
        assert!(default_engine.evaluate(&snap(1.0)).is_empty());
        let text = "[rules.oom_risk]\nmemory_fraction = 0.85\n";
        let config = crate::config::parse(text).expect("valid config");
        let mut engine = Engine::new(config.rules);
        let warnings = engine.evaluate(&snap(1.0));
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert_eq!(warnings[0].id, "oom-risk");
    }

    #[test]
    fn a_disabled_rule_stays_quiet() {
        let mut config = RulesConfig::default();
        config.oom_risk.enabled = false;
        let mut engine = Engine::new(config);
        let mut snap = snapshot(1.0);
        snap.gpus = vec![gpu(0, 79 * GIB, 80 * GIB, 90)];
        assert!(engine.evaluate(&snap).is_empty());
    }
}
