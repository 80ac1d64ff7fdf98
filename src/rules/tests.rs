//! Tests of the engine: windows, ordering, first-seen times, the torch device map.

use super::testkit::*;
use super::window::MAX_POINTS;
use super::*;
use crate::model::{GpuSample, LaunchEnv, Severity, TorchInfo};

#[test]
fn a_window_covers_only_after_it_has_been_watched_long_enough() {
    let mut window = Window::default();
    for t in 0..10 {
        window.push(f64::from(t), t, 5.0);
    }
    let covering = window.covering(5.0).expect("watched 9 s");
    assert_eq!(covering.first().map(|p| p.v), Some(4));
    assert_eq!(covering.last().map(|p| p.v), Some(9));
    assert!(window.covering(20.0).is_none());
    assert_eq!(window.recent(2.0).len(), 3);
    assert_eq!(window.covering(0.0).map(<[_]>::len), Some(1));
}

#[test]
fn a_window_stays_bounded_and_restarts_when_the_clock_goes_back() {
    let mut window = Window::default();
    for t in 0..20_000 {
        window.push(f64::from(t) * 0.01, t, 1_000.0);
    }
    assert!(window.len() <= MAX_POINTS);
    assert!(
        window.covering(150.0).is_some(),
        "thinning keeps the time span"
    );
    window.push(1.0, 7, 1_000.0);
    assert_eq!(window.len(), 1);
    window.push(f64::NAN, 8, 1_000.0);
    assert_eq!(window.latest().map(|p| p.v), Some(7));
}

#[test]
fn counter_rise_sums_rises_and_ignores_resets() {
    let points: Vec<Point<Option<u64>>> = [Some(3), None, Some(5), Some(0), Some(2)]
        .into_iter()
        .enumerate()
        .map(|(i, v)| Point { t: i as f64, v })
        .collect();
    assert_eq!(counter_rise(&points, |v| *v), Some((4, 2)));
    let flat: Vec<Point<Option<u64>>> = vec![Point { t: 0.0, v: Some(1) }];
    assert_eq!(counter_rise(&flat, |v| *v), Some((0, 1)));
    assert_eq!(counter_rise(&flat[..0], |v| *v), None);
}

#[test]
fn torch_devices_map_through_cuda_visible_devices() {
    let gpus = vec![
        GpuSample {
            index: 2,
            uuid: Some("GPU-abcdef12-0000".into()),
            ..Default::default()
        },
        GpuSample {
            index: 3,
            uuid: Some("GPU-99999999-0000".into()),
            ..Default::default()
        },
    ];
    let mut process = process(10, 3, 1 << 30);
    process.torch = Some(std::sync::Arc::new(TorchInfo {
        devices: vec![device(0, 1, 2), device(1, 3, 4)],
        ..Default::default()
    }));
    process.env = Some(
        LaunchEnv {
            cuda_visible_devices: Some("2,3".into()),
            ..Default::default()
        }
        .into(),
    );
    assert_eq!(torch_device_on(&process, &gpus).map(|d| d.index), Some(1));
    std::sync::Arc::make_mut(process.env.as_mut().unwrap()).cuda_visible_devices =
        Some("GPU-9999, GPU-abcd".into());
    assert_eq!(torch_device_on(&process, &gpus).map(|d| d.index), Some(0));
    std::sync::Arc::make_mut(process.env.as_mut().unwrap()).cuda_visible_devices = Some("0".into());
    assert_eq!(torch_device_on(&process, &gpus), None);
    std::sync::Arc::make_mut(process.env.as_mut().unwrap()).cuda_visible_devices = None;
    assert_eq!(
        torch_device_on(&process, &gpus),
        None,
        "cuda:3 is not reported"
    );
}

#[test]
fn warnings_come_most_severe_first_then_by_id_and_subject() {
    let mut engine = Engine::new(RulesConfig::default());
    let mut snap = snapshot(100.0);
    snap.gpus = vec![
        gpu(1, 97 * GIB / 100 * 80, 80 * GIB, 90),
        gpu(0, 97 * GIB / 100 * 80, 80 * GIB, 90),
    ];
    snap.gpus[0].throttle_reasons = Some(vec!["hw_thermal_slowdown".into()].into());
    let mut oom = process(7, 0, 10 * GIB);
    oom.torch = Some(std::sync::Arc::new(torch_on(vec![with_ooms(
        device(0, GIB, 2 * GIB),
        1,
    )])));
    snap.processes.push(oom.clone());
    // `throttle` judges a window once 15 s of it have been watched.
    for t in 100..=115 {
        snap.unix_seconds = f64::from(t);
        engine.evaluate(&snap);
    }
    let mut later = snapshot(116.0);
    later.gpus = snap.gpus.clone();
    oom.torch = Some(std::sync::Arc::new(torch_on(vec![with_ooms(
        device(0, GIB, 2 * GIB),
        2,
    )])));
    later.processes.push(oom);
    let warnings = engine.evaluate(&later);
    let order: Vec<(&str, Severity, Subject)> = warnings
        .iter()
        .map(|w| (w.id.as_str(), w.severity, w.subject.clone()))
        .collect();
    assert_eq!(
        order,
        vec![
            ("oom-risk", Severity::Critical, Subject::Process { pid: 7 }),
            ("oom-risk", Severity::Warn, Subject::Gpu { index: 0 }),
            ("oom-risk", Severity::Warn, Subject::Gpu { index: 1 }),
            ("throttle", Severity::Warn, Subject::Gpu { index: 1 }),
        ]
    );
    // A process outside any job is grouped on its GPU, as the `w` view groups it.
    assert_eq!(warnings[0].group(), "oom-risk@GPU 0");
}

