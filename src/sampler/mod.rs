//! The sampler, the pipeline between the sources and the screen: it runs every source off the
//! UI task, joins what they said, runs the warning rules, and publishes one immutable
//! [`Snapshot`] a tick.
//!
//! Threads, and why:
//! - the *sampler* thread, which reads the host (cheap /proc files), joins the GPU processes
//!   with /proc and the agents' figures, runs the rules, and publishes; in the monitor it also
//!   reads the healthy GPUs itself, so that a tick wakes this thread alone ([`ticker`]);
//! - its *watchdog*, asleep on an alarm armed during those GPU calls: when one overruns, the
//!   stuck thread keeps that GPU as a worker of its own and a new sampler thread goes on;
//! - the GPU pool ([`gpus`]): one *driver* thread that loads the GPU library, the workers of
//!   the GPUs whose calls overran (each until it answers promptly again), and, for `--once`
//!   and the first tick, a *worker* that reads every healthy GPU.
//!
//! Stuck threads are never joined: the process exits around them.

mod gpu_worker;
mod gpus;

mod detail;
mod memory;
mod notices;
mod publish;
mod spawn;
mod ticker;
mod torch_join;
mod vendors;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::collect::agent::{AgentHub, Heard};
use crate::collect::host::HostCollector;
pub use crate::collect::GpuLoader;
use crate::model::{GpuProcess, HostSnapshot, MemsnapReady, OomReport, Snapshot};
use crate::protocol::AgentCommand;
use crate::rules::RulesConfig;
use crate::rules::{group_jobs_into, Engine};
use gpus::GpuPool;
use notices::{command_label, describe_event, describe_outcome};
use publish::Recycler;
pub(crate) use spawn::{spawn_loop, spawn_shared_loop};
use torch_join::{join_torch, mark_silent, TorchJoin};

/// How long the monitor's first snapshot waits for the agents it found to send their figures:
/// an agent answers its connection at once, and one that does not (a stopped process) holds
/// only this first snapshot back, on the sampler's thread, never a key.
const FIRST_AGENTS_WAIT: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Time between snapshots.
    pub(crate) interval: Duration,
    /// A GPU without a reading for this long is published as stale.
    pub(crate) stale_after: Duration,
    /// How long one tick waits for the GPU workers before publishing without the late ones.
    pub(crate) gpu_wait: Duration,
    /// How often the GPU count is asked again (GPUs can appear and disappear).
    pub(crate) recount_every: Duration,
    pub(crate) proc_root: PathBuf,
    /// Where `/sys/fs/cgroup` and the container marker files are: `/`, or `TORCHTOP_FS_ROOT`.
    pub(crate) fs_root: PathBuf,
    /// The library the loader will try, for messages while it is still loading.
    pub(crate) library_label: String,
    /// Thresholds and windows of the warning rules.
    pub rules: RulesConfig,
    /// Where the agents inside training processes put their sockets.
    pub(crate) agent_dir: PathBuf,
    /// Where the NVIDIA device nodes live: `/dev`, or `TORCHTOP_DEV_DIR` (for tests).
    pub(crate) dev_dir: PathBuf,
    /// Where the AMD collector reads `sys/` and `proc/`: `/`, or `TORCHTOP_AMD_ROOT` (tests).
    pub(crate) amd_root: PathBuf,
}

/// Something the UI asks of the sampler between ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SamplerRequest {
    /// Send a command to the agent inside process `pid`.
    Agent { pid: u32, command: AgentCommand },
    /// Send the tree view's host processes each tick, or stop. `visible`: the pids of the rows
    /// on screen (of the tree, or of the GPU process table when the tree is closed), the only
    /// ones whose figures are read again each tick (GPU processes off screen are read every
    /// few seconds); `None` reads every row again each tick (a recording, which has no
    /// screen).
    ProcessTable {
        wanted: bool,
        visible: Option<Vec<u32>>,
    },
    /// `S`: make the agent of `pid` write a snapshot (recording memory history until then,
    /// unless it records already), to be opened in the viewer once written.
    MemoryView { pid: u32 },
    /// The detail view of `pid` opened (read its cwd, environ, cgroup and children each
    /// tick), or closed with `None`.
    Detail { pid: Option<u32> },
    /// The setup screen's refresh rate: sample every this often from now on.
    Interval(Duration),
    /// Sent by a GPU worker, not the UI: its round is over (the readings are posted in the
    /// GPUs' cells). It shares the UI's channel so that the sampler waits on one channel only.
    GpuRoundDone { worker: u64 },
}

