//! Signals while the TUI runs, turned into [`Control`] events for the loop by one thread
//! (signal-hook's iterator), plus the watchdog that ends the process when the loop does not.
//!
//! - SIGTERM, SIGHUP, SIGINT: quit, exit status 0.
//! - SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGXCPU, SIGXFSZ: restore the terminal, then
//!   die of the same signal with its default action (exit status 128 + N, a core for QUIT).
//! - SIGTSTP: restore and stop; SIGCONT: take the terminal again and redraw.
//!
//! SIGPIPE stays ignored, as Rust sets it up: an agent socket that closes under a write must
//! give an error, not kill the monitor.
//!
//! For every ending signal a watchdog starts: if the process still runs [`GRACE`] later (the
//! loop is stuck in a write to a terminal that does not drain, say), it restores the terminal
//! from its own thread and dies of the signal. So SIGTERM always ends torchtop within a second.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use signal_hook::consts::signal::{
    SIGALRM, SIGCONT, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGTSTP, SIGUSR1, SIGUSR2, SIGVTALRM,
    SIGXCPU, SIGXFSZ,
};
use signal_hook::iterator::Signals;
use tokio::sync::mpsc::UnboundedSender;

/// How long the loop has to end by itself after an ending signal.
pub(crate) const GRACE: Duration = Duration::from_millis(500);

const QUIT_SIGNALS: [i32; 3] = [SIGTERM, SIGHUP, SIGINT];
const FATAL_SIGNALS: [i32; 7] = [
    SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGXCPU, SIGXFSZ,
];

/// What a signal asks of the event loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control {
    /// End normally (exit status 0).
    Quit,
    /// Restore the terminal, then die of this signal.
    Die(i32),
    /// Restore the terminal and stop until continued.
    Suspend,
    /// Continued after a stop: take the terminal again and redraw everything.
    Continue,
}

/// Starts the signal thread; its events arrive on `events`.
pub(crate) fn spawn(events: UnboundedSender<Control>) -> io::Result<()> {
    let mut handled = vec![SIGTSTP, SIGCONT];
    handled.extend(QUIT_SIGNALS);
    handled.extend(FATAL_SIGNALS);
    let mut signals = Signals::new(&handled)?;
    thread::Builder::new()
        .name("torchtop-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let control = control_for(signal);
                if matches!(control, Control::Quit | Control::Die(_)) {
                    start_watchdog(signal);
                }
                // The loop may be gone already; the watchdog covers that.
                let _ = events.send(control);
            }
        })?;
    Ok(())
}

fn control_for(signal: i32) -> Control {
    match signal {
        SIGTSTP => Control::Suspend,
        SIGCONT => Control::Continue,
        s if QUIT_SIGNALS.contains(&s) => Control::Quit,
        s => Control::Die(s),
    }
}

/// Once per process: after [`GRACE`], restore the terminal and die of `signal`.
fn start_watchdog(signal: i32) {
    static STARTED: AtomicBool = AtomicBool::new(false);
    if STARTED.swap(true, Ordering::SeqCst) {
        return;
    }
    let started = thread::Builder::new()
        .name("torchtop-watchdog".into())
        .spawn(move || {
            thread::sleep(GRACE);
            super::restore_from_any_thread();
            die_of(signal);
        });
    if started.is_err() {
        // No thread to wait with: end now rather than risk never ending.
        super::restore_from_any_thread();
        die_of(signal);
    }
}

/// Ends the process with `signal`'s default action; `_exit(128 + signal)` if that returns.
pub(crate) fn die_of(signal: i32) -> ! {
    let _ = signal_hook::low_level::emulate_default_handler(signal);
    // SAFETY: `_exit` only ends the process; no Rust state is used after it.
    unsafe { libc::_exit(128 + signal) }
}

/// Stops the process group with SIGTSTP under its default action, as the terminal's own Ctrl-Z
/// does, then puts torchtop's handler back. Returns once the group is continued, or at once
/// where the kernel drops the stop (an orphaned process group).
pub(crate) fn stop_process_group() {
    // SAFETY: both `sigaction` structs are fully initialized (zeroed, then set) before use;
    // the previous action is saved and put back unchanged, so signal-hook's handler stays
    // registered. `kill(0, ...)` only sends a signal to our own process group.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&raw mut default.sa_mask);
        let mut previous: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(SIGTSTP, &raw const default, &raw mut previous) != 0 {
            return;
        }
        libc::kill(0, SIGTSTP);
        libc::sigaction(SIGTSTP, &raw const previous, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_signal_has_its_meaning() {
        assert_eq!(control_for(SIGTERM), Control::Quit);
        assert_eq!(control_for(SIGHUP), Control::Quit);
        assert_eq!(control_for(SIGQUIT), Control::Die(SIGQUIT));
        assert_eq!(control_for(SIGUSR1), Control::Die(SIGUSR1));
        assert_eq!(control_for(SIGTSTP), Control::Suspend);
        assert_eq!(control_for(SIGCONT), Control::Continue);
    }
}
