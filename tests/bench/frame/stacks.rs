//! Where the frame benchmark's allocations come from: a global allocator over the counting one
//! of `overhead/alloc.rs` that, while [`capture`] runs, keeps the stack of each allocation, and
//! prints them grouped, the most frequent first (under TORCHTOP_BENCH_ALLOC_STACKS). A build with
//! `CARGO_PROFILE_BENCH_DEBUG=line-tables-only` names the lines.

use std::alloc::{GlobalAlloc, Layout};
use std::backtrace::Backtrace;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::alloc::Counting;

/// The counting allocator, and a stack capture per allocation while [`TRACING`] is on.
pub(crate) struct Traced;

/// Whether allocations are being captured with their stacks now.
static TRACING: AtomicBool = AtomicBool::new(false);
static STACKS: Mutex<Vec<Backtrace>> = Mutex::new(Vec::new());

thread_local! {
    /// Set while this thread captures a stack: the capture's own allocations are not captured.
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
}

/// Keeps the stack of an allocation, unless it is the capture's own.
fn keep_stack() {
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

// SAFETY: every call is passed unchanged to the counting allocator, itself the system's.
unsafe impl GlobalAlloc for Traced {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        keep_stack();
        // SAFETY: the caller's contract is Counting's.
        unsafe { Counting.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { Counting.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        keep_stack();
        // SAFETY: as above.
        unsafe { Counting.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` with the stacks of its allocations captured, for [`print`]. The counts of
/// [`crate::alloc::counters`] include the captures' own meanwhile.
pub(crate) fn traced<T>(f: impl FnOnce() -> T) -> T {
    TRACING.store(true, Ordering::Relaxed);
    let value = f();
    TRACING.store(false, Ordering::Relaxed);
    value
}

/// Prints the stacks captured since the last call under `title`, grouped, the most frequent
/// first, as allocations per call of [`traced`] (`times` calls), and forgets them.
pub(crate) fn print(title: &str, times: u32) {
    let stacks = std::mem::take(&mut *STACKS.lock().unwrap());
    println!(
        "=== {title}: {:.1} allocations a call",
        per(stacks.len(), times)
    );
    let mut counts: HashMap<String, usize> = HashMap::new();
    for stack in &stacks {
        *counts.entry(frames(stack)).or_default() += 1;
    }
    let mut sorted: Vec<_> = counts.into_iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (frames, count) in sorted {
        println!("--- {:.1} a call\n{frames}", per(count, times));
    }
}

fn per(count: usize, times: u32) -> f64 {
    count as f64 / f64::from(times)
}

/// The stack's frames outside the standard library (the allocator's and this file's left out),
/// up to the benchmark's own, after the last standard one that led to them (which names the
/// type allocated), each with its file and line.
fn frames(stack: &Backtrace) -> String {
    let text = stack.to_string();
    let lines: Vec<&str> = text.lines().map(str::trim_start).collect();
    let mut kept = Vec::new();
    let mut last_std = None;
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("at ") {
            continue;
        }
        let at = lines.get(i + 1).filter(|l| l.starts_with("at ")).copied();
        let path = at.unwrap_or("");
        let name = line.split_once(": ").map_or(*line, |(_, name)| name);
        if path.contains("/rustc/") || path.is_empty() {
            last_std = Some(format!("  ({name})"));
            continue;
        }
        if path.contains("stacks.rs") || path.contains("frame.rs:29") {
            continue;
        }
        if name.contains("frame::measure") || path.contains("bench/frame.rs") || kept.len() >= 10 {
            break;
        }
        if let Some(std) = last_std.take() {
            if kept.is_empty() {
                kept.push(std);
            }
        }
        kept.push(format!("  {name}  {}", short(path)));
    }
    kept.join("\n")
}

/// The last two parts of a source path, and the line.
fn short(at: &str) -> &str {
    let at = at.trim_start_matches("at ");
    let mut cut = at.len();
    for _ in 0..2 {
        cut = at[..cut].rfind('/').unwrap_or(0);
    }
    at[cut..].trim_start_matches('/')
}
