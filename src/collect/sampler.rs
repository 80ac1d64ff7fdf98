//! The sampler: runs every source off the UI task and assembles one immutable snapshot a tick.
//!
//! Threads, and why:
//! - one *driver* thread loads the GPU library (nvmlInit can take seconds) and answers GPU-count
//!   requests;
//! - one *worker* thread per GPU, with at most one request in flight, so a GPU whose driver
//!   calls hang delays nobody: its worker stays blocked, the tick's deadline passes, and the GPU
//!   is published as stale with its last figures;
//! - the *sampler* thread itself, which reads the host (cheap /proc files), joins the GPU
//!   processes with /proc, and publishes.
//!
//! Stuck threads are never joined: the process exits around them.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use super::agent::{AgentCommand, AgentEvent, AgentHub, CommandOutcome};
use super::gpu::{DeviceError, DeviceReading, GpuSource};
use super::host::HostCollector;
use crate::config::RulesConfig;
use crate::model::{
    DriverInfo, GpuProcess, GpuSample, GpuState, HostSnapshot, Snapshot, TorchInfo,
};
use crate::rules::{group_jobs, torch_device_on, Engine};

/// How long the first snapshot waits for the GPU library before going out without GPUs.
const FIRST_LOAD_WAIT: Duration = Duration::from_secs(1);

/// Builds the GPU source; runs on the driver thread because loading may block.
pub type GpuLoader = Box<dyn FnOnce() -> Arc<dyn GpuSource> + Send>;

#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Time between snapshots.
    pub interval: Duration,
    /// A GPU without a reading for this long is published as stale.
    pub stale_after: Duration,
    /// How long one tick waits for the GPU workers before publishing without the late ones.
    pub gpu_wait: Duration,
    /// How often the GPU count is asked again (GPUs can appear and disappear).
    pub recount_every: Duration,
    pub proc_root: PathBuf,
    /// The library the loader will try, for messages while it is still loading.
    pub library_label: String,
    /// Set by the UI while the tree view is open: each tick then scans every host process.
    pub want_process_table: Arc<AtomicBool>,
    /// Thresholds and windows of the warning rules.
    pub rules: RulesConfig,
    /// Where the agents inside training processes put their sockets.
    pub agent_dir: PathBuf,
}

/// Something the UI asks of the sampler between ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SamplerRequest {
    /// Send a command to the agent inside process `pid`.
    Agent { pid: u32, command: AgentCommand },
}

impl SamplerConfig {
    pub fn for_interval(interval: Duration, library_label: String) -> Self {
        SamplerConfig {
            interval,
            stale_after: Duration::from_secs(3),
            gpu_wait: (interval / 2).min(Duration::from_millis(500)),
            recount_every: Duration::from_secs(5),
            proc_root: PathBuf::from("/proc"),
            library_label,
            want_process_table: Arc::new(AtomicBool::new(false)),
            rules: RulesConfig::default(),
            agent_dir: super::agent::default_socket_dir(),
        }
    }
}

/// Messages from the driver thread.
enum DriverEvent {
    Loaded {
        source: Arc<dyn GpuSource>,
        count: Result<u32, String>,
    },
    Count(Result<u32, String>),
}

/// A reading from a GPU worker, tagged with the worker's generation.
struct WorkerResult {
    index: u32,
    generation: u64,
    reading: Result<DeviceReading, DeviceError>,
}

/// The sampler's view of one GPU worker.
struct GpuWorker {
    generation: u64,
    requests: SyncSender<()>,
    /// When the request now in flight was sent, if any.
    pending_since: Option<Instant>,
    created: Instant,
    last_reading: Option<DeviceReading>,
    last_ok: Option<Instant>,
    lost: Option<String>,
    last_error: Option<String>,
}

pub struct Sampler {
    config: SamplerConfig,
    driver_events: Receiver<DriverEvent>,
    count_requests: Option<SyncSender<()>>,
    source: Option<Arc<dyn GpuSource>>,
    driver: DriverInfo,
    driver_loaded_at: Option<Instant>,
    last_count_request: Instant,
    workers: BTreeMap<u32, GpuWorker>,
    results_tx: Sender<WorkerResult>,
    results_rx: Receiver<WorkerResult>,
    next_generation: u64,
    host: HostCollector,
    rules: Engine,
    agents: AgentHub,
    /// Outcomes of agent commands and dropped agent connections, for the next snapshot.
    notices: Vec<String>,
    agent_log_seen: usize,
}