impl SamplerConfig {
    pub fn for_interval(interval: Duration, library_label: String) -> Self {
        // TORCHTOP_FS_ROOT is for tests: /proc, /sys/fs/cgroup and /.dockerenv are read below
        // this directory instead of /, to run the binary against fixture trees. It only changes
        // what is shown and warned about: the actions (signals, renice, attach) always read
        // the real /proc and check the target's identity there, and nothing under this root is
        // written, executed or loaded. Whoever sets root's environment has easier ways in.
        let fs_root = std::env::var_os("TORCHTOP_FS_ROOT")
            .filter(|root| !root.is_empty())
            .map_or_else(|| PathBuf::from("/"), PathBuf::from);
        SamplerConfig {
            interval,
            stale_after: Duration::from_secs(3),
            gpu_wait: (interval / 2).min(Duration::from_millis(500)),
            // A GPU that falls off the bus shows as lost by its own calls' errors; the count
            // only adds or drops GPUs, which is rare: a wake-up of the driver thread every
            // 10 s is enough.
            recount_every: Duration::from_secs(10),
            proc_root: fs_root.join("proc"),
            fs_root,
            library_label,
            rules: RulesConfig::default(),
            agent_dir: crate::protocol::default_socket_dir(),
            dev_dir: std::env::var_os("TORCHTOP_DEV_DIR")
                .map_or_else(|| PathBuf::from("/dev"), PathBuf::from),
            amd_root: vendors::amd_root_from_env(),
        }
    }
}

pub struct Sampler {
    config: SamplerConfig,
    gpus: GpuPool,
    /// Asked for by the tree view: each tick then lists the host processes.
    want_process_table: bool,
    /// The pids of the rows on screen (tree or GPU table), sorted; `None`: every row.
    table_on_screen: Option<Vec<u32>>,
    host: HostCollector,
    rules: Engine,
    agents: AgentHub,
    /// Outcomes of agent commands and dropped agent connections, for the next snapshot.
    notices: Vec<String>,
    agent_log_seen: usize,
    /// The OOMs agents reported, oldest first, at most [`memory::MAX_OOMS`].
    ooms: VecDeque<OomReport>,
    /// Snapshot commands sent for the viewer, by command id, with the pid asked.
    memory_views: HashMap<u64, u32>,
    /// The latest snapshot written for the viewer, repeated in every snapshot until a newer one.
    memsnap_ready: Option<MemsnapReady>,
    /// The detail view's process, read each tick while the view is open.
    detail: detail::DetailReader,
    /// The agents' figures as of the latest poll, shared with the hub; kept for their room.
    heard: HashMap<u32, Heard>,
    /// Whether a snapshot already waited for the agents it found ([`FIRST_AGENTS_WAIT`]).
    agents_awaited: bool,
    /// The joined figures kept between ticks, and the allocation churn.
    torch_join: TorchJoin,
    /// The rows of agents whose processes hold no GPU, kept for its room.
    agent_only: Vec<GpuProcess>,
    /// Shared snapshots published lately, refilled once their receivers drop them.
    recycler: Recycler,
}

impl Sampler {
    /// Starts the driver thread; GPU workers follow once the library is loaded.
    pub fn start(config: SamplerConfig, loader: GpuLoader) -> Self {
        Self::start_with_inbox(config, loader, mpsc::channel())
    }

