//! The setup screen (F2, as in nvtop): its items and keys. It chooses the panels shown, the
//! history metrics, the process table's columns, the refresh rate and the theme. Every change
//! applies at once; closing the screen (Esc, F2, `q`) saves the `[ui]` table to the config file,
//! and the status line says where, or why it could not.

use std::path::PathBuf;
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent};

use super::columns::{self, Column};
use super::{App, Effect};
use crate::config::{HistoryMetric, Panels, ThemeName, UiConfig, REFRESH_CHOICES};
use crate::sampler::SamplerRequest;

/// The open setup screen: which item the cursor is on, and the choices it opened with.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SetupScreen {
    pub(crate) cursor: usize,
    /// Closing with these unchanged writes nothing.
    opened_with: UiConfig,
}

/// The screen's sections, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Panels,
    History,
    Columns,
    Refresh,
    Theme,
}

impl Section {
    pub(crate) fn title(self) -> &'static str {
        match self {
            Section::Panels => "Panels",
            Section::History => "History plots",
            Section::Columns => "Process columns",
            Section::Refresh => "Refresh",
            Section::Theme => "Theme",
        }
    }
}

/// One line of the setup screen that the cursor can rest on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item {
    Panel(PanelKind),
    Metric(HistoryMetric),
    Column(Column),
    Refresh,
    Theme,
}

/// A panel the user can hide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PanelKind {
    GpuDetails,
    History,
    Balance,
    Host,
    Jobs,
    PyTorch,
}

impl PanelKind {
    const ALL: [PanelKind; 6] = [
        PanelKind::GpuDetails,
        PanelKind::History,
        PanelKind::Balance,
        PanelKind::Host,
        PanelKind::Jobs,
        PanelKind::PyTorch,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            PanelKind::GpuDetails => "GPU detail rows",
            PanelKind::History => "history",
            PanelKind::Balance => "balance",
            PanelKind::Host => "host",
            PanelKind::Jobs => "jobs",
            PanelKind::PyTorch => "PyTorch allocator",
        }
    }

    fn shown(self, panels: Panels) -> bool {
        let p = panels;
        match self {
            PanelKind::GpuDetails => p.gpu_details,
            PanelKind::History => p.history,
            PanelKind::Balance => p.balance,
            PanelKind::Host => p.host,
            PanelKind::Jobs => p.jobs,
            PanelKind::PyTorch => p.pytorch,
        }
    }

    fn flag(self, panels: &mut Panels) -> &mut bool {
        match self {
            PanelKind::GpuDetails => &mut panels.gpu_details,
            PanelKind::History => &mut panels.history,
            PanelKind::Balance => &mut panels.balance,
            PanelKind::Host => &mut panels.host,
            PanelKind::Jobs => &mut panels.jobs,
            PanelKind::PyTorch => &mut panels.pytorch,
        }
    }
}

impl Item {
    pub(crate) fn section(self) -> Section {
        match self {
            Item::Panel(_) => Section::Panels,
            Item::Metric(_) => Section::History,
            Item::Column(_) => Section::Columns,
            Item::Refresh => Section::Refresh,
            Item::Theme => Section::Theme,
        }
    }
}

/// Every item, in screen order. PID and COMMAND always show, so they are not listed.
pub(crate) fn items() -> Vec<Item> {
    let mut items: Vec<Item> = PanelKind::ALL.into_iter().map(Item::Panel).collect();
    items.extend(HistoryMetric::ALL.into_iter().map(Item::Metric));
    items.extend(
        columns::ORDER
            .into_iter()
            .filter(|c| *c != Column::Pid)
            .map(Item::Column),
    );
    items.extend([Item::Refresh, Item::Theme]);
    items
}

/// Whether the setup screen can hide `column`: PID (and COMMAND, not in the list) always show,
/// as a row must say which process it is.
fn hideable(column: Column) -> bool {
    column != Column::Pid
}

/// A sentence for the names in `hidden_columns` that are not a column that can be hidden (a
/// typo, or "pid"); they stay in the file and change nothing.
fn unknown_hidden_columns(hidden: &[String]) -> Option<String> {
    let known = |h: &String| {
        columns::ORDER
            .into_iter()
            .any(|c| hideable(c) && is_key_of(h, c))
    };
    let unknown: Vec<String> = hidden
        .iter()
        .filter(|h| !known(h))
        .map(|h| format!("\"{}\"", crate::format::escape(h)))
        .collect();
    (!unknown.is_empty()).then(|| {
        format!(
            "the [ui] table's hidden_columns names {}, which is not a column F2 can hide; \
             PID and COMMAND always show",
            unknown.join(", ")
        )
    })
}

