//! Drawing the viewer: the title line with the four views, the view itself, the key line, and
//! the help overlay. Pure: it reads the [`Viewer`] and draws.

use ratatui::{
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph},
    Frame,
};

use super::state::{Tab, Viewer};
use super::{holders, segments, summary, timeline};
use crate::memsnap::output::devices_label;
use crate::terminal::theme::Theme;

const MIN_WIDTH: u16 = 40;
const MIN_HEIGHT: u16 = 10;

pub(crate) fn draw(frame: &mut Frame, viewer: &Viewer) {
    let area = frame.area();
    let theme = Theme::new(viewer.colors);
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!("The terminal is too small: {MIN_WIDTH}x{MIN_HEIGHT} at least.");
        frame.render_widget(Paragraph::new(text), area);
        return;
    }
    frame.render_widget(
        Paragraph::new(title_line(viewer, theme, area.width)),
        row(area, 0),
    );
    let body = Rect::new(area.x, area.y + 1, area.width, area.height - 2);
    match viewer.tab {
        Tab::Summary => summary::render(frame, body, viewer, theme),
        Tab::Holders => holders::render(frame, body, viewer, theme),
        Tab::Segments => segments::render(frame, body, viewer, theme),
        Tab::Timeline => timeline::render(frame, body, viewer, theme),
    }
    frame.render_widget(
        Paragraph::new(key_line(viewer, theme)),
        row(area, area.height - 1),
    );
    if viewer.help {
        help(frame, area, theme);
    }
}

fn row(area: Rect, y: u16) -> Rect {
    Rect::new(area.x, area.y + y, area.width, 1)
}

fn title_line(viewer: &Viewer, theme: Theme, width: u16) -> Line<'static> {
    let brand = if width >= 100 {
        " torchtop snapshot "
    } else {
        " torchtop "
    };
    let mut spans = vec![Span::styled(brand, theme.brand())];
    for (i, tab) in Tab::ALL.iter().enumerate() {
        let text = format!(" {} {} ", i + 1, tab.title());
        let style = if *tab == viewer.tab {
            theme.title()
        } else {
            theme.dim()
        };
        spans.push(Span::styled(text, style));
    }
    spans.push(Span::raw(format!(" {} ", devices_label(viewer.device))));
    let used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
    let name = viewer.loaded.name();
    let room = (width as usize).saturating_sub(used + 1);
    if room > 4 {
        spans.push(Span::styled(
            crate::format::truncate(&name, room),
            theme.label(),
        ));
    }
    Line::from(spans)
}

fn key_line(viewer: &Viewer, theme: Theme) -> Line<'static> {
    if viewer.editing_filter {
        return Line::from(vec![
            Span::styled(" Filter by frame name: ", theme.title()),
            Span::raw(format!(" {}▏", viewer.filter)),
            Span::styled("  Enter keeps, Esc clears", theme.dim()),
        ]);
    }
    let keys = match viewer.tab {
        Tab::Summary => "j/k scroll",
        Tab::Holders => "j/k move  Enter open  c C++  / filter",
        Tab::Segments => "j/k segment  ←/→ block",
        Tab::Timeline => "←/→ , . move  p peak  o OOM  s snap",
    };
    Line::from(vec![
        Span::styled(format!(" {keys}"), theme.plain()),
        Span::styled("  d device  Tab view  ? help  q quit", theme.dim()),
    ])
}

/// Keys of the viewer, by view.
const HELP: [(&str, &[(&str, &str)]); 5] = [
    (
        "Everywhere",
        &[
            ("Tab 1-4", "next view, or go to a view"),
            ("d", "cycle the device: all, cuda:0, cuda:1, ..."),
            ("/", "filter the tree by a frame's name or file"),
            ("? h", "show or hide this help"),
            ("q Esc", "quit (Esc first clears a filter)"),
        ],
    ),
    (
        "2 Holders (who holds the memory)",
        &[
            ("j k Up Down", "select a row (PgUp PgDn Home End)"),
            ("Enter Space", "open or close the selected frame"),
            (
                "Right Left",
                "open, or go to the first child / close, or go up",
            ),
            ("c", "fold or unfold the C++ frames below Python's"),
        ],
    ),
    (
        "3 Segments",
        &[("j k / Left Right", "select a segment / a block in it")],
    ),
    (
        "4 Timeline",
        &[
            ("Left Right", "move the cursor one column (PgUp PgDn: ten)"),
            (", .", "move the cursor one event"),
            ("p o s", "go to the peak, the next OOM, the next snapshot"),
        ],
    ),
    ("1 Summary", &[("j k", "scroll")]),
];

fn help(frame: &mut Frame, screen: Rect, theme: Theme) {
    let mut lines = Vec::new();
    for (section, keys) in HELP {
        lines.push(Line::styled(section, theme.label()));
        for (key, meaning) in keys {
            lines.push(Line::from(format!("  {key:<18}{meaning}")));
        }
    }
    let width = screen.width.min(74);
    let height = screen.height.min(lines.len() as u16 + 2);
    let area = Rect::new(
        screen.x + (screen.width - width) / 2,
        screen.y + (screen.height - height) / 2,
        width,
        height,
    );
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" snapshot viewer keys ")
        .title_bottom(" any key: close ");
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// A title line for a view: reversed like the monitor's section titles, padded to the width.
pub(crate) fn section(text: String, width: u16, theme: Theme) -> Line<'static> {
    let padded = format!(
        "{:<w$}",
        crate::format::truncate(&text, width as usize),
        w = width as usize
    );
    Line::styled(padded, theme.title())
}

/// The first visible row so that `selected` stays on screen, kept near the middle.
pub(crate) fn scroll(selected: usize, len: usize, height: usize) -> usize {
    if len <= height || height == 0 {
        return 0;
    }
    selected.saturating_sub(height / 2).min(len - height)
}

pub(crate) fn styled(text: impl Into<String>, style: Style) -> Span<'static> {
    Span::styled(text.into(), style)
}
