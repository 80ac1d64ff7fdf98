//! The help overlay's content and scroll: which keys it lists, its lines wrapped at word
//! boundaries to the overlay's width, where the overlay goes, and the keys that scroll it.
//! Drawing it is `ui::help`'s; the content lives here because the scroll keys must know how
//! many lines there are, and the app sits below the UI.
//!
//! In a replay the replay's keys come first, and the keys a recording turns off (signals,
//! nice, the agent, `R`) are listed apart as off, never as if they worked.

use crossterm::event::KeyCode;
use ratatui::layout::Rect;
use unicode_width::UnicodeWidthStr;

use super::layout::Plan;
use super::{App, Effect};

/// (keys, what they do).
type Entry = (&'static str, &'static str);
/// A section's title and its entries.
type Section = (&'static str, &'static [Entry]);

/// The widest the overlay gets, borders included: wider, the lines would be hard to follow.
const MAX_WIDTH: u16 = 72;
/// Columns before an entry's keys, and the columns its keys take.
const INDENT: usize = 2;
const KEY_WIDTH: usize = 14;

const QUIT: Entry = (
    "q F10 Ctrl-C",
    "quit; in the help, detail or warnings view q closes it",
);
const ESC: Entry = ("Esc", "close a dialog or clear a filter; it never quits");
const SETUP: Entry = ("F2", "setup: panels, history, columns, refresh, theme");
const SELECT: Entry = ("j k Up Down", "select a process (or click it, or scroll)");
const PAGE: Entry = (
    "PgUp PgDn",
    "a page up or down; Home End: the first or last",
);
const HELP: Entry = (
    "? h F1 Ctrl-Z",
    "this help; suspend to the shell (fg comes back)",
);
const TREE: Entry = ("t F5 Enter", "tree view; Enter: the process's detail view");

const DENSITY: Entry = ("a f c", "layout: auto, full, compact (most process rows)");
const SORT: Entry = (
    "F6 < > r",
    "sort menu, prev/next column, reverse; or click a title",
);
const WARNINGS: Entry = (
    "w g",
    "warnings: j k, Enter opens; g: go to its process/GPU",
);

/// The monitor's keys.
const MONITOR: [Section; 3] = [
    (
        "General",
        &[
            QUIT,
            ESC,
            SETUP,
            SELECT,
            PAGE,
            ("← → ^A ^E", "scroll the command sideways; its start or end"),
            HELP,
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
            // htop's F3 (search) and F4 (filter) open the one filter, which finds as it is
            // typed (command, user or pid).
            (
                "/ F3 F4 u g m",
                "the one filter, as you type; user; next GPU; only mine",
            ),
            TREE,
            DENSITY,
            SORT,
        ],
    ),
    (
        "PyTorch and warnings",
        &[
            (
                "s P S",
                "agent: snapshot; reset peaks (y/n); S: memory viewer",
            ),
            WARNINGS,
            ("R", "start or stop recording to a file (torchtop replay)"),
        ],
    ),
];

/// A replay's keys, as `replay::transport` answers them: it takes Space, ← →, + -, g, [ ]
/// before the monitor does, so those no longer tag, scroll COMMAND or filter by GPU.
const REPLAY: [Section; 4] = [
    (
        "Replay",
        &[
            ("Space", "pause or play"),
            ("← →", "one frame back or on (and pause)"),
            ("+ -", "faster or slower: 0.25x to 128x"),
            (
                "g",
                "go to a time: 03:15 or 03:15:30 (UTC), +10m from the start, -5m from the end",
            ),
            (
                "[ ]",
                "the previous or next event: a new warning, an OOM, a GPU changing state, \
                 a GPU process coming or going",
            ),
        ],
    ),
    (
        "General",
        &[
            QUIT,
            ESC,
            SETUP,
            SELECT,
            PAGE,
            ("^A ^E", "scroll the command to its start or end"),
            HELP,
        ],
    ),
    (
        "Processes",
        &[
            (
                "/ F3 F4 u m",
                "the one filter, as you type; user; only mine",
            ),
            TREE,
            DENSITY,
            SORT,
            WARNINGS,
        ],
    ),
    (
        "Off in a replay: a recording cannot be acted on",
        &[
            ("T K I F9", "signals"),
            ("F7 F8 n", "nice"),
            ("s P S", "the agent: snapshot, peak reset, memory history"),
            ("R", "recording (replay --json --from --to exports a part)"),
        ],
    ),
];

/// How a help line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HelpStyle {
    /// The READ-ONLY or REPLAY line at the top.
    Banner,
    Section,
    Entry,
    /// An entry for a key that does nothing here.
    Off,
}

/// One line of the help, already wrapped to the overlay's width.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HelpLine {
    pub(crate) style: HelpStyle,
    pub(crate) text: String,
}

/// Whether `app` shows a recording (a replay is always read-only too).
pub(crate) fn is_replay(app: &App) -> bool {
    app.replay
}