/// The config file's name for a column: its title in lower case.
pub(crate) fn column_key(column: Column) -> String {
    column.title().to_lowercase()
}

/// Whether `key` is [`column_key`] of `column`; without a `String` for an ASCII title.
fn is_key_of(key: &str, column: Column) -> bool {
    let title = column.title();
    if !title.is_ascii() {
        return key == column_key(column);
    }
    key.len() == title.len()
        && (key.bytes().zip(title.bytes())).all(|(k, t)| k == t.to_ascii_lowercase())
}

/// Whether `item` is on (toggles), as the screen shows it.
pub(crate) fn is_on(ui: &UiConfig, item: Item) -> bool {
    match item {
        Item::Panel(kind) => kind.shown(ui.panels),
        Item::Metric(metric) => ui.history.contains(&metric),
        Item::Column(column) => !ui.hidden_columns.contains(&column_key(column)),
        Item::Refresh | Item::Theme => true,
    }
}

impl App {
    /// F2: opens the setup screen on its first item.
    pub(super) fn open_setup(&mut self) -> Effect {
        self.setup = Some(SetupScreen {
            cursor: 0,
            opened_with: self.ui.clone(),
        });
        Effect::Redraw
    }

    pub(super) fn on_setup_key(&mut self, key: KeyEvent) -> Effect {
        let count = items().len();
        let cursor = self.setup.as_ref().map_or(0, |s| s.cursor);
        let item = items()[cursor.min(count - 1)];
        match key.code {
            KeyCode::Esc | KeyCode::F(2) | KeyCode::Char('q') => return self.close_setup(),
            KeyCode::Down | KeyCode::Char('j') => {
                self.move_setup_cursor((cursor + 1).min(count - 1));
            }
            KeyCode::Up | KeyCode::Char('k') => self.move_setup_cursor(cursor.saturating_sub(1)),
            KeyCode::Home => self.move_setup_cursor(0),
            KeyCode::End => self.move_setup_cursor(count - 1),
            KeyCode::Char(' ') | KeyCode::Enter | KeyCode::Right => return self.change(item, 1),
            KeyCode::Left => return self.change(item, -1),
            _ => return Effect::None,
        }
        Effect::Redraw
    }

    fn move_setup_cursor(&mut self, to: usize) {
        if let Some(setup) = &mut self.setup {
            setup.cursor = to;
        }
    }

    /// Toggles a flag, or steps the refresh rate or the theme by `step`.
    fn change(&mut self, item: Item, step: isize) -> Effect {
        match item {
            Item::Panel(kind) => {
                let flag = kind.flag(&mut self.ui.panels);
                *flag = !*flag;
            }
            Item::Metric(metric) => toggle_metric(&mut self.ui.history, metric),
            Item::Column(column) => {
                let key = column_key(column);
                let hidden = &mut self.ui.hidden_columns;
                match hidden.iter().position(|k| *k == key) {
                    Some(at) => {
                        hidden.remove(at);
                    }
                    None => hidden.push(key),
                }
            }
            Item::Theme => {
                let all = ThemeName::ALL;
                let now = all.iter().position(|t| *t == self.ui.theme).unwrap_or(0);
                self.ui.theme = all[cycle(now, step, all.len())];
            }
            Item::Refresh => return self.step_refresh(step),
        }
        Effect::Redraw
    }

    /// The next refresh choice, passed on to the sampler at once.
    fn step_refresh(&mut self, step: isize) -> Effect {
        let now = REFRESH_CHOICES
            .iter()
            .position(|s| *s >= self.delay_seconds)
            .unwrap_or(REFRESH_CHOICES.len() - 1);
        let seconds = REFRESH_CHOICES[cycle(now, step, REFRESH_CHOICES.len())];
        self.delay_seconds = seconds;
        self.history.set_interval(seconds);
        self.ui.refresh_seconds = Some(seconds);
        Effect::AskSampler(SamplerRequest::Interval(Duration::from_secs_f64(seconds)))
    }

    /// Whether closing the setup screen saves its changes: there is a file to save to, and its
    /// `[ui]` table was read (saving would replace one that was not).
    pub(crate) fn setup_saves(&self) -> bool {
        self.config_path.is_some() && !self.ui_unreadable
    }

