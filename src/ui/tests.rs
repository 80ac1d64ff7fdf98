//! Render tests: hand-built snapshots drawn on ratatui's TestBackend at 80x24 and 200x50, with
//! insta snapshots of the text and assertions on what must (not) be on screen.

use std::sync::Arc;

use ratatui::{backend::TestBackend, buffer::Buffer, style::Color, Terminal};

use crate::app::{App, Mode};
use crate::model::{
    DeviceAllocatorStats, DriverInfo, GpuProcess, GpuSample, GpuState, HostSnapshot, LoadAverage,
    MemoryInfo, ProcessKind, Severity, Snapshot, Subject, SwapInfo, TorchInfo, VmSettings, Warning,
};

#[path = "cut_tests.rs"]
mod cut_tests;
#[path = "detail_tests.rs"]
mod detail_tests;
#[path = "history_tests.rs"]
mod history_tests;
#[path = "layout_tests.rs"]
mod layout_tests;
#[path = "mig_tests.rs"]
mod mig_tests;
#[path = "readme_tests.rs"]
mod readme_tests;
#[path = "scroll_tests.rs"]
mod scroll_tests;
#[path = "setup_tests.rs"]
mod setup_tests;
#[path = "torch_tests.rs"]
mod torch_tests;
#[path = "warnings_tests.rs"]
mod warnings_tests;

const GIB: u64 = 1024 * 1024 * 1024;
const TIME: &str = "2025-06-01T12:34:56Z";
const HISTORY_SAMPLES: u32 = 320;

// ---- fixtures -------------------------------------------------------------------------------

fn driver() -> DriverInfo {
    DriverInfo {
        nvml_loaded: true,
        error: None,
        library: "libnvidia-ml.so.1".into(),
        driver_version: Some("550.54.15".into()),
        cuda_version: Some("12.4".into()),
        nvml_version: Some("12.550.54.15".into()),
        gpu_count: Some(0),
        ..Default::default()
    }
}

fn host() -> HostSnapshot {
    HostSnapshot {
        hostname: Some("trainbox-07".into()),
        memory: MemoryInfo {
            total_bytes: Some(2048 * GIB),
            available_bytes: Some(1536 * GIB),
            used_bytes: Some(512 * GIB),
        },
        swap: SwapInfo {
            total_bytes: Some(8 * GIB),
            used_bytes: Some(0),
        },
        vm: VmSettings {
            swappiness: Some(60),
            overcommit_memory: Some(0),
        },
        cpu_percent: Some(37.5),
        cpu_count: Some(224),
        load: Some(LoadAverage {
            one: 81.25,
            five: 79.5,
            fifteen: 70.0,
        }),
        uptime_seconds: Some(9.0 * 86_400.0 + 4.0 * 3600.0),
        ..Default::default()
    }
}

/// A busy H100 at sample `t`; GPU 3 lags behind the others, as in a skewed job.
fn gpu(index: u32, t: u32) -> GpuSample {
    let wave = (t + index * 10) % 60;
    let utilization = if index == 3 { 20 + wave / 4 } else { 40 + wave };
    GpuSample {
        index,
        name: Some("NVIDIA H100 80GB HBM3".to_string().into()),
        uuid: Some(format!("GPU-{index:08x}-5a7b-4c3d-9e8f-0123456789ab").into()),
        bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index * 0x10).into()),
        state: GpuState::Ok,
        stale_seconds: None,
        error: None,
        utilization_percent: Some(utilization),
        memory_utilization_percent: Some(utilization / 2),
        memory_used_bytes: Some((40 + u64::from(index) * 4) * GIB + u64::from(t) * 1024 * 1024),
        memory_total_bytes: Some(80 * GIB),
        temperature_c: Some(55 + index * 3),
        power_w: Some(300.0 + f64::from(utilization) * 4.0),
        power_limit_w: Some(700.0),
        fan_percent: None,
        sm_clock_mhz: Some(1980),
        memory_clock_mhz: Some(2619),
        pcie_rx_kib_s: Some(1_200_000),
        pcie_tx_kib_s: Some(350_000),
        encoder_percent: Some(0),
        decoder_percent: Some(0),
        performance_state: Some(0),
        throttle_mask: Some(0),
        throttle_reasons: Some(
            if index == 5 {
                vec!["sw_power_cap".to_string()]
            } else {
                Vec::new()
            }
            .into(),
        ),
        ecc_enabled: Some(true),
        ecc_volatile_corrected: Some(0),
        ecc_volatile_uncorrected: Some(0),
        ..Default::default()
    }
}

fn process(k: u32, gpu: u32) -> GpuProcess {
    let users = ["alice", "bob", "carol", "dave"];
    GpuProcess {
        gpu_memory_bytes: Some(9 * GIB),
        sm_percent: Some(85 - k % 20),
        visible: true,
        user: Some(users[(k % 4) as usize].to_string().into()),
        uid: Some(1000 + k % 4),
        command: Some(
            format!("/usr/bin/python3 train.py --config configs/llama.yaml --shard {k}").into(),
        ),
        ppid: Some(4000),
        start_ticks: Some(100_000 + u64::from(k)),
        cpu_percent: Some(99.5 - f64::from(k)),
        rss_bytes: Some(14 * GIB + u64::from(k) * GIB / 3),
        running_seconds: Some(3723.0 + f64::from(k) * 7200.0),
        nice: Some(if k == 2 { 5 } else { 0 }),
        state: Some(if k == 1 { 'T' } else { 'R' }),
        ..GpuProcess::new(20_000 + k, gpu, ProcessKind::Compute)
    }
}

fn snapshot_with(gpus: Vec<GpuSample>, processes: Vec<GpuProcess>) -> Snapshot {
    let mut driver = driver();
    driver.gpu_count = Some(gpus.len() as u32);
    Snapshot {
        schema: 1,
        time: TIME.to_string(),
        unix_seconds: 1_748_781_296.0,
        driver,
        host: host(),
        gpus,
        processes,
        ..Default::default()
    }
}

fn busy_snapshot(gpu_count: u32, processes_per_gpu: u32, t: u32) -> Snapshot {
    let gpus = (0..gpu_count).map(|i| gpu(i, t)).collect();
    let processes = (0..gpu_count * processes_per_gpu)
        .map(|k| process(k, k % gpu_count))
        .collect();
    snapshot_with(gpus, processes)
}

/// An app that has seen `HISTORY_SAMPLES` snapshots made by `make(t)`.
fn app_after(make: impl Fn(u32) -> Snapshot) -> App {
    let mut app = App::new(1.0, true, false).with_utc(true);
    for t in 0..HISTORY_SAMPLES {
        app.on_snapshot(Arc::new(make(t)));
    }
    app
}

fn eight_gpu_app() -> App {
    app_after(|t| busy_snapshot(8, 8, t))
}

fn torch_info(rank: u32, t: u32) -> TorchInfo {
    let grow = u64::from(t) * 16 * 1024 * 1024;
    TorchInfo {
        python: Some("3.12.3".to_string()),
        torch: Some("2.11.0".to_string()),
        rank: Some(rank),
        local_rank: Some(rank),
        world_size: Some(8),
        alloc_conf: None,
        step: Some(1200 + u64::from(t)),
        step_time_seconds: Some(0.512),
        devices: vec![DeviceAllocatorStats {
            index: 0,
            allocated_bytes: Some(30 * GIB + grow),
            reserved_bytes: Some(36 * GIB + grow),
            active_bytes: Some(31 * GIB),
            inactive_split_bytes: Some(GIB + GIB / 4),
            requested_bytes: Some(30 * GIB),
            peak_allocated_bytes: Some(38 * GIB),
            segments: Some(412),
            alloc_retries: Some(3),
            ooms: Some(0),
            non_pytorch_bytes: Some(GIB + GIB / 2),
            gpu: Some(rank),
            device_total_bytes: Some(80 * GIB),
            headroom_bytes: Some(30 * GIB),
            ..Default::default()
        }],
        age_seconds: Some(0.4),
        ..Default::default()
    }
}

