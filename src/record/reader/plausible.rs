//! What a replayed snapshot may say, beyond the GPU figures [`Snapshot::drop_implausible`]
//! checks: a recording is a file anyone can write, and the figures the live collectors and
//! the agent protocol bound (CPU shares, an agent's step time, ranks and world sizes) must be
//! bound the same way when they come back from one, or a crafted file prints 309 digits.

use std::sync::Arc;

use crate::model::{Snapshot, TorchInfo};
use crate::protocol::{MAX_STEP_TIME_S, MAX_WORLD_SIZE};

/// The most CPU one process can use, in percent of one CPU: every CPU of the largest
/// machines Linux runs on (8,192), busy.
const MAX_PROCESS_CPU_PERCENT: f64 = 819_200.0;

/// A process's CPU share as a recording gives it, where it is one a process can have: the
/// replay's history checks its figures with this too, so that plot and panel agree.
pub(crate) fn process_cpu(percent: Option<f64>) -> Option<f64> {
    percent.filter(|v| v.is_finite() && (0.0..=MAX_PROCESS_CPU_PERCENT).contains(v))
}

/// Drops to `None` every figure of `snapshot` that no machine or agent reports.
pub(super) fn drop_implausible(snapshot: &mut Snapshot) {
    snapshot.drop_implausible();
    let host = &mut snapshot.host;
    host.cpu_percent = host
        .cpu_percent
        .filter(|v| v.is_finite() && (0.0..=100.0).contains(v));
    for row in &mut snapshot.processes {
        row.cpu_percent = process_cpu(row.cpu_percent);
        let Some(torch) = row.torch.as_mut() else {
            continue;
        };
        let kept = bounded(torch);
        if kept != figures(torch) {
            let torch = Arc::make_mut(torch);
            (
                torch.step_time_seconds,
                torch.rank,
                torch.local_rank,
                torch.world_size,
            ) = kept;
        }
    }
}

/// An agent's step time, rank, local rank and world size.
type Figures = (Option<f64>, Option<u32>, Option<u32>, Option<u32>);

fn figures(torch: &TorchInfo) -> Figures {
    (
        torch.step_time_seconds,
        torch.rank,
        torch.local_rank,
        torch.world_size,
    )
}

/// [`figures`] within the protocol's bounds on a hello and a stats line (the agent parser's):
/// a step time of at most a day, a world size of 1 to 2^20, ranks below it.
fn bounded(torch: &TorchInfo) -> Figures {
    let time = |t: &f64| t.is_finite() && (0.0..=MAX_STEP_TIME_S).contains(t);
    let world_size = torch
        .world_size
        .filter(|w| (1..=MAX_WORLD_SIZE).contains(w));
    let ranks = world_size.unwrap_or(MAX_WORLD_SIZE);
    (
        torch.step_time_seconds.filter(time),
        torch.rank.filter(|r| *r < ranks),
        torch.local_rank.filter(|r| *r < ranks),
        world_size,
    )
}