    /// Closes the screen and saves its choices: only when they changed, and never over a
    /// `[ui]` table that could not be read (saving would replace what the user wrote there).
    pub(super) fn close_setup(&mut self) -> Effect {
        let opened_with = self.setup.take().map(|s| s.opened_with);
        if opened_with.as_ref() == Some(&self.ui) {
            self.status = Some("settings unchanged; nothing saved".to_string());
            return Effect::Redraw;
        }
        if self.ui_unreadable {
            self.status = Some(
                "settings kept for this run only: the [ui] table of the config file could not \
                 be read, and saving would replace it; mend it or remove it to save from here"
                    .to_string(),
            );
            return Effect::Redraw;
        }
        self.status = Some(match &self.config_path {
            Some(path) => match self.ui.save(path) {
                Ok(()) => format!(
                    "settings saved to {}",
                    crate::format::escape(&path.to_string_lossy())
                ),
                Err(sentence) => sentence,
            },
            None => "settings kept for this run only: set XDG_CONFIG_HOME or HOME, \
                     or pass --config FILE, to save them"
                .to_string(),
        });
        Effect::Redraw
    }

    /// Uses `ui` (the `[ui]` table, with `--theme` applied) and saves changes to `path`;
    /// `notice` is why the table could not be used, for the status line.
    pub fn with_ui(mut self, ui: UiConfig, path: Option<PathBuf>, notice: Option<String>) -> Self {
        self.ui_unreadable = notice.is_some();
        let notice = notice.or_else(|| unknown_hidden_columns(&ui.hidden_columns));
        self.ui = ui;
        self.config_path = path;
        if notice.is_some() {
            self.status = notice;
        }
        self
    }

    /// The theme to draw with: the chosen one, or mono without colours (NO_COLOR).
    pub(crate) fn theme(&self) -> crate::terminal::theme::Theme {
        use crate::terminal::theme::{Theme, ThemeName};
        Theme::named(if self.colors {
            self.ui.theme
        } else {
            ThemeName::Mono
        })
    }

    /// Whether the user hid `column` in the setup screen: [`App::hidden_columns`] without the
    /// vector, as a frame asks.
    pub(crate) fn is_column_hidden(&self, column: Column) -> bool {
        hideable(column) && self.ui.hidden_columns.iter().any(|h| is_key_of(h, column))
    }

    /// The process columns the user hid in the setup screen.
    pub(crate) fn hidden_columns(&self) -> Vec<Column> {
        // Asked each frame: compared with each column's key without making it.
        columns::ORDER
            .into_iter()
            .filter(|c| self.is_column_hidden(*c))
            .collect()
    }
}

fn toggle_metric(history: &mut Vec<HistoryMetric>, metric: HistoryMetric) {
    if let Some(at) = history.iter().position(|m| *m == metric) {
        history.remove(at);
    } else {
        history.push(metric);
        history.sort();
    }
}

