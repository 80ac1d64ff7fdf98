//! Sparklines per GPU of the metrics chosen in the setup screen (F2; utilization, memory used
//! and power by default). The whole history span (5 minutes) is squeezed into the width
//! available, newest sample at the right edge. Also the auto-scaled sparkline ([`autoscaled`])
//! other panels use for figures whose change matters more than their size: it spans the
//! window's lowest to highest value, printed beside it.

use std::fmt::{Arguments, Write as _};

use super::label::Runs;
use super::scratch::Scratch;
use ratatui::{layout::Rect, style::Style, Frame};

use crate::app::App;
use crate::config::HistoryMetric;
use crate::format::{self, shown};
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
    let chosen = &app.ui.history;
    let empty = GpuHistory::default();
    let mut scratch = super::scratch::take();
    let Scratch {
        runs: text,
        buckets,
        ..
    } = &mut *scratch;
    text.clear();
    text.push_with(Style::new(), |t| {
        let span = format_args!("{:.0} min", HISTORY_SPAN_SECONDS / 60.0);
        if rows_per_gpu > 1 {
            let _ = write!(t, "HISTORY  last {span}, newest at the right");
        } else {
            // The first GPU's metrics, by name: every metric is named whatever the GPU reports.
            let names = if app.snapshot.gpus.is_empty() {
                &[][..]
            } else {
                &chosen[..]
            };
            write_compact_title(t, area.width, span, names);
        }
        format::fit_left_aligned(t, 0, usize::from(area.width));
    });
    text.end_line(Style::new());
    text.render_styled(
        Rect { height: 1, ..area },
        frame.buffer_mut(),
        theme.title(),
    );
    let capacity = app.history.capacity();
    // One vector of buckets for every sparkline of the frame.
    let mut y = area.y + 1;
    for gpu in &app.snapshot.gpus {
        if y + rows_per_gpu > area.bottom() {
            break;
        }
        let history = app.history.gpus.get(&gpu.index).unwrap_or(&empty);
        let row = Rect::new(area.x, y, area.width, rows_per_gpu);
        let metrics = metrics(gpu, history, chosen, theme);
        let sparklines = Sparklines {
            capacity,
            theme,
            buckets,
            text,
        };
        if rows_per_gpu > 1 {
            render_stacked(frame, row, gpu, metrics, sparklines);
        } else {
            render_side_by_side(frame, row, gpu.index, metrics, sparklines);
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
    /// Which metric, for its current value as text ([`write_current`]): only the stacked rows
    /// show it.
    which: HistoryMetric,
    style: Style,
}

/// The metrics the setup screen (F2) chose, in its order; a figure the GPU does not report
/// draws as gaps and reads N/A.
fn metrics<'a>(
    gpu: &'a GpuSample,
    history: &'a GpuHistory,
    chosen: &'a [HistoryMetric],
    theme: Theme,
) -> impl ExactSizeIterator<Item = Metric<'a>> + 'a {
    chosen.iter().map(move |m| metric(*m, gpu, history, theme))
}

fn metric<'a>(
    which: HistoryMetric,
    gpu: &GpuSample,
    history: &'a GpuHistory,
    theme: Theme,
) -> Metric<'a> {
    let name = metric_name(which);
    let plain = |series, unit, max, style| Metric {
        name,
        series,
        unit,
        max,
        which,
        style,
    };
    match which {
        HistoryMetric::Util => plain(
            &history.utilization_percent,
            1.0,
            Some(100),
            theme.utilization_bar(),
        ),
        // The scale the history kept, so that a lost GPU (which reports neither) draws its
        // past samples as they were drawn while it was alive.
        HistoryMetric::Memory => plain(
            &history.memory_used_bytes,
            BYTES_PER_MIB,
            (history.memory_total_bytes.or(gpu.memory_total_bytes)).map(|b| b / (1024 * 1024)),
            theme.memory_bar(),
        ),
        HistoryMetric::Power => plain(
            &history.power_w,
            1.0,
            (history.power_limit_w.or(gpu.power_limit_w)).map(|w| w.round() as u64),
            theme.power_bar(),
        ),
        HistoryMetric::Temperature => plain(
            &history.temperature_c,
            1.0,
            Some(100),
            theme.temperature(gpu.temperature_c),
        ),
        HistoryMetric::SmClock => plain(&history.sm_clock_mhz, 1.0, None, theme.label()),
        HistoryMetric::MemoryClock => plain(&history.memory_clock_mhz, 1.0, None, theme.label()),
        HistoryMetric::PcieRx => plain(&history.pcie_rx_kib_s, 1024.0, None, theme.label()),
        HistoryMetric::PcieTx => plain(&history.pcie_tx_kib_s, 1024.0, None, theme.label()),
        HistoryMetric::Encoder => plain(
            &history.encoder_percent,
            1.0,
            Some(100),
            theme.utilization_bar(),
        ),
        HistoryMetric::Decoder => plain(
            &history.decoder_percent,
            1.0,
            Some(100),
            theme.utilization_bar(),
        ),
    }
}

