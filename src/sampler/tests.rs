//! The sampler against fake GPU sources: hung and lost GPUs, a hung library, agent commands.

use super::*;
use crate::collect::agent::tests::{hello, my_pid, serve, TempDir};
use crate::collect::{DeviceError, DeviceReader, DeviceReading, GpuSource};
use crate::model::{DriverInfo, GpuState};
use crate::protocol::AgentCommand;
use crate::test_ci::PATIENCE;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// A source whose GPU `hang` blocks forever, whose GPU `lose` reports lost, and whose GPU
/// `hold.0` blocks while `hold.1` is set.
struct FakeSource {
    count: AtomicU32,
    hang: Option<u32>,
    lose: Option<u32>,
    hold: Option<(u32, Arc<AtomicBool>)>,
}

struct FakeReader {
    index: u32,
    hang: bool,
    lose: bool,
    hold: Option<Arc<AtomicBool>>,
    /// Readings so far, published as the temperature: a figure that moves.
    reads: u32,
}

impl DeviceReader for FakeReader {
    fn read(&mut self) -> Result<DeviceReading, DeviceError> {
        if self.hang {
            thread::sleep(Duration::from_secs(3600));
        }
        while self.hold.as_ref().is_some_and(|h| h.load(Ordering::SeqCst)) {
            thread::sleep(Duration::from_millis(10));
        }
        if self.lose {
            return Err(DeviceError::Lost("gone".into()));
        }
        self.reads += 1;
        let mut reading = DeviceReading::default();
        reading.sample.temperature_c = Some(self.reads);
        reading.sample.name = Some(format!("Fake {}", self.index).into());
        reading.sample.utilization_percent = Some(40 + self.index);
        reading.processes.push(GpuProcess::new(
            1000 + self.index,
            self.index,
            crate::model::ProcessKind::Compute,
        ));
        Ok(reading)
    }
}

impl GpuSource for FakeSource {
    fn driver_info(&self) -> DriverInfo {
        DriverInfo {
            nvml_loaded: true,
            library: "fake".into(),
            driver_version: Some("1.0".into()),
            ..Default::default()
        }
    }
    fn device_count(&self) -> Result<u32, String> {
        Ok(self.count.load(Ordering::SeqCst))
    }
    fn open_device(&self, index: u32) -> Box<dyn DeviceReader> {
        Box::new(FakeReader {
            index,
            hang: self.hang == Some(index),
            lose: self.lose == Some(index),
            hold: (self.hold.as_ref())
                .filter(|(held, _)| *held == index)
                .map(|(_, flag)| flag.clone()),
            reads: 0,
        })
    }
}

/// A test config whose agent directory is a fresh one of its own (kept while the returned
/// guard lives), never the developer's, where the hub would remove stale sockets.
fn config() -> (SamplerConfig, TempDir) {
    let mut config = SamplerConfig::for_interval(Duration::from_millis(100), "fake".into());
    config.gpu_wait = Duration::from_millis(200);
    config.stale_after = Duration::from_millis(300);
    let agents = TempDir::new();
    config.agent_dir = agents.0.clone();
    (config, agents)
}

fn loader(count: u32, hang: Option<u32>, lose: Option<u32>) -> GpuLoader {
    Box::new(move || {
        Arc::new(FakeSource {
            count: AtomicU32::new(count),
            hang,
            lose,
            hold: None,
        }) as Arc<dyn GpuSource>
    })
}

/// Three GPUs; GPU `index` blocks in its read while `flag` is set.
fn loader_holding(index: u32, flag: Arc<AtomicBool>) -> GpuLoader {
    Box::new(move || {
        Arc::new(FakeSource {
            count: AtomicU32::new(3),
            hang: None,
            lose: None,
            hold: Some((index, flag)),
        }) as Arc<dyn GpuSource>
    })
}

/// Runs `body` on a thread of its own and returns what it returns; fails the test if that
/// takes more than [`PATIENCE`], as a body waiting on a GPU that hangs for an hour would.
fn returns<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(body());
    });
    rx.recv_timeout(PATIENCE)
        .expect("the sampler waited for a hung GPU")
}

/// Ticks until a snapshot satisfies `done` (a tick waits up to `gpu_wait` on the GPUs).
fn tick_until(sampler: &mut Sampler, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let snapshot = sampler.tick();
        if done(&snapshot) {
            return snapshot;
        }
        assert!(Instant::now() < deadline, "never: {:?}", snapshot.gpus);
    }
}

