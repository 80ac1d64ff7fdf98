//! The terminal guard: raw mode and the alternate screen on the way in, and always restored on
//! the way out: on drop, on panic, and when the event loop ends on SIGTERM or SIGHUP.

use std::io::{self, BufWriter, Stdout, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use crossterm::{cursor, execute};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

/// Whether the terminal is currently in torchtop's mode; restoring twice must be harmless.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Frames are written through a large buffer and flushed once per frame: stdout's own
/// line buffer would turn one frame into many small writes.
pub type Tui = Terminal<CrosstermBackend<BufWriter<Stdout>>>;

const FRAME_BUFFER_BYTES: usize = 64 * 1024;

pub struct TerminalGuard {
    pub terminal: Tui,
}

impl TerminalGuard {
    pub fn enter() -> io::Result<Self> {
        install_panic_hook();
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        let mut stdout = io::stdout();
        if let Err(error) = execute!(
            stdout,
            EnterAlternateScreen,
            EnableMouseCapture,
            cursor::Hide
        ) {
            restore();
            return Err(error);
        }
        let writer = BufWriter::with_capacity(FRAME_BUFFER_BYTES, stdout);
        match Terminal::new(CrosstermBackend::new(writer)) {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(error) => {
                restore();
                Err(error)
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Puts the terminal back as it was. Errors are ignored: after SIGHUP there may be no terminal.
pub fn restore() {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return;
    }
    let mut stdout = io::stdout();
    let _ = execute!(
        stdout,
        DisableMouseCapture,
        LeaveAlternateScreen,
        cursor::Show
    );
    let _ = disable_raw_mode();
    let _ = stdout.flush();
}

fn install_panic_hook() {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
}