/// A metric's name, over its sparkline.
fn metric_name(which: HistoryMetric) -> &'static str {
    match which {
        HistoryMetric::Util => "util",
        HistoryMetric::Memory => "memory",
        HistoryMetric::Power => "power",
        HistoryMetric::Temperature => "temp",
        HistoryMetric::SmClock => "sm clk",
        HistoryMetric::MemoryClock => "memclk",
        HistoryMetric::PcieRx => "pci rx",
        HistoryMetric::PcieTx => "pci tx",
        HistoryMetric::Encoder => "enc",
        HistoryMetric::Decoder => "dec",
    }
}

/// Writes a metric's current value as text, beside its stacked sparkline, at the end of `out`.
fn write_current(out: &mut String, which: HistoryMetric, gpu: &GpuSample) {
    let _ = match which {
        HistoryMetric::Util => write!(out, "{}", shown::percent(gpu.utilization_percent)),
        HistoryMetric::Memory => write!(out, "{}", shown::opt_bytes_short(gpu.memory_used_bytes)),
        HistoryMetric::Power => write!(out, "{}", shown::watts(gpu.power_w)),
        HistoryMetric::Temperature => write!(out, "{}", shown::celsius(gpu.temperature_c)),
        HistoryMetric::SmClock => write!(out, "{}", shown::mhz(gpu.sm_clock_mhz)),
        HistoryMetric::MemoryClock => write!(out, "{}", shown::mhz(gpu.memory_clock_mhz)),
        HistoryMetric::PcieRx => write_rate(out, gpu.pcie_rx_kib_s),
        HistoryMetric::PcieTx => write_rate(out, gpu.pcie_tx_kib_s),
        HistoryMetric::Encoder => write!(out, "{}", shown::percent(gpu.encoder_percent)),
        HistoryMetric::Decoder => write!(out, "{}", shown::percent(gpu.decoder_percent)),
    };
}

/// A PCIe rate given in KiB/s, in short byte units with "/s"; N/A when missing.
fn write_rate(out: &mut String, kib: Option<u32>) -> std::fmt::Result {
    match kib {
        Some(k) => write!(out, "{}/s", shown::bytes_short(u64::from(k) * 1024)),
        None => out.write_str(format::NA),
    }
}

/// "HIST" and each metric's name over its sparkline, then the span, written at the end of
/// `out`.
fn write_compact_title(out: &mut String, width: u16, span: Arguments, metrics: &[HistoryMetric]) {
    let segment = segment_width(width, metrics.len());
    let start = out.len();
    format::push_left_aligned(out, "HIST", usize::from(GPU_LABEL_WIDTH));
    for metric in metrics {
        format::push_left_aligned(out, metric_name(*metric), usize::from(segment + 1));
    }
    out.truncate(start + out[start..].trim_end().len());
    let _ = write!(out, "  (last {span})");
}

/// The cells of each of `count` sparklines side by side on one row.
fn segment_width(width: u16, count: usize) -> u16 {
    let count = u16::try_from(count.max(1)).unwrap_or(u16::MAX);
    (width.saturating_sub(GPU_LABEL_WIDTH) / count).saturating_sub(1)
}

