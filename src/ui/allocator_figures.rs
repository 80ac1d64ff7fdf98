//! The PyTorch panel's figure lines for one CUDA device of a process: `memory_stats`' figures
//! as "name value" pairs, packed into as few lines as the width allows, written into a
//! [`Runs`]; and how many lines they take, counted without writing them, for the layout.

use std::fmt::Arguments;

use ratatui::style::Style;

use super::label::Runs;
use crate::format::{self, shown};
use crate::model::{DeviceAllocatorStats, TorchInfo};
use crate::terminal::theme::Theme;

/// A rate per second, as "1.2k/s".
struct Rate(Option<f64>);

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => f.write_str(format::NA),
            Some(v) if v >= 1000.0 => write!(f, "{:.1}k/s", v / 1000.0),
            Some(v) => write!(f, "{v:.0}/s"),
        }
    }
}

/// Each figure's name and value, in the order they are shown, handed to `each`.
fn each_figure(
    device: &DeviceAllocatorStats,
    torch: &TorchInfo,
    mut each: impl FnMut(&'static str, Arguments),
) {
    let b = shown::opt_bytes;
    let c = shown::count;
    each("allocated", format_args!("{}", b(device.allocated_bytes)));
    each("reserved", format_args!("{}", b(device.reserved_bytes)));
    each("peak", format_args!("{}", b(device.peak_allocated_bytes)));
    each(
        "peak-reserved",
        format_args!("{}", b(device.peak_reserved_bytes)),
    );
    each("active", format_args!("{}", b(device.active_bytes)));
    each(
        "inactive-split",
        format_args!("{}", b(device.inactive_split_bytes)),
    );
    each("requested", format_args!("{}", b(device.requested_bytes)));
    each(
        "large-pool",
        format_args!("{}", b(device.large_pool_reserved_bytes)),
    );
    each(
        "small-pool",
        format_args!("{}", b(device.small_pool_reserved_bytes)),
    );
    each("segments", format_args!("{}", c(device.segments)));
    match (device.oversize_allocations, device.oversize_segments) {
        (None, None) => each("oversize", format_args!("{}", format::NA)),
        (a, s) => each("oversize", format_args!("{} in {} segments", c(a), c(s))),
    }
    each(
        "allocs",
        format_args!("{}", Rate(device.allocations_per_second)),
    );
    each("frees", format_args!("{}", Rate(device.frees_per_second)));
    each("retries", format_args!("{}", c(device.alloc_retries)));
    each("OOMs", format_args!("{}", c(device.ooms)));
    each(
        "non-PyTorch",
        format_args!("{}", b(device.non_pytorch_bytes)),
    );
    match device.max_split_size_bytes {
        Some(bytes) => each("max-split", format_args!("{}", shown::bytes(bytes))),
        // Unlimited, or not reported: the agent's stats decide.
        None if device.reserved_bytes.is_some() => each("max-split", format_args!("unlimited")),
        None => each("max-split", format_args!("{}", format::NA)),
    }
    let conf = format::escape(torch.alloc_conf.as_deref().unwrap_or("default"));
    each("alloc-conf", format_args!("{conf}"));
}

/// Continuation lines of the figures line up under the first figure.
const FIGURE_INDENT: usize = 8;

/// The figures as "name value" pairs, packed into as few lines as the width allows, the first
/// line starting with the device's name, written into `out` as [`format::pack`] packs them
/// (each line starting with the indent, but the first with one space; pieces two spaces
/// apart), without a `String` or `Span` a figure.
pub(super) fn push_figure_lines(
    out: &mut Runs,
    device: &DeviceAllocatorStats,
    torch: &TorchInfo,
    width: usize,
    theme: Theme,
) {
    let (mut used, mut empty) = (FIGURE_INDENT, true);
    let mut piece = |out: &mut Runs, len: usize, write: &mut dyn FnMut(&mut Runs)| {
        if !empty && used + 2 + len > width {
            out.end_line(Style::new());
            push_indent(out);
            used = FIGURE_INDENT;
            empty = true;
        }
        if !empty {
            out.push(Style::new(), "  ");
            used += 2;
        }
        write(out);
        used += len;
        empty = false;
    };
    // The first line starts at column 1.
    out.push(Style::new(), " ");
    let cuda = format_args!("cuda:{}", device.index);
    piece(out, char_count(cuda), &mut |out| {
        out.push_fmt(theme.label(), cuda);
    });
    each_figure(device, torch, |name, value| {
        let style = if is_alarming(name, device) {
            theme.critical()
        } else {
            theme.plain()
        };
        let len = name.chars().count() + 1 + char_count(value);
        piece(out, len, &mut |out| {
            out.push_fmt(theme.dim(), format_args!("{name} "));
            out.push_fmt(style, value);
        });
    });
    out.end_line(Style::new());
}

/// The indent of a continuation line of figures.
fn push_indent(out: &mut Runs) {
    const INDENT: &str = "        ";
    out.push(Style::new(), &INDENT[..FIGURE_INDENT]);
}

/// How many lines [`push_figure_lines`] writes, counted from the pieces' widths as [`format::pack`]
/// packs them, without making them: the layout asks this of every process with an agent, each
/// frame.
pub(super) fn figure_line_count(
    device: &DeviceAllocatorStats,
    torch: &TorchInfo,
    width: usize,
) -> usize {
    let (mut lines, mut used, mut empty) = (0, FIGURE_INDENT, true);
    let mut piece = |len: usize| {
        if !empty && used + 2 + len > width {
            lines += 1;
            used = FIGURE_INDENT;
            empty = true;
        }
        if !empty {
            used += 2;
        }
        used += len;
        empty = false;
    };
    piece(char_count(format_args!("cuda:{}", device.index)));
    each_figure(device, torch, |name, value| {
        piece(name.chars().count() + 1 + char_count(value));
    });
    lines + usize::from(!empty)
}

/// The characters `args` writes, without keeping them.
fn char_count(args: Arguments) -> usize {
    struct Count(usize);
    impl std::fmt::Write for Count {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 += s.chars().count();
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = std::fmt::Write::write_fmt(&mut count, args);
    count.0
}

fn is_alarming(name: &str, device: &DeviceAllocatorStats) -> bool {
    match name {
        "OOMs" => device.ooms.is_some_and(|n| n > 0),
        "retries" => device.alloc_retries.is_some_and(|n| n > 0),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use ratatui::layout::Rect;
    use ratatui::text::{Line, Span};

    use super::*;
    use crate::ui::label::Label;

    /// The figures packed as lines of spans: what [`push_figure_lines`] writes, the tests'
    /// reference.
    fn figure_lines(
        device: &DeviceAllocatorStats,
        torch: &TorchInfo,
        width: usize,
        theme: Theme,
    ) -> Vec<Line<'static>> {
        let mut pieces = vec![vec![Span::styled(
            format!("cuda:{}", device.index),
            theme.label(),
        )]];
        each_figure(device, torch, |name, value| {
            let style = if is_alarming(name, device) {
                theme.critical()
            } else {
                theme.plain()
            };
            pieces.push(vec![
                Span::styled(format!("{name} "), theme.dim()),
                Span::styled(value.to_string(), style),
            ]);
        });
        // The first line starts at column 1.
        let mut lines = format::pack(pieces, width, FIGURE_INDENT);
        if let Some(first) = lines.first_mut().and_then(|l| l.spans.first_mut()) {
            first.content = " ".into();
        }
        lines
    }

    /// The count the layout plans with is the number of lines packed, and the lines written
    /// into `Runs` draw as the packed lines drew, whatever the figures and the width.
    #[test]
    fn figure_lines_are_counted_and_drawn_as_packed() {
        const GIB: u64 = 1 << 30;
        let full = DeviceAllocatorStats {
            index: 12,
            allocated_bytes: Some(30 * GIB),
            reserved_bytes: Some(38 * GIB),
            peak_allocated_bytes: Some(999),
            segments: Some(1234),
            oversize_allocations: Some(3),
            allocations_per_second: Some(12_345.6),
            frees_per_second: Some(7.0),
            alloc_retries: Some(2),
            max_split_size_bytes: Some(512 << 20),
            ..DeviceAllocatorStats::default()
        };
        let reserved_only = DeviceAllocatorStats {
            reserved_bytes: Some(1),
            ..DeviceAllocatorStats::default()
        };
        let torch = TorchInfo {
            alloc_conf: Some("expandable_segments:True,\u{1b}[2J".into()),
            ..TorchInfo::default()
        };
        let devices = [DeviceAllocatorStats::default(), full, reserved_only];
        for (device, theme) in devices.iter().flat_map(|d| [(d, false), (d, true)]) {
            let (device, theme) = (device.clone(), Theme::new(theme));
            for torch in [&TorchInfo::default(), &torch] {
                for width in 0..260 {
                    let lines = figure_lines(&device, torch, width, theme).len();
                    let counted = figure_line_count(&device, torch, width);
                    assert_eq!(counted, lines, "{device:?} at {width}");
                    let area = Rect::new(0, 0, u16::try_from(width).unwrap(), 12);
                    let mut theirs = ratatui::buffer::Buffer::empty(area);
                    let mut ours = theirs.clone();
                    let reference = figure_lines(&device, torch, width, theme);
                    ratatui::widgets::Widget::render(Label::new(reference), area, &mut theirs);
                    let mut runs = Runs::default();
                    push_figure_lines(&mut runs, &device, torch, width, theme);
                    ratatui::widgets::Widget::render(&runs, area, &mut ours);
                    assert_eq!(ours, theirs, "{device:?} at {width}");
                }
            }
        }
    }
}
