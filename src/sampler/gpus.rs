//! The GPU worker pool: one *driver* thread loads the GPU library and answers GPU-count
//! requests ([`driver`]); one *shared* worker thread reads every healthy GPU in turn (in the
//! monitor, once its clock runs, the sampler thread reads them itself instead: [`inline`]).
//! When one GPU's call overruns the call deadline, the worker that is stuck in it keeps only
//! that GPU, and a fresh shared worker takes the others at once, so a hung GPU delays nobody
//! after its first overrun: the tick's deadline passes and the GPU is published as stale with
//! its last figures. Once the GPU answers promptly again for a few rounds, it is folded back
//! into the shared worker and its own worker ends. Stuck threads are never joined: the process
//! exits around them. What each GPU last said, and how it is published, is in [`slot`].
//!
//! A round starts in one of two ways: the sampler asks every worker now
//! ([`GpuPool::request_readings`], for `--once` and the first tick), or, in the monitor, the
//! clock's tick comes: the sampler thread reads its GPUs and the workers of their own read
//! theirs by themselves ([`clock`]). Either way the sampler waits on one channel, which
//! carries the workers' "round over" and the UI's requests alike.

mod clock;
mod driver;
mod inline;
mod slot;

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::gpu_worker::{self, Command, GpuCell, Progress};
use super::SamplerRequest;
use crate::collect::{GpuLoader, GpuSource};
use crate::model::DriverInfo;
use driver::{run_driver_thread, DriverEvent};
pub(crate) use inline::Handoff;
use slot::Slot;

/// Prompt rounds (answered before the tick's deadline) after which a GPU on a worker of its
/// own goes back to the shared worker.
const FOLD_BACK_AFTER: u32 = 3;

/// The sampler's view of one worker thread.
struct Worker {
    commands: Sender<Command>,
    progress: Arc<Progress>,
    /// The round of the request in flight, if any: at most one at a time.
    pending: Option<u64>,
    /// Rounds in a row answered before their deadline.
    prompt_rounds: u32,
}

/// The GPUs as the sampler sees them: the driver, its count, the GPUs and their workers.
pub(crate) struct GpuPool {
    driver_events: Receiver<DriverEvent>,
    count_requests: Option<SyncSender<()>>,
    source: Option<Arc<dyn GpuSource>>,
    /// The library and versions, or why the driver could not be used.
    pub(crate) driver: DriverInfo,
    /// When the library finished loading; `None` while it loads.
    pub(crate) driver_loaded_at: Option<Instant>,
    last_count_request: Instant,
    slots: BTreeMap<u32, Slot>,
    workers: BTreeMap<u64, Worker>,
    /// The worker of the healthy GPUs, until the sampler thread reads them itself.
    shared: Option<u64>,
    /// Whether the sampler thread reads the healthy GPUs itself ([`GpuPool::go_inline`]).
    inline: bool,
    /// The sampler's one inbox: the workers' "round over" and the UI's requests.
    messages_tx: Sender<SamplerRequest>,
    messages_rx: Receiver<SamplerRequest>,
    next_worker: u64,
    /// Counts rounds, so that a late answer is told from a prompt one.
    round: u64,
    /// When the round in progress began (or begins, on the workers' clock), and when the
    /// sampler stops waiting for it.
    round_start: Instant,
    round_deadline: Instant,
    /// Whether any worker is expected to answer the round in progress.
    round_asked: bool,
    /// The workers' clock, in the monitor: the tick of the round in progress or next, and the
    /// time between ticks.
    clock: Option<clock::Clock>,
    /// How long a round waits for the workers.
    gpu_wait: Duration,
    epoch: Instant,
    /// A GPU without a reading for this long is published as stale.
    pub(crate) stale_after: Duration,
    /// A GPU whose call runs longer than this gets a worker of its own.
    call_deadline: Duration,
    recount_every: Duration,
}

impl GpuPool {
    /// Starts the driver thread; the GPU worker follows once the library is loaded.
    pub(crate) fn start(
        loader: GpuLoader,
        library_label: &str,
        inbox: (Sender<SamplerRequest>, Receiver<SamplerRequest>),
        stale_after: Duration,
        gpu_wait: Duration,
        recount_every: Duration,
    ) -> Self {
        let (events_tx, driver_events) = mpsc::channel();
        let (count_tx, count_rx) = mpsc::sync_channel::<()>(1);
        thread::Builder::new()
            .name("torchtop-driver".into())
            .spawn(move || run_driver_thread(loader, events_tx, count_rx))
            .expect("spawning a thread only fails when the OS is out of resources");
        let (messages_tx, messages_rx) = inbox;
        let now = Instant::now();
        GpuPool {
            driver_events,
            count_requests: Some(count_tx),
            source: None,
            driver: DriverInfo {
                library: library_label.into(),
                error: Some("loading the GPU library".into()),
                ..Default::default()
            },
            driver_loaded_at: None,
            last_count_request: Instant::now(),
            slots: BTreeMap::new(),
            workers: BTreeMap::new(),
            shared: None,
            inline: false,
            messages_tx,
            messages_rx,
            next_worker: 0,
            round: 0,
            round_start: now,
            round_deadline: now,
            round_asked: false,
            clock: None,
            gpu_wait,
            epoch: now,
            stale_after,
            call_deadline: gpu_wait / 2,
            recount_every,
        }
    }

