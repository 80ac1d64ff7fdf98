//! The event loop's drawing, off screen, for the frame benchmark (`cargo bench --bench frame`):
//! plan the layout once, hand it to the app, draw, diff against the previous frame and write
//! the escape codes (through the monitor's backend), into memory instead of a terminal. Not
//! part of torchtop's interface.

use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};

use crate::app::App;
use crate::model::Snapshot;
use crate::terminal::sized::SizedBackend;

/// A monitor drawing into a byte buffer of a fixed size.
pub struct Frames {
    app: App,
    terminal: Terminal<SizedBackend<Counted>>,
    written: Arc<AtomicUsize>,
    screen: Rect,
}

/// A terminal that counts what it is sent and keeps none of it.
struct Counted(Arc<AtomicUsize>);

impl Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.fetch_add(bytes.len(), Ordering::Relaxed);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Frames {
    /// A monitor of `width` x `height` cells, in colour, at a 1 s refresh.
    ///
    /// # Panics
    /// Never: writing to memory does not fail.
    #[must_use]
    pub fn new(width: u16, height: u16) -> Self {
        let screen = Rect::new(0, 0, width, height);
        let options = TerminalOptions {
            viewport: Viewport::Fixed(screen),
        };
        let written = Arc::new(AtomicUsize::new(0));
        let backend = SizedBackend::new(Counted(Arc::clone(&written)));
        let terminal = Terminal::with_options(backend, options).expect("a terminal in memory");
        Frames {
            app: App::new(1.0, true, false),
            terminal,
            written,
            screen,
        }
    }

    /// Hands the app a new snapshot, as the event loop does on each tick.
    pub fn feed(&mut self, snapshot: Arc<Snapshot>) {
        self.app.on_snapshot(snapshot);
    }

    /// Presses a plain key, as the event loop does.
    pub fn press(&mut self, key: char) {
        self.app
            .on_key(KeyEvent::new(KeyCode::Char(key), KeyModifiers::NONE));
    }

    /// Draws one frame and returns the bytes it wrote to the terminal.
    ///
    /// # Panics
    /// Never: writing to memory does not fail.
    pub fn draw(&mut self) -> usize {
        let plan = super::plan(&self.app, self.screen);
        self.app.set_layout(plan.clone());
        let (app, screen) = (&self.app, self.screen);
        self.terminal
            .draw(|frame| super::draw(frame, screen, app, &plan))
            .expect("drawing into memory");
        self.written.swap(0, Ordering::Relaxed)
    }
}
