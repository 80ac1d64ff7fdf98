//! The top line: program, host, driver and CUDA versions, GPU count, refresh delay and time.

use ratatui::{
    layout::{Alignment, Rect},
    text::{Line, Span},
    widgets::Paragraph,
    Frame,
};

use crate::app::App;
use crate::format;
use crate::terminal::theme::Theme;

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let snapshot = &app.snapshot;
    let driver = &snapshot.driver;
    let gpus = match (driver.nvml_loaded, driver.gpu_count) {
        (true, Some(n)) => format!("{n} GPU{}", if n == 1 { "" } else { "s" }),
        (true, None) => format!("{} GPUs", snapshot.gpus.len()),
        (false, _) => "no NVML".to_string(),
    };
    let mut fields = vec![
        format::text(snapshot.host.hostname.as_deref()),
        format!("driver {}", format::text(driver.driver_version.as_deref())),
        format!("CUDA {}", format::text(driver.cuda_version.as_deref())),
        gpus,
        format!(
            "{}{:.1}s",
            if area.width >= 100 { "every " } else { "" },
            app.delay_seconds
        ),
    ];
    if snapshot.host.container.is_some() {
        fields.push(CONTAINER_NOTE.to_string());
    }
    let clock_text = clock_text(&snapshot.time);
    let badge = app
        .badge
        .as_deref()
        .map(|b| format!(" {} ", format::escape(b)));
    let badge_width = badge.as_ref().map_or(0, |b| b.chars().count() as u16);
    let width = clock_text.len() as u16 + badge_width;
    let room = usize::from(area.width.saturating_sub(width));
    let mut spans = vec![Span::styled("torchtop", theme.brand())];
    let mut used = "torchtop".len();
    for field in fields {
        if used + 2 + field.chars().count() > room {
            continue;
        }
        used += 2 + field.chars().count();
        spans.push(Span::raw("  "));
        spans.push(Span::styled(field, theme.plain()));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
    if let Some(badge) = badge {
        let badge_area = Rect::new(
            area.right().saturating_sub(width),
            area.y,
            badge_width.min(area.width),
            1,
        );
        frame.render_widget(
            Paragraph::new(badge).style(theme.readonly_badge()),
            badge_area,
        );
    }
    let clock_width = width - badge_width;
    let clock = Paragraph::new(clock_text).alignment(Alignment::Right);
    let clock_area = Rect::new(
        area.right().saturating_sub(clock_width),
        area.y,
        clock_width.min(area.width),
        1,
    );
    frame.render_widget(clock.style(theme.label()), clock_area);
}

/// Shown where torchtop runs in a container: NVML lists host pids, which its /proc lacks.
const CONTAINER_NOTE: &str =
    "inside a container: GPU processes of other containers show without host details";

/// " 12:34:56 UTC" from an RFC 3339 UTC time; empty before the first sample.
fn clock_text(time: &str) -> String {
    match time.split_once('T') {
        Some((_, rest)) => {
            let clock: String = rest.chars().take(8).collect();
            format!(" {clock} UTC")
        }
        None => String::new(),
    }
}