/// GPU 1's read blocks for an hour: ticks that come back at all did not wait for it.
#[test]
fn a_hung_gpu_is_stale_while_the_others_update() {
    let (first, later) = returns(|| {
        let (config, _agents) = config();
        let mut sampler = Sampler::start(config, loader(3, Some(1), None));
        sampler.gpus.wait_for_driver(Instant::now() + PATIENCE);
        let others_ok = |s: &Snapshot| {
            s.gpus.len() == 3 && s.gpus[0].state == GpuState::Ok && s.gpus[2].state == GpuState::Ok
        };
        let first = tick_until(&mut sampler, others_ok);
        thread::sleep(Duration::from_millis(350));
        let moved =
            |s: &Snapshot| others_ok(s) && s.gpus[0].temperature_c > first.gpus[0].temperature_c;
        let later = tick_until(&mut sampler, moved);
        (first, later)
    });
    assert_eq!(first.gpus[0].utilization_percent, Some(40));
    assert_eq!(first.gpus[1].state, GpuState::Stale);
    assert_eq!(first.gpus[1].utilization_percent, None);
    let pids: Vec<u32> = first.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [1000, 1002]);
    assert_eq!(later.gpus[1].state, GpuState::Stale);
    assert!(later.gpus[1].stale_seconds.unwrap() >= 0.3);
}

/// GPU 1 blocks from the start: it gets a worker of its own while the others keep updating on
/// the shared one; once it answers again, promptly, it goes back and its own worker ends.
#[test]
fn a_gpu_that_hangs_and_recovers_is_folded_back() {
    let held = Arc::new(AtomicBool::new(true));
    let release = held.clone();
    let (isolated, recovered, workers_after) = returns(move || {
        let (config, _agents) = config();
        let mut sampler = Sampler::start(config, loader_holding(1, held));
        sampler.gpus.wait_for_driver(Instant::now() + PATIENCE);
        let others_ok = |s: &Snapshot| {
            s.gpus.len() == 3 && [0, 2].iter().all(|i| s.gpus[*i].state == GpuState::Ok)
        };
        tick_until(&mut sampler, others_ok);
        let isolated = sampler.gpus.on_own_workers();
        let before = tick_until(&mut sampler, others_ok);
        let moved = tick_until(&mut sampler, |s| {
            others_ok(s) && s.gpus[0].temperature_c > before.gpus[0].temperature_c
        });
        assert_eq!(moved.gpus[1].state, GpuState::Stale);
        release.store(false, Ordering::SeqCst);
        let deadline = Instant::now() + PATIENCE;
        let recovered = loop {
            let snapshot = sampler.tick();
            let all_ok = snapshot.gpus.iter().all(|g| g.state == GpuState::Ok);
            if all_ok && sampler.gpus.on_own_workers().is_empty() {
                break snapshot;
            }
            assert!(
                Instant::now() < deadline,
                "never folded back: {:?}",
                snapshot.gpus
            );
        };
        (isolated, recovered, sampler.gpus.worker_count())
    });
    assert_eq!(isolated, [1]);
    assert_eq!(recovered.gpus.len(), 3);
    assert_eq!(recovered.gpus[1].utilization_percent, Some(41));
    assert_eq!(workers_after, 1, "the worker of its own did not end");
}

#[test]
fn a_lost_gpu_is_lost_and_its_processes_go() {
    let (config, _agents) = config();
    let mut sampler = Sampler::start(config, loader(2, None, Some(0)));
    sampler.gpus.wait_for_driver(Instant::now() + PATIENCE);
    let snapshot = tick_until(&mut sampler, |s| {
        s.gpus.len() == 2 && s.gpus[0].state == GpuState::Lost && s.gpus[1].state == GpuState::Ok
    });
    assert!(snapshot.processes.iter().all(|p| p.gpu == 1));
}

/// GPU 0's read blocks for an hour: `once` coming back at all gave up on it, after the
/// timeout (a lower bound, which load cannot break).
#[test]
fn once_gives_up_on_a_hung_gpu_after_the_timeout() {
    let (snapshot, took) = returns(|| {
        let (config, _agents) = config();
        let sampler = Sampler::start(config, loader(2, Some(0), None));
        let started = Instant::now();
        // Long enough that the healthy GPU is read even on a loaded machine.
        let snapshot = sampler.once(Duration::from_secs(5), Duration::from_millis(10));
        (snapshot, started.elapsed())
    });
    assert!(took >= Duration::from_secs(5), "{took:?}");
    assert_eq!(snapshot.gpus[0].state, GpuState::Stale);
    assert_eq!(snapshot.gpus[1].state, GpuState::Ok);
}