impl Sampler {
    /// Starts the driver thread; GPU workers follow once the library is loaded.
    pub fn start(config: SamplerConfig, loader: GpuLoader) -> Self {
        let (events_tx, driver_events) = mpsc::channel();
        let (count_tx, count_rx) = mpsc::sync_channel::<()>(1);
        thread::Builder::new()
            .name("torchtop-driver".into())
            .spawn(move || run_driver_thread(loader, events_tx, count_rx))
            .expect("spawning a thread only fails when the OS is out of resources");
        let (results_tx, results_rx) = mpsc::channel();
        let host = HostCollector::new(config.proc_root.clone());
        let rules = Engine::new(config.rules.clone());
        let agents = AgentHub::new(config.agent_dir.clone());
        let driver = DriverInfo {
            library: config.library_label.clone(),
            error: Some("loading the GPU library".into()),
            ..Default::default()
        };
        Sampler {
            config,
            driver_events,
            count_requests: Some(count_tx),
            source: None,
            driver,
            driver_loaded_at: None,
            last_count_request: Instant::now(),
            workers: BTreeMap::new(),
            results_tx,
            results_rx,
            next_generation: 0,
            host,
            rules,
            agents,
            notices: Vec::new(),
            agent_log_seen: 0,
        }
    }

    /// One snapshot: ask every idle GPU for a reading, wait up to `gpu_wait` for the answers,
    /// then read the host and publish what is known.
    pub fn tick(&mut self) -> Snapshot {
        let started = Instant::now();
        self.drain_driver_events();
        self.request_count_if_due(started);
        let asked = self.request_readings(started);
        self.collect_readings(&asked, started + self.config.gpu_wait);
        let host = self.host.sample_host();
        let mut processes = self.gpu_processes();
        self.host.join_processes(&mut processes);
        let torch = self.agents.poll();
        let mut snapshot = self.assemble(host, processes, &torch);
        if self.config.want_process_table.load(Ordering::Relaxed) {
            snapshot.host_processes = self.host.process_table();
        }
        snapshot.warnings = self.rules.evaluate(&snapshot);
        snapshot
    }

    /// The snapshot of this moment: the driver, the host and the GPUs as last read, with the
    /// agents' figures joined onto the processes.
    fn assemble(
        &mut self,
        host: HostSnapshot,
        mut processes: Vec<GpuProcess>,
        torch: &HashMap<u32, TorchInfo>,
    ) -> Snapshot {
        let mut snapshot = Snapshot::at(SystemTime::now());
        snapshot.driver = self.driver.clone();
        snapshot.host = host;
        snapshot.gpus = self.gpu_samples(Instant::now());
        join_torch(&mut processes, torch, &snapshot.gpus);
        snapshot.jobs = group_jobs(&processes);
        snapshot.processes = processes;
        snapshot.notices = self.take_notices();
        snapshot
    }

    /// A single snapshot for `--once`: waits up to `timeout` for the library and the GPUs, and
    /// measures CPU figures over at least `cpu_window`.
    pub fn once(mut self, timeout: Duration, cpu_window: Duration) -> Snapshot {
        let started = Instant::now();
        let deadline = started + timeout;
        self.host.sample_host();
        self.agents.poll();
        self.wait_for_driver(deadline);
        // In a single shot, whatever answered before the deadline is current.
        self.config.stale_after = timeout + cpu_window;
        let asked = self.request_readings(Instant::now());
        self.collect_readings(&asked, deadline);
        let mut processes = self.gpu_processes();
        self.host.join_processes(&mut processes);
        let primed = Instant::now();
        let until = (started + cpu_window).max(primed + cpu_window / 2);
        thread::sleep(until.saturating_duration_since(primed));
        let host = self.host.sample_host();
        self.host.join_processes(&mut processes);
        let torch = self.poll_agents_until_heard(deadline);
        if self.driver_loaded_at.is_none() {
            self.driver.error = Some(format!(
                "the GPU library {} did not finish loading within {:.1} s (the driver may be hung)",
                self.config.library_label,
                timeout.as_secs_f64()
            ));
        }
        let mut snapshot = self.assemble(host, processes, &torch);
        snapshot.warnings = self.rules.evaluate(&snapshot);
        snapshot
    }

