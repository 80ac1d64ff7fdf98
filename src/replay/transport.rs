//! The replay's keys, answered before the monitor's own: Space pauses, Left/Right step, `+`/`-`
//! change the speed, `g` seeks to a typed time, `[`/`]` jump between events. The action keys
//! get a sentence instead of a dialog: a recorded process cannot be signalled.

use std::sync::mpsc::Sender;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use jiff::tz::TimeZone;

use super::player::{Command, Position};
use super::time::{parse_time, HOW_SHORT};
use crate::app::{App, Effect, Mode};
use crate::format::clock::clock;

/// The longest time that may be typed after `g`.
const MAX_INPUT: usize = 40;

pub(crate) struct Transport {
    commands: Sender<Command>,
    /// Where the player stands, once it has said.
    pub(crate) position: Option<Position>,
    /// The time being typed after `g`, and why the last Enter was refused.
    pub(crate) input: Option<String>,
    pub(crate) input_error: Option<String>,
    /// The screen's zone: the times typed after `g` are read in it, and shown in it.
    pub(crate) zone: TimeZone,
}

impl Transport {
    pub(crate) fn new(commands: Sender<Command>, zone: TimeZone) -> Self {
        Transport {
            commands,
            position: None,
            input: None,
            input_error: None,
            zone,
        }
    }

    fn send(&self, command: Command) -> Effect {
        // The player ends only with the UI; a failed send has no one to tell.
        let _ = self.commands.send(command);
        Effect::Redraw
    }

    /// Handles `key` if it is the replay's; `None` leaves it to the monitor's keys.
    pub(crate) fn on_key(&mut self, app: &mut App, key: KeyEvent) -> Option<Effect> {
        if key.modifiers.contains(KeyModifiers::CONTROL) {
            return None;
        }
        if self.input.is_some() {
            return Some(self.on_input_key(key));
        }
        // A dialog, and the warnings list (whose keys act only on it, `g` included), keep
        // their keys.
        if app.mode != Mode::Normal || app.warnings_view.is_open() {
            return None;
        }
        if let Some(sentence) = refusal(app, key.code, &self.zone) {
            app.status = Some(sentence);
            return Some(Effect::Redraw);
        }
        if app.view.show_help {
            return None;
        }
        Some(match key.code {
            KeyCode::Char(' ') => self.send(Command::TogglePause),
            KeyCode::Left => self.send(Command::Step(-1)),
            KeyCode::Right => self.send(Command::Step(1)),
            KeyCode::Char('+' | '=') => self.send(Command::Faster),
            KeyCode::Char('-') => self.send(Command::Slower),
            KeyCode::Char('[') => self.send(Command::Jump(false)),
            KeyCode::Char(']') => self.send(Command::Jump(true)),
            KeyCode::Char('g') => {
                self.input = Some(String::new());
                self.input_error = None;
                Effect::Redraw
            }
            _ => return None,
        })
    }

    fn on_input_key(&mut self, key: KeyEvent) -> Effect {
        let Some(text) = self.input.as_mut() else {
            return Effect::None;
        };
        match key.code {
            KeyCode::Esc => self.input = None,
            KeyCode::Backspace => {
                text.pop();
                self.input_error = None;
            }
            KeyCode::Char(c)
                if text.chars().count() < MAX_INPUT
                    && !c.is_control()
                    && !key.modifiers.contains(KeyModifiers::ALT) =>
            {
                text.push(c);
                self.input_error = None;
            }
            KeyCode::Enter => {
                let (start, end) = self
                    .position
                    .as_ref()
                    .map_or((0.0, 0.0), |p| (p.start, p.end));
                // A time outside the recording goes to its nearer end, and the player says so.
                if let Ok(moment) = parse_time(text, start, end, &self.zone) {
                    self.input = None;
                    return self.send(Command::Seek(moment));
                }
                // parse_time's sentence spells every form out, too long for the bar.
                let text = crate::format::escape(text);
                self.input_error = Some(format!("'{text}' is not a time: {HOW_SHORT}"));
            }
            _ => return Effect::None,
        }
        Effect::Redraw
    }
}

/// The sentence for an action key in a replay; `None` for other keys.
fn refusal(app: &App, code: KeyCode, zone: &TimeZone) -> Option<String> {
    let what = match code {
        KeyCode::Char('T' | 'K' | 'I') | KeyCode::F(9) => "cannot be signalled",
        KeyCode::F(7 | 8) | KeyCode::Char('n') => "cannot be reniced",
        KeyCode::Char('s' | 'P' | 'S') => {
            "has no agent to ask: memory snapshots, memory history and peak resets need the \
             live process"
        }
        KeyCode::Char('R') => {
            return Some(
                "this is a recording already: `torchtop replay FILE --json --from T --to T` \
                 exports a part of it"
                    .to_string(),
            )
        }
        _ => return None,
    };
    let host = app
        .snapshot
        .host
        .hostname
        .as_deref()
        .map(|h| format!(" on {}", crate::format::escape(h)))
        .unwrap_or_default();
    let at = clock(app.snapshot.unix_seconds, zone);
    Some(match app.selected_row() {
        Some(row) => format!(
            "this is a recording: process {} {what}; it ran{host} at {at}",
            row.pid
        ),
        None => format!("this is a recording: nothing in it {what}"),
    })
}

/// The prompt's help line under a refused time.
pub(crate) fn input_hint(transport: &Transport) -> String {
    transport
        .input_error
        .clone()
        .unwrap_or_else(|| format!("{HOW_SHORT}; Enter goes, Esc cancels"))
}