fn torch_app() -> App {
    app_after(|t| {
        let mut snapshot = busy_snapshot(8, 1, t);
        for (rank, p) in snapshot.processes.iter_mut().enumerate() {
            p.torch = Some(std::sync::Arc::new(torch_info(rank as u32, t)));
        }
        snapshot
    })
}

fn app_with(snapshot: Snapshot) -> App {
    let mut app = App::new(1.0, true, false).with_utc(true);
    app.on_snapshot(Arc::new(snapshot));
    app
}

fn na_gpu() -> GpuSample {
    GpuSample {
        index: 0,
        ..Default::default()
    }
}

fn warning(id: &str, severity: Severity, subject: Subject, message: &str) -> Warning {
    Warning {
        id: id.to_string(),
        severity,
        subject,
        message: message.to_string(),
        evidence: vec![("memory used".to_string(), "78.2GiB of 80.0GiB".to_string())],
        remedy: "Lower the batch size or enable activation checkpointing.".to_string(),
        since: TIME.to_string(),
    }
}

// ---- helpers --------------------------------------------------------------------------------

fn render(app: &App, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    let plan = super::plan(app, ratatui::layout::Rect::new(0, 0, width, height));
    terminal
        .draw(|frame| super::draw(frame, frame.area(), app, &plan))
        .expect("draw");
    terminal.backend().buffer().clone()
}

