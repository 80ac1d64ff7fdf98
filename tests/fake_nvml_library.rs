//! The fake `libnvidia-ml.so.1`, loaded through nvml-wrapper exactly as torchtop loads the real
//! one (`Nvml::builder().lib_path(..).init()`): scenario values, faults, live edits, errors, and
//! the per-symbol C ABI that nvtop and nvitop rely on.
//!
//! The library's state is process-wide, so the tests here run one at a time under [`LOCK`].
//!
//! Time-based behaviour is checked against [`LibClock`]: this test cannot know the library's t
//! exactly, only the span of values a call may have seen, so every assertion holds over that
//! whole span and a loaded machine (a wider span) can never make it fail.

mod common;

use std::ffi::CStr;
use std::fmt::Debug;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::fake_nvml::{
    fake_nvml_library, fill_pids, many_gpus_scenario, ScenarioFile, Sleepers, SCENARIO_ENV,
};
use common::{wait_until, PATIENCE};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformanceState, TemperatureSensor,
    TemperatureThreshold,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings as sys;

static LOCK: Mutex<()> = Mutex::new(());

const MIB: u64 = 1024 * 1024;

fn serialized() -> MutexGuard<'static, ()> {
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Initializes NVML from the fake library with `scenario` (or none), as torchtop does.
fn init_with(scenario: Option<&Path>) -> Result<Nvml, NvmlError> {
    match scenario {
        Some(path) => std::env::set_var(SCENARIO_ENV, path),
        None => std::env::remove_var(SCENARIO_ENV),
    }
    Nvml::builder()
        .lib_path(fake_nvml_library().as_os_str())
        .init()
}

fn init(scenario: &ScenarioFile) -> Nvml {
    init_with(Some(scenario.path())).expect("the fake library initializes")
}

/// The error of an init that must fail.
fn init_error(scenario: &Path) -> NvmlError {
    match init_with(Some(scenario)) {
        Ok(_) => panic!("init with {} must fail", scenario.display()),
        Err(e) => e,
    }
}

/// The library's clock as this test knows it: t counts from the `nvmlInit` that ran between
/// `before` and `after`.
struct LibClock {
    before: Instant,
    after: Instant,
}

/// The values of the library's t that one call may have seen.
#[derive(Clone, Copy, Debug)]
struct Span {
    lo: f64,
    hi: f64,
}

impl Span {
    /// Times across the span, ends included, close enough together to land in every phase of
    /// a scenario (whose phases last at least a second).
    fn points(self) -> impl Iterator<Item = f64> {
        (0..=1000).map(move |k| self.lo + (self.hi - self.lo) * f64::from(k) / 1000.0)
    }
}

impl LibClock {
    /// Initializes the library with `scenario`, noting when.
    fn init(scenario: &ScenarioFile) -> (Nvml, LibClock) {
        let before = Instant::now();
        let nvml = init(scenario);
        let after = Instant::now();
        (nvml, LibClock { before, after })
    }

    /// Runs `call`; returns its result and the span of t it saw.
    fn call<T>(&self, call: impl FnOnce() -> T) -> (T, Span) {
        let started = Instant::now();
        let result = call();
        let ended = Instant::now();
        let span = Span {
            lo: started.saturating_duration_since(self.after).as_secs_f64(),
            hi: ended.duration_since(self.before).as_secs_f64(),
        };
        (result, span)
    }

    /// Sleeps until the library's t is surely past `t`.
    fn sleep_past(&self, t: f64) {
        let until = self.after + Duration::from_secs_f64(t);
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
    }
}

/// Fails unless `got` is what `expected` gives at some t of `span`.
#[track_caller]
fn assert_seen_in<T: PartialEq + Debug>(got: T, span: Span, expected: impl Fn(f64) -> T) {
    let mut candidates: Vec<T> = Vec::new();
    for t in span.points() {
        let want = expected(t);
        if want == got {
            return;
        }
        if !candidates.contains(&want) {
            candidates.push(want);
        }
    }
    panic!("got {got:?}; at t in {span:?} the library gives one of {candidates:?}");
}

/// Fails unless `got` lies within `tolerance` of the range `f` covers over `span`.
#[track_caller]
fn assert_within(got: f64, span: Span, tolerance: f64, f: impl Fn(f64) -> f64) {
    let (low, high) = span
        .points()
        .map(&f)
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    assert!(
        (low - tolerance..=high + tolerance).contains(&got),
        "{got} outside {low}..{high} (at t in {span:?})"
    );
}

