//! View 4, the timeline: memory in use over the trace's events as bars (one column per group of
//! events, the group's highest level), OOM and snapshot markers under them, and a cursor. Below:
//! the event under the cursor, what was live after it, and the five largest allocations alive
//! at the peak, each with its stack.

use ratatui::{layout::Rect, text::Line, widgets::Paragraph, Frame};

use super::render::{section, styled};
use super::state::Viewer;
use crate::format::{bytes, bytes_short, truncate, NA};
use crate::memsnap::analysis::timeline::{Interval, Timeline};
use crate::memsnap::model::{Action, Frames};
use crate::memsnap::output::short_stack;
use crate::terminal::theme::Theme;

/// Left of the chart: the scale.
pub(crate) const GUTTER: usize = 8;
const EIGHTHS: [&str; 9] = [" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"];
const PEAK_LIST: usize = 5;

pub(crate) fn render(frame: &mut Frame, area: Rect, viewer: &Viewer, theme: Theme) {
    let Some(t) = viewer.timeline() else {
        let lines = vec![
            section(" Timeline".to_string(), area.width, theme),
            Line::styled(
                "No trace events: call torch.cuda.memory._record_memory_history() before the \
                 snapshot to record them.",
                theme.dim(),
            ),
        ];
        frame.render_widget(
            Paragraph::new(lines).wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    };
    let width = area.width as usize;
    let cursor = viewer.cursor.min(t.len().saturating_sub(1));
    let mut lines = vec![section(
        format!(
            " Timeline cuda:{}  {} events  peak {} in use at event {}  cursor at event {}",
            t.device,
            t.len(),
            bytes(t.peak_bytes()),
            t.peak + 1,
            cursor + 1
        ),
        area.width,
        theme,
    )];
    let body = area.height as usize - 1;
    let chart_height = body.saturating_sub(14).clamp(3, 16);
    let details = body.saturating_sub(chart_height + 1);
    let columns = width.saturating_sub(GUTTER).min(t.len()).max(1);
    lines.extend(chart(t, cursor, columns, chart_height, theme));
    lines.push(marker_line(t, cursor, columns, theme));
    lines.extend(cursor_lines(
        viewer,
        t,
        cursor,
        width,
        details.saturating_sub(1 + PEAK_LIST),
        theme,
    ));
    lines.extend(peak_lines(&viewer.loaded.snapshot.frames, t, width, theme));
    lines.truncate(area.height as usize);
    frame.render_widget(Paragraph::new(lines), area);
}

/// The events of column `c` of `columns`.
fn bucket(t: &Timeline, c: usize, columns: usize) -> std::ops::Range<usize> {
    let n = t.len();
    (c * n / columns)..((c + 1) * n / columns).max(c * n / columns + 1)
}

fn chart(
    t: &Timeline,
    cursor: usize,
    columns: usize,
    height: usize,
    theme: Theme,
) -> Vec<Line<'static>> {
    let top = t.peak_bytes().max(1);
    let levels: Vec<usize> = (0..columns)
        .map(|c| {
            let high = t.in_use[bucket(t, c, columns)]
                .iter()
                .copied()
                .max()
                .unwrap_or(0);
            ((u128::from(high) * (height * 8) as u128).div_ceil(u128::from(top))) as usize
        })
        .collect();
    let cursor_column = (0..columns).find(|&c| bucket(t, c, columns).contains(&cursor));
    (0..height)
        .map(|row| {
            let floor = (height - 1 - row) * 8;
            let scale = match row {
                0 => bytes_short(top),
                r if r == height - 1 => "0".to_string(),
                _ => String::new(),
            };
            let mut spans = vec![styled(format!("{scale:>w$} ", w = GUTTER - 1), theme.dim())];
            for (c, &level) in levels.iter().enumerate() {
                let glyph = EIGHTHS[level.saturating_sub(floor).min(8)];
                let style = if Some(c) == cursor_column {
                    theme.selected()
                } else {
                    theme.memory_bar()
                };
                spans.push(styled(glyph, style));
            }
            Line::from(spans)
        })
        .collect()
}

