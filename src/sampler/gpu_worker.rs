//! One GPU worker thread: it reads, in turn, every GPU it owns, posts each reading in the GPU's
//! cell as soon as it has it, and sends one message when the round is over, so that the
//! sampler wakes once a round, not once a GPU. In the monitor a worker keeps the clock: it
//! sleeps until the next tick, reads, and wakes the sampler once ([`Command::Clock`]), so
//! nobody wakes to ask. There the healthy GPUs are the sampler thread's own ([`INLINE`],
//! read with [`read_cell`] by [`super::ticker`]); workers read only the GPUs whose calls
//! overran (and all of them where the sampler thread cannot watch its own calls).
//!
//! A GPU is owned through its [`GpuCell`]: the pool hands a GPU to another worker by changing
//! the cell's owner (only while no worker is inside the cell's reader), and a worker forgets
//! every GPU it no longer owns the next time it comes to it. So a worker that hangs in one GPU's
//! call holds only that GPU; the pool gives the others to a fresh worker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use super::SamplerRequest;
use crate::collect::{DeviceError, DeviceReader, DeviceReading};

/// The owner of a GPU that no worker reads (lost, or gone from the count).
pub(super) const NOBODY: u64 = u64::MAX;

/// The owner of the healthy GPUs in the monitor: the sampler thread reads them itself
/// ([`super::ticker`]), so a tick wakes no worker.
pub(super) const INLINE: u64 = u64::MAX - 1;

/// A reading and when it was taken.
pub(super) type Posted = (Result<DeviceReading, DeviceError>, Instant);

/// One GPU's reader, the worker that owns it, and its latest reading not yet taken.
pub(super) struct GpuCell {
    pub(super) index: u32,
    owner: AtomicU64,
    reader: Mutex<Box<dyn DeviceReader>>,
    posted: Mutex<Mailbox>,
}

/// What passes between the GPU's reader and the sampler, besides the reader itself.
#[derive(Default)]
struct Mailbox {
    /// The latest reading not yet taken.
    fresh: Option<Posted>,
    /// A reading the sampler is done with, to be read into next (its vectors keep their room,
    /// so that a reading allocates nothing once they have grown).
    spare: Option<DeviceReading>,
}