/// Runs `call` on a thread of its own; fails if it has not returned after [`PATIENCE`] (a hung
/// call would block the test itself for the hang's length).
#[track_caller]
fn returns<T: Send + 'static>(what: &str, call: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(call());
    });
    rx.recv_timeout(PATIENCE)
        .unwrap_or_else(|_| panic!("{what} did not return within {} s", PATIENCE.as_secs()))
}

/// The library's own `nvmlErrorString` for `code`.
fn error_string(code: u32) -> String {
    // SAFETY: the fake library is loaded already; nvmlErrorString returns a static C string.
    unsafe {
        let lib = sys::NvmlLib::new(fake_nvml_library()).expect("load the fake library");
        let text = (lib.nvmlErrorString.as_ref().expect("nvmlErrorString"))(code);
        CStr::from_ptr(text).to_string_lossy().into_owned()
    }
}

#[test]
fn scenario_values_come_through_nvml_wrapper() {
    let _guard = serialized();
    let sleepers = Sleepers::spawn(2);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &pids);
    let nvml = init(&scenario);

    assert_eq!(nvml.sys_driver_version().unwrap(), "550.54.15");
    assert_eq!(nvml.sys_nvml_version().unwrap(), "12.550.54.15");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 12040);
    assert_eq!(nvml.device_count().unwrap(), 1);

    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu.index().unwrap(), 0);
    assert_eq!(gpu.name().unwrap(), "NVIDIA H100 80GB HBM3");
    assert_eq!(
        gpu.uuid().unwrap(),
        "GPU-4d3f1c2a-6b7e-4f10-9a2b-0c1d2e3f4a5b"
    );
    let pci = gpu.pci_info().unwrap();
    assert_eq!(pci.bus_id, "00000000:18:00.0");
    assert_eq!((pci.domain, pci.bus, pci.device), (0, 0x18, 0));

    let memory = gpu.memory_info().unwrap();
    assert_eq!(memory.total, 81559 * MIB);
    assert_eq!(memory.reserved, 512 * MIB);
    assert_eq!(memory.used, 40960 * MIB);
    assert_eq!(memory.free, (81559 - 512 - 40960) * MIB);

    let utilization = gpu.utilization_rates().unwrap();
    assert_eq!((utilization.gpu, utilization.memory), (87, 45));
    assert_eq!(gpu.temperature(TemperatureSensor::Gpu).unwrap(), 64);
    assert_eq!(
        gpu.temperature_threshold(TemperatureThreshold::Slowdown)
            .unwrap(),
        89
    );
    assert_eq!(gpu.power_usage().unwrap(), 412_500);
    assert_eq!(gpu.power_management_limit().unwrap(), 700_000);
    assert_eq!(gpu.enforced_power_limit().unwrap(), 700_000);
    assert_eq!(gpu.num_fans().unwrap(), 1);
    assert_eq!(gpu.fan_speed(0).unwrap(), 40);
    assert_eq!(gpu.clock_info(Clock::Graphics).unwrap(), 1755);
    assert_eq!(gpu.clock_info(Clock::Memory).unwrap(), 2619);
    assert_eq!(gpu.max_clock_info(Clock::SM).unwrap(), 1980);
    assert_eq!(
        gpu.pcie_throughput(PcieUtilCounter::Receive).unwrap(),
        120_000
    );
    assert_eq!(gpu.pcie_throughput(PcieUtilCounter::Send).unwrap(), 80_000);
    assert_eq!(gpu.current_pcie_link_gen().unwrap(), 5);
    assert_eq!(gpu.max_pcie_link_width().unwrap(), 16);
    assert_eq!(gpu.encoder_utilization().unwrap().utilization, 0);
    assert_eq!(gpu.decoder_utilization().unwrap().utilization, 3);
    assert_eq!(gpu.performance_state().unwrap(), PerformanceState::Zero);
    assert_eq!(
        gpu.current_throttle_reasons().unwrap(),
        ThrottleReasons::SW_POWER_CAP
    );
    assert_eq!(
        gpu.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .unwrap(),
        2
    );
    assert!(gpu.is_in_persistent_mode().unwrap());
    assert!(matches!(gpu.mig_mode(), Err(NvmlError::NotSupported)));

    let processes = gpu.running_compute_processes().unwrap();
    let listed: Vec<(u32, UsedGpuMemory)> = processes
        .iter()
        .map(|p| (p.pid, p.used_gpu_memory.clone()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (pids[0], UsedGpuMemory::Used(30720 * MIB)),
            (pids[1], UsedGpuMemory::Used(10240 * MIB)),
        ]
    );
    assert!(processes.iter().all(|p| p.gpu_instance_id.is_none()));
    assert!(gpu.running_graphics_processes().unwrap().is_empty());

    let samples = gpu.process_utilization_stats(None).unwrap();
    let mut sm: Vec<(u32, u32)> = samples.iter().map(|s| (s.pid, s.sm_util)).collect();
    sm.sort_unstable();
    let mut expected = vec![(pids[0], 70), (pids[1], 15)];
    expected.sort_unstable();
    assert_eq!(sm, expected);
}