/// The help's lines for an overlay `width` columns wide inside its borders.
pub(crate) fn help_lines(app: &App, width: u16) -> Vec<HelpLine> {
    let width = usize::from(width).max(1);
    let replay = is_replay(app);
    let mut lines = Vec::new();
    let banner = if replay {
        Some("REPLAY: a recording; its keys come first, the action keys are off")
    } else if app.readonly {
        Some("READ-ONLY: the process action keys are turned off")
    } else {
        None
    };
    if let Some(banner) = banner {
        push_wrapped(&mut lines, HelpStyle::Banner, banner, width);
    }
    let sections: &[Section] = if replay { &REPLAY } else { &MONITOR };
    for (index, (title, entries)) in sections.iter().enumerate() {
        push_wrapped(&mut lines, HelpStyle::Section, title, width);
        let off = replay && index + 1 == sections.len();
        let style = if off {
            HelpStyle::Off
        } else {
            HelpStyle::Entry
        };
        for (keys, meaning) in *entries {
            for text in entry_lines(keys, meaning, width) {
                lines.push(HelpLine { style, text });
            }
        }
    }
    lines
}

fn push_wrapped(lines: &mut Vec<HelpLine>, style: HelpStyle, text: &str, width: usize) {
    lines.extend(
        wrap(text, width)
            .into_iter()
            .map(|text| HelpLine { style, text }),
    );
}

/// An entry: its keys in their column, its meaning wrapped beside them.
fn entry_lines(keys: &str, meaning: &str, width: usize) -> Vec<String> {
    let column = INDENT + KEY_WIDTH;
    let keys = format!("{:INDENT$}{keys:<KEY_WIDTH$}", "");
    wrap(meaning, width.saturating_sub(column))
        .into_iter()
        .enumerate()
        .map(|(index, part)| match index {
            0 => format!("{keys}{part}"),
            _ => format!("{:column$}{part}", ""),
        })
        .collect()
}

