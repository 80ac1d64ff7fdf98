//! Per-tick allocations of the sampler in steady state, counted by a global allocator that
//! wraps the system one. The sampler runs in this process against the fake NVML, the way the
//! monitor's sampler thread runs it: GPU round, /proc join, agents, rules, snapshot.
//!
//! With TORCHTOP_BENCH_ALLOC_STACKS set, the counted ticks' allocations are also captured
//! with their stacks and printed, the most frequent first: where the remaining ones come from.
//! TORCHTOP_BENCH_ALLOC_TICKS sets how many ticks each phase counts: 20 ticks, 100 ms apart,
//! may or may not hold work done every 5 s (the cgroup rescans), 100 always do.

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use torchtop::model::Snapshot;
use torchtop::sampler::{Sampler, SamplerConfig};

/// The system allocator, counting calls and bytes.
pub(crate) struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Whether allocations are being captured with their stacks now.
static TRACING: AtomicBool = AtomicBool::new(false);
static STACKS: Mutex<Vec<Backtrace>> = Mutex::new(Vec::new());

thread_local! {
    /// Set while this thread captures a stack: the capture's own allocations are not captured.
    /// Also set for good on the stand-in agents' thread ([`uncounted`]).
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    /// Allocations counted on this thread: the sampler's own share, told from its workers'.
    static HERE: Cell<u64> = const { Cell::new(0) };
}

/// Stops counting this thread's allocations: for the benchmark's own helper threads.
pub(crate) fn uncounted() {
    CAPTURING.with(|capturing| capturing.set(true));
}

fn counted_here() -> u64 {
    HERE.with(Cell::get)
}

/// Counts one allocation of `bytes`, and captures its stack while [`TRACING`] is on; the
/// capture's own allocations are not counted.
fn count(bytes: usize) {
    if CAPTURING.try_with(Cell::get).unwrap_or(false) {
        return;
    }
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    let _ = HERE.try_with(|here| here.set(here.get() + 1));
    BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    if !TRACING.load(Ordering::Relaxed) {
        return;
    }
    let _ = CAPTURING.try_with(|capturing| {
        if capturing.replace(true) {
            return;
        }
        let stack = Backtrace::force_capture();
        if let Ok(mut stacks) = STACKS.lock() {
            stacks.push(stack);
        }
        capturing.set(false);
    });
}

/// Runs `f` with the stacks of its allocations captured, for [`take_stacks`]; the captures'
/// own allocations are not counted.
pub(crate) fn traced<T>(f: impl FnOnce() -> T) -> T {
    TRACING.store(true, Ordering::Relaxed);
    let value = f();
    TRACING.store(false, Ordering::Relaxed);
    value
}

/// The stacks captured so far, forgotten here.
pub(crate) fn take_stacks() -> Vec<Backtrace> {
    std::mem::take(&mut *STACKS.lock().unwrap())
}

/// Prints the captured stacks, grouped, the most frequent first, and forgets them.
fn print_stacks(ticks: u32) {
    let stacks = take_stacks();
    let mut counts: HashMap<String, u32> = HashMap::new();
    for stack in &stacks {
        let text = stack.to_string();
        let frames: Vec<&str> = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("at "))
            .filter(|line| {
                !["alloc::", "backtrace", "alloc::count", "Counting", "__rust"]
                    .iter()
                    .any(|skip| line.contains(skip))
            })
            .take(14)
            .collect();
        *counts.entry(frames.join("\n")).or_default() += 1;
    }
    let mut sorted: Vec<_> = counts.into_iter().collect();
    sorted.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    for (frames, count) in sorted {
        println!(
            "--- {:.1} a tick\n{frames}",
            f64::from(count) / f64::from(ticks)
        );
    }
}

// SAFETY: every call is passed unchanged to the system allocator; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
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
    measure_ticks(library, scenario, phases, |_| true)
        .into_iter()
        .map(|t| (t.calls, t.bytes))
        .collect()
}

/// A phase's figures, per tick.
pub(crate) struct PerTick {
    pub(crate) calls: f64,
    pub(crate) bytes: f64,
    /// The calls made on the thread that ticks (the sampler's own); the rest were made on
    /// other threads: the GPU worker, the agents' reader parsing their lines.
    pub(crate) calls_here: f64,
}

/// The figures of each phase, once `ready` holds for a snapshot (or 10 s have passed).
pub(crate) fn measure_ticks(
    library: &Path,
    scenario: &Path,
    phases: &[(u32, u32)],
    ready: impl Fn(&Snapshot) -> bool,
) -> Vec<PerTick> {
    std::env::set_var("TORCHTOP_FAKE_NVML_SCENARIO", scenario);
    let config = SamplerConfig::for_interval(Duration::from_secs(1), "fake".into());
    let mut sampler = Sampler::start(
        config,
        torchtop::collect::nvml_loader(library.to_path_buf()),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let snapshot = sampler.tick();
        if (!snapshot.gpus.is_empty() && ready(&snapshot)) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Ticks 100 ms apart: the per-tick work is the same as at 1 s, the run shorter. The rule
    // windows are spans of time, so they fill in as many seconds as at 1 s.
    let pause = Duration::from_millis(100);
    // Shared, as the monitor publishes them: each snapshot dropped before the next tick, as
    // the screen drops the one it showed, so the sampler refills it.
    // The warnings of the latest tick, shown with the stacks: each warning that holds costs
    // its texts every tick, so a figure is only comparable with the same warnings up.
    let warnings = std::cell::RefCell::new(String::new());
    let mut tick = || {
        let snapshot = sampler.tick_shared();
        if TRACING.load(Ordering::Relaxed) {
            CAPTURING.with(|capturing| capturing.set(true));
            *warnings.borrow_mut() = (snapshot.warnings.iter())
                .map(|w| format!("{} {}", w.id, w.subject.label()))
                .collect::<Vec<_>>()
                .join(", ");
            CAPTURING.with(|capturing| capturing.set(false));
        }
        drop(snapshot);
        std::thread::sleep(pause);
    };
    let counted: Option<u32> = std::env::var("TORCHTOP_BENCH_ALLOC_TICKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0);
    phases
        .iter()
        .map(|&(before, ticks)| {
            let ticks = counted.unwrap_or(ticks);
            (0..before).for_each(|_| tick());
            let trace = std::env::var_os("TORCHTOP_BENCH_ALLOC_STACKS").is_some();
            let (calls0, bytes0) = counters();
            let here0 = counted_here();
            if trace {
                traced(|| (0..ticks).for_each(|_| tick()));
            } else {
                (0..ticks).for_each(|_| tick());
            }
            let (calls1, bytes1) = counters();
            let here1 = counted_here();
            if trace {
                print_stacks(ticks);
                println!("--- warnings up at the last tick: {}", warnings.borrow());
            }
            let n = f64::from(ticks);
            PerTick {
                calls: (calls1 - calls0) as f64 / n,
                bytes: (bytes1 - bytes0) as f64 / n,
                calls_here: (here1 - here0) as f64 / n,
            }
        })
        .collect()
}
