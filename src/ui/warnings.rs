//! The warnings panel: one line per group of warnings (several warnings with one id and one
//! cause share a line), most severe and most harmful first, as many as the layout gives rows.
//! The lines are shared with the `w` view ([`super::warnings_view`]).

use std::fmt::{Arguments, Write as _};

use super::label::Runs;
use ratatui::{
    layout::Rect,
    style::Style,
    text::{Line, Span},
    Frame,
};

use crate::app::warning_groups::{Cause, Group};
use crate::app::App;
use crate::format::{escape, fit_left_aligned};
use crate::model::{Severity, Snapshot, Subject, Warning};
use crate::terminal::theme::Theme;

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    if area.height == 0 {
        return;
    }
    let groups = &app.warnings_view.groups;
    let count = app.snapshot.warnings.len();
    let mut text = Runs::default();
    text.push_with(Style::new(), |t| {
        let _ = if groups.len() < count {
            write!(
                t,
                " WARNINGS ({count} in {} lines)  w: walk the list",
                groups.len()
            )
        } else {
            write!(t, " WARNINGS ({count})  w: walk the list")
        };
        fit_left_aligned(t, 0, usize::from(area.width));
    });
    text.end_line(Style::new());
    let title = Rect { height: 1, ..area };
    text.render_styled(title, frame.buffer_mut(), theme.title());
    let room = usize::from(area.height - 1);
    let shown = if groups.len() <= room {
        groups.len()
    } else {
        room.saturating_sub(1)
    };
    text.clear();
    for group in groups.iter().take(shown) {
        write_group_line(&mut text, group, &app.snapshot, false, theme);
        text.end_line(Style::new());
    }
    if shown < groups.len() {
        let more = groups.len() - shown;
        text.push_fmt(
            Style::new(),
            format_args!(" +{more} more: w lists them all"),
        );
        text.end_line(theme.dim());
    }
    let body = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    frame.render_widget(&text, body);
}

/// Where a warning's line is written: the spans of a `Line`, or a panel's [`Runs`].
pub(crate) trait LineSink {
    /// Appends a span of the formatted `args` in `style`.
    fn span(&mut self, style: Style, args: Arguments);
}

impl LineSink for Vec<Span<'static>> {
    fn span(&mut self, style: Style, args: Arguments) {
        self.push(Span::styled(args.to_string(), style));
    }
}

impl LineSink for Runs {
    fn span(&mut self, style: Style, args: Arguments) {
        self.push_fmt(style, args);
    }
}

/// A group's line: the warning itself for a group of one, else the count and the cause, with
/// an arrow that says whether the group is opened.
pub(crate) fn group_line(
    group: &Group,
    snapshot: &Snapshot,
    opened: bool,
    theme: Theme,
) -> Line<'static> {
    let mut spans = Vec::new();
    write_group_line(&mut spans, group, snapshot, opened, theme);
    Line::from(spans)
}

/// [`group_line`]'s spans, written into `out`.
fn write_group_line(
    out: &mut impl LineSink,
    group: &Group,
    snapshot: &Snapshot,
    opened: bool,
    theme: Theme,
) {
    let Some(first) = group.member(snapshot, 0) else {
        return;
    };
    if group.is_single() {
        return write_warning_line(out, first, theme);
    }
    let arrow = if opened { '▾' } else { '▸' };
    let severity = severity_label(group.severity);
    out.span(
        theme.severity(group.severity),
        format_args!(" {severity:<4}"),
    );
    let id = escape(&group.key.id);
    out.span(theme.label(), format_args!(" {id:<14}"));
    let cause = cause_text(&group.key.cause);
    out.span(Style::new(), format_args!(" {cause:<10}"));
    let count = count_phrase(group, snapshot);
    let message = escape(&first.message);
    out.span(Style::new(), format_args!(" {arrow} {count}: {message}"));
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
    let mut spans = Vec::new();
    write_warning_line(&mut spans, warning, theme);
    Line::from(spans)
}

/// [`warning_line`]'s spans, written into `out`.
fn write_warning_line(out: &mut impl LineSink, warning: &Warning, theme: Theme) {
    let severity = severity_label(warning.severity);
    out.span(
        theme.severity(warning.severity),
        format_args!(" {severity:<4}"),
    );
    let id = escape(&warning.id);
    out.span(theme.label(), format_args!(" {id:<14}"));
    let subject = subject_text(&warning.subject);
    out.span(Style::new(), format_args!(" {subject:<10}"));
    let message = escape(&warning.message);
    out.span(Style::new(), format_args!(" {message}"));
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