#[test]
fn once_reports_a_hung_library_load() {
    let hung: GpuLoader = Box::new(|| {
        thread::sleep(Duration::from_secs(3600));
        unreachable!()
    });
    let snapshot = returns(|| {
        let (config, _agents) = config();
        Sampler::start(config, hung).once(Duration::from_millis(200), Duration::from_millis(10))
    });
    assert!(!snapshot.driver.nvml_loaded);
    assert!(snapshot
        .driver
        .error
        .unwrap()
        .contains("did not finish loading"));
    assert!(snapshot.gpus.is_empty());
}

/// Ticks until a notice satisfies `found` or [`PATIENCE`] passes; returns every notice seen.
fn notices_until(sampler: &mut Sampler, found: impl Fn(&str) -> bool) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        seen.extend(sampler.tick().notices);
        if seen.iter().any(|n| found(n)) {
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    seen
}

#[test]
fn a_reply_nobody_asked_for_never_reaches_the_status_line() {
    let (config, agents) = config();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let server = serve(&agents, move |mut stream| {
        writeln!(stream, "{}", hello()).unwrap();
        let forged =
            r#"{"v":1,"type":"reply","id":1,"ok":true,"cmd":"snapshot","path":"/etc/shadow"}"#;
        writeln!(stream, "{forged}").unwrap();
        let _ = done_rx.recv();
    });
    let mut sampler = Sampler::start(config, loader(0, None, None));
    let notices = notices_until(&mut sampler, |n| n.contains("ignored a reply"));
    drop(done_tx);
    assert!(
        notices.iter().all(|n| !n.contains("/etc/shadow")),
        "{notices:?}"
    );
    assert!(
        notices.iter().any(|n| n.contains("ignored a reply")),
        "{notices:?}"
    );
    server.join().unwrap();
}

#[test]
fn a_command_without_an_answer_is_timed_out_in_the_status_line() {
    let (config, agents) = config();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let server = serve(&agents, move |mut stream| {
        writeln!(stream, "{}", hello()).unwrap();
        // Reads nothing and answers nothing, as an agent whose commands are stuck.
        let _ = done_rx.recv();
    });
    let mut sampler = Sampler::start(config, loader(0, None, None));
    let connected = Instant::now() + PATIENCE;
    while !sampler.agents.poll().contains_key(&my_pid()) && Instant::now() < connected {
        thread::sleep(Duration::from_millis(20));
    }
    sampler.handle(SamplerRequest::Agent {
        pid: my_pid(),
        command: AgentCommand::Snapshot,
    });
    let timed_out = format!(
        "the agent of {} did not answer the snapshot request within 10 s",
        my_pid()
    );
    let notices = notices_until(&mut sampler, |n| n == timed_out);
    assert!(
        notices.iter().any(|n| n.contains("asked the agent of")),
        "{notices:?}"
    );
    assert!(notices.contains(&timed_out), "{notices:?}");
    drop(sampler);
    drop(done_tx);
    server.join().unwrap();
}

/// The setup screen's refresh rate reaches the running loop: with an hour between ticks, a
/// second tick comes only because the new interval was taken.
#[test]
fn the_loop_takes_a_new_interval_at_once() {
    let (mut config, _agents) = config();
    config.interval = Duration::from_secs(3600);
    let (ticks, ticked) = std::sync::mpsc::channel();
    let requests = spawn_loop(config, loader(1, None, None), move |_| {
        ticks.send(()).is_ok()
    });
    ticked.recv_timeout(PATIENCE).expect("the first tick");
    requests
        .send(SamplerRequest::Interval(Duration::from_millis(50)))
        .unwrap();
    ticked
        .recv_timeout(PATIENCE)
        .expect("a second tick at the new interval, not an hour later");
}

impl Sampler {
    /// The monitor's tick when GPU workers keep the clock, as one snapshot.
    fn clocked_tick(&mut self) -> Snapshot {
        self.clocked_gpus();
        let mut snapshot = Snapshot::default();
        self.snapshot_into(&mut snapshot);
        snapshot
    }
}

/// Ticks on the workers' clock (as the monitor does) until a snapshot satisfies `done`.
fn clocked_tick_until(sampler: &mut Sampler, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let snapshot = sampler.clocked_tick();
        sampler.gpus.advance_clock(Instant::now());
        if done(&snapshot) {
            return snapshot;
        }
        assert!(Instant::now() < deadline, "never: {:?}", snapshot.gpus);
    }
}

