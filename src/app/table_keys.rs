//! The process table's own keys and clicks: a click or the wheel on a row, the sort order (F6,
//! `<` `>` `r`, a click on a column title), the `/` filter, the filters by user (`u`), by GPU
//! (`g`) and "only mine" (`m`), the screen density (`a` `f` `c`), and the sideways scroll of
//! COMMAND.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};

use super::columns;
use super::layout::Plan;
use super::rows;
use super::view::{first_visible_row, Density, ViewState};
use super::{App, Effect, Mode};
use crate::model::filter::SortKey;

impl App {
    /// A click selects the row under it (or sorts by the title under it); the wheel moves the
    /// selection. Only the main screen takes the mouse.
    pub(crate) fn on_mouse(&mut self, mouse: MouseEvent) -> Effect {
        // The wheel scrolls the help, as its keys do; nothing else reaches the table behind it.
        if self.mode == Mode::Normal && self.view.show_help && self.setup.is_none() {
            return match mouse.kind {
                MouseEventKind::ScrollDown => self.scroll_help(KeyCode::Down),
                MouseEventKind::ScrollUp => self.scroll_help(KeyCode::Up),
                _ => Effect::None,
            };
        }
        if self.mode != Mode::Normal
            || self.view.show_help
            || self.detail.is_some()
            || self.setup.is_some()
        {
            return Effect::None;
        }
        if self.warnings_view.is_open() {
            return self.on_warnings_mouse(mouse);
        }
        match mouse.kind {
            MouseEventKind::Down(MouseButton::Left) if self.is_header(mouse.row) => {
                self.click_header(mouse.column)
            }
            MouseEventKind::Down(MouseButton::Left) => match self.row_at(mouse.column, mouse.row) {
                Some(index) => {
                    self.view.select_index(index, self.rows.len());
                    self.remember_selection();
                    Effect::Redraw
                }
                None => Effect::None,
            },
            MouseEventKind::ScrollDown => self.move_selection(ViewState::select_next),
            MouseEventKind::ScrollUp => self.move_selection(ViewState::select_previous),
            _ => Effect::None,
        }
    }

    /// The index of the row drawn at screen cell (`column`, `y`), if a row is drawn there.
    fn row_at(&self, column: u16, y: u16) -> Option<usize> {
        let Plan::Screen(areas) = &self.view.plan else {
            return None;
        };
        let table = areas.processes;
        let body_top = table.y + 1;
        let inside = column >= table.x && column < table.right();
        if !inside || y < body_top || y >= table.bottom() {
            return None;
        }
        let height = usize::from(table.height - 1);
        let first = first_visible_row(
            self.view.offset,
            self.view.selected,
            height,
            self.rows.len(),
        );
        let index = first + usize::from(y - body_top);
        (index < self.rows.len()).then_some(index)
    }

    /// The columns of the process table as the last layout places them.
    pub(crate) fn columns(&self) -> Vec<columns::Placed> {
        let width = match &self.view.plan {
            Plan::Screen(areas) => areas.processes.width,
            Plan::TooSmall { .. } => 0,
        };
        let with_rank = self.any_row_has_rank();
        columns::fit_shown(width, with_rank, self.settings.tree, &self.hidden_columns())
    }

    /// `←` `→` Ctrl-A Ctrl-E: moves COMMAND sideways; `to(now, end)` gives the new offset,
    /// where `end` shows the tail of the longest command.
    pub(super) fn scroll_command(&mut self, to: impl FnOnce(usize, usize) -> usize) -> Effect {
        let width = usize::from(columns::command_width(&self.columns()));
        let longest = self
            .rows()
            .iter()
            .map(|r| {
                let prefix = r.tree.map_or(0, |(p, _)| p.chars().count());
                r.display_command()
                    .map_or(0, |c| c.chars().count() + prefix)
            })
            .max()
            .unwrap_or(0);
        let end = longest.saturating_sub(width);
        let now = self.view.command_scroll.min(end);
        self.view.command_scroll = to(now, end).min(end);
        Effect::Redraw
    }

    pub(super) fn is_header(&self, y: u16) -> bool {
        matches!(&self.view.plan, Plan::Screen(areas) if areas.processes.height > 0 && areas.processes.y == y)
    }

    /// A click on a column title sorts by it; on the sorted column, it reverses the order.
    pub(super) fn click_header(&mut self, x: u16) -> Effect {
        let Plan::Screen(areas) = &self.view.plan else {
            return Effect::None;
        };
        let table = areas.processes;
        if x < table.x || x >= table.right() {
            return Effect::None;
        }
        let key = columns::column_at(&self.columns(), x - table.x)
            .and_then(super::columns::Column::sort_key);
        match key {
            Some(key) => self.choose_sort(key),
            None => Effect::None,
        }
    }

