//! The host: CPU use and load, RAM, swap, and the two vm settings training guides ask about.

use super::label::Label;
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    Frame,
};

use crate::app::App;
use crate::format::{self, pad_left_aligned, NA};
use crate::model::HostSnapshot;
use crate::terminal::theme::Theme;

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    if area.height == 0 {
        return;
    }
    let host = &app.snapshot.host;
    let uptime = host
        .uptime_seconds
        .map_or(String::new(), |s| format!("  up {}", format::duration(s)));
    let title = pad_left_aligned(&format!(" HOST{uptime}"), usize::from(area.width));
    frame.render_widget(
        Label::new(title).style(theme.title()),
        Rect { height: 1, ..area },
    );
    let body = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    frame.render_widget(Label::new(lines(host, theme)), body);
}

fn lines(host: &HostSnapshot, theme: Theme) -> Vec<Line<'static>> {
    let label = |text: &str| Span::styled(format!(" {text:<5}"), theme.label());
    let cpus = host.cpu_count.map_or(String::new(), |n| format!(" of {n}"));
    let load = host.load.map_or(NA.to_string(), |l| {
        format!("{:.2} {:.2} {:.2}", l.one, l.five, l.fifteen)
    });
    let memory = &host.memory;
    let ram_fraction = match (memory.used_bytes, memory.total_bytes) {
        (Some(u), Some(t)) if t > 0 => Some(u as f64 / t as f64),
        _ => None,
    };
    let swap_style = match host.swap.used_bytes {
        Some(used) if used > 0 => theme.warn(),
        _ => theme.plain(),
    };
    vec![
        Line::from(vec![
            label("CPU"),
            Span::raw(format!(
                "{}{cpus}  load {load}",
                format::percent_f(host.cpu_percent)
            )),
        ]),
        Line::from(vec![
            label("RAM"),
            Span::styled(
                format!("used {}", format::opt_bytes(memory.used_bytes)),
                theme.level(ram_fraction),
            ),
            Span::raw(format!(
                "  avail {}  of {}",
                format::opt_bytes(memory.available_bytes),
                format::opt_bytes(memory.total_bytes)
            )),
        ]),
        Line::from(vec![
            label("swap"),
            Span::styled(
                format!(
                    "used {} of {}",
                    format::opt_bytes(host.swap.used_bytes),
                    format::opt_bytes(host.swap.total_bytes)
                ),
                swap_style,
            ),
        ]),
        Line::from(vec![
            label("vm"),
            Span::raw(format!(
                "swappiness {}  overcommit_memory {}",
                optional(host.vm.swappiness),
                optional(host.vm.overcommit_memory)
            )),
        ]),
    ]
}

fn optional(value: Option<u32>) -> String {
    value.map_or(NA.to_string(), |v| v.to_string())
}