/// `now` moved by `step` around `len` choices.
fn cycle(now: usize, step: isize, len: usize) -> usize {
    (now as isize + step).rem_euclid(len as isize) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyModifiers;

    /// A hidden column is found by its key as it always was: the title in lower case.
    #[test]
    fn column_keys_match_their_lower_case_titles_only() {
        for column in columns::ORDER {
            for other in columns::ORDER {
                let same = column_key(other) == column_key(column);
                assert_eq!(is_key_of(&column_key(other), column), same);
            }
            assert!(!is_key_of(column.title(), column) || column.title() == column_key(column));
            assert!(!is_key_of("", column));
        }
    }

    /// `hidden_columns = ["pid"]` hid the PID column, which F2 does not list and so could not
    /// bring back; a name that is no column was taken without a word.
    #[test]
    fn pid_cannot_be_hidden_and_an_unknown_name_gets_a_sentence() {
        let ui = UiConfig {
            hidden_columns: vec!["pid".into(), "gpu".into(), "zzz".into()],
            ..UiConfig::default()
        };
        let app = App::new(1.0, true, false).with_ui(ui, None, None);
        assert!(!app.is_column_hidden(Column::Pid));
        assert!(!app.hidden_columns().contains(&Column::Pid));
        assert!(app.hidden_columns().contains(&Column::Gpu));
        let status = app.status.clone().unwrap_or_default();
        assert!(status.contains("\"pid\", \"zzz\""), "{status}");
        assert_eq!(app.ui.hidden_columns.len(), 3, "the names stay in the file");
    }

    fn press(app: &mut App, code: KeyCode) -> Effect {
        app.on_key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn cursor_to(app: &mut App, item: Item) {
        let at = items().iter().position(|i| *i == item).unwrap();
        app.setup.as_mut().unwrap().cursor = at;
    }

    #[test]
    fn f2_opens_and_toggles_apply_at_once() {
        let mut app = App::new(1.0, true, false);
        press(&mut app, KeyCode::F(2));
        assert!(app.setup.is_some());
        cursor_to(&mut app, Item::Panel(PanelKind::Host));
        press(&mut app, KeyCode::Char(' '));
        assert!(!app.ui.panels.host);
        cursor_to(&mut app, Item::Metric(HistoryMetric::Temperature));
        press(&mut app, KeyCode::Enter);
        assert!(app.ui.history.contains(&HistoryMetric::Temperature));
        cursor_to(&mut app, Item::Column(Column::Kind));
        press(&mut app, KeyCode::Char(' '));
        let hidden = app.hidden_columns();
        assert!(hidden.contains(&Column::Kind), "{hidden:?}");
        // The columns a new user does not see stay hidden.
        assert!(hidden.contains(&Column::Container), "{hidden:?}");
        cursor_to(&mut app, Item::Theme);
        press(&mut app, KeyCode::Right);
        assert_eq!(app.ui.theme, ThemeName::Light);
        press(&mut app, KeyCode::Left);
        press(&mut app, KeyCode::Left);
        assert_eq!(app.ui.theme, ThemeName::Mono);
    }

    #[test]
    fn refresh_steps_through_the_choices_and_tells_the_sampler() {
        let mut app = App::new(1.0, true, false);
        press(&mut app, KeyCode::F(2));
        cursor_to(&mut app, Item::Refresh);
        let effect = press(&mut app, KeyCode::Right);
        assert_eq!(
            effect,
            Effect::AskSampler(SamplerRequest::Interval(Duration::from_secs(2)))
        );
        assert_eq!(app.ui.refresh_seconds, Some(2.0));
        assert_eq!(
            app.history.capacity(),
            151,
            "5 minutes at one sample per 2 s"
        );
        press(&mut app, KeyCode::Left);
        press(&mut app, KeyCode::Left);
        assert_eq!(app.delay_seconds, 0.5);
    }

    #[test]
    fn closing_saves_or_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("torchtop/config.toml");
        let mut app =
            App::new(1.0, true, false).with_ui(UiConfig::default(), Some(path.clone()), None);
        press(&mut app, KeyCode::F(2));
        cursor_to(&mut app, Item::Theme);
        press(&mut app, KeyCode::Right);
        assert_eq!(press(&mut app, KeyCode::Esc), Effect::Redraw);
        assert!(app.setup.is_none(), "Esc closes the screen, never quits");
        let status = app.status.clone().unwrap();
        assert!(status.starts_with("settings saved to "), "{status}");
        let saved = crate::settings::load(&path).unwrap().ui(None);
        assert_eq!(saved.0.theme, ThemeName::Light);

        // A directory where the file should be: a sentence, not a crash.
        let blocked = dir.path().join("blocked.toml");
        std::fs::create_dir(&blocked).unwrap();
        let mut app = App::new(1.0, true, false).with_ui(UiConfig::default(), Some(blocked), None);
        press(&mut app, KeyCode::F(2));
        cursor_to(&mut app, Item::Theme);
        press(&mut app, KeyCode::Right);
        press(&mut app, KeyCode::F(2));
        let status = app.status.clone().unwrap();
        assert!(
            status.starts_with("settings not saved: cannot "),
            "{status}"
        );
    }

    /// A review: F2 then q, with nothing changed, rewrote the user's `[ui]` table, and one the
    /// monitor could not read (`theme = "neon"`) was replaced by the defaults.
    #[test]
    fn closing_unchanged_or_over_an_unreadable_table_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let mut app =
            App::new(1.0, true, false).with_ui(UiConfig::default(), Some(path.clone()), None);
        press(&mut app, KeyCode::F(2));
        press(&mut app, KeyCode::Esc);
        assert_eq!(
            app.status.as_deref(),
            Some("settings unchanged; nothing saved")
        );
        assert!(!path.exists(), "nothing written");

        let written = "[ui]\ntheme = \"neon\"\nrefresh_seconds = -3\n";
        std::fs::write(&path, written).unwrap();
        let why = Some("the [ui] table of the config file is not understood".to_string());
        let mut app =
            App::new(1.0, true, false).with_ui(UiConfig::default(), Some(path.clone()), why);
        press(&mut app, KeyCode::F(2));
        cursor_to(&mut app, Item::Theme);
        press(&mut app, KeyCode::Right);
        press(&mut app, KeyCode::Esc);
        let status = app.status.clone().unwrap();
        assert!(
            status.starts_with("settings kept for this run only"),
            "{status}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
    }

    #[test]
    fn the_cursor_stays_on_the_items() {
        let mut app = App::new(1.0, true, false);
        press(&mut app, KeyCode::F(2));
        press(&mut app, KeyCode::Up);
        assert_eq!(app.setup.as_ref().unwrap().cursor, 0);
        press(&mut app, KeyCode::End);
        press(&mut app, KeyCode::Down);
        assert_eq!(app.setup.as_ref().unwrap().cursor, items().len() - 1);
        assert_eq!(items().last(), Some(&Item::Theme));
    }
}
