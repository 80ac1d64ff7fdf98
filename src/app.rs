//! The state machine: snapshots and key presses in, view state out. No I/O happens here, so
//! every transition is unit-testable.

use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseEvent};

use crate::model::{History, Snapshot};
use crate::ui::ViewState;

/// What the event loop must do after the app handled an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Nothing changed on screen.
    None,
    /// The view changed: draw again.
    Redraw,
    Quit,
}

pub struct App {
    pub snapshot: Arc<Snapshot>,
    pub history: History,
    pub view: ViewState,
    pub readonly: bool,
    pub colors: bool,
    pub delay_seconds: f64,
    /// One sentence for the status line: the outcome of the last action.
    pub status: Option<String>,
}

impl App {
    pub fn new(delay_seconds: f64, colors: bool, readonly: bool) -> Self {
        App {
            snapshot: Arc::new(Snapshot::default()),
            history: History::for_interval(delay_seconds),
            view: ViewState::default(),
            readonly,
            colors,
            delay_seconds,
            status: None,
        }
    }

    pub fn on_snapshot(&mut self, snapshot: Arc<Snapshot>) {
        self.history.record(&snapshot);
        self.snapshot = snapshot;
        self.view.clamp_to(self.snapshot.processes.len());
    }

    pub fn on_key(&mut self, key: KeyEvent) -> Effect {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('c') if ctrl => Effect::Quit,
            KeyCode::Char('q') | KeyCode::Esc => Effect::Quit,
            KeyCode::Down | KeyCode::Char('j') => {
                self.view.select_next(self.snapshot.processes.len());
                Effect::Redraw
            }
            KeyCode::Up | KeyCode::Char('k') => {
                self.view.select_previous();
                Effect::Redraw
            }
            _ => Effect::None,
        }
    }

    pub fn on_mouse(&mut self, _mouse: MouseEvent) -> Effect {
        Effect::None
    }
}
