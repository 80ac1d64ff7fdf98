//! The warnings panel: one line per group of warnings (several warnings with one id and one
//! cause share a line), most severe and most harmful first, as many as the layout gives rows.
//! The lines are shared with the `w` view ([`super::warnings_view`]).

use super::label::Label;
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    Frame,
};

use crate::app::warning_groups::{Cause, Group};
use crate::app::App;
use crate::format::{escape, pad_left_aligned};
use crate::model::{Severity, Snapshot, Subject, Warning};
use crate::terminal::theme::Theme;

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    if area.height == 0 {
        return;
    }
    let groups = &app.warnings_view.groups;
    let count = app.snapshot.warnings.len();
    let title = if groups.len() < count {
        format!(
            " WARNINGS ({count} in {} lines)  w: walk the list",
            groups.len()
        )
    } else {
        format!(" WARNINGS ({count})  w: walk the list")
    };
    frame.render_widget(
        Label::new(pad_left_aligned(&title, usize::from(area.width))).style(theme.title()),
        Rect { height: 1, ..area },
    );
    let room = usize::from(area.height - 1);
    let shown = if groups.len() <= room {
        groups.len()
    } else {
        room.saturating_sub(1)
    };
    let mut lines: Vec<Line> = groups
        .iter()
        .take(shown)
        .map(|g| group_line(g, &app.snapshot, false, theme))
        .collect();
    if shown < groups.len() {
        lines.push(Line::styled(
            format!(" +{} more: w lists them all", groups.len() - shown),
            theme.dim(),
        ));
    }
    let body = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    frame.render_widget(Label::new(lines), body);
}

/// A group's line: the warning itself for a group of one, else the count and the cause, with
/// an arrow that says whether the group is opened.
pub(crate) fn group_line(
    group: &Group,
    snapshot: &Snapshot,
    opened: bool,
    theme: Theme,
) -> Line<'static> {
    let Some(first) = group.member(snapshot, 0) else {
        return Line::default();
    };
    if group.is_single() {
        return warning_line(first, theme);
    }
    let arrow = if opened { '▾' } else { '▸' };
    let summary = format!(
        " {arrow} {}: {}",
        count_phrase(group, snapshot),
        escape(&first.message)
    );
    Line::from(vec![
        Span::styled(
            format!(" {:<4}", severity_label(group.severity)),
            theme.severity(group.severity),
        ),
        Span::styled(format!(" {:<14}", escape(&group.key.id)), theme.label()),
        Span::raw(format!(" {:<10}", cause_text(&group.key.cause))),
        Span::raw(summary),
    ])
}

/// "5 ranks of job X", "3 processes on GPU 2", "2 warnings on GPU 1".
pub(crate) fn count_phrase(group: &Group, snapshot: &Snapshot) -> String {
    let n = group.members.len();
    let all_processes = (0..n).all(|i| {
        group
            .member(snapshot, i)
            .is_some_and(|w| matches!(w.subject, Subject::Process { .. }))
    });
    let cause = cause_text(&group.key.cause);
    match &group.key.cause {
        Cause::Job(_) if all_processes => format!("{n} ranks of {cause}"),
        Cause::Gpu(_) if all_processes => format!("{n} processes on {cause}"),
        Cause::Host => format!("{n} warnings about the host"),
        _ => format!("{n} warnings on {cause}"),
    }
}

/// One warning: severity, id, subject, message.
pub(crate) fn warning_line(warning: &Warning, theme: Theme) -> Line<'static> {
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
        Subject::Job { id } => job_label(id),
        Subject::Host => "host".to_string(),
    }
}

/// "job X", without doubling the word when the id already starts with it ("job host:29500").
fn job_label(id: &str) -> String {
    let id = escape(id);
    if id.starts_with("job ") {
        id.into_owned()
    } else {
        format!("job {id}")
    }
}

fn cause_text(cause: &Cause) -> String {
    match cause {
        Cause::Gpu(index) => format!("GPU {index}"),
        Cause::Process(pid) => format!("pid {pid}"),
        Cause::Job(id) => job_label(id),
        Cause::Host => "host".to_string(),
    }
}