    /// The shared worker, started if there is none (or `None` if no thread can be started).
    fn shared_worker(&mut self) -> Option<u64> {
        if self.shared.is_none() {
            self.shared = self.spawn_worker();
        }
        self.shared
    }

    fn spawn_worker(&mut self) -> Option<u64> {
        let id = self.next_worker;
        self.next_worker += 1;
        let (commands, commands_rx) = mpsc::channel();
        let messages = self.messages_tx.clone();
        let progress = Progress::new(self.epoch);
        let seen = progress.clone();
        thread::Builder::new()
            .name(format!("torchtop-gpus{id}"))
            .spawn(move || gpu_worker::run(id, commands_rx, messages, seen))
            .ok()?;
        if let Some(clock) = self.clock {
            // Nothing was sent yet, so the receiver is there to take it.
            let _ = commands.send(clock.command_for_new_worker(Instant::now()));
        }
        let worker = Worker {
            commands,
            progress,
            pending: None,
            prompt_rounds: 0,
        };
        self.workers.insert(id, worker);
        Some(id)
    }

    /// Where healthy GPUs go: the sampler thread itself once inline, else the shared worker
    /// (started if there is none; `None` if no thread can be started).
    fn home(&mut self) -> Option<u64> {
        if self.inline {
            Some(gpu_worker::INLINE)
        } else {
            self.shared_worker()
        }
    }

    /// Gives `cell` to worker `to`; false if a worker is inside the GPU's call right now.
    fn hand_over(&self, cell: &Arc<GpuCell>, to: u64) -> bool {
        if to == gpu_worker::INLINE {
            // The sampler thread reads every GPU it owns each tick; nothing to tell it.
            return cell.try_move(to);
        }
        let Some(worker) = self.workers.get(&to) else {
            return false;
        };
        if !cell.try_move(to) {
            return false;
        }
        // A worker that is gone has nothing to read with; the GPU goes stale, as it should.
        let _ = worker.commands.send(Command::Adopt(cell.clone()));
        true
    }

    /// Starts a round now, to be waited for until `deadline`: asks every worker that owns a GPU
    /// and has no request in flight.
    pub(crate) fn request_readings(&mut self, deadline: Instant) {
        self.begin_round(Instant::now(), deadline);
        // Walked by key rather than collected, so that a round allocates nothing.
        let mut next = self.workers.keys().next().copied();
        while let Some(id) = next {
            self.ask(id);
            next = self.workers.range(id + 1..).next().map(|(id, _)| *id);
        }
    }

    fn ask(&mut self, id: u64) {
        let owns = self.slots.values().any(|s| s.cell.owner() == id);
        let Some(worker) = self.workers.get_mut(&id) else {
            return;
        };
        if worker.pending.is_none() && owns && worker.commands.send(Command::Read).is_ok() {
            worker.pending = Some(self.round);
            self.round_asked = true;
        }
    }

    fn begin_round(&mut self, start: Instant, deadline: Instant) {
        self.round += 1;
        self.round_start = start;
        self.round_deadline = deadline;
        self.round_asked = false;
    }

