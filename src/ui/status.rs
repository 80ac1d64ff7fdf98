//! The bottom line: the outcome of the last action, key hints, and a READ-ONLY badge.

use ratatui::{
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
    Frame,
};

use crate::app::App;

use super::theme::Theme;

const HINTS: &str = "q quit  ? help  j/k select  w warnings  s snapshot";
const READONLY: &str = " READ-ONLY ";

pub fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let mut spans = Vec::new();
    if let Some(status) = &app.status {
        spans.push(Span::styled(format!(" {status} "), theme.warn()));
        spans.push(Span::raw(" "));
    }
    spans.push(Span::styled(format!(" {HINTS}"), theme.dim()));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
    if app.readonly {
        let width = (READONLY.len() as u16).min(area.width);
        let badge = Rect::new(area.right() - width, area.y, width, 1);
        frame.render_widget(
            Paragraph::new(READONLY).style(theme.readonly_badge()),
            badge,
        );
    }
}
