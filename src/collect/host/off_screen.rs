//! GPU process rows off screen, read less often: with a thousand GPU processes, reading every
//! `stat` each refresh was most of the sampler's cost, for rows nobody sees. While the monitor
//! says which rows are on screen, a row off it is read again every [`OFF_SCREEN_EVERY`] (its
//! CPU% then covers those seconds) and shows its last reading in between. Without a screen
//! (`--once`, `serve`, a recording) every row is read every refresh.

use std::time::{Duration, Instant};

use super::{round_to_ticks, JoinedProcess};
use crate::sys::PidMap;

/// A child read with its parent: what the OOM-kill watch is told of it in between.
#[derive(Debug, Clone, Copy)]
pub(super) struct Child {
    pub(super) pid: u32,
    pub(super) start_ticks: u64,
    pub(super) rss_bytes: Option<u64>,
}

/// How often a row off screen is read again.
pub(crate) const OFF_SCREEN_EVERY: Duration = Duration::from_secs(5);

/// The last reading of each GPU process, and when each is due again.
#[derive(Debug, Default)]
pub(super) struct OffScreen {
    kept: PidMap<u32, Kept>,
}

#[derive(Debug)]
struct Kept {
    joined: JoinedProcess,
    /// The children read with it, for the OOM-kill watch in the refreshes in between.
    children: Vec<Child>,
    due: Instant,
}

impl OffScreen {
    /// The kept reading of `pid` if it may stand for this refresh: the row is off screen
    /// (`on_screen` is sorted) and was read less than [`OFF_SCREEN_EVERY`] ago. Its running
    /// time is brought up to `uptime`; the children read with it come along.
    pub(super) fn reuse(
        &self,
        pid: u32,
        on_screen: Option<&[u32]>,
        now: Instant,
        uptime: Option<f64>,
        clock_ticks: u64,
    ) -> Option<(JoinedProcess, &[Child])> {
        let off = on_screen.is_some_and(|pids| pids.binary_search(&pid).is_err());
        let kept = self.kept.get(&pid).filter(|k| off && now < k.due)?;
        let mut joined = kept.joined;
        let started = joined.start_ticks as f64 / clock_ticks.max(1) as f64;
        joined.running_seconds =
            uptime.map(|up| round_to_ticks((up - started).max(0.0), clock_ticks));
        Some((joined, &kept.children))
    }

    /// Keeps what was just read of `pid` (`None`: it is gone), with the children read with it.
    /// The first time, the next read comes sooner for some pids than for others, so that a
    /// thousand rows seen together are not read again all in the same refresh.
    pub(super) fn keep(
        &mut self,
        pid: u32,
        joined: Option<JoinedProcess>,
        children: &[Child],
        now: Instant,
    ) {
        let Some(joined) = joined else {
            self.kept.remove(&pid);
            return;
        };
        let first = !self.kept.contains_key(&pid);
        let wait = if first {
            OFF_SCREEN_EVERY * (10 - pid % 10) / 10
        } else {
            OFF_SCREEN_EVERY
        };
        let due = now + wait;
        let kept = self.kept.entry(pid).or_insert_with(|| Kept {
            joined,
            children: Vec::new(),
            due,
        });
        kept.joined = joined;
        kept.due = due;
        // In place: a row on screen is kept each refresh, and should not allocate for it.
        kept.children.clear();
        kept.children.extend_from_slice(children);
    }

    /// Drops what is kept of pids no longer tracked.
    pub(super) fn retain(&mut self, mut tracked: impl FnMut(u32) -> bool) {
        self.kept.retain(|pid, _| tracked(*pid));
    }
}