/// What every sparkline of a frame shares: the history's length, the theme, and one vector
/// of buckets, refilled for each.
struct Sparklines<'b> {
    capacity: usize,
    theme: Theme,
    buckets: &'b mut Vec<Option<f64>>,
    /// Text for the labels beside the sparklines.
    text: &'b mut Runs,
}

fn render_side_by_side<'m>(
    frame: &mut Frame,
    row: Rect,
    index: u32,
    metrics: impl ExactSizeIterator<Item = Metric<'m>>,
    mut sparklines: Sparklines,
) {
    let text = &mut *sparklines.text;
    text.clear();
    text.push_fmt(Style::new(), format_args!("{index:>3}"));
    text.end_line(Style::new());
    let label = Rect::new(row.x, row.y, GPU_LABEL_WIDTH, 1);
    text.render_styled(label, frame.buffer_mut(), sparklines.theme.label());
    let segment = segment_width(row.width, metrics.len());
    for (i, metric) in metrics.enumerate() {
        let x = row.x + GPU_LABEL_WIDTH + i as u16 * (segment + 1);
        let area = Rect::new(x, row.y, segment, 1);
        render_sparkline(frame, area, &metric, &mut sparklines);
    }
}

fn render_stacked<'m>(
    frame: &mut Frame,
    row: Rect,
    gpu: &GpuSample,
    metrics: impl Iterator<Item = Metric<'m>>,
    mut sparklines: Sparklines,
) {
    let theme = sparklines.theme;
    let label_width = GPU_LABEL_WIDTH + METRIC_LABEL_WIDTH;
    let spark_width = row.width.saturating_sub(label_width + VALUE_WIDTH);
    for (i, metric) in metrics.enumerate().take(usize::from(row.height)) {
        let y = row.y + i as u16;
        // "{index:>3}" on the first row, padded to 5, then the name padded to 7.
        let text = &mut *sparklines.text;
        text.clear();
        text.push_with(Style::new(), |t| {
            if i == 0 {
                format::push_right_aligned(t, 3, format_args!("{}", gpu.index));
            }
            format::pad_back(t, 0, 5);
            let name = t.len();
            t.push_str(metric.name);
            format::pad_back(t, name, 7);
        });
        text.end_line(Style::new());
        let label = Rect::new(row.x, y, label_width, 1);
        text.render_styled(label, frame.buffer_mut(), theme.label());
        let spark = Rect::new(row.x + label_width, y, spark_width, 1);
        render_sparkline(frame, spark, &metric, &mut sparklines);
        let text = &mut *sparklines.text;
        text.clear();
        text.push_with(Style::new(), |t| {
            write_current(t, metric.which, gpu);
            format::pad_front(t, 0, 9);
        });
        text.end_line(Style::new());
        let value = Rect::new(spark.right(), y, VALUE_WIDTH, 1);
        text.render_styled(value, frame.buffer_mut(), theme.plain());
    }
}

