//! The monitor's clock: the sampler thread sleeps until the tick and reads its own GPUs
//! ([`super::inline`]), and each worker of its own sleeps until the same tick, reads its GPU
//! and wakes the sampler once, so that nobody wakes to ask. The pool keeps the clock to know
//! which tick a round is for and how long to wait for it.

use std::time::{Duration, Instant};

use super::super::gpu_worker::{next_slot, Command};
use super::GpuPool;

/// The tick of the round in progress (or next) and the time between ticks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    at: Instant,
    every: Duration,
}

impl Clock {
    /// What a worker started now is told: the tick ahead, if the round of `at` has not begun
    /// (it reads then, with the others); else the one after it, and the pool asks it to read
    /// at once for the round in progress.
    pub(super) fn command_for_new_worker(self, now: Instant) -> Command {
        let next = if self.at > now {
            self.at
        } else {
            next_slot(self.at, self.every, now)
        };
        Command::Clock {
            next,
            every: self.every,
        }
    }
}

impl GpuPool {
    /// Puts the workers on a clock: they read at `at` and every `every` after it.
    pub(crate) fn start_clock(&mut self, at: Instant, every: Duration) {
        self.clock = Some(Clock { at, every });
        self.send_clock();
    }

    /// A new time between ticks, from the setup screen: the next tick comes no later than
    /// `every` from now, and the round waited for now (if any) moves with it.
    pub(crate) fn retime(&mut self, every: Duration, now: Instant) {
        let Some(clock) = self.clock.as_mut() else {
            return;
        };
        let moved_from = clock.at;
        clock.at = clock.at.min(now + every);
        clock.every = every;
        if self.round_start == moved_from {
            self.round_start = clock.at;
            self.round_deadline = clock.at + self.gpu_wait;
        }
        self.send_clock();
    }

    fn send_clock(&self) {
        let Some(clock) = self.clock else {
            return;
        };
        for worker in self.workers.values() {
            // A worker that is gone has nothing to read with; its GPUs go stale.
            let _ = worker.commands.send(Command::Clock {
                next: clock.at,
                every: clock.every,
            });
        }
    }

    /// Starts the round of the clock's tick: every worker that owns a GPU and has no round
    /// in flight reads then, by itself. Without a clock, a round that asks nobody.
    pub(crate) fn expect_round(&mut self) {
        let at = self.clock.map_or_else(Instant::now, |clock| clock.at);
        self.begin_round(at, at + self.gpu_wait);
        if self.clock.is_none() {
            return;
        }
        let slots = &self.slots;
        for (id, worker) in &mut self.workers {
            let owns = slots.values().any(|s| s.cell.owner() == *id);
            if worker.pending.is_none() && owns {
                worker.pending = Some(self.round);
                self.round_asked = true;
            }
        }
    }

    /// Moves the clock to the tick after the round just published (skipping ticks that have
    /// passed, as the workers do).
    pub(crate) fn advance_clock(&mut self, now: Instant) {
        if let Some(clock) = self.clock.as_mut() {
            clock.at = next_slot(clock.at, clock.every, now);
        }
    }
}
