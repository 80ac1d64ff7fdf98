//! The event loop: one `select!` over input, new snapshots, finished actions and signals.
//! Keys arrive through a channel from a reader thread ([`crate::terminal::input`]), so each
//! one wakes the loop at once; pending input is drained before drawing once, so a burst of keys
//! costs one frame. Nothing here waits on a collector or on an action (signals and renice run
//! on tokio's blocking pool and report back through a channel), so keys answer at once even
//! while the driver hangs. The loop ends when the user quits, when the terminal goes away, and
//! on signals (see [`crate::terminal::signals`]); Ctrl-Z and SIGTSTP suspend it. `S` opens the
//! memory-snapshot viewer over the monitor.
//!
//! Nothing is drawn for what changes nothing on screen: a resize to the size already drawn
//! (terminals send one when a tmux client attaches or a window regains focus), mouse motion, key
//! releases. A key that changes the view is drawn at once, in the same turn of the loop.
//!
//! Snapshots come from a [`Source`]: the sampler (the monitor), or a recording's player (the
//! replay, whose keys and time bar are its own; see [`crate::replay`]).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEventKind};
use tokio::sync::mpsc;

use crate::actions::{perform, ActionReport};
use crate::app::{App, Effect};
use crate::memsnap::view::state::{Effect as ViewerEffect, Viewer};
use crate::memsnap::{self, Links, LoadedSnapshot};
use crate::sampler::{GpuLoader, SamplerConfig};
use crate::sys::sched::Handover;
use crate::terminal::input::{self, Input};
use crate::terminal::signals::{self, Control};
use crate::terminal::{self, TerminalGuard, Tui};
use crate::ui;
use feed::{Feed, Source};

mod feed;
mod latest;

/// Input events queued between the reader thread and the loop; the reader waits when full.
const INPUT_QUEUE: usize = 1024;

/// Runs the monitor until the user quits, the terminal goes away or a signal ends it. A fatal
/// signal (SIGQUIT, SIGUSR1...) ends the process here, after the terminal is restored.
pub fn run_tui(app: App, config: SamplerConfig, loader: GpuLoader) -> io::Result<()> {
    let config = Box::new(config);
    run(app, Source::Live { config, loader })
}

/// Replays a recording in the same TUI, with the time bar on the last row.
pub fn run_replay(replay: crate::replay::Tui) -> io::Result<()> {
    run(replay.app, Source::Replay(replay.session))
}

fn run(app: App, source: Source) -> io::Result<()> {
    let tty = match source {
        Source::Replay(_) => terminal::tty_or(crate::replay::NO_TERMINAL),
        Source::Live { .. } => terminal::tty(),
    }?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (controls_tx, controls) = mpsc::unbounded_channel();
    signals::spawn(controls_tx)?;
    let mut guard = TerminalGuard::enter()?;
    let (inputs_tx, inputs) = mpsc::channel(INPUT_QUEUE);
    // Taken here, on the loop's thread: the sampler narrows it, the input thread frees it.
    let handover = Handover::of_this_thread().map(Arc::new);
    input::spawn(tty, inputs_tx, handover.clone())?;
    let wakers = Wakers {
        inputs,
        controls,
        handover,
    };
    let end = runtime.block_on(event_loop(&mut guard.terminal, app, source, wakers));
    drop(guard);
    // Collector threads may be stuck in the driver; they are never joined.
    runtime.shutdown_timeout(Duration::from_millis(10));
    let (end, farewell) = end?;
    if let Some(farewell) = farewell {
        say!("torchtop: {farewell}");
    }
    match end {
        End::Quit => Ok(()),
        End::Die(signal) => signals::die_of(signal),
        End::Lost(why) => Err(io::Error::other(why)),
    }
}

/// The channels from the input and signal threads, and the loop thread's hand-over to the
/// sampler's core.
struct Wakers {
    inputs: mpsc::Receiver<Input>,
    controls: mpsc::UnboundedReceiver<Control>,
    handover: Option<Arc<Handover>>,
}