    /// As [`Sampler::start`], with the channel the sampler waits on: its sender is the UI's
    /// way to send requests, and the GPU workers' way to say a round is over.
    fn start_with_inbox(
        config: SamplerConfig,
        loader: GpuLoader,
        inbox: (Sender<SamplerRequest>, Receiver<SamplerRequest>),
    ) -> Self {
        let loader = vendors::with_amd(loader, config.amd_root.clone());
        let gpus = GpuPool::start(
            loader,
            &config.library_label,
            inbox,
            config.stale_after,
            config.gpu_wait,
            config.recount_every,
        );
        let host = HostCollector::with_fs_root(config.proc_root.clone(), config.fs_root.clone());
        let rules = Engine::new(config.rules.clone());
        let chosen = std::env::var_os("TORCHTOP_AGENT_DIR").is_some_and(|d| !d.is_empty());
        let agents = AgentHub::new(config.agent_dir.clone()).at_default_dir(!chosen);
        Sampler {
            config,
            gpus,
            want_process_table: false,
            table_on_screen: None,
            host,
            rules,
            agents,
            notices: Vec::new(),
            agent_log_seen: 0,
            ooms: VecDeque::new(),
            memory_views: HashMap::new(),
            memsnap_ready: None,
            agents_awaited: false,
            detail: detail::DetailReader::default(),
            heard: HashMap::new(),
            torch_join: TorchJoin::default(),
            agent_only: Vec::new(),
            recycler: Recycler::default(),
        }
    }

    /// One snapshot: ask every idle GPU for a reading, wait up to `gpu_wait` for the answers,
    /// then read the host and publish what is known.
    pub fn tick(&mut self) -> Snapshot {
        self.read_gpus_now();
        let mut snapshot = Snapshot::default();
        self.snapshot_into(&mut snapshot);
        snapshot
    }

    /// As [`Sampler::tick`], shared: the snapshot is one published earlier whose receivers
    /// have all dropped it, where there is one, refilled (its vectors keep their room).
    pub fn tick_shared(&mut self) -> Arc<Snapshot> {
        self.read_gpus_now();
        self.shared_snapshot_now()
    }

    /// The GPU half of [`Sampler::tick`]: asks every idle GPU for a reading and waits up to
    /// `gpu_wait` for the answers.
    fn read_gpus_now(&mut self) {
        self.read_gpus_within(self.config.gpu_wait);
    }

    /// As [`Sampler::read_gpus_now`], waiting up to `wait` for the answers.
    pub(crate) fn read_gpus_within(&mut self, wait: Duration) {
        let started = Instant::now();
        self.gpus.drain_driver_events();
        self.gpus.request_count_if_due(started);
        self.gpus.request_readings(started + wait);
        self.collect_gpus();
    }

    /// The GPU half of the monitor's tick when GPU workers keep the clock: they read on the
    /// clock's tick by themselves; this waits for them (up to `gpu_wait` after the tick).
    fn clocked_gpus(&mut self) {
        self.gpus.drain_driver_events();
        self.gpus.request_count_if_due(Instant::now());
        self.gpus.expect_round();
        self.collect_gpus();
    }

    /// The first half of a tick on the sampler thread ([`ticker`]): waits for the clock's
    /// tick, carrying out the UI's requests that come meanwhile. The GPUs the thread reads
    /// itself are read next, without the sampler's state.
    fn begin_inline_tick(&mut self) {
        self.gpus.drain_driver_events();
        self.gpus.request_count_if_due(Instant::now());
        self.gpus.expect_round();
        while let Some(request) = self.gpus.wait_for_tick() {
            self.handle(request);
        }
    }

    /// The second half: waits for the GPUs on workers of their own; the caller then takes
    /// the snapshot ([`Sampler::publish_now`]).
    fn end_inline_tick(&mut self) {
        self.collect_gpus();
    }

    /// Waits for the GPU round, carrying out the UI's requests that come meanwhile.
    fn collect_gpus(&mut self) {
        while let Some(request) = self.gpus.wait_round() {
            self.handle(request);
        }
        self.gpus.finish_round();
    }

