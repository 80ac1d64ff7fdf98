//! [`SizedBackend`]: crossterm's backend, but for its size, which it remembers until the window
//! changes. crossterm's own `size()` opens /dev/tty, asks TIOCGWINSZ and closes it each time,
//! and a frame asks three times (the event loop twice, ratatui's autoresize once): three opens
//! of the terminal a second for a size that changes only when the user resizes the window.
//!
//! The kernel sends SIGWINCH to the terminal's foreground process group after it has set the
//! new size, so a flag set by that signal says when to ask again; the next frame then draws at
//! the new size, as before. After a suspend the size is asked again whatever the flag says.
//!
//! It also lets the event loop send a frame in one `write`: while [`SizedBackend::hold`] is
//! on, ratatui's flush and its per-frame cursor hiding only queue, and
//! [`SizedBackend::release`] writes the whole frame (with the synchronized-update markers
//! around it) at once. Two writes a frame woke the terminal twice. The cells themselves are
//! written by [`super::cells`], which writes what crossterm's backend would without allocating.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use ratatui::backend::{Backend, ClearType, CrosstermBackend, WindowSize};
use ratatui::buffer::Cell as BufferCell;
use ratatui::layout::{Position, Size};

/// Set by SIGWINCH (and at first): the size torchtop knows may be out of date. `None` when the
/// handler could not be installed; then every call asks the terminal, as crossterm does.
fn window_changed() -> Option<&'static Arc<AtomicBool>> {
    static CHANGED: OnceLock<Option<Arc<AtomicBool>>> = OnceLock::new();
    CHANGED
        .get_or_init(|| {
            let flag = Arc::new(AtomicBool::new(true));
            let signal = signal_hook::consts::SIGWINCH;
            signal_hook::flag::register(signal, Arc::clone(&flag))
                .ok()
                .map(|_| flag)
        })
        .as_ref()
}

/// The terminal's size in cells, asked as crossterm asks it (the controlling terminal, else
/// stdout; `tput` when neither answers), but with /dev/tty opened once, not at each call.
fn ask_terminal() -> io::Result<Size> {
    static CONTROLLING: OnceLock<Option<File>> = OnceLock::new();
    let controlling = CONTROLLING.get_or_init(|| {
        let tty = File::options().read(true).write(true).open("/dev/tty");
        tty.ok()
    });
    let asked = match controlling {
        Some(tty) => rustix::termios::tcgetwinsize(tty),
        None => rustix::termios::tcgetwinsize(rustix::stdio::stdout()),
    };
    if let Ok(size) = asked {
        return Ok(Size::new(size.ws_col, size.ws_row));
    }
    let (width, height) = crossterm::terminal::size()?;
    Ok(Size::new(width, height))
}

/// Whether a write failed because the terminal is no longer there (an SSH session or a tmux
/// pane that closed): the kernel answers EIO once the terminal has hung up.
fn terminal_gone(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EIO | libc::ENXIO | libc::EPIPE)
    )
}

/// crossterm's backend writing to `W`, with the terminal's size remembered between SIGWINCHes.
pub(crate) struct SizedBackend<W: Write> {
    inner: CrosstermBackend<W>,
    known: Cell<Option<Size>>,
    /// While true, flushes wait for [`SizedBackend::release`].
    held: bool,
}

impl<W: Write> SizedBackend<W> {
    pub(crate) fn new(writer: W) -> Self {
        // Installs the handler before the first size is asked, so no resize falls in between.
        window_changed();
        SizedBackend {
            inner: CrosstermBackend::new(writer),
            known: Cell::new(None),
            held: false,
        }
    }

    /// Holds every flush until [`SizedBackend::release`]: what is drawn meanwhile goes out in
    /// one write (as far as the writer's buffer holds it).
    pub(crate) fn hold(&mut self) {
        self.held = true;
    }

    /// Ends [`SizedBackend::hold`] and writes what was queued.
    pub(crate) fn release(&mut self) -> io::Result<()> {
        self.held = false;
        Write::flush(&mut self.inner)
    }

    /// Forgets the size, so the next frame asks the terminal (after a suspend, when a resize
    /// may have gone to a process group that was stopped).
    pub(crate) fn forget_size(&self) {
        self.known.set(None);
    }
}

impl<W: Write> Write for SizedBackend<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        Write::flush(&mut self.inner)
    }
}

impl<W: Write> Backend for SizedBackend<W> {
    type Error = io::Error;

    fn draw<'a, I>(&mut self, content: I) -> io::Result<()>
    where
        I: Iterator<Item = (u16, u16, &'a BufferCell)>,
    {
        super::cells::draw(&mut self.inner, content)
    }

    fn append_lines(&mut self, n: u16) -> io::Result<()> {
        self.inner.append_lines(n)
    }

    fn hide_cursor(&mut self) -> io::Result<()> {
        if self.held {
            // ratatui hides the cursor after every frame; crossterm's backend would flush.
            return crossterm::queue!(self.inner, crossterm::cursor::Hide);
        }
        self.inner.hide_cursor()
    }

    fn show_cursor(&mut self) -> io::Result<()> {
        match self.inner.show_cursor() {
            // ratatui shows the cursor again as it is dropped and prints a failure with
            // `eprintln!`, which panics (exit 101) when stderr is the same hung-up terminal.
            // A terminal that has hung up has no cursor to show.
            Err(e) if terminal_gone(&e) => Ok(()),
            shown => shown,
        }
    }

    fn get_cursor_position(&mut self) -> io::Result<Position> {
        self.inner.get_cursor_position()
    }

    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> io::Result<()> {
        self.inner.set_cursor_position(position)
    }

    fn clear(&mut self) -> io::Result<()> {
        self.inner.clear()
    }

    fn clear_region(&mut self, clear_type: ClearType) -> io::Result<()> {
        self.inner.clear_region(clear_type)
    }

    fn size(&self) -> io::Result<Size> {
        // The flag is taken before asking: a resize after this call sets it again.
        let changed = window_changed().is_none_or(|flag| flag.swap(false, Ordering::SeqCst));
        match self.known.get() {
            Some(size) if !changed => Ok(size),
            _ => {
                let size = ask_terminal()?;
                self.known.set(Some(size));
                Ok(size)
            }
        }
    }

    fn window_size(&mut self) -> io::Result<WindowSize> {
        self.inner.window_size()
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.held {
            return Ok(());
        }
        Backend::flush(&mut self.inner)
    }
}
