//! Per-tick allocations of the sampler in steady state, counted by a global allocator that
//! wraps the system one. The sampler runs in this process against the fake NVML, the way the
//! monitor's sampler thread runs it: GPU round, /proc join, agents, rules, snapshot.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use torchtop::sampler::{Sampler, SamplerConfig};

/// The system allocator, counting calls and bytes.
pub(crate) struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed unchanged to the system allocator; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

pub(crate) fn counters() -> (u64, u64) {
    (
        ALLOCATIONS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    )
}

/// Allocations and bytes per tick in each of `phases`, with `scenario` as the fake NVML's
/// scenario file: a phase is (ticks to run first, ticks to count), all on one sampler, so a
/// later phase sees the rule windows fuller. Counts every thread of this process (the GPU
/// worker included), so the benchmark's own threads must be idle meanwhile.
pub(crate) fn per_tick(library: &Path, scenario: &Path, phases: &[(u32, u32)]) -> Vec<(f64, f64)> {
    std::env::set_var("TORCHTOP_FAKE_NVML_SCENARIO", scenario);
    let config = SamplerConfig::for_interval(Duration::from_secs(1), "fake".into());
    let mut sampler = Sampler::start(
        config,
        torchtop::collect::nvml_loader(library.to_path_buf()),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while sampler.tick().gpus.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Ticks 100 ms apart: the per-tick work is the same as at 1 s, the run shorter. The rule
    // windows are spans of time, so they fill in as many seconds as at 1 s.
    let pause = Duration::from_millis(100);
    let mut tick = || {
        drop(sampler.tick());
        std::thread::sleep(pause);
    };
    phases
        .iter()
        .map(|&(before, ticks)| {
            (0..before).for_each(|_| tick());
            let (calls0, bytes0) = counters();
            (0..ticks).for_each(|_| tick());
            let (calls1, bytes1) = counters();
            let n = f64::from(ticks);
            ((calls1 - calls0) as f64 / n, (bytes1 - bytes0) as f64 / n)
        })
        .collect()
}
