//! `torchtop replay`: a recording shown again in the monitor's own TUI (every panel, the
//! history, the warnings, the PyTorch panel, the tree), with a transport to move in time; or
//! exported as `--json` lines, or summed up with `--summary`.
//!
//! - [`player`]: the thread that owns the recording and sends frames at the chosen speed;
//!   [`figures`]: what it keeps of recent frames to build the history again quickly.
//! - [`transport`]: the replay's keys, and the sentences for the action keys.
//! - [`timebar`]: the line under the panels that shows where the replay stands.
//! - [`export`], [`summary`]: the outputs for scripts and people.
//! - [`time`]: reading the times the user types.

pub(crate) mod export;
pub(crate) mod figures;
pub(crate) mod player;
pub(crate) mod summary;
pub(crate) mod time;
pub(crate) mod timebar;
pub(crate) mod transport;

#[cfg(test)]
mod step_timing;

use std::path::PathBuf;

use jiff::tz::TimeZone;
use tokio::sync::mpsc::{self, UnboundedReceiver};

use crate::app::App;
use crate::record::{RecordError, Recording};
use player::Update;
use time::Moment;
use transport::Transport;

/// The demo recording: an 8-GPU DDP job that fragments, leaks, straggles and runs out of
/// memory (built by `tests/fixtures/demo/make_demo.sh`).
pub(crate) const DEMO: &[u8] = include_bytes!("../../assets/demo.ttrec");
/// What a replay offers where there is no terminal to draw on.
pub(crate) const NO_TERMINAL: &str =
    "use --summary for what happened, or --json for its frames as JSON lines";
/// The demo plays at this speed unless `--speed` says otherwise.
pub(crate) const DEMO_SPEED: f64 = 16.0;

#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    pub file: Option<PathBuf>,
    pub demo: bool,
    pub json: bool,
    pub summary: bool,
    pub from: Option<String>,
    pub to: Option<String>,
    pub speed: Option<f64>,
    pub colors: bool,
    /// Times shown and typed in UTC (`--utc`) instead of the local zone.
    pub utc: bool,
}

