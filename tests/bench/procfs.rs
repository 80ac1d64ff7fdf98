//! The /proc reader benchmark (`cargo bench --bench procfs`): torchtop's own reader against the
//! sysinfo crate, on idle processes spawned for the purpose. Not part of `cargo test`: it
//! measures, it does not judge. The README's "Why not sysinfo" section quotes its output.
//!
//! Both read the same facts: per refresh, each process's `stat` (CPU time, RSS, state); once
//! per process, its owner (`status`), command line and environment. Two cases:
//! - a tracked set of pids (torchtop's GPU rows: `HostCollector::join_processes`, which keeps
//!   the stat files open and re-reads them with one `pread`) against sysinfo's
//!   `refresh_processes_specifics(ProcessesToUpdate::Some(..))`;
//! - every process on the host (torchtop's tree view: `HostCollector::process_table`) against
//!   `ProcessesToUpdate::All`.
//!
//! sysinfo runs with `.without_tasks()` (threads are not listed as processes), single-threaded
//! (its `multithread` feature is off by default). CPU time is the whole process's
//! (`CLOCK_PROCESS_CPUTIME_ID`), next to wall time. Open files are counted in /proc/self/fd
//! while each reader is alive.
//!
//! Figures per reader: the first refresh (everything read for the first time), the median of
//! back-to-back refreshes, and the mean at 1 Hz over a window, which includes what torchtop
//! reads only every few seconds (the `children` files of every thread, every 5 s).
//!
//! Environment: TORCHTOP_BENCH_PROCS (idle processes, default 2000), TORCHTOP_BENCH_REFRESHES
//! (back-to-back refreshes, default 20), TORCHTOP_BENCH_SECONDS (the 1 Hz window, default 10).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System, UpdateKind};
use torchtop::collect::HostCollector;
use torchtop::model::process::{GpuProcess, ProcessKind};

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU time of every thread of this process (sysinfo's rayon workers included).
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, writable `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &raw mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, std::iter::Iterator::count)
}

/// Idle `sleep` processes, killed and reaped on drop.
struct Idle(Vec<Child>);

impl Idle {
    fn spawn(count: usize) -> Self {
        let children = (0..count)
            .map(|_| {
                Command::new("sleep")
                    .arg("600")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn an idle process")
            })
            .collect();
        Idle(children)
    }

    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(Child::id).collect()
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Cost of one refresh: CPU and wall time.
#[derive(Default, Clone, Copy)]
struct Cost {
    cpu: Duration,
    wall: Duration,
}

fn measure(mut refresh: impl FnMut() -> usize) -> (Cost, usize) {
    let (cpu, wall) = (process_cpu(), Instant::now());
    let seen = refresh();
    let cost = Cost {
        cpu: process_cpu().checked_sub(cpu).unwrap(),
        wall: wall.elapsed(),
    };
    (cost, seen)
}

/// How many refreshes of each kind.
#[derive(Clone, Copy)]
struct Plan {
    back_to_back: usize,
    at_1hz: usize,
    baseline_files: usize,
}

/// One reader's figures: the first refresh, the median back-to-back refresh, the mean refresh
/// at 1 Hz, and the files it keeps open.
struct Row {
    reader: &'static str,
    case: &'static str,
    processes: usize,
    first: Cost,
    steady: Cost,
    at_1hz: Cost,
    open_files: usize,
}

fn run(
    reader: &'static str,
    case: &'static str,
    plan: Plan,
    mut refresh: impl FnMut() -> usize,
) -> Row {
    let (first, processes) = measure(&mut refresh);
    let mut steady: Vec<Cost> = (0..plan.back_to_back)
        .map(|_| measure(&mut refresh).0)
        .collect();
    steady.sort_by_key(|c| c.cpu);
    let mut total = Cost::default();
    for _ in 0..plan.at_1hz {
        std::thread::sleep(Duration::from_secs(1));
        let (cost, _) = measure(&mut refresh);
        total.cpu += cost.cpu;
        total.wall += cost.wall;
    }
    let n = plan.at_1hz.max(1) as u32;
    let open_files = open_files().saturating_sub(plan.baseline_files);
    Row {
        reader,
        case,
        processes,
        first,
        steady: steady[steady.len() / 2],
        at_1hz: Cost {
            cpu: total.cpu / n,
            wall: total.wall / n,
        },
        open_files,
    }
}

fn per_process_us(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n.max(1) as f64
}

fn print(rows: &[Row]) {
    println!(
        "| reader | case | processes | first refresh | back to back (CPU) | back to back (wall) \
         | at 1 Hz (CPU) | at 1 Hz, ms per refresh (CPU) | files kept open |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} | {} |",
            r.reader,
            r.case,
            r.processes,
            per_process_us(r.first.cpu, r.processes),
            per_process_us(r.steady.cpu, r.processes),
            per_process_us(r.steady.wall, r.processes),
            per_process_us(r.at_1hz.cpu, r.processes),
            r.at_1hz.cpu.as_secs_f64() * 1e3,
            r.open_files,
        );
    }
}

/// What torchtop reads, asked of sysinfo: stat every time, the rest once per process.
fn sysinfo_same_facts() -> ProcessRefreshKind {
    ProcessRefreshKind::nothing()
        .with_cpu()
        .with_memory()
        .with_user(UpdateKind::OnlyIfNotSet)
        .with_cmd(UpdateKind::OnlyIfNotSet)
        .with_environ(UpdateKind::OnlyIfNotSet)
        .without_tasks()
}

fn main() {
    let count = env_count("TORCHTOP_BENCH_PROCS", 2000);
    let refreshes = env_count("TORCHTOP_BENCH_REFRESHES", 20).max(1);
    let seconds = env_count("TORCHTOP_BENCH_SECONDS", 10);
    let idle = Idle::spawn(count);
    let pids = idle.pids();
    let on_host = std::fs::read_dir("/proc").map_or(0, |d| {
        d.filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        })
        .count()
    });
    println!(
        "{count} idle processes spawned ({on_host} processes on the host). Per process and \
         refresh: the first, the median of {refreshes} back to back, the mean of {seconds} at 1 Hz."
    );
    let plan = Plan {
        back_to_back: refreshes,
        at_1hz: seconds,
        baseline_files: open_files(),
    };
    let mut rows = Vec::new();

    {
        let mut host = HostCollector::new(PathBuf::from("/proc"));
        let mut gpu_rows: Vec<GpuProcess> = pids
            .iter()
            .map(|&pid| GpuProcess::new(pid, 0, ProcessKind::Compute))
            .collect();
        rows.push(run("torchtop", "tracked pids", plan, || {
            host.join_processes(&mut gpu_rows);
            gpu_rows.iter().filter(|r| r.visible).count()
        }));
    }
    {
        let mut host = HostCollector::new(PathBuf::from("/proc"));
        rows.push(run("torchtop", "every process", plan, || {
            host.process_table().len()
        }));
    }
    let sys_pids: Vec<Pid> = pids.iter().map(|&p| Pid::from_u32(p)).collect();
    {
        let mut system = System::new();
        rows.push(run("sysinfo", "tracked pids", plan, || {
            system.refresh_processes_specifics(
                ProcessesToUpdate::Some(&sys_pids),
                true,
                sysinfo_same_facts(),
            )
        }));
    }
    {
        let mut system = System::new();
        rows.push(run("sysinfo", "every process", plan, || {
            system.refresh_processes_specifics(ProcessesToUpdate::All, true, sysinfo_same_facts())
        }));
    }
    {
        // sysinfo's own default kind (adds /proc/PID/io and the exe link), without threads.
        let mut system = System::new();
        let kind = ProcessRefreshKind::nothing()
            .with_memory()
            .with_cpu()
            .with_disk_usage()
            .with_exe(UpdateKind::OnlyIfNotSet)
            .without_tasks();
        rows.push(run(
            "sysinfo (refresh_processes' default kind)",
            "every process",
            plan,
            || system.refresh_processes_specifics(ProcessesToUpdate::All, true, kind),
        ));
    }
    print(&rows);
    drop(idle);
}
