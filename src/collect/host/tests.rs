//! Tests of the host collector: fixture trees, temporary proc trees and the real /proc.

use std::path::Path;
use std::process::{Child, Command};

use super::off_screen::OFF_SCREEN_EVERY;
use super::*;
use crate::collect::launcher::launcher_in;
use crate::model::{LaunchEnv, ProcessKind, SwapInfo, VmSettings};
use crate::test_ci::PATIENCE;

#[test]
fn running_time_has_no_float_noise() {
    let noisy = 3125.36 - 3020.96;
    assert_ne!(noisy.to_string(), "104.4");
    assert_eq!(round_to_ticks(noisy, 100).to_string(), "104.4");
}

fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc")
}

/// A collector over the fixture tree, with the units the fixture was written for.
fn fixture_collector() -> HostCollector {
    HostCollector::with_units(fixture_root(), fixture_root(), 100, 4096)
}

fn row(pid: u32, gpu: u32) -> GpuProcess {
    GpuProcess::new(pid, gpu, ProcessKind::Compute)
}

/// A writable proc tree (`.0`) in the temp directory, removed on drop.
struct TempProc(PathBuf, #[allow(dead_code)] tempfile::TempDir);

impl TempProc {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("torchtop-host-test-")
            .tempdir()
            .unwrap();
        TempProc(dir.path().to_path_buf(), dir)
    }

    fn write(&self, path: &str, contents: &str) {
        let path = self.0.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    fn write_pid_stat(&self, pid: u32, ppid: u32, cpu_ticks: u64, start_ticks: u64) {
        self.write_named_stat(pid, "worker", ppid, cpu_ticks, start_ticks);
    }

    fn write_named_stat(&self, pid: u32, comm: &str, ppid: u32, cpu_ticks: u64, start: u64) {
        let start_ticks = start;
        let text = format!(
            "{pid} ({comm}) S {ppid} {pid} {ppid} 0 -1 0 0 0 0 0 {cpu_ticks} 0 0 0 20 0 1 0 \
             {start_ticks} 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0\n"
        );
        self.write(&format!("{pid}/stat"), &text);
    }
}

#[test]
fn host_totals_from_the_fixture() {
    let mut collector = fixture_collector();
    let host = collector.sample_host();
    assert_eq!(host.hostname.as_deref(), Some("fixture-host"));
    assert_eq!(host.memory.total_bytes, Some(16384000 * 1024));
    assert_eq!(host.memory.available_bytes, Some(12000000 * 1024));
    assert_eq!(host.memory.used_bytes, Some(4384000 * 1024));
    assert_eq!(host.swap.total_bytes, Some(4096000 * 1024));
    assert_eq!(host.swap.used_bytes, Some(1024000 * 1024));
    assert_eq!(host.vm.swappiness, Some(60));
    assert_eq!(host.vm.overcommit_memory, Some(1));
    assert_eq!(host.cpu_count, Some(4));
    assert_eq!(host.uptime_seconds, Some(1000.0));
    let load = host.load.unwrap();
    assert_eq!((load.one, load.five, load.fifteen), (1.5, 0.75, 0.25));
    assert_eq!(host.cpu_percent, None, "CPU% needs two samples");
}

#[test]
fn host_cpu_percent_is_the_delta_between_samples() {
    let tree = TempProc::new();
    tree.write("stat", "cpu 100 0 100 700 100 0 0 0 0 0\ncpu0 1 1 1 1\n");
    let mut collector = HostCollector::with_units(tree.0.clone(), tree.0.clone(), 100, 4096);
    assert_eq!(collector.sample_host().cpu_percent, None);
    // 400 more ticks, 100 of them idle or iowait: 75% busy.
    tree.write("stat", "cpu 300 0 200 750 150 0 0 0 0 0\ncpu0 1 1 1 1\n");
    assert_eq!(collector.sample_host().cpu_percent, Some(75.0));
}

#[test]
fn under_the_real_proc_the_uptime_is_what_proc_uptime_says() {
    let mut collector = HostCollector::new(PathBuf::from("/proc"));
    let clock = collector.sample_host().uptime_seconds.unwrap();
    let text = std::fs::read_to_string("/proc/uptime").unwrap();
    let file: f64 = text.split_whitespace().next().unwrap().parse().unwrap();
    // Read one after the other, the file second: as much later as a loaded machine stalls.
    assert!(
        (0.0..2.0).contains(&(file - clock)),
        "{clock} against {file}"
    );
    assert_eq!(
        clock,
        format!("{clock:.2}").parse::<f64>().unwrap(),
        "whole hundredths"
    );
}

#[test]
fn vmstat_is_read_each_refresh_only_while_the_oom_watch_has_something_to_name() {
    let tree = TempProc::new();
    let vmstat = |kills: u32| tree.write("vmstat", &format!("pgfault 9\noom_kill {kills}\n"));
    vmstat(1);
    let mut readings = readings::Readings::new(&tree.0);
    let t0 = Instant::now();
    let second = Duration::from_secs(1);
    assert_eq!(readings.oom_kill_count(t0, false), Some(1));
    vmstat(2);
    assert_eq!(
        readings.oom_kill_count(t0 + second, false),
        Some(1),
        "as last read"
    );
    assert_eq!(readings.oom_kill_count(t0 + second, true), Some(2));
    vmstat(3);
    let idle = readings::HOST_OOM_IDLE_EVERY;
    assert_eq!(readings.oom_kill_count(t0 + 2 * second, false), Some(2));
    assert_eq!(readings.oom_kill_count(t0 + second + idle, false), Some(3));
}

#[test]
fn a_cgroup_s_oom_file_is_read_once_a_refresh() {
    let tree = TempProc::new();
    tree.write_pid_stat(800, 1, 10, 2000);
    tree.write("800/status", "Uid:\t7\t7\t7\t7\n");
    tree.write("800/cmdline", "trainer\0");
    tree.write("800/cgroup", "0::/g\n");
    tree.write("sys/fs/cgroup/cgroup.controllers", "memory\n");
    let events = |kills: u32| {
        let text = format!("max 0\noom_kill {kills}\n");
        tree.write("sys/fs/cgroup/g/memory.events", &text);
    };
    events(1);
    let mut collector = HostCollector::with_units(tree.0.clone(), tree.0.clone(), 100, 4096);
    let mut rows = vec![row(800, 0)];
    let mut join = |collector: &mut HostCollector| {
        collector.join_processes(&mut rows);
        rows[0].cgroup.as_ref().and_then(|c| c.oom_kills)
    };
    collector.sample_host();
    assert_eq!(
        join(&mut collector),
        Some(1),
        "not watched yet: the join reads it"
    );
    collector.sample_host();
    events(2);
    assert_eq!(
        join(&mut collector),
        Some(1),
        "the join takes the sample's reading"
    );
    let host = collector.sample_host();
    assert_eq!(host.oom_kills.len(), 1, "the rise, at the next sample");
    assert_eq!(join(&mut collector), Some(2));
}

#[test]
fn host_fields_of_unreadable_files_are_none() {
    let tree = TempProc::new();
    tree.write("meminfo", "MemTotal: 2048 kB\n");
    tree.write("loadavg", "garbage\n");
    let mut collector = HostCollector::with_units(tree.0.clone(), tree.0.clone(), 100, 4096);
    let host = collector.sample_host();
    assert_eq!(host.memory.total_bytes, Some(2048 * 1024));
    assert_eq!(host.memory.available_bytes, None);
    assert_eq!(host.memory.used_bytes, None);
    assert_eq!(host.swap, SwapInfo::default());
    assert_eq!(host.vm, VmSettings::default());
    assert_eq!(host.load, None);
    assert_eq!(host.cpu_count, None);
    assert_eq!(host.uptime_seconds, None);
    assert_eq!(host.hostname, None);
}

#[test]
fn join_fills_a_trainer_row_from_the_fixture() {
    let mut collector = fixture_collector();
    let mut rows = vec![row(1000, 0), row(1000, 1)];
    collector.join_processes(&mut rows);
    let trainer = &rows[0];
    assert!(trainer.visible);
    assert_eq!(trainer.uid, Some(0));
    assert_eq!(trainer.user.as_deref(), Some("root"));
    assert_eq!(
        trainer.command.as_deref(),
        Some("python3 train.py --epochs 10")
    );
    assert_eq!(trainer.ppid, Some(1));
    assert_eq!(trainer.start_ticks, Some(50000));
    assert_eq!(trainer.rss_bytes, Some(100 * 1024 * 1024));
    assert_eq!(trainer.running_seconds, Some(500.0));
    assert_eq!(trainer.nice, Some(0));
    assert_eq!(trainer.cpu_percent, None, "first sight has no CPU%");
    // 1001 and 1002 from the main thread, 1004 from thread 1003.
    assert_eq!(trainer.children_count, Some(3));
    assert_eq!(trainer.children_cpu_percent, None);
    let env = trainer.env.as_ref().unwrap();
    assert_eq!(env.rank, Some(0));
    assert_eq!(env.world_size, Some(2));
    assert_eq!(env.cuda_visible_devices.as_deref(), Some("0,1"));
    assert_eq!(env.torchelastic_run_id.as_deref(), Some("job-17"));
    assert_eq!(env.master_port.as_deref(), Some("29500"));
    assert_eq!(
        env.pytorch_cuda_alloc_conf.as_deref(),
        Some("expandable_segments:True")
    );
    // The same pid on a second GPU gets the same host fields.
    let mut second = rows[1].clone();
    second.gpu = 0;
    assert_eq!(&second, trainer);
}

#[test]
fn join_keeps_odd_and_partial_rows_and_marks_missing_pids_gone() {
    let mut collector = fixture_collector();
    let mut rows = vec![row(2000, 0), row(3000, 0), row(3100, 0), row(999_999, 0)];
    collector.join_processes(&mut rows);

    let weird = &rows[0];
    assert!(weird.visible);
    assert_eq!(weird.command.as_deref(), Some("[my (weird) proc]"));
    assert_eq!(weird.uid, Some(54321));
    assert_eq!(weird.user.as_deref(), Some("54321"), "no passwd entry");
    assert_eq!(weird.nice, Some(-5));
    assert_eq!(weird.env.as_deref(), Some(&LaunchEnv::default()));
    assert_eq!(weird.children_count, Some(0));
    assert_eq!(weird.children_cpu_percent, Some(0.0));

    // Only stat is there: what the other files would say is unknown, the row stays.
    let bare = &rows[1];
    assert!(bare.visible);
    assert_eq!((bare.uid, bare.user.as_ref()), (None, None));
    assert_eq!((bare.command.as_ref(), bare.env.as_ref()), (None, None));
    assert_eq!(bare.ppid, Some(1));
    assert_eq!(bare.rss_bytes, Some(10 * 4096));

    let unreadable_env = &rows[2];
    assert!(unreadable_env.visible);
    assert_eq!(unreadable_env.env, None);
    assert_eq!(unreadable_env.command.as_deref(), Some("python3 serve.py"));
    assert_eq!(unreadable_env.children_count, None, "no task/ directory");
    assert_eq!(unreadable_env.nice, Some(10));

    assert!(!rows[3].visible);
    assert_eq!(rows[3].pid, 999_999);
}

#[test]
fn join_clears_stale_host_fields_of_a_row() {
    let mut collector = fixture_collector();
    let mut stale = row(999_999, 0);
    stale.visible = true;
    stale.command = Some("old".into());
    stale.cpu_percent = Some(12.0);
    stale.children_count = Some(2);
    let mut rows = vec![stale];
    collector.join_processes(&mut rows);
    assert!(!rows[0].visible);
    assert_eq!(rows[0].command, None);
    assert_eq!(rows[0].cpu_percent, None);
    assert_eq!(rows[0].children_count, None);
}

#[test]
fn join_cpu_percent_from_tick_deltas_and_pid_reuse() {
    let tree = TempProc::new();
    tree.write("uptime", "100.00 50.00\n");
    tree.write_pid_stat(500, 1, 1000, 2000);
    tree.write("500/status", "Uid:\t7\t7\t7\t7\n");
    tree.write("500/cmdline", "trainer\0");
    tree.write("500/task/500/children", "501 ");
    tree.write_pid_stat(501, 500, 10, 2100);
    let mut collector = HostCollector::with_units(tree.0.clone(), tree.0.clone(), 100, 4096);
    let t0 = Instant::now();
    let mut rows = vec![row(500, 0)];
    collector.join_processes_at(&mut rows, t0, Refresh::New, None);
    assert_eq!(rows[0].cpu_percent, None);
    assert_eq!(rows[0].running_seconds, Some(80.0));

    // One second later: 150 ticks (1.5 cores) for the process, 90 ticks for its child.
    tree.write_pid_stat(500, 1, 1150, 2000);
    tree.write_pid_stat(501, 500, 100, 2100);
    collector.join_processes_at(&mut rows, t0 + Duration::from_secs(1), Refresh::New, None);
    assert_eq!(rows[0].cpu_percent, Some(150.0));
    assert_eq!(rows[0].children_count, Some(1));
    assert_eq!(rows[0].children_cpu_percent, Some(90.0));

    // A sample 10 ms later repeats the last figure instead of dividing by almost nothing.
    collector.join_processes_at(
        &mut rows,
        t0 + Duration::from_millis(1010),
        Refresh::New,
        None,
    );
    assert_eq!(rows[0].cpu_percent, Some(150.0));

    // The pid is reused by a new process: a new identity, no CPU% yet, a fresh command.
    tree.write_pid_stat(500, 1, 5, 9000);
    tree.write("500/cmdline", "other\0");
    collector.join_processes_at(&mut rows, t0 + Duration::from_secs(2), Refresh::New, None);
    assert!(rows[0].visible);
    assert_eq!(rows[0].start_ticks, Some(9000));
    assert_eq!(rows[0].cpu_percent, None);
    assert_eq!(rows[0].command.as_deref(), Some("other"));
}

#[test]
fn rows_off_screen_show_their_last_reading_until_due_and_rows_on_screen_are_read_each_time() {
    let tree = TempProc::new();
    tree.write("uptime", "100.00 50.00\n");
    for pid in [600, 700] {
        tree.write_pid_stat(pid, 1, 1000, 2000);
        tree.write(&format!("{pid}/status"), "Uid:\t7\t7\t7\t7\n");
        tree.write(&format!("{pid}/cmdline"), "trainer\0");
    }
    let mut collector = HostCollector::with_units(tree.0.clone(), tree.0.clone(), 100, 4096);
    let t0 = Instant::now();
    let mut rows = vec![row(600, 0), row(700, 1)];
    let on_screen = Some(&[600][..]);
    collector.join_processes_at(&mut rows, t0, Refresh::New, on_screen);
    // One second later both used 50 ticks: only the row on screen is read again.
    tree.write_pid_stat(600, 1, 1050, 2000);
    tree.write_pid_stat(700, 1, 1050, 2000);
    tree.write("uptime", "101.00 50.00\n");
    let t1 = t0 + Duration::from_secs(1);
    collector.join_processes_at(&mut rows, t1, Refresh::New, on_screen);
    assert_eq!(rows[0].cpu_percent, Some(50.0));
    assert_eq!(rows[1].cpu_percent, None, "the first reading of 700 stands");
    assert_eq!(
        rows[1].running_seconds,
        Some(81.0),
        "its running time still moves"
    );
    assert!(rows[1].visible);
    // Without a screen, every row is read.
    collector.join_processes_at(
        &mut rows,
        t1 + Duration::from_millis(100),
        Refresh::New,
        None,
    );
    assert!(rows[1].cpu_percent.is_some());
    // Off screen, a row is read again once due, with its CPU% over the whole time since.
    tree.write_pid_stat(700, 1, 1550, 2000);
    let later = t1 + Duration::from_millis(100) + OFF_SCREEN_EVERY;
    collector.join_processes_at(&mut rows, later, Refresh::New, on_screen);
    assert_eq!(rows[1].cpu_percent, Some(100.0));
    // A new process under the same pid off screen shows once due, not before.
    tree.write_pid_stat(700, 1, 5, 9000);
    collector.join_processes_at(
        &mut rows,
        later + Duration::from_secs(1),
        Refresh::New,
        on_screen,
    );
    assert_eq!(rows[1].start_ticks, Some(2000));
    collector.join_processes_at(&mut rows, later + OFF_SCREEN_EVERY, Refresh::New, on_screen);
    assert_eq!(rows[1].start_ticks, Some(9000));
}

#[test]
fn identity_files_are_read_once_per_identity() {
    let tree = TempProc::new();
    tree.write("uptime", "100.00 50.00\n");
    tree.write_pid_stat(600, 1, 0, 500);
    tree.write("600/status", "Uid:\t0\t0\t0\t0\n");
    tree.write("600/cmdline", "first\0");
    tree.write("600/environ", "RANK=1\0");
    let mut collector = HostCollector::with_units(tree.0.clone(), tree.0.clone(), 100, 4096);
    let mut rows = vec![row(600, 0)];
    collector.join_processes(&mut rows);
    tree.write("600/cmdline", "second\0");
    tree.write("600/environ", "RANK=2\0");
    collector.join_processes(&mut rows);
    assert_eq!(rows[0].command.as_deref(), Some("first"));
    assert_eq!(rows[0].env.as_ref().and_then(|e| e.rank), Some(1));
}

#[test]
fn an_empty_command_line_of_a_live_process_is_read_again() {
    let tree = TempProc::new();
    tree.write("uptime", "100.00 50.00\n");
    tree.write_pid_stat(650, 1, 0, 500);
    tree.write("650/status", "Uid:\t0\t0\t0\t0\n");
    tree.write("650/cmdline", "");
    tree.write("650/environ", "");
    let mut collector = HostCollector::with_units(tree.0.clone(), tree.0.clone(), 100, 4096);
    let mut rows = vec![row(650, 0)];
    collector.join_processes(&mut rows);
    assert_eq!(rows[0].command.as_deref(), Some("[worker]"));
    // Exec finished: arguments and environment are there now.
    tree.write("650/cmdline", "python\0train.py\0");
    tree.write("650/environ", "LOCAL_RANK=3\0");
    collector.join_processes(&mut rows);
    assert_eq!(rows[0].command.as_deref(), Some("python train.py"));
    assert_eq!(rows[0].env.as_ref().and_then(|e| e.local_rank), Some(3));
}

#[test]
fn children_are_found_at_the_next_walk_of_every_thread() {
    let tree = TempProc::new();
    tree.write("uptime", "100.00 50.00\n");
    tree.write_pid_stat(700, 1, 0, 500);
    tree.write("700/status", "Uid:\t0\t0\t0\t0\n");
    tree.write("700/cmdline", "trainer\0");
    tree.write("700/task/700/children", "");
    let mut collector = HostCollector::with_units(tree.0.clone(), tree.0.clone(), 100, 4096);
    let t0 = Instant::now();
    let mut rows = vec![row(700, 0)];
    collector.join_processes_at(&mut rows, t0, Refresh::New, None);
    assert_eq!(rows[0].children_count, Some(0));

    tree.write("700/task/700/children", "701 ");
    tree.write_pid_stat(701, 700, 0, 600);
    tree.write("700/task/702/children", "703 ");
    tree.write_pid_stat(703, 700, 0, 600);
    // Children lists are read at each walk, every CHILDREN_RESCAN, from every thread.
    collector.join_processes_at(&mut rows, t0 + Duration::from_secs(1), Refresh::New, None);
    assert_eq!(rows[0].children_count, Some(0));
    collector.join_processes_at(
        &mut rows,
        t0 + CHILDREN_RESCAN + Duration::from_secs(1),
        Refresh::New,
        None,
    );
    assert_eq!(rows[0].children_count, Some(2));
    tree.write("700/task/702/children", "703 704 ");
    tree.write_pid_stat(704, 700, 0, 600);
    collector.join_processes_at(
        &mut rows,
        t0 + CHILDREN_RESCAN + Duration::from_secs(2),
        Refresh::New,
        None,
    );
    assert_eq!(rows[0].children_count, Some(2));
    collector.join_processes_at(
        &mut rows,
        t0 + 2 * CHILDREN_RESCAN + Duration::from_secs(2),
        Refresh::New,
        None,
    );
    assert_eq!(rows[0].children_count, Some(3));
}

/// The PyTorch review: every child counted as a DataLoader worker (torch.compile's compile
/// workers, a logger), so gpu-starved, shm-small and cpu-oversubscribed counted them too.
#[test]
fn children_torch_names_as_dataloader_workers_are_the_only_workers() {
    let tree = TempProc::new();
    tree.write("uptime", "100.00 50.00\n");
    tree.write_pid_stat(800, 1, 0, 500);
    tree.write("800/status", "Uid:\t0\t0\t0\t0\n");
    tree.write("800/cmdline", "python\0train.py\0");
    tree.write("800/task/800/children", "801 802 803 ");
    let write = |ticks| {
        tree.write_named_stat(801, "pt_data_worker", 800, ticks, 600);
        tree.write_named_stat(802, "pt_data_worker", 800, ticks, 600);
        tree.write_named_stat(803, "python", 800, 10 * ticks, 600);
    };
    write(0);
    let mut collector = HostCollector::with_units(tree.0.clone(), tree.0.clone(), 100, 4096);
    let t0 = Instant::now();
    let mut rows = vec![row(800, 0)];
    collector.join_processes_at(&mut rows, t0, Refresh::New, None);
    write(50);
    collector.join_processes_at(&mut rows, t0 + Duration::from_secs(1), Refresh::New, None);
    assert_eq!(rows[0].children_count, Some(2));
    let cpu = rows[0].children_cpu_percent.unwrap();
    assert!(
        (cpu - 100.0).abs() < 1.0,
        "two workers at 50% each, not the compiler: {cpu}"
    );

    // Without the name (a torch before it, or no torch), every child is a worker.
    tree.write_named_stat(801, "python", 800, 100, 600);
    tree.write_named_stat(802, "python", 800, 100, 600);
    collector.join_processes_at(&mut rows, t0 + Duration::from_secs(2), Refresh::New, None);
    assert_eq!(rows[0].children_count, Some(3));
}

#[test]
fn caches_of_unseen_pids_are_evicted() {
    let mut collector = fixture_collector();
    let t0 = Instant::now();
    collector.join_processes_at(&mut [row(1000, 0)], t0, Refresh::New, None);
    assert!(collector.identities.contains_key(&1000));
    assert!(collector.cpu_samples.contains_key(&1001));
    collector.join_processes_at(&mut [], t0 + EVICT_AFTER / 2, Refresh::New, None);
    assert!(collector.identities.contains_key(&1000));
    collector.join_processes_at(
        &mut [],
        t0 + EVICT_AFTER + Duration::from_secs(1),
        Refresh::New,
        None,
    );
    assert!(collector.identities.is_empty());
    assert!(collector.cpu_samples.is_empty());
}

#[test]
fn process_table_of_the_fixture() {
    let mut collector = fixture_collector();
    let mut table = collector.process_table();
    table.sort_by_key(|p| p.pid);
    let pids: Vec<u32> = table.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![1, 1000, 1001, 1002, 1004, 2000, 3000, 3100]);
    let weird = table.iter().find(|p| p.pid == 2000).unwrap();
    assert_eq!(weird.comm, "my (weird) proc");
    assert_eq!(weird.command, None);
    assert_eq!(weird.user.as_deref(), Some("54321"));
    assert_eq!(weird.nice, Some(-5));
    let worker = table.iter().find(|p| p.pid == 1004).unwrap();
    assert_eq!(worker.ppid, 1000);
    assert_eq!(worker.state, 'S');
    assert_eq!(worker.rss_bytes, Some(50 * 1024 * 1024));
    assert_eq!(worker.start_ticks, 50100);
    assert!(table.iter().all(|p| p.cpu_percent.is_none()));
}

