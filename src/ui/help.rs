//! The help overlay: every key torchtop answers to.

use ratatui::{
    layout::Rect,
    text::Line,
    widgets::{Block, Borders, Clear, Paragraph},
    Frame,
};

use crate::app::App;
use crate::terminal::theme::Theme;

/// Sections of (keys, what they do).
const KEYS: [(&str, &[(&str, &str)]); 3] = [
    (
        "General",
        &[
            ("q F10 Ctrl-C", "quit"),
            ("Esc", "close a dialog or clear a filter; it never quits"),
            ("F2", "setup: panels, history, columns, refresh, theme"),
            ("j k Up Down", "select a process (or click it, or scroll)"),
            (
                "PgUp PgDn",
                "a page up or down; Home End: the first or last",
            ),
            ("← → ^A ^E", "scroll the command sideways; its start or end"),
            (
                "? h Ctrl-Z",
                "this help; suspend to the shell (fg comes back)",
            ),
        ],
    ),
    (
        "Processes",
        &[
            ("Space U", "tag or untag and move down; U untags all"),
            ("T K I", "send SIGTERM, SIGKILL, SIGINT (asks first)"),
            (
                "F9",
                "signal menu: type a number (9, 15) or move; asks first",
            ),
            (
                "F7 F8 n",
                "nice -1 or +1, as in htop; n: type a value (-20..19)",
            ),
            ("/ u g m", "filter: text or pid; user; next GPU; only mine"),
            ("t Enter", "tree view; Enter: the process's detail view"),
            ("a f c", "layout: auto, full, compact (most process rows)"),
            (
                "F6 < > r",
                "sort menu, prev/next column, reverse; or click a title",
            ),
        ],
    ),
    (
        "PyTorch and warnings",
        &[
            (
                "s P S",
                "agent: snapshot; reset peaks; S: record, then view",
            ),
            (
                "w g",
                "warnings: j k, Enter opens; g: go to its process/GPU",
            ),
            ("R", "start or stop recording to a file (torchtop replay)"),
        ],
    ),
];

const KEY_WIDTH: usize = 14;

pub(crate) fn render(frame: &mut Frame, screen: Rect, app: &App, theme: Theme) {
    let lines = help_lines(app.readonly, theme);
    let width = screen.width.min(72);
    let height = screen.height.min(lines.len() as u16 + 2);
    let area = Rect::new(
        screen.x + (screen.width - width) / 2,
        screen.y + (screen.height - height) / 2,
        width,
        height,
    );
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" torchtop keys ")
        .title_bottom(" ? or Esc: close ");
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn help_lines(readonly: bool, theme: Theme) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    if readonly {
        lines.push(Line::styled(
            "READ-ONLY: the process action keys are turned off",
            theme.readonly_badge(),
        ));
    }
    for (section, keys) in KEYS {
        lines.push(Line::styled(section, theme.label()));
        for (key, meaning) in keys {
            lines.push(Line::from(format!("  {key:<KEY_WIDTH$}{meaning}")));
        }
    }
    lines
}