/// On the clock nobody asks the worker for a reading: it reads on each tick by itself, and the
/// figures move.
#[test]
fn the_worker_reads_on_its_own_clock() {
    let (config, _agents) = config();
    let mut sampler = Sampler::start(config, loader(2, None, None));
    sampler.gpus.wait_for_driver(Instant::now() + PATIENCE);
    let first = tick_until(&mut sampler, |s| {
        s.gpus.len() == 2 && s.gpus.iter().all(|g| g.state == GpuState::Ok)
    });
    let every = Duration::from_millis(30);
    sampler.gpus.start_clock(Instant::now() + every, every);
    let later = clocked_tick_until(&mut sampler, |s| {
        s.gpus.iter().all(|g| g.state == GpuState::Ok)
            && s.gpus[1].temperature_c > first.gpus[1].temperature_c
    });
    assert_eq!(later.gpus[0].utilization_percent, Some(40));
    assert_eq!(sampler.gpus.worker_count(), 1);
}

/// On the clock too, a GPU whose read hangs gets a worker of its own, and the others keep
/// updating without waiting for it.
#[test]
fn on_the_clock_a_hung_gpu_still_gets_its_own_worker() {
    let (isolated, later) = returns(|| {
        let (config, _agents) = config();
        let mut sampler = Sampler::start(config, loader(3, Some(1), None));
        sampler.gpus.wait_for_driver(Instant::now() + PATIENCE);
        let every = Duration::from_millis(100);
        sampler.gpus.start_clock(Instant::now() + every, every);
        let others_ok = |s: &Snapshot| {
            s.gpus.len() == 3 && s.gpus[0].state == GpuState::Ok && s.gpus[2].state == GpuState::Ok
        };
        let first = clocked_tick_until(&mut sampler, others_ok);
        let later = clocked_tick_until(&mut sampler, |s| {
            others_ok(s) && s.gpus[2].temperature_c > first.gpus[2].temperature_c
        });
        (sampler.gpus.on_own_workers(), later)
    });
    assert_eq!(isolated, [1]);
    assert_eq!(later.gpus[1].state, GpuState::Stale);
}

/// A request sent on the loop's channel while the sampler waits for the GPUs' round is carried
/// out then: the UI and the workers share the one channel the sampler waits on.
#[test]
fn a_request_is_taken_while_the_sampler_waits_for_the_gpus() {
    let (mut config, _agents) = config();
    config.interval = Duration::from_secs(3600);
    let (snapshots, published) = std::sync::mpsc::channel();
    let requests = spawn_loop(config, loader(1, None, None), move |s| {
        snapshots.send(s).is_ok()
    });
    published.recv_timeout(PATIENCE).expect("the first tick");
    requests
        .send(SamplerRequest::Interval(Duration::from_millis(50)))
        .unwrap();
    // The detail view's process is read each tick once asked for: this test's own.
    requests
        .send(SamplerRequest::Detail {
            pid: Some(std::process::id()),
        })
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let snapshot = published.recv_timeout(PATIENCE).expect("a tick");
        if snapshot.detail.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the detail view never came");
    }
}

/// Publishes the monitor's loop (the sampler thread reading the healthy GPUs itself) into a
/// channel, until the receiver is dropped.
fn monitor_loop(loader: GpuLoader) -> (mpsc::Receiver<Snapshot>, TempDir) {
    let (config, agents) = config();
    let (snapshots, published) = mpsc::channel();
    spawn_loop(config, loader, move |s| snapshots.send(s).is_ok());
    (published, agents)
}

/// Takes the loop's snapshots until one satisfies `done`.
fn published_until(
    published: &mpsc::Receiver<Snapshot>,
    done: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let snapshot = published
            .recv_timeout(PATIENCE)
            .expect("the loop stopped publishing");
        if done(&snapshot) {
            return snapshot;
        }
        assert!(Instant::now() < deadline, "never: {:?}", snapshot.gpus);
    }
}

/// Three GPUs all answering.
fn all_ok(s: &Snapshot) -> bool {
    s.gpus.len() == 3 && s.gpus.iter().all(|g| g.state == GpuState::Ok)
}

/// The monitor's loop over three GPUs, once the sampler thread reads them itself (past the
/// first tick, which asks a worker, and a reading of GPU 1 after it), with GPU 1 then made
/// to block until the returned flag is cleared.
fn monitor_loop_holding_gpu_1() -> (mpsc::Receiver<Snapshot>, Arc<AtomicBool>, TempDir) {
    let held = Arc::new(AtomicBool::new(false));
    let (published, agents) = monitor_loop(loader_holding(1, held.clone()));
    let first = published_until(&published, all_ok);
    published_until(&published, |s| {
        all_ok(s) && s.gpus[1].temperature_c > first.gpus[1].temperature_c
    });
    held.store(true, Ordering::SeqCst);
    (published, held, agents)
}

