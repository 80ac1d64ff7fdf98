//! `R` in the monitor: start or stop a recording of the snapshots the UI gets, with the
//! indicator in the header. The writer runs on its own thread ([`Recorder`]); the UI task only
//! hands it each `Arc<Snapshot>`.
//!
//! A disk that refuses writes pauses the recording, not the monitor: the status line says so
//! and the indicator reads `○ REC PAUSED` until writing works again, which the status line
//! says too, with the gap the recording has.
//!
//! The file goes to `$TORCHTOP_RECORD_DIR`, else the current directory when it belongs to the
//! user running torchtop, else the home directory: root never writes where another user chose.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use super::headless::default_file_name;
use super::table::TableSchedule;
use super::{RecordError, RecordOptions, Recorder};
use crate::app::App;
use crate::format::{bytes, duration, escape};
use crate::model::Snapshot;
use crate::sampler::SamplerRequest;

/// The environment variable naming where `R` writes recordings.
pub(crate) const RECORD_DIR_ENV: &str = "TORCHTOP_RECORD_DIR";

pub(crate) struct LiveRecording {
    recorder: Option<Recorder>,
    interval_seconds: f64,
    table: TableSchedule,
    told_failure: bool,
}

impl LiveRecording {
    pub(crate) fn new(interval_seconds: f64) -> Self {
        LiveRecording {
            recorder: None,
            interval_seconds,
            table: TableSchedule::default(),
            told_failure: false,
        }
    }

    /// `R`: starts a recording, or stops the one running; the status line says where it is.
    /// Stopping hands the process table back to the tree view's wish.
    pub(crate) fn toggle(&mut self, app: &mut App, sampler: &Sender<SamplerRequest>) {
        if let Some(recorder) = self.recorder.take() {
            ask_table(sampler, app.settings.tree);
            // The recording asked for every row; the screen needs only its own again.
            app.retell_rows_on_screen();
            let status = recorder.status().clone();
            let frames = status.frames.load(Ordering::Relaxed);
            app.badge = None;
            let stopped = recorder.stop();
            let lost = status.lost.load(Ordering::Relaxed);
            let lost = if lost > 0 {
                format!("; {lost} snapshots were not recorded because the disk refused writes")
            } else {
                String::new()
            };
            app.status = Some(match stopped {
                Ok(size) => format!(
                    "recording saved: {} ({frames} frames, {}){lost}; replay it with torchtop \
                     replay FILE",
                    escape(&status.path.display().to_string()),
                    bytes(size)
                ),
                Err(error) => format!("the recording failed: {error}{lost}"),
            });
            return;
        }
        let started = record_dir().and_then(|dir| {
            Recorder::start(RecordOptions {
                path: dir.join(default_file_name()),
                max_size: None,
                interval_seconds: self.interval_seconds,
            })
        });
        match started {
            Ok(recorder) => {
                app.status = Some(format!(
                    "recording to {}; R stops",
                    escape(&recorder.status().path.display().to_string())
                ));
                self.recorder = Some(recorder);
                self.table = TableSchedule::default();
                self.told_failure = false;
                self.update_badge(app);
            }
            Err(error) => app.status = Some(format!("cannot record: {error}")),
        }
    }

    /// Whether a recording runs: it wants every row read each tick, not only those on screen.
    pub(crate) fn is_recording(&self) -> bool {
        self.recorder.is_some()
    }

    /// Hands the snapshot to the writer, asks the sampler for the process table when due (the
    /// tree view of the replay needs it now and then), and updates the indicator.
    pub(crate) fn on_snapshot(
        &mut self,
        app: &mut App,
        snapshot: &Arc<Snapshot>,
        sampler: &Sender<SamplerRequest>,
    ) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        recorder.push(snapshot.clone());
        ask_table(sampler, self.table.want(snapshot) || app.settings.tree);
        self.update_badge(app);
    }

    fn update_badge(&mut self, app: &mut App) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let status = recorder.status();
        if let Some(event) = status.take_events().pop() {
            // Only the latest: an outage that ended within a refresh needs no word of its start.
            let zone = crate::format::clock::zone(app.utc);
            app.status = Some(format!("recording: {}", event.sentence(&zone)));
        }
        if let Some(why) = status.failure() {
            app.badge = Some("REC FAILED".into());
            if !self.told_failure {
                self.told_failure = true;
                app.status = Some(format!("the recording stopped: {why}"));
            }
            return;
        }
        let mark = if status.failing_since().is_some() {
            "\u{25cb} REC PAUSED"
        } else {
            "\u{25cf} REC"
        };
        app.badge = Some(format!(
            "{mark} {} {}",
            duration(status.started.elapsed().as_secs_f64()),
            bytes(status.bytes.load(Ordering::Relaxed))
        ));
    }
}

/// Tells the sampler whether the next snapshots carry the process table. The sampler thread
/// only stops when the UI does, so a failed send has no one to tell.
fn ask_table(sampler: &Sender<SamplerRequest>, wanted: bool) {
    let _ = sampler.send(SamplerRequest::ProcessTable {
        wanted,
        visible: None,
    });
}

/// Where `R` writes: see the module doc.
fn record_dir() -> Result<PathBuf, RecordError> {
    if let Some(dir) = std::env::var_os(RECORD_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let candidates = [
        std::env::current_dir().ok(),
        std::env::var_os("HOME").map(PathBuf::from),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|dir| owned_by_me(dir))
        .ok_or_else(|| {
            RecordError(format!(
                "neither the current directory nor the home directory belongs to you; set \
                 {RECORD_DIR_ENV} to a directory of yours"
            ))
        })
}

fn owned_by_me(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == me)
}
