//! The terminal: raw mode and the alternate screen on the way in, and always restored on the
//! way out: on drop, on panic, on a fatal signal, on suspend (Ctrl-Z), and by a watchdog when
//! the event loop does not end in time. Its submodules read keys ([`input`]) and turn signals
//! into events for the loop ([`signals`]); [`sized`] is the backend that remembers the terminal's
//! size between resizes. [`theme`] is the look every screen of torchtop
//! shares (the monitor, the cluster view, the snapshot viewer), colours or NO_COLOR.

mod cells;
pub(crate) mod input;
pub(crate) mod signals;
pub(crate) mod sized;
pub(crate) mod theme;

use std::fs::File;
use std::io::{self, BufWriter, Stdout, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EndSynchronizedUpdate, EnterAlternateScreen,
    LeaveAlternateScreen,
};
use crossterm::{cursor, execute, Command};
use ratatui::Terminal;
use rustix::termios::{tcgetattr, tcsetattr, OptionalActions, Termios};

use sized::SizedBackend;

/// Whether the terminal is currently in torchtop's mode; restoring twice must be harmless.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The terminal modes from before raw mode, for the restore that cannot go through crossterm
/// (a watchdog thread, while the event loop may hold crossterm's locks or stdout's).
static SAVED_MODES: Mutex<Option<Termios>> = Mutex::new(None);

/// Frames are written through a large buffer and flushed once per frame: stdout's own
/// line buffer would turn one frame into many small writes.
pub(crate) type Tui = Terminal<SizedBackend<BufWriter<Stdout>>>;

const FRAME_BUFFER_BYTES: usize = 64 * 1024;

/// How long the last-resort restore may spend writing to a terminal that does not drain.
const EMERGENCY_WRITE_DEADLINE: Duration = Duration::from_millis(200);

/// The terminal keys are read from: stdin when it is one, else the controlling terminal, as
/// crossterm chooses. Opened once and kept for the life of the process.
pub(crate) enum Tty {
    Stdin,
    Controlling(File),
}

impl AsFd for Tty {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Tty::Stdin => rustix::stdio::stdin(),
            Tty::Controlling(file) => file.as_fd(),
        }
    }
}

/// Why there is no terminal to use.
#[derive(Debug, Clone, Copy)]
enum NoTty {
    /// Standard output is not a terminal (a pipe, a file).
    NotStdout,
    /// Standard input is not one and there is no controlling terminal.
    NoKeys,
    /// `TERM=dumb` (Emacs' shell, some CI runners): no cursor movement, no alternate screen.
    Dumb,
    /// No `TERM` (or an empty one): nothing says what the terminal understands.
    NoTerm,
}

/// Why the terminal `TERM` names cannot draw a full screen; `None` when it can. A dumb one
/// got the alternate screen, mouse reporting and 256 colours all the same (a review).
fn cannot_draw(term: Option<&std::ffi::OsStr>) -> Option<NoTty> {
    match term {
        None => Some(NoTty::NoTerm),
        Some(term) if term.is_empty() => Some(NoTty::NoTerm),
        Some(term) if term == "dumb" => Some(NoTty::Dumb),
        Some(_) => None,
    }
}

/// Whether the terminal `TERM` names can draw a full screen: for a command that has a plain
/// text output to give instead (`torchtop snapshot FILE`'s summary).
pub(crate) fn can_draw_full_screen() -> bool {
    cannot_draw(std::env::var_os("TERM").as_deref()).is_none()
}

/// What the monitor offers instead of a terminal, for the sentence that says there is none.
pub(crate) const MONITOR_INSTEAD: &str =
    "use --once for one summary, or --json for a stream of JSON lines";

/// The terminal, or why there is none: a sentence that says what to do instead (the
/// monitor's options; see [`tty_or`]).
pub(crate) fn tty() -> io::Result<&'static Tty> {
    tty_or(MONITOR_INSTEAD)
}

/// The terminal, or why there is none, ending in `instead`: what the command run offers in
/// its place (a replay has `--summary` and `--json`, not `--once`).
pub(crate) fn tty_or(instead: &str) -> io::Result<&'static Tty> {
    static TTY: OnceLock<Result<Tty, NoTty>> = OnceLock::new();
    let tty = TTY.get_or_init(|| {
        if !rustix::termios::isatty(rustix::stdio::stdout()) {
            return Err(NoTty::NotStdout);
        }
        if let Some(why) = cannot_draw(std::env::var_os("TERM").as_deref()) {
            return Err(why);
        }
        if rustix::termios::isatty(rustix::stdio::stdin()) {
            return Ok(Tty::Stdin);
        }
        File::options()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .map(Tty::Controlling)
            .map_err(|_| NoTty::NoKeys)
    });
    tty.as_ref().map_err(|why| {
        let sentence = match why {
            NoTty::NotStdout => format!(
                "the monitor needs a terminal to draw on, and standard output is not one; \
                 {instead}"
            ),
            NoTty::NoKeys => format!(
                "the monitor needs a terminal to read keys from, and there is none here (no \
                 controlling terminal); run it in one, or {instead}"
            ),
            NoTty::Dumb => format!(
                "the monitor draws a full screen, and this terminal cannot (TERM=dumb); \
                 {instead}"
            ),
            NoTty::NoTerm => format!(
                "the monitor draws a full screen, and TERM is not set, so nothing says what \
                 this terminal can do; set it (TERM=xterm-256color, say), or {instead}"
            ),
        };
        io::Error::new(io::ErrorKind::NotFound, sentence)
    })
}

