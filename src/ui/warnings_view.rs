//! The `w` view over the monitor: the list of warning groups with the selection (opened groups
//! show their members), or one warning's message, evidence and remedy, word-wrapped here so the
//! layout knows how far it scrolls ([`detail_line_count`]).

use super::label::Label;
use ratatui::{
    layout::Rect,
    text::Line,
    widgets::{Block, Borders, Clear},
    Frame,
};

use crate::app::layout::{self, WarningsViewArea};
use crate::app::view::first_visible_row;
use crate::app::warnings_view::{Detail, Entry, Level, WarningsView};
use crate::app::App;
use crate::format::escape;
use crate::model::Snapshot;
use crate::terminal::theme::Theme;

use super::warnings::{group_line, severity_label, subject_text, warning_line};

/// Draws the view where this frame's plan puts it (`area`).
pub(crate) fn render(frame: &mut Frame, area: WarningsViewArea, app: &App, theme: Theme) {
    let view = &app.warnings_view;
    if area.frame.width < 4 || area.frame.height < 3 {
        return;
    }
    frame.render_widget(Clear, area.frame);
    match &view.level {
        Level::Closed => {}
        Level::List => render_list(frame, area, view, &app.snapshot, theme),
        Level::Detail(detail) => {
            render_detail(frame, area, detail, app.snapshot.unix_seconds, theme);
        }
    }
}

fn render_list(
    frame: &mut Frame,
    area: WarningsViewArea,
    view: &WarningsView,
    snapshot: &Snapshot,
    theme: Theme,
) {
    let title = format!(" WARNINGS ({}) ", snapshot.warnings.len());
    let rows = usize::from(area.body.height);
    let first = first_visible_row(view.offset, view.selected, rows, view.entries.len());
    let below = view.entries.len().saturating_sub(first + rows);
    let more = if below > 0 {
        format!(" ↓ {below} more ")
    } else {
        String::new()
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .title_bottom(format!(
            "{more} j k: select  Enter: open  g: go to  Esc: close "
        ));
    frame.render_widget(block, area.frame);
    if view.entries.is_empty() {
        let line = Line::styled(" No warnings: nothing needs attention now.", theme.dim());
        frame.render_widget(Label::new(line), area.body);
        return;
    }
    let lines: Vec<Line> = view
        .entries
        .iter()
        .enumerate()
        .skip(first)
        .take(usize::from(area.body.height))
        .map(|(index, &entry)| {
            let line = entry_line(view, entry, snapshot, theme);
            if index == view.selected {
                line.style(theme.selected())
            } else {
                line
            }
        })
        .collect();
    frame.render_widget(Label::new(lines), area.body);
}

fn entry_line(
    view: &WarningsView,
    entry: Entry,
    snapshot: &Snapshot,
    theme: Theme,
) -> Line<'static> {
    let Some(group) = view.groups.get(entry.group()) else {
        return Line::default();
    };
    match entry {
        Entry::Single { .. } => group_line(group, snapshot, false, theme),
        Entry::Header { .. } => {
            let opened = view.opened.contains(&group.key);
            group_line(group, snapshot, opened, theme)
        }
        Entry::Member { position, .. } => match group.member(snapshot, position) {
            Some(warning) => {
                let mut line = warning_line(warning, theme);
                line.spans.insert(0, "   └".into());
                line
            }
            None => Line::default(),
        },
    }
}