    /// Polls the agents until each connected one has sent stats, or the deadline passes.
    fn poll_agents_until_heard(&mut self, deadline: Instant) -> HashMap<u32, TorchInfo> {
        loop {
            let torch = self.agents.poll();
            let all_heard = torch.values().all(|info| info.age_seconds.is_some());
            if all_heard || Instant::now() >= deadline {
                return torch;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Carries out a request from the UI; its outcome shows in the next snapshot's notices.
    pub fn handle(&mut self, request: SamplerRequest) {
        match request {
            SamplerRequest::Agent { pid, command } => {
                let label = command_label(&command);
                match self.agents.request(pid, command) {
                    Ok(_) => self
                        .notices
                        .push(format!("asked the agent of {pid} for {label}")),
                    Err(why) => self.notices.push(why),
                }
            }
        }
    }

    fn take_notices(&mut self) -> Vec<String> {
        for outcome in self.agents.take_outcomes() {
            self.notices.push(describe_outcome(&outcome));
        }
        for (pid, event) in self.agents.take_events() {
            self.notices.extend(describe_event(pid, &event));
        }
        let (fresh, total) = self.agents.log_since(self.agent_log_seen);
        self.agent_log_seen = total;
        self.notices.extend(fresh);
        std::mem::take(&mut self.notices)
    }

    fn wait_for_driver(&mut self, deadline: Instant) {
        while self.driver_loaded_at.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.driver_events.recv_timeout(left) {
                Ok(event) => self.apply_driver_event(event),
                Err(_) => return,
            }
        }
    }

    fn drain_driver_events(&mut self) {
        while let Ok(event) = self.driver_events.try_recv() {
            self.apply_driver_event(event);
        }
    }

    fn apply_driver_event(&mut self, event: DriverEvent) {
        match event {
            DriverEvent::Loaded { source, count } => {
                self.driver = source.driver_info();
                self.driver_loaded_at = Some(Instant::now());
                self.source = Some(source);
                self.apply_count(count);
            }
            DriverEvent::Count(count) => self.apply_count(count),
        }
    }

    fn apply_count(&mut self, count: Result<u32, String>) {
        if !self.driver.nvml_loaded {
            return;
        }
        let count = match count {
            Ok(count) => count,
            Err(why) => {
                self.driver.error = Some(format!("the GPU count could not be read: {why}"));
                return;
            }
        };
        self.driver.error = None;
        self.driver.gpu_count = Some(count);
        self.workers.retain(|index, _| *index < count);
        for index in 0..count {
            if !self.workers.contains_key(&index) {
                self.spawn_worker(index);
            }
        }
    }

    fn spawn_worker(&mut self, index: u32) {
        let Some(source) = self.source.clone() else {
            return;
        };
        let generation = self.next_generation;
        self.next_generation += 1;
        let (requests, request_rx) = mpsc::sync_channel::<()>(1);
        let results = self.results_tx.clone();
        let spawned = thread::Builder::new()
            .name(format!("torchtop-gpu{index}"))
            .spawn(move || {
                let mut reader = source.open_device(index);
                while request_rx.recv().is_ok() {
                    let reading = reader.read();
                    let result = WorkerResult {
                        index,
                        generation,
                        reading,
                    };
                    if results.send(result).is_err() {
                        return;
                    }
                }
            });
        if spawned.is_err() {
            return;
        }
        self.workers.insert(
            index,
            GpuWorker {
                generation,
                requests,
                pending_since: None,
                created: Instant::now(),
                last_reading: None,
                last_ok: None,
                lost: None,
                last_error: None,
            },
        );
    }

    fn request_count_if_due(&mut self, now: Instant) {
        if self.source.is_none()
            || now.duration_since(self.last_count_request) < self.config.recount_every
        {
            return;
        }
        self.last_count_request = now;
        if let Some(requests) = &self.count_requests {
            if let Err(TrySendError::Disconnected(_)) = requests.try_send(()) {
                self.count_requests = None;
            }
        }
    }

    /// Sends a request to every GPU that has none in flight; returns those asked.
    fn request_readings(&mut self, now: Instant) -> Vec<u32> {
        let mut asked = Vec::new();
        for (index, worker) in &mut self.workers {
            if worker.pending_since.is_some() || worker.lost.is_some() {
                continue;
            }
            if worker.requests.try_send(()).is_ok() {
                worker.pending_since = Some(now);
                asked.push(*index);
            }
        }
        asked
    }

    fn collect_readings(&mut self, asked: &[u32], deadline: Instant) {
        let mut waiting: Vec<u32> = asked.to_vec();
        while let Ok(result) = self.results_rx.try_recv() {
            self.apply_result(result, &mut waiting);
        }
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.results_rx.recv_timeout(left) {
                Ok(result) => self.apply_result(result, &mut waiting),
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn apply_result(&mut self, result: WorkerResult, waiting: &mut Vec<u32>) {
        let Some(worker) = self.workers.get_mut(&result.index) else {
            return;
        };
        if worker.generation != result.generation {
            return;
        }
        waiting.retain(|i| *i != result.index);
        worker.pending_since = None;
        match result.reading {
            Ok(reading) => {
                worker.last_reading = Some(reading);
                worker.last_ok = Some(Instant::now());
                worker.last_error = None;
            }
            Err(DeviceError::Lost(why)) => worker.lost = Some(why),
            Err(DeviceError::Failed(why)) => worker.last_error = Some(why),
        }
    }

    fn gpu_samples(&self, now: Instant) -> Vec<GpuSample> {
        self.workers
            .iter()
            .map(|(index, worker)| self.gpu_sample(*index, worker, now))
            .collect()
    }

    fn gpu_sample(&self, index: u32, worker: &GpuWorker, now: Instant) -> GpuSample {
        let mut sample = worker
            .last_reading
            .as_ref()
            .map(|r| r.sample.clone())
            .unwrap_or_default();
        sample.index = index;
        let since_ok = now.duration_since(worker.last_ok.unwrap_or(worker.created));
        if let Some(why) = &worker.lost {
            sample.state = GpuState::Lost;
            sample.error = Some(why.clone());
        } else if worker.last_ok.is_none() || since_ok > self.config.stale_after {
            sample.state = GpuState::Stale;
            sample.stale_seconds = Some(round_tenths(since_ok.as_secs_f64()));
            sample.error = worker
                .last_error
                .clone()
                .or_else(|| Some("the driver has not answered for this GPU".into()));
        } else {
            sample.state = GpuState::Ok;
            sample.error = worker.last_error.clone();
        }
        sample
    }

    /// The processes of every GPU that is not lost, from each GPU's latest reading.
    fn gpu_processes(&self) -> Vec<GpuProcess> {
        self.workers
            .values()
            .filter(|w| w.lost.is_none())
            .filter_map(|w| w.last_reading.as_ref())
            .flat_map(|r| r.processes.iter().cloned())
            .collect()
    }
}

/// Puts each agent's figures on its process's rows, with NVML's memory minus reserved as the
/// memory outside PyTorch's allocator on that row's GPU.
fn join_torch(processes: &mut [GpuProcess], torch: &HashMap<u32, TorchInfo>, gpus: &[GpuSample]) {
    for process in processes.iter_mut() {
        let Some(info) = torch.get(&process.pid) else {
            continue;
        };
        process.torch = Some(info.clone());
        let device = torch_device_on(process, gpus).map(|d| d.index);
        let nvml_bytes = process.gpu_memory_bytes;
        if let (Some(index), Some(info)) = (device, process.torch.as_mut()) {
            if let Some(stats) = info.devices.iter_mut().find(|d| d.index == index) {
                stats.non_pytorch_bytes = match (nvml_bytes, stats.reserved_bytes) {
                    (Some(used), Some(reserved)) => Some(used.saturating_sub(reserved)),
                    _ => None,
                };
            }
        }
    }
}

fn command_label(command: &AgentCommand) -> &'static str {
    match command {
        AgentCommand::SetInterval { .. } => "a new interval",
        AgentCommand::ResetPeak => "a peak reset",
        AgentCommand::Snapshot => "a memory snapshot",
    }
}

/// The sentence for the status line about a command's outcome. The command's name is the one
/// this monitor sent, not the agent's echo of it.
fn describe_outcome(outcome: &CommandOutcome) -> String {
    match outcome {
        CommandOutcome::Replied {
            pid,
            command,
            reply,
        } => {
            let what = command.name();
            match (reply.ok, &reply.path, &reply.error) {
                (true, Some(path), _) => format!("agent of {pid}: {what} written to {path}"),
                (true, None, _) => format!("agent of {pid}: {what} done"),
                (false, _, Some(error)) => format!("agent of {pid}: {what} failed: {error}"),
                (false, _, None) => format!("agent of {pid}: {what} failed"),
            }
        }
        CommandOutcome::TimedOut {
            pid,
            command,
            after,
        } => format!(
            "the agent of {pid} did not answer the {} within {} s",
            command.request_words(),
            after.as_secs_f64().round()
        ),
        CommandOutcome::Unanswered {
            pid,
            command,
            reason,
        } => format!(
            "the agent of {pid} did not answer the {}: {reason}",
            command.request_words()
        ),
    }
}

/// The sentence for an event an agent reported, if it is one worth the status line.
fn describe_event(pid: u32, event: &AgentEvent) -> Option<String> {
    (event.kind == "oom").then(|| match event.device {
        Some(device) => format!("agent of {pid}: PyTorch ran out of memory on cuda:{device}"),
        None => format!("agent of {pid}: PyTorch ran out of memory"),
    })
}

fn round_tenths(seconds: f64) -> f64 {
    (seconds * 10.0).round() / 10.0
}

fn run_driver_thread(loader: GpuLoader, events: Sender<DriverEvent>, counts: Receiver<()>) {
    let source = loader();
    let count = source.device_count();
    if events
        .send(DriverEvent::Loaded {
            source: source.clone(),
            count,
        })
        .is_err()
    {
        return;
    }
    while counts.recv().is_ok() {
        if events
            .send(DriverEvent::Count(source.device_count()))
            .is_err()
        {
            return;
        }
    }
}

/// Runs the sampler on its own thread, calling `publish` with each snapshot until it returns
/// false. Requests sent on the returned channel are carried out as they arrive, between ticks.
pub fn spawn_loop<F>(
    config: SamplerConfig,
    loader: GpuLoader,
    mut publish: F,
) -> Sender<SamplerRequest>
where
    F: FnMut(Snapshot) -> bool + Send + 'static,
{
    let (requests_tx, requests) = mpsc::channel();
    thread::Builder::new()
        .name("torchtop-sampler".into())
        .spawn(move || {
            let interval = config.interval;
            let mut sampler = Sampler::start(config, loader);
            // The first frame is worth more with the GPUs in it: give the library a moment.
            sampler.wait_for_driver(Instant::now() + FIRST_LOAD_WAIT);
            let mut next = Instant::now();
            loop {
                if !publish(sampler.tick()) {
                    return;
                }
                next += interval;
                let now = Instant::now();
                if next < now {
                    next = now;
                }
                while let Ok(request) =
                    requests.recv_timeout(next.saturating_duration_since(Instant::now()))
                {
                    sampler.handle(request);
                }
            }
        })
        .expect("spawning a thread only fails when the OS is out of resources");
    requests_tx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::agent::tests::{hello, my_pid, serve, TempDir};
    use crate::collect::gpu::DeviceReader;
    use crate::test_ci::PATIENCE;
    use std::io::Write;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A source whose GPU `hang` blocks forever and whose GPU `lose` reports lost.
    struct FakeSource {
        count: AtomicU32,
        hang: Option<u32>,
        lose: Option<u32>,
    }

    struct FakeReader {
        index: u32,
        hang: bool,
        lose: bool,
        /// Readings so far, published as the temperature: a figure that moves.
        reads: u32,
    }

    impl DeviceReader for FakeReader {
        fn read(&mut self) -> Result<DeviceReading, DeviceError> {
            if self.hang {
                thread::sleep(Duration::from_secs(3600));
            }
            if self.lose {
                return Err(DeviceError::Lost("gone".into()));
            }
            self.reads += 1;
            let mut reading = DeviceReading::default();
            reading.sample.temperature_c = Some(self.reads);
            reading.sample.name = Some(format!("Fake {}", self.index));
            reading.sample.utilization_percent = Some(40 + self.index);
            reading.processes.push(GpuProcess::new(
                1000 + self.index,
                self.index,
                crate::model::ProcessKind::Compute,
            ));
            Ok(reading)
        }
    }

    impl GpuSource for FakeSource {
        fn driver_info(&self) -> DriverInfo {
            DriverInfo {
                nvml_loaded: true,
                library: "fake".into(),
                driver_version: Some("1.0".into()),
                ..Default::default()
            }
        }
        fn device_count(&self) -> Result<u32, String> {
            Ok(self.count.load(Ordering::SeqCst))
        }
        fn open_device(&self, index: u32) -> Box<dyn DeviceReader> {
            Box::new(FakeReader {
                index,
                hang: self.hang == Some(index),
                lose: self.lose == Some(index),
                reads: 0,
            })
        }
    }

    /// A test config whose agent directory is a fresh one of its own (kept while the returned
    /// guard lives), never the developer's, where the hub would remove stale sockets.
    fn config() -> (SamplerConfig, TempDir) {
        let mut config = SamplerConfig::for_interval(Duration::from_millis(100), "fake".into());
        config.gpu_wait = Duration::from_millis(200);
        config.stale_after = Duration::from_millis(300);
        let agents = TempDir::new();
        config.agent_dir = agents.0.clone();
        (config, agents)
    }

    fn loader(count: u32, hang: Option<u32>, lose: Option<u32>) -> GpuLoader {
        Box::new(move || {
            Arc::new(FakeSource {
                count: AtomicU32::new(count),
                hang,
                lose,
            }) as Arc<dyn GpuSource>
        })
    }

    /// Runs `body` on a thread of its own and returns what it returns; fails the test if that
    /// takes more than [`PATIENCE`], as a body waiting on a GPU that hangs for an hour would.
    fn returns<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(body());
        });
        rx.recv_timeout(PATIENCE)
            .expect("the sampler waited for a hung GPU")
    }