fn text(buffer: &Buffer) -> String {
    let area = buffer.area;
    (0..area.height)
        .map(|y| {
            (0..area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn screen(app: &App, width: u16, height: u16) -> String {
    text(&render(app, width, height))
}

fn line_with<'a>(screen: &'a str, needle: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line contains {needle:?} in\n{screen}"))
}

fn row_of(screen: &str, needle: &str) -> usize {
    screen
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line contains {needle:?} in\n{screen}"))
}

// ---- tests ----------------------------------------------------------------------------------

#[test]
fn one_gpu() {
    let app = app_after(|t| busy_snapshot(1, 3, t));
    let small = screen(&app, 80, 24);
    let large = screen(&app, 200, 50);
    insta::assert_snapshot!("one_gpu_80x24", small);
    insta::assert_snapshot!("one_gpu_200x50", large);
    for s in [&small, &large] {
        assert!(s.contains("H100 80GB HBM3"));
        assert!(s.contains("driver 550.54.15"));
        assert!(s.contains("CUDA 12.4"));
        assert!(s.contains("1 GPU "));
        assert!(s.contains("12:34:56 UTC"));
        assert!(s.contains("HIST"), "history shown for one GPU:\n{s}");
        assert!(s.contains("swappiness 60"));
        assert!(s.contains("overcommit_memory 0"));
        assert!(s.contains("load 81.25 79.50 70.00"));
    }
    assert!(large.contains("GPU-00000000-5a7b-4c3d-9e8f-0123456789ab"));
    assert!(large.contains("bus 00000000:18:00.0"));
    assert!(large.contains("ECC corrected 0 uncorrected 0"));
}

#[test]
fn eight_gpus_with_64_processes() {
    let app = eight_gpu_app();
    let small = screen(&app, 80, 24);
    let large = screen(&app, 200, 50);
    insta::assert_snapshot!("eight_gpus_80x24", small);
    insta::assert_snapshot!("eight_gpus_200x50", large);
    for s in [&small, &large] {
        assert!(s.contains("8 GPUs"));
        assert!(s.contains("COMMAND (64 rows)"));
    }
    for index in 0..8 {
        let gpu_row = row_of(&small, "GPU NAME") + 1 + index;
        let line = small.lines().nth(gpu_row).unwrap_or_default();
        assert!(
            line.starts_with(&format!("  {index} H100 80GB HBM3")),
            "GPU {index} on its own line:\n{small}"
        );
        let wide = line_with(&large, &format!("  {index} NVIDIA H100 80GB HBM3"));
        assert!(wide.contains('█') && wide.ends_with("OK"), "{wide}");
    }
    // Eight GPU lines and the process table's first rows leave 80x24 no room for the balance
    // bars: they show from 34 rows.
    assert!(small.contains("balance, host hidden"), "{small}");
    let tall = screen(&app, 80, 34);
    let labels = tall.lines().nth(row_of(&tall, "BALANCE") + 4).unwrap();
    assert!(
        labels.starts_with(" 0   1   2   3   4   5   6   7   "),
        "balance labels for all 8 GPUs in 80 columns:\n{tall}"
    );
    assert!(small.lines().all(|l| l.chars().count() <= 80));
    assert!(
        large.contains("HIST"),
        "history in the wide layout:\n{large}"
    );
    assert!(large.contains("GPU-00000007-5a7b-4c3d-9e8f-0123456789ab"));
    assert!(large.contains("throttle sw_power_cap"));
}

#[test]
fn balance_bars_show_the_lagging_gpu() {
    let app = eight_gpu_app();
    // At 80x24 the eight GPU lines and the process table leave the bars no room.
    let buffer = render(&app, 80, 34);
    let s = text(&buffer);
    let bottom = (row_of(&s, "BALANCE") + 3) as u16;
    // Column 1 + 4*i is GPU i's memory bar, the next column its utilization bar.
    let eighths = |x: u16| -> usize {
        (bottom - 2..=bottom)
            .map(|y| {
                let symbol = buffer[(x, y)].symbol();
                " ▁▂▃▄▅▆▇█"
                    .chars()
                    .position(|c| symbol.starts_with(c))
                    .unwrap_or(0)
            })
            .sum()
    };
    let utilization: Vec<usize> = (0..8).map(|i| eighths(2 + 4 * i)).collect();
    let memory: Vec<usize> = (0..8).map(|i| eighths(1 + 4 * i)).collect();
    // At sample 319: GPU 3 at 32%, GPU 4 at 99%; memory grows 40 -> 68 GiB of 80.
    assert_eq!(utilization[3], 8, "{s}");
    assert_eq!(utilization[4], 24, "{s}");
    assert!(memory.windows(2).all(|w| w[0] <= w[1]), "{memory:?}");
    assert_eq!((memory[0], memory[7]), (12, 20), "{s}");
}

#[test]
fn a_long_driver_error_is_given_the_rows_it_wraps_to() {
    let error = "NVML from /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 failed to start: the \
        driver and the NVML library versions do not match (RM has detected an NVML/RM version \
        mismatch.)";
    let mut snapshot = snapshot_with(Vec::new(), Vec::new());
    snapshot.driver = DriverInfo {
        nvml_loaded: false,
        error: Some(error.to_string()),
        library: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1".into(),
        ..Default::default()
    };
    let app = app_with(snapshot);
    for width in [80, 100, 200] {
        let s = screen(&app, width, 24);
        let shown = s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            shown.contains(error),
            "the whole error at {width} columns:\n{s}"
        );
        assert!(s.contains("used 512.0GiB"), "host still drawn:\n{s}");
    }
}

#[test]
fn a_runaway_driver_error_takes_six_rows_at_most_and_reaches_the_screen_escaped() {
    // A library's error text is not torchtop's: it may be long and hold terminal escapes.
    let error = format!(
        "NVML failed: \x1b[2J\x1b]0;owned\x07 {}",
        "word ".repeat(400)
    );
    let mut snapshot = snapshot_with(Vec::new(), Vec::new());
    snapshot.driver = DriverInfo {
        nvml_loaded: false,
        error: Some(error),
        library: "libnvidia-ml.so.1".into(),
        ..Default::default()
    };
    let app = app_with(snapshot);
    let buffer = render(&app, 80, 24);
    let text = screen(&app, 80, 24);
    let rows: Vec<&str> = text.lines().collect();
    let message_rows = rows.iter().filter(|r| r.contains("word")).count();
    assert_eq!(message_rows, 6, "{text}");
    assert!(
        text.contains("PID"),
        "the process table keeps its place:\n{text}"
    );
    assert!(text.contains("used 512.0GiB"), "host still drawn:\n{text}");
    assert!(
        buffer
            .content
            .iter()
            .all(|c| !c.symbol().contains('\x1b') && !c.symbol().contains('\x07')),
        "a control character reached the screen:\n{text}"
    );
}

#[test]
fn no_driver() {
    let mut snapshot = snapshot_with(Vec::new(), Vec::new());
    snapshot.driver = DriverInfo {
        nvml_loaded: false,
        // As the loader words it (collect::nvml): one sentence that names the library once.
        error: Some(
            "NVML could not be loaded from libnvidia-ml.so.1: cannot open shared object file"
                .to_string(),
        ),
        library: "libnvidia-ml.so.1".into(),
        ..Default::default()
    };
    let app = app_with(snapshot);
    let small = screen(&app, 80, 24);
    let large = screen(&app, 200, 50);
    insta::assert_snapshot!("no_driver_80x24", small);
    insta::assert_snapshot!("no_driver_200x50", large);
    for s in [&small, &large] {
        assert!(s.contains("NVML could not be loaded from libnvidia-ml.so.1"));
        assert!(s.contains("no NVML"));
        assert!(s.contains("used 512.0GiB"), "host still drawn:\n{s}");
    }
    assert!(large.contains(
        "NVML could not be loaded from libnvidia-ml.so.1: cannot open shared object file"
    ));
    assert_eq!(
        large.matches("could not be loaded").count(),
        1,
        "said once:\n{large}"
    );
    assert_eq!(
        large.matches("libnvidia-ml.so.1").count(),
        1,
        "named once:\n{large}"
    );
}

#[test]
fn gpu_with_missing_fields_reads_na_never_zero() {
    let mut missing = process(0, 0);
    missing.gpu_memory_bytes = None;
    missing.sm_percent = None;
    missing.cpu_percent = None;
    missing.rss_bytes = None;
    missing.running_seconds = None;
    let app = app_with(snapshot_with(vec![na_gpu()], vec![missing]));
    let small = screen(&app, 80, 24);
    let large = screen(&app, 200, 50);
    insta::assert_snapshot!("na_fields_80x24", small);
    insta::assert_snapshot!("na_fields_200x50", large);
    // GPU-MEM SM% CPU% RSS at 80 columns; GMEM% MEM% TIME START too at 200.
    for (s, missing) in [(&small, 4), (&large, 8)] {
        let gpu_line = s.lines().nth(row_of(s, "GPU NAME") + 1).unwrap();
        assert!(!gpu_line.contains("N/A/N/A"), "{gpu_line}");
        for zero in ["0W", " 0%", "0C", "0.0G", "P0"] {
            assert!(!gpu_line.contains(zero), "{zero:?} in {gpu_line:?}");
        }
        let process_line = line_with(s, "20000");
        assert_eq!(
            process_line.matches("N/A").count(),
            missing,
            "{process_line}"
        );
    }
    let detail = line_with(&large, "SM N/A");
    assert!(detail.contains("PCIe rx N/A tx N/A  enc N/A dec N/A  throttle N/A"));
    assert!(!detail.contains("ECC"), "ECC only when it is on: {detail}");
}

#[test]
fn stale_and_lost_gpus_are_flagged() {
    let mut stale = gpu(0, 0);
    stale.state = GpuState::Stale;
    stale.stale_seconds = Some(4.0);
    let mut unresponsive = gpu(1, 0);
    unresponsive.state = GpuState::Stale;
    unresponsive.stale_seconds = Some(14.0);
    let mut lost = gpu(2, 0);
    lost.state = GpuState::Lost;
    lost.error = Some("GPU is lost".to_string());
    let app = app_with(snapshot_with(vec![stale, unresponsive, lost], Vec::new()));
    let small = screen(&app, 80, 24);
    let large = screen(&app, 200, 50);
    insta::assert_snapshot!("stale_lost_80x24", small);
    insta::assert_snapshot!("stale_lost_200x50", large);
    for s in [&small, &large] {
        assert!(line_with(s, "STALE 4s").trim_start().starts_with('0'));
        assert!(line_with(s, "UNRESPONSIVE").trim_start().starts_with('1'));
        assert!(line_with(s, "LOST").trim_start().starts_with('2'));
        assert!(s.contains("no processes on the GPUs"));
    }
    assert!(large.contains("UNRESPONSIVE 14s"));
    assert!(large.contains("error: GPU is lost"));
}

#[test]
fn zero_gpus() {
    let app = app_with(snapshot_with(Vec::new(), Vec::new()));
    let small = screen(&app, 80, 24);
    insta::assert_snapshot!("zero_gpus_80x24", small);
    assert!(small.contains("NVIDIA driver 550.54.15 found no GPUs"));
    assert!(small.contains("0 GPUs"));
    assert!(screen(&app, 200, 50).contains("NVIDIA driver 550.54.15 found no GPUs"));
}

#[test]
fn before_the_first_sample() {
    let app = App::new(1.0, true, false);
    let s = screen(&app, 80, 24);
    assert!(s.contains("waiting for the first sample..."), "{s}");
    assert!(s.contains("N/A"));
    // Not loaded yet is not "no NVML": the first sample has not said.
    assert!(s.contains("GPUs N/A") && !s.contains("no NVML"), "{s}");
}

#[test]
fn too_small_terminal_gets_a_message() {
    let app = eight_gpu_app();
    let s = screen(&app, 40, 10);
    insta::assert_snapshot!("too_small_40x10", s);
    assert!(s.contains("torchtop needs at least 60x16"));
    assert!(s.contains("(now 40x10)"));
    assert!(!s.contains("H100"));
    assert!(screen(&app, 59, 30).contains("(now 59x30)"));
    assert!(!screen(&app, 60, 16).contains("needs at least"));
}

#[test]
fn every_size_from_the_minimum_up_draws_without_panicking() {
    let app = torch_app();
    for (w, h) in [
        (60, 16),
        (61, 17),
        (79, 23),
        (100, 30),
        (139, 40),
        (140, 41),
        (250, 80),
    ] {
        let s = screen(&app, w, h);
        assert!(s.contains("torchtop"), "{w}x{h}:\n{s}");
        assert!(s.contains("PID"), "{w}x{h}:\n{s}");
        assert!(s.contains("COMMAND"), "{w}x{h}:\n{s}");
    }
    // GPU lines come before the balance bars, which show where rows are left.
    let smallest = screen(&eight_gpu_app(), 60, 16);
    assert!(!smallest.contains("more GPUs"), "{smallest}");
    let narrow = screen(&eight_gpu_app(), 60, 30);
    let labels = narrow.lines().nth(row_of(&narrow, "BALANCE") + 4).unwrap();
    assert!(labels.starts_with(" 0  1  2  3  4  5  6  7"), "{narrow}");
}

#[test]
fn no_color_theme_uses_modifiers_only() {
    let mut app = torch_app();
    app.colors = false;
    app.readonly = true;
    app.status = Some("sent SIGTERM to 20000".to_string());
    let mut snapshot = (*app.snapshot).clone();
    snapshot.warnings.push(warning(
        "oom-risk",
        Severity::Critical,
        Subject::Gpu { index: 2 },
        "GPU memory 97% used",
    ));
    app.on_snapshot(Arc::new(snapshot));
    for (w, h) in [(80, 24), (200, 50)] {
        let buffer = render(&app, w, h);
        for cell in buffer.content() {
            assert_eq!(cell.fg, Color::Reset, "fg colour at {w}x{h}");
            assert_eq!(cell.bg, Color::Reset, "bg colour at {w}x{h}");
        }
        let selected = row_of(&text(&buffer), "20000") as u16;
        let modifier = buffer[(0, selected)].modifier;
        assert!(modifier.contains(ratatui::style::Modifier::REVERSED));
    }
    insta::assert_snapshot!("no_color_80x24", screen(&app, 80, 24));
    let colored = render(&eight_gpu_app(), 80, 24);
    assert!(colored.content().iter().any(|c| c.fg != Color::Reset));
}

#[test]
fn torch_stats_of_the_selected_process() {
    let app = torch_app();
    let small = screen(&app, 80, 24);
    let large = screen(&app, 200, 50);
    insta::assert_snapshot!("torch_80x24", small);
    insta::assert_snapshot!("torch_200x50", large);
    for s in [&small, &large] {
        assert!(s.contains("PYTORCH pid 20000  rank 0/8  step 1519  0.512s/step"));
        assert!(s.contains("cuda:0 = GPU 0  total 80.0GiB  headroom 30.0GiB (38%)"));
    }
    {
        let s = &large;
        assert!(s.contains("inactive-split 1.2GiB"));
        assert!(s.contains("non-PyTorch 1.5GiB"));
        assert!(s.contains("retries 3"));
        let rank0 = line_with(s, "20000 alice");
        assert!(rank0.contains(" 0/8 python3 train.py"), "{rank0}");
        assert!(line_with(s, "PID").contains(" RANK COMMAND"), "{s}");
        let sparkline = |name: &str, bar: char| {
            s.lines()
                .any(|l| l.contains(&format!(" {name} ")) && l.contains(bar))
        };
        // Auto-scaled: the growth rises from the lowest bar to the highest.
        assert!(
            sparkline("allocated", '▁') && sparkline("allocated", '█'),
            "{s}"
        );
        assert!(sparkline("reserved", '█'), "{s}");
    }
}

#[test]
fn selection_scrolls_into_view_and_is_highlighted() {
    let mut app = eight_gpu_app();
    let size = ratatui::layout::Rect::new(0, 0, 80, 24);
    app.set_layout(super::plan(&app, size));
    // Eight GPU lines, the note on what they left no room for, the table header: 11 rows left.
    assert_eq!(app.view.page_rows, 11);
    for _ in 0..50 {
        app.view.select_next(64);
    }
    let pid = app.rows()[50].pid.to_string();
    let first = app.rows()[0].pid.to_string();
    let buffer = render(&app, 80, 24);
    let s = text(&buffer);
    let row = row_of(&s, &pid) as u16;
    assert_eq!(buffer[(3, row)].bg, Color::Blue, "{s}");
    assert!(
        !s.contains(&format!("{first} ")),
        "first rows scrolled away:\n{s}"
    );
    let last = s.lines().nth(22).unwrap();
    assert!(last.contains(&pid), "selection at the bottom edge:\n{s}");
}

#[test]
fn hidden_processes_stay_listed() {
    let mut hidden = GpuProcess::new(777_777, 0, ProcessKind::Both);
    hidden.gpu_memory_bytes = Some(2 * GIB);
    let app = app_with(snapshot_with(vec![gpu(0, 0)], vec![hidden]));
    let s = screen(&app, 200, 24);
    let line = line_with(&s, "777777");
    assert!(line.contains("not visible here"), "{line}");
    assert!(line.contains("C+G"), "TYPE shows on a wide screen: {line}");
    assert!(line.contains("2.0G"));
    let narrow = screen(&app, 80, 24);
    assert!(line_with(&narrow, "777777").contains("not visible here"));
}

#[test]
fn warnings_most_severe_first_and_expandable() {
    let mut snapshot = busy_snapshot(2, 2, 0);
    snapshot.warnings = vec![
        warning(
            "swap",
            Severity::Warn,
            Subject::Host,
            "swap in use and growing",
        ),
        warning(
            "oom-risk",
            Severity::Critical,
            Subject::Gpu { index: 1 },
            "GPU memory 97% used",
        ),
        warning(
            "leak",
            Severity::Info,
            Subject::Process { pid: 20001 },
            "allocated keeps rising",
        ),
    ];
    let mut app = sized(app_with(snapshot), 80, 24);
    let s = screen(&app, 80, 24);
    assert!(s.contains("WARNINGS (3)"));
    assert!(row_of(&s, "CRIT oom-risk") < row_of(&s, "WARN swap"), "{s}");
    let wide = screen(&app, 200, 50);
    let rows: Vec<usize> = ["CRIT oom-risk", "WARN swap", "INFO leak"]
        .iter()
        .map(|w| row_of(&wide, w))
        .collect();
    assert!(rows.windows(2).all(|w| w[0] + 1 == w[1]), "{wide}");
    key(&mut app, crossterm::event::KeyCode::Char('w'));
    key(&mut app, crossterm::event::KeyCode::Enter);
    let expanded = screen(&app, 80, 24);
    insta::assert_snapshot!("warning_expanded_80x24", expanded);
    assert!(expanded.contains("CRIT oom-risk on GPU 1"));
    assert!(expanded.contains("memory used: 78.2GiB of 80.0GiB"));
    assert!(expanded.contains("Lower the batch size"));
}

#[test]
fn help_overlay_lists_the_keys() {
    let mut app = eight_gpu_app();
    app.view.toggle_help();
    app.readonly = true;
    let s = screen(&app, 80, 24);
    insta::assert_snapshot!("help_80x24", s);
    for key in [
        "Ctrl-C",
        "PgUp PgDn",
        "Space",
        "T K I",
        "F9",
        "F7 F8",
        "F6 < > r",
        "Space U",
        "/",
        "READ-ONLY",
        "F2",
        "a f c",
        "w g",
        // The last key: nothing is cut off at 80x24, even with the read-only line.
        "start or stop recording",
    ] {
        assert!(s.contains(key), "{key} missing:\n{s}");
    }
}

/// The rows inside the help's borders on `screen`, and its top and bottom borders.
fn help_box(screen: &str) -> (Vec<String>, String, String) {
    let lines: Vec<Vec<char>> = screen.lines().map(|l| l.chars().collect()).collect();
    let top = row_of(screen, "torchtop keys");
    let left = lines[top].iter().position(|&c| c == '┌').expect("top left");
    let right = lines[top]
        .iter()
        .rposition(|&c| c == '┐')
        .expect("top right");
    let bottom = (top + 1..lines.len())
        .find(|&y| lines[y].get(left) == Some(&'└'))
        .expect("bottom border");
    let inside = |y: usize| -> String { lines[y][left + 1..right].iter().collect() };
    let border = |y: usize| -> String { lines[y][left..=right].iter().collect() };
    let body = (top + 1..bottom).map(inside).collect();
    (body, border(top), border(bottom))
}

/// Every line of the help, read by scrolling it one line at a time with `j` from its top.
fn whole_help(app: &mut App, width: u16, height: u16) -> Vec<String> {
    key(app, crossterm::event::KeyCode::Home);
    let mut read = Vec::new();
    for _ in 0..200 {
        let (body, _, bottom) = help_box(&screen(app, width, height));
        if !bottom.contains("↓ more") {
            read.extend(body);
            return read;
        }
        read.push(body[0].clone());
        key(app, crossterm::event::KeyCode::Char('j'));
    }
    panic!("the help never reached its end");
}

/// The help's text with its wrapped lines joined: one space between words.
fn joined(lines: &[String]) -> String {
    lines
        .iter()
        .flat_map(|l| l.split_whitespace())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn help_at_the_minimum_size_scrolls_and_wraps_between_words() {
    let mut app = sized(eight_gpu_app(), 60, 16);
    key(&mut app, crossterm::event::KeyCode::Char('?'));
    let top = screen(&app, 60, 16);
    insta::assert_snapshot!("help_60x16_top", top);
    let (_, upper, lower) = help_box(&top);
    assert!(
        lower.contains("↓ more") && !upper.contains("↑ more"),
        "{top}"
    );
    let all = whole_help(&mut app, 60, 16);
    let text = joined(&all);
    for meaning in [
        "signal menu: type a number (9, 15) or move; asks first",
        "sort menu, prev/next column, reverse; or click a title",
        "nice -1 or +1, as in htop; n: type a value (-20..19)",
        // The last entry: reached by scrolling, not cut off.
        "R start or stop recording to a file (torchtop replay)",
    ] {
        assert!(
            text.contains(meaning),
            "{meaning:?} missing from\n{}",
            all.join("\n")
        );
    }
    key(&mut app, crossterm::event::KeyCode::End);
    let end = screen(&app, 60, 16);
    insta::assert_snapshot!("help_60x16_end", end);
    let (_, upper, lower) = help_box(&end);
    assert!(
        upper.contains("↑ more") && !lower.contains("↓ more"),
        "{end}"
    );
    key(&mut app, crossterm::event::KeyCode::PageUp);
    let (_, upper, lower) = help_box(&screen(&app, 60, 16));
    assert!(upper.contains("↑ more") && lower.contains("↓ more"));
}

#[test]
fn the_status_line_of_a_replay_offers_no_tag_or_signal_keys() {
    let mut app = eight_gpu_app();
    app.readonly = true;
    app.replay = true;
    for width in [80, 120] {
        let s = screen(&app, width, 24);
        let status = s.lines().last().unwrap();
        assert!(status.contains("q quit  ? help"), "{status}");
        assert!(
            !status.contains("tag") && !status.contains("signal"),
            "{status}"
        );
    }
}

#[test]
fn help_in_a_replay_lists_the_replay_keys_first_and_the_action_keys_as_off() {
    let mut app = eight_gpu_app();
    app.readonly = true;
    app.replay = true;
    app.badge = Some("REPLAY demo".to_string());
    let mut app = sized(app, 80, 24);
    key(&mut app, crossterm::event::KeyCode::Char('?'));
    insta::assert_snapshot!("help_replay_80x24", screen(&app, 80, 24));
    let all = whole_help(&mut app, 80, 24);
    let text = joined(&all);
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing from\n{}", all.join("\n")))
    };
    for entry in [
        "Space pause or play",
        "← → one frame back or on (and pause)",
        "+ - faster or slower",
        "g go to a time",
        "[ ] the previous or next event",
    ] {
        assert!(at(entry) < at("General"), "{entry} comes first");
    }
    for gone in ["scroll the command sideways", "next GPU", "tag or untag"] {
        assert!(
            !text.contains(gone),
            "{gone:?} does something else in a replay"
        );
    }
    let off = at("Off in a replay");
    for keys in [
        "T K I F9 signals",
        "F7 F8 n nice",
        "s P S the agent",
        "R recording",
    ] {
        assert!(at(keys) > off, "{keys} listed as off");
    }
}

#[test]
fn status_line_shows_the_last_outcome_and_readonly() {
    let mut app = eight_gpu_app();
    app.status = Some("process 1234 has exited".to_string());
    app.readonly = true;
    let s = screen(&app, 80, 24);
    let last = s.lines().last().unwrap();
    assert!(last.contains("process 1234 has exited"), "{last}");
    assert!(last.ends_with("READ-ONLY"), "{last}");
}

#[test]
fn history_puts_the_newest_sample_at_the_right() {
    let app = app_after(|t| {
        let mut snapshot = busy_snapshot(1, 0, t);
        let busy = t + 10 >= HISTORY_SAMPLES;
        snapshot.gpus[0].utilization_percent = Some(if busy { 100 } else { 0 });
        snapshot
    });
    let s = screen(&app, 80, 24);
    let util: Vec<char> = line_with(&s, "  0  util").chars().collect();
    // Label 12 columns, sparkline, then 9 columns for the current value.
    let spark = &util[12..71];
    assert_eq!(spark[58], '█', "{s}");
    // A bucket of 6 samples, 4 of them busy: its highest, not their mean (a review: a spike
    // averaged away reads as no spike).
    assert_eq!(spark[57], '█', "{s}");
    assert!(spark[..57].iter().all(|c| *c == ' '), "{s}");
    assert!(util.iter().collect::<String>().ends_with("100%"));
}

// ---- dialogs, filter prompt, tree ---------------------------------------------------------

/// An app that knows its screen, as the event loop tells it before each frame.
fn sized(mut app: App, width: u16, height: u16) -> App {
    let plan = super::plan(&app, ratatui::layout::Rect::new(0, 0, width, height));
    app.set_layout(plan);
    app
}

fn key(app: &mut App, code: crossterm::event::KeyCode) {
    app.on_key(crossterm::event::KeyEvent::new(
        code,
        crossterm::event::KeyModifiers::NONE,
    ));
}

fn type_keys(app: &mut App, text: &str) {
    for c in text.chars() {
        key(app, crossterm::event::KeyCode::Char(c));
    }
}

#[test]
fn confirm_dialog_names_pid_user_and_command_of_each_target() {
    use crossterm::event::KeyCode;
    let mut app = sized(app_with(busy_snapshot(2, 2, 0)), 80, 24);
    key(&mut app, KeyCode::Char(' '));
    key(&mut app, KeyCode::Char(' '));
    key(&mut app, KeyCode::Char('K'));
    assert!(matches!(app.mode, Mode::Confirm { .. }), "{:?}", app.mode);
    let s = screen(&app, 80, 24);
    insta::assert_snapshot!("confirm_kill_80x24", s);
    assert!(s.contains("Send SIGKILL to these 2 processes?"), "{s}");
    let first = line_with(&s, "20000  alice");
    assert!(first.contains("/usr/bin/python3 train.py"), "{first}");
    assert!(
        s.contains("20001  bob"),
        "the second row in GPU-memory order: {s}"
    );
    assert!(s.contains("y or Enter: send"), "{s}");
    let last = s.lines().last().unwrap();
    assert!(
        last.starts_with(" 2 tagged "),
        "the status line counts tags:\n{s}"
    );
}

/// The admin review: SIGTERM to a container's init (pid 1 of its PID namespace) said "sent"
/// and nothing happened; the dialog never said what the process was.
#[test]
fn confirm_dialog_says_a_target_is_a_namespace_s_init() {
    use crossterm::event::KeyCode;
    let mut snapshot = busy_snapshot(1, 2, 0);
    snapshot.processes[0].ns_pids = Some(vec![snapshot.processes[0].pid, 1].into());
    snapshot.processes[1].ns_pids = Some(vec![snapshot.processes[1].pid, 7].into());
    let pid = snapshot.processes[0].pid;
    let mut app = sized(app_with(snapshot), 80, 24);
    key(&mut app, KeyCode::Char('T'));
    let s = screen(&app, 80, 24);
    assert!(
        s.contains(&format!("{pid} is pid 1 of a PID namespace")),
        "{s}"
    );
    assert!(s.contains("drops SIGTERM sent from outside"), "{s}");
    key(&mut app, KeyCode::Esc);
    key(&mut app, KeyCode::Char('K'));
    let s = screen(&app, 80, 24);
    assert!(s.contains("SIGKILL ends every process"), "{s}");
    // Not an init (pid 7 inside): no such line.
    key(&mut app, KeyCode::Esc);
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Char('T'));
    let s = screen(&app, 80, 24);
    assert!(!s.contains("PID namespace"), "{s}");
}

/// Found trying the monitor beside a two-rank job: SIGTERM to one rank asked only "this
/// process?", and the other rank then waited in its collective for NCCL's timeout.
#[test]
fn confirm_dialog_says_what_a_signal_to_part_of_a_job_leaves_waiting() {
    use crossterm::event::KeyCode;
    let mut snapshot = busy_snapshot(1, 3, 0);
    let pids: Vec<u32> = snapshot.processes.iter().map(|p| p.pid).collect();
    snapshot.jobs = vec![crate::model::Job {
        gone: Vec::new(),
        id: "job 127.0.0.1:29500".into(),
        ranks: (0..2u32)
            .map(|r| crate::model::JobRank {
                pid: pids[r as usize],
                gpu: 0,
                rank: Some(r),
                local_rank: Some(r),
                world_size: Some(2),
            })
            .collect(),
    }];
    let mut app = sized(app_with(snapshot), 80, 24);
    key(&mut app, KeyCode::Char('T'));
    let s = screen(&app, 80, 24);
    assert!(
        s.contains("1 other rank of job 127.0.0.1:29500 is not in this"),
        "{s}"
    );
    assert!(s.contains("Tag every rank with Space"), "{s}");
    key(&mut app, KeyCode::Esc);
    // Both ranks tagged: the whole job, nothing left waiting.
    key(&mut app, KeyCode::Char(' '));
    key(&mut app, KeyCode::Char(' '));
    key(&mut app, KeyCode::Char('T'));
    let s = screen(&app, 80, 24);
    assert!(s.contains("Send SIGTERM to these 2 processes?"), "{s}");
    assert!(!s.contains("not in this"), "{s}");
    key(&mut app, KeyCode::Esc);
    key(&mut app, KeyCode::Char('U'));
    // A process of no job: no such line.
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Char('T'));
    let s = screen(&app, 80, 24);
    assert!(!s.contains("not in this"), "{s}");
}

