//! The state machine: snapshots, key presses, mouse clicks and action outcomes in; view state,
//! dialogs and [`Effect`]s out. No I/O happens here, so every transition is unit-testable:
//! an action leaves as an [`ActionRequest`] in [`Effect::Act`], the event loop runs it off the
//! UI task, and its [`ActionReport`] comes back through [`App::on_action_done`].
//!
//! The rows the user sees ([`App::rows`]) are the only rows the selection, the tags and the
//! actions use; see [`rows`].

mod action_keys;
pub(crate) mod agent_keys;
pub(crate) mod columns;
pub(crate) mod detail;
pub(crate) mod help;
pub(crate) mod layout;
pub(crate) mod ranks;
pub(crate) mod rows;
pub(crate) mod setup;
mod table_keys;
mod tree_view;
pub(crate) mod view;
pub(crate) mod warning_groups;
mod warnings_keys;
pub(crate) mod warnings_view;

#[cfg(test)]
mod keys_tests;
#[cfg(test)]
mod screen_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod warnings_tests;

use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::actions::{ActionReport, ActionRequest, ActionTarget, Signal};
use crate::model::filter::Tags;
use crate::model::{History, MemsnapReady, Snapshot};
use crate::protocol::AgentCommand;
use crate::sampler::SamplerRequest;
use layout::Plan;
use view::ViewState;
use warnings_view::WarningsView;

pub(crate) use rows::{ProcessRow, RowKey, RowRef, RowSettings};

/// The status after an Esc with nothing to close, for a user who expected it to quit.
pub(crate) const ESC_HAS_NOTHING_TO_CLOSE: &str = "Esc: nothing to close (q or F10 quits)";

/// Characters COMMAND moves per `←` or `→`.
const COMMAND_STEP: usize = 8;

/// The sentence for any action key pressed under `--readonly`.
pub(crate) const READONLY_REFUSAL: &str =
    "read-only mode: signals, renice and agent commands are turned off (--readonly)";

/// What the event loop must do after the app handled an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Nothing changed on screen.
    None,
    /// The view changed: draw again.
    Redraw,
    Quit,
    /// Run this request off the UI task, then hand the report to [`App::on_action_done`].
    Act(ActionRequest),
    /// Pass this request to the sampler; its outcome comes back as a snapshot notice.
    AskSampler(SamplerRequest),
    /// `R`: start a recording, or stop the one running.
    ToggleRecording,
}

/// Which dialog has the keyboard. The help overlay (in [`ViewState`]) and the warnings view
/// ([`WarningsView`]) are overlays handled in `Normal`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    #[default]
    Normal,
    /// Typing the `/` filter; the text lives in [`RowSettings::filter`] and applies live.
    Filter,
    /// Asking before a signal is sent to `targets`.
    Confirm {
        signal: Signal,
        targets: Vec<ActionTarget>,
    },
    /// `P`: asking before the agent inside `target` resets its peak memory figures, which
    /// cannot be had back.
    ConfirmPeakReset { target: agent_keys::AgentTarget },
    /// F9: choosing a signal; `selected` indexes [`Signal::ALL`].
    SignalMenu {
        selected: usize,
        targets: Vec<ActionTarget>,
        /// The digit typed just before, so "1" then "5" picks signal 15, as in htop.
        typed: Option<u32>,
    },
    /// `n`: typing a nice value.
    NiceInput {
        text: String,
        /// Why the last Enter was refused, shown in the dialog.
        error: Option<String>,
        targets: Vec<ActionTarget>,
        /// The nice value shown on the row, when there is one target.
        current: Option<i32>,
    },
    /// F6: choosing the sort column; `selected` indexes
    /// [`SortKey::ALL`](crate::model::filter::SortKey::ALL).
    SortMenu { selected: usize },
    /// `u`: choosing whose processes to show; `selected` 0 is everyone, then `users`.
    UserMenu { selected: usize, users: Vec<String> },
}