    /// Waits for the round until every worker asked has answered or its deadline passes,
    /// giving a GPU whose call overruns a worker of its own on the way. A round that asked
    /// nobody lasts until its start (the tick, on the clock). Returns early with a request of
    /// the UI that came meanwhile: the caller carries it out and calls again.
    pub(crate) fn wait_round(&mut self) -> Option<SamplerRequest> {
        loop {
            let now = Instant::now();
            self.isolate_overruns(now);
            let over = if self.round_asked {
                !self.round_pending()
            } else {
                now >= self.round_start
            };
            if over || now >= self.round_deadline {
                return None;
            }
            let until = if self.round_asked {
                self.round_deadline
            } else {
                self.round_start
            };
            let wake = self.next_overrun(now).map_or(until, |at| at.min(until));
            match self
                .messages_rx
                .recv_timeout(wake.saturating_duration_since(now))
            {
                Ok(SamplerRequest::GpuRoundDone { worker }) => self.apply(worker),
                Ok(request) => return Some(request),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Ends the round: takes what was posted and folds recovered GPUs back.
    pub(crate) fn finish_round(&mut self) {
        for worker in self.workers.values_mut() {
            if worker.pending.is_some() {
                worker.prompt_rounds = 0;
            }
        }
        self.take_posted();
        self.fold_back_recovered();
    }

    fn round_pending(&self) -> bool {
        self.workers.values().any(|w| w.pending == Some(self.round))
    }

    /// When to look again for a call that overruns on a worker with other GPUs: when the call
    /// in flight would overrun, or, between two calls (or before the tick it reads on), a call
    /// deadline from now (or from the tick).
    fn next_overrun(&self, now: Instant) -> Option<Instant> {
        let between = now.max(self.round_start) + self.call_deadline;
        self.workers
            .iter()
            .filter(|(id, w)| w.pending.is_some() && self.owned_by(**id) > 1)
            .map(|(_, w)| match w.progress.current() {
                Some((_, since)) => (since + self.call_deadline).max(now),
                None => between,
            })
            .min()
    }

    fn owned_by(&self, id: u64) -> usize {
        self.slots.values().filter(|s| s.cell.owner() == id).count()
    }

    /// A worker stuck in one GPU's call past the call deadline keeps that GPU alone; its other
    /// GPUs go to the shared worker (a fresh one if the stuck worker was the shared one), which
    /// reads them in this round still.
    fn isolate_overruns(&mut self, now: Instant) {
        let stuck: Vec<u64> = (self.workers.iter())
            .filter(|(id, w)| w.pending.is_some() && self.owned_by(**id) > 1)
            .filter(|(_, w)| {
                w.progress
                    .current()
                    .is_some_and(|(_, since)| now.duration_since(since) >= self.call_deadline)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in stuck {
            if self.shared == Some(id) {
                self.shared = None;
            }
            let Some(shared) = self.home() else {
                return;
            };
            if let Some(worker) = self.workers.get_mut(&id) {
                worker.prompt_rounds = 0;
            }
            let cells: Vec<Arc<GpuCell>> = (self.slots.values())
                .filter(|s| s.cell.owner() == id)
                .map(|s| s.cell.clone())
                .collect();
            for cell in &cells {
                self.hand_over(cell, shared);
            }
            self.ask(shared);
        }
    }

    /// Workers of their own whose GPUs answer promptly again give them back to the shared
    /// worker and end; those left without GPUs end too.
    fn fold_back_recovered(&mut self) {
        let done: Vec<u64> = (self.workers.iter())
            .filter(|(id, w)| Some(**id) != self.shared && w.pending.is_none())
            .filter(|(id, w)| w.prompt_rounds >= FOLD_BACK_AFTER || self.owned_by(**id) == 0)
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            let Some(shared) = self.home() else {
                return;
            };
            let cells: Vec<Arc<GpuCell>> = (self.slots.values())
                .filter(|s| s.cell.owner() == id)
                .map(|s| s.cell.clone())
                .collect();
            let all_moved = cells.iter().all(|cell| self.hand_over(cell, shared));
            if all_moved {
                // Dropping its command sender ends the thread.
                self.workers.remove(&id);
            }
        }
    }

    fn apply(&mut self, worker: u64) {
        let round = self.round;
        if let Some(w) = self.workers.get_mut(&worker) {
            let prompt = w.pending.take() == Some(round);
            w.prompt_rounds = if prompt { w.prompt_rounds + 1 } else { 0 };
        }
    }

    /// Takes every reading posted since the last round, the late ones of a worker that was
    /// stuck included: each was read while its worker owned the GPU.
    fn take_posted(&mut self) {
        for slot in self.slots.values_mut() {
            if let Some((reading, at)) = slot.cell.take_posted() {
                slot.apply(reading, at);
            }
        }
    }

    /// The GPUs now read by a worker of their own (neither the shared worker nor the
    /// sampler thread).
    #[cfg(test)]
    pub(crate) fn on_own_workers(&self) -> Vec<u32> {
        (self.slots.iter())
            .filter(|(_, s)| Some(s.cell.owner()) != self.shared)
            .filter(|(_, s)| ![gpu_worker::NOBODY, gpu_worker::INLINE].contains(&s.cell.owner()))
            .map(|(index, _)| *index)
            .collect()
    }

    /// How many GPU worker threads the pool holds.
    #[cfg(test)]
    pub(crate) fn worker_count(&self) -> usize {
        self.workers.len()
    }
}