#[test]
fn moving_values_follow_their_functions() {
    let _guard = serialized();
    let scenario = ScenarioFile::new(
        r#"
[[gpu]]
utilization_gpu = { fn = "sine", mean = 50, amplitude = 40, period_s = 4 }
power_w = { fn = "ramp", from = 100, to = 300, duration_s = 2 }
temperature_c = { fn = "square", low = 40, high = 80, period_s = 0.6 }
"#,
    );
    let (nvml, clock) = LibClock::init(&scenario);
    let gpu = nvml.device_by_index(0).unwrap();
    for _ in 0..8 {
        let (util, span) = clock.call(|| gpu.utilization_rates().unwrap().gpu);
        assert_within(f64::from(util), span, 1.0, |t| {
            50.0 + 40.0 * (std::f64::consts::TAU * t / 4.0).sin()
        });
        let (power_mw, span) = clock.call(|| gpu.power_usage().unwrap());
        assert_within(f64::from(power_mw) / 1000.0, span, 0.5, |t| {
            100.0 + 200.0 * (t / 2.0).min(1.0)
        });
        std::thread::sleep(Duration::from_millis(130));
    }
    let (mut seen_high, mut seen_low) = (false, false);
    wait_until("the square wave at both its levels", || {
        match gpu.temperature(TemperatureSensor::Gpu).unwrap() {
            80 => seen_high = true,
            40 => seen_low = true,
            other => panic!("square wave gave {other}"),
        }
        seen_high && seen_low
    });
}

#[test]
fn wall_time_origin_gives_every_process_the_same_values() {
    let _guard = serialized();
    let scenario = ScenarioFile::new(
        "[system]\ntime_origin = \"wall\"\n[[gpu]]\n\
         utilization_gpu = { fn = \"ramp\", from = 0, to = 100, duration_s = 100, repeat = true }\n",
    );
    let nvml = init(&scenario);
    let gpu = nvml.device_by_index(0).unwrap();
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let before = wall();
    let got = f64::from(gpu.utilization_rates().unwrap().gpu);
    let span = Span {
        lo: before,
        hi: wall(),
    };
    assert_within(got, span, 1.0, |t| t % 100.0);
}

#[test]
fn unsupported_fields_give_not_supported() {
    let _guard = serialized();
    let sleepers = Sleepers::spawn(1);
    let scenario = ScenarioFile::from_fixture("na_fields.toml", &sleepers.pids());
    let nvml = init(&scenario);
    let bare = nvml.device_by_index(0).unwrap();
    assert_eq!(bare.name().unwrap(), "NVIDIA GeForce GTX 1080");
    assert!(bare.memory_info().is_ok());
    let not_supported = |r: Result<(), NvmlError>, what: &str| {
        assert!(matches!(r, Err(NvmlError::NotSupported)), "{what}: {r:?}");
    };
    not_supported(bare.utilization_rates().map(drop), "utilization");
    not_supported(
        bare.temperature(TemperatureSensor::Gpu).map(drop),
        "temperature",
    );
    not_supported(bare.power_usage().map(drop), "power");
    not_supported(bare.fan_speed(0).map(drop), "fan");
    not_supported(bare.clock_info(Clock::Graphics).map(drop), "clock");
    not_supported(
        bare.pcie_throughput(PcieUtilCounter::Send).map(drop),
        "pcie",
    );
    not_supported(bare.encoder_utilization().map(drop), "encoder");
    not_supported(bare.performance_state().map(drop), "pstate");
    not_supported(bare.current_throttle_reasons().map(drop), "throttle");
    not_supported(
        bare.process_utilization_stats(None).map(drop),
        "process utilization",
    );
    let processes = bare.running_compute_processes().unwrap();
    assert_eq!(processes.len(), 1);
    assert_eq!(processes[0].used_gpu_memory, UsedGpuMemory::Unavailable);

    let full = nvml.device_by_index(1).unwrap();
    assert_eq!(full.utilization_rates().unwrap().gpu, 33);
    assert_eq!(full.temperature(TemperatureSensor::Gpu).unwrap(), 51);
}

