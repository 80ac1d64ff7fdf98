//! The help overlay: every key torchtop answers to, or in a replay the replay's keys first
//! (the lines and the scroll come from [`crate::app::help`]). When the lines do not all fit,
//! `↑ more` and `↓ more` on the borders say which way the rest is, as in the warnings view.

use ratatui::{
    layout::Rect,
    text::Line,
    widgets::{Block, Borders, Clear},
    Frame,
};

use super::label::Label;
use crate::app::help::{help_area, help_lines, inner_width, HelpLine, HelpStyle};
use crate::app::App;
use crate::terminal::theme::Theme;

pub(crate) fn render(frame: &mut Frame, screen: Rect, app: &App, theme: Theme) {
    let lines = help_lines(app, inner_width(screen));
    let area = help_area(screen, lines.len());
    let shown = usize::from(area.height.saturating_sub(2));
    // A resize since the last key may leave the scroll past the new end.
    let first = app.view.help_scroll.min(lines.len().saturating_sub(shown));
    let above = first > 0;
    let below = first + shown < lines.len();
    let body: Vec<Line> = lines
        .iter()
        .skip(first)
        .take(shown)
        .map(|line| styled(line, theme))
        .collect();
    frame.render_widget(Clear, area);
    // A `Label` in the block, as the dialogs draw their lines: one cut ends in the cut mark.
    let block = block(above, below);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    frame.render_widget(Label::new(body), inner);
}

/// The border: the title, and where there is more, which way it is and the keys that go there.
fn block(above: bool, below: bool) -> Block<'static> {
    let mut block = Block::default()
        .borders(Borders::ALL)
        .title(" torchtop keys ");
    if above {
        block = block.title(Line::from(" ↑ more ").right_aligned());
    }
    let bottom = match (above, below) {
        (_, true) => " ↓ more  j k PgDn: scroll  q or Esc: close ",
        (true, false) => " j k PgUp: scroll  q or Esc: close ",
        (false, false) => " q or Esc: close ",
    };
    block.title_bottom(bottom)
}

fn styled(line: &HelpLine, theme: Theme) -> Line<'static> {
    let style = match line.style {
        HelpStyle::Banner => theme.readonly_badge(),
        HelpStyle::Section => theme.label(),
        HelpStyle::Entry => return Line::from(line.text.clone()),
        HelpStyle::Off => theme.dim(),
    };
    Line::styled(line.text.clone(), style)
}
