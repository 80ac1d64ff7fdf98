//! The bottom line: the `/` filter prompt while it is typed; else the kept filter and the tag
//! count, the outcome of the last action, and key hints; a READ-ONLY badge at the right.

use ratatui::{
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
    Frame,
};

use crate::app::{App, Mode};
use crate::format::{escape, truncate};
use crate::terminal::theme::Theme;

const HINTS: &str = "q quit  ? help  / filter  t tree  Space tag  T/K/I signal  F6 sort";
/// The hints that stay when a status sentence needs the room.
const SHORT_HINTS: &str = "q quit  ? help";
/// A status sentence gets this many cells (or its length) before the hints are shortened.
const STATUS_ROOM: usize = 40;
/// Cells of the gaps around the status sentence.
const STATUS_PADDING: usize = 3;
const FILTER_HINTS: &str = "Enter keep  Esc clear";
const READONLY: &str = " READ-ONLY ";

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let line = if app.mode == Mode::Filter {
        filter_prompt(app, theme)
    } else {
        let badge = if app.readonly { READONLY.len() } else { 0 };
        outcome_and_hints(app, theme, usize::from(area.width).saturating_sub(badge))
    };
    frame.render_widget(Paragraph::new(line), area);
    if app.readonly {
        let width = (READONLY.len() as u16).min(area.width);
        let badge = Rect::new(area.right() - width, area.y, width, 1);
        frame.render_widget(
            Paragraph::new(READONLY).style(theme.readonly_badge()),
            badge,
        );
    }
}

fn filter_prompt(app: &App, theme: Theme) -> Line<'static> {
    Line::from(vec![
        Span::styled(" filter: ", theme.label()),
        Span::styled(
            format!("{}_", escape(&app.settings.filter)),
            theme.selected(),
        ),
        Span::styled(
            format!("  {} rows  {FILTER_HINTS}", app.row_count()),
            theme.dim(),
        ),
    ])
}

/// The kept filter, the tag count, the status sentence and the key hints. The sentence is cut
/// (with "…") to the room the others leave in `width` cells, so the hints always show.
fn outcome_and_hints(app: &App, theme: Theme, width: usize) -> Line<'static> {
    let mut spans = Vec::new();
    let filter = app.settings.filter.trim();
    if !filter.is_empty() {
        spans.push(Span::styled(
            format!(" filter \"{}\" ", escape(filter)),
            theme.selected(),
        ));
        spans.push(Span::raw(" "));
    }
    if let Some(user) = &app.settings.user {
        spans.push(Span::styled(
            format!(" user {} ", escape(user)),
            theme.selected(),
        ));
        spans.push(Span::raw(" "));
    }
    if let Some(gpus) = &app.settings.gpus {
        let list: Vec<String> = gpus.iter().map(u32::to_string).collect();
        spans.push(Span::styled(
            format!(" GPUs {} ", list.join(",")),
            theme.selected(),
        ));
        spans.push(Span::raw(" "));
    }
    if !app.tags.is_empty() {
        let tagged = format!(" {} tagged ", app.tags.len());
        spans.push(Span::styled(tagged, theme.tagged()));
        spans.push(Span::raw(" "));
    }
    let mut hints = format!(" {HINTS}");
    if let Some(status) = &app.status {
        let status = escape(status);
        let taken: usize = spans.iter().map(|s| s.width()).sum::<usize>() + STATUS_PADDING;
        let wanted = status.chars().count().min(STATUS_ROOM);
        if width.saturating_sub(taken + hints.chars().count()) < wanted {
            hints = format!(" {SHORT_HINTS}");
        }
        let room = width.saturating_sub(taken + hints.chars().count());
        if room > 0 {
            let sentence = truncate(&status, room);
            spans.push(Span::styled(format!(" {sentence} "), theme.warn()));
            spans.push(Span::raw(" "));
        }
    }
    spans.push(Span::styled(hints, theme.dim()));
    Line::from(spans)
}
