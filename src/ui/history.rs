//! Sparklines per GPU of the metrics chosen in the setup screen (F2; utilization, memory used
//! and power by default). The whole history span (5 minutes) is squeezed into the width
//! available, newest sample at the right edge. Also the auto-scaled sparkline ([`autoscaled`])
//! other panels use for figures whose change matters more than their size: it spans the
//! window's lowest to highest value, printed beside it.

use super::label::Label;
use ratatui::{
    layout::Rect,
    style::Style,
    text::Line,
    widgets::{RenderDirection, Sparkline},
    Frame,
};

use crate::app::App;
use crate::config::HistoryMetric;
use crate::format::{self, pad_left_aligned};
use crate::model::history::{GpuHistory, Series, HISTORY_SPAN_SECONDS};
use crate::model::GpuSample;
use crate::terminal::theme::Theme;

const GPU_LABEL_WIDTH: u16 = 5;
const METRIC_LABEL_WIDTH: u16 = 7;
const VALUE_WIDTH: u16 = 9;
const BYTES_PER_MIB: f64 = 1024.0 * 1024.0;

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme, rows_per_gpu: u16) {
    if area.height == 0 {
        return;
    }
    let span = format!("{:.0} min", HISTORY_SPAN_SECONDS / 60.0);
    let chosen = &app.ui.history;
    let empty = GpuHistory::default();
    let title = if rows_per_gpu > 1 {
        format!("HISTORY  last {span}, newest at the right")
    } else {
        let names: Vec<&str> = app
            .snapshot
            .gpus
            .first()
            .map(|g| metrics(g, &empty, chosen, theme))
            .unwrap_or_default()
            .iter()
            .map(|m| m.name)
            .collect();
        compact_title(area.width, &span, &names)
    };
    frame.render_widget(
        Label::new(pad_left_aligned(&title, usize::from(area.width))).style(theme.title()),
        Rect { height: 1, ..area },
    );
    let capacity = app.history.capacity();
    let mut y = area.y + 1;
    for gpu in &app.snapshot.gpus {
        if y + rows_per_gpu > area.bottom() {
            break;
        }
        let history = app.history.gpus.get(&gpu.index).unwrap_or(&empty);
        let row = Rect::new(area.x, y, area.width, rows_per_gpu);
        let metrics = metrics(gpu, history, chosen, theme);
        if rows_per_gpu > 1 {
            render_stacked(frame, row, gpu.index, &metrics, capacity, theme);
        } else {
            render_side_by_side(frame, row, gpu.index, &metrics, capacity, theme);
        }
        y += rows_per_gpu;
    }
}

/// One metric's sparkline: its series, the top of its scale, and the current value as text.
struct Metric<'a> {
    name: &'static str,
    series: &'a Series,
    /// Converts a sample into the sparkline's integer units.
    unit: f64,
    max: Option<u64>,
    current: String,
    style: Style,
}

/// The metrics the setup screen (F2) chose, in its order; a figure the GPU does not report
/// draws as gaps and reads N/A.
fn metrics<'a>(
    gpu: &GpuSample,
    history: &'a GpuHistory,
    chosen: &[HistoryMetric],
    theme: Theme,
) -> Vec<Metric<'a>> {
    chosen
        .iter()
        .map(|m| metric(*m, gpu, history, theme))
        .collect()
}