/// How the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Quit,
    Die(i32),
    /// The sampler or the replay's player stopped, which neither does while the loop runs:
    /// it panicked (its message is above), and the exit status says so.
    Lost(&'static str),
}

/// What the loop does after handling what woke it, most pressing last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Nothing,
    Redraw,
    /// Continued after a stop: modes again, full redraw.
    Resume,
    Suspend,
    End(End),
}

impl Step {
    fn from_effect(effect: Effect) -> Step {
        match effect {
            Effect::Quit => Step::End(End::Quit),
            Effect::None => Step::Nothing,
            Effect::Redraw | Effect::Act(_) | Effect::AskSampler(_) | Effect::ToggleRecording => {
                Step::Redraw
            }
        }
    }

    fn rank(self) -> u8 {
        match self {
            Step::Nothing => 0,
            Step::Redraw => 1,
            Step::Resume => 2,
            Step::Suspend => 3,
            Step::End(_) => 4,
        }
    }

    /// The more pressing of two steps.
    fn merge(self, other: Step) -> Step {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }
}

async fn event_loop(
    terminal: &mut Tui,
    app: App,
    source: Source,
    mut wakers: Wakers,
) -> io::Result<(End, Option<String>)> {
    let mut feed = Feed::start(source, &app, wakers.handover.take());
    let (reports_tx, mut reports) = mpsc::unbounded_channel::<ActionReport>();
    let (loaded_tx, mut loaded) = mpsc::unbounded_channel::<Result<LoadedSnapshot, String>>();
    let mut screen = Screen {
        app,
        viewer: None,
        drawn_size: None,
    };
    screen.draw(terminal, &feed)?;
    fault_injection_for_tests();
    loop {
        let mut step = tokio::select! {
            Some(input) = wakers.inputs.recv() => screen.on_input(input, &mut feed, &reports_tx),
            arrival = feed.next() => match arrival {
                Some(arrival) => {
                    feed.apply(&mut screen.app, arrival);
                    if let Some(ready) = screen.app.take_memsnap() {
                        load_in_background(ready, loaded_tx.clone());
                    }
                    screen.snapshot_step()
                }
                None => Step::End(End::Lost(feed.lost())),
            },
            Some(report) = reports.recv() => {
                screen.app.on_action_done(&report);
                Step::Redraw
            }
            Some(result) = loaded.recv() => screen.open_viewer(result),
            Some(control) = wakers.controls.recv() => on_control(control),
            else => Step::End(End::Quit),
        };
        while step.rank() < Step::Suspend.rank() {
            let Ok(input) = wakers.inputs.try_recv() else {
                break;
            };
            step = step.merge(screen.on_input(input, &mut feed, &reports_tx));
        }
        match step {
            Step::End(end) => return Ok((end, screen.app.farewell.take())),
            Step::Suspend => {
                terminal::suspend(terminal)?;
                screen.draw(terminal, &feed)?;
            }
            Step::Resume => {
                terminal::resume(terminal)?;
                screen.draw(terminal, &feed)?;
            }
            Step::Redraw => screen.draw(terminal, &feed)?,
            Step::Nothing => {}
        }
    }
}

/// What the terminal shows: the monitor, or the snapshot viewer over it.
struct Screen {
    app: App,
    viewer: Option<Box<Viewer>>,
    /// The terminal's size (columns, rows) when the last frame was drawn.
    drawn_size: Option<(u16, u16)>,
}

impl Screen {
    fn on_input(
        &mut self,
        input: Input,
        feed: &mut Feed,
        reports: &mpsc::UnboundedSender<ActionReport>,
    ) -> Step {
        if self.is_drawn_size(&input) {
            return Step::Nothing;
        }
        let Some(viewer) = self.viewer.as_mut() else {
            return on_input(&mut self.app, input, feed, reports);
        };
        match input {
            Input::Gone => Step::End(End::Quit),
            Input::Event(Event::Key(key)) if is_suspend_key(&key) => Step::Suspend,
            Input::Event(Event::Key(key))
                if key.code == KeyCode::Char('c')
                    && key.modifiers.contains(KeyModifiers::CONTROL) =>
            {
                Step::End(End::Quit)
            }
            Input::Event(event) if !moves_the_viewer(&event) => Step::Nothing,
            Input::Event(event) => {
                if memsnap::view::handle(viewer, event) == ViewerEffect::Quit {
                    self.viewer = None; // Esc or q: back to the monitor
                }
                Step::Redraw
            }
        }
    }