#[test]
fn since_is_kept_while_the_condition_holds_and_reset_after_a_break() {
    let mut engine = Engine::new(RulesConfig::default());
    let full = |t: f64| {
        let mut snap = snapshot(t);
        snap.gpus = vec![gpu(0, 79 * GIB, 80 * GIB, 90)];
        snap
    };
    let calm = |t: f64| {
        let mut snap = snapshot(t);
        snap.gpus = vec![gpu(0, 10 * GIB, 80 * GIB, 90)];
        snap
    };
    let first = engine.evaluate(&full(1_000.0));
    assert_eq!(first[0].since, rfc3339(1_000.0));
    let second = engine.evaluate(&full(1_001.0));
    assert_eq!(second[0].since, rfc3339(1_000.0));
    assert!(engine.evaluate(&calm(1_002.0)).is_empty());
    let again = engine.evaluate(&full(1_003.0));
    assert_eq!(again[0].since, rfc3339(1_003.0));
}

#[test]
fn since_falls_back_to_unix_seconds_when_the_time_text_is_missing() {
    let mut snap = snapshot(0.0);
    snap.time.clear();
    snap.unix_seconds = 1_700_000_000.0;
    assert_eq!(snapshot_time(&snap), "2023-11-14T22:13:20Z");
    snap.unix_seconds = f64::NAN;
    assert_eq!(snapshot_time(&snap), "N/A");
}

#[test]
fn a_config_file_changes_what_fires() {
    let snap = |t: f64| {
        let mut snap = snapshot(t);
        snap.gpus = vec![gpu(0, 70 * GIB, 80 * GIB, 90)];
        snap
    };
    let mut default_engine = Engine::new(RulesConfig::default());
    assert!(default_engine.evaluate(&snap(1.0)).is_empty());
    let text = "[oom_risk]\nmemory_fraction = 0.85\n";
    let config = crate::config::parse(text, RulesConfig::check).expect("valid config");
    let mut engine = Engine::new(config);
    let warnings = engine.evaluate(&snap(1.0));
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(warnings[0].id, "oom-risk");
}

#[test]
fn a_disabled_rule_stays_quiet() {
    let mut config = RulesConfig::default();
    config.oom_risk.enabled = false;
    let mut engine = Engine::new(config);
    let mut snap = snapshot(1.0);
    snap.gpus = vec![gpu(0, 79 * GIB, 80 * GIB, 90)];
    assert!(engine.evaluate(&snap).is_empty());
}

#[test]
fn each_kind_of_window_keeps_only_what_its_rules_read() {
    let mut engine = Engine::new(RulesConfig::default());
    for t in 0..700 {
        let mut snap = snapshot(f64::from(t));
        snap.gpus = vec![gpu(0, GIB, 80 * GIB, 50)];
        snap.processes.push(process(7, 0, GIB));
        engine.evaluate(&snap);
    }
    let config = RulesConfig::default();
    // The ECC rule reads 600 s of every GPU; no process rule reads more than the leak
    // window (120 s), so a process keeps that and one point before it.
    assert!(engine.gpus[&0]
        .covering(config.ecc.window_seconds.get())
        .is_some());
    let kept = engine.processes[&(7, 0)].window.len();
    assert_eq!(kept as f64, config.leak.window_seconds.get() + 1.0);
    assert!(engine.processes[&(7, 0)]
        .window
        .covering(config.gpu_starved.window_seconds.get())
        .is_some());
}

#[test]
fn a_full_window_shows_only_its_span_and_grows_no_capacity_for_old_points() {
    let mut window = Window::default();
    for t in 0..1_000 {
        window.push(f64::from(t), t, 100.0);
        // The live points: the one at the edge and the 100 after it, never older ones.
        let live = window.live();
        assert_eq!(live.last().map(|p| p.v), Some(t));
        assert_eq!(live.first().map(|p| p.v), Some((t - 100).max(0)));
        assert!(window.points.len() <= window.len() + 16);
        // 101 live points fit the 128 a Vec grows to; old ones never make it 256.
        assert!(
            window.points.capacity() <= 128,
            "{}",
            window.points.capacity()
        );
    }
    assert_eq!(window.recent(1_000.0).len(), 101);
}

/// The README says figures in warnings are written exactly as the panels write them; the
/// check every rule test runs ([`testkit::assert_written_as_panels`]) catches a unit written
/// otherwise, as throttle wrote "64 °C", "412/700 W" and "1755 MHz" before a review.
#[test]
fn a_unit_written_otherwise_than_the_panels_write_it_is_caught() {
    let with = |message: &str, value: &str| {
        warning(
            "throttle",
            crate::model::Severity::Warn,
            crate::model::Subject::Gpu { index: 0 },
            message.to_string(),
            vec![("figure", value.to_string())],
            "",
        )
    };
    for (message, value) in [
        ("(87% utilization now, 64 °C)", "64C"),
        ("(87% utilization now, 64C)", "64°C"),
        ("(87% utilization now, 412/700 W)", "64C"),
        ("GPU 0 runs at 80C", "1755 MHz"),
        ("GPU 0 runs at 80C", "87 %"),
        ("pid 5 holds 3.0 GiB on GPU 0", "3.0GiB"),
    ] {
        let w = with(message, value);
        assert!(
            not_as_panels(&w).is_some(),
            "{message:?} / {value:?} passed"
        );
    }
    let fine = with(
        "GPU 0's clocks are held down in 3 of 4 samples under load in the last 30 s (87% \
         utilization now, 64C, 412/700W); pid 5 holds 3.0GiB on 2 GPUs",
        "1755MHz",
    );
    assert_eq!(not_as_panels(&fine), None);
}