pub struct App {
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) history: History,
    pub(crate) view: ViewState,
    /// The warnings, grouped, and the `w` view over them.
    pub(crate) warnings_view: WarningsView,
    pub(crate) readonly: bool,
    pub(crate) colors: bool,
    pub(crate) delay_seconds: f64,
    /// One sentence for the status line: the outcome of the last action.
    pub(crate) status: Option<String>,
    /// The status is an action's outcome, kept over the sampler's notices until the next key
    /// (as htop keeps its own): other users' agents coming and going must not hide it.
    status_held: bool,
    /// A sentence for stderr once the terminal is restored: what the last key did where no
    /// frame could show it.
    pub(crate) farewell: Option<String>,
    pub(crate) mode: Mode,
    /// Filter, sort order and tree view.
    pub(crate) settings: RowSettings,
    pub(crate) tags: Tags,
    /// The rows of the current snapshot under `settings`, in display order.
    rows: Vec<RowRef>,
    /// What sorting the rows again keeps between snapshots.
    row_scratch: rows::RowScratch,
    /// The selected row's process, followed across refreshes.
    selected_key: Option<RowKey>,
    /// A short text at the right of the header: the recording indicator, or REPLAY.
    pub(crate) badge: Option<String>,
    /// Whether this app shows a recording (`torchtop replay`): its help lists the replay's
    /// keys first.
    pub(crate) replay: bool,
    /// The last snapshot file handed to the viewer, by request number.
    memsnap_taken: Option<u64>,
    /// The detail view (`Enter`), when open.
    pub(crate) detail: Option<detail::DetailView>,
    /// The header's clock in UTC (`--utc`) instead of local time.
    pub(crate) utc: bool,
    /// The uid whose processes `m` ("only mine") shows: the user running torchtop.
    pub(crate) my_uid: u32,
    /// The effective uid torchtop runs as: unless it is root, it reads only its own user's
    /// agents, so another user's process shows none whether it has one or not.
    pub(crate) effective_uid: u32,
    /// The setup screen (F2), while open.
    pub(crate) setup: Option<setup::SetupScreen>,
    /// What the setup screen chooses: panels, history metrics, columns, refresh, theme.
    pub(crate) ui: crate::config::UiConfig,
    /// Where the setup screen saves `ui`; `None` when there is nowhere to save.
    config_path: Option<std::path::PathBuf>,
    /// The `[ui]` table could not be read: the setup screen does not save over it.
    ui_unreadable: bool,
    /// The rows on screen (and around them) as last told to the sampler
    /// ([`App::screen_rows_request`]), and whether that was of the tree.
    told_on_screen: Option<Vec<u32>>,
    told_tree: bool,
}

impl App {
    pub fn new(delay_seconds: f64, colors: bool, readonly: bool) -> Self {
        App {
            snapshot: Arc::new(Snapshot::default()),
            history: History::for_interval(delay_seconds),
            view: ViewState::default(),
            warnings_view: WarningsView::default(),
            readonly,
            colors,
            delay_seconds,
            status: None,
            status_held: false,
            farewell: None,
            mode: Mode::Normal,
            settings: RowSettings::default(),
            tags: Tags::new(),
            rows: Vec::new(),
            row_scratch: rows::RowScratch::default(),
            selected_key: None,
            badge: None,
            replay: false,
            memsnap_taken: None,
            detail: None,
            utc: false,
            my_uid: crate::sys::invoking_uid(),
            effective_uid: crate::sys::effective_uid(),
            setup: None,
            ui: crate::config::UiConfig::default(),
            config_path: None,
            ui_unreadable: false,
            told_on_screen: None,
            told_tree: false,
        }
    }

    /// Shows the header's clock in UTC instead of local time (`--utc`).
    pub fn with_utc(mut self, utc: bool) -> Self {
        self.utc = utc;
        self
    }

    /// Starts with only `user`'s processes and only those on `gpus` (`--user`, `--gpus`).
    pub fn with_filters(mut self, user: Option<String>, gpus: Option<Vec<u32>>) -> Self {
        self.settings.user = user;
        self.settings.gpus = gpus;
        self.refresh_rows();
        self
    }

    // ---- rows and selection ----------------------------------------------------------------

