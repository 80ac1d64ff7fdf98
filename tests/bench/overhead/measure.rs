//! What the benchmark reads of a running program, from /proc as an outside observer: CPU time
//! and context switches of every thread, RSS now and at its peak.

use std::time::{Duration, Instant};

/// What was measured of one running program over the window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    pub(crate) cpu_ms_per_s: f64,
    pub(crate) rss_mib: f64,
    pub(crate) peak_rss_mib: f64,
    pub(crate) wakeups_per_s: f64,
}

/// One thread as /proc shows it.
pub(crate) struct Thread {
    tid: String,
    name: String,
    cpu_ns: u64,
    /// Context switches where the thread went to sleep.
    voluntary: u64,
    /// Context switches where another thread took its CPU.
    preempted: u64,
}

/// Each thread of `pid`; none once it is gone.
pub(crate) fn threads(pid: u32) -> Vec<Thread> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| {
            let task = task.ok()?;
            let tid = task.file_name().to_string_lossy().into_owned();
            let dir = task.path();
            let name = std::fs::read_to_string(dir.join("comm")).ok()?;
            let schedstat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
            let cpu_ns = schedstat.split_whitespace().next()?.parse().ok()?;
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            let count = |key: &str| {
                (status.lines())
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|rest| rest.trim_start_matches(':').trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            Some(Thread {
                tid,
                name: name.trim().to_string(),
                cpu_ns,
                voluntary: count("voluntary_ctxt_switches"),
                preempted: count("nonvoluntary_ctxt_switches"),
            })
        })
        .collect()
}

/// CPU time in ns and context switches, summed over every thread of `pid`.
fn cpu_and_switches(pid: u32) -> (u64, u64) {
    threads(pid).iter().fold((0, 0), |(c, s), t| {
        (c + t.cpu_ns, s + t.voluntary + t.preempted)
    })
}

pub(crate) fn status_kib(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Measures several programs over the same window, so they share the same load. Threads that
/// ended during the window take their counts with them, so a program that starts threads per
/// tick reads low; torchtop's threads live as long as it does.
pub(crate) fn measure(pids: &[u32], window: Duration) -> Vec<Usage> {
    let before: Vec<_> = pids.iter().map(|p| cpu_and_switches(*p)).collect();
    let started = Instant::now();
    std::thread::sleep(window);
    let wall = started.elapsed().as_secs_f64();
    pids.iter()
        .zip(before)
        .map(|(pid, (cpu0, sw0))| {
            let (cpu1, sw1) = cpu_and_switches(*pid);
            Usage {
                cpu_ms_per_s: cpu1.saturating_sub(cpu0) as f64 / 1e6 / wall,
                rss_mib: status_kib(*pid, "VmRSS:") / 1024.0,
                peak_rss_mib: status_kib(*pid, "VmHWM:") / 1024.0,
                wakeups_per_s: sw1.saturating_sub(sw0) as f64 / wall,
            }
        })
        .collect()
}

/// Wake-ups per second of each thread of `pid` over `window`, busiest first: its name, then
/// the context switches per second where it went to sleep and where it was preempted.
pub(crate) fn wakeups_by_thread(pid: u32, window: Duration) -> Vec<(String, f64, f64)> {
    let before = threads(pid);
    let started = Instant::now();
    std::thread::sleep(window);
    let wall = started.elapsed().as_secs_f64();
    let mut rates: Vec<(String, f64, f64)> = threads(pid)
        .into_iter()
        .map(|now| {
            let then = before.iter().find(|t| t.tid == now.tid);
            let (v0, p0) = then.map_or((0, 0), |t| (t.voluntary, t.preempted));
            (
                now.name,
                now.voluntary.saturating_sub(v0) as f64 / wall,
                now.preempted.saturating_sub(p0) as f64 / wall,
            )
        })
        .collect();
    rates.sort_by(|a, b| (b.1 + b.2).total_cmp(&(a.1 + a.2)));
    rates
}
