//! Keys that act on processes: tags, the targets of an action, the confirmation, the F9
//! signal menu and the `n` nice dialog. Every action leaves as an [`Effect::Act`]; nothing here
//! sends a signal itself.

use std::collections::BTreeMap;

use crossterm::event::{KeyCode, KeyEvent};

use super::{App, Effect, Mode, READONLY_REFUSAL};
use crate::actions::{
    Action, ActionError, ActionReport, ActionRequest, ActionTarget, Signal, NICE_MAX, NICE_MIN,
};
use crate::model::filter::{action_targets, Tags};
use crate::model::ProcessIdentity;

impl App {
    // ---- tags and targets ------------------------------------------------------------------

    /// Space: tags or untags the selected process and moves down, as in htop.
    pub(super) fn toggle_tag(&mut self) -> Effect {
        let Some(row) = self.selected_row() else {
            return Effect::None;
        };
        if let Some(id) = row.identity() {
            self.tags.toggle(id);
            self.move_selection(super::view::ViewState::select_next)
        } else {
            self.status = Some(not_visible(row.pid));
            Effect::Redraw
        }
    }

    /// Untags processes that exited, so a tag never passes to a later process with its pid.
    pub(super) fn drop_tags_of_exited_processes(&mut self) {
        if self.tags.is_empty() {
            return;
        }
        let alive: std::collections::BTreeSet<ProcessIdentity> = self
            .snapshot
            .processes
            .iter()
            .filter_map(ProcessIdentity::of_gpu_process)
            .chain(
                self.snapshot
                    .host_processes
                    .iter()
                    .map(ProcessIdentity::of_host_process),
            )
            .collect();
        let gone: Vec<ProcessIdentity> = self
            .tags
            .iter()
            .filter(|id| !alive.contains(id))
            .copied()
            .collect();
        for id in gone {
            self.tags.toggle(id);
        }
    }

    pub(super) fn untag_all(&mut self) -> Effect {
        self.tags.clear();
        Effect::Redraw
    }

    /// The tagged processes among the rows on screen, or else the selected one; an error
    /// sentence when there is nothing to act on.
    pub(super) fn targets(&self) -> Result<Vec<ActionTarget>, String> {
        let rows = self.rows();
        let mut on_screen: BTreeMap<ProcessIdentity, ActionTarget> = BTreeMap::new();
        let mut tagged = Tags::new();
        for row in &rows {
            let Some(id) = row.identity() else { continue };
            if self.tags.contains(&id) && !tagged.contains(&id) {
                tagged.toggle(id);
            }
            on_screen.entry(id).or_insert_with(|| ActionTarget {
                identity: id,
                user: row.user().map(str::to_string),
                command: row.command(),
            });
        }
        let selected = rows.get(self.view.selected);
        if tagged.is_empty() {
            match selected {
                None => return Err("no process is selected".to_string()),
                Some(row) if row.identity().is_none() => return Err(not_visible(row.pid)),
                Some(_) => {}
            }
        }
        let chosen = action_targets(
            &tagged,
            selected.and_then(super::rows::ProcessRow::identity),
        );
        Ok(chosen
            .iter()
            .filter_map(|id| on_screen.get(id).cloned())
            .collect())
    }

    /// Runs `open` with the targets, or refuses under `--readonly` or without a target.
    pub(super) fn with_targets(
        &mut self,
        open: impl FnOnce(&mut Self, Vec<ActionTarget>) -> Effect,
    ) -> Effect {
        if self.readonly {
            self.status = Some(READONLY_REFUSAL.to_string());
            return Effect::Redraw;
        }
        match self.targets() {
            Ok(targets) => open(self, targets),
            Err(sentence) => {
                self.status = Some(sentence);
                Effect::Redraw
            }
        }
    }

    // ---- signals ---------------------------------------------------------------------------

    pub(super) fn ask_to_signal(&mut self, signal: Signal) -> Effect {
        self.with_targets(|app, targets| {
            app.mode = Mode::Confirm { signal, targets };
            Effect::Redraw
        })
    }

    pub(super) fn open_signal_menu(&mut self) -> Effect {
        self.with_targets(|app, targets| {
            app.mode = Mode::SignalMenu {
                selected: 0,
                targets,
                typed: None,
            };
            Effect::Redraw
        })
    }

    pub(super) fn on_confirm_key(
        &mut self,
        key: KeyEvent,
        signal: Signal,
        targets: Vec<ActionTarget>,
    ) -> Effect {
        match key.code {
            KeyCode::Char('y' | 'Y') | KeyCode::Enter => {
                self.mode = Mode::Normal;
                self.status = None;
                Effect::Act(ActionRequest {
                    action: Action::Signal(signal),
                    targets,
                })
            }
            KeyCode::Char('n' | 'N') | KeyCode::Esc => {
                self.mode = Mode::Normal;
                self.status = Some(format!("{signal} not sent"));
                Effect::Redraw
            }
            _ => Effect::None,
        }
    }

