//! The history panel's scale: a GPU's past samples keep the scale they were drawn on (its
//! memory total and power limit) after it is lost and reports neither, and a value above zero
//! is never drawn blank.

use super::*;

/// 70 W of a 700 W limit, memory rising to 58.6 GiB of 80 GiB: the review's GPU 3.
fn ramping_gpu(t: u32) -> GpuSample {
    let mut gpu = gpu(0, t);
    gpu.power_w = Some(70.0);
    gpu.power_limit_w = Some(700.0);
    gpu.memory_total_bytes = Some(80 * GIB);
    gpu.memory_used_bytes = Some((58.6 * GIB as f64 * f64::from(t) / 319.0) as u64);
    gpu
}

/// A lost GPU as the sampler publishes it: which GPU it was, and no figure.
fn lost_gpu() -> GpuSample {
    GpuSample {
        index: 0,
        name: Some("NVIDIA A100 80GB".to_string().into()),
        uuid: gpu(0, 0).uuid,
        state: GpuState::Lost,
        error: Some("the GPU has fallen off the bus".to_string()),
        ..GpuSample::default()
    }
}

/// The util, memory and power sparklines of the stacked history at 80x24, as text.
fn sparklines(app: &App) -> [String; 3] {
    let s = screen(app, 80, 24);
    let top = row_of(&s, "  0  util");
    let lines: Vec<&str> = s.lines().collect();
    // Label 12 columns, then the sparkline, then 9 columns for the current value.
    let spark = |row: usize| -> String { lines[row].chars().skip(12).take(59).collect() };
    [spark(top), spark(top + 1), spark(top + 2)]
}

/// The newest `n` cells of a sparkline.
fn newest(spark: &str, n: usize) -> String {
    let cells: Vec<char> = spark.chars().collect();
    cells[cells.len() - n..].iter().collect()
}

#[test]
fn a_lost_gpus_history_keeps_the_scale_it_was_drawn_on() {
    let mut app = app_after(|t| snapshot_with(vec![ramping_gpu(t)], Vec::new()));
    let [_, memory, power] = sparklines(&app);
    // Five minutes in 59 cells: 6 samples a cell. Six lost samples move the rest one cell on.
    for _ in 0..6 {
        app.on_snapshot(Arc::new(snapshot_with(vec![lost_gpu()], Vec::new())));
    }
    let [_, memory_lost, power_lost] = sparklines(&app);
    // The 40 cells before the gap now are the newest 40 before.
    let before_gap = |lost: &str| -> String { newest(lost, 41).chars().take(40).collect() };
    assert_eq!(newest(&power_lost, 1), "·", "{power_lost}");
    assert_eq!(
        before_gap(&power_lost),
        newest(&power, 40),
        "power rescaled once lost"
    );
    assert_eq!(
        before_gap(&memory_lost),
        newest(&memory, 40),
        "memory rescaled once lost"
    );
    assert!(!power_lost.contains('█'), "70 W of 700 W: {power_lost}");
    assert!(
        memory.ends_with('▅'),
        "58.6 of 80 GiB is 5 eighths: {memory}"
    );
}

#[test]
fn a_value_above_zero_is_never_drawn_blank_and_zero_differs_from_na() {
    let app = app_after(|t| {
        let mut gpu = ramping_gpu(t);
        gpu.utilization_percent = Some(0);
        gpu.encoder_percent = None;
        snapshot_with(vec![gpu], Vec::new())
    });
    let [util, _, power] = sparklines(&app);
    // 70 W of 700 W fills less than an eighth: the lowest bar, not a blank that reads as N/A.
    assert!(newest(&power, 50).chars().all(|c| c == '▁'), "{power}");
    assert!(util.chars().all(|c| c == ' '), "0% stays blank: {util}");
    let mut app = app;
    // A whole cell of lost samples (6): a cell with some samples is their average.
    for _ in 0..6 {
        app.on_snapshot(Arc::new(snapshot_with(vec![lost_gpu()], Vec::new())));
    }
    let [util, _, _] = sparklines(&app);
    assert!(util.ends_with('·'), "N/A is a dim dot, not a blank: {util}");
}
