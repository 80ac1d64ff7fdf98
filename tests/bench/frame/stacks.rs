//! Where the frame benchmark's allocations come from: the stacks the counting allocator of
//! `overhead/alloc.rs` keeps while [`traced`] runs, printed grouped, the most frequent first
//! (under TORCHTOP_BENCH_ALLOC_STACKS). A build with `CARGO_PROFILE_BENCH_DEBUG=line-tables-only`
//! names the lines.

use std::backtrace::Backtrace;
use std::collections::HashMap;

pub(crate) use crate::alloc::traced;

/// Prints the stacks captured since the last call under `title`, grouped, the most frequent
/// first, as allocations per call of [`traced`] (`times` calls), and forgets them.
pub(crate) fn print(title: &str, times: u32) {
    let stacks = crate::alloc::take_stacks();
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
        if path.contains("overhead/alloc.rs") || path.contains("stacks.rs") {
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
