//! `torchtop cluster --prometheus URL`: a view of many machines that gets every figure from
//! Prometheus' HTTP API, as `torchtop serve` (or dcgm-exporter) exported them. No aggregation
//! server of our own: Prometheus already is one.
//!
//! Built like the monitor:
//! - [`promql`]: the HTTP API client; [`fetch`]: the panels' queries and the background task;
//! - [`model`]: nodes and jobs (with stragglers) from the answers, without I/O;
//! - [`warnings`]: every node's warnings, a node that is down among them, and `--once`'s exit
//!   status, without I/O;
//! - [`state`]: the state machine (keys, selection, stale panels), without I/O;
//! - [`render`]: pure drawing;
//! - this file: the arguments, `--once --json`, and the event loop.

pub(crate) mod fetch;
pub(crate) mod model;
pub(crate) mod promql;
pub(crate) mod render;
pub(crate) mod state;
pub(crate) mod warnings;

#[cfg(test)]
mod tests;

use std::io;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use crossterm::event::{Event, EventStream, KeyEventKind};
use futures_util::StreamExt;
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, Notify};

use crate::settings::{FailOn, Globals};
use model::ClusterView;
use promql::Client;
use state::{ClusterApp, Effect, Stale};

/// `torchtop cluster` options.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// The Prometheus that scrapes `torchtop serve` on every node (also `prometheus` in the
    /// config's `[cluster]` table).
    #[arg(long, value_name = "URL", env = "TORCHTOP_PROMETHEUS")]
    pub(crate) prometheus: Option<String>,

    /// Ask once, print, and exit.
    #[arg(long)]
    pub(crate) once: bool,

    /// With --once: print one JSON document.
    #[arg(long, requires = "once")]
    pub(crate) json: bool,

    /// With --once: which warnings make the exit status non-zero, as for `torchtop --once`:
    /// `critical` (the default) exits 4 while a critical warning holds (a node that is down is
    /// one), `warn` also exits 3 for a warning at warn level, `never` exits 0. It exits 1 when
    /// the nodes could not be read, and when the warnings could not be and no node that is down
    /// decides it.
    #[arg(
        long,
        value_enum,
        value_name = "LEVEL",
        default_value = "critical",
        requires = "once"
    )]
    pub(crate) fail_on: FailOn,

    /// A rank is a straggler when its step time is more than this percent above its job's
    /// median: a percentage from 0 (any rank slower than the median) to 10000. Default 20, or
    /// the config's `[cluster]` straggler_percent.
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    pub(crate) straggler_percent: Option<f64>,

    /// Seconds between refreshes.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, value_parser = parse_positive)]
    pub(crate) refresh: f64,

    /// How long one query may take before the panel is marked stale.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, value_parser = parse_positive)]
    pub(crate) query_timeout: f64,
}

/// The largest `--straggler-percent`: a rank at a hundred times its job's median step time.
/// Any bar above that marks no rank of a job that still steps at all.
const MAX_STRAGGLER_PERCENT: f64 = 10_000.0;

/// A straggler bar in percent; 0 is allowed (a rank is a straggler when it is slower than
/// the median at all, since the comparison is "more than").
fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if valid_percent(v) => Ok(v),
        _ => Err(format!(
            "expected a percentage from 0 to {MAX_STRAGGLER_PERCENT:.0}, not {text:?}"
        )),
    }
}

fn valid_percent(value: f64) -> bool {
    (0.0..=MAX_STRAGGLER_PERCENT).contains(&value)
}

fn parse_positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "expected a number above 0 (and at most 86400), not {text:?}"
        )),
    }
}

/// The `--once --json` document.
#[derive(Debug, Serialize)]
pub(crate) struct OnceDocument<'a> {
    pub(crate) prometheus: &'a str,
    pub(crate) stale: Stale,
    /// Panels never read: their lists are empty because they are unknown, not because there is
    /// nothing.
    pub(crate) unread: Stale,
    pub(crate) problems: &'a [String],
    /// How long the panels' queries took together, in milliseconds.
    pub(crate) fetch_ms: Option<u128>,
    #[serde(flatten)]
    pub(crate) view: &'a ClusterView,
}

/// Why `torchtop cluster` stopped: a usage error (a malformed or missing `--prometheus`, a bad
/// config file) exits 2 as the README's exit status table says; any other failure exits 1.
enum Failure {
    Usage(String),
    Other(String),
}

impl From<String> for Failure {
    fn from(error: String) -> Self {
        Failure::Other(error)
    }
}

/// Runs `torchtop cluster`.
pub fn main(globals: &Globals, args: &ClusterArgs) -> ExitCode {
    let (error, code) = match run(globals, args) {
        Ok(code) => return code,
        Err(Failure::Usage(error)) => (error, 2),
        Err(Failure::Other(error)) => (error, 1),
    };
    say!("torchtop cluster: {}", model::printable(&error));
    ExitCode::from(code)
}

/// Where Prometheus is and the straggler bar, from the flags and the config file: every error
/// here is a usage error.
fn settings(globals: &Globals, args: &ClusterArgs) -> Result<(String, f64), String> {
    // `--config`, else the default file when there is one, as the monitor reads it.
    let config = crate::settings::MonitorConfig::load(globals.config.as_deref())?
        .config
        .cluster;
    let url = args
        .prometheus
        .clone()
        .or(config.prometheus)
        .ok_or_else(|| {
            "say where Prometheus is: --prometheus http://HOST:9090, TORCHTOP_PROMETHEUS, or \
         `prometheus = \"...\"` in the [cluster] table of the config file"
                .to_string()
        })?;
    promql::check_url(&url)?;
    let straggler = args.straggler_percent.unwrap_or(config.straggler_percent);
    if !valid_percent(straggler) {
        return Err(format!(
            "straggler_percent in the [cluster] table of the config file is {straggler}; give a \
             percentage from 0 to {MAX_STRAGGLER_PERCENT:.0}"
        ));
    }
    Ok((url, straggler))
}