fn render_detail(
    frame: &mut Frame,
    area: WarningsViewArea,
    detail: &Detail,
    now: f64,
    theme: Theme,
) {
    let warning = &detail.warning;
    let title = format!(
        " {} {} on {} ",
        severity_label(warning.severity),
        escape(&warning.id),
        subject_text(&warning.subject)
    );
    let more = if detail.scroll < area.detail_max_scroll {
        " ↓ more "
    } else {
        ""
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .title_bottom(format!(
            "{more} j k: scroll  g: go to  Esc: back to the list "
        ));
    frame.render_widget(block, area.frame);
    let lines: Vec<Line> = detail_lines(detail, usize::from(area.body.width), now, theme)
        .into_iter()
        .skip(usize::from(detail.scroll.min(area.detail_max_scroll)))
        .take(usize::from(area.body.height))
        .collect();
    frame.render_widget(Label::new(lines), area.body);
}

/// Seconds from `since` (RFC 3339, as the engine writes it) to `now`; `None` for a time that
/// does not read (N/A) or lies ahead (a clock set back).
fn age_of(since: &str, now: f64) -> Option<f64> {
    let at = humantime::parse_rfc3339(since).ok()?;
    let at = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64();
    Some(now - at).filter(|age| (0.0..1e9).contains(age))
}

/// How many lines the open warning's detail takes in a view on a screen `width` columns wide;
/// 0 when no warning is open.
pub(crate) fn detail_line_count(view: &WarningsView, width: u16) -> u16 {
    let Level::Detail(detail) = &view.level else {
        return 0;
    };
    let screen = Rect::new(0, 0, width, layout::MIN_HEIGHT);
    let body = layout::warnings_view_area(screen, 0).body;
    let lines = detail_lines(detail, usize::from(body.width), 0.0, Theme::new(false)).len();
    u16::try_from(lines).unwrap_or(u16::MAX)
}

/// The message, when it started, the evidence and the remedy, wrapped to `width`.
/// `now` (the snapshot's time) gives the `since` its age, "(2 min 5 s ago)".
fn detail_lines(detail: &Detail, width: usize, now: f64, theme: Theme) -> Vec<Line<'static>> {
    let warning = &detail.warning;
    let mut lines = Vec::new();
    let text = |lines: &mut Vec<Line<'static>>, indent: &str, text: &str| {
        lines.extend(wrap(text, indent, width).into_iter().map(Line::from));
    };
    text(&mut lines, "", &escape(&warning.message));
    let ago = age_of(&warning.since, now).map_or_else(String::new, |age| {
        format!(" ({} ago)", crate::format::span(age))
    });
    let since = if detail.cleared {
        format!(
            "since {}{ago}; it has cleared since",
            escape(&warning.since)
        )
    } else {
        format!("since {}{ago}", escape(&warning.since))
    };
    lines.push(Line::styled(since, theme.dim()));
    lines.push(Line::default());
    lines.push(Line::styled("Evidence", theme.label()));
    for (name, value) in &warning.evidence {
        text(
            &mut lines,
            "    ",
            &format!("  {}: {}", escape(name), escape(value)),
        );
    }
    lines.push(Line::default());
    lines.push(Line::styled("Remedy", theme.label()));
    text(&mut lines, "  ", &format!("  {}", escape(&warning.remedy)));
    lines
}

/// Greedy word wrap to `width` columns; continuation lines start with `indent`, and a word
/// longer than a line is cut.
fn wrap(text: &str, indent: &str, width: usize) -> Vec<String> {
    let width = width.max(indent.chars().count() + 8);
    let lead: String = text.chars().take_while(|c| *c == ' ').collect();
    let mut lines = Vec::new();
    let mut line = lead;
    let mut empty = true;
    for word in text.split_whitespace() {
        let used = line.chars().count();
        let fits = used + usize::from(!empty) + word.chars().count() <= width;
        if !empty && !fits {
            lines.push(std::mem::replace(&mut line, indent.to_string()));
            empty = true;
        }
        let mut rest: Vec<char> = word.chars().collect();
        if !empty {
            line.push(' ');
        }
        // A word wider than a whole line goes out in slices.
        while line.chars().count() + rest.len() > width {
            let room = width.saturating_sub(line.chars().count());
            line.extend(rest.drain(..room));
            // The indent is at least 8 columns narrower than a line, so this ends.
            lines.push(std::mem::replace(&mut line, indent.to_string()));
        }
        line.extend(rest);
        empty = false;
    }
    lines.push(line);
    lines
}

#[cfg(test)]
mod tests {
    use super::{age_of, wrap};

    #[test]
    fn wrapping_keeps_words_and_indents_continuations() {
        let lines = wrap("  Lower the batch size; train in mixed precision", "  ", 20);
        assert_eq!(
            lines,
            ["  Lower the batch", "  size; train in", "  mixed precision"]
        );
        assert!(lines.iter().all(|l| l.chars().count() <= 20));
        let long = wrap("x".repeat(25).as_str(), "", 10);
        assert_eq!(long, ["x".repeat(10), "x".repeat(10), "x".repeat(5)]);
        assert_eq!(wrap("", "", 10), [""]);
    }

    /// A review: "since 2026-12-04T21:26:29Z" left the reader to work out how long ago that was.
    #[test]
    fn a_since_reads_with_its_age_and_an_unreadable_or_future_one_without() {
        let since = "2026-12-04T21:26:29Z";
        let at = 1_796_419_589.0;
        assert_eq!(age_of(since, at + 131.0), Some(131.0));
        assert_eq!(crate::format::span(131.0), "2 min");
        assert_eq!(age_of("N/A", at), None);
        assert_eq!(age_of(since, at - 5.0), None, "a clock set back");
    }
}