    /// The process rows on screen, in order: filtered and sorted, or the tree.
    pub(crate) fn rows(&self) -> Vec<ProcessRow<'_>> {
        self.rows
            .iter()
            .map(|r| rows::materialize(&self.snapshot, r))
            .collect()
    }

    /// The rows `first..first + count` of [`App::rows`], built only for those: a frame draws a
    /// screenful of a table that may hold thousands of rows.
    pub(crate) fn rows_window(
        &self,
        first: usize,
        count: usize,
    ) -> impl Iterator<Item = ProcessRow<'_>> {
        self.rows
            .iter()
            .skip(first)
            .take(count)
            .map(|r| rows::materialize(&self.snapshot, r))
    }

    /// Whether any row shows a rank (the RANK column is then offered), without building rows.
    pub(crate) fn any_row_has_rank(&self) -> bool {
        self.rows.iter().any(|r| r.has_rank(&self.snapshot))
    }

    pub(crate) fn row_count(&self) -> usize {
        self.rows.len()
    }

    pub(crate) fn selected_row(&self) -> Option<ProcessRow<'_>> {
        self.rows
            .get(self.view.selected)
            .map(|r| rows::materialize(&self.snapshot, r))
    }

    /// Whether the process on this row is tagged.
    pub(crate) fn is_tagged(&self, row: &ProcessRow<'_>) -> bool {
        row.identity().is_some_and(|id| self.tags.contains(&id))
    }

    pub(crate) fn on_snapshot(&mut self, snapshot: Arc<Snapshot>) {
        if let Some(notice) = snapshot.notices.last().filter(|_| !self.status_held) {
            self.status = Some(notice.clone());
        }
        self.history.record(&snapshot);
        self.snapshot = snapshot;
        self.warnings_view.refresh(&self.snapshot);
        self.drop_tags_of_exited_processes();
        self.refresh_rows();
    }

    /// The snapshot file that `S` asked for, once it is written, and only once: the event loop
    /// opens it in the viewer.
    pub(crate) fn take_memsnap(&mut self) -> Option<MemsnapReady> {
        let ready = self.snapshot.memsnap_ready.as_ref()?;
        if self.memsnap_taken == Some(ready.request) {
            return None;
        }
        self.memsnap_taken = Some(ready.request);
        Some(ready.clone())
    }

    /// Records where this frame puts the panels: page keys move by the table's height, and
    /// clicks are mapped to rows through the areas drawn.
    pub(crate) fn set_layout(&mut self, plan: Plan) {
        let page = plan.process_rows();
        if let Plan::Screen(areas) = &plan {
            self.warnings_view.set_area(areas.warnings_view);
        }
        self.view.plan = plan;
        self.view.set_page_rows(page, self.rows.len());
    }

    /// Recomputes the rows after the snapshot or the settings changed, keeping the selection on
    /// the same process when it is still listed, as htop does when its tree view is toggled.
    fn refresh_rows(&mut self) {
        let scratch = &mut self.row_scratch;
        rows::compute_rows_into(&self.snapshot, &self.settings, scratch, &mut self.rows);
        let before = self.selected_key;
        match before.and_then(|key| self.row_of(key)) {
            Some(index) => self.view.select_index(index, self.rows.len()),
            None => self.view.clamp_to(self.rows.len()),
        }
        self.remember_selection();
        // A tree row stands for every GPU of its process. Keeping the GPU of the flat row it
        // came from brings `t` `t` back to that row, not to the process's first one.
        if let (Some(now), Some(before)) = (self.selected_key.as_mut(), before) {
            if now.gpu.is_none() && now.same_process(&before) {
                now.gpu = before.gpu;
            }
        }
    }

    /// The row to select for `key`: its own row; else its process's row on its GPU (the flat
    /// table has one row per GPU, the tree one per process); else its process's first row.
    fn row_of(&self, key: RowKey) -> Option<usize> {
        let mut first = None;
        for (index, r) in self.rows.iter().enumerate() {
            let row = rows::materialize(&self.snapshot, r);
            let row_key = row.key();
            if !row_key.same_process(&key) {
                continue;
            }
            if row_key == key || key.gpu.is_some_and(|gpu| row.holds_gpu(gpu)) {
                return Some(index);
            }
            first.get_or_insert(index);
        }
        first
    }

    fn remember_selection(&mut self) {
        self.selected_key = self.selected_row().map(|r| r.key());
    }

    // ---- input -----------------------------------------------------------------------------

    pub(crate) fn on_key(&mut self, key: KeyEvent) -> Effect {
        // The hint answers one Esc. It goes with the next key, which may be an Esc that closes
        // an overlay opened since: left up, it would contradict what that key did.
        self.status_held = false;
        let hint_up = self.status.as_deref() == Some(ESC_HAS_NOTHING_TO_CLOSE);
        if hint_up {
            self.status = None;
        }
        match self.dispatch_key(key) {
            Effect::None if hint_up => Effect::Redraw,
            effect => effect,
        }
    }

    fn dispatch_key(&mut self, key: KeyEvent) -> Effect {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Effect::Quit;
        }
        // F10 quits from anywhere, as in htop and nvtop.
        if key.code == KeyCode::F(10) {
            return Effect::Quit;
        }
        if self.view.plan.screen_hidden() {
            // All that is drawn says "q quits": it does, whatever waits behind, a menu, a
            // confirmation (which it leaves unanswered) or the filter prompt, whose text no
            // one can see. The setup screen first saves what changed, as its own q does.
            if key.code == KeyCode::Char('q') {
                if self.setup.is_some() {
                    self.close_setup();
                    // Whether the settings were saved, and why not, was never seen: no status
                    // line is drawn at this size, and the monitor ends.
                    self.farewell = self.status.take();
                }
                return Effect::Quit;
            }
            if !self.key_works_unseen(key) {
                return Effect::None;
            }
        }
        if self.setup.is_some() {
            return self.on_setup_key(key);
        }
        match self.mode.clone() {
            Mode::Normal if self.view.show_help => self.on_help_key(key),
            Mode::Normal if self.detail.is_some() => self.on_process_detail_key(key),
            Mode::Normal if self.warnings_view.is_open() => self.on_warnings_key(key),
            Mode::Normal => self.on_normal_key(key),
            Mode::Filter => self.on_filter_key(key),
            Mode::Confirm { signal, targets } => self.on_confirm_key(key, signal, targets),
            Mode::ConfirmPeakReset { target } => self.on_confirm_peak_reset_key(key, target.pid),
            Mode::SignalMenu {
                selected,
                targets,
                typed,
            } => self.on_signal_menu_key(key, selected, targets, typed),
            Mode::NiceInput { .. } => self.on_nice_key(key),
            Mode::SortMenu { selected } => self.on_sort_menu_key(key, selected),
            Mode::UserMenu { selected, users } => self.on_user_menu_key(key, selected, users),
        }
    }

    /// Whether a key other than `q` still acts while the terminal is too small to draw the
    /// screen. Only what closes does: a key that moved the unseen selection, or answered a
    /// confirmation the user could not read, could signal the wrong process.
    fn key_works_unseen(&self, key: KeyEvent) -> bool {
        match key.code {
            KeyCode::Esc => true,
            KeyCode::Char('n' | 'N') => {
                matches!(
                    self.mode,
                    Mode::Confirm { .. } | Mode::ConfirmPeakReset { .. }
                )
            }
            _ => false,
        }
    }

    /// Puts the outcome of an action in the status line.
    pub(crate) fn on_action_done(&mut self, report: &ActionReport) {
        self.status = Some(report.sentence());
        self.status_held = true;
        self.apply_nice_results(report);
    }

    /// `q` closes the help as the menus close, as htop's does: an htop user leaves a
    /// sub-screen with it. F10 and Ctrl-C still quit from here.
    fn on_help_key(&mut self, key: KeyEvent) -> Effect {
        match key.code {
            KeyCode::Esc | KeyCode::Char('?' | 'h' | 'q') | KeyCode::F(1) => {
                self.view.show_help = false;
                // The next help opens at its top, as a new one.
                self.view.help_scroll = 0;
                Effect::Redraw
            }
            code => self.scroll_help(code),
        }
    }

    pub(super) fn on_normal_key(&mut self, key: KeyEvent) -> Effect {
        match key.code {
            KeyCode::Char('a') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                self.scroll_command(|_, _| 0)
            }
            KeyCode::Char('e') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                self.scroll_command(|_, end| end)
            }
            KeyCode::Left => self.scroll_command(|at, _| at.saturating_sub(COMMAND_STEP)),
            KeyCode::Right => self.scroll_command(|at, end| (at + COMMAND_STEP).min(end)),
            KeyCode::Char('q') => Effect::Quit,
            KeyCode::Esc => self.escape(),
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(view::ViewState::select_next),
            KeyCode::Up | KeyCode::Char('k') => {
                self.move_selection(view::ViewState::select_previous)
            }
            KeyCode::PageDown => self.move_selection(view::ViewState::page_down),
            KeyCode::PageUp => self.move_selection(view::ViewState::page_up),
            KeyCode::Home => self.move_selection(view::ViewState::select_first),
            KeyCode::End => self.move_selection(view::ViewState::select_last),
            KeyCode::Char(' ') => self.toggle_tag(),
            KeyCode::Char('U') => self.untag_all(),
            KeyCode::Char('T') => self.ask_to_signal(Signal::Term),
            KeyCode::Char('K') => self.ask_to_signal(Signal::Kill),
            KeyCode::Char('I') => self.ask_to_signal(Signal::Int),
            KeyCode::F(9) => self.open_signal_menu(),
            KeyCode::F(2) => self.open_setup(),
            KeyCode::F(7) => self.adjust_nice(-1),
            KeyCode::F(8) => self.adjust_nice(1),
            KeyCode::Char('n') => self.open_nice_input(),
            // htop's F3 (search) and F4 (filter) both open the one filter, which finds as it
            // is typed.
            KeyCode::Char('/') | KeyCode::F(3 | 4) => {
                self.mode = Mode::Filter;
                Effect::Redraw
            }
            KeyCode::Char('t') | KeyCode::F(5) => self.toggle_tree(),
            KeyCode::F(6) => self.open_sort_menu(),
            KeyCode::Char('u') => self.open_user_menu(),
            KeyCode::Char('>') => self.choose_sort(self.settings.sort.next()),
            KeyCode::Char('<') => self.choose_sort(self.settings.sort.prev()),
            KeyCode::Char('r') => self.set_sort(self.settings.sort, !self.settings.reverse),
            KeyCode::Char('?' | 'h') | KeyCode::F(1) => {
                self.view.toggle_help();
                Effect::Redraw
            }
            KeyCode::Char('w') => self.open_warnings(),
            KeyCode::Char('s') => self.ask_agent(AgentCommand::Snapshot),
            KeyCode::Char('P') => self.ask_to_reset_peak(),
            KeyCode::Char('S') => self.ask_for_agent(|pid| SamplerRequest::MemoryView { pid }),
            KeyCode::Char('R') => Effect::ToggleRecording,
            KeyCode::Enter => self.open_detail(),
            KeyCode::Char('a') => self.set_density(view::Density::Auto),
            KeyCode::Char('f') => self.set_density(view::Density::Full),
            KeyCode::Char('c') => self.set_density(view::Density::Compact),
            KeyCode::Char('g') => self.cycle_gpu_filter(),
            KeyCode::Char('m') => self.toggle_mine(),
            _ => Effect::None,
        }
    }

    /// Esc closes the help or drops a mark, then clears a kept filter; it never quits, so a
    /// second Esc after clearing a filter does not end the monitor (`q` and F10 do).
    fn escape(&mut self) -> Effect {
        if self.view.close_overlays() {
            return Effect::Redraw;
        }
        if !self.settings.filter.is_empty() {
            self.set_filter(String::new());
            return Effect::Redraw;
        }
        self.status = Some(ESC_HAS_NOTHING_TO_CLOSE.to_string());
        Effect::Redraw
    }

    fn move_selection(&mut self, step: impl FnOnce(&mut ViewState, usize)) -> Effect {
        step(&mut self.view, self.rows.len());
        self.remember_selection();
        Effect::Redraw
    }
}
