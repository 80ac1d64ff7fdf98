//! The GPU worker pool: one *driver* thread loads the GPU library (nvmlInit can take seconds)
//! and answers GPU-count requests; one *worker* thread per GPU, with at most one request in
//! flight, so a GPU whose driver calls hang delays nobody. Its worker stays blocked, the tick's
//! deadline passes, and the GPU is published as stale with its last figures. Stuck threads are
//! never joined: the process exits around them.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::collect::{DeviceError, DeviceReading, GpuLoader, GpuSource};
use crate::model::{DriverInfo, GpuProcess, GpuSample, GpuState};

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

/// The GPUs as the sampler sees them: the driver, its count, and one worker per GPU.
pub(crate) struct GpuPool {
    driver_events: Receiver<DriverEvent>,
    count_requests: Option<SyncSender<()>>,
    source: Option<Arc<dyn GpuSource>>,
    /// The library and versions, or why the driver could not be used.
    pub(crate) driver: DriverInfo,
    /// When the library finished loading; `None` while it loads.
    pub(crate) driver_loaded_at: Option<Instant>,
    last_count_request: Instant,
    workers: BTreeMap<u32, GpuWorker>,
    results_tx: Sender<WorkerResult>,
    results_rx: Receiver<WorkerResult>,
    next_generation: u64,
    /// A GPU without a reading for this long is published as stale.
    pub(crate) stale_after: Duration,
    recount_every: Duration,
}

impl GpuPool {
    /// Starts the driver thread; GPU workers follow once the library is loaded.
    pub(crate) fn start(
        loader: GpuLoader,
        library_label: &str,
        stale_after: Duration,
        recount_every: Duration,
    ) -> Self {
        let (events_tx, driver_events) = mpsc::channel();
        let (count_tx, count_rx) = mpsc::sync_channel::<()>(1);
        thread::Builder::new()
            .name("torchtop-driver".into())
            .spawn(move || run_driver_thread(loader, events_tx, count_rx))
            .expect("spawning a thread only fails when the OS is out of resources");
        let (results_tx, results_rx) = mpsc::channel();
        GpuPool {
            driver_events,
            count_requests: Some(count_tx),
            source: None,
            driver: DriverInfo {
                library: library_label.to_string(),
                error: Some("loading the GPU library".into()),
                ..Default::default()
            },
            driver_loaded_at: None,
            last_count_request: Instant::now(),
            workers: BTreeMap::new(),
            results_tx,
            results_rx,
            next_generation: 0,
            stale_after,
            recount_every,
        }
    }

    /// Waits until the GPU library is loaded or `deadline` passes.
    pub(crate) fn wait_for_driver(&mut self, deadline: Instant) {
        while self.driver_loaded_at.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.driver_events.recv_timeout(left) {
                Ok(event) => self.apply_driver_event(event),
                Err(_) => return,
            }
        }
    }

    pub(crate) fn drain_driver_events(&mut self) {
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

    pub(crate) fn request_count_if_due(&mut self, now: Instant) {
        if self.source.is_none() || now.duration_since(self.last_count_request) < self.recount_every
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
    pub(crate) fn request_readings(&mut self, now: Instant) -> Vec<u32> {
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

    pub(crate) fn collect_readings(&mut self, asked: &[u32], deadline: Instant) {
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

    pub(crate) fn gpu_samples(&self, now: Instant) -> Vec<GpuSample> {
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
        } else if worker.last_ok.is_none() || since_ok > self.stale_after {
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
    pub(crate) fn gpu_processes(&self) -> Vec<GpuProcess> {
        self.workers
            .values()
            .filter(|w| w.lost.is_none())
            .filter_map(|w| w.last_reading.as_ref())
            .flat_map(|r| r.processes.iter().cloned())
            .collect()
    }
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
