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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossterm::event::{self, Event, KeyEventKind, MouseEventKind};

use super::LoadedSnapshot;
use crate::terminal::{TerminalGuard, Tui};
use state::{Effect, Viewer};

/// How often the loop looks at the termination flag while no key comes.
const POLL: Duration = Duration::from_millis(200);

/// `torchtop snapshot FILE` on a terminal: the viewer in its own terminal session, left on
/// q, Esc, Ctrl-C, SIGTERM or SIGHUP with the terminal restored.
pub(crate) fn run_standalone(snapshot: LoadedSnapshot, colors: bool) -> io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(signal, stop.clone())?;
    }
    with_terminal(|terminal| run(Viewer::new(snapshot, colors), terminal, &stop))
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

fn run(mut viewer: Viewer, terminal: &mut Tui, stop: &AtomicBool) -> io::Result<()> {
    loop {
        draw(&mut viewer, terminal)?;
        let effect = loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            if event::poll(POLL)? {
                break handle(&mut viewer, event::read()?);
            }
        };
        if effect == Effect::Quit {
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
