//! The GPU table's lines under each GPU's main line: one sub-row per MIG device (shown with
//! the GPU lines), then the detail lines: clocks, PCIe, codecs, throttle reasons, ECC (only
//! where it is on), bus id, UUID and the last error, packed to the width two spaces apart.
//! Written straight into the panel's [`Runs`], and counted for the layout
//! ([`mig_line_count`], [`detail_line_count`]) without being written.

use std::fmt::{Arguments, Write as _};

use ratatui::style::Style;

use super::label::Runs;
use crate::format::{self, shown, NA};
use crate::model::{GpuSample, GpuVendor, MigDevice};
use crate::terminal::theme::Theme;

/// How far detail lines are indented.
const DETAIL_INDENT: &str = "      ";
/// Most pids named on a MIG sub-row; the rest are counted.
const MIG_ROW_PIDS: usize = 6;

/// Writes one sub-row per MIG device of `gpu` into `out`. The layout grants these with the GPU
/// lines ([`mig_line_count`]), not with the detail lines.
pub(crate) fn push_mig_lines(out: &mut Runs, gpu: &GpuSample, theme: Theme) {
    for mig in &gpu.mig_devices {
        out.push_with(theme.plain(), |t| write_mig_line(t, gpu.index, mig));
        out.end_line(Style::new());
    }
}

/// The MIG sub-rows of every GPU together.
pub(crate) fn mig_line_count(gpus: &[GpuSample]) -> u16 {
    let rows: usize = gpus.iter().map(|g| g.mig_devices.len()).sum();
    u16::try_from(rows).unwrap_or(u16::MAX)
}

/// Writes exactly `lines` detail lines of `gpu` packed to `width` into `out`: the packed
/// pieces, cut after `lines`, or followed by empty lines up to it.
pub(crate) fn push_detail_lines(
    out: &mut Runs,
    gpu: &GpuSample,
    theme: Theme,
    width: u16,
    lines: usize,
) {
    let mut written = 0;
    let mut packer = Packer {
        out,
        style: theme.dim(),
        width: usize::from(width),
        used: 0,
        empty: true,
        written: 0,
        room: lines - written,
    };
    detail_pieces(gpu, |piece| packer.piece(piece));
    written += packer.finish();
    for _ in written..lines {
        out.end_line(Style::new());
    }
}

/// Packs pieces into lines as [`format::pack`] does, each line starting with the indent, the
/// pieces two spaces apart, ending no more than `room` lines.
struct Packer<'r> {
    out: &'r mut Runs,
    style: Style,
    width: usize,
    /// Characters on the line being written.
    used: usize,
    /// Whether that line has no piece yet.
    empty: bool,
    /// Lines ended so far.
    written: usize,
    room: usize,
}

impl Packer<'_> {
    fn piece(&mut self, piece: Arguments) {
        if self.written == self.room {
            return;
        }
        let len = char_count(piece);
        if !self.empty && self.used + 2 + len > self.width {
            self.out.end_line(Style::new());
            self.written += 1;
            self.empty = true;
            if self.written == self.room {
                return;
            }
        }
        if self.empty {
            self.out.push(Style::new(), DETAIL_INDENT);
            self.used = DETAIL_INDENT.len();
        } else {
            self.out.push(Style::new(), "  ");
            self.used += 2;
        }
        self.out.push_fmt(self.style, piece);
        self.used += len;
        self.empty = false;
    }

    /// Ends the last line; how many lines were ended in all.
    fn finish(mut self) -> usize {
        if !self.empty && self.written < self.room {
            self.out.end_line(Style::new());
            self.written += 1;
        }
        self.written
    }
}

/// The characters `piece` writes, without keeping them.
fn char_count(piece: Arguments) -> usize {
    let mut counted = CharCount(0);
    let _ = counted.write_fmt(piece);
    counted.0
}