#[test]
fn lost_gpu_reports_gpu_lost_after_the_set_time() {
    let _guard = serialized();
    let scenario = ScenarioFile::new(
        "[[gpu]]\nutilization_gpu = 10\n[[gpu]]\nutilization_gpu = 20\nlost_after_s = 1\n",
    );
    let (nvml, clock) = LibClock::init(&scenario);
    let is_lost = |e: NvmlError| matches!(e, NvmlError::GpuLost);
    let (before_loss, span) = clock.call(|| {
        nvml.device_by_index(1)
            .and_then(|gpu| Ok((gpu.utilization_rates()?.gpu, gpu)))
            .map_err(is_lost)
    });
    let utilization = before_loss.as_ref().map(|(u, _)| *u).map_err(|lost| *lost);
    assert_seen_in(
        utilization,
        span,
        |t| if t < 1.0 { Ok(20) } else { Err(true) },
    );
    clock.sleep_past(1.0);
    if let Ok((_, lost)) = &before_loss {
        assert!(matches!(lost.utilization_rates(), Err(NvmlError::GpuLost)));
        assert!(matches!(lost.name(), Err(NvmlError::GpuLost)));
    }
    assert!(matches!(nvml.device_by_index(1), Err(NvmlError::GpuLost)));
    assert_eq!(
        nvml.device_count().unwrap(),
        2,
        "a lost GPU is still counted"
    );
    let healthy = nvml.device_by_index(0).unwrap();
    assert_eq!(healthy.utilization_rates().unwrap().gpu, 10);
}

/// GPU 1 hangs from t = 2 s on, each call for an hour: a call that returns at all did not hang,
/// and one that started after 2 s is still blocked whatever the test does meanwhile.
#[test]
fn hung_gpu_blocks_its_calls_but_not_the_others() {
    let _guard = serialized();
    let scenario = ScenarioFile::new(
        "[[gpu]]\nutilization_gpu = 10\n\
         [[gpu]]\nutilization_gpu = 20\nhang = { after_s = 2, block_s = 3600 }\n\
         [[gpu]]\nutilization_gpu = 30\nhang = { after_s = 0, block_s = 0.5 }\n",
    );
    let (nvml, clock) = LibClock::init(&scenario);
    // The blocked thread outlives the test: it needs the library handle for good.
    let nvml: &'static Nvml = Box::leak(Box::new(nvml));
    // Getting a handle takes no time on the GPU: it never blocks.
    let utilization = move |index: u32| {
        let gpu = nvml.device_by_index(index).unwrap();
        gpu.utilization_rates().map(|u| u.gpu)
    };

    let early = returns("a call before after_s", move || utilization(1));
    assert_eq!(early.unwrap(), 20, "no hang before after_s");

    clock.sleep_past(2.0);
    let (tid_tx, tid_rx) = mpsc::channel();
    let (blocked_tx, blocked) = mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        let _ = tid_tx.send(unsafe { libc::syscall(libc::SYS_gettid) });
        let _ = blocked_tx.send(utilization(1));
    });
    let tid = tid_rx.recv().unwrap();
    let sleeping = || {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).is_ok_and(|s| {
            let call: Option<i64> = s.split_whitespace().next().and_then(|n| n.parse().ok());
            call == Some(libc::SYS_clock_nanosleep) || call == Some(libc::SYS_nanosleep)
        })
    };
    wait_until("the call on GPU 1 to block in the library", sleeping);
    let other = returns("GPU 0 while GPU 1 is stuck", move || utilization(0));
    assert_eq!(other.unwrap(), 10);
    assert!(
        blocked.try_recv().is_err(),
        "a call blocked for an hour came back"
    );

    let slow = nvml.device_by_index(2).unwrap();
    let started = Instant::now();
    assert_eq!(slow.utilization_rates().unwrap().gpu, 30);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "the call blocked only {took:?}"
    );
}

/// The GPUs' uuids in index order; `None` if a call failed (it straddled a change).
fn uuids(nvml: &Nvml) -> Option<Vec<String>> {
    (0..nvml.device_count().ok()?)
        .map(|i| nvml.device_by_index(i).ok()?.uuid().ok())
        .collect()
}