#[test]
fn tagged_rows_carry_a_marker() {
    use crossterm::event::KeyCode;
    let mut app = sized(app_with(busy_snapshot(1, 3, 0)), 80, 24);
    key(&mut app, KeyCode::Char(' '));
    let s = screen(&app, 80, 24);
    assert!(line_with(&s, "20000").starts_with("*  20000"), "{s}");
    assert!(line_with(&s, "20001").starts_with("   20001"), "{s}");
}

#[test]
fn signal_menu_lists_every_signal_with_the_choice_highlighted() {
    use crossterm::event::KeyCode;
    let mut app = sized(app_with(busy_snapshot(1, 3, 0)), 80, 24);
    key(&mut app, KeyCode::F(9));
    key(&mut app, KeyCode::Down);
    let buffer = render(&app, 80, 24);
    let s = text(&buffer);
    insta::assert_snapshot!("signal_menu_80x24", s);
    let names = [
        "SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGSTOP", "SIGCONT", "SIGUSR1", "SIGUSR2",
    ];
    let rows: Vec<usize> = names.iter().map(|n| row_of(&s, n)).collect();
    assert!(rows.windows(2).all(|w| w[0] + 1 == w[1]), "{s}");
    let kill_row = rows[1] as u16;
    let x = line_with(&s, "SIGKILL").find("SIGKILL").unwrap() as u16;
    assert_eq!(
        buffer[(x, kill_row)].bg,
        Color::Blue,
        "SIGKILL is the choice"
    );
    assert!(s.contains("to 20000 (/usr/bin/python3"), "{s}");
}

