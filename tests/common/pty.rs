//! Runs the built torchtop in a pseudo-terminal and reads its screen through a VT100 parser,
//! as a person in tmux would see it.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, Child, CommandBuilder, MasterPty, PtySize};

pub struct PtySession {
    parser: Arc<Mutex<vt100::Parser>>,
    /// `None` once [`PtySession::close_terminal`] has closed the master side.
    writer: Option<Box<dyn Write + Send>>,
    master: Option<Box<dyn MasterPty + Send>>,
    reader: Option<JoinHandle<()>>,
    stop_reading: Arc<AtomicBool>,
    pub child: Box<dyn Child + Send + Sync>,
}

#[allow(dead_code)]
impl PtySession {
    /// Starts `program` with `args` and extra environment in a `cols`x`rows` terminal.
    pub fn spawn(
        program: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        cols: u16,
        rows: u16,
    ) -> Self {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("open a pty");
        let mut command = CommandBuilder::new(program);
        command.args(args);
        command.env("TERM", "xterm-256color");
        for (key, value) in env {
            command.env(key, value);
        }
        let child = pair.slave.spawn_command(command).expect("spawn in the pty");
        drop(pair.slave);
        let parser = Arc::new(Mutex::new(vt100::Parser::new(rows, cols, 0)));
        let master_fd = pair.master.as_raw_fd().expect("the pty master's fd");
        // SAFETY: `dup` gives a new descriptor (checked below) that this File alone owns.
        let reader = unsafe {
            let fd = libc::dup(master_fd);
            assert!(fd >= 0, "dup the pty master");
            File::from_raw_fd(fd)
        };
        let stop_reading = Arc::new(AtomicBool::new(false));
        let reader = spawn_reader(reader, parser.clone(), stop_reading.clone());
        let writer = pair.master.take_writer().expect("pty writer");
        PtySession {
            parser,
            writer: Some(writer),
            master: Some(pair.master),
            reader: Some(reader),
            stop_reading,
            child,
        }
    }

    /// Closes every descriptor of the master side, as a terminal emulator or sshd does when it
    /// goes away: the program's terminal hangs up. The screen keeps what was drawn last.
    pub fn close_terminal(&mut self) {
        self.stop_reading.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the pty reader thread");
        }
        self.writer = None;
        self.master = None;
    }

    pub fn screen(&self) -> String {
        self.parser.lock().unwrap().screen().contents()
    }

    /// Waits until the screen satisfies `condition`; returns whether it did in time.
    pub fn wait_for(&self, timeout: Duration, condition: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if condition(&self.screen()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        let writer = self.writer.as_mut().expect("the terminal is open");
        writer.write_all(bytes).expect("write to the pty");
        writer.flush().expect("flush the pty");
    }

    pub fn resize(&self, cols: u16, rows: u16) {
        self.parser
            .lock()
            .unwrap()
            .screen_mut()
            .set_size(rows, cols);
        self.master
            .as_ref()
            .expect("the terminal is open")
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("resize the pty");
    }

    /// Waits for the child to exit; `None` if it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<portable_pty::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.process_id()
    }
}

/// Feeds what the program writes into the parser; polls so that it can stop on request and
/// close its descriptor (a reader blocked in `read` would keep the master open for good).
fn spawn_reader(
    mut reader: File,
    sink: Arc<Mutex<vt100::Parser>>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut buffer = [0u8; 8192];
        while !stop.load(Ordering::SeqCst) {
            let mut fds = [rustix::event::PollFd::new(
                &reader,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => {}
                Err(_) => break,
            }
            match reader.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => sink.lock().unwrap().process(&buffer[..n]),
            }
        }
    })
}

impl Drop for PtySession {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[allow(dead_code)]
impl PtySession {
    /// Whether the program is drawing on the alternate screen right now.
    pub fn on_alternate_screen(&self) -> bool {
        self.parser.lock().unwrap().screen().alternate_screen()
    }

    /// Whether the terminal would report mouse events to the program now.
    pub fn mouse_reporting(&self) -> bool {
        self.parser.lock().unwrap().screen().mouse_protocol_mode() != vt100::MouseProtocolMode::None
    }
}

#[allow(dead_code)]
impl PtySession {
    /// Whether any cell on screen has a foreground or background colour set.
    pub fn any_colour_on_screen(&self) -> bool {
        let parser = self.parser.lock().unwrap();
        let screen = parser.screen();
        let (rows, cols) = screen.size();
        (0..rows).any(|r| {
            (0..cols).any(|c| {
                screen.cell(r, c).is_some_and(|cell| {
                    cell.fgcolor() != vt100::Color::Default
                        || cell.bgcolor() != vt100::Color::Default
                })
            })
        })
    }
}

#[allow(dead_code)]
impl PtySession {
    /// Each row (index and text) whose cell at `column` has `background`: how a test finds
    /// the selection, which torchtop draws on a blue background when colours are on.
    pub fn rows_with_background(
        &self,
        column: u16,
        background: vt100::Color,
    ) -> Vec<(u16, String)> {
        let parser = self.parser.lock().unwrap();
        let screen = parser.screen();
        let (_, cols) = screen.size();
        screen
            .rows(0, cols)
            .zip(0u16..)
            .filter(|(_, row)| {
                screen
                    .cell(*row, column)
                    .is_some_and(|cell| cell.bgcolor() == background)
            })
            .map(|(text, row)| (row, text))
            .collect()
    }
}
