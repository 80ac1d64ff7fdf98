//! The GPU table: one main line per GPU, plus detail lines (clocks, PCIe, encoder, throttle
//! reasons, ECC, bus id, UUID) when the layout has room. Also the messages shown instead of the
//! table when NVML is missing, finds no GPUs, or has not been sampled yet.

use std::fmt::Write as _;

use super::label::Runs;
use ratatui::{
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::{Paragraph, Wrap},
    Frame,
};

use crate::app::view::Mark;
use crate::app::App;
use crate::format::{self, push_left_aligned, push_right_aligned, shown, NA};
use crate::model::{GpuSample, GpuState, GpuVendor, Snapshot};
use crate::terminal::theme::Theme;

/// From this width the main line carries bars and longer labels.
const WIDE: u16 = 120;
/// Throttle reasons that mean the GPU is held back by heat or hardware, not just idle or capped.
const SEVERE_THROTTLE: [&str; 2] = ["thermal", "hw_"];

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme, detail_lines: u16) {
    if area.height == 0 {
        return;
    }
    let columns = Columns::for_width(area.width);
    let title_area = Rect { height: 1, ..area };
    // One text for the title, then the table.
    let mut lines = Runs::default();
    lines.push_with(Style::new(), |t| columns.write_title(t));
    lines.end_line(Style::new());
    lines.render_styled(title_area, frame.buffer_mut(), theme.title());
    let body = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    if let Some(message) = unavailable_message(&app.snapshot) {
        let text = Paragraph::new(message)
            .style(theme.warn())
            .wrap(Wrap { trim: true });
        frame.render_widget(text, body);
        return;
    }
    let marked = match &app.view.mark {
        Some(Mark::Gpu(index)) => Some(*index),
        _ => None,
    };
    lines.clear();
    gpu_lines(
        &mut lines,
        &app.snapshot.gpus,
        &columns,
        theme,
        detail_lines,
        body,
        marked,
    );
    frame.render_widget(&lines, body);
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
    detail_lines: u16,
    body: Rect,
    marked: Option<u32>,
) {
    let per_gpu = 1 + usize::from(detail_lines);
    let room = usize::from(body.height);
    let shown = if gpus.len() * per_gpu <= room {
        gpus.len()
    } else {
        room.saturating_sub(1) / per_gpu
    };
    for gpu in &gpus[..shown] {
        columns.main_line(out, gpu, theme);
        if marked == Some(gpu.index) {
            out.end_line(theme.selected());
        } else {
            out.end_line(Style::new());
        }
        if detail_lines > 0 {
            let mut detail = mig_lines(gpu, theme);
            detail.extend(self::detail(gpu, theme, body.width));
            detail.resize(usize::from(detail_lines), Line::default());
            for line in &detail {
                for span in &line.spans {
                    out.push(span.style, &span.content);
                }
                out.end_line(line.style);
            }
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

/// A left-to-right bar of `width` cells in eighths, written at the end of `out`; "N/A" text
/// when the value is missing.
fn push_horizontal_bar(out: &mut String, fraction: Option<f64>, width: usize) {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let Some(fraction) = fraction else {
        return push_left_aligned(out, NA, width);
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

/// The detail lines of one GPU packed to `width`: clocks, PCIe, codecs, throttle reasons, ECC
/// (only where it is on), bus id, UUID and the last error.
pub(crate) fn detail(gpu: &GpuSample, theme: Theme, width: u16) -> Vec<Line<'static>> {
    let mut pieces = Vec::new();
    detail_pieces(gpu, |piece| {
        pieces.push(vec![Span::styled(piece.to_string(), theme.dim())]);
    });
    format::pack(pieces, usize::from(width), DETAIL_INDENT)
}

/// How far detail lines are indented.
const DETAIL_INDENT: usize = 6;

/// The pieces of the detail lines, before packing, each handed to `each` as it is formatted.
fn detail_pieces(gpu: &GpuSample, mut each: impl FnMut(std::fmt::Arguments)) {
    each(format_args!("SM {}", shown::mhz(gpu.sm_clock_mhz)));
    each(format_args!("mem {}", shown::mhz(gpu.memory_clock_mhz)));
    // amdgpu's sysfs has no PCIe rate, codec or throttle figures: no column of N/As for them.
    if gpu.vendor == GpuVendor::Nvidia {
        each(format_args!(
            "PCIe rx {} tx {}",
            shown::kib_rate(gpu.pcie_rx_kib_s),
            shown::kib_rate(gpu.pcie_tx_kib_s)
        ));
        each(format_args!(
            "enc {} dec {}",
            shown::percent(gpu.encoder_percent),
            shown::percent(gpu.decoder_percent)
        ));
        each(format_args!("throttle {}", ThrottleText(gpu)));
    }
    let bus = format::escape(gpu.bus_id.as_deref().unwrap_or(NA));
    each(format_args!("bus {bus}"));
    if gpu.vendor == GpuVendor::Amd {
        match gpu.vendor_index {
            Some(i) => each(format_args!("AMD ROCm #{i}")),
            None => each(format_args!("AMD ROCm #{NA}")),
        }
        each(format_args!(
            "GTT {}",
            shown::used_of_total(gpu.gtt_used_bytes, gpu.gtt_total_bytes)
        ));
    }
    if gpu.ecc_enabled == Some(true) {
        each(format_args!(
            "ECC corrected {} uncorrected {}",
            shown::count(gpu.ecc_volatile_corrected),
            shown::count(gpu.ecc_volatile_uncorrected)
        ));
    }
    match gpu.uuid.as_deref() {
        Some(uuid) => each(format_args!("{}", format::escape(uuid))),
        None => each(format_args!("uuid {NA}")),
    }
    if let Some(error) = &gpu.error {
        each(format_args!("error: {}", format::escape(error)));
    }
}

/// Detail lines the busiest GPU needs at this width (its MIG sub-rows included); every GPU
/// gets that many. Counted from the pieces' widths as [`format::pack`] packs them, without
/// building the lines: the layout asks this every frame, even when no detail line fits.
pub(crate) fn detail_line_count(gpus: &[GpuSample], width: u16) -> u16 {
    gpus.iter()
        .map(|g| {
            let mut widths = Vec::new();
            detail_pieces(g, |piece| {
                let mut counted = CharCount(0);
                let _ = counted.write_fmt(piece);
                widths.push(counted.0);
            });
            let lines = packed_line_count(widths.into_iter(), usize::from(width));
            (g.mig_devices.len() + lines) as u16
        })
        .max()
        .unwrap_or(0)
}

/// Counts the characters written to it, and keeps none.
struct CharCount(usize);

impl std::fmt::Write for CharCount {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.chars().count();
        Ok(())
    }
}

/// The lines [`format::pack`] makes of pieces this wide at `width`, with [`DETAIL_INDENT`].
fn packed_line_count(widths: impl Iterator<Item = usize>, width: usize) -> usize {
    let (mut lines, mut used, mut empty) = (0, DETAIL_INDENT, true);
    for len in widths {
        if !empty && used + 2 + len > width {
            lines += 1;
            used = DETAIL_INDENT;
            empty = true;
        }
        if !empty {
            used += 2;
        }
        used += len;
        empty = false;
    }
    lines + usize::from(!empty)
}

/// Most pids named on a MIG sub-row; the rest are counted.
const MIG_ROW_PIDS: usize = 6;

/// One sub-row per MIG device: profile, instance ids, memory and the pids on it.
fn mig_lines(gpu: &GpuSample, theme: Theme) -> Vec<Line<'static>> {
    gpu.mig_devices
        .iter()
        .map(|mig| {
            let name = mig
                .name
                .as_deref()
                .map(|n| n.rsplit(" MIG ").next().unwrap_or(n));
            let id = |id: Option<u32>| id.map_or(NA.to_string(), |i| i.to_string());
            let mut pids: Vec<String> = (mig.pids.iter().take(MIG_ROW_PIDS))
                .map(u32::to_string)
                .collect();
            if mig.pids.len() > MIG_ROW_PIDS {
                pids.push(format!("+{}", mig.pids.len() - MIG_ROW_PIDS));
            }
            let text = format!(
                "  └ MIG {:<8} GI {:<2} CI {:<2} {:>13}  {}",
                format::text(name),
                id(mig.gpu_instance_id),
                id(mig.compute_instance_id),
                format::used_of_total(mig.memory_used_bytes, mig.memory_total_bytes),
                if pids.is_empty() {
                    "no processes".to_string()
                } else {
                    format!("pids {}", pids.join(" "))
                },
            );
            Line::styled(text, theme.plain())
        })
        .collect()
}

/// The throttle reasons, comma-separated; "none" for none, N/A when unknown.
struct ThrottleText<'a>(&'a GpuSample);

impl std::fmt::Display for ThrottleText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0.throttle_reasons {
            None => f.write_str(NA),
            Some(reasons) if reasons.is_empty() => f.write_str("none"),
            Some(reasons) => {
                for (i, reason) in reasons.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    f.write_str(reason)?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MigDevice;

    /// The count the layout plans with is the number of lines drawn.
    #[test]
    fn detail_line_count_is_the_lines_detail_packs() {
        let mut gpu = GpuSample {
            name: Some("NVIDIA H100 80GB HBM3".into()),
            sm_clock_mhz: Some(1980),
            pcie_rx_kib_s: Some(123_456),
            throttle_reasons: Some(vec!["gpu_idle".into(), "sw_power_cap".into()].into()),
            bus_id: Some("00000000:1B:00.0".into()),
            uuid: Some("GPU-9f3c1a52-7d1e-4b0a-8c51-0e8f2a6b7c11".into()),
            ..GpuSample::default()
        };
        for step in 0..3 {
            for width in 0..220 {
                let drawn = gpu.mig_devices.len() + detail(&gpu, Theme::new(true), width).len();
                let counted = detail_line_count(std::slice::from_ref(&gpu), width);
                assert_eq!(usize::from(counted), drawn, "step {step}, width {width}");
            }
            match step {
                0 => gpu.error = Some("the last NVML call timed out".into()),
                _ => gpu.mig_devices.push(MigDevice::default()),
            }
        }
    }
}
