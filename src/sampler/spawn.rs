//! The sampler's own thread: started by the monitor, `serve`, `torchtop record` and `--once`,
//! it publishes each snapshot through the caller's function and carries out the requests sent
//! on the channel it returns.

use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::publish::Publish;
use super::{gpu_worker, ticker, GpuLoader, Sampler, SamplerConfig, SamplerRequest};
use crate::model::Snapshot;

/// How long the first snapshot waits for the GPU library before going out without GPUs, and
/// then, at least, for the GPUs' first readings.
const FIRST_LOAD_WAIT: Duration = Duration::from_secs(1);

/// Runs the sampler on its own thread, calling `publish` with each snapshot until it returns
/// false. Requests sent on the returned channel are carried out as they arrive (while the
/// sampler waits for the next tick).
///
/// After the first snapshot the sampler thread keeps the clock and reads the healthy GPUs
/// itself, under a watchdog ([`ticker`]), so that a tick wakes one thread here and the UI's.
/// Where no watchdog can be had, GPU workers keep the clock instead: each sleeps until the
/// tick, reads, and wakes the sampler once. The sampler and the threads it starts run as
/// `SCHED_BATCH` ([`crate::sys::sched`]), so that waking one another costs no preemption.
pub(crate) fn spawn_loop<F>(
    config: SamplerConfig,
    loader: GpuLoader,
    publish: F,
) -> Sender<SamplerRequest>
where
    F: FnMut(Snapshot) -> bool + Send + 'static,
{
    run_loop(config, loader, Publish::Owned(Box::new(publish)))
}

/// As [`spawn_loop`], with each snapshot shared: the sampler refills the snapshots its
/// receivers have dropped, so that a tick allocates no snapshot (nor its vectors) anew.
pub(crate) fn spawn_shared_loop<F>(
    config: SamplerConfig,
    loader: GpuLoader,
    publish: F,
) -> Sender<SamplerRequest>
where
    F: FnMut(Arc<Snapshot>) -> bool + Send + 'static,
{
    run_loop(config, loader, Publish::Shared(Box::new(publish)))
}

fn run_loop(config: SamplerConfig, loader: GpuLoader, publish: Publish) -> Sender<SamplerRequest> {
    let (requests_tx, requests) = mpsc::channel();
    let inbox = (requests_tx.clone(), requests);
    thread::Builder::new()
        .name("torchtop-sampler".into())
        .spawn(move || {
            // Before any other thread starts here: the driver and GPU worker threads inherit
            // it. Where it is refused, the threads run as they would have; nothing is lost.
            let _ = crate::sys::sched::run_this_thread_as_batch();
            let mut sampler = Sampler::start_with_inbox(config, loader, inbox);
            // The first frame is worth more with the GPUs in it: give the library a moment.
            sampler
                .gpus
                .wait_for_driver(Instant::now() + FIRST_LOAD_WAIT);
            let first = Instant::now();
            let mut publish = publish;
            // Nor are GPUs shown stale that were only slow to be read the first time: the
            // shared worker reads them in turn, and on a real H200 each reading takes 48 ms
            // (its two PCIe counters sample over 20 ms each), 0.8 s for 16 of them. Later
            // rounds overlap the clock's ticks; this one waits, as `--once` does.
            let wait = sampler.config.gpu_wait.max(FIRST_LOAD_WAIT);
            sampler.read_gpus_within(wait);
            if !sampler.publish_now(&mut publish) {
                return;
            }
            let every = sampler.config.interval;
            let at = gpu_worker::next_slot(first, every, Instant::now());
            sampler.gpus.go_inline();
            sampler.gpus.start_clock(at, every);
            let Some((mut sampler, mut publish)) = ticker::run(sampler, publish) else {
                return;
            };
            sampler.gpus.leave_inline();
            loop {
                sampler.clocked_gpus();
                if !sampler.publish_now(&mut publish) {
                    return;
                }
                sampler.gpus.advance_clock(Instant::now());
            }
        })
        .expect("spawning a thread only fails when the OS is out of resources");
    requests_tx
}