/// The metric's sparkline, drawn cell for cell as ratatui's `Sparkline` draws it (right to
/// left from the newest bucket, nine levels a row, "·" in the dim style for a gap), without
/// its vectors of bars and symbols each frame. Unlike `Sparkline`, a value above zero is never
/// blank: it gets at least the lowest bar, as in nvtop and nvitop, since a blank cell reads as
/// no data (70 W of a 700 W limit rounds to no eighth); zero stays blank, a gap is "·".
fn render_sparkline(frame: &mut Frame, area: Rect, metric: &Metric, sparklines: &mut Sparklines) {
    let bucket = bucket_size(sparklines.capacity, usize::from(area.width));
    let buckets = &mut *sparklines.buckets;
    newest_first_buckets_into(metric.series, bucket, usize::from(area.width), buckets);
    let unit = metric.unit;
    let value = |v: &Option<f64>| v.map(|v| (v / unit).round() as u64);
    let max = match metric.max.filter(|m| *m > 0) {
        Some(max) => max,
        None => buckets.iter().filter_map(value).max().unwrap_or(1),
    };
    let absent_style = metric.style.patch(sparklines.theme.dim());
    let buf = frame.buffer_mut();
    if area.is_empty() {
        return;
    }
    let rows = u64::from(area.height) * 8;
    for (i, bucket) in buckets.iter().take(usize::from(area.width)).enumerate() {
        let x = area.right() - i as u16 - 1;
        let Some(v) = value(bucket) else {
            for y in area.top()..area.bottom() {
                buf[(x, y)].set_symbol("·").set_style(absent_style);
            }
            continue;
        };
        let above_zero = bucket.is_some_and(|raw| raw > 0.0);
        let mut height = scale_height(v, max, rows).max(u64::from(above_zero));
        for y in (area.top()..area.bottom()).rev() {
            let symbol = symbol_for_height(height);
            height = height.saturating_sub(8);
            buf[(x, y)].set_symbol(symbol).set_style(metric.style);
        }
    }
}

/// The eighths of `rows` (eighths of the area's height) that `value` fills, out of `max`, as
/// ratatui's `Sparkline` scales a bar.
fn scale_height(value: u64, max: u64, rows: u64) -> u64 {
    if max == 0 {
        return 0;
    }
    let ticks = u128::from(value) * u128::from(rows) / u128::from(max);
    ticks.min(u128::from(rows)) as u64
}

/// The symbol of a cell with `height` eighths left to fill, in `Sparkline`'s nine levels.
fn symbol_for_height(height: u64) -> &'static str {
    let set = ratatui::symbols::bar::NINE_LEVELS;
    match height {
        0 => set.empty,
        1 => set.one_eighth,
        2 => set.one_quarter,
        3 => set.three_eighths,
        4 => set.half,
        5 => set.five_eighths,
        6 => set.three_quarters,
        7 => set.seven_eighths,
        _ => set.full,
    }
}

/// The sparkline's top when [`autoscaled`] data is drawn.
pub(crate) const AUTOSCALE_TOP: u64 = 1000;

/// Buckets scaled to the window's min..max, so that 8 to 8.6 GiB rises across the whole height:
/// the lowest value draws as the lowest bar (not as nothing), a flat series at mid height.
/// `range` is the (min, max) of the raw samples the buckets cover
/// ([`newest_first_buckets_into`]), so that the scale and the figures printed beside it are
/// the window's true extremes, not those of bucket values. Returns the data for a sparkline of
/// top [`AUTOSCALE_TOP`]; gaps stay `None`.
pub(crate) fn autoscaled(buckets: &[Option<f64>], range: Option<(f64, f64)>) -> Vec<Option<u64>> {
    buckets
        .iter()
        .map(|v| {
            let (v, (lo, hi)) = (v.as_ref()?, range?);
            let step = (AUTOSCALE_TOP - 1) as f64;
            Some(if hi > lo {
                1 + ((v - lo) / (hi - lo) * step).round().clamp(0.0, step) as u64
            } else {
                AUTOSCALE_TOP / 2
            })
        })
        .collect()
}

/// How many samples each column stands for, so that a full history fits in `width` columns.
pub(crate) fn bucket_size(capacity: usize, width: usize) -> usize {
    if width == 0 {
        return 1;
    }
    capacity.div_ceil(width).max(1)
}

/// The lowest and highest of the raw samples a sparkline covers.
pub(crate) type Range = Option<(f64, f64)>;

/// The series in buckets of `bucket` samples, newest bucket first, at most `count` buckets,
/// each the highest sample in it: a one-sample spike (the allocation before an OOM, a
/// utilization drop's recovery) shows at its height instead of averaged away, as nvtop shows
/// every sample. A bucket with no value at all is a gap (`None`). Also returns the (min, max)
/// of every sample the buckets cover. One pass over the newest samples, with no copy of the
/// series: each sparkline of each frame calls this.
pub(crate) fn newest_first_buckets(
    series: &Series,
    bucket: usize,
    count: usize,
) -> (Vec<Option<f64>>, Range) {
    let mut buckets = Vec::new();
    let range = newest_first_buckets_into(series, bucket, count, &mut buckets);
    (buckets, range)
}

