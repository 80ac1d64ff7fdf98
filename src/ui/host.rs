//! The host: CPU use and load, RAM, swap, and the two vm settings training guides ask about.

use std::fmt::Write as _;

use super::label::Runs;
use ratatui::{layout::Rect, style::Style, Frame};

use crate::app::App;
use crate::format::{fit_left_aligned, push_left_aligned, shown, NA};
use crate::model::HostSnapshot;
use crate::terminal::theme::Theme;

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    if area.height == 0 {
        return;
    }
    let host = &app.snapshot.host;
    let mut scratch = super::scratch::take();
    let title = &mut scratch.runs;
    title.clear();
    title.push_with(Style::new(), |t| {
        let start = t.len();
        t.push_str(" HOST");
        if let Some(s) = host.uptime_seconds {
            let _ = write!(t, "  up {}", shown::duration(s));
        }
        // Padded (or cut) to the width, as the title always was.
        fit_left_aligned(t, start, usize::from(area.width));
    });
    title.end_line(Style::new());
    title.render_styled(
        Rect { height: 1, ..area },
        frame.buffer_mut(),
        theme.title(),
    );
    let body = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    let lines = title;
    lines.clear();
    write_lines(lines, host, theme);
    frame.render_widget(&*lines, body);
}

/// The four lines (CPU, RAM, swap, vm), span for span as they have always been drawn.
fn write_lines(out: &mut Runs, host: &HostSnapshot, theme: Theme) {
    let label = |out: &mut Runs, text: &str| {
        out.push_with(theme.label(), |t| {
            t.push(' ');
            push_left_aligned(t, text, 5);
        });
    };
    label(out, "CPU");
    out.push_with(Style::new(), |t| {
        let _ = write!(t, "{}", shown::percent_f(host.cpu_percent));
        if let Some(n) = host.cpu_count {
            let _ = write!(t, " of {n}");
        }
        t.push_str("  load ");
        match host.load {
            Some(l) => {
                let _ = write!(t, "{:.2} {:.2} {:.2}", l.one, l.five, l.fifteen);
            }
            None => t.push_str(NA),
        }
    });
    out.end_line(Style::new());
    let memory = &host.memory;
    let ram_fraction = match (memory.used_bytes, memory.total_bytes) {
        (Some(u), Some(t)) if t > 0 => Some(u as f64 / t as f64),
        _ => None,
    };
    label(out, "RAM");
    let used = shown::opt_bytes(memory.used_bytes);
    out.push_fmt(theme.level(ram_fraction), format_args!("used {used}"));
    let available = shown::opt_bytes(memory.available_bytes);
    let total = shown::opt_bytes(memory.total_bytes);
    out.push_fmt(
        Style::new(),
        format_args!("  avail {available}  of {total}"),
    );
    out.end_line(Style::new());
    let swap_style = match host.swap.used_bytes {
        Some(used) if used > 0 => theme.warn(),
        _ => theme.plain(),
    };
    label(out, "swap");
    let used = shown::opt_bytes(host.swap.used_bytes);
    let total = shown::opt_bytes(host.swap.total_bytes);
    out.push_fmt(swap_style, format_args!("used {used} of {total}"));
    out.end_line(Style::new());
    label(out, "vm");
    let swappiness = shown::count(host.vm.swappiness.map(u64::from));
    let overcommit = shown::count(host.vm.overcommit_memory.map(u64::from));
    out.push_fmt(
        Style::new(),
        format_args!("swappiness {swappiness}  overcommit_memory {overcommit}"),
    );
    out.end_line(Style::new());
}
