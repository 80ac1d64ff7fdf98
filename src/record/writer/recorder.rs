//! [`Recorder`]: a recording written on a thread of its own, fed the same `Arc<Snapshot>`s the
//! UI or the headless loop gets, so that a slow disk never delays a refresh. A disk that
//! refuses writes stops nothing: the writer drops frames and tries again
//! ([`super::outage`]), and what changed is told through [`RecorderStatus::take_events`].

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use super::{DiskEvent, FileWriter, RecordOptions};
use crate::model::Snapshot;
use crate::record::RecordError;

/// Snapshots waiting for the writer; more are dropped (and counted) rather than held.
const QUEUE: usize = 64;
/// Events kept for whoever tells them; older ones are dropped past this (each outage makes two,
/// at most one every few seconds, and they are taken at each refresh).
const EVENTS_KEPT: usize = 16;

/// What a running recording has done so far, for the header's indicator.
#[derive(Debug)]
pub(crate) struct RecorderStatus {
    pub(crate) path: PathBuf,
    pub(crate) started: Instant,
    pub(crate) bytes: AtomicU64,
    pub(crate) frames: AtomicU64,
    /// Snapshots dropped because the writer fell behind.
    pub(crate) dropped: AtomicU64,
    /// Snapshots that never reached the file because the disk refused writes.
    pub(crate) lost: AtomicU64,
    /// Since when the disk refuses writes, while it does.
    failing_since: Mutex<Option<Instant>>,
    /// What changed about the disk, not yet told.
    events: Mutex<VecDeque<DiskEvent>>,
    /// Why the recording stopped early, if it did.
    pub(crate) failed: Mutex<Option<String>>,
}

impl RecorderStatus {
    fn new(path: PathBuf, bytes: u64) -> Self {
        RecorderStatus {
            path,
            started: Instant::now(),
            bytes: AtomicU64::new(bytes),
            frames: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            failing_since: Mutex::new(None),
            events: Mutex::new(VecDeque::new()),
            failed: Mutex::new(None),
        }
    }

    pub(crate) fn failure(&self) -> Option<String> {
        self.failed.lock().map_or(None, |f| f.clone())
    }

    /// Since when the disk refuses the recording's writes, while it does.
    pub(crate) fn failing_since(&self) -> Option<Instant> {
        self.failing_since.lock().map_or(None, |f| *f)
    }

    /// The events not yet taken, oldest first.
    pub(crate) fn take_events(&self) -> Vec<DiskEvent> {
        self.events
            .lock()
            .map_or_else(|_| Vec::new(), |mut e| e.drain(..).collect())
    }

    fn tell(&self, event: DiskEvent) {
        if let Ok(mut since) = self.failing_since.lock() {
            *since = match event {
                DiskEvent::Failed { .. } => Some(Instant::now()),
                DiskEvent::Resumed { .. } => None,
            };
        }
        if let Ok(mut events) = self.events.lock() {
            if events.len() >= EVENTS_KEPT {
                events.pop_front();
            }
            events.push_back(event);
        }
    }
}

/// What the writer thread is told.
enum Message {
    Frame(Arc<Snapshot>),
    Stop,
}

/// A recording in progress on a thread of its own.
pub(crate) struct Recorder {
    feeder: Feeder,
    thread: Option<JoinHandle<Result<u64, RecordError>>>,
}

/// Hands snapshots to a [`Recorder`] from any thread.
#[derive(Clone)]
pub(crate) struct Feeder {
    messages: SyncSender<Message>,
    status: Arc<RecorderStatus>,
}

impl Feeder {
    /// Hands a snapshot to the writer without waiting; a full queue drops it (and counts it).
    pub(crate) fn push(&self, snapshot: Arc<Snapshot>) {
        if let Err(TrySendError::Full(_)) = self.messages.try_send(Message::Frame(snapshot)) {
            self.status.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn status(&self) -> &Arc<RecorderStatus> {
        &self.status
    }
}

impl Recorder {
    /// Creates the file now (so that a bad path is reported at once) and starts the writer.
    pub(crate) fn start(options: RecordOptions) -> Result<Self, RecordError> {
        ignore_file_size_signal();
        let mut writer = FileWriter::create(options)?;
        let status = Arc::new(RecorderStatus::new(
            writer.path().to_path_buf(),
            writer.bytes(),
        ));
        let (messages, queue) = mpsc::sync_channel::<Message>(QUEUE);
        let shared = status.clone();
        let thread = std::thread::Builder::new()
            .name("torchtop-record".into())
            .spawn(move || {
                for message in queue {
                    let Message::Frame(snapshot) = message else {
                        break;
                    };
                    match writer.write(&snapshot) {
                        Ok(Some(event)) => shared.tell(event),
                        Ok(None) => {}
                        Err(error) => {
                            if let Ok(mut failed) = shared.failed.lock() {
                                *failed = Some(error.0.clone());
                            }
                            return Err(error);
                        }
                    }
                    shared.bytes.store(writer.bytes(), Ordering::Relaxed);
                    shared.frames.store(writer.frames(), Ordering::Relaxed);
                    shared.lost.store(writer.lost(), Ordering::Relaxed);
                }
                writer.finish()
            })
            .map_err(|e| RecordError(format!("could not start the recording thread: {e}")))?;
        Ok(Recorder {
            feeder: Feeder { messages, status },
            thread: Some(thread),
        })
    }

    pub(crate) fn status(&self) -> &Arc<RecorderStatus> {
        &self.feeder.status
    }

    pub(crate) fn feeder(&self) -> Feeder {
        self.feeder.clone()
    }

    pub(crate) fn push(&self, snapshot: Arc<Snapshot>) {
        self.feeder.push(snapshot);
    }

    /// Writes what is queued, closes the file and says how many bytes it holds.
    pub(crate) fn stop(mut self) -> Result<u64, RecordError> {
        // Blocks only while the queue is full, which the writer empties.
        let _ = self.feeder.messages.send(Message::Stop);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(RecordError("the recording thread panicked".into())),
            None => Ok(self.feeder.status.bytes.load(Ordering::Relaxed)),
        }
    }
}

/// A file size limit (`ulimit -f`, which Slurm passes on to a job's processes by default) kills
/// a process with SIGXFSZ at its first write past it, and with it the monitor and a night's
/// recording. Ignored, that write fails with EFBIG instead, and the recording pauses as on a
/// full disk, saying so.
fn ignore_file_size_signal() {
    // SAFETY: SIG_IGN installs no handler: no code of ours runs on the signal.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.feeder.messages.send(Message::Stop);
            let _ = thread.join();
        }
    }
}