    /// The `/` prompt: the filter applies as it is typed; Enter keeps it, Esc clears it.
    pub(super) fn on_filter_key(&mut self, key: KeyEvent) -> Effect {
        match key.code {
            KeyCode::Esc => {
                self.mode = Mode::Normal;
                self.set_filter(String::new());
            }
            KeyCode::Enter => {
                self.mode = Mode::Normal;
                self.view.select_first(self.rows.len());
                self.remember_selection();
            }
            KeyCode::Backspace => {
                let mut text = self.settings.filter.clone();
                text.pop();
                self.set_filter(text);
            }
            KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
                let text = format!("{}{c}", self.settings.filter);
                self.set_filter(text);
            }
            _ => return Effect::None,
        }
        Effect::Redraw
    }

    pub(super) fn set_filter(&mut self, text: String) {
        self.settings.filter = text;
        self.refresh_rows();
    }

    pub(super) fn open_sort_menu(&mut self) -> Effect {
        let selected = SortKey::ALL
            .iter()
            .position(|&k| k == self.settings.sort)
            .unwrap_or(0);
        self.mode = Mode::SortMenu { selected };
        Effect::Redraw
    }

    pub(super) fn on_sort_menu_key(&mut self, key: KeyEvent, selected: usize) -> Effect {
        let count = SortKey::ALL.len();
        let selected = match key.code {
            KeyCode::Esc | KeyCode::F(6) | KeyCode::Char('q') => {
                self.mode = Mode::Normal;
                return Effect::Redraw;
            }
            KeyCode::Enter => {
                self.mode = Mode::Normal;
                return self.choose_sort(SortKey::ALL[selected.min(count - 1)]);
            }
            KeyCode::Char('r') => {
                return self.set_sort(self.settings.sort, !self.settings.reverse);
            }
            KeyCode::Down | KeyCode::Char('j') => (selected + 1).min(count - 1),
            KeyCode::Up | KeyCode::Char('k') => selected.saturating_sub(1),
            _ => return Effect::None,
        };
        self.mode = Mode::SortMenu { selected };
        Effect::Redraw
    }

    /// A new sort column starts in its natural direction ([`SortKey::descending_first`]);
    /// choosing the current one again reverses it, as a second click on a header does.
    pub(super) fn choose_sort(&mut self, key: SortKey) -> Effect {
        let reverse = if key == self.settings.sort {
            !self.settings.reverse
        } else {
            key.descending_first()
        };
        self.set_sort(key, reverse)
    }

    pub(super) fn open_user_menu(&mut self) -> Effect {
        let users = rows::users(&self.snapshot);
        let selected = self
            .settings
            .user
            .as_ref()
            .and_then(|u| users.iter().position(|x| x == u))
            .map_or(0, |i| i + 1);
        self.mode = Mode::UserMenu { selected, users };
        Effect::Redraw
    }

    pub(super) fn on_user_menu_key(
        &mut self,
        key: KeyEvent,
        selected: usize,
        users: Vec<String>,
    ) -> Effect {
        let last = users.len();
        let selected = match key.code {
            KeyCode::Esc | KeyCode::Char('u' | 'q') => {
                self.mode = Mode::Normal;
                return Effect::Redraw;
            }
            KeyCode::Enter => {
                self.settings.user = selected.checked_sub(1).and_then(|i| users.get(i).cloned());
                self.mode = Mode::Normal;
                self.refresh_rows();
                return Effect::Redraw;
            }
            KeyCode::Down | KeyCode::Char('j') => (selected + 1).min(last),
            KeyCode::Up | KeyCode::Char('k') => selected.saturating_sub(1),
            KeyCode::Home => 0,
            KeyCode::End => last,
            _ => return Effect::None,
        };
        self.mode = Mode::UserMenu { selected, users };
        Effect::Redraw
    }

    pub(super) fn set_sort(&mut self, key: SortKey, reverse: bool) -> Effect {
        self.settings.sort = key;
        self.settings.reverse = reverse;
        if self.settings.tree {
            // The tree keeps its order and shows no sort arrow, so without a word the key
            // would seem to do nothing.
            let arrow = if reverse { '▼' } else { '▲' };
            self.status = Some(format!(
                "sorted by {}{arrow} in the flat table (t); the tree keeps its own order",
                key.label()
            ));
        }
        self.refresh_rows();
        Effect::Redraw
    }

    /// `a` `f` `c`: how much room the GPU detail rows and the history take.
    pub(super) fn set_density(&mut self, density: Density) -> Effect {
        self.view.density = density;
        self.status = Some(format!("layout: {}", density.name()));
        Effect::Redraw
    }

    /// `g`: every GPU, then each GPU alone in turn, then every GPU again. A `--gpus` list
    /// counts as "every GPU" here, so the next press shows its first GPU alone.
    pub(super) fn cycle_gpu_filter(&mut self) -> Effect {
        let mut indices: Vec<u32> = self.snapshot.gpus.iter().map(|g| g.index).collect();
        indices.sort_unstable();
        let next = match self.settings.gpus.as_deref() {
            Some([one]) => indices.iter().find(|&&i| i > *one).copied(),
            _ => indices.first().copied(),
        };
        self.settings.gpus = next.map(|i| vec![i]);
        self.status = Some(match next {
            Some(i) => format!("only processes on GPU {i} (g: next GPU)"),
            None => "processes on every GPU".to_string(),
        });
        self.refresh_rows();
        Effect::Redraw
    }

    /// `m`: only the processes of the user running torchtop, or everyone's again.
    pub(super) fn toggle_mine(&mut self) -> Effect {
        self.settings.mine = match self.settings.mine {
            Some(_) => None,
            None => Some(self.my_uid),
        };
        self.refresh_rows();
        Effect::Redraw
    }
}