/// `text` in lines of at most `width` columns, broken between words; a word wider than a line
/// is the only thing cut.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.width() + 1 + word.width() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
        while line.width() > width {
            let cut = cut_at(&line, width);
            let rest = line.split_off(cut);
            lines.push(std::mem::replace(&mut line, rest));
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// The byte index where the first `width` columns of `text` end.
fn cut_at(text: &str, width: usize) -> usize {
    let mut used = 0;
    for (at, c) in text.char_indices() {
        used += unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used > width {
            return at.max(c.len_utf8());
        }
    }
    text.len()
}

/// Where the help goes on `screen` for `lines` lines: centred, as tall as its lines need.
pub(crate) fn help_area(screen: Rect, lines: usize) -> Rect {
    let width = screen.width.min(MAX_WIDTH);
    let wanted = u16::try_from(lines).unwrap_or(u16::MAX).saturating_add(2);
    let height = screen.height.min(wanted);
    Rect::new(
        screen.x + (screen.width - width) / 2,
        screen.y + (screen.height - height) / 2,
        width,
        height,
    )
}

/// The columns inside the help's borders on `screen`.
pub(crate) fn inner_width(screen: Rect) -> u16 {
    screen.width.min(MAX_WIDTH).saturating_sub(2)
}

/// How far the help scrolls on `screen` before its last line is on the last row, and how many
/// lines it shows at once.
pub(crate) fn scroll_range(app: &App, screen: Rect) -> (usize, usize) {
    let lines = help_lines(app, inner_width(screen)).len();
    let shown = usize::from(help_area(screen, lines).height.saturating_sub(2));
    (lines.saturating_sub(shown), shown)
}

/// The screen the last frame was planned for: the panels stack from the header to the status
/// line. `None` before the first frame or while the screen is too small to draw.
fn planned_screen(plan: &Plan) -> Option<Rect> {
    match plan {
        Plan::Screen(areas) => Some(areas.header.union(areas.status)),
        Plan::TooSmall { .. } => None,
    }
}

impl App {
    /// The help's scroll keys, as in htop's F1 help: j k ↓ ↑ a line, PgUp PgDn a page, Home
    /// End the top or the end. Other keys do nothing while the help is open.
    pub(super) fn scroll_help(&mut self, code: KeyCode) -> Effect {
        let Some(screen) = planned_screen(&self.view.plan) else {
            return Effect::None;
        };
        let (most, page) = scroll_range(self, screen);
        let at = self.view.help_scroll.min(most);
        let to = match code {
            KeyCode::Down | KeyCode::Char('j') => at + 1,
            KeyCode::Up | KeyCode::Char('k') => at.saturating_sub(1),
            KeyCode::PageDown => at + page.max(1),
            KeyCode::PageUp => at.saturating_sub(page.max(1)),
            KeyCode::Home => 0,
            KeyCode::End => most,
            _ => return Effect::None,
        };
        self.view.help_scroll = to.min(most);
        Effect::Redraw
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::layout::{self, LayoutNeeds};
    use crossterm::event::KeyEvent;

    fn help_at(width: u16, height: u16) -> App {
        let mut app = App::new(1.0, false, false);
        let screen = Rect::new(0, 0, width, height);
        app.set_layout(layout::plan(screen, &LayoutNeeds::default()));
        app.on_key(KeyEvent::from(KeyCode::Char('?')));
        assert!(app.view.show_help);
        app
    }

    fn press(app: &mut App, code: KeyCode) -> Effect {
        app.on_key(KeyEvent::from(code))
    }

    #[test]
    fn the_scroll_keys_move_the_help_within_its_lines() {
        let mut app = help_at(60, 16);
        let (most, page) = scroll_range(&app, Rect::new(0, 0, 60, 16));
        assert!(
            most > 0 && page == 14,
            "more lines than rows: {most} {page}"
        );
        assert_eq!(press(&mut app, KeyCode::Char('j')), Effect::Redraw);
        press(&mut app, KeyCode::Down);
        assert_eq!(app.view.help_scroll, 2);
        press(&mut app, KeyCode::Char('k'));
        assert_eq!(app.view.help_scroll, 1);
        press(&mut app, KeyCode::PageDown);
        assert_eq!(app.view.help_scroll, (1 + page).min(most));
        press(&mut app, KeyCode::End);
        assert_eq!(app.view.help_scroll, most);
        press(&mut app, KeyCode::Char('j'));
        assert_eq!(app.view.help_scroll, most, "never past the last line");
        press(&mut app, KeyCode::PageUp);
        assert_eq!(app.view.help_scroll, most.saturating_sub(page));
        press(&mut app, KeyCode::Home);
        assert_eq!(app.view.help_scroll, 0);
        press(&mut app, KeyCode::Up);
        assert_eq!(app.view.help_scroll, 0);
    }

    #[test]
    fn the_wheel_scrolls_the_help_and_never_the_table_behind_it() {
        use crossterm::event::{KeyModifiers, MouseEvent, MouseEventKind};
        let mut app = help_at(60, 16);
        let wheel = |kind| MouseEvent {
            kind,
            column: 10,
            row: 5,
            modifiers: KeyModifiers::NONE,
        };
        let selected = app.view.selected;
        assert_eq!(
            app.on_mouse(wheel(MouseEventKind::ScrollDown)),
            Effect::Redraw
        );
        app.on_mouse(wheel(MouseEventKind::ScrollDown));
        assert_eq!(app.view.help_scroll, 2);
        app.on_mouse(wheel(MouseEventKind::ScrollUp));
        assert_eq!(app.view.help_scroll, 1);
        assert_eq!(app.view.selected, selected);
    }

    #[test]
    fn closing_the_help_brings_the_next_one_back_to_its_top() {
        let mut app = help_at(60, 16);
        press(&mut app, KeyCode::End);
        assert_eq!(press(&mut app, KeyCode::Esc), Effect::Redraw);
        assert!(!app.view.show_help);
        press(&mut app, KeyCode::Char('h'));
        assert_eq!(app.view.help_scroll, 0);
        press(&mut app, KeyCode::End);
        assert_eq!(
            press(&mut app, KeyCode::Char('q')),
            Effect::Redraw,
            "q closes it too"
        );
        assert!(!app.view.show_help);
        press(&mut app, KeyCode::F(1));
        assert_eq!(app.view.help_scroll, 0);
    }

    #[test]
    fn a_help_that_fits_does_not_scroll_and_other_keys_do_nothing() {
        let mut app = help_at(120, 50);
        press(&mut app, KeyCode::End);
        assert_eq!(app.view.help_scroll, 0);
        assert_eq!(press(&mut app, KeyCode::Char('K')), Effect::None);
        assert_eq!(press(&mut app, KeyCode::Left), Effect::None);
    }

    #[test]
    fn lines_break_between_words() {
        let lines = wrap("sort menu, prev/next column, reverse; or click a title", 20);
        assert_eq!(
            lines,
            [
                "sort menu, prev/next",
                "column, reverse; or",
                "click a title"
            ]
        );
        assert_eq!(
            wrap("abcdefgh", 3),
            ["abc", "def", "gh"],
            "only a long word is cut"
        );
        assert_eq!(wrap("", 10), [""]);
        let entry = entry_lines("F9", "signal menu: type a number", 30);
        assert_eq!(
            entry,
            [
                "  F9            signal menu:",
                "                type a number"
            ]
        );
    }

    #[test]
    fn a_replay_lists_its_keys_first_and_the_action_keys_as_off() {
        let mut app = App::new(1.0, false, true);
        app.replay = true;
        assert!(is_replay(&app));
        let lines = help_lines(&app, 200);
        let row = |needle: &str| lines.iter().position(|l| l.text.contains(needle));
        assert!(row("pause or play") < row("General"));
        assert!(row("one frame back or on").is_some());
        assert_eq!(row("scroll the command sideways"), None, "← → step time");
        assert_eq!(row("next GPU"), None, "g goes to a time");
        assert_eq!(row("tag or untag"), None, "Space pauses");
        let off = row("Off in a replay").expect("the off section");
        for keys in ["T K I", "F7 F8 n", "s P S"] {
            let at = row(keys).expect(keys);
            assert!(at > off && lines[at].style == HelpStyle::Off, "{keys}");
        }
        assert!(
            !is_replay(&App::new(1.0, false, true)),
            "read-only is not a replay"
        );
    }
}