#[test]
fn nice_and_sort_dialogs_draw() {
    use crossterm::event::KeyCode;
    let mut app = sized(app_with(busy_snapshot(1, 3, 0)), 80, 24);
    key(&mut app, KeyCode::Char('n'));
    type_keys(&mut app, "30");
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 80, 24);
    assert!(s.contains("new value (-20 to 19): 30_"), "{s}");
    assert!(s.contains("nice value 30 is out of range"), "{s}");
    assert!(s.contains("now: 0"), "{s}");
    key(&mut app, KeyCode::Esc);
    key(&mut app, KeyCode::F(6));
    key(&mut app, KeyCode::Down);
    let s = screen(&app, 80, 24);
    let now = line_with(&s, "(now)");
    assert!(now.contains("GPU MEM"), "the default order: {s}");
    assert!(s.contains("order: descending"), "{s}");
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 80, 24);
    assert!(
        line_with(&s, "COMMAND").contains("SM%▼"),
        "SM% descending first: {s}"
    );
    assert!(!line_with(&s, "COMMAND").contains("GPU-MEM▼"), "{s}");
    key(&mut app, KeyCode::Char('r'));
    let s = screen(&app, 80, 24);
    assert!(line_with(&s, "COMMAND").contains("SM%▲"), "{s}");
}