fn run(globals: &Globals, args: &ClusterArgs) -> Result<ExitCode, Failure> {
    let (url, straggler) = settings(globals, args).map_err(Failure::Usage)?;
    let client = Client::new(&url, Duration::from_secs_f64(args.query_timeout))?;
    let mut app = ClusterApp::new(client.base().to_string(), straggler, globals.colors);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    if args.once {
        let fetched = runtime.block_on(fetch::fetch_all(&client));
        app.on_fetch(fetched, now_text());
        return Ok(print_once(&app, args.json, args.fail_on));
    }
    let refresh = Duration::from_secs_f64(args.refresh);
    let result =
        with_terminal(|terminal| runtime.block_on(event_loop(terminal, &mut app, client, refresh)));
    runtime.shutdown_timeout(Duration::from_millis(10));
    result
        .and_then(|inner| inner)
        .map_err(|e| format!("the terminal failed: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

fn print_once(app: &ClusterApp, json: bool, fail_on: FailOn) -> ExitCode {
    if json {
        let document = OnceDocument {
            prometheus: &app.url,
            stale: app.stale,
            unread: app.unread,
            problems: &app.problems,
            fetch_ms: app.took_ms,
            view: &app.view,
        };
        match crate::format::json::pretty(&document) {
            Ok(text) => tell!("{text}"),
            Err(e) => say!("torchtop cluster: cannot write JSON: {e}"),
        }
    } else {
        tell!("{}", render::once_text(app));
    }
    for problem in &app.problems {
        say!("torchtop cluster: {}", model::printable(problem));
    }
    ExitCode::from(warnings::once_status(app, fail_on.threshold()))
}

/// The one place this view touches the terminal guard (whose API may change).
fn with_terminal<T>(body: impl FnOnce(&mut crate::terminal::Tui) -> T) -> io::Result<T> {
    // Without a terminal that draws, what this command offers instead (it has no `--json`
    // stream, which the monitor's sentence names).
    crate::terminal::tty_or("use --once for one summary, or --once --json for one JSON document")?;
    let mut guard = crate::terminal::TerminalGuard::enter()?;
    Ok(body(&mut guard.terminal))
}

fn now_text() -> String {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    // "2026-01-01T12:00:01Z" -> "12:00:01 UTC"
    now.get(11..19).map_or(now.clone(), |t| format!("{t} UTC"))
}

async fn event_loop(
    terminal: &mut crate::terminal::Tui,
    app: &mut ClusterApp,
    client: Client,
    refresh: Duration,
) -> io::Result<()> {
    let (results_tx, mut results) = mpsc::channel(2);
    let wake = Arc::new(Notify::new());
    let fetcher = fetch::spawn(client, refresh, results_tx, wake.clone());
    let mut input = EventStream::new();
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    draw(terminal, app)?;
    loop {
        let effect = tokio::select! {
            event = input.next() => match event {
                Some(Ok(Event::Key(key))) if key.kind != KeyEventKind::Release => app.on_key(key),
                Some(Ok(Event::Resize(_, _))) => Effect::Redraw,
                Some(Ok(_)) => Effect::None,
                Some(Err(_)) | None => Effect::Quit,
            },
            Some(fetched) = results.recv() => {
                app.on_fetch(fetched, now_text());
                Effect::Redraw
            }
            _ = terminate.recv() => Effect::Quit,
            _ = hangup.recv() => Effect::Quit,
            _ = interrupt.recv() => Effect::Quit,
        };
        match effect {
            Effect::Quit => break,
            Effect::Refresh => {
                wake.notify_one();
                draw(terminal, app)?;
            }
            Effect::Redraw => draw(terminal, app)?,
            Effect::None => {}
        }
    }
    fetcher.abort();
    Ok(())
}

fn draw(terminal: &mut crate::terminal::Tui, app: &ClusterApp) -> io::Result<()> {
    terminal.draw(|frame| render::draw(frame, app))?;
    Ok(())
}

#[cfg(test)]
mod percent_tests {
    use super::parse_percent;

    #[test]
    fn the_straggler_bar_is_a_percentage_from_0_to_10000() {
        assert_eq!(parse_percent("0"), Ok(0.0));
        assert_eq!(parse_percent("20"), Ok(20.0));
        assert_eq!(parse_percent("10000"), Ok(10_000.0));
        for bad in ["-1", "10000.5", "100000", "nan", "inf", "twenty"] {
            let error = parse_percent(bad).unwrap_err();
            assert_eq!(
                error,
                format!("expected a percentage from 0 to 10000, not {bad:?}")
            );
        }
    }
}

/// Text of a drawn buffer, for the render tests.
#[cfg(test)]
pub(crate) mod tests_support {
    pub(crate) fn buffer_text(buffer: &ratatui::buffer::Buffer) -> String {
        let width = buffer.area.width as usize;
        let cells: Vec<&str> = buffer
            .content()
            .iter()
            .map(ratatui::buffer::Cell::symbol)
            .collect();
        cells
            .chunks(width.max(1))
            .map(|row| row.concat().trim_end().to_string())
            .collect::<Vec<_>>()
            .join("\n")
            .trim_end()
            .to_string()
    }
}