/// Why `torchtop replay` stopped.
#[derive(Debug)]
pub enum ReplayError {
    /// A `--from` or `--to` that is not a time, or a range that ends before it starts: a usage
    /// error, which exits 2 as clap's do.
    Usage(String),
    /// Anything else: the file, the player.
    Failed(RecordError),
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Usage(sentence) => f.write_str(sentence),
            ReplayError::Failed(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for ReplayError {}

impl From<RecordError> for ReplayError {
    fn from(error: RecordError) -> Self {
        ReplayError::Failed(error)
    }
}

/// A replay in the TUI: the transport and the frames from the player.
pub(crate) struct Session {
    pub(crate) transport: Transport,
    pub(crate) updates: UnboundedReceiver<Update>,
}

impl Session {
    /// Shows one update: the history first when it was rebuilt, then the frame.
    pub(crate) fn apply(&mut self, app: &mut App, update: Update) {
        if let Some(history) = update.history {
            app.history = history;
        }
        if let Some(snapshot) = update.snapshot {
            app.on_snapshot(snapshot);
        }
        self.transport.position = Some(update.position);
        if let Some(note) = update.note {
            app.status = Some(note);
        }
    }
}

fn open(options: &ReplayOptions) -> Result<Recording, RecordError> {
    match (&options.file, options.demo) {
        (_, true) => Recording::from_bytes("the demo recording", DEMO),
        (Some(path), false) => Recording::open(path),
        (None, false) => Err(RecordError(
            "name a recording (torchtop replay FILE), or play the demo with torchtop replay --demo"
                .into(),
        )),
    }
}

/// The range `--from`/`--to` ask for, read in `zone`.
fn range(
    options: &ReplayOptions,
    recording: &Recording,
    zone: &TimeZone,
) -> Result<(Option<Moment>, Option<Moment>), ReplayError> {
    let frames = recording.frames();
    let (start, end) = match (frames.first(), frames.last()) {
        (Some(a), Some(b)) => (a.time, b.time),
        _ => (0.0, 0.0),
    };
    let read = |text: &Option<String>| -> Result<Option<Moment>, ReplayError> {
        text.as_deref()
            .map(|t| time::parse_time(t, start, end, zone).map_err(ReplayError::Usage))
            .transpose()
    };
    let (from, to) = (read(&options.from)?, read(&options.to)?);
    if let (Some(from), Some(to)) = (from, to) {
        if !to.reaches(from.at) {
            return Err(ReplayError::Usage(
                "--to names a time before --from: give the earlier time to --from".into(),
            ));
        }
    }
    Ok((from, to))
}

/// What `torchtop replay` leaves to the TUI: the monitor's app set up for the recording, and the
/// session that feeds it ([`crate::event::run_replay`] runs it; this module sits below the event
/// loop and does not call it).
pub struct Tui {
    pub(crate) app: App,
    pub(crate) session: Session,
}

/// Runs `torchtop replay` as the options say: `--json` and `--summary` are printed here; for
/// the TUI, the app and the playing session are returned.
pub fn run(options: ReplayOptions) -> Result<Option<Tui>, ReplayError> {
    let mut recording = open(&options)?;
    let zone = crate::format::clock::zone(options.utc);
    let (from, to) = range(&options, &recording, &zone)?;
    let stderr = &mut std::io::stderr();
    if recording.frames().is_empty() {
        let mut sentence = format!("{} holds no whole frame", recording.name());
        for issue in &recording.issues {
            sentence.push_str(&format!("\n{issue}"));
        }
        return Err(RecordError(sentence).into());
    }
    if options.json || options.summary {
        for issue in &recording.issues {
            say!("torchtop replay: {}", crate::format::escape(issue));
        }
    }
    if options.json {
        let stdout = &mut std::io::stdout().lock();
        let range = time::frames_between(recording.frames(), from, to);
        if let Some(note) = nearest_note(&recording, from, to, &zone) {
            say!("torchtop replay: {note}");
        }
        export::json_lines(&mut recording, range, &zone, stdout, stderr)?;
        return Ok(None);
    }
    if options.summary {
        let range = time::frames_between(recording.frames(), from, to);
        let summary = summary::summary(&mut recording, range, &zone)?;
        tell!("{}", summary.trim_end_matches('\n'));
        return Ok(None);
    }
    Ok(tui(recording, &options, from, zone).map(Some)?)
}

/// When `--from` and `--to` name one moment that falls in a gap of the recording, the frame
/// given for it is the nearest, seconds or hours away: a sentence says so.
fn nearest_note(
    recording: &Recording,
    from: Option<Moment>,
    to: Option<Moment>,
    zone: &TimeZone,
) -> Option<String> {
    let moment = from.filter(|_| from == to)?;
    let interval = recording.meta.interval_seconds;
    let (a, b) = time::gap_around(recording.frames(), moment, interval)?;
    let clock = |t| crate::format::clock::clock(t, zone);
    Some(format!(
        "nothing was recorded from {} to {}: the nearest frame to that moment is given",
        clock(a),
        clock(b)
    ))
}

fn tui(
    recording: Recording,
    options: &ReplayOptions,
    from: Option<Moment>,
    zone: TimeZone,
) -> Result<Tui, RecordError> {
    let start = from.map_or(0, |m| recording.frames().partition_point(|f| f.time < m.at));
    let speed = options
        .speed
        .unwrap_or(if options.demo { DEMO_SPEED } else { 1.0 });
    let interval = recording.meta.interval_seconds;
    let mut app = App::new(interval, options.colors, true).with_utc(options.utc);
    app.replay = true;
    app.badge = Some(if options.demo {
        "REPLAY demo".to_string()
    } else {
        "REPLAY".to_string()
    });
    if let Some(first) = recording.issues.first() {
        app.status = Some(first.clone());
    }
    let (updates_tx, updates) = mpsc::unbounded_channel();
    let commands = player::spawn(recording, start, speed, zone.clone(), updates_tx)
        .map_err(|e| RecordError(format!("could not start the player: {e}")))?;
    let session = Session {
        transport: Transport::new(commands, zone),
        updates,
    };
    Ok(Tui { app, session })
}
