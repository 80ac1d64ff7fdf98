//! The interactive snapshot viewer: four views (summary, who holds the memory, segment map,
//! timeline) with the monitor's keys and look.
//!
//! [`run_standalone`] sets the terminal up for `torchtop snapshot FILE` and runs the viewer; the
//! monitor's event loop opens it in its own terminal with [`draw`] and [`handle`]. The state machine ([`state`]) does no I/O and the
//! render functions ([`render`] and one module per view) only draw.

mod holders;
pub(crate) mod render;
mod segments;
pub(crate) mod state;
mod summary;
mod timeline;

use std::io;
use std::thread;

use crossterm::event::{Event, KeyEventKind, MouseEventKind};
use tokio::sync::mpsc::{self, Receiver};

use super::LoadedSnapshot;
use crate::terminal::input::{self, Input};
use crate::terminal::{TerminalGuard, Tui};
use state::{Effect, Viewer};

/// Inputs waiting for the viewer: keys come one at a time, so a few are plenty.
const INPUT_QUEUE: usize = 64;

/// `torchtop snapshot FILE` on a terminal: the viewer in its own terminal session, left on
/// q, Esc, Ctrl-C, SIGTERM or SIGHUP with the terminal restored, and when the terminal hangs up.
///
/// Keys come from the monitor's input thread, with its hang-up watcher: crossterm's reader
/// retries a dead terminal's EOF in a tight loop and never returns, so a viewer that read keys
/// itself spun at 60% of a core for good after its SSH session dropped, deaf to SIGTERM too.
pub(crate) fn run_standalone(snapshot: LoadedSnapshot, colors: bool) -> io::Result<()> {
    let (inputs_tx, mut inputs) = mpsc::channel(INPUT_QUEUE);
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])?;
    let on_signal = inputs_tx.clone();
    thread::Builder::new()
        .name("torchtop-signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                let _ = on_signal.blocking_send(Input::Gone);
            }
        })?;
    with_terminal(|terminal| {
        input::spawn(crate::terminal::tty()?, inputs_tx, None)?;
        run(Viewer::new(snapshot, colors), terminal, &mut inputs)
    })
}

/// The one place the viewer enters and leaves the terminal's TUI mode.
fn with_terminal(body: impl FnOnce(&mut Tui) -> io::Result<()>) -> io::Result<()> {
    let mut guard = TerminalGuard::enter()?;
    let result = body(&mut guard.terminal);
    drop(guard);
    result
}

/// Draws one frame of the viewer on a terminal already in TUI mode (also the monitor's, where
/// `S` opens the viewer from the event loop).
pub(crate) fn draw(viewer: &mut Viewer, terminal: &mut Tui) -> io::Result<()> {
    let size = terminal.size()?;
    viewer.screen = (size.width, size.height);
    viewer.page_rows = usize::from(size.height.saturating_sub(6)).max(1);
    viewer.chart_columns = usize::from(size.width)
        .saturating_sub(timeline::GUTTER)
        .max(1);
    terminal.draw(|frame| render::draw(frame, viewer))?;
    Ok(())
}

fn run(mut viewer: Viewer, terminal: &mut Tui, inputs: &mut Receiver<Input>) -> io::Result<()> {
    loop {
        draw(&mut viewer, terminal)?;
        // A signal or a hang-up arrives as `Gone`, like the end of the keys.
        let Some(Input::Event(event)) = inputs.blocking_recv() else {
            return Ok(());
        };
        if handle(&mut viewer, event) == Effect::Quit {
            return Ok(());
        }
    }
}

/// One input event for the viewer.
pub(crate) fn handle(viewer: &mut Viewer, event: Event) -> Effect {
    match event {
        Event::Key(key) if key.kind != KeyEventKind::Release => viewer.on_key(key),
        Event::Mouse(mouse) => {
            let code = match mouse.kind {
                MouseEventKind::ScrollDown => crossterm::event::KeyCode::Down,
                MouseEventKind::ScrollUp => crossterm::event::KeyCode::Up,
                _ => return Effect::Redraw,
            };
            viewer.on_key(code.into())
        }
        _ => Effect::Redraw,
    }
}

#[cfg(test)]
mod tests;
