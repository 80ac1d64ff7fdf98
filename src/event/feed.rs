//! Where the event loop's snapshots come from, and what it does with each: the sampler's
//! thread for the monitor (its snapshots through [`super::latest`], with `R`'s recording), or a
//! recording's player for the replay. The sampler wakes the loop on its own core (see
//! [`crate::sys::sched::Handover`]): one sleeping core woken a tick instead of two.

use std::sync::Arc;

use crate::app::App;
use crate::model::Snapshot;
use crate::record::live::LiveRecording;
use crate::replay::{player::Update, Session};
use crate::sampler::{self, GpuLoader, SamplerConfig, SamplerRequest};
use crate::sys::sched::Handover;

use super::latest::{self, LatestReceiver};

/// Where the snapshots come from.
pub(super) enum Source {
    Live {
        config: Box<SamplerConfig>,
        loader: GpuLoader,
    },
    Replay(Session),
}

/// The snapshots as they arrive: from the sampler (with `R`'s recording), or from the player.
pub(super) enum Feed {
    Live {
        snapshots: LatestReceiver<Arc<Snapshot>>,
        requests: std::sync::mpsc::Sender<SamplerRequest>,
        recording: LiveRecording,
    },
    Replay(Session),
}

/// What a feed delivered.
pub(super) enum Arrival {
    Snapshot(Arc<Snapshot>),
    /// Boxed: an update carries a history, and a snapshot is a pointer.
    Replay(Box<Update>),
}

impl Feed {
    /// Starts the source; the sampler wakes the loop's thread through `handover` when given.
    pub(super) fn start(source: Source, app: &App, handover: Option<Arc<Handover>>) -> Feed {
        match source {
            Source::Live { config, loader } => {
                let (snapshots_tx, snapshots) = latest::latest();
                let requests = sampler::spawn_shared_loop(*config, loader, move |snapshot| {
                    if let Some(handover) = &handover {
                        handover.before_wake();
                    }
                    snapshots_tx.send(snapshot)
                });
                let recording = LiveRecording::new(app.delay_seconds);
                Feed::Live {
                    snapshots,
                    requests,
                    recording,
                }
            }
            Source::Replay(session) => Feed::Replay(session),
        }
    }

    /// The next snapshot or replay frame; `None` when the source has ended.
    pub(super) async fn next(&mut self) -> Option<Arrival> {
        match self {
            Feed::Live { snapshots, .. } => snapshots.recv().await.map(Arrival::Snapshot),
            Feed::Replay(session) => session
                .updates
                .recv()
                .await
                .map(|u| Arrival::Replay(Box::new(u))),
        }
    }

    /// Why the source ended, when [`Feed::next`] says it has: neither source ends while the
    /// loop holds it, so it failed.
    pub(super) fn lost(&self) -> &'static str {
        match self {
            Feed::Live { .. } => "the sampler stopped; the monitor cannot go on without it",
            Feed::Replay(_) => "the replay's player stopped before the end of the recording",
        }
    }

    pub(super) fn apply(&mut self, app: &mut App, arrival: Arrival) {
        match (self, arrival) {
            (
                Feed::Live {
                    recording,
                    requests,
                    ..
                },
                Arrival::Snapshot(snapshot),
            ) => {
                recording.on_snapshot(app, &snapshot, requests);
                app.on_snapshot(snapshot);
            }
            (Feed::Replay(session), Arrival::Replay(update)) => session.apply(app, *update),
            _ => {}
        }
    }
}
