//! Keys, mouse and resize events, read on a thread of their own and sent to the event loop
//! through a channel, so that every key wakes the loop at once, whatever it was doing.
//!
//! A second thread waits for the terminal to hang up (the SSH session dropped, the tmux pane
//! killed, the pty master closed). crossterm never reports that: its reader retries a dead
//! terminal's EOF or EIO in a tight loop. `poll` with no requested events returns only on
//! POLLHUP, POLLERR or POLLNVAL, so the watcher costs no wake-ups while the terminal lives.

use std::io;
use std::sync::Arc;
use std::thread;

use crossterm::event::{self, Event};
use rustix::event::{poll, PollFd, PollFlags};
use tokio::sync::mpsc::Sender;

use super::Tty;
use crate::sys::sched::Handover;

/// What the input threads send to the loop.
#[derive(Debug)]
pub(crate) enum Input {
    Event(Event),
    /// The terminal hung up or cannot be read. There is no one left to tell why.
    Gone,
}

/// Starts the reader and the hang-up watcher. Neither is ever joined: they end with the process.
pub(crate) fn spawn(
    tty: &'static Tty,
    events: Sender<Input>,
    handover: Option<Arc<Handover>>,
) -> io::Result<()> {
    let watcher_events = events.clone();
    thread::Builder::new()
        .name("torchtop-input".into())
        .spawn(move || read_events(events, handover.as_deref()))?;
    thread::Builder::new()
        .name("torchtop-hangup".into())
        .spawn(move || {
            if wait_for_hangup(tty) {
                let _ = watcher_events.blocking_send(Input::Gone);
            }
        })?;
    Ok(())
}

/// Reads until the terminal is gone; the loop's thread is freed from the sampler's core (see
/// [`Handover`]) before each input reaches it, so that a key never waits on a busy core.
fn read_events(events: Sender<Input>, handover: Option<&Handover>) {
    loop {
        let input = match event::read() {
            Ok(event) => Input::Event(event),
            Err(_) => Input::Gone,
        };
        if let Some(handover) = handover {
            handover.free();
        }
        let gone = matches!(input, Input::Gone);
        if events.blocking_send(input).is_err() || gone {
            return;
        }
    }
}

/// Blocks until the terminal hangs up (true), or returns false if it cannot be watched; then
/// the reader's error and SIGHUP remain.
fn wait_for_hangup(tty: &Tty) -> bool {
    loop {
        let mut fds = [PollFd::new(tty, PollFlags::empty())];
        match poll(&mut fds, None) {
            Ok(_) => {
                let revents = fds[0].revents();
                if revents.intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL) {
                    return true;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}
