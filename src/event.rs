//! The event loop: one `select!` over key presses, new snapshots, finished actions and
//! termination signals. Pending input is drained before drawing once, so a burst of keys costs
//! one frame; nothing here waits on a collector or on an action (signals and renice run on
//! tokio's blocking pool and report back through a channel), so keys answer at once even while
//! the driver hangs.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crossterm::event::{Event, EventStream, KeyEventKind};
use futures_util::{FutureExt, StreamExt};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, watch};

use crate::actions::{adjust_nice, renice, send_signal};
use crate::app::{Action, ActionReport, ActionRequest, App, Effect};
use crate::collect::sampler::{self, GpuLoader, SamplerConfig, SamplerRequest};
use crate::model::Snapshot;
use crate::terminal::{TerminalGuard, Tui};
use crate::ui;

/// Runs the monitor until the user quits or a termination signal arrives.
pub fn run_tui(app: App, config: SamplerConfig, loader: GpuLoader) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut guard = TerminalGuard::enter()?;
    let result = runtime.block_on(event_loop(&mut guard.terminal, app, config, loader));
    drop(guard);
    // Collector threads may be stuck in the driver; they are never joined.
    runtime.shutdown_timeout(Duration::from_millis(10));
    result
}

async fn event_loop(
    terminal: &mut Tui,
    mut app: App,
    config: SamplerConfig,
    loader: GpuLoader,
) -> io::Result<()> {
    let (snapshots_tx, mut snapshots) = watch::channel(Arc::new(Snapshot::default()));
    let sampler_requests = sampler::spawn_loop(config, loader, move |snapshot| {
        snapshots_tx.send(Arc::new(snapshot)).is_ok()
    });
    let mut input = EventStream::new();
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let (reports_tx, mut reports) = mpsc::unbounded_channel::<ActionReport>();
    draw(terminal, &mut app)?;
    panic_if_asked_by_a_test();
    loop {
        let effect = tokio::select! {
            event = input.next() => match event {
                Some(Ok(event)) => handle_event(&mut app, event),
                Some(Err(_)) | None => Effect::Quit,
            },
            changed = snapshots.changed() => match changed {
                Ok(()) => {
                    app.on_snapshot(snapshots.borrow_and_update().clone());
                    Effect::Redraw
                }
                Err(_) => Effect::Quit,
            },
            Some(report) = reports.recv() => {
                app.on_action_done(&report);
                Effect::Redraw
            }
            _ = terminate.recv() => Effect::Quit,
            _ = hangup.recv() => Effect::Quit,
            _ = interrupt.recv() => Effect::Quit,
        };
        let mut effect = start_action(effect, &reports_tx, &sampler_requests);
        while effect != Effect::Quit {
            let Some(Some(Ok(event))) = input.next().now_or_never() else {
                break;
            };
            let next = start_action(
                handle_event(&mut app, event),
                &reports_tx,
                &sampler_requests,
            );
            effect = merge(effect, next);
        }
        match effect {
            Effect::Quit => return Ok(()),
            Effect::Redraw | Effect::Act(_) | Effect::AskSampler(_) => draw(terminal, &mut app)?,
            Effect::None => {}
        }
    }
}

fn handle_event(app: &mut App, event: Event) -> Effect {
    match event {
        Event::Key(key) if key.kind != KeyEventKind::Release => app.on_key(key),
        Event::Mouse(mouse) => app.on_mouse(mouse),
        Event::Resize(_, _) => Effect::Redraw,
        _ => Effect::None,
    }
}

/// Hands an action to the blocking pool (its report arrives later through `reports`) or a
/// request to the sampler (its outcome arrives as a snapshot notice).
fn start_action(
    effect: Effect,
    reports: &mpsc::UnboundedSender<ActionReport>,
    sampler: &std::sync::mpsc::Sender<SamplerRequest>,
) -> Effect {
    let request = match effect {
        Effect::Act(request) => request,
        Effect::AskSampler(request) => {
            // The sampler thread only stops when the UI does; a failed send has no one to tell.
            let _ = sampler.send(request);
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

/// Runs `request` against each target in turn. Blocks on /proc reads and system calls.
pub fn perform(request: ActionRequest) -> ActionReport {
    let results = request
        .targets
        .iter()
        .map(|target| match request.action {
            Action::Signal(signal) => send_signal(&target.identity, signal).map(|()| None),
            Action::SetNice(nice) => renice(&target.identity, nice).map(Some),
            Action::AdjustNice(delta) => adjust_nice(&target.identity, delta).map(Some),
        })
        .collect();
    ActionReport { request, results }
}

fn merge(a: Effect, b: Effect) -> Effect {
    match (a, b) {
        (Effect::Quit, _) | (_, Effect::Quit) => Effect::Quit,
        (Effect::Redraw, _) | (_, Effect::Redraw) => Effect::Redraw,
        _ => Effect::None,
    }
}

/// Draws a frame, first telling the app the terminal's size (for paging and mouse clicks).
fn draw(terminal: &mut Tui, app: &mut App) -> io::Result<()> {
    use crossterm::terminal::{BeginSynchronizedUpdate, EndSynchronizedUpdate};
    let size = terminal.size()?;
    app.set_screen(ratatui::layout::Rect::new(0, 0, size.width, size.height));
    let app = &*app;
    crossterm::queue!(terminal.backend_mut(), BeginSynchronizedUpdate)?;
    terminal.draw(|frame| ui::draw(frame, app))?;
    crossterm::execute!(terminal.backend_mut(), EndSynchronizedUpdate)?;
    Ok(())
}

/// Fault injection for the terminal-restore test: `TORCHTOP_TEST_PANIC=1` panics after the
/// first frame, so the test can check that the panic hook puts the terminal back.
fn panic_if_asked_by_a_test() {
    if std::env::var_os("TORCHTOP_TEST_PANIC").is_some_and(|v| v == "1") {
        panic!("TORCHTOP_TEST_PANIC is set: panicking on purpose");
    }
}
