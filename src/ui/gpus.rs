//! The GPU table: one main line per GPU, its MIG sub-rows, plus detail lines ([`super::gpu_details`]: clocks,
//! PCIe, encoder, throttle reasons, ECC, bus id, UUID) when the layout has room. Also the
//! messages shown instead of the table when NVML is missing, finds no GPUs, or has not been
//! sampled yet.

use std::fmt::Write as _;

use super::gpu_details::{push_detail_lines, push_mig_lines};
use super::label::Runs;
use ratatui::{
    layout::Rect,
    style::Style,
    widgets::{Paragraph, Wrap},
    Frame,
};

use crate::app::view::Mark;
use crate::app::App;
use crate::format::{self, push_left_aligned, push_right_aligned, shown, NA};
use crate::model::{GpuSample, GpuState, Snapshot};
use crate::terminal::theme::Theme;

/// From this width the main line carries bars and longer labels.
const WIDE: u16 = 120;
/// Throttle reasons that mean the GPU is held back by heat or hardware, not just idle or capped.
const SEVERE_THROTTLE: [&str; 2] = ["thermal", "hw_"];

/// What is drawn under each GPU's main line: its MIG sub-rows or not, and how many detail
/// lines, as the layout granted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SubRows {
    pub(crate) mig: bool,
    pub(crate) detail_lines: u16,
}

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme, sub_rows: SubRows) {
    if area.height == 0 {
        return;
    }
    let columns = Columns::for_width(area.width);
    let title_area = Rect { height: 1, ..area };
    // One text for the title, then the table.
    let mut scratch = super::scratch::take();
    let lines = &mut scratch.runs;
    lines.clear();
    lines.push_with(Style::new(), |t| columns.write_title(t));
    lines.end_line(Style::new());
    lines.render_styled(title_area, frame.buffer_mut(), theme.title());
    let body = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    if let Some(message) = unavailable_message(&app.snapshot) {
        frame.render_widget(message_paragraph(message).style(theme.warn()), body);
        return;
    }
    let marked = match &app.view.mark {
        Some(Mark::Gpu(index)) => Some(*index),
        _ => None,
    };
    lines.clear();
    gpu_lines(
        lines,
        &app.snapshot.gpus,
        &columns,
        theme,
        sub_rows,
        body,
        marked,
    );
    frame.render_widget(&*lines, body);
}

/// The lines the message shown instead of the table wraps to at `width`; 0 when the table is
/// shown. The layout gives the message that many rows, so a driver's error is read whole.
pub(crate) fn message_line_count(snapshot: &Snapshot, width: u16) -> u16 {
    unavailable_message(snapshot).map_or(0, |message| {
        u16::try_from(message_paragraph(message).line_count(width)).unwrap_or(u16::MAX)
    })
}

/// The message as drawn: wrapped at word boundaries, so that counting its lines and drawing
/// it agree.
fn message_paragraph(message: String) -> Paragraph<'static> {
    Paragraph::new(message).wrap(Wrap { trim: true })
}

/// What to say instead of the table, when there is no GPU to show.
pub(crate) fn unavailable_message(snapshot: &Snapshot) -> Option<String> {
    let driver = &snapshot.driver;
    if snapshot.time.is_empty() {
        return Some("waiting for the first sample...".to_string());
    }
    if !driver.nvml_loaded && snapshot.gpus.is_empty() {
        // The loader's error is already a sentence that names the library.
        return Some(match driver.error.as_deref() {
            Some(error) => format::escape(error).into_owned(),
            None => format!(
                "NVML could not be loaded from {} (no reason was given)",
                format::escape(&driver.library)
            ),
        });
    }
    if snapshot.gpus.is_empty() {
        let version = format::text(driver.driver_version.as_deref());
        return Some(format!("NVIDIA driver {version} found no GPUs"));
    }
    None
}