    /// The host and the processes as of now, joined with the GPUs as last read, into
    /// `snapshot` (whatever it held is replaced; its vectors keep their room).
    fn snapshot_into(&mut self, snapshot: &mut Snapshot) {
        let host = self.host.sample_host();
        let mut processes = std::mem::take(&mut snapshot.processes);
        self.gpus.gpu_processes_into(&mut processes);
        let on_screen = self.table_on_screen.as_deref();
        self.host
            .join_processes_on_screen(&mut processes, on_screen);
        self.watch_users_agents(&processes);
        if self.agents_awaited {
            self.agents.poll_into(&mut self.heard);
        } else {
            // As `--once` does: the first snapshot's rules judged the processes of the agents
            // it had just found without their figures (a GPU full of a training process's
            // cache warned oom-risk at start and cleared a tick later).
            self.agents_awaited = true;
            self.poll_agents_until_heard(Instant::now() + FIRST_AGENTS_WAIT);
        }
        self.assemble_into(snapshot, host, processes);
        snapshot.detail = self.detail.read(&self.config.proc_root);
        let mut warnings = std::mem::take(&mut snapshot.warnings);
        self.rules.note_rows_without_gpu(&self.agent_only);
        self.rules.evaluate_into(snapshot, &mut warnings);
        snapshot.warnings = warnings;
        snapshot.processes.append(&mut self.agent_only);
        self.rules.gone_ranks_into(snapshot);
        if self.want_process_table {
            let on_screen = self.table_on_screen.as_deref();
            snapshot.host_processes = self.host.tree_table(&snapshot.processes, on_screen);
        }
    }

    /// The snapshot of this moment: the driver, the host and the GPUs as last read, with the
    /// agents' figures (as last polled) joined onto the processes; and in `self.agent_only` the
    /// rows of agents whose processes hold no GPU, which the caller adds after the rules (which
    /// are about GPUs) have run.
    fn assemble_into(
        &mut self,
        snapshot: &mut Snapshot,
        host: HostSnapshot,
        mut processes: Vec<GpuProcess>,
    ) {
        snapshot.reuse_at(SystemTime::now());
        snapshot.driver.clone_from(&self.gpus.driver);
        snapshot.host = host;
        self.gpus
            .gpu_samples_into(Instant::now(), &mut snapshot.gpus);
        self.agent_only.clear();
        let (heard, join) = (&self.heard, &mut self.torch_join);
        join_torch(
            &mut processes,
            heard,
            &snapshot.gpus,
            join,
            &mut self.agent_only,
        );
        mark_silent(&mut processes, self.agents.silent());
        self.host.join_more_processes(&mut self.agent_only);
        // The process /proc shows under an agent's pid may be a later one given that pid.
        let heard = &self.heard;
        (self.agent_only)
            .retain(|row| heard.get(&row.pid).is_none_or(|h| h.is_of(row.start_ticks)));
        // A rank that holds no GPU yet is still a rank of its job.
        group_jobs_into(processes.iter().chain(&self.agent_only), &mut snapshot.jobs);
        snapshot.notices = self.take_notices(&processes);
        snapshot.processes = processes;
        snapshot.ooms = self.ooms.iter().cloned().collect();
        snapshot.memsnap_ready = self.memsnap_ready.clone();
        if self.gpus.driver_loaded_at.is_some() && !snapshot.driver.nvml_loaded {
            snapshot.nvidia_devices = nvidia_device_nodes(&self.config.dev_dir);
        }
    }

    /// A single snapshot for `--once`: waits up to `timeout` for the library and the GPUs, and
    /// measures CPU figures over at least `cpu_window`.
    pub fn once(mut self, timeout: Duration, cpu_window: Duration) -> Snapshot {
        let started = Instant::now();
        let deadline = started + timeout;
        self.host.sample_host();
        self.agents.poll();
        self.gpus.wait_for_driver(deadline);
        // In a single shot, whatever answered before the deadline is current.
        self.gpus.stale_after = timeout + cpu_window;
        self.gpus.request_readings(deadline);
        self.collect_gpus();
        let mut processes = self.gpus.gpu_processes();
        self.host.prime_processes(&processes);
        let primed = Instant::now();
        let until = (started + cpu_window).max(primed + cpu_window / 2);
        thread::sleep(until.saturating_duration_since(primed));
        let host = self.host.sample_host();
        self.host.join_processes(&mut processes);
        self.watch_users_agents(&processes);
        self.poll_agents_until_heard(deadline);
        if self.gpus.driver_loaded_at.is_none() {
            self.gpus.driver.error = Some(format!(
                "the GPU library {} did not finish loading within {:.1} s (the driver may be hung)",
                self.config.library_label,
                timeout.as_secs_f64()
            ));
        }
        let mut snapshot = Snapshot::default();
        self.assemble_into(&mut snapshot, host, processes);
        self.rules.note_rows_without_gpu(&self.agent_only);
        snapshot.warnings = self.rules.evaluate(&snapshot);
        snapshot.processes.append(&mut self.agent_only);
        snapshot
    }