fn metric<'a>(
    which: HistoryMetric,
    gpu: &GpuSample,
    history: &'a GpuHistory,
    theme: Theme,
) -> Metric<'a> {
    let percent = |name, series, value: Option<u32>, style| Metric {
        name,
        series,
        unit: 1.0,
        max: Some(100),
        current: format::percent(value),
        style,
    };
    let mhz = |name, series, value: Option<u32>| Metric {
        name,
        series,
        unit: 1.0,
        max: None,
        current: value.map_or_else(|| format::NA.to_string(), |v| format!("{v}MHz")),
        style: theme.label(),
    };
    let pcie = |name, series, kib: Option<u32>| Metric {
        name,
        series,
        unit: 1024.0,
        max: None,
        current: kib.map_or_else(
            || format::NA.to_string(),
            |k| format!("{}/s", format::bytes_short(u64::from(k) * 1024)),
        ),
        style: theme.label(),
    };
    match which {
        HistoryMetric::Util => percent(
            "util",
            &history.utilization_percent,
            gpu.utilization_percent,
            theme.utilization_bar(),
        ),
        HistoryMetric::Memory => Metric {
            name: "memory",
            series: &history.memory_used_bytes,
            unit: BYTES_PER_MIB,
            max: gpu.memory_total_bytes.map(|b| b / (1024 * 1024)),
            current: format::opt_bytes_short(gpu.memory_used_bytes),
            style: theme.memory_bar(),
        },
        HistoryMetric::Power => Metric {
            name: "power",
            series: &history.power_w,
            unit: 1.0,
            max: gpu.power_limit_w.map(|w| w.round() as u64),
            current: format::watts(gpu.power_w),
            style: theme.power_bar(),
        },
        HistoryMetric::Temperature => Metric {
            name: "temp",
            series: &history.temperature_c,
            unit: 1.0,
            max: Some(100),
            current: format::celsius(gpu.temperature_c),
            style: theme.temperature(gpu.temperature_c),
        },
        HistoryMetric::SmClock => mhz("sm clk", &history.sm_clock_mhz, gpu.sm_clock_mhz),
        HistoryMetric::MemoryClock => {
            mhz("memclk", &history.memory_clock_mhz, gpu.memory_clock_mhz)
        }
        HistoryMetric::PcieRx => pcie("pci rx", &history.pcie_rx_kib_s, gpu.pcie_rx_kib_s),
        HistoryMetric::PcieTx => pcie("pci tx", &history.pcie_tx_kib_s, gpu.pcie_tx_kib_s),
        HistoryMetric::Encoder => percent(
            "enc",
            &history.encoder_percent,
            gpu.encoder_percent,
            theme.utilization_bar(),
        ),
        HistoryMetric::Decoder => percent(
            "dec",
            &history.decoder_percent,
            gpu.decoder_percent,
            theme.utilization_bar(),
        ),
    }
}

fn compact_title(width: u16, span: &str, names: &[&str]) -> String {
    let segment = segment_width(width, names.len());
    let mut title = pad_left_aligned("HIST", usize::from(GPU_LABEL_WIDTH));
    for name in names {
        title += &pad_left_aligned(name, usize::from(segment + 1));
    }
    title.truncate(title.trim_end().len());
    format!("{title}  (last {span})")
}

/// The cells of each of `count` sparklines side by side on one row.
fn segment_width(width: u16, count: usize) -> u16 {
    let count = u16::try_from(count.max(1)).unwrap_or(u16::MAX);
    (width.saturating_sub(GPU_LABEL_WIDTH) / count).saturating_sub(1)
}

fn render_side_by_side(
    frame: &mut Frame,
    row: Rect,
    index: u32,
    metrics: &[Metric],
    capacity: usize,
    theme: Theme,
) {
    frame.render_widget(
        Label::new(format!("{index:>3}")).style(theme.label()),
        Rect::new(row.x, row.y, GPU_LABEL_WIDTH, 1),
    );
    let segment = segment_width(row.width, metrics.len());
    for (i, metric) in metrics.iter().enumerate() {
        let x = row.x + GPU_LABEL_WIDTH + i as u16 * (segment + 1);
        render_sparkline(
            frame,
            Rect::new(x, row.y, segment, 1),
            metric,
            capacity,
            theme,
        );
    }
}

fn render_stacked(
    frame: &mut Frame,
    row: Rect,
    index: u32,
    metrics: &[Metric],
    capacity: usize,
    theme: Theme,
) {
    let label_width = GPU_LABEL_WIDTH + METRIC_LABEL_WIDTH;
    let spark_width = row.width.saturating_sub(label_width + VALUE_WIDTH);
    for (i, metric) in metrics.iter().enumerate().take(usize::from(row.height)) {
        let y = row.y + i as u16;
        let gpu = if i == 0 {
            format!("{index:>3}")
        } else {
            String::new()
        };
        let label = format!("{gpu:<5}{:<7}", metric.name);
        frame.render_widget(
            Label::new(label).style(theme.label()),
            Rect::new(row.x, y, label_width, 1),
        );
        let spark = Rect::new(row.x + label_width, y, spark_width, 1);
        render_sparkline(frame, spark, metric, capacity, theme);
        let value = Line::from(format!("{:>9}", metric.current));
        frame.render_widget(
            Label::new(value).style(theme.plain()),
            Rect::new(spark.right(), y, VALUE_WIDTH, 1),
        );
    }
}

