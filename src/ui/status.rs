//! The bottom line: the `/` filter prompt while it is typed; else the kept filter and the tag
//! count, the outcome of the last action, and key hints; a READ-ONLY badge at the right.

use super::label::Label;
use ratatui::{
    layout::Rect,
    style::Style,
    text::{Line, Span},
    Frame,
};

use crate::app::{App, Mode};
use unicode_width::UnicodeWidthStr;

use crate::format::escape;
use crate::terminal::theme::Theme;

const HINTS: &str = " q quit  ? help  / filter  t tree  Space tag  T/K/I signal  F6 sort";
/// In a replay, which cannot tag or signal (Space pauses there): its own keys are on the time
/// bar below.
const REPLAY_HINTS: &str = " q quit  ? help  / filter  t tree  F6 sort";
/// The hints that stay when a status sentence needs the room.
const SHORT_HINTS: &str = " q quit  ? help";
/// In the help, the detail view, the warnings view or the setup screen, where `q` closes the
/// view.
const VIEW_HINTS: &str = " q close  F10 quit";
/// Cells of the gaps around the status sentence.
const STATUS_PADDING: usize = 3;
const FILTER_HINTS: &str = "Enter keep  Esc clear";
const READONLY: &str = " READ-ONLY ";

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let badge = if app.readonly {
        READONLY.len() as u16
    } else {
        0
    };
    let room = area.width.saturating_sub(badge);
    if app.mode == Mode::Filter {
        frame.render_widget(Label::new(filter_prompt(app, theme)), area);
    } else {
        let (left, hints) = outcome_and_hints(app, theme, usize::from(room));
        if left.width() + hints.width() <= usize::from(room) {
            // One line of the chips then the hints, drawn from the kept runs.
            let mut scratch = super::scratch::take();
            let line = &mut scratch.runs;
            line.clear();
            for span in left.spans.iter().chain([&hints]) {
                line.push(span.style, &span.content);
            }
            line.end_line(Style::new());
            frame.render_widget(&*line, area);
        } else {
            pin_hints_right(frame, area, room, left, hints);
        }
    }
    if app.readonly {
        let width = badge.min(area.width);
        let badge = Rect::new(area.right() - width, area.y, width, 1);
        frame.render_widget(Label::new(READONLY).style(theme.readonly_badge()), badge);
    }
}

/// The hints get their own cells at the right, so the chips at the left can never push them
/// off the line; the chips are cut instead.
fn pin_hints_right(
    frame: &mut Frame,
    area: Rect,
    room: u16,
    left: Line<'static>,
    hints: Span<'static>,
) {
    let hints_width = (hints.width() as u16).min(room);
    let left_area = Rect::new(area.x, area.y, room - hints_width, 1);
    let hints_area = Rect::new(area.x + room - hints_width, area.y, hints_width, 1);
    frame.render_widget(Label::new(left), left_area);
    frame.render_widget(Label::new(hints), hints_area);
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

/// The kept filter, the tag count and the status sentence; and the key hints, which go at the
/// right, shortened for a sentence, and left out for one that then fits whole. A longer one is
/// cut (with "…") to the cells the others leave in `width`, counted as the terminal draws them
/// (a wide character takes two).
fn outcome_and_hints(app: &App, theme: Theme, width: usize) -> (Line<'static>, Span<'static>) {
    let mut spans = Vec::new();
    let mut chip = |text: String, style| {
        spans.push(Span::styled(text, style));
        spans.push(Span::raw(" "));
    };
    let filter = app.settings.filter.trim();
    if !filter.is_empty() {
        chip(format!(" filter \"{}\" ", escape(filter)), theme.selected());
    }
    if let Some(user) = &app.settings.user {
        chip(format!(" user {} ", escape(user)), theme.selected());
    }
    if app.settings.mine.is_some() {
        chip(" only mine ".to_string(), theme.selected());
    }
    if let Some(gpus) = &app.settings.gpus {
        let list: Vec<String> = gpus.iter().map(u32::to_string).collect();
        chip(format!(" GPUs {} ", list.join(",")), theme.selected());
    }
    if !app.tags.is_empty() {
        chip(format!(" {} tagged ", app.tags.len()), theme.tagged());
    }
    let taken: usize = spans
        .iter()
        .map(ratatui::prelude::Span::width)
        .sum::<usize>();
    let in_view = app.view.show_help
        || app.detail.is_some()
        || app.warnings_view.is_open()
        || app.setup.is_some();
    let (full, short) = if in_view {
        (VIEW_HINTS, VIEW_HINTS)
    } else if app.replay {
        (REPLAY_HINTS, SHORT_HINTS)
    } else {
        (HINTS, SHORT_HINTS)
    };
    let mut hints = full;
    if taken + hints.width() > width {
        hints = short;
    }
    if let Some(status) = &app.status {
        let status = escape(status);
        let free = |hints: &str| width.saturating_sub(taken + hints.width());
        // The sentence goes whole where it can (a snapshot's path, which the user needs for
        // `torchtop snapshot`): the hints shorten for it, and go until the next key if need be.
        let whole = status.width() + STATUS_PADDING;
        if whole > free(hints) {
            hints = short;
        }
        if whole > free(hints) && whole <= free("") {
            hints = "";
        }
        let room = width.saturating_sub(taken + hints.width() + STATUS_PADDING);
        if room > 0 {
            let sentence = crate::format::cut_to_cells(&status, room);
            spans.push(Span::styled(format!(" {sentence} "), theme.warn()));
            spans.push(Span::raw(" "));
        }
    }
    (Line::from(spans), Span::styled(hints, theme.dim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_characters_are_cut_by_the_cells_they_take() {
        assert_eq!(crate::format::cut_to_cells("数据加载器", 5), "数据…");
        assert_eq!(crate::format::cut_to_cells("abc", 3), "abc");
        assert!(crate::format::cut_to_cells("数据加载器数据加载器", 9).width() <= 9);
    }
}