pub(crate) struct TerminalGuard {
    pub(crate) terminal: Tui,
}

impl TerminalGuard {
    pub(crate) fn enter() -> io::Result<Self> {
        tty()?;
        install_panic_hook();
        enter_modes()?;
        let writer = BufWriter::with_capacity(FRAME_BUFFER_BYTES, io::stdout());
        match Terminal::new(SizedBackend::new(writer)) {
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

/// Raw mode, the alternate screen, mouse reporting, no cursor. Also used to come back from a
/// suspend; each step is harmless when already done.
fn enter_modes() -> io::Result<()> {
    let tty = tty()?;
    if !ACTIVE.load(Ordering::SeqCst) {
        if let Ok(modes) = tcgetattr(tty) {
            *SAVED_MODES
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(modes);
        }
    }
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
    Ok(())
}

/// Puts the terminal back as it was. Errors are ignored: after SIGHUP there may be no terminal.
pub(crate) fn restore() {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return;
    }
    let mut stdout = io::stdout();
    let _ = execute!(
        stdout,
        EndSynchronizedUpdate,
        DisableMouseCapture,
        LeaveAlternateScreen,
        cursor::Show
    );
    let _ = disable_raw_mode();
    let _ = stdout.flush();
}

/// Ctrl-Z or SIGTSTP: gives the terminal back, stops the process group the way the terminal's
/// own Ctrl-Z would, and takes the terminal again once continued. In an orphaned process group
/// (no job-control shell to continue it) the kernel drops the stop, as for htop and vim.
pub(crate) fn suspend(terminal: &mut Tui) -> io::Result<()> {
    let _ = terminal.backend_mut().flush();
    restore();
    signals::stop_process_group();
    resume(terminal)
}

/// After SIGCONT: the modes again (a shell may have changed them) and a full redraw.
pub(crate) fn resume(terminal: &mut Tui) -> io::Result<()> {
    enter_modes()?;
    terminal.backend().forget_size();
    // `Terminal::clear` would ask the terminal for the cursor position, which needs the event
    // reader that the input thread holds; `resize` clears and forgets the last frame without it.
    let size = terminal.size()?;
    terminal.resize(ratatui::layout::Rect::new(0, 0, size.width, size.height))
}

/// The last-resort restore, for a watchdog thread while the event loop may be stuck: the saved
/// modes are set back with `tcsetattr`, then the escape sequences that leave torchtop's screen
/// are written straight to fd 1, bypassing stdout's lock. Gives up after
/// [`EMERGENCY_WRITE_DEADLINE`] when the terminal does not take the bytes.
pub(crate) fn restore_from_any_thread() {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return;
    }
    if let (Ok(tty), Ok(modes)) = (tty(), SAVED_MODES.try_lock()) {
        if let Some(modes) = modes.as_ref() {
            let _ = tcsetattr(tty, OptionalActions::Now, modes);
        }
    }
    let (done_tx, done) = mpsc::channel();
    let writer = thread::Builder::new().spawn(move || {
        let _ = write_all_to_stdout_fd(leave_sequence().as_bytes());
        let _ = done_tx.send(());
    });
    if writer.is_ok() {
        let _ = done.recv_timeout(EMERGENCY_WRITE_DEADLINE);
    }
}

fn write_all_to_stdout_fd(mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match rustix::io::write(rustix::stdio::stdout(), bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// The escape sequences [`restore`] sends, as text, built once from crossterm's commands.
fn leave_sequence() -> &'static str {
    static SEQUENCE: OnceLock<String> = OnceLock::new();
    SEQUENCE.get_or_init(|| {
        let mut text = String::new();
        let _ = EndSynchronizedUpdate.write_ansi(&mut text);
        let _ = DisableMouseCapture.write_ansi(&mut text);
        let _ = LeaveAlternateScreen.write_ansi(&mut text);
        let _ = cursor::Show.write_ansi(&mut text);
        text
    })
}

fn install_panic_hook() {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    // Built now: the hook and the watchdog must not be the first to build it.
    leave_sequence();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dumb_terminal_or_none_named_cannot_draw() {
        use std::ffi::OsStr;
        assert!(matches!(
            cannot_draw(Some(OsStr::new("dumb"))),
            Some(NoTty::Dumb)
        ));
        assert!(matches!(cannot_draw(None), Some(NoTty::NoTerm)));
        assert!(matches!(
            cannot_draw(Some(OsStr::new(""))),
            Some(NoTty::NoTerm)
        ));
        for term in [
            "xterm-256color",
            "screen",
            "linux",
            "tmux-256color",
            "vt100",
        ] {
            assert!(cannot_draw(Some(OsStr::new(term))).is_none(), "{term}");
        }
    }

    #[test]
    fn the_leave_sequence_ends_every_mode_torchtop_turns_on() {
        let text = leave_sequence();
        assert!(text.contains("\x1b[?1049l"), "alternate screen: {text:?}");
        assert!(text.contains("\x1b[?1000l"), "mouse: {text:?}");
        assert!(text.contains("\x1b[?25h"), "cursor: {text:?}");
        assert!(
            text.contains("\x1b[?2026l"),
            "synchronized update: {text:?}"
        );
    }
}