#[test]
fn filter_prompt_in_the_status_line_and_the_rows_it_keeps() {
    use crossterm::event::KeyCode;
    let mut app = sized(app_with(busy_snapshot(2, 4, 0)), 80, 24);
    key(&mut app, KeyCode::Char('/'));
    type_keys(&mut app, "carol");
    let s = screen(&app, 80, 24);
    insta::assert_snapshot!("filter_prompt_80x24", s);
    let last = s.lines().last().unwrap();
    assert!(last.contains("filter: carol_"), "{last}");
    assert!(last.contains("2 rows"), "{last}");
    assert!(line_with(&s, "COMMAND").contains("(2 of 8)"), "{s}");
    assert!(
        s.contains("20002 carol") && s.contains("20006 carol"),
        "{s}"
    );
    assert!(!s.contains("alice"), "{s}");
    type_keys(&mut app, "zzz");
    let s = screen(&app, 80, 24);
    assert!(s.contains("no process matches \"carolzzz\""), "{s}");
    key(&mut app, KeyCode::Backspace);
    key(&mut app, KeyCode::Backspace);
    key(&mut app, KeyCode::Backspace);
    key(&mut app, KeyCode::Enter);
    let kept = screen(&app, 80, 24);
    let last = kept.lines().last().unwrap();
    assert!(last.starts_with(" filter \"carol\" "), "{last}");
    assert!(line_with(&kept, "20002").contains("carol"), "{kept}");
}