#[test]
fn gpu_count_changes_over_time() {
    let _guard = serialized();
    let scenario = ScenarioFile::new(
        r#"
[[gpu]]
uuid = "GPU-a"
[[gpu]]
uuid = "GPU-b"
present_until_s = 2
[[gpu]]
uuid = "GPU-c"
present_from_s = 1
"#,
    );
    let (nvml, clock) = LibClock::init(&scenario);
    let present = |t: f64| {
        let mut ids = vec!["GPU-a".to_string()];
        if t < 2.0 {
            ids.push("GPU-b".into());
        }
        if t >= 1.0 {
            ids.push("GPU-c".into());
        }
        Some(ids)
    };
    // A read that straddles a change may fail; one that does not must not.
    let check = |(got, span): (Option<Vec<String>>, Span)| {
        let straddles = present(span.lo) != present(span.hi);
        if got.is_some() || !straddles {
            assert_seen_in(got, span, present);
        }
    };
    let (leaving, span) = clock.call(|| nvml.device_by_index(1).ok());
    check(clock.call(|| uuids(&nvml)));
    clock.sleep_past(1.0);
    check(clock.call(|| uuids(&nvml)));
    clock.sleep_past(2.0);
    assert_eq!(uuids(&nvml).unwrap(), ["GPU-a", "GPU-c"]);
    if span.hi < 2.0 {
        let leaving = leaving.expect("GPU 1 is GPU-b before t = 2");
        assert!(matches!(leaving.name(), Err(NvmlError::GpuLost)));
    }
    assert_eq!(nvml.device_by_index(1).unwrap().index().unwrap(), 1);
}

/// The overhead benchmark's largest machine: every one of the 1,000 processes is listed, with
/// its utilization sample, on the GPU it was dealt to.
#[test]
fn sixteen_gpus_list_a_thousand_processes() {
    let _guard = serialized();
    let pids: Vec<u32> = (0..1000).map(|n| 100_000 + n).collect();
    let scenario = ScenarioFile::new(&fill_pids(&many_gpus_scenario(16, 1000), &pids));
    let nvml = init(&scenario);
    assert_eq!(nvml.device_count().unwrap(), 16);
    let mut listed = Vec::new();
    for index in 0..16 {
        let device = nvml.device_by_index(index).unwrap();
        let processes = device.running_compute_processes().unwrap();
        assert_eq!(
            processes.len(),
            if index < 8 { 63 } else { 62 },
            "GPU {index}"
        );
        assert!(processes.iter().all(|p| (p.pid - 100_000) % 16 == index));
        let samples = device.process_utilization_stats(0).unwrap();
        assert_eq!(samples.len(), processes.len(), "GPU {index}");
        listed.extend(processes.iter().map(|p| p.pid));
    }
    listed.sort_unstable();
    assert_eq!(listed, pids);
}

/// Past 1,024 processes: a 64-GPU machine with 4,096 processes, and one GPU with 2,048 of
/// them in a single list, each listed once with its utilization sample.
#[test]
fn lists_past_a_thousand_and_twenty_four_processes() {
    let _guard = serialized();
    for (gpus, count) in [(64u32, 4096u32), (1, 2048)] {
        let pids: Vec<u32> = (0..count).map(|n| 100_000 + n).collect();
        let text = fill_pids(&many_gpus_scenario(gpus as usize, count as usize), &pids);
        let scenario = ScenarioFile::new(&text);
        let nvml = init(&scenario);
        assert_eq!(nvml.device_count().unwrap(), gpus);
        let mut listed = Vec::new();
        for index in 0..gpus {
            let device = nvml.device_by_index(index).unwrap();
            let processes = device.running_compute_processes().unwrap();
            assert_eq!(
                processes.len() as u32,
                count / gpus,
                "GPU {index} of {gpus}"
            );
            let samples = device.process_utilization_stats(0).unwrap();
            assert_eq!(samples.len(), processes.len(), "GPU {index} of {gpus}");
            listed.extend(processes.iter().map(|p| p.pid));
        }
        listed.sort_unstable();
        assert_eq!(listed, pids, "{gpus} GPUs");
    }
}

