//! The monitor's sampler thread, which reads the healthy GPUs itself, and the watchdog that
//! takes over when one of those calls hangs.
//!
//! Why: with a GPU worker keeping the clock, every tick woke two threads of the sampler (the
//! worker, then the sampler), and the budget is three wake-ups a second in all, the
//! UI's included. Here a tick wakes the sampler thread alone: it sleeps until the tick, reads
//! each healthy GPU, then the host, and publishes.
//!
//! Hang isolation stays what it was: no hung driver call delays the others past its deadline.
//! Before its GPU calls the sampler thread arms an [`Alarm`] (a timerfd) for the call deadline
//! and disarms it after; the watchdog thread sleeps on that alarm, so while all is well it never
//! runs. When the alarm goes off during a call that has overrun, the watchdog:
//! - gives that GPU to the stuck thread as a worker of its own ([`GpuPool::isolate_inline`]):
//!   once the call returns, the thread goes on as that GPU's worker ([`gpu_worker::run`]),
//!   and the GPU folds back like any worker's GPU once it answers promptly again;
//! - starts a new sampler thread (the next *generation*) on the same state, which finishes the
//!   round (reading the other GPUs again) and keeps the clock from then on.
//!
//! The state lives behind one mutex that no thread holds during a GPU call, so the watchdog
//! can always take it; a thread that finds a newer generation than its own has been replaced
//! and stops being the sampler.
//!
//! [`GpuPool::isolate_inline`]: super::gpus::GpuPool::isolate_inline

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use super::gpu_worker::{self, GpuCell, Progress, INLINE};
use super::gpus::Handoff;
use super::publish::Publish;
use super::Sampler;
use crate::sys::alarm::Alarm;

/// What the sampler thread of the moment works on, behind [`Shared::state`].
struct Ticking {
    sampler: Sampler,
    publish: Publish,
    /// For each replaced generation whose thread is still in its GPU's call: what it needs to
    /// go on as that GPU's worker.
    handoffs: Vec<(u64, Handoff)>,
}

/// What one generation of the sampler thread shows the watchdog.
struct Watched {
    generation: u64,
    /// The GPU being read and since when.
    progress: Arc<Progress>,
    /// Whether the thread is among its GPU calls (the alarm is armed).
    reading: AtomicBool,
}

