//! `torchtop record`: the sampler and the rules of the monitor, without a terminal, writing
//! every snapshot to a recording until the duration is over or a signal (SIGINT, SIGTERM,
//! SIGHUP) asks it to stop; the last block is then closed cleanly. Fit for systemd, tmux and
//! nohup. A disk that refuses writes for a while (full, over quota) stops nothing: stderr says
//! so once, and again when writing works, with the gap it left in the recording.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGTERM};

use super::table::TableSchedule;
use super::writer::{Feeder, Recorder, RecorderStatus};
use super::{RecordError, RecordOptions};
use crate::format::escape;
use crate::model::Snapshot;
use crate::sampler::{self, GpuLoader, SamplerConfig, SamplerRequest};

/// The longest `--duration`: a year.
const MAX_DURATION: Duration = Duration::from_secs(366 * 86_400);
/// The largest `--max-size`: 1 PiB.
const MAX_SIZE: u64 = 1 << 50;

#[derive(Debug, Clone)]
pub struct HeadlessOptions {
    pub record: RecordOptions,
    pub duration: Option<Duration>,
    /// Also print each snapshot as a `--json` line on stdout.
    pub json: bool,
    /// Times in stderr's sentences in UTC (`--utc`), else in the local zone.
    pub utc: bool,
}

/// Why the recording loop stopped.
enum Stop {
    Duration,
    Signal(i32),
    Failed(String),
}

/// What was recorded, for the closing sentence.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub(crate) path: PathBuf,
    pub(crate) frames: u64,
    pub(crate) bytes: u64,
    pub(crate) seconds: f64,
    pub(crate) dropped: u64,
    /// Snapshots that never reached the file because the disk refused writes.
    pub(crate) lost: u64,
    pub(crate) why: String,
}

impl std::fmt::Display for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "recorded {} frames over {} to {} ({}); {}",
            self.frames,
            crate::format::duration(self.seconds),
            escape(&self.path.display().to_string()),
            crate::format::bytes(self.bytes),
            self.why
        )?;
        if self.dropped > 0 {
            write!(
                f,
                "; {} snapshots were dropped because the disk did not keep up",
                self.dropped
            )?;
        }
        if self.lost > 0 {
            write!(
                f,
                "; {} snapshots were not recorded because the disk refused writes",
                self.lost
            )?;
        }
        Ok(())
    }
}

/// Records until the duration is over or a signal comes.
pub fn run(
    options: HeadlessOptions,
    config: SamplerConfig,
    loader: GpuLoader,
) -> Result<Recorded, RecordError> {
    let started = Instant::now();
    let recorder = Recorder::start(options.record.clone())?;
    say!(
        "torchtop record: writing {} every {:.1} s{}; stop with Ctrl-C or SIGTERM",
        escape(&options.record.path.display().to_string()),
        options.record.interval_seconds,
        match options.duration {
            Some(d) => format!(" for {}", humantime::format_duration(d)),
            None => String::new(),
        }
    );
    let (stops_tx, stops) = mpsc::channel::<Stop>();
    watch_signals(stops_tx.clone())?;
    let requests = Arc::new(OnceLock::new());
    let publish = publisher(&options, requests.clone(), recorder.feeder(), stops_tx);
    // The publisher runs on the sampler's thread, which exists only once spawned: it finds the
    // request channel here from then on (a table asked for at the very first tick waits a tick).
    let _ = requests.set(sampler::spawn_shared_loop(config, loader, publish));
    let why = match stops.recv() {
        Ok(Stop::Duration) => "the duration is over".to_string(),
        Ok(Stop::Signal(signal)) => format!("stopped by signal {signal}"),
        Ok(Stop::Failed(why)) => return Err(RecordError(why)),
        Err(_) => "the sampler stopped".to_string(),
    };
    let status = recorder.status().clone();
    let stopped = recorder.stop();
    tell_disk_events(&status, options.utc);
    let bytes = stopped?;
    Ok(Recorded {
        path: status.path.clone(),
        frames: status.frames.load(Ordering::Relaxed),
        bytes,
        seconds: started.elapsed().as_secs_f64(),
        dropped: status.dropped.load(Ordering::Relaxed),
        lost: status.lost.load(Ordering::Relaxed),
        why,
    })
}

/// Says on stderr what changed about the disk since the last time.
fn tell_disk_events(status: &RecorderStatus, utc: bool) {
    let events = status.take_events();
    if events.is_empty() {
        return;
    }
    let zone = crate::format::clock::zone(utc);
    for event in events {
        say!("torchtop record: {}", event.sentence(&zone));
    }
}

/// Watches SIGINT, SIGTERM and SIGHUP, each unless it came ignored: under `nohup` (SIGHUP
/// ignored) or a shell's `&` without job control (SIGINT), the recording must outlive the
/// login, as every program run that way does.
fn watch_signals(stops: mpsc::Sender<Stop>) -> Result<(), RecordError> {
    let watched: Vec<i32> = [SIGINT, SIGTERM, SIGHUP]
        .into_iter()
        .filter(|&signal| !crate::sys::ignored(signal))
        .collect();
    let mut signals = signal_hook::iterator::Signals::new(watched)
        .map_err(|e| RecordError(format!("could not watch for signals: {e}")))?;
    std::thread::Builder::new()
        .name("torchtop-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let _ = stops.send(Stop::Signal(signal));
            }
        })
        .map_err(|e| RecordError(format!("could not watch for signals: {e}")))?;
    Ok(())
}

