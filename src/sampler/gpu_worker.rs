//! One GPU worker thread: it reads, in turn, every GPU it owns, posts each reading in the GPU's
//! cell as soon as it has it, and sends one message when the round is over, so that the
//! sampler wakes once a round, not once a GPU. A GPU is owned through its [`GpuCell`]: the pool hands a GPU to another worker
//! by changing the cell's owner (only while no worker is inside the cell's reader), and a worker
//! forgets every GPU it no longer owns the next time it comes to it. So a worker that hangs in
//! one GPU's call holds only that GPU; the pool gives the others to a fresh worker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::collect::{DeviceError, DeviceReader, DeviceReading};

/// The owner of a GPU that no worker reads (lost, or gone from the count).
pub(super) const NOBODY: u64 = u64::MAX;

/// A reading and when it was taken.
pub(super) type Posted = (Result<DeviceReading, DeviceError>, Instant);

/// One GPU's reader, the worker that owns it, and its latest reading not yet taken.
pub(super) struct GpuCell {
    pub(super) index: u32,
    owner: AtomicU64,
    reader: Mutex<Box<dyn DeviceReader>>,
    posted: Mutex<Option<Posted>>,
}

impl GpuCell {
    pub(super) fn new(index: u32, reader: Box<dyn DeviceReader>) -> Arc<Self> {
        Arc::new(GpuCell {
            index,
            owner: AtomicU64::new(NOBODY),
            reader: Mutex::new(reader),
            posted: Mutex::new(None),
        })
    }

    pub(super) fn owner(&self) -> u64 {
        self.owner.load(Ordering::Acquire)
    }

    /// Stops every worker from reading this GPU again (a call in progress still ends).
    pub(super) fn disown(&self) {
        self.owner.store(NOBODY, Ordering::Release);
    }

    /// Gives the GPU to worker `to`, unless a worker is inside its reader right now (the one
    /// that is hung in it, typically): then it stays where it is and this returns false.
    pub(super) fn try_move(&self, to: u64) -> bool {
        let guard = match self.reader.try_lock() {
            Ok(guard) => guard,
            // A reader that panicked is still the GPU's reader; the pool decides about it.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        self.owner.store(to, Ordering::Release);
        drop(guard);
        true
    }

    fn lock(&self) -> MutexGuard<'_, Box<dyn DeviceReader>> {
        self.reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the reading posted since the last take, if any.
    pub(super) fn take_posted(&self) -> Option<Posted> {
        self.posted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Called with the reader locked: a worker reads a GPU only while it owns it, and a GPU
    /// changes owner only under that lock, so a newer reading never precedes an older one.
    fn post(&self, reading: Result<DeviceReading, DeviceError>) {
        let mut posted = self
            .posted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *posted = Some((reading, Instant::now()));
    }
}

/// What the pool asks of a worker.
pub(super) enum Command {
    /// Read every GPU owned, in order, then say [`WorkerMessage::Done`].
    Read,
    /// Start reading this GPU too (its owner is already this worker).
    Adopt(Arc<GpuCell>),
}

/// What a worker tells the pool: the round asked by the last [`Command::Read`] is over (its
/// readings are posted in the GPUs' cells).
pub(super) struct Done {
    pub(super) worker: u64,
}

/// Which GPU a worker is reading, and since when: what tells the pool that a call overruns.
/// One word (milliseconds since `epoch` above, the GPU index below), so the two never come
/// from different reads.
pub(super) struct Progress {
    epoch: Instant,
    current: AtomicU64,
}

/// What [`Progress`] holds while the worker is between GPUs.
const IDLE: u64 = u64::MAX;
const INDEX_BITS: u32 = 24;

impl Progress {
    pub(super) fn new(epoch: Instant) -> Arc<Self> {
        Arc::new(Progress {
            epoch,
            current: AtomicU64::new(IDLE),
        })
    }

    /// The GPU being read now and when its read began; `None` between GPUs.
    pub(super) fn current(&self) -> Option<(u32, Instant)> {
        let word = self.current.load(Ordering::Acquire);
        (word != IDLE).then(|| {
            let index = (word & ((1 << INDEX_BITS) - 1)) as u32;
            (
                index,
                self.epoch + Duration::from_millis(word >> INDEX_BITS),
            )
        })
    }

    fn begin(&self, index: u32) {
        let since_ms = self.epoch.elapsed().as_millis() as u64;
        let index = u64::from(index) & ((1 << INDEX_BITS) - 1);
        self.current
            .store((since_ms << INDEX_BITS) | index, Ordering::Release);
    }

    fn end(&self) {
        self.current.store(IDLE, Ordering::Release);
    }
}

/// The body of a worker thread: runs until the pool drops its command sender.
pub(super) fn run(
    id: u64,
    commands: Receiver<Command>,
    messages: Sender<Done>,
    progress: Arc<Progress>,
) {
    let mut cells: Vec<Arc<GpuCell>> = Vec::new();
    while let Ok(command) = commands.recv() {
        match command {
            Command::Adopt(cell) => cells.push(cell),
            Command::Read => {
                if !read_round(id, &mut cells, &messages, &progress) {
                    return;
                }
            }
        }
    }
}

/// Reads every GPU this worker still owns; false once the pool is gone.
fn read_round(
    id: u64,
    cells: &mut Vec<Arc<GpuCell>>,
    messages: &Sender<Done>,
    progress: &Progress,
) -> bool {
    cells.retain(|cell| cell.owner() == id);
    for cell in cells.iter() {
        let mut reader = cell.lock();
        // Checked under the lock: the pool only moves a GPU while holding it.
        if cell.owner() != id {
            continue;
        }
        progress.begin(cell.index);
        let reading = reader.read();
        progress.end();
        cell.post(reading);
    }
    messages.send(Done { worker: id }).is_ok()
}