fn gpu_lines(
    out: &mut Runs,
    gpus: &[GpuSample],
    columns: &Columns,
    theme: Theme,
    sub_rows: SubRows,
    body: Rect,
    marked: Option<u32>,
) {
    let detail_lines = sub_rows.detail_lines;
    let rows_of = |gpu: &GpuSample| {
        let mig = if sub_rows.mig {
            gpu.mig_devices.len()
        } else {
            0
        };
        1 + mig + usize::from(detail_lines)
    };
    let room = usize::from(body.height);
    let all: usize = gpus.iter().map(rows_of).sum();
    // When not every GPU fits, the last row says how many more there are.
    let shown = if all <= room {
        gpus.len()
    } else {
        let mut used = 0;
        gpus.iter()
            .take_while(|gpu| {
                used += rows_of(gpu);
                used < room
            })
            .count()
    };
    for gpu in &gpus[..shown] {
        columns.main_line(out, gpu, theme);
        if marked == Some(gpu.index) {
            out.end_line(theme.selected());
        } else {
            out.end_line(Style::new());
        }
        if sub_rows.mig {
            push_mig_lines(out, gpu, theme);
        }
        if detail_lines > 0 {
            push_detail_lines(out, gpu, theme, body.width, usize::from(detail_lines));
        }
    }
    if shown < gpus.len() {
        let hidden = gpus.len() - shown;
        out.push_fmt(
            Style::new(),
            format_args!("  +{hidden} more GPUs: enlarge the terminal to see them"),
        );
        out.end_line(theme.dim());
    }
}

/// The widths of the main line's columns at one terminal width.
struct Columns {
    wide: bool,
    name: usize,
    bar: usize,
    show_memory_util: bool,
    show_fan_and_pstate: bool,
}

impl Columns {
    fn for_width(width: u16) -> Self {
        let width = usize::from(width);
        let wide = width >= usize::from(WIDE);
        let show_memory_util = width >= 70;
        let show_fan_and_pstate = width >= 80;
        let mut fixed = 4 + 5 + 12 + 5 + 10 + 1 + state_width(wide);
        fixed += if show_memory_util { 5 } else { 0 };
        fixed += if show_fan_and_pstate { 5 + 4 } else { 0 };
        let (name, bar) = if wide {
            let spare = width.saturating_sub(fixed + 28);
            let bar = (spare / 2).saturating_sub(1).max(8);
            (width.saturating_sub(fixed + 2 * (bar + 1)).max(4), bar)
        } else {
            (width.saturating_sub(fixed).max(4), 0)
        };
        Columns {
            wide,
            name,
            bar,
            show_memory_util,
            show_fan_and_pstate,
        }
    }

    /// Writes the column titles at the end of `out`.
    fn write_title(&self, out: &mut String) {
        out.push_str("GPU ");
        push_left_aligned(out, "NAME", self.name);
        self.write_with_bar(out, "UTIL", 4);
        if self.show_memory_util {
            out.push_str(" MEMU");
        }
        self.write_with_bar(out, "MEMORY", 11);
        out.push_str(" TEMP     POWER");
        if self.show_fan_and_pstate {
            out.push_str("  FAN   P");
        }
        out.push(' ');
        push_left_aligned(out, "STATE", state_width(self.wide));
    }

    /// A column title over a value of `width`; when wide, left-aligned over the bar before it.
    fn write_with_bar(&self, out: &mut String, title: &str, width: usize) {
        out.push(' ');
        if self.wide {
            push_left_aligned(out, title, width + self.bar + 1);
        } else if title.chars().count() <= width {
            push_right_aligned(out, width, format_args!("{title}"));
        } else {
            // Cut to the width exactly: aligned either way.
            push_left_aligned(out, title, width);
        }
    }

    /// Writes the GPU's main line into `out`, span for span as it has always been drawn.
    fn main_line(&self, out: &mut Runs, gpu: &GpuSample, theme: Theme) {
        let utilization = gpu.utilization_percent.map(|u| f64::from(u) / 100.0);
        let values = if gpu.state == GpuState::Ok {
            theme.load(utilization)
        } else {
            theme.dim()
        };
        let (power_capped, thermal) = limits(gpu);
        let index_style = match (power_capped, thermal) {
            (_, true) => theme.limited(true),
            (true, false) => theme.limited(false),
            _ => theme.label(),
        };
        out.push_fmt(index_style, format_args!("{:>3} ", gpu.index));
        out.push_with(values, |t| {
            let name = format::escape(gpu.name.as_deref().unwrap_or(NA));
            let name = if self.wide {
                &name
            } else {
                name.trim_start_matches("NVIDIA ")
            };
            push_left_aligned(t, name, self.name);
        });
        self.push_bar(out, utilization, theme.load(utilization));
        let utilization_text = shown::percent(gpu.utilization_percent);
        out.push_spaced_right(values, 4, format_args!("{utilization_text}"));
        if self.show_memory_util {
            let text = shown::percent(gpu.memory_utilization_percent);
            out.push_spaced_right(values, 4, format_args!("{text}"));
        }
        let memory_fraction = gpu.memory_fraction();
        self.push_bar(out, memory_fraction, theme.memory_fill(memory_fraction));
        let memory = shown::used_of_total(gpu.memory_used_bytes, gpu.memory_total_bytes);
        let memory_style = theme.level(memory_fraction);
        out.push_spaced_right(memory_style, 11, format_args!("{memory}"));
        let temperature = shown::celsius(gpu.temperature_c);
        let temperature_style = if thermal {
            theme.limited(true)
        } else {
            theme.temperature(gpu.temperature_c)
        };
        out.push_spaced_right(temperature_style, 4, format_args!("{temperature}"));
        let power = shown::power_of_limit(gpu.power_w, gpu.power_limit_w);
        let power_style = if power_capped {
            theme.limited(false)
        } else {
            values
        };
        out.push_spaced_right(power_style, 9, format_args!("{power}"));
        if self.show_fan_and_pstate {
            let fan = shown::percent(gpu.fan_percent);
            out.push_with(values, |t| {
                t.push(' ');
                push_right_aligned(t, 4, format_args!("{fan}"));
                t.push(' ');
                match gpu.performance_state {
                    Some(p) => push_right_aligned(t, 3, format_args!("P{p}")),
                    None => push_right_aligned(t, 3, format_args!("{NA}")),
                }
            });
        }
        out.push(Style::new(), " ");
        out.push_styled_by(|t| write_badge(t, gpu, self.wide, theme));
    }