#[test]
fn process_list_changes_between_calls() {
    let _guard = serialized();
    let sleepers = Sleepers::spawn(4);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("flapping_processes.toml", &pids);
    let nvml = init(&scenario);
    let gpu = nvml.device_by_index(0).unwrap();
    // Each wrapper call is a count call and a list call; the flapping pid shows for 3 list
    // calls out of 6.
    let rounds: Vec<Vec<u32>> = (0..6)
        .map(|_| {
            let mut listed: Vec<u32> = gpu
                .running_compute_processes()
                .unwrap()
                .iter()
                .map(|p| p.pid)
                .collect();
            listed.sort_unstable();
            listed
        })
        .collect();
    let mut all = vec![pids[0], pids[1], pids[2]];
    all.sort_unstable();
    let mut without = vec![pids[0], pids[2]];
    without.sort_unstable();
    assert_eq!(
        rounds,
        [&all, &without, &without, &all, &without, &without].map(Clone::clone)
    );

    // A raw count then list: the count says 3 and the list that follows returns 2.
    let scenario_raw = ScenarioFile::from_fixture("flapping_processes.toml", &pids);
    drop(nvml);
    let nvml = init(&scenario_raw);
    let gpu = nvml.device_by_index(0).unwrap();
    let counts: Vec<u32> = (0..6)
        .map(|_| gpu.running_compute_processes_count().unwrap())
        .collect();
    assert_eq!(counts, [3, 3, 3, 2, 2, 2]);
}

#[test]
fn processes_come_and_go_with_time() {
    let _guard = serialized();
    let sleepers = Sleepers::spawn(2);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::new(&format!(
        "[[gpu]]\n[[gpu.process]]\npid = {}\npresent_until_s = 1\n\
         [[gpu.process]]\npid = {}\ntype = \"graphics\"\npresent_from_s = 1\n",
        pids[0], pids[1]
    ));
    let (nvml, clock) = LibClock::init(&scenario);
    let gpu = nvml.device_by_index(0).unwrap();
    let pids_of = |list: Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>| {
        list.iter().map(|p| p.pid).collect::<Vec<u32>>()
    };
    let (compute, span) = clock.call(|| pids_of(gpu.running_compute_processes().unwrap()));
    assert_seen_in(
        compute,
        span,
        |t| if t < 1.0 { vec![pids[0]] } else { vec![] },
    );
    let (graphics, span) = clock.call(|| pids_of(gpu.running_graphics_processes().unwrap()));
    assert_seen_in(
        graphics,
        span,
        |t| if t < 1.0 { vec![] } else { vec![pids[1]] },
    );
    clock.sleep_past(1.0);
    assert!(gpu.running_compute_processes().unwrap().is_empty());
    assert_eq!(
        pids_of(gpu.running_graphics_processes().unwrap()),
        [pids[1]]
    );
}

#[test]
fn process_utilization_samples_are_newer_than_last_seen() {
    let _guard = serialized();
    let sleepers = Sleepers::spawn(1);
    let pid = sleepers.pids()[0];
    let scenario = ScenarioFile::new(&format!(
        "[[gpu]]\nsample_interval_s = 0.5\n[[gpu.process]]\npid = {pid}\nused_memory_mib = 100\n\
         sm_percent = {{ fn = \"ramp\", from = 10, to = 70, duration_s = 1 }}\nmem_percent = 4\n"
    ));
    let (nvml, clock) = LibClock::init(&scenario);
    let gpu = nvml.device_by_index(0).unwrap();
    // The sample a call returns is the one of the last 0.5 s tick, with the ramp's value then.
    let tick_of = |t: f64| (t / 0.5).floor() as u32;
    let sm_at_tick = |tick: u32| (10.0 + 60.0 * (f64::from(tick) * 0.5).min(1.0)).round() as u32;
    let (first, span) = clock.call(|| gpu.process_utilization_stats(None).unwrap());
    assert_eq!(first.len(), 1);
    assert_eq!((first[0].pid, first[0].mem_util), (pid, 4));
    assert_seen_in(first[0].sm_util, span, |t| sm_at_tick(tick_of(t)));
    let tick = (tick_of(span.lo)..=tick_of(span.hi))
        .find(|k| sm_at_tick(*k) == first[0].sm_util)
        .expect("the tick of the first sample");
    let seen = first[0].timestamp;

    let (again, span) = clock.call(|| gpu.process_utilization_stats(seen));
    if tick_of(span.hi) == tick {
        assert!(matches!(again, Err(NvmlError::NotFound)), "{again:?}");
    }
    clock.sleep_past(f64::from(tick + 1) * 0.5);
    let second = gpu.process_utilization_stats(seen).unwrap();
    assert_eq!(second.len(), 1);
    assert!(second[0].timestamp > seen);
    let ticks_later = (second[0].timestamp - seen) as f64 / 0.5e6;
    assert!(
        (ticks_later - ticks_later.round()).abs() < 1e-3,
        "samples are taken on the 0.5 s ticks: {ticks_later}"
    );
    assert_eq!(
        second[0].sm_util,
        sm_at_tick(tick + ticks_later.round() as u32),
        "the sample holds the ramp's value at its own tick"
    );
}

