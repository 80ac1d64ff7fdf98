//! The monitor's healthy GPUs, read by the sampler thread itself ([`super::super::ticker`]):
//! the pool's side of it. Once the clock starts, the GPUs of the shared worker become the
//! sampler thread's ([`INLINE`]) and the shared worker ends, so a tick wakes one thread of
//! the pool, not two. A GPU whose call overruns is given to the stuck sampler thread as a
//! worker of its own ([`GpuPool::isolate_inline`]); it folds back into the sampler thread as
//! any worker of its own does.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use super::super::gpu_worker::{Command, GpuCell, Progress, INLINE};
use super::super::SamplerRequest;
use super::{GpuPool, Worker};

/// What a sampler thread stuck in a GPU's call needs to go on as that GPU's worker.
pub(crate) struct Handoff {
    pub(crate) id: u64,
    pub(crate) commands: Receiver<Command>,
    pub(crate) messages: Sender<SamplerRequest>,
    pub(crate) progress: Arc<Progress>,
}

impl GpuPool {
    /// From now on the sampler thread reads the healthy GPUs itself: the shared worker's GPUs
    /// become its own, and the shared worker ends (unless one of its calls is in progress:
    /// then that GPU stays with it, as a worker of its own).
    pub(crate) fn go_inline(&mut self) {
        self.inline = true;
        let Some(shared) = self.shared.take() else {
            return;
        };
        let mut all_moved = true;
        for slot in self.slots.values() {
            if slot.cell.owner() == shared {
                all_moved &= slot.cell.try_move(INLINE);
            }
        }
        if all_moved {
            // Dropping its command sender ends the thread.
            self.workers.remove(&shared);
        }
    }

    /// Back to a shared worker (on the clock, if there is one), where the sampler thread
    /// cannot read the GPUs itself after all.
    pub(crate) fn leave_inline(&mut self) {
        self.inline = false;
        let Some(shared) = self.shared_worker() else {
            return;
        };
        for slot in self.slots.values() {
            if slot.cell.owner() == INLINE {
                self.hand_over(&slot.cell, shared);
            }
        }
    }

    /// How long a GPU call may last before its GPU gets a worker of its own.
    pub(crate) fn call_deadline(&self) -> std::time::Duration {
        self.call_deadline
    }

    /// The GPUs the sampler thread reads this tick, in index order, into `into` (reused, so
    /// that a tick allocates nothing).
    pub(crate) fn inline_cells(&self, into: &mut Vec<Arc<GpuCell>>) {
        into.clear();
        let own = self.slots.values().filter(|s| s.cell.owner() == INLINE);
        into.extend(own.map(|s| s.cell.clone()));
    }

    /// GPU `index`, whose call has overrun on the sampler thread, becomes that thread's own
    /// worker: a worker entry like any other (its round in flight, so that the pool does not
    /// ask it again until it answers), told the clock and handed the GPU. `None` if the GPU
    /// is no longer the sampler thread's.
    pub(crate) fn isolate_inline(
        &mut self,
        index: u32,
        progress: Arc<Progress>,
    ) -> Option<Handoff> {
        let cell = self.slots.get(&index)?.cell.clone();
        if cell.owner() != INLINE {
            return None;
        }
        let id = self.next_worker;
        self.next_worker += 1;
        let (commands, commands_rx) = mpsc::channel();
        cell.give_to_the_thread_inside(id);
        // Nothing was sent yet, so the receiver is there to take both.
        let _ = commands.send(Command::Adopt(cell));
        if let Some(clock) = self.clock {
            let _ = commands.send(clock.command_for_new_worker(Instant::now()));
        }
        let worker = Worker {
            commands,
            progress: progress.clone(),
            pending: Some(self.round),
            prompt_rounds: 0,
        };
        self.workers.insert(id, worker);
        Some(Handoff {
            id,
            commands: commands_rx,
            messages: self.messages_tx.clone(),
            progress,
        })
    }

    /// Waits for the clock's tick (the start of the round [`GpuPool::expect_round`] began),
    /// taking the workers' answers meanwhile. Returns early with a request of the UI: the
    /// caller carries it out and calls again.
    pub(crate) fn wait_for_tick(&mut self) -> Option<SamplerRequest> {
        loop {
            let now = Instant::now();
            if now >= self.round_start {
                return None;
            }
            match self.messages_rx.recv_timeout(self.round_start - now) {
                Ok(SamplerRequest::GpuRoundDone { worker }) => self.apply(worker),
                Ok(request) => return Some(request),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }
}
