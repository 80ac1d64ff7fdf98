//! The warnings panel: one line per group of warnings (several warnings with one id and one
//! cause share a line), most severe and most harmful first, as many as the layout gives rows.
//! The lines are shared with the `w` view ([`super::warnings_view`]).

use std::fmt::{self, Arguments, Display, Formatter, Write as _};

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
    let room = usize::from(area.height - 1);
    // The lines shown, and whether the count of the rest is on its own last line; on a single
    // row it goes to the title instead, so that the row shows the most severe warning.
    let (shown, more_line) = match groups.len() {
        n if n <= room => (n, false),
        _ if room == 1 => (1, false),
        _ => (room.saturating_sub(1), true),
    };
    let more = groups.len() - shown;
    let mut scratch = super::scratch::take();
    let text = &mut scratch.runs;
    text.clear();
    text.push_with(Style::new(), |t| {
        write_title(
            t,
            app.snapshot.warnings.len(),
            groups.len(),
            more_line,
            more,
        );
        fit_left_aligned(t, 0, usize::from(area.width));
    });
    text.end_line(Style::new());
    let title = Rect { height: 1, ..area };
    text.render_styled(title, frame.buffer_mut(), theme.title());
    text.clear();
    for group in groups.iter().take(shown) {
        write_group_line(text, group, &app.snapshot, false, theme);
        text.end_line(Style::new());
    }
    if more_line {
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
    frame.render_widget(&*text, body);
}

/// The panel's title: the count of warnings (and of their lines when some share one), and the
/// count of lines not shown when no line of the panel says it (`more_line` false).
fn write_title(t: &mut String, count: usize, lines: usize, more_line: bool, more: usize) {
    // Rows held for warnings that went ([`WarningsView::panel_rows`]) say why they are empty.
    let _ = if count == 0 {
        write!(t, " WARNINGS (0): the ones shown have cleared")
    } else if lines < count {
        write!(t, " WARNINGS ({count} in {lines} lines)")
    } else {
        write!(t, " WARNINGS ({count})")
    };
    if more > 0 && !more_line {
        let _ = write!(t, "  +{more} more");
    }
    if count > 0 {
        t.push_str("  w: walk the list");
    }
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
    let cause = Named::of_cause(&group.key.cause);
    out.span(Style::new(), format_args!(" {cause:<10}"));
    let count = CountPhrase(group, snapshot);
    let message = escape(&first.message);
    out.span(Style::new(), format_args!(" {arrow} {count}: {message}"));
}

/// "5 ranks of job X", "3 processes on GPU 2", "2 warnings on GPU 1".
struct CountPhrase<'a>(&'a Group, &'a Snapshot);

impl Display for CountPhrase<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let CountPhrase(group, snapshot) = *self;
        let n = group.members.len();
        let all_processes = (0..n).all(|i| {
            group
                .member(snapshot, i)
                .is_some_and(|w| matches!(w.subject, Subject::Process { .. }))
        });
        let cause = Named::of_cause(&group.key.cause);
        match &group.key.cause {
            Cause::Job(_) if all_processes => write!(f, "{n} ranks of {cause}"),
            Cause::Gpu(_) if all_processes => write!(f, "{n} processes on {cause}"),
            Cause::Host => write!(f, "{n} warnings about the host"),
            _ => write!(f, "{n} warnings on {cause}"),
        }
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
    let subject = Named::of_subject(&warning.subject);
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
    Named::of_subject(subject).to_string()
}

/// What a warning or a group is about, as a name: "GPU 2", "pid 5", "job X" (without doubling
/// the word when the id already starts with it: "job host:29500"), "host". Written where it
/// is shown, without a `String` of its own; a width (`{:<10}`) pads it on the right.
#[derive(Clone, Copy)]
enum Named<'a> {
    Gpu(u32),
    Pid(u32),
    Job(&'a str),
    Host,
}

impl<'a> Named<'a> {
    fn of_subject(subject: &'a Subject) -> Self {
        match subject {
            Subject::Gpu { index } => Named::Gpu(*index),
            Subject::Process { pid } => Named::Pid(*pid),
            Subject::Job { id } => Named::Job(id),
            Subject::Host => Named::Host,
        }
    }

    fn of_cause(cause: &'a Cause) -> Self {
        match cause {
            Cause::Gpu(index) => Named::Gpu(*index),
            Cause::Process(pid) => Named::Pid(*pid),
            Cause::Job(id) => Named::Job(id),
            Cause::Host => Named::Host,
        }
    }

    fn write(self, out: &mut impl fmt::Write) -> fmt::Result {
        match self {
            Named::Gpu(index) => write!(out, "GPU {index}"),
            Named::Pid(pid) => write!(out, "pid {pid}"),
            Named::Job(id) => {
                let id = escape(id);
                if id.starts_with("job ") {
                    out.write_str(&id)
                } else {
                    write!(out, "job {id}")
                }
            }
            Named::Host => out.write_str("host"),
        }
    }
}

impl Display for Named<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut counted = CharCount(0);
        self.write(&mut counted)?;
        self.write(f)?;
        for _ in counted.0..f.width().unwrap_or(0) {
            f.write_char(' ')?;
        }
        Ok(())
    }
}

/// Counts the characters written to it, and keeps none.
struct CharCount(usize);

impl fmt::Write for CharCount {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.chars().count();
        Ok(())
    }
}