fn render_sparkline(frame: &mut Frame, area: Rect, metric: &Metric, capacity: usize, theme: Theme) {
    let bucket = bucket_size(capacity, usize::from(area.width));
    let data = newest_first_buckets(metric.series, bucket, usize::from(area.width))
        .into_iter()
        .map(|v| v.map(|v| (v / metric.unit).round() as u64));
    let mut sparkline = Sparkline::default()
        .data(data)
        .direction(RenderDirection::RightToLeft)
        .style(metric.style)
        .absent_value_symbol("·")
        .absent_value_style(theme.dim());
    if let Some(max) = metric.max.filter(|m| *m > 0) {
        sparkline = sparkline.max(max);
    }
    frame.render_widget(sparkline, area);
}

/// The sparkline's top when [`autoscaled`] data is drawn.
pub(crate) const AUTOSCALE_TOP: u64 = 1000;

/// Buckets scaled to the window's min..max, so that 8 to 8.6 GiB rises across the whole height:
/// the lowest value draws as the lowest bar (not as nothing), a flat series at mid height.
/// Returns the data for a sparkline of top [`AUTOSCALE_TOP`] and the (min, max) it spans;
/// `None` when the window has no value.
pub(crate) fn autoscaled(buckets: &[Option<f64>]) -> (Vec<Option<u64>>, Option<(f64, f64)>) {
    let present = buckets.iter().flatten().copied();
    let range = present.fold(None, |range: Option<(f64, f64)>, v| {
        Some(range.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
    });
    let data = buckets
        .iter()
        .map(|v| {
            let (v, (lo, hi)) = (v.as_ref()?, range?);
            let step = (AUTOSCALE_TOP - 1) as f64;
            Some(if hi > lo {
                1 + ((v - lo) / (hi - lo) * step).round() as u64
            } else {
                AUTOSCALE_TOP / 2
            })
        })
        .collect();
    (data, range)
}

/// How many samples each column stands for, so that a full history fits in `width` columns.
pub(crate) fn bucket_size(capacity: usize, width: usize) -> usize {
    if width == 0 {
        return 1;
    }
    capacity.div_ceil(width).max(1)
}

/// The series averaged over buckets of `bucket` samples, newest bucket first, at most `count`
/// buckets. A bucket with no value at all is a gap (`None`). One pass over the newest samples,
/// with no copy of the series: each sparkline of each frame calls this.
pub(crate) fn newest_first_buckets(
    series: &Series,
    bucket: usize,
    count: usize,
) -> Vec<Option<f64>> {
    let bucket = bucket.max(1);
    let mut buckets = Vec::with_capacity(count.min(series.iter().len().div_ceil(bucket)));
    let mut samples = series.iter().rev().take(count.saturating_mul(bucket));
    loop {
        // Summed newest first from -0.0, as `Iterator::sum` does, so averages are unchanged.
        let (mut sum, mut present, mut seen) = (-0.0, 0_u32, 0);
        for value in samples.by_ref().take(bucket) {
            seen += 1;
            if let Some(value) = value {
                sum += value;
                present += 1;
            }
        }
        if seen == 0 {
            return buckets;
        }
        buckets.push((present > 0).then(|| sum / f64::from(present)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_minutes_fit_in_the_width() {
        assert_eq!(bucket_size(301, 60), 6);
        assert_eq!(bucket_size(301, 400), 1);
        assert_eq!(bucket_size(301, 0), 1);
    }

    #[test]
    fn buckets_average_and_keep_gaps() {
        let mut series = Series::with_capacity(10);
        for v in [Some(1.0), None, None, Some(2.0), Some(4.0)] {
            series.push(v);
        }
        let buckets = newest_first_buckets(&series, 2, 10);
        assert_eq!(buckets, vec![Some(3.0), None, Some(1.0)]);
        assert_eq!(newest_first_buckets(&series, 2, 1), vec![Some(3.0)]);
    }

    #[test]
    fn a_seven_percent_rise_spans_the_whole_height() {
        const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
        let (data, range) = autoscaled(&[Some(8.6 * GIB), None, Some(8.15 * GIB), Some(8.0 * GIB)]);
        assert_eq!(range, Some((8.0 * GIB, 8.6 * GIB)));
        assert_eq!(data, vec![Some(AUTOSCALE_TOP), None, Some(251), Some(1)]);
        let (flat, _) = autoscaled(&[Some(5.0), Some(5.0)]);
        assert_eq!(flat, vec![Some(AUTOSCALE_TOP / 2); 2]);
        assert_eq!(autoscaled(&[None]), (vec![None], None));
    }
}