#[test]
fn bad_scenario_init_error_names_the_line() {
    let _guard = serialized();
    let scenario = ScenarioFile::new(&common::fake_nvml::fixture_text("bad_scenario.toml"));
    let error = init_error(scenario.path());
    assert!(matches!(error, NvmlError::Unknown), "{error:?}");
    let sentence = error_string(999);
    assert!(
        sentence.starts_with("fake NVML: scenario ")
            && sentence.contains(&scenario.path().display().to_string())
            && sentence.contains("line 7:"),
        "{sentence}"
    );

    let missing = Path::new("/nonexistent/scenario.toml");
    assert!(init_with(Some(missing)).is_err());
    assert!(
        error_string(999).contains("cannot read"),
        "{}",
        error_string(999)
    );
}

#[test]
fn live_edit_of_scenario_is_picked_up() {
    let _guard = serialized();
    let scenario = ScenarioFile::new("[[gpu]]\nutilization_gpu = 10\n");
    let nvml = init(&scenario);
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu.utilization_rates().unwrap().gpu, 10);

    let wait_for = |want: u32| {
        wait_until(&format!("utilization {want} from the edited file"), || {
            gpu.utilization_rates().unwrap().gpu == want
        });
    };
    scenario.rewrite("[[gpu]]\nutilization_gpu = 90\n");
    wait_for(90);

    scenario.rewrite("[[gpu]]\nutilization_gpu = = 3\n");
    for _ in 0..10 {
        assert_eq!(
            gpu.utilization_rates().unwrap().gpu,
            90,
            "keeps the last good scenario"
        );
        std::thread::sleep(Duration::from_millis(40));
    }
    scenario.rewrite("[[gpu]]\nutilization_gpu = 20\n[[gpu]]\n");
    wait_for(20);
    assert_eq!(nvml.device_count().unwrap(), 2, "an edit can add GPUs");
}

#[test]
fn init_failure_gives_the_scenario_code() {
    let _guard = serialized();
    let scenario = ScenarioFile::new(&common::fake_nvml::fixture_text("init_failure.toml"));
    let error = init_error(scenario.path());
    assert!(matches!(error, NvmlError::DriverNotLoaded), "{error:?}");
    assert_eq!(error_string(9), "Driver Not Loaded");

    let custom = ScenarioFile::new(
        "[init]\nfail = \"NO_PERMISSION\"\nmessage = \"no access to /dev/nvidiactl\"\n",
    );
    let error = init_error(custom.path());
    assert!(matches!(error, NvmlError::NoPermission), "{error:?}");
    assert_eq!(error_string(4), "no access to /dev/nvidiactl");
}

#[test]
fn no_scenario_means_one_plain_gpu() {
    let _guard = serialized();
    let nvml = init_with(None).unwrap();
    assert_eq!(nvml.device_count().unwrap(), 1);
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu.name().unwrap(), "Fake NVIDIA GPU (no scenario file)");
    assert!(gpu.running_compute_processes().unwrap().is_empty());
}

/// Looks up `name` in the loaded fake library (the unversioned symbols nvtop calls are not in
/// nvml-wrapper-sys's table).
///
/// # Safety
/// `F` must be the function pointer type of the symbol's C declaration.
unsafe fn raw_symbol<F: Copy>(name: &str) -> F {
    assert_eq!(
        std::mem::size_of::<F>(),
        std::mem::size_of::<*mut libc::c_void>()
    );
    let path = std::ffi::CString::new(fake_nvml_library().to_str().unwrap()).unwrap();
    let symbol = std::ffi::CString::new(name).unwrap();
    // SAFETY: dlopen/dlsym with valid C strings; the handle is kept (the library stays loaded).
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!handle.is_null(), "dlopen the fake library");
        let address = libc::dlsym(handle, symbol.as_ptr());
        assert!(!address.is_null(), "{name} is exported");
        std::mem::transmute_copy(&address)
    }
}

type ProcessListV1 = unsafe extern "C" fn(
    sys::nvmlDevice_t,
    *mut u32,
    *mut sys::nvmlProcessInfo_v1_t,
) -> sys::nvmlReturn_t;
type PciInfoCall =
    unsafe extern "C" fn(sys::nvmlDevice_t, *mut sys::nvmlPciInfo_t) -> sys::nvmlReturn_t;