fn host_process(pid: u32, ppid: u32, comm: &str) -> crate::model::HostProcess {
    crate::model::HostProcess {
        pid,
        ppid,
        start_ticks: 100_000 + u64::from(pid),
        user: Some("alice".to_string()),
        comm: comm.to_string(),
        command: Some(comm.to_string()),
        state: 'S',
        cpu_percent: Some(12.5),
        rss_bytes: Some(GIB),
        ..Default::default()
    }
}

#[test]
fn tree_view_draws_parents_and_workers_with_guides() {
    use crossterm::event::KeyCode;
    let mut snapshot = busy_snapshot(2, 1, 0);
    snapshot.processes[0].pid = 200;
    snapshot.processes[1].pid = 300;
    snapshot.host_processes = vec![
        host_process(100, 1, "torchrun --nproc-per-node 2 train.py"),
        host_process(200, 100, "python train.py"),
        host_process(300, 100, "python train.py"),
        host_process(210, 200, "pt_data_worker"),
        host_process(211, 200, "pt_data_worker"),
    ];
    let mut app = sized(app_with(snapshot), 100, 24);
    key(&mut app, KeyCode::Char('t'));
    let s = screen(&app, 100, 24);
    insta::assert_snapshot!("tree_100x24", s);
    assert!(line_with(&s, "COMMAND").contains("(tree, 5 rows)"), "{s}");
    let launcher = line_with(&s, "torchrun");
    assert!(
        launcher.contains(" - "),
        "no GPU on the launcher: {launcher}"
    );
    assert!(
        line_with(&s, " 210 ").contains("│  ├─ pt_data_worker"),
        "{s}"
    );
    assert!(
        line_with(&s, " 211 ").contains("│  └─ pt_data_worker"),
        "{s}"
    );
    let rank = line_with(&s, "  300 ");
    assert!(rank.contains("└─ python3 train.py"), "{rank}");
    assert!(rank.contains("9.0G"), "GPU rows keep their figures: {rank}");
    assert!(row_of(&s, "torchrun") < row_of(&s, " 210 "));
}

#[test]
fn dialogs_draw_on_any_screen_size_without_panicking() {
    use crossterm::event::KeyCode;
    let opening: [&[KeyCode]; 5] = [
        &[KeyCode::Char('K')],
        &[KeyCode::F(9)],
        &[KeyCode::Char('n')],
        &[KeyCode::F(6)],
        &[KeyCode::Char('/'), KeyCode::Char('x')],
    ];
    for keys in opening {
        let mut app = app_with(busy_snapshot(2, 12, 0));
        for _ in 0..12 {
            key(&mut app, KeyCode::Char(' '));
        }
        for code in keys {
            key(&mut app, *code);
        }
        assert_ne!(app.mode, Mode::Normal, "{keys:?}");
        for (width, height) in [(1, 1), (10, 3), (30, 8), (59, 15), (60, 16), (80, 24)] {
            render(&app, width, height);
        }
    }
}

#[test]
fn a_job_shows_each_rank_with_its_bars() {
    let mut app = eight_gpu_app();
    let mut snapshot = (*app.snapshot).clone();
    snapshot.jobs = vec![crate::model::Job {
        gone: Vec::new(),
        id: "job 127.0.0.1:29500".into(),
        ranks: (0..8)
            .map(|r| crate::model::JobRank {
                pid: 20_000 + r,
                gpu: r,
                rank: Some(r),
                local_rank: Some(r),
                world_size: Some(8),
            })
            .collect(),
    }];
    app.on_snapshot(std::sync::Arc::new(snapshot));
    for (width, height) in [(80, 24), (200, 50)] {
        let s = screen(&app, width, height);
        let line = s
            .lines()
            .find(|l| l.starts_with("JOB job 127.0.0.1:29500 "))
            .unwrap_or_else(|| panic!("no job line at {width}x{height}:\n{s}"));
        for rank in 0..8 {
            let bars = line.split(&format!(" r{rank}")).nth(1).unwrap_or("");
            assert!(
                bars.chars().take(2).all(|c| " ▁▂▃▄▅▆▇█".contains(c)) && bars.chars().count() >= 2,
                "rank {rank} bars missing: {line}"
            );
        }
    }
}

#[test]
fn the_command_shows_the_program_basename_and_scrolls_sideways() {
    let mut app = torch_app();
    let medium = screen(&app, 120, 40);
    insta::assert_snapshot!("torch_120x40", medium);
    let row = line_with(&medium, "20000 alice");
    assert!(row.contains(" 0/8 python3 train.py --config"), "{row}");
    assert!(!medium.contains("/usr/bin/python3"), "{medium}");
    app.view.command_scroll = 8;
    for (width, height) in [(80, 24), (120, 40), (200, 50)] {
        let s = screen(&app, width, height);
        let row = line_with(&s, "20000 alice");
        assert!(
            row.contains(" 0/8 train.py --config"),
            "scrolled by 8: {row}"
        );
    }
}

#[test]
fn state_nice_memory_shares_and_start_time_have_columns() {
    let app = app_after(|t| busy_snapshot(1, 3, t));
    let wide = screen(&app, 200, 50);
    let header = line_with(&wide, "PID USER");
    for title in ["NI", " S ", "GMEM%", "MEM%", "START"] {
        assert!(header.contains(title), "{title} in {header}");
    }
    let stopped = line_with(&wide, "20001 bob");
    assert!(
        stopped.contains("bob        0 T "),
        "SIGSTOPped shows T: {stopped}"
    );
    let niced = line_with(&wide, "20002 carol");
    assert!(niced.contains("carol      5 R "), "{niced}");
    // 9 GiB of 80 GiB; 14 GiB of 2 TiB; started 1:02:03 before 12:34:56.
    let first = line_with(&wide, "20000 alice");
    assert!(first.contains("9.0G     11 "), "{first}");
    assert!(first.contains("  0.7   14.0G  1:02:03  11:32 "), "{first}");
    for (width, height) in [(80, 24), (120, 40)] {
        let s = screen(&app, width, height);
        let row = line_with(&s, "20001 bob");
        assert!(
            row.contains(" T "),
            "the state column stays at {width}: {row}"
        );
        assert!(s.lines().all(|l| l.chars().count() <= usize::from(width)));
    }
    let mut unknown = process(0, 0);
    unknown.state = None;
    unknown.nice = None;
    unknown.rss_bytes = None;
    unknown.running_seconds = None;
    let app = app_with(snapshot_with(vec![na_gpu()], vec![unknown]));
    let s = screen(&app, 200, 50);
    let row = line_with(&s, "20000 alice");
    assert!(
        row.starts_with("   20000 alice    N/A N/A    0 C        9.0G    N/A   85   99.5   N/A"),
        "missing figures read N/A, never 0: {row}"
    );
    insta::assert_snapshot!("columns_missing_200x50", s);
}