    /// Whether `input` is a resize to the size the last frame was drawn at: nothing to redraw.
    fn is_drawn_size(&self, input: &Input) -> bool {
        matches!(input, Input::Event(Event::Resize(columns, rows))
            if self.drawn_size == Some((*columns, *rows)))
    }

    /// A new snapshot changes only the monitor: under the viewer nothing on screen moves, so
    /// nothing is drawn.
    fn snapshot_step(&self) -> Step {
        if self.viewer.is_some() {
            Step::Nothing
        } else {
            Step::Redraw
        }
    }

    /// A snapshot file finished loading: the viewer takes the terminal, or the status line says
    /// why not.
    fn open_viewer(&mut self, result: Result<LoadedSnapshot, String>) -> Step {
        match result {
            Ok(loaded) => self.viewer = Some(Box::new(Viewer::new(loaded, self.app.colors))),
            Err(why) => self.app.status = Some(why),
        }
        Step::Redraw
    }

    fn draw(&mut self, terminal: &mut Tui, feed: &Feed) -> io::Result<()> {
        let size = terminal.size()?;
        self.drawn_size = Some((size.width, size.height));
        match self.viewer.as_mut() {
            Some(viewer) => memsnap::view::draw(viewer, terminal),
            None => draw(terminal, &mut self.app, feed),
        }
    }
}

/// Reads and analyses a snapshot off the UI task (a big one takes a second or two): the file the
/// sampler opened in the agent's directory, else (tests) its path, where a link is not
/// followed.
fn load_in_background(
    ready: crate::model::MemsnapReady,
    done: mpsc::UnboundedSender<Result<LoadedSnapshot, String>>,
) {
    tokio::task::spawn_blocking(move || {
        let path = &ready.path;
        let result = match &ready.file {
            Some(file) => file
                .0
                .try_clone()
                .map_err(|e| memsnap::LoadError::new(path, format!("could not be read: {e}")))
                .and_then(|file| memsnap::load_opened(path, file)),
            None => memsnap::load(path, Links::Refuse),
        };
        let result =
            result.map_err(|e| format!("the memory viewer could not open the snapshot: {e}"));
        let _ = done.send(result);
    });
}

fn on_input(
    app: &mut App,
    input: Input,
    feed: &mut Feed,
    reports: &mpsc::UnboundedSender<ActionReport>,
) -> Step {
    match input {
        // The terminal is gone: nothing to restore it for, and no one to tell.
        Input::Gone => Step::End(End::Quit),
        Input::Event(Event::Key(key)) if is_suspend_key(&key) => Step::Suspend,
        Input::Event(Event::Key(key)) if key.kind != KeyEventKind::Release => {
            let replayed = match feed {
                Feed::Replay(session) => session.transport.on_key(app, key),
                Feed::Live { .. } => None,
            };
            let effect = replayed.unwrap_or_else(|| app.on_key(key));
            Step::from_effect(start_action(app, effect, feed, reports))
        }
        Input::Event(event) => {
            let effect = handle_event(app, event);
            Step::from_effect(start_action(app, effect, feed, reports))
        }
    }
}

fn on_control(control: Control) -> Step {
    match control {
        Control::Quit => Step::End(End::Quit),
        Control::Die(signal) => Step::End(End::Die(signal)),
        Control::Suspend => Step::Suspend,
        Control::Continue => Step::Resume,
    }
}