/// Calls through the raw symbols, with the structs each symbol's own ABI takes.
#[test]
fn each_symbol_keeps_its_own_abi() {
    let _guard = serialized();
    let sleepers = Sleepers::spawn(2);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &pids);
    let _nvml = init(&scenario);
    // SAFETY: every pointer passed points to a live local of the type the header names.
    unsafe {
        let lib = sys::NvmlLib::new(fake_nvml_library()).unwrap();
        let mut device: sys::nvmlDevice_t = std::ptr::null_mut();
        assert_eq!(
            (lib.nvmlDeviceGetHandleByIndex_v2.as_ref().unwrap())(0, &raw mut device),
            0
        );
        assert_eq!(
            (lib.nvmlDeviceGetCount_v2.as_ref().unwrap())(std::ptr::null_mut()),
            sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
        );

        // v1: 16-byte records, with the size protocol.
        let v1: ProcessListV1 = raw_symbol("nvmlDeviceGetComputeRunningProcesses");
        let mut count = 0;
        assert_eq!(
            v1(device, &raw mut count, std::ptr::null_mut()),
            sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert_eq!(count, 2);
        let mut records: [sys::nvmlProcessInfo_v1_t; 3] = std::mem::zeroed();
        let mut count = 3;
        assert_eq!(v1(device, &raw mut count, records.as_mut_ptr()), 0);
        assert_eq!(count, 2);
        assert_eq!(
            (records[0].pid, records[0].usedGpuMemory),
            (pids[0], 30720 * MIB)
        );
        assert_eq!(
            (records[1].pid, records[1].usedGpuMemory),
            (pids[1], 10240 * MIB)
        );
        assert_eq!(records[2].pid, 0, "nothing written past the count");

        // v3: 24-byte records.
        let v2 = lib
            .nvmlDeviceGetComputeRunningProcesses_v3
            .as_ref()
            .unwrap();
        let mut records: [sys::nvmlProcessInfo_t; 2] = std::mem::zeroed();
        let mut count = 2;
        assert_eq!(v2(device, &raw mut count, records.as_mut_ptr()), 0);
        assert_eq!(records[1].pid, pids[1]);
        assert_eq!(records[1].computeInstanceId, 0xFFFF_FFFF);

        // An empty list is SUCCESS with count 0, even with no buffer.
        let graphics: ProcessListV1 = raw_symbol("nvmlDeviceGetGraphicsRunningProcesses");
        let mut count = 0;
        assert_eq!(graphics(device, &raw mut count, std::ptr::null_mut()), 0);
        assert_eq!(count, 0);

        // The unversioned PCI call writes only the 52-byte legacy struct.
        let mut pci: sys::nvmlPciInfo_t = std::mem::zeroed();
        pci.busId = [0x55; 32];
        let pci_v1: PciInfoCall = raw_symbol("nvmlDeviceGetPciInfo");
        assert_eq!(pci_v1(device, &raw mut pci), 0);
        let legacy = CStr::from_ptr(pci.busIdLegacy.as_ptr()).to_str().unwrap();
        assert_eq!(legacy, "0000:18:00.0");
        assert_eq!(
            pci.busId[16..],
            [0x55; 16],
            "bytes past the legacy struct untouched"
        );

        // Memory v2 checks the caller's struct version.
        let mem_v2 = lib.nvmlDeviceGetMemoryInfo_v2.as_ref().unwrap();
        let mut memory: sys::nvmlMemory_v2_t = std::mem::zeroed();
        assert_eq!(
            mem_v2(device, &raw mut memory),
            sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        );
        memory.version = 0x28 | (2 << 24);
        assert_eq!(mem_v2(device, &raw mut memory), 0);
        assert_eq!(memory.used, 40960 * MIB);

        // v1 memory counts the reserved memory as used.
        let mut memory_v1: sys::nvmlMemory_t = std::mem::zeroed();
        assert_eq!(
            (lib.nvmlDeviceGetMemoryInfo.as_ref().unwrap())(device, &raw mut memory_v1),
            0
        );
        assert_eq!(memory_v1.total, 81559 * MIB);
        assert_eq!(memory_v1.used, (40960 + 512) * MIB);

        // nvitop decides its process struct layout by which symbols exist.
        assert!(lib.nvmlDeviceGetConfComputeMemSizeInfo.is_err());
        for needed in [
            lib.nvmlInitWithFlags.is_ok(),
            lib.nvmlDeviceGetCount_v2.is_ok(),
            lib.nvmlDeviceGetHandleByIndex_v2.is_ok(),
            lib.nvmlDeviceGetProcessUtilization.is_ok(),
        ] {
            assert!(needed);
        }
    }
}
