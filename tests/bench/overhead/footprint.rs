//! How much memory a tick touches, and what touching it costs on this machine.
//!
//! Why: on a virtual machine that idles between ticks, a program's CPU at 1 Hz is less its
//! instructions than the pages it touches after each sleep: every page first touched after a
//! long sleep costs a page walk that the hypervisor's paging makes dear. The count of pages a
//! tick touches (`/proc/<pid>/clear_refs`, then the `Referenced` lines of `smaps`) is the same
//! on any machine; the price of a wake-up and of a page is this machine's, and the probe
//! below measures both, so that the CPU ratio can be read against them.

use std::time::Duration;

/// The distinct pages one program touched over a window: all of them, and those of its code
/// (mappings that can be executed: its own binary and the libraries).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pages {
    pub(crate) all: u64,
    pub(crate) code: u64,
}

/// The pages each of `pids` touches over `window`, or `None` for a program whose accessed
/// bits could not be cleared (another user's, or a kernel without `clear_refs`). Each tick
/// touches much the same pages, so a window of a few ticks reads as one tick's footprint.
pub(crate) fn pages_touched(pids: &[u32], window: Duration) -> Vec<Option<Pages>> {
    let cleared: Vec<bool> = pids
        .iter()
        .map(|pid| std::fs::write(format!("/proc/{pid}/clear_refs"), "1").is_ok())
        .collect();
    std::thread::sleep(window);
    pids.iter()
        .zip(cleared)
        .map(|(pid, cleared)| cleared.then(|| referenced(*pid)).flatten())
        .collect()
}

/// Sums the `Referenced` kilobytes of `pid`'s mappings, and of its executable ones apart.
fn referenced(pid: u32) -> Option<Pages> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let mut executable = false;
    let (mut all_kib, mut code_kib) = (0, 0);
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if first == "Referenced:" {
            let kib: u64 = words.next().and_then(|k| k.parse().ok()).unwrap_or(0);
            all_kib += kib;
            if executable {
                code_kib += kib;
            }
        } else if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: "start-end perms offset dev inode [path]".
            executable = words.next().is_some_and(|perms| perms.contains('x'));
        }
    }
    Some(Pages {
        all: all_kib / 4,
        code: code_kib / 4,
    })
}

/// What a thread pays on this machine, in µs of its own CPU time, to wake from a sleep of
/// `sleep` and to touch one more page after it: the bare wake-up, and the extra per page
/// when each wake-up touches `pages` pages it has touched before (a warm working set).
pub(crate) fn wake_and_page_cost(sleep: Duration, wakes: u32, pages: usize) -> (f64, f64) {
    let bare = cpu_per_wake(sleep, wakes, &mut []);
    let mut room = vec![1_u8; pages * 4096];
    let touching = cpu_per_wake(sleep, wakes, &mut room);
    (bare, (touching - bare) / pages as f64)
}

/// The thread's CPU time a wake-up, in µs, when each wake-up writes one byte in each page of
/// `room`.
fn cpu_per_wake(sleep: Duration, wakes: u32, room: &mut [u8]) -> f64 {
    let before = thread_cpu_ns();
    for _ in 0..wakes {
        std::thread::sleep(sleep);
        for page in room.chunks_mut(4096) {
            page[0] = page[0].wrapping_add(1);
        }
    }
    std::hint::black_box(&room);
    thread_cpu_ns().saturating_sub(before) as f64 / 1e3 / f64::from(wakes)
}

/// This thread's time on a CPU so far, from the scheduler's own count.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
