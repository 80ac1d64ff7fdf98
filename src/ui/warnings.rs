//! The warnings panel (one line per warning, most severe first) and the expanded view of the
//! selected warning with its evidence and remedy.

use ratatui::{
    layout::{Margin, Rect},
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph, Wrap},
    Frame,
};

use crate::app::App;
use crate::format::{escape, pad_left_aligned};
use crate::model::{Severity, Subject, Warning};
use crate::terminal::theme::Theme;

/// The warnings in the order the panel lists them: most severe first, otherwise as raised.
pub(crate) fn ordered(app: &App) -> Vec<&Warning> {
    let mut warnings: Vec<&Warning> = app.snapshot.warnings.iter().collect();
    warnings.sort_by_key(|w| std::cmp::Reverse(w.severity));
    warnings
}

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    if area.height == 0 {
        return;
    }
    let warnings = ordered(app);
    let title = format!(" WARNINGS ({})  w: details", warnings.len());
    frame.render_widget(
        Paragraph::new(pad_left_aligned(&title, usize::from(area.width))).style(theme.title()),
        Rect { height: 1, ..area },
    );
    let room = usize::from(area.height - 1);
    let shown = if warnings.len() <= room {
        warnings.len()
    } else {
        room.saturating_sub(1)
    };
    let mut lines: Vec<Line> = warnings
        .iter()
        .take(shown)
        .enumerate()
        .map(|(i, w)| {
            let line = warning_line(w, theme);
            if app.view.warnings_expanded && i == app.view.selected_warning {
                line.style(theme.selected())
            } else {
                line
            }
        })
        .collect();
    if shown < warnings.len() {
        lines.push(Line::styled(
            format!(" +{} more", warnings.len() - shown),
            theme.dim(),
        ));
    }
    let body = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    frame.render_widget(Paragraph::new(lines), body);
}

fn warning_line(warning: &Warning, theme: Theme) -> Line<'static> {
    Line::from(vec![
        Span::styled(
            format!(" {:<4}", severity_label(warning.severity)),
            theme.severity(warning.severity),
        ),
        Span::styled(format!(" {:<14}", escape(&warning.id)), theme.label()),
        Span::raw(format!(" {:<10}", subject_text(&warning.subject))),
        Span::raw(format!(" {}", escape(&warning.message))),
    ])
}

pub(crate) fn severity_label(severity: Severity) -> &'static str {
    match severity {
        Severity::Info => "INFO",
        Severity::Warn => "WARN",
        Severity::Critical => "CRIT",
    }
}

pub(crate) fn subject_text(subject: &Subject) -> String {
    match subject {
        Subject::Gpu { index } => format!("GPU {index}"),
        Subject::Process { pid } => format!("pid {pid}"),
        Subject::Job { id } => format!("job {}", escape(id)),
        Subject::Host => "host".to_string(),
    }
}

/// The selected warning in full, over the middle of the screen.
pub(crate) fn render_expanded(frame: &mut Frame, screen: Rect, app: &App, theme: Theme) {
    let warnings = ordered(app);
    let Some(warning) = warnings.get(app.view.selected_warning).or(warnings.last()) else {
        return;
    };
    let area = screen.inner(Margin::new(screen.width / 10, screen.height / 6));
    let title = format!(
        " {} {} on {} ",
        severity_label(warning.severity),
        escape(&warning.id),
        subject_text(&warning.subject)
    );
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .title_bottom(" w or Esc: close ");
    let mut lines = vec![
        Line::from(escape(&warning.message).into_owned()),
        Line::styled(format!("since {}", warning.since), theme.dim()),
        Line::from(""),
        Line::styled("Evidence", theme.label()),
    ];
    lines.extend(
        warning
            .evidence
            .iter()
            .map(|(name, value)| Line::from(format!("  {}: {}", escape(name), escape(value)))),
    );
    lines.push(Line::from(""));
    lines.push(Line::styled("Remedy", theme.label()));
    lines.push(Line::from(format!("  {}", escape(&warning.remedy))));
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}
