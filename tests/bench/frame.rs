//! The frame benchmark (`cargo bench --bench frame`): the UI thread's cost of one frame, the
//! way the event loop draws it (plan, draw, diff, escape codes), into memory instead of a
//! terminal. Not part of `cargo test`: it is a measurement, not a pass/fail test.
//!
//! Snapshots come from the sampler against the fake NVML (8 GPUs/64 processes and 16 GPUs/1,000
//! processes, sleeping processes as the GPU processes), a few ticks 100 ms apart, retimed 1 s
//! apart and fed in turn so each frame shows new figures, as at `-d 1`. For each terminal size
//! it prints the microseconds and allocations of a frame, of the app's update on a new
//! snapshot, and of the frame after each of a few keys (key handled, then drawn).
//!
//! Environment: TORCHTOP_BENCH_FRAMES (frames per figure, default 300), TORCHTOP_BENCH_ONLY
//! (only the scenarios and sizes whose names contain one of its `|`-separated parts, e.g.
//! `8 GPUs|120x40`), TORCHTOP_BENCH_ALLOC_STACKS (then, after the figures of each size, the
//! stacks of a few frames' and updates' allocations, grouped, the most frequent first; build
//! with `CARGO_PROFILE_BENCH_DEBUG=line-tables-only` for their lines).

#[path = "overhead/alloc.rs"]
#[allow(dead_code)]
mod alloc;
#[path = "../common/mod.rs"]
mod common;
#[path = "frame/fake.rs"]
mod fake;
#[path = "frame/stacks.rs"]
mod stacks;
mod support;

#[global_allocator]
static COUNTING: alloc::Counting = alloc::Counting;

use std::sync::Arc;
use std::time::Instant;

use torchtop::frame_bench::Frames;
use torchtop::model::Snapshot;

const SIZES: [(u16, u16); 3] = [(80, 24), (120, 40), (200, 50)];
/// Snapshots fed before measuring, so the sparklines have history to draw.
const HISTORY: usize = 60;
/// Keys whose next frame is timed, in pairs: the second undoes the first.
const KEYS: [(char, &str); 8] = [
    ('t', "t (tree on)"),
    ('t', "t (tree off)"),
    ('>', "> (next sort)"),
    ('<', "< (previous sort)"),
    ('r', "r (reverse)"),
    ('r', "r (back)"),
    ('?', "? (help)"),
    ('?', "? (help off)"),
];

fn main() {
    let frames: usize = std::env::var("TORCHTOP_BENCH_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let library = support::release_fake_library();
    for (name, gpus, processes) in [
        ("8 GPUs, 64 procs", 8, 64),
        ("16 GPUs, 1000 procs", 16, 1000),
    ] {
        if !wanted(name) {
            continue;
        }
        let snapshots = fake::snapshots(&library, gpus, processes, 12);
        for (width, height) in SIZES {
            let size = format!("{width}x{height}");
            if wanted(&size) {
                measure(name, &size, (width, height), &snapshots, frames);
            }
        }
    }
}

/// Whether TORCHTOP_BENCH_ONLY lets `name` (a scenario or a size) run: a kind of name that
/// none of its parts mentions runs in full.
fn wanted(name: &str) -> bool {
    let only = std::env::var("TORCHTOP_BENCH_ONLY").unwrap_or_default();
    let parts: Vec<&str> = only
        .split('|')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let same_kind: Vec<&&str> = parts
        .iter()
        .filter(|p| is_size(p) == is_size(name))
        .collect();
    same_kind.is_empty() || same_kind.iter().any(|p| name.contains(**p))
}

fn is_size(text: &str) -> bool {
    text.split_once('x')
        .is_some_and(|(w, h)| w.parse::<u16>().is_ok() && h.parse::<u16>().is_ok())
}

/// Feeds `snapshots` in turn, each retimed one second after the last, as the sampler would.
struct Feeder {
    snapshots: Vec<Snapshot>,
    next: usize,
    seconds: f64,
}

impl Feeder {
    fn next(&mut self) -> Arc<Snapshot> {
        let mut snapshot = self.snapshots[self.next % self.snapshots.len()].clone();
        self.next += 1;
        self.seconds += 1.0;
        snapshot.unix_seconds = self.seconds;
        Arc::new(snapshot)
    }
}

fn measure(name: &str, size: &str, (width, height): (u16, u16), snapshots: &[Snapshot], n: usize) {
    let mut feeder = Feeder {
        snapshots: snapshots.to_vec(),
        next: 0,
        seconds: snapshots[0].unix_seconds,
    };
    let mut screen = Frames::new(width, height);
    for _ in 0..HISTORY {
        screen.feed(feeder.next());
        screen.draw();
    }
    let (mut update, mut draw) = (Cost::default(), Cost::default());
    let mut bytes = 0;
    for _ in 0..n {
        let snapshot = feeder.next();
        update.time(|| screen.feed(snapshot));
        draw.time(|| bytes += screen.draw());
    }
    println!(
        "{name}, {size}: frame {} | update on a snapshot {} | {:.0} bytes written a frame",
        draw.per(n),
        update.per(n),
        bytes as f64 / n as f64
    );
    let mut costs: Vec<Cost> = KEYS.iter().map(|_| Cost::default()).collect();
    // Each pair pressed `n / 10` times, so the state after a round is the state before it.
    let rounds = (n / 10).max(1);
    for _ in 0..rounds {
        for ((key, _), cost) in KEYS.iter().zip(&mut costs) {
            cost.time(|| {
                screen.press(*key);
                screen.draw();
            });
        }
    }
    let keys: String = KEYS
        .iter()
        .zip(&costs)
        .map(|((_, label), cost)| format!("\n    {label}: {}", cost.per(rounds)))
        .collect();
    println!("  key, then its frame:{keys}");
    if std::env::var_os("TORCHTOP_BENCH_ALLOC_STACKS").is_some() {
        print_stacks(&format!("{name}, {size}"), &mut screen, &mut feeder);
    }
}

/// The stacks of the allocations of a few updates, then of a few frames, each printed grouped.
fn print_stacks(title: &str, screen: &mut Frames, feeder: &mut Feeder) {
    const TIMES: u32 = 20;
    for _ in 0..TIMES {
        let snapshot = feeder.next();
        stacks::traced(|| screen.feed(snapshot));
        screen.draw();
    }
    stacks::print(&format!("{title}: update on a snapshot"), TIMES);
    for _ in 0..TIMES {
        screen.feed(feeder.next());
        stacks::traced(|| screen.draw());
    }
    stacks::print(&format!("{title}: frame"), TIMES);
}

/// Time and allocations summed over calls.
#[derive(Default)]
struct Cost {
    seconds: f64,
    allocations: u64,
}

impl Cost {
    fn time(&mut self, f: impl FnOnce()) {
        let (calls, _) = alloc::counters();
        let start = Instant::now();
        f();
        self.seconds += start.elapsed().as_secs_f64();
        self.allocations += alloc::counters().0 - calls;
    }

    fn per(&self, n: usize) -> String {
        let n = n as f64;
        format!(
            "{:.0} µs, {:.0} allocations",
            self.seconds / n * 1e6,
            self.allocations as f64 / n
        )
    }
}