/// What the sampler thread does with each snapshot: print it (with `--json`), hand it to the
/// writer, ask for the process table when it is due, and stop when the time is up.
fn publisher(
    options: &HeadlessOptions,
    requests: Arc<OnceLock<mpsc::Sender<SamplerRequest>>>,
    feeder: Feeder,
    stops: mpsc::Sender<Stop>,
) -> impl FnMut(Arc<Snapshot>) -> bool + Send + 'static {
    let started = Instant::now();
    let duration = options.duration;
    let mut json = options.json;
    let utc = options.utc;
    let mut schedule = TableSchedule::default();
    let mut driver_told = None;
    move |snapshot| {
        if let Some(news) = crate::model::gpu::driver_news(&mut driver_told, &snapshot.driver) {
            say!("torchtop record: {}", escape(&news));
        }
        let wanted = schedule.want(&snapshot);
        if let Some(requests) = requests.get() {
            let _ = requests.send(SamplerRequest::ProcessTable {
                wanted,
                visible: None,
            });
        }
        // The file is the recording; the lines are a view of it. A reader that goes away
        // (`| head`) ends the lines, not the recording.
        if json && print_json(&snapshot).is_err() {
            json = false;
            say!("torchtop record: stdout was closed; recording goes on without --json lines");
        }
        feeder.push(snapshot);
        tell_disk_events(feeder.status(), utc);
        if let Some(why) = feeder.status().failure() {
            let _ = stops.send(Stop::Failed(why));
            return false;
        }
        if duration.is_some_and(|d| started.elapsed() >= d) {
            let _ = stops.send(Stop::Duration);
            return false;
        }
        true
    }
}

/// The line `torchtop --json` prints for this snapshot: without the host process table, which
/// only the tree view asks for.
fn print_json(snapshot: &Snapshot) -> std::io::Result<()> {
    let line = if snapshot.host_processes.is_empty() {
        crate::format::json::line(snapshot)
    } else {
        let mut plain = snapshot.clone();
        plain.host_processes.clear();
        crate::format::json::line(&plain)
    }
    .unwrap_or_default();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// A file name for a recording started now, in UTC: `torchtop-20260130-031500Z.ttrec`. The
/// `Z` says so, as in RFC 3339, so the name is read the same wherever the file is copied to.
pub fn default_file_name() -> PathBuf {
    file_name_at(std::time::SystemTime::now())
}

fn file_name_at(time: std::time::SystemTime) -> PathBuf {
    let now = humantime::format_rfc3339_seconds(time).to_string();
    let compact: String = now
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect::<String>()
        .replace('T', "-");
    PathBuf::from(format!("torchtop-{compact}Z.ttrec"))
}

/// `--duration`: "90s", "10m", "8h", "2d", or plain seconds; at most a year.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let shown = escape(text);
    let trimmed = text.trim();
    let duration = match trimmed.parse::<f64>() {
        Ok(seconds)
            if seconds.is_finite() && seconds > 0.0 && seconds <= MAX_DURATION.as_secs_f64() =>
        {
            Duration::from_secs_f64(seconds)
        }
        Ok(_) => {
            return Err(format!(
                "the duration must be above 0 and at most 366 days, not {shown}"
            ))
        }
        Err(_) => humantime::parse_duration(trimmed)
            .map_err(|_| format!("'{shown}' is not a duration (try 90s, 10m, 8h or 2d)"))?,
    };
    if duration.is_zero() || duration > MAX_DURATION {
        return Err(format!(
            "the duration must be above 0 and at most 366 days, not {shown}"
        ));
    }
    Ok(duration)
}

/// `--max-size`: bytes, or a number with K, M, G or T (powers of 1024; "MB", "MiB" too).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let shown = escape(text);
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("'{shown}' is not a size (try 500M or 2G)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("'{shown}' is not a size (try 500M or 2G)")),
    };
    let bytes = number * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes > MAX_SIZE as f64 {
        return Err(format!("the size must be at most 1P, not {shown}"));
    }
    // Refused here, as a usage error (status 2), not once the recorder starts.
    if bytes < super::writer::MIN_MAX_SIZE as f64 {
        return Err(format!("the size must be at least 1M (1 MiB), not {shown}"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse_and_are_bounded() {
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        // Below the recorder's least: a usage error, where it exited 1 once recording began.
        assert!(parse_size("1000000").unwrap_err().contains("at least 1M"));
        assert_eq!(parse_size("2 GiB"), Ok(2 << 30));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("1e30").is_err());
        assert!(parse_size("9999999T").unwrap_err().contains("at most"));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("400d").is_err());
        assert!(parse_duration("soon")
            .unwrap_err()
            .contains("not a duration"));
        let name = default_file_name().display().to_string();
        assert!(
            name.starts_with("torchtop-2") && name.ends_with("Z.ttrec"),
            "{name}"
        );
        let at = std::time::UNIX_EPOCH + Duration::from_secs(1_769_742_900);
        assert_eq!(
            file_name_at(at),
            PathBuf::from("torchtop-20260130-031500Z.ttrec")
        );
    }
}