/// Whether `event` can change what the snapshot viewer shows: key presses, the wheel and a
/// resize. Mouse motion (reported for every cell crossed), releases and focus changes cannot,
/// and are not worth a frame.
fn moves_the_viewer(event: &Event) -> bool {
    match event {
        Event::Key(key) => key.kind != KeyEventKind::Release,
        Event::Mouse(mouse) => matches!(
            mouse.kind,
            MouseEventKind::ScrollDown | MouseEventKind::ScrollUp
        ),
        Event::Resize(_, _) => true,
        _ => false,
    }
}

/// Ctrl-Z: in raw mode the terminal sends it as a key instead of SIGTSTP.
fn is_suspend_key(key: &KeyEvent) -> bool {
    key.kind != KeyEventKind::Release
        && key.code == KeyCode::Char('z')
        && key.modifiers.contains(KeyModifiers::CONTROL)
}

fn handle_event(app: &mut App, event: Event) -> Effect {
    match event {
        Event::Key(key) if key.kind != KeyEventKind::Release => app.on_key(key),
        Event::Mouse(mouse) => app.on_mouse(mouse),
        Event::Resize(_, _) => Effect::Redraw,
        _ => Effect::None,
    }
}

/// Hands an action to the blocking pool (its report arrives later through `reports`), a
/// request to the sampler (its outcome arrives as a snapshot notice), or `R` to the recording.
/// A replay has no processes to act on: nothing leaves it.
fn start_action(
    app: &mut App,
    effect: Effect,
    feed: &mut Feed,
    reports: &mpsc::UnboundedSender<ActionReport>,
) -> Effect {
    let Feed::Live {
        requests,
        recording,
        ..
    } = feed
    else {
        if matches!(
            effect,
            Effect::Act(_) | Effect::AskSampler(_) | Effect::ToggleRecording
        ) {
            app.status = Some("this is a recording: nothing in it can be acted on".into());
            return Effect::Redraw;
        }
        return effect;
    };
    let request = match effect {
        Effect::Act(request) => request,
        Effect::AskSampler(request) => {
            // The sampler thread only stops when the UI does; a failed send has no one to tell.
            let _ = requests.send(request);
            return Effect::Redraw;
        }
        Effect::ToggleRecording => {
            recording.toggle(app, requests);
            return Effect::Redraw;
        }
        other => return other,
    };
    let reports = reports.clone();
    tokio::task::spawn_blocking(move || {
        let _ = reports.send(perform(request));
    });
    Effect::Redraw
}

/// Draws a frame. The layout is planned once here and kept in the app, so that page keys and
/// mouse clicks use the areas this frame shows. A replay keeps the last row for its time bar.
fn draw(terminal: &mut Tui, app: &mut App, feed: &Feed) -> io::Result<()> {
    use crossterm::terminal::{BeginSynchronizedUpdate, EndSynchronizedUpdate};
    use ratatui::layout::Rect;
    let size = terminal.size()?;
    let bar_rows = u16::from(matches!(feed, Feed::Replay(_)) && size.height > 1);
    let screen = Rect::new(0, 0, size.width, size.height - bar_rows);
    let plan = ui::plan(app, screen);
    app.set_layout(plan.clone());
    if let Feed::Live {
        requests,
        recording,
        ..
    } = feed
    {
        // A recording asks for every row itself; the screen tells again once it stops.
        if let Some(request) = (!recording.is_recording())
            .then(|| app.screen_rows_request())
            .flatten()
        {
            let _ = requests.send(request);
        }
    }
    let app = &*app;
    // One write a frame: the terminal (or sshd, or tmux) wakes once for it.
    terminal.backend_mut().hold();
    crossterm::queue!(terminal.backend_mut(), BeginSynchronizedUpdate)?;
    let drawn = terminal
        .draw(|frame| {
            ui::draw(frame, screen, app, &plan);
            if let Feed::Replay(session) = feed {
                let bar = Rect::new(0, screen.bottom(), size.width, bar_rows);
                let theme = app.theme();
                crate::replay::timebar::render(frame, bar, &session.transport, theme);
            }
        })
        .map(|_| ());
    let ended = crossterm::queue!(terminal.backend_mut(), EndSynchronizedUpdate);
    let written = terminal.backend_mut().release();
    drawn?;
    ended?;
    written
}