fn marker_line(t: &Timeline, cursor: usize, columns: usize, theme: Theme) -> Line<'static> {
    let mut spans = vec![styled(
        format!("{:>w$} ", "events", w = GUTTER - 1),
        theme.dim(),
    )];
    let mut marks = t.markers.iter().peekable();
    for c in 0..columns {
        let range = bucket(t, c, columns);
        let mut here = None;
        while let Some(&&(i, action)) = marks.peek() {
            if i >= range.end {
                break;
            }
            if here != Some(Action::Oom) {
                here = Some(action);
            }
            marks.next();
        }
        let span = match (here, range.contains(&cursor)) {
            (Some(Action::Oom), _) => styled("O", theme.critical()),
            (Some(_), _) => styled("S", theme.label()),
            (None, true) => styled("^", theme.selected()),
            (None, false) => styled(" ", theme.plain()),
        };
        spans.push(span);
    }
    Line::from(spans)
}

fn cursor_lines(
    viewer: &Viewer,
    t: &Timeline,
    cursor: usize,
    width: usize,
    room: usize,
    theme: Theme,
) -> Vec<Line<'static>> {
    let snapshot = &viewer.loaded.snapshot;
    let trace = &snapshot.traces[t.device];
    let Some(entry) = trace.get(cursor) else {
        return Vec::new();
    };
    let first_time = trace.first().and_then(|e| e.time_us);
    let when = match (entry.time_us, first_time) {
        (Some(now), Some(start)) => format!(
            "+{:.3} ms",
            (i128::from(now) - i128::from(start)) as f64 / 1000.0
        ),
        _ => NA.to_string(),
    };
    let what = match entry.action {
        Action::Oom => format!(
            "OOM: {} requested, {} free",
            bytes(entry.size),
            bytes(entry.device_free().unwrap_or(0))
        ),
        Action::Snapshot => format!("snapshot ({} active)", bytes(entry.size)),
        action => format!(
            "{} {} at 0x{:x}",
            action.name(),
            bytes(entry.size),
            entry.addr
        ),
    };
    let style = if entry.action == Action::Oom {
        theme.critical()
    } else {
        theme.plain()
    };
    let mut lines = vec![Line::from(vec![
        styled(format!("event {} ", cursor + 1), theme.label()),
        styled(what, style),
        styled(
            format!(
                "  {when}  in use {}  reserved {}",
                bytes(t.in_use[cursor]),
                bytes(t.reserved.get(cursor).copied().unwrap_or(0))
            ),
            theme.dim(),
        ),
    ])];
    let mut context = format!("  at {}", short_stack(&snapshot.frames, entry.stack));
    if let Some(compiled) = snapshot.compile_context(t.device, cursor) {
        context.push_str(&format!("  [{}]", crate::memsnap::text::escape(compiled)));
    }
    lines.push(Line::styled(truncate(&context, width), theme.dim()));
    let (largest, live) = t.largest_live(cursor, room.saturating_sub(3));
    lines.push(Line::styled(
        format!("live after it: {live} allocation(s); the largest:"),
        theme.label(),
    ));
    lines.extend(
        largest
            .iter()
            .map(|i| interval_line(&snapshot.frames, i, width, theme)),
    );
    lines
}

fn peak_lines(frames: &Frames, t: &Timeline, width: usize, theme: Theme) -> Vec<Line<'static>> {
    let (largest, live) = t.largest_live(t.peak, PEAK_LIST);
    let mut lines = vec![Line::styled(
        format!(
            "at the peak (event {}, {}): {live} live; the {} largest:",
            t.peak + 1,
            bytes(t.peak_bytes()),
            largest.len()
        ),
        theme.label(),
    )];
    lines.extend(
        largest
            .iter()
            .map(|i| interval_line(frames, i, width, theme)),
    );
    lines
}

fn interval_line(frames: &Frames, i: &Interval, width: usize, theme: Theme) -> Line<'static> {
    let since = i.start.map_or("before the trace".to_string(), |s| {
        format!("since event {}", s + 1)
    });
    let stack = if i.start.is_none() && i.stack == crate::memsnap::model::StackId::EMPTY {
        "allocated before the trace began".to_string()
    } else {
        short_stack(frames, i.stack)
    };
    let head = format!("  {:>9}  {since:<17} ", bytes(i.size));
    let room = width.saturating_sub(head.chars().count());
    Line::from(vec![
        styled(head, theme.plain()),
        styled(truncate(&stack, room), theme.dim()),
    ])
}