/// The pieces of the detail lines, before packing, each handed to `each` as it is formatted.
fn detail_pieces(gpu: &GpuSample, mut each: impl FnMut(Arguments)) {
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

/// Detail lines the busiest GPU needs at this width (not its MIG sub-rows); every GPU gets
/// that many. Counted from the pieces' widths as [`format::pack`] packs them, without
/// writing the lines: the layout asks this every frame, even when no detail line fits.
pub(crate) fn detail_line_count(gpus: &[GpuSample], width: u16) -> u16 {
    let width = usize::from(width);
    gpus.iter()
        .map(|g| {
            let (mut lines, mut used, mut empty) = (0, DETAIL_INDENT.len(), true);
            detail_pieces(g, |piece| {
                let len = char_count(piece);
                if !empty && used + 2 + len > width {
                    lines += 1;
                    used = DETAIL_INDENT.len();
                    empty = true;
                }
                if !empty {
                    used += 2;
                }
                used += len;
                empty = false;
            });
            let lines = lines + usize::from(!empty);
            u16::try_from(lines).unwrap_or(u16::MAX)
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

/// A MIG device's sub-row: its place as the process table's GPU column writes it (`0:1`),
/// profile, instance ids, memory and the pids on it, as
/// `"  └ MIG {:<4} {:<8} GI {:<2} CI {:<2} {:>13}  {}"` lays them out.
fn write_mig_line(out: &mut String, gpu: u32, mig: &MigDevice) {
    let name = mig
        .name
        .as_deref()
        .map(|n| n.rsplit(" MIG ").next().unwrap_or(n));
    let name = format::escape(name.unwrap_or(NA));
    out.push_str("  └ MIG ");
    let place = out.len();
    let _ = write!(out, "{gpu}:{}", mig.index);
    let pad = 4usize.saturating_sub(out.len() - place);
    let _ = write!(out, "{:pad$} {name:<8} GI ", "");
    write_id(out, mig.gpu_instance_id);
    out.push_str(" CI ");
    write_id(out, mig.compute_instance_id);
    // A String for the memory, the one left: MIG sub-rows are rare, and format::used_of_total
    // would have no other user.
    let memory = format::used_of_total(mig.memory_used_bytes, mig.memory_total_bytes);
    let _ = write!(out, " {memory:>13}  ");
    if mig.pids.is_empty() {
        out.push_str("no processes");
        return;
    }
    out.push_str("pids");
    for pid in mig.pids.iter().take(MIG_ROW_PIDS) {
        let _ = write!(out, " {pid}");
    }
    if mig.pids.len() > MIG_ROW_PIDS {
        let _ = write!(out, " +{}", mig.pids.len() - MIG_ROW_PIDS);
    }
}

/// An instance id left-aligned in two characters, or N/A.
fn write_id(out: &mut String, id: Option<u32>) {
    let _ = match id {
        Some(id) => write!(out, "{id:<2}"),
        None => write!(out, "{NA:<2}"),
    };
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
    use ratatui::buffer::Buffer;
    use ratatui::layout::Rect;
    use ratatui::text::{Line, Span};
    use ratatui::widgets::Widget;

    use super::*;
    use crate::ui::label::Label;

    /// The detail lines as they were built before they were written into `Runs`: MIG
    /// sub-rows by `format!`, then pieces packed by `format::pack`, cut or padded to `lines`.
    fn reference(
        gpu: &GpuSample,
        theme: Theme,
        width: u16,
        lines: Option<usize>,
    ) -> Vec<Line<'static>> {
        let mut out: Vec<Line> = (gpu.mig_devices.iter())
            .map(|mig| {
                let name = (mig.name.as_deref()).map(|n| n.rsplit(" MIG ").next().unwrap_or(n));
                let id = |id: Option<u32>| id.map_or(NA.to_string(), |i| i.to_string());
                let mut pids: Vec<String> = (mig.pids.iter().take(MIG_ROW_PIDS))
                    .map(u32::to_string)
                    .collect();
                if mig.pids.len() > MIG_ROW_PIDS {
                    pids.push(format!("+{}", mig.pids.len() - MIG_ROW_PIDS));
                }
                let text = format!(
                    "  └ MIG {:<4} {:<8} GI {:<2} CI {:<2} {:>13}  {}",
                    format!("{}:{}", gpu.index, mig.index),
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
            .collect();
        let mut pieces = Vec::new();
        detail_pieces(gpu, |piece| {
            pieces.push(vec![Span::styled(piece.to_string(), theme.dim())]);
        });
        let mut packed = format::pack(pieces, usize::from(width), DETAIL_INDENT.len());
        if let Some(lines) = lines {
            packed.resize(lines, Line::default());
        }
        out.extend(packed);
        out
    }

    fn gpu() -> GpuSample {
        GpuSample {
            name: Some("NVIDIA H100 80GB HBM3".into()),
            sm_clock_mhz: Some(1980),
            pcie_rx_kib_s: Some(123_456),
            throttle_reasons: Some(vec!["gpu_idle".into(), "sw_power_cap".into()].into()),
            bus_id: Some("00000000:1B:00.0".into()),
            uuid: Some("GPU-9f3c1a52-7d1e-4b0a-8c51-0e8f2a6b7c11".into()),
            ..GpuSample::default()
        }
    }

    /// Each step adds to the GPU: an error, then MIG devices with and without pids.
    fn step(gpu: &mut GpuSample, step: usize) {
        match step {
            0 => gpu.error = Some("the last NVML call timed out".into()),
            1 => gpu.mig_devices.push(MigDevice::default()),
            _ => gpu.mig_devices.push(MigDevice {
                name: Some("NVIDIA A100 MIG 3g.40gb".into()),
                gpu_instance_id: Some(2),
                compute_instance_id: Some(0),
                memory_used_bytes: Some(5 << 30),
                memory_total_bytes: Some(40 << 30),
                pids: (100..100 + step as u32 * 3).collect(),
                ..MigDevice::default()
            }),
        }
    }

    /// The count the layout plans with is the number of lines the details need.
    #[test]
    fn detail_line_count_is_the_lines_detail_packs() {
        let mut gpu = gpu();
        for s in 0..4 {
            for width in 0..220 {
                let drawn = reference(&gpu, Theme::new(true), width, None).len();
                let gpus = std::slice::from_ref(&gpu);
                let counted = detail_line_count(gpus, width) + mig_line_count(gpus);
                assert_eq!(usize::from(counted), drawn, "step {s}, width {width}");
            }
            step(&mut gpu, s);
        }
    }

    /// The lines written into `Runs` draw what the lines built before drew, at every width and
    /// line count, cut or padded.
    #[test]
    fn detail_lines_draw_as_the_packed_lines_drew() {
        let theme = Theme::new(true);
        let mut gpu = gpu();
        for s in 0..5 {
            for width in [20, 40, 80, 120, 200] {
                for lines in 0..8 {
                    let area = Rect::new(0, 0, width, 12);
                    let (mut theirs, mut ours) = (Buffer::empty(area), Buffer::empty(area));
                    Label::new(reference(&gpu, theme, width, Some(lines)))
                        .render(area, &mut theirs);
                    let mut runs = Runs::default();
                    push_mig_lines(&mut runs, &gpu, theme);
                    push_detail_lines(&mut runs, &gpu, theme, width, lines);
                    (&runs).render(area, &mut ours);
                    assert_eq!(ours, theirs, "step {s}, width {width}, {lines} lines");
                }
            }
            step(&mut gpu, s);
        }
    }
}