struct Shared {
    state: Mutex<Ticking>,
    /// The generation of the thread that is the sampler now.
    generation: AtomicU64,
    current: Mutex<Arc<Watched>>,
    alarm: Alarm,
    call_deadline: Duration,
    stopped: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every holder leaves the state whole between its steps; a panic is no reason to stop.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the monitor's ticks on this thread (clock already started, the pool inline) until
/// `publish` returns false. Gives both back if the alarm or the watchdog thread cannot be had,
/// for the caller to tick the way it did before (GPU workers keeping the clock).
pub(crate) fn run(sampler: Sampler, publish: Publish) -> Option<(Sampler, Publish)> {
    let Ok(alarm) = Alarm::new() else {
        return Some((sampler, publish));
    };
    let watched = Arc::new(Watched {
        generation: 0,
        progress: Progress::new(Instant::now()),
        reading: AtomicBool::new(false),
    });
    let shared = Arc::new(Shared {
        call_deadline: sampler.gpus.call_deadline(),
        state: Mutex::new(Ticking {
            sampler,
            publish,
            handoffs: Vec::new(),
        }),
        generation: AtomicU64::new(0),
        current: Mutex::new(watched.clone()),
        alarm,
        stopped: AtomicBool::new(false),
    });
    let watchdog = shared.clone();
    let spawned = thread::Builder::new()
        .name("torchtop-alarm".into())
        .spawn(move || watch(&watchdog));
    if spawned.is_err() {
        let shared = Arc::into_inner(shared)?;
        let ticking = shared.state.into_inner().ok()?;
        return Some((ticking.sampler, ticking.publish));
    }
    sample(&shared, &watched, false);
    None
}

/// The body of a sampler thread of one generation. `resume`: finish the round in progress
/// (a new generation after a takeover) before waiting for the next tick.
fn sample(shared: &Shared, watched: &Watched, mut resume: bool) {
    let mut cells: Vec<Arc<GpuCell>> = Vec::new();
    loop {
        {
            let mut state = lock(&shared.state);
            if shared.generation.load(Ordering::Acquire) != watched.generation {
                drop(state);
                return become_worker(shared, watched.generation);
            }
            if !resume {
                state.sampler.begin_inline_tick();
            }
            state.sampler.gpus.inline_cells(&mut cells);
        }
        resume = false;
        if !read_inline(shared, watched, &cells) {
            return become_worker(shared, watched.generation);
        }
        let mut state = lock(&shared.state);
        if shared.generation.load(Ordering::Acquire) != watched.generation {
            drop(state);
            return become_worker(shared, watched.generation);
        }
        let Ticking {
            sampler, publish, ..
        } = &mut *state;
        sampler.end_inline_tick();
        if !sampler.publish_now(publish) {
            shared.stopped.store(true, Ordering::Release);
            // Wakes the watchdog, which sees the stop and ends.
            let _ = shared.alarm.arm(Duration::ZERO);
            return;
        }
        state.sampler.gpus.advance_clock(Instant::now());
    }
}

/// Reads `cells` on this thread under the alarm; false if a GPU's call overran and this
/// thread was replaced meanwhile.
fn read_inline(shared: &Shared, watched: &Watched, cells: &[Arc<GpuCell>]) -> bool {
    if cells.is_empty() {
        return true;
    }
    watched.reading.store(true, Ordering::Release);
    // Without an alarm a hang would go unnoticed; the timerfd exists, so this only fails
    // for an invalid time, which a call deadline is not.
    let _ = shared.alarm.arm(shared.call_deadline);
    for cell in cells {
        gpu_worker::read_cell(cell, INLINE, &watched.progress);
        if shared.generation.load(Ordering::Acquire) != watched.generation {
            return false;
        }
    }
    watched.reading.store(false, Ordering::Release);
    let _ = shared.alarm.disarm();
    true
}

/// A replaced sampler thread goes on as the worker of the GPU it was stuck in.
fn become_worker(shared: &Shared, generation: u64) {
    let handoff = {
        let mut state = lock(&shared.state);
        let at = state.handoffs.iter().position(|(g, _)| *g == generation);
        at.map(|at| state.handoffs.swap_remove(at).1)
    };
    if let Some(handoff) = handoff {
        // What `top -H` shows: this thread is a GPU's worker now, no longer the sampler. A
        // name that cannot be set leaves the old one; nothing depends on it.
        let _ = rustix::thread::set_name(c"torchtop-gpus");
        gpu_worker::run(
            handoff.id,
            handoff.commands,
            handoff.messages,
            handoff.progress,
        );
    }
}

/// The watchdog thread: asleep on the alarm, which only goes off when a GPU call on the
/// sampler thread lasts as long as the call deadline (or the loop stops).
fn watch(shared: &Arc<Shared>) {
    loop {
        if shared.alarm.wait().is_err() || shared.stopped.load(Ordering::Acquire) {
            return;
        }
        let watched = lock(&shared.current).clone();
        if !watched.reading.load(Ordering::Acquire) {
            continue;
        }
        let now = Instant::now();
        let overdue = match watched.progress.current() {
            // Between two calls: the next one is watched from now.
            None => {
                let _ = shared.alarm.arm(shared.call_deadline);
                continue;
            }
            Some((index, since)) => (index, since, since + shared.call_deadline),
        };
        let (index, since, at) = overdue;
        if now < at {
            let _ = shared.alarm.arm(at - now);
            continue;
        }
        take_over(shared, &watched, index, since);
    }
}

/// Replaces the sampler thread stuck in GPU `index`'s call (since `since`) with a new one, if
/// it is still stuck there once the state is locked.
fn take_over(shared: &Arc<Shared>, watched: &Watched, index: u32, since: Instant) {
    let mut state = lock(&shared.state);
    let stuck = shared.generation.load(Ordering::Acquire) == watched.generation
        && watched.progress.current() == Some((index, since));
    if !stuck {
        return;
    }
    let next = Arc::new(Watched {
        generation: watched.generation + 1,
        progress: Progress::new(Instant::now()),
        reading: AtomicBool::new(false),
    });
    // Started first, so that nothing changes hands when no thread can be started (the stuck
    // thread then stays the sampler, and the tick waits for its call). It waits for the lock
    // held here, and ends at once unless its generation is made the current one below.
    let thread_shared = shared.clone();
    let thread_watched = next.clone();
    let spawned = thread::Builder::new()
        .name("torchtop-sampler".into())
        .spawn(move || sample(&thread_shared, &thread_watched, true));
    if spawned.is_err() {
        return;
    }
    let Some(handoff) = state
        .sampler
        .gpus
        .isolate_inline(index, watched.progress.clone())
    else {
        return;
    };
    state.handoffs.push((watched.generation, handoff));
    *lock(&shared.current) = next.clone();
    shared.generation.store(next.generation, Ordering::Release);
}