    /// Ticks until a snapshot satisfies `done` (a tick waits up to `gpu_wait` on the GPUs).
    fn tick_until(sampler: &mut Sampler, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let snapshot = sampler.tick();
            if done(&snapshot) {
                return snapshot;
            }
            assert!(Instant::now() < deadline, "never: {:?}", snapshot.gpus);
        }
    }

    /// GPU 1's read blocks for an hour: ticks that come back at all did not wait for it.
    #[test]
    fn a_hung_gpu_is_stale_while_the_others_update() {
        let (first, later) = returns(|| {
            let (config, _agents) = config();
            let mut sampler = Sampler::start(config, loader(3, Some(1), None));
            sampler.wait_for_driver(Instant::now() + PATIENCE);
            let others_ok = |s: &Snapshot| {
                s.gpus.len() == 3
                    && s.gpus[0].state == GpuState::Ok
                    && s.gpus[2].state == GpuState::Ok
            };
            let first = tick_until(&mut sampler, others_ok);
            thread::sleep(Duration::from_millis(350));
            let moved = |s: &Snapshot| {
                others_ok(s) && s.gpus[0].temperature_c > first.gpus[0].temperature_c
            };
            let later = tick_until(&mut sampler, moved);
            (first, later)
        });
        assert_eq!(first.gpus[0].utilization_percent, Some(40));
        assert_eq!(first.gpus[1].state, GpuState::Stale);
        assert_eq!(first.gpus[1].utilization_percent, None);
        let pids: Vec<u32> = first.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [1000, 1002]);
        assert_eq!(later.gpus[1].state, GpuState::Stale);
        assert!(later.gpus[1].stale_seconds.unwrap() >= 0.3);
    }

    #[test]
    fn a_lost_gpu_is_lost_and_its_processes_go() {
        let (config, _agents) = config();
        let mut sampler = Sampler::start(config, loader(2, None, Some(0)));
        sampler.wait_for_driver(Instant::now() + PATIENCE);
        let snapshot = tick_until(&mut sampler, |s| {
            s.gpus.len() == 2
                && s.gpus[0].state == GpuState::Lost
                && s.gpus[1].state == GpuState::Ok
        });
        assert!(snapshot.processes.iter().all(|p| p.gpu == 1));
    }

    /// GPU 0's read blocks for an hour: `once` coming back at all gave up on it, after the
    /// timeout (a lower bound, which load cannot break).
    #[test]
    fn once_gives_up_on_a_hung_gpu_after_the_timeout() {
        let (snapshot, took) = returns(|| {
            let (config, _agents) = config();
            let sampler = Sampler::start(config, loader(2, Some(0), None));
            let started = Instant::now();
            let snapshot = sampler.once(Duration::from_secs(2), Duration::from_millis(10));
            (snapshot, started.elapsed())
        });
        assert!(took >= Duration::from_secs(2), "{took:?}");
        assert_eq!(snapshot.gpus[0].state, GpuState::Stale);
        assert_eq!(snapshot.gpus[1].state, GpuState::Ok);
    }

    #[test]
    fn once_reports_a_hung_library_load() {
        let hung: GpuLoader = Box::new(|| {
            thread::sleep(Duration::from_secs(3600));
            unreachable!()
        });
        let snapshot = returns(|| {
            let (config, _agents) = config();
            Sampler::start(config, hung).once(Duration::from_millis(200), Duration::from_millis(10))
        });
        assert!(!snapshot.driver.nvml_loaded);
        assert!(snapshot
            .driver
            .error
            .unwrap()
            .contains("did not finish loading"));
        assert!(snapshot.gpus.is_empty());
    }

    /// Ticks until a notice satisfies `found` or [`PATIENCE`] passes; returns every notice seen.
    fn notices_until(sampler: &mut Sampler, found: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            seen.extend(sampler.tick().notices);
            if seen.iter().any(|n| found(n)) {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        seen
    }

    #[test]
    fn a_reply_nobody_asked_for_never_reaches_the_status_line() {
        let (config, agents) = config();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let server = serve(&agents, move |mut stream| {
            writeln!(stream, "{}", hello()).unwrap();
            let forged =
                r#"{"v":1,"type":"reply","id":1,"ok":true,"cmd":"snapshot","path":"/etc/shadow"}"#;
            writeln!(stream, "{forged}").unwrap();
            let _ = done_rx.recv();
        });
        let mut sampler = Sampler::start(config, loader(0, None, None));
        let notices = notices_until(&mut sampler, |n| n.contains("ignored a reply"));
        drop(done_tx);
        assert!(
            notices.iter().all(|n| !n.contains("/etc/shadow")),
            "{notices:?}"
        );
        assert!(
            notices.iter().any(|n| n.contains("ignored a reply")),
            "{notices:?}"
        );
        server.join().unwrap();
    }

    #[test]
    fn a_command_without_an_answer_is_timed_out_in_the_status_line() {
        let (config, agents) = config();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let server = serve(&agents, move |mut stream| {
            writeln!(stream, "{}", hello()).unwrap();
            // Reads nothing and answers nothing, as an agent whose commands are stuck.
            let _ = done_rx.recv();
        });
        let mut sampler = Sampler::start(config, loader(0, None, None));
        let connected = Instant::now() + PATIENCE;
        while !sampler.agents.poll().contains_key(&my_pid()) && Instant::now() < connected {
            thread::sleep(Duration::from_millis(20));
        }
        sampler.handle(SamplerRequest::Agent {
            pid: my_pid(),
            command: AgentCommand::Snapshot,
        });
        let timed_out = format!(
            "the agent of {} did not answer the snapshot request within 10 s",
            my_pid()
        );
        let notices = notices_until(&mut sampler, |n| n == timed_out);
        assert!(
            notices.iter().any(|n| n.contains("asked the agent of")),
            "{notices:?}"
        );
        assert!(notices.contains(&timed_out), "{notices:?}");
        drop(sampler);
        drop(done_tx);
        server.join().unwrap();
    }
}