// --- against the real /proc, with child processes of this test ---

/// A `sh -c` child that is killed and reaped on drop, so a failed assertion leaves no
/// busy loop behind.
struct ShChild(Child);

impl ShChild {
    fn spawn(script: &str) -> Self {
        ShChild(Command::new("sh").arg("-c").arg(script).spawn().unwrap())
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn kill_and_reap(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ShChild {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

/// Polls until `done` holds, failing after [`PATIENCE`] (a guard against hanging only).
fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_for_state(pid: u32, state: char) {
    poll_until(&format!("pid {pid} in state {state}"), || {
        procfs::read_pid_stat(Path::new("/proc"), pid).is_ok_and(|stat| stat.state == state)
    });
}

#[test]
fn real_proc_busy_child_then_gone() {
    let mut child = ShChild::spawn("while :; do :; done");
    let pid = child.pid();
    let mut collector = HostCollector::new(PathBuf::from("/proc"));
    let mut rows = vec![row(pid, 0)];
    // spawn() returns while the child may still be inside exec, with no arguments or
    // memory yet; the collector must pick the command line up once exec is done.
    poll_until("the child's memory", || {
        collector.join_processes(&mut rows);
        rows[0].rss_bytes.is_some_and(|rss| rss > 0)
    });
    let first = rows[0].clone();
    assert!(first.visible);
    assert_eq!(first.ppid, Some(std::process::id()));
    assert_eq!(first.command.as_deref(), Some("sh -c while :; do :; done"));
    // SAFETY: getuid has no preconditions.
    assert_eq!(first.uid, Some(unsafe { libc::getuid() }));
    assert!(first.rss_bytes.is_some_and(|rss| rss > 0));
    assert!(first
        .running_seconds
        .is_some_and(|s| (0.0..60.0).contains(&s)));

    // A busy loop uses the CPU, but how much of it it gets depends on the load: measure over
    // windows until it has had some.
    poll_until("CPU time for a busy loop", || {
        std::thread::sleep(MIN_CPU_INTERVAL);
        collector.join_processes(&mut rows);
        rows[0].cpu_percent.is_some_and(|cpu| cpu > 0.0)
    });
    assert_eq!(rows[0].start_ticks, first.start_ticks);

    child.kill_and_reap();
    collector.join_processes(&mut rows);
    assert!(!rows[0].visible);
    assert_eq!(rows[0].cpu_percent, None);
    assert_eq!(rows[0].command, None);
    assert_eq!(rows[0].start_ticks, None);
}

#[test]
fn real_proc_a_stopped_process_shows_state_t() {
    let child = ShChild::spawn("while :; do sleep 1; done");
    let pid = child.pid();
    let mut collector = HostCollector::new(PathBuf::from("/proc"));
    let mut rows = vec![row(pid, 0)];
    collector.join_processes(&mut rows);
    assert!(rows[0].state.is_some());
    let target = nix::unistd::Pid::from_raw(pid as i32);
    nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGSTOP).unwrap();
    wait_for_state(pid, 'T');
    collector.join_processes(&mut rows);
    assert_eq!(rows[0].state, Some('T'));
    nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGCONT).unwrap();
}

#[test]
fn real_proc_zombie_shows_its_name() {
    let mut child = ShChild::spawn("exit 0");
    let pid = child.pid();
    wait_for_state(pid, 'Z');
    let mut collector = HostCollector::new(PathBuf::from("/proc"));
    let mut rows = vec![row(pid, 0)];
    collector.join_processes(&mut rows);
    child.kill_and_reap();
    assert!(rows[0].visible);
    assert_eq!(rows[0].command.as_deref(), Some("[sh]"));
    assert_eq!(rows[0].ppid, Some(std::process::id()));
}

#[test]
fn real_proc_children_are_counted() {
    let mut child = ShChild::spawn("sleep 30 & sleep 30 & wait");
    let pid = child.pid();
    let mut rows = vec![row(pid, 0)];
    let mut count = None;
    poll_until("two children counted", || {
        // A new collector walks the children at once; a warm one waits CHILDREN_RESCAN.
        HostCollector::new(PathBuf::from("/proc")).join_processes(&mut rows);
        count = rows[0].children_count;
        count == Some(2)
    });
    let sleepers = procfs::read_thread_children(Path::new("/proc"), pid, pid).unwrap();
    for sleeper in &sleepers {
        // SAFETY: kill has no memory preconditions; these are our grandchildren.
        unsafe { libc::kill(*sleeper as libc::pid_t, libc::SIGKILL) };
    }
    child.kill_and_reap();
    assert_eq!(count, Some(2));
    assert_eq!(sleepers.len(), 2);
}

#[test]
fn real_proc_table_lists_this_process() {
    let mut collector = HostCollector::new(PathBuf::from("/proc"));
    let table = collector.process_table();
    let me = table
        .iter()
        .find(|p| p.pid == std::process::id())
        .expect("this test process is in the table");
    // SAFETY: getppid has no preconditions.
    assert_eq!(me.ppid, unsafe { libc::getppid() } as u32);
    assert!(me.command.is_some());
    assert!(table.len() > 1);
    std::thread::sleep(MIN_CPU_INTERVAL * 2);
    let again = collector.process_table();
    let me_again = again.iter().find(|p| p.pid == me.pid).unwrap();
    assert_eq!(me_again.start_ticks, me.start_ticks);
    assert!(me_again.cpu_percent.is_some());
}

#[test]
fn launchers_are_named_from_the_parents_command_line() {
    let cases = [
        (
            "/usr/bin/python3 /usr/local/bin/torchrun --nproc-per-node 8 train.py",
            Some("torchrun"),
        ),
        (
            "python -m torch.distributed.run --nproc_per_node 2 t.py",
            Some("torchrun"),
        ),
        (
            "python -u -m deepspeed.launcher.launch --world_info=x",
            Some("deepspeed"),
        ),
        ("/opt/conda/bin/deepspeed train.py", Some("deepspeed")),
        ("bash run.sh", None),
        ("python train.py --note torchrun", None),
    ];
    for (cmdline, expected) in cases {
        assert_eq!(launcher_in(cmdline), expected, "{cmdline}");
    }
}

#[test]
fn children_walks_of_many_processes_are_spread_over_the_refreshes() {
    let tree = TempProc::new();
    tree.write("uptime", "100.00 50.00\n");
    for pid in [700, 709] {
        tree.write_pid_stat(pid, 1, 0, 500);
        tree.write(&format!("{pid}/status"), "Uid:\t0\t0\t0\t0\n");
        tree.write(&format!("{pid}/cmdline"), "trainer\0");
        tree.write(&format!("{pid}/task/{pid}/children"), "");
    }
    let mut collector = HostCollector::with_units(tree.0.clone(), tree.0.clone(), 100, 4096);
    let t0 = Instant::now();
    let mut rows = vec![row(700, 0), row(709, 1)];
    collector.join_processes_at(&mut rows, t0, Refresh::New, None);
    for (pid, child) in [(700, 701), (709, 710)] {
        tree.write(&format!("{pid}/task/{pid}/children"), &format!("{child} "));
        tree.write_pid_stat(child, pid, 0, 600);
    }
    // Both were walked together at first sight; the second walks come at different refreshes.
    let counts = |rows: &[GpuProcess]| (rows[0].children_count, rows[1].children_count);
    collector.join_processes_at(&mut rows, t0 + Duration::from_secs(1), Refresh::New, None);
    assert_eq!(counts(&rows), (Some(0), Some(1)));
    collector.join_processes_at(&mut rows, t0 + CHILDREN_RESCAN, Refresh::New, None);
    assert_eq!(counts(&rows), (Some(1), Some(1)));
}