    pub(super) fn on_signal_menu_key(
        &mut self,
        key: KeyEvent,
        selected: usize,
        targets: Vec<ActionTarget>,
        typed: Option<u32>,
    ) -> Effect {
        let count = Signal::ALL.len();
        let mut next_typed = None;
        let selected = match key.code {
            // Only digits are typed here, so `q` is free to close, as in the other menus.
            KeyCode::Esc | KeyCode::F(9) | KeyCode::Char('q') => {
                self.mode = Mode::Normal;
                return Effect::Redraw;
            }
            KeyCode::Enter => {
                let signal = Signal::ALL[selected.min(count - 1)];
                self.mode = Mode::Confirm { signal, targets };
                return Effect::Redraw;
            }
            KeyCode::Down | KeyCode::Char('j') => (selected + 1).min(count - 1),
            KeyCode::Up | KeyCode::Char('k') => selected.saturating_sub(1),
            KeyCode::Home => 0,
            KeyCode::End => count - 1,
            KeyCode::Char(c) => {
                let Some(digit) = c.to_digit(10) else {
                    return Effect::None;
                };
                let (found, rest) = signal_by_number(typed, digit);
                next_typed = rest;
                found.unwrap_or(selected)
            }
            _ => return Effect::None,
        };
        self.mode = Mode::SignalMenu {
            selected,
            targets,
            typed: next_typed,
        };
        Effect::Redraw
    }

    // ---- nice ------------------------------------------------------------------------------

    /// Shows the nice values a renice set at once, on the rows and in the `n` dialog, rather
    /// than the old ones until the next snapshot reads /proc again.
    pub(super) fn apply_nice_results(&mut self, report: &ActionReport) {
        let set: Vec<(ProcessIdentity, i32)> = report
            .request
            .targets
            .iter()
            .zip(&report.results)
            .filter_map(|(target, result)| Some((target.identity, (*result.as_ref().ok()?)?)))
            .collect();
        if set.is_empty() {
            return;
        }
        let snapshot = std::sync::Arc::make_mut(&mut self.snapshot);
        for (identity, nice) in set {
            let same = |pid: u32, start: Option<u64>| {
                pid == identity.pid && start == Some(identity.start_ticks)
            };
            for process in &mut snapshot.processes {
                if same(process.pid, process.start_ticks) {
                    process.nice = Some(nice);
                }
            }
            for process in &mut snapshot.host_processes {
                if same(process.pid, Some(process.start_ticks)) {
                    process.nice = Some(nice);
                }
            }
        }
    }

    pub(super) fn adjust_nice(&mut self, delta: i32) -> Effect {
        self.with_targets(|app, targets| {
            app.status = None;
            Effect::Act(ActionRequest {
                action: Action::AdjustNice(delta),
                targets,
            })
        })
    }

    pub(super) fn open_nice_input(&mut self) -> Effect {
        let current = self.selected_row().and_then(|r| r.nice());
        self.with_targets(|app, targets| {
            let current = if targets.len() == 1 { current } else { None };
            app.mode = Mode::NiceInput {
                text: String::new(),
                error: None,
                targets,
                current,
            };
            Effect::Redraw
        })
    }

    pub(super) fn on_nice_key(&mut self, key: KeyEvent) -> Effect {
        let Mode::NiceInput {
            text,
            error,
            targets,
            ..
        } = &mut self.mode
        else {
            return Effect::None;
        };
        match key.code {
            KeyCode::Esc => {
                self.mode = Mode::Normal;
                Effect::Redraw
            }
            KeyCode::Backspace => {
                text.pop();
                *error = None;
                Effect::Redraw
            }
            KeyCode::Char(c) if (c.is_ascii_digit() || c == '-' || c == '+') && text.len() < 4 => {
                text.push(c);
                *error = None;
                Effect::Redraw
            }
            KeyCode::Enter => match parse_nice(text) {
                Ok(nice) => {
                    let targets = std::mem::take(targets);
                    self.mode = Mode::Normal;
                    self.status = None;
                    Effect::Act(ActionRequest {
                        action: Action::SetNice(nice),
                        targets,
                    })
                }
                Err(sentence) => {
                    *error = Some(sentence);
                    Effect::Redraw
                }
            },
            _ => Effect::None,
        }
    }
}

/// The menu row of the signal whose number is typed: `previous` then `digit` as a two-digit
/// number when that is a signal ("1" "5": SIGTERM), else `digit` alone ("9": SIGKILL). Also
/// returns the digit to remember for the next key, `None` once a two-digit number matched.
fn signal_by_number(previous: Option<u32>, digit: u32) -> (Option<usize>, Option<u32>) {
    let row = |number: u32| Signal::ALL.iter().position(|s| s.number() as u32 == number);
    if let Some(found) = previous.and_then(|p| row(p * 10 + digit)) {
        return (Some(found), None);
    }
    (row(digit), Some(digit))
}

pub(super) fn not_visible(pid: u32) -> String {
    format!(
        "process {pid} is not visible in /proc here (another container, or it exited): \
         torchtop will not act on it"
    )
}

/// The nice value typed in the `n` dialog, or the sentence that says why it is refused.
fn parse_nice(text: &str) -> Result<i32, String> {
    let value: i32 = text
        .trim()
        .parse()
        .map_err(|_| format!("type a whole number from {NICE_MIN} to {NICE_MAX}"))?;
    if (NICE_MIN..=NICE_MAX).contains(&value) {
        Ok(value)
    } else {
        Err(ActionError::InvalidNice { value }.to_string())
    }
}