#[test]
fn a_long_status_sentence_is_cut_and_the_key_hints_stay() {
    let mut app = app_after(|t| busy_snapshot(1, 3, t));
    app.status = Some(format!(
        "the nice value of 20000 ({}) is now 5",
        "x".repeat(300)
    ));
    for (width, height) in [(80, 24), (120, 40), (200, 50)] {
        let s = screen(&app, width, height);
        let last = s.lines().last().unwrap();
        assert!(last.contains("the nice value of 20000"), "{last}");
        assert!(last.contains('…'), "the sentence is cut: {last}");
        assert!(
            last.ends_with("F6 sort") || last.ends_with("q quit  ? help"),
            "the hints (shortened if need be) stay whole at {width} columns: {last}"
        );
    }
    app.status = Some("process 1234 has exited".to_string());
    let s = screen(&app, 120, 40);
    let last = s.lines().last().unwrap();
    assert!(last.contains("process 1234 has exited"), "{last}");
    assert!(last.ends_with("F6 sort"), "room for all the hints: {last}");
    // A sentence that fits whole without (some of) the hints is not cut for them: the path is
    // what the user needs next. It was cut to "...20261203-172558…" below 160 columns.
    let path = "agent of 16448: snapshot written to /tmp/ux/agents/\
                16448-snapshot-20261203-172558.pickle; opening it";
    app.status = Some(path.to_string());
    for (width, hints) in [(104, ""), (120, "q quit  ? help")] {
        let s = screen(&app, width, 30);
        let last = s.lines().last().unwrap();
        assert!(last.contains(path), "{width}: {last}");
        assert!(last.trim_end().ends_with(hints), "{width}: {last}");
    }
    app.readonly = true;
    app.status = Some("y".repeat(300));
    let s = screen(&app, 80, 24);
    let last = s.lines().last().unwrap();
    assert!(last.ends_with("? help READ-ONLY"), "{last}");
}

#[test]
fn the_kill_confirmation_names_the_rank_and_job_of_a_torch_process() {
    use crossterm::event::KeyCode;
    let mut snapshot = busy_snapshot(2, 1, 0);
    for (rank, p) in snapshot.processes.iter_mut().enumerate() {
        p.torch = Some(std::sync::Arc::new(torch_info(rank as u32, 0)));
    }
    snapshot.jobs = vec![crate::model::Job {
        gone: Vec::new(),
        id: "job 127.0.0.1:29500".to_string(),
        ranks: snapshot
            .processes
            .iter()
            .enumerate()
            .map(|(rank, p)| crate::model::JobRank {
                pid: p.pid,
                gpu: p.gpu,
                rank: Some(rank as u32),
                local_rank: Some(rank as u32),
                world_size: Some(2),
            })
            .collect(),
    }];
    let mut app = sized(app_with(snapshot), 120, 40);
    key(&mut app, KeyCode::End);
    key(&mut app, KeyCode::Char('K'));
    for (width, height) in [(80, 24), (120, 40), (200, 50)] {
        let s = screen(&app, width, height);
        assert!(s.contains("Send SIGKILL to this process?"), "{s}");
        let row = app.selected_row().unwrap();
        let target = row_of(&s, &format!("{}  {}", row.pid, row.user().unwrap()));
        let under = s.lines().nth(target + 1).unwrap();
        assert!(under.contains("of job 127.0.0.1:29500"), "{s}");
        assert!(
            under.contains("rank 0/2") || under.contains("rank 1/2"),
            "{under}"
        );
        if width == 80 {
            insta::assert_snapshot!("confirm_kill_rank_80x24", s);
        }
    }
    // Without a job, the agent's rank alone.
    app.on_snapshot(Arc::new(Snapshot {
        jobs: Vec::new(),
        ..(*app.snapshot).clone()
    }));
    let s = screen(&app, 120, 40);
    assert!(s.contains("rank 1/8"), "{s}");
}

#[test]
fn the_user_menu_and_the_user_and_gpu_filters_show() {
    use crossterm::event::KeyCode;
    let mut app = sized(app_with(busy_snapshot(2, 4, 0)), 80, 24);
    key(&mut app, KeyCode::Char('u'));
    let s = screen(&app, 80, 24);
    insta::assert_snapshot!("user_menu_80x24", s);
    for name in ["all users", "alice", "bob", "carol", "dave"] {
        assert!(s.contains(&format!("│  {name} ")), "{name}:\n{s}");
    }
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Enter);
    let user = app.settings.user.clone();
    let app = app.with_filters(user, Some(vec![1]));
    for (width, height) in [(80, 24), (120, 40), (200, 50)] {
        let s = screen(&app, width, height);
        let last = s.lines().last().unwrap();
        assert!(last.contains(" user bob   GPUs 1 "), "{last}");
        assert!(line_with(&s, "COMMAND").contains("(2 of 8)"), "{s}");
        assert!(line_with(&s, "20005 bob").contains(" 1 "), "{s}");
        assert!(!s.contains("alice "), "{s}");
    }
    let app = app.with_filters(Some("nobody-here".to_string()), None);
    let s = screen(&app, 120, 40);
    assert!(s.contains("no process of the chosen user or GPUs"), "{s}");
    // `m` with none of one's own: a review saw "no processes on the GPUs" over 2 of them.
    let mut app = app.with_filters(None, None);
    app.my_uid = 65534;
    key(&mut app, KeyCode::Char('m'));
    let s = screen(&app, 120, 40);
    assert!(
        s.contains("no process of yours on the GPUs (m shows everyone's)"),
        "{s}"
    );
    assert!(!s.contains("no processes on the GPUs"), "{s}");
    let app = app.with_filters(Some("bob".to_string()), None);
    let s = screen(&app, 120, 40);
    assert!(
        s.contains("no process of yours among the chosen user or GPUs"),
        "{s}"
    );
    // A GPU the machine does not have is named as such, not as an empty choice.
    let app = app.with_filters(None, Some(vec![9]));
    let s = screen(&app, 120, 40);
    assert!(
        s.contains("--gpus names GPU 9 that this machine does not have (it has 2 GPUs, 0 to 1)"),
        "{s}"
    );
}

#[test]
fn the_gpu_share_columns_show_when_chosen() {
    let mut app = eight_gpu_app();
    let mut snapshot = (*app.snapshot).clone();
    for p in &mut snapshot.processes {
        p.memory_bandwidth_percent = Some(35);
        p.encoder_percent = Some(12);
    }
    app.on_snapshot(Arc::new(snapshot));
    let hidden = screen(&app, 250, 50);
    assert!(!hidden.contains("GMBW%"), "hidden by default:\n{hidden}");
    app.ui.hidden_columns.clear();
    let shown = screen(&app, 250, 50);
    let header = shown
        .lines()
        .find(|l| l.contains("GMBW%"))
        .unwrap_or_else(|| panic!("no GMBW% title:\n{shown}"));
    assert!(
        header.contains("ENC%") && header.contains("DEC%"),
        "{header}"
    );
    assert!(header.contains("CONTAINER"), "{header}");
    // 35 and 12 under their titles; the decoder share nobody reported is N/A.
    // In characters: the sort arrow in another title is one cell but three bytes.
    let column = header[..header.find("GMBW%").unwrap()].chars().count();
    let row = shown
        .lines()
        .skip_while(|l| !l.contains("GMBW%"))
        .nth(1)
        .unwrap();
    let under: String = row.chars().skip(column).collect();
    assert!(under.trim_start().starts_with("35"), "{row}");
    assert!(row.contains("N/A"), "{row}");
}

/// Inside a container the header says why rows have no details; at 120 columns the long note
/// did not fit and nothing was said.
#[test]
fn the_container_note_shortens_before_it_goes() {
    let mut snapshot = busy_snapshot(2, 2, 0);
    snapshot.host.container = Some("docker".into());
    snapshot.host.pids_foreign = true;
    snapshot.processes[0].visible = false;
    let app = app_with(snapshot);
    let header = |width: u16| screen(&app, width, 30).lines().next().unwrap().to_string();
    assert!(header(200).contains("inside a container: no details for 1 GPU process"));
    let at_120 = header(120);
    assert!(
        at_120.contains("1 GPU process without details") || at_120.contains("1 host pid"),
        "{at_120}"
    );
}