    /// For root: the agents of other users' GPU processes, in the directories they name, and
    /// (the hub's census, on a slow clock of its own) those in every user's default directories.
    /// Only GPU processes' environments are read, so only they can name another directory.
    fn watch_users_agents(&mut self, processes: &[GpuProcess]) {
        let named = processes
            .iter()
            .filter_map(|p| Some((p.pid, p.uid?, &p.env.as_deref()?.agent_dir_vars)));
        self.agents.watch_users(named, Instant::now());
    }

    /// Polls the agents until each connected one has sent stats, or the deadline passes.
    fn poll_agents_until_heard(&mut self, deadline: Instant) {
        loop {
            self.agents.poll_into(&mut self.heard);
            if self.agents.all_heard() || Instant::now() >= deadline {
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Carries out a request from the UI; its outcome shows in the next snapshot's notices.
    pub(crate) fn handle(&mut self, request: SamplerRequest) {
        match request {
            SamplerRequest::Agent { pid, command } => {
                let label = command_label(command);
                match self.agents.request(pid, command) {
                    Ok(_) => self
                        .notices
                        .push(format!("asked the agent of {pid} for {label}")),
                    Err(why) => self.notices.push(why),
                }
            }
            SamplerRequest::ProcessTable { wanted, visible } => {
                self.want_process_table = wanted;
                self.table_on_screen = visible.map(|mut pids| {
                    pids.sort_unstable();
                    pids
                });
            }
            SamplerRequest::MemoryView { pid } => self.ask_for_memory_view(pid),
            SamplerRequest::Detail { pid } => self.detail.follow(pid),
            SamplerRequest::Interval(every) => {
                self.config.interval = every;
                self.gpus.retime(every, Instant::now());
            }
            // Taken by the GPU pool while it waits for a round; one that comes after the
            // round's deadline says nothing more.
            SamplerRequest::GpuRoundDone { .. } => {}
        }
    }

    /// Recording first, until the snapshot only (see [`crate::protocol::HISTORY`]); the agent
    /// runs the two commands in order.
    fn ask_for_memory_view(&mut self, pid: u32) {
        let sent = self
            .agents
            .request(pid, AgentCommand::RecordHistory)
            .and_then(|_| self.agents.request(pid, AgentCommand::Snapshot));
        match sent {
            Ok(id) => {
                self.memory_views.insert(id, pid);
                self.notices.push(format!(
                    "asked the agent of {pid} for a memory snapshot; \
                     the viewer opens when it is written"
                ));
            }
            Err(why) => self.notices.push(why),
        }
    }

    fn take_notices(&mut self, processes: &[GpuProcess]) -> Vec<String> {
        for outcome in self.agents.take_outcomes() {
            let notice = self.on_outcome(&outcome);
            self.notices.push(notice);
        }
        for news in self.agents.take_events() {
            if news.event.kind == "oom" {
                memory::remember_oom(&mut self.ooms, &news, processes);
            }
            self.notices.extend(describe_event(news.pid, &news.event));
        }
        let (fresh, total) = self.agents.log_since(self.agent_log_seen);
        self.agent_log_seen = total;
        self.notices.extend(fresh);
        std::mem::take(&mut self.notices)
    }
}

/// The names of the `nvidia*` entries of `dev`, sorted; none where it cannot be read.
fn nvidia_device_nodes(dev: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dev) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("nvidia"))
        .map(|name| crate::format::escape(&name).into_owned())
        .collect();
    names.sort();
    names.truncate(64);
    names
}

#[cfg(test)]
mod tests;