/// In the monitor's loop a GPU that blocks, once the sampler thread reads the GPUs itself,
/// costs one deadline: the watchdog replaces the stuck thread, and the other GPUs keep
/// updating tick after tick while the blocked one goes stale.
#[test]
fn in_the_monitor_a_gpu_that_hangs_on_the_sampler_thread_delays_nobody() {
    let (published, held, _agents) = monitor_loop_holding_gpu_1();
    let first = published_until(&published, all_ok);
    let others_ok =
        |s: &Snapshot| s.gpus[0].state == GpuState::Ok && s.gpus[2].state == GpuState::Ok;
    let mut last = first.gpus[2].temperature_c;
    for _ in 0..5 {
        let later = published_until(&published, |s| {
            others_ok(s) && s.gpus[2].temperature_c > last
        });
        last = later.gpus[2].temperature_c;
    }
    let stale = published_until(&published, |s| s.gpus[1].state == GpuState::Stale);
    assert!(others_ok(&stale));
    held.store(false, Ordering::SeqCst);
}

/// A GPU that blocks on the sampler thread, then answers again: it goes stale while held and
/// moves again once released (read by the stuck thread, now its own worker, then folded
/// back), while the others never stop.
#[test]
fn in_the_monitor_a_gpu_that_hangs_and_recovers_moves_again() {
    let (published, held, _agents) = monitor_loop_holding_gpu_1();
    let stale = published_until(&published, |s| {
        s.gpus.len() == 3 && s.gpus[1].state == GpuState::Stale
    });
    let moved = published_until(&published, |s| {
        s.gpus[0].state == GpuState::Ok && s.gpus[0].temperature_c > stale.gpus[0].temperature_c
    });
    assert_eq!(moved.gpus[1].state, GpuState::Stale);
    held.store(false, Ordering::SeqCst);
    let back = published_until(&published, all_ok);
    let after = published_until(&published, |s| {
        all_ok(s) && s.gpus[1].temperature_c > back.gpus[1].temperature_c
    });
    let again = published_until(&published, |s| {
        all_ok(s) && s.gpus[1].temperature_c > after.gpus[1].temperature_c
    });
    assert_eq!(again.gpus[1].utilization_percent, Some(41));
}

/// The sampler thread takes the shared worker's GPUs (and the worker ends); where it cannot
/// read them itself after all (no watchdog), they go back to a shared worker and are read.
#[test]
fn the_gpus_go_to_the_sampler_thread_and_back_to_a_worker() {
    let (config, _agents) = config();
    let mut sampler = Sampler::start(config, loader(2, None, None));
    sampler.gpus.wait_for_driver(Instant::now() + PATIENCE);
    let all_ok = |s: &Snapshot| s.gpus.len() == 2 && s.gpus.iter().all(|g| g.state == GpuState::Ok);
    let first = tick_until(&mut sampler, all_ok);
    assert_eq!(sampler.gpus.worker_count(), 1);
    sampler.gpus.go_inline();
    assert_eq!(
        sampler.gpus.worker_count(),
        0,
        "the shared worker did not end"
    );
    assert!(sampler.gpus.on_own_workers().is_empty());
    sampler.gpus.leave_inline();
    assert_eq!(sampler.gpus.worker_count(), 1);
    tick_until(&mut sampler, |s| {
        all_ok(s) && s.gpus[1].temperature_c > first.gpus[1].temperature_c
    });
}

/// The shared loop refills a snapshot once its receiver has dropped it, with the figures of
/// its new tick, and never touches one a receiver still holds.
#[test]
fn the_shared_loop_refills_only_the_snapshots_nobody_holds() {
    let (config, _agents) = config();
    let (snapshots, published) = mpsc::channel();
    spawn_shared_loop(config, loader(1, None, None), move |s| {
        snapshots.send(s).is_ok()
    });
    let next = || {
        published
            .recv_timeout(PATIENCE)
            .expect("the loop stopped publishing")
    };
    let held = next();
    let held_copy = Snapshot::clone(&held);
    let mut seen = Vec::new();
    let mut last_temperature = None;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let snapshot = next();
        let temperature = snapshot.gpus.first().and_then(|g| g.temperature_c);
        assert!(
            temperature >= last_temperature,
            "an old figure in a refilled snapshot"
        );
        last_temperature = temperature;
        let at = Arc::as_ptr(&snapshot);
        assert_ne!(at, Arc::as_ptr(&held), "a held snapshot was refilled");
        if seen.contains(&at) {
            break;
        }
        seen.push(at);
        assert!(Instant::now() < deadline, "no snapshot was ever refilled");
    }
    assert_eq!(*held, held_copy, "a held snapshot changed");
}