/// [`newest_first_buckets`] into `buckets`, emptied first: a vector reused across sparklines.
pub(crate) fn newest_first_buckets_into(
    series: &Series,
    bucket: usize,
    count: usize,
    buckets: &mut Vec<Option<f64>>,
) -> Range {
    let bucket = bucket.max(1);
    buckets.clear();
    let (older, newer) = series.as_slices();
    let len = older.len() + newer.len();
    buckets.reserve(count.min(len.div_ceil(bucket)));
    let mut range: Range = None;
    // Bucket by bucket from the newest sample: `end` is where the next bucket ends (exclusive),
    // counted from the oldest.
    let mut end = len;
    while end > 0 && buckets.len() < count {
        let start = end.saturating_sub(bucket);
        let split = older.len();
        let newer_part = &newer[start.max(split) - split..end.max(split) - split];
        let older_part = &older[start.min(split)..end.min(split)];
        let mut peak: Option<f64> = None;
        for &value in newer_part.iter().chain(older_part).flatten() {
            peak = Some(peak.map_or(value, |p| p.max(value)));
            range = Some(range.map_or((value, value), |(lo, hi)| (lo.min(value), hi.max(value))));
        }
        buckets.push(peak);
        end = start;
    }
    range
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

    /// A review: the allocator panel printed `104M … 104M` under `allocated 108.0MiB`, the
    /// buckets' averages; a bucket is its highest sample, and the range the raw samples'.
    #[test]
    fn buckets_keep_their_peak_and_gaps_and_the_range_is_the_samples() {
        let mut series = Series::with_capacity(10);
        for v in [Some(1.0), None, None, Some(2.0), Some(4.0)] {
            series.push(v);
        }
        let (buckets, range) = newest_first_buckets(&series, 2, 10);
        assert_eq!(buckets, vec![Some(4.0), None, Some(1.0)]);
        assert_eq!(range, Some((1.0, 4.0)));
        // Only the samples of the buckets drawn count.
        assert_eq!(
            newest_first_buckets(&series, 2, 1),
            (vec![Some(4.0)], Some((2.0, 4.0)))
        );
        let empty = Series::with_capacity(3);
        assert_eq!(newest_first_buckets(&empty, 2, 4), (vec![], None));
    }

    /// Buckets taken from the ring's two slices are the buckets of the samples in order,
    /// wherever the ring has wrapped.
    #[test]
    fn buckets_across_the_ring_wrap_are_the_plain_buckets() {
        let mut series = Series::with_capacity(7);
        for step in 0..20_u32 {
            series.push((step % 3 != 0).then_some(f64::from(step) * 1.1));
            let newest_first: Vec<Option<f64>> = series.iter().rev().collect();
            for bucket in 1..5 {
                for count in 0..9 {
                    let plain: Vec<Option<f64>> = newest_first
                        .chunks(bucket)
                        .take(count)
                        .map(|chunk| chunk.iter().flatten().copied().reduce(f64::max))
                        .collect();
                    let (ours, _) = newest_first_buckets(&series, bucket, count);
                    assert_eq!(ours, plain, "step {step}, bucket {bucket}, count {count}");
                }
            }
        }
    }

    #[test]
    fn a_seven_percent_rise_spans_the_whole_height() {
        const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
        let range = Some((8.0 * GIB, 8.6 * GIB));
        let data = autoscaled(
            &[Some(8.6 * GIB), None, Some(8.15 * GIB), Some(8.0 * GIB)],
            range,
        );
        assert_eq!(data, vec![Some(AUTOSCALE_TOP), None, Some(251), Some(1)]);
        let flat = autoscaled(&[Some(5.0), Some(5.0)], Some((5.0, 5.0)));
        assert_eq!(flat, vec![Some(AUTOSCALE_TOP / 2); 2]);
        assert_eq!(autoscaled(&[None], None), vec![None]);
    }
}