impl GpuCell {
    pub(super) fn new(index: u32, reader: Box<dyn DeviceReader>) -> Arc<Self> {
        Arc::new(GpuCell {
            index,
            owner: AtomicU64::new(NOBODY),
            reader: Mutex::new(reader),
            posted: Mutex::new(Mailbox::default()),
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

    /// Gives the GPU to worker `to` while the thread inside its reader still holds it: the
    /// sampler thread stuck in this GPU's call, which becomes worker `to` once the call
    /// returns (see [`super::ticker`]).
    pub(super) fn give_to_the_thread_inside(&self, to: u64) {
        self.owner.store(to, Ordering::Release);
    }

    fn lock(&self) -> MutexGuard<'_, Box<dyn DeviceReader>> {
        self.reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn mailbox(&self) -> MutexGuard<'_, Mailbox> {
        self.posted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the reading posted since the last take, if any.
    pub(super) fn take_posted(&self) -> Option<Posted> {
        self.mailbox().fresh.take()
    }

    /// Gives back a reading the sampler is done with, to be read into next.
    pub(super) fn recycle(&self, reading: DeviceReading) {
        self.mailbox().spare = Some(reading);
    }

    /// The reading to read into: the one given back, else a new one.
    fn spare(&self) -> DeviceReading {
        self.mailbox().spare.take().unwrap_or_default()
    }

    /// Called with the reader locked: a worker reads a GPU only while it owns it, and a GPU
    /// changes owner only under that lock, so a newer reading never precedes an older one.
    /// A failed reading's buffer is kept as the spare; a reading replaced before it was
    /// taken becomes the spare too.
    fn post(&self, reading: DeviceReading, outcome: Result<(), DeviceError>) {
        let mut mailbox = self.mailbox();
        let posted = match outcome {
            Ok(()) => Ok(reading),
            Err(error) => {
                mailbox.spare = Some(reading);
                Err(error)
            }
        };
        if let Some((Ok(replaced), _)) = mailbox.fresh.replace((posted, Instant::now())) {
            mailbox.spare = Some(replaced);
        }
    }
}

/// What the pool asks of a worker.
pub(super) enum Command {
    /// Read every GPU owned, in order, now, then say [`SamplerRequest::GpuRoundDone`].
    Read,
    /// Start reading this GPU too (its owner is already this worker).
    Adopt(Arc<GpuCell>),
    /// Read every GPU owned at `next`, and every `every` after it, without being asked.
    Clock { next: Instant, every: Duration },
}

/// The first tick of `every` after `now`, counting from `slot`: a round that ran late skips
/// the ticks it missed instead of running them back to back. The pool and its workers use
/// the same rule, so they agree on which tick a round is for.
pub(super) fn next_slot(slot: Instant, every: Duration, now: Instant) -> Instant {
    let next = slot + every;
    if next > now || every.is_zero() {
        return next.max(now);
    }
    let behind = now.duration_since(next).as_nanos() / every.as_nanos();
    let skip = u32::try_from(behind + 1).unwrap_or(u32::MAX);
    next + every.saturating_mul(skip)
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

    pub(super) fn begin(&self, index: u32) {
        let since_ms = self.epoch.elapsed().as_millis() as u64;
        let index = u64::from(index) & ((1 << INDEX_BITS) - 1);
        self.current
            .store((since_ms << INDEX_BITS) | index, Ordering::Release);
    }

    pub(super) fn end(&self) {
        self.current.store(IDLE, Ordering::Release);
    }
}

/// Reads `cell` and posts the reading, if `owner` still owns it; false if not.
pub(super) fn read_cell(cell: &GpuCell, owner: u64, progress: &Progress) -> bool {
    let mut reader = cell.lock();
    // Checked under the lock: the pool only moves a GPU while holding it.
    if cell.owner() != owner {
        return false;
    }
    let mut reading = cell.spare();
    progress.begin(cell.index);
    let outcome = reader.read_into(&mut reading);
    progress.end();
    cell.post(reading, outcome);
    true
}

/// The body of a worker thread: runs until the pool drops its command sender.
pub(super) fn run(
    id: u64,
    commands: Receiver<Command>,
    messages: Sender<SamplerRequest>,
    progress: Arc<Progress>,
) {
    let mut cells: Vec<Arc<GpuCell>> = Vec::new();
    let mut clock: Option<(Instant, Duration)> = None;
    loop {
        let command = match clock {
            None => commands.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some((next, _)) => {
                commands.recv_timeout(next.saturating_duration_since(Instant::now()))
            }
        };
        let alive = match command {
            Ok(Command::Adopt(cell)) => {
                cells.push(cell);
                true
            }
            Ok(Command::Clock { next, every }) => {
                clock = Some((next, every));
                true
            }
            Ok(Command::Read) => read_round(id, &mut cells, &messages, &progress, true),
            Err(RecvTimeoutError::Timeout) => {
                let Some((slot, every)) = clock else {
                    continue;
                };
                clock = Some((next_slot(slot, every, Instant::now()), every));
                // A clocked round with nothing to read wakes nobody.
                read_round(id, &mut cells, &messages, &progress, false)
            }
            Err(RecvTimeoutError::Disconnected) => false,
        };
        if !alive {
            return;
        }
    }
}

/// Reads every GPU this worker still owns and says so (always when `asked`, else only when
/// there was something to read); false once the pool is gone.
fn read_round(
    id: u64,
    cells: &mut Vec<Arc<GpuCell>>,
    messages: &Sender<SamplerRequest>,
    progress: &Progress,
    asked: bool,
) -> bool {
    cells.retain(|cell| cell.owner() == id);
    if cells.is_empty() && !asked {
        return true;
    }
    for cell in cells.iter() {
        read_cell(cell, id, progress);
    }
    messages
        .send(SamplerRequest::GpuRoundDone { worker: id })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_slot_skips_the_ticks_a_late_round_missed() {
        let t0 = Instant::now();
        let every = Duration::from_millis(100);
        let ms = Duration::from_millis;
        assert_eq!(next_slot(t0, every, t0 + ms(5)), t0 + ms(100));
        assert_eq!(next_slot(t0, every, t0 + ms(100)), t0 + ms(200));
        assert_eq!(next_slot(t0, every, t0 + ms(250)), t0 + ms(300));
        assert_eq!(next_slot(t0, Duration::ZERO, t0 + ms(7)), t0 + ms(7));
    }
}
