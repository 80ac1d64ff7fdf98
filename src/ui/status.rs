//! The bottom line: the `/` filter prompt while it is typed; else the kept filter and the tag
//! count, the outcome of the last action, and key hints; a READ-ONLY badge at the right.

use ratatui::{
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
    Frame,
};

use crate::app::{App, Mode};
use crate::format::escape;
use crate::terminal::theme::Theme;

const HINTS: &str = "q quit  ? help  / filter  t tree  Space tag  T/K/I signal  F6 sort";
const FILTER_HINTS: &str = "Enter keep  Esc clear";
const READONLY: &str = " READ-ONLY ";

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let line = if app.mode == Mode::Filter {
        filter_prompt(app, theme)
    } else {
        outcome_and_hints(app, theme)
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

fn outcome_and_hints(app: &App, theme: Theme) -> Line<'static> {
    let mut spans = Vec::new();
    let filter = app.settings.filter.trim();
    if !filter.is_empty() {
        spans.push(Span::styled(
            format!(" filter \"{}\" ", escape(filter)),
            theme.selected(),
        ));
        spans.push(Span::raw(" "));
    }
    if !app.tags.is_empty() {
        let tagged = format!(" {} tagged ", app.tags.len());
        spans.push(Span::styled(tagged, theme.tagged()));
        spans.push(Span::raw(" "));
    }
    if let Some(status) = &app.status {
        spans.push(Span::styled(format!(" {} ", escape(status)), theme.warn()));
        spans.push(Span::raw(" "));
    }
    spans.push(Span::styled(format!(" {HINTS}"), theme.dim()));
    Line::from(spans)
}