    fn push_bar(&self, out: &mut Runs, fraction: Option<f64>, style: Style) {
        if self.wide {
            out.push(Style::new(), " ");
            out.push_with(style, |t| push_horizontal_bar(t, fraction, self.bar));
        }
    }
}

/// Whether the GPU is held at its power cap (a throttle reason, or drawing 98% of its
/// limit), and whether at its thermal limit (a thermal throttle reason).
fn limits(gpu: &GpuSample) -> (bool, bool) {
    let reasons = gpu.throttle_reasons.as_deref().unwrap_or_default();
    let named = |part: &str| reasons.iter().any(|r| r.contains(part));
    let drawing_the_cap = match (gpu.power_w, gpu.power_limit_w) {
        (Some(w), Some(limit)) => limit > 0.0 && w >= 0.98 * limit,
        _ => false,
    };
    (named("power_cap") || drawing_the_cap, named("thermal"))
}

fn state_width(wide: bool) -> usize {
    if wide {
        16
    } else {
        12
    }
}

/// Writes the state badge at the end of `out` (OK, THROTTLED, STALE, UNRESPONSIVE (stale over
/// 10 s) or LOST), and returns its style.
fn write_badge(out: &mut String, gpu: &GpuSample, wide: bool, theme: Theme) -> Style {
    let (text, style) = match gpu.state {
        GpuState::Ok if severely_throttled(gpu) => ("THROTTLED", theme.warn()),
        GpuState::Ok => ("OK", theme.good()),
        GpuState::Lost => ("LOST", theme.critical()),
        GpuState::Stale => match gpu.stale_seconds {
            Some(s) if s > 10.0 && wide => {
                let _ = write!(out, "UNRESPONSIVE {s:.0}s");
                return theme.critical();
            }
            Some(s) if s > 10.0 => ("UNRESPONSIVE", theme.critical()),
            Some(s) => {
                let _ = write!(out, "STALE {s:.0}s");
                return theme.warn();
            }
            None => ("STALE", theme.warn()),
        },
    };
    out.push_str(text);
    style
}

fn severely_throttled(gpu: &GpuSample) -> bool {
    gpu.throttle_reasons.as_ref().is_some_and(|reasons| {
        reasons
            .iter()
            .any(|r| SEVERE_THROTTLE.iter().any(|s| r.contains(s)))
    })
}

/// A left-to-right bar of `width` cells in eighths, written at the end of `out`. A missing
/// value is a dotted track, as in the history's plots: the figure beside the bar already says
/// N/A, and an empty bar would read as 0%.
fn push_horizontal_bar(out: &mut String, fraction: Option<f64>, width: usize) {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let Some(fraction) = fraction else {
        out.extend(std::iter::repeat_n('·', width));
        return;
    };
    let eighths = (fraction.clamp(0.0, 1.0) * (width * 8) as f64).round() as usize;
    out.extend(std::iter::repeat_n('█', eighths / 8));
    let mut filled = eighths / 8;
    if eighths % 8 > 0 {
        out.push(PARTS[eighths % 8]);
        filled += 1;
    }
    format::push_spaces(out, width.saturating_sub(filled));
}