/// Fault injection for the terminal tests, in debug builds only (the tests run the debug
/// binary): `TORCHTOP_TEST_PANIC=1` panics after the first frame, so the test can check that the
/// panic hook puts the terminal back; `TORCHTOP_TEST_STALL=1` blocks the loop for good after the
/// first frame, so the test can check that SIGTERM still ends torchtop through the watchdog.
#[cfg(debug_assertions)]
fn fault_injection_for_tests() {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| v == "1");
    assert!(
        !set("TORCHTOP_TEST_PANIC"),
        "TORCHTOP_TEST_PANIC is set: panicking on purpose"
    );
    if set("TORCHTOP_TEST_STALL") {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

#[cfg(not(debug_assertions))]
fn fault_injection_for_tests() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_more_pressing_step_wins() {
        assert_eq!(Step::Redraw.merge(Step::Nothing), Step::Redraw);
        assert_eq!(Step::Redraw.merge(Step::Suspend), Step::Suspend);
        assert_eq!(
            Step::End(End::Die(3)).merge(Step::Redraw),
            Step::End(End::Die(3))
        );
    }

    #[test]
    fn only_keys_the_wheel_and_resizes_redraw_the_viewer() {
        use crossterm::event::{MouseEvent, MouseEventKind as Kind};
        let mouse = |kind| {
            Event::Mouse(MouseEvent {
                kind,
                column: 3,
                row: 4,
                modifiers: KeyModifiers::NONE,
            })
        };
        let key = KeyEvent::new(KeyCode::Down, KeyModifiers::NONE);
        assert!(moves_the_viewer(&Event::Key(key)));
        assert!(moves_the_viewer(&mouse(Kind::ScrollDown)));
        assert!(moves_the_viewer(&Event::Resize(80, 24)));
        assert!(!moves_the_viewer(&mouse(Kind::Moved)));
        assert!(!moves_the_viewer(&Event::FocusLost));
        let release =
            KeyEvent::new_with_kind(KeyCode::Down, KeyModifiers::NONE, KeyEventKind::Release);
        assert!(!moves_the_viewer(&Event::Key(release)));
    }

    #[test]
    fn a_snapshot_under_the_viewer_draws_nothing() {
        let mut screen = Screen {
            app: App::new(1.0, false, true),
            viewer: None,
            drawn_size: None,
        };
        assert_eq!(screen.snapshot_step(), Step::Redraw);
        let fixture = crate::memsnap::model::tests::fixture("oom.pickle");
        let loaded = memsnap::load(&fixture, Links::Follow).expect("fixture");
        assert_eq!(screen.open_viewer(Ok(loaded)), Step::Redraw);
        assert_eq!(screen.snapshot_step(), Step::Nothing);
    }

    #[test]
    fn a_resize_to_the_size_drawn_draws_nothing() {
        let mut screen = Screen {
            app: App::new(1.0, false, true),
            viewer: None,
            drawn_size: None,
        };
        let resize = |columns, rows| Input::Event(Event::Resize(columns, rows));
        assert!(!screen.is_drawn_size(&resize(120, 40)));
        screen.drawn_size = Some((120, 40));
        assert!(screen.is_drawn_size(&resize(120, 40)));
        assert!(!screen.is_drawn_size(&resize(120, 41)));
        let key = KeyEvent::new(KeyCode::Char('t'), KeyModifiers::NONE);
        assert!(!screen.is_drawn_size(&Input::Event(Event::Key(key))));
    }

    #[test]
    fn ctrl_z_suspends_and_plain_z_does_not() {
        let ctrl_z = KeyEvent::new(KeyCode::Char('z'), KeyModifiers::CONTROL);
        assert!(is_suspend_key(&ctrl_z));
        assert!(!is_suspend_key(&KeyEvent::new(
            KeyCode::Char('z'),
            KeyModifiers::NONE
        )));
    }
}
