//! How a snapshot leaves the sampler: given away ([`Publish::Owned`]), or shared as an
//! `Arc<Snapshot>` ([`Publish::Shared`]), in which case the sampler keeps the last few it
//! published and, once every receiver has dropped one, fills that one again for a later tick:
//! its vectors and its time text keep their room, so that a tick allocates nothing for them.
//! A published snapshot is never changed: only one nobody else holds can be refilled
//! (`Arc::get_mut`).

use std::collections::VecDeque;
use std::sync::Arc;

use super::Sampler;
use crate::model::Snapshot;

/// Snapshots kept for refilling: the one a receiver shows, the one before it (a recording's
/// previous frame), and one free to be refilled. When all are still held, a new one is made
/// and the oldest forgotten, so nothing a receiver holds for long is kept alive here.
const KEPT: usize = 3;

/// Where each snapshot goes; false when nobody wants more.
pub(crate) enum Publish {
    /// Each snapshot is the receiver's own.
    Owned(Box<dyn FnMut(Snapshot) -> bool + Send>),
    /// Snapshots are shared, and refilled once the receivers have dropped them.
    Shared(Box<dyn FnMut(Arc<Snapshot>) -> bool + Send>),
}

/// The snapshots published lately as [`Publish::Shared`], oldest first.
pub(super) struct Recycler {
    recent: VecDeque<Arc<Snapshot>>,
}

impl Default for Recycler {
    fn default() -> Self {
        Recycler {
            recent: VecDeque::with_capacity(KEPT),
        }
    }
}

impl Recycler {
    /// A snapshot nobody else holds: a kept one every receiver has dropped, else a new one.
    fn take(&mut self) -> Arc<Snapshot> {
        let free = (self.recent.iter_mut()).position(|kept| Arc::get_mut(kept).is_some());
        free.and_then(|at| self.recent.remove(at))
            .unwrap_or_default()
    }

    /// Keeps `published`, forgetting the oldest kept one when there are enough.
    fn keep(&mut self, published: &Arc<Snapshot>) {
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(published.clone());
    }
}

impl Sampler {
    /// The snapshot of now, handed to `publish`; false when nobody wants more.
    pub(super) fn publish_now(&mut self, publish: &mut Publish) -> bool {
        match publish {
            Publish::Owned(publish) => {
                let mut snapshot = Snapshot::default();
                self.snapshot_into(&mut snapshot);
                publish(snapshot)
            }
            Publish::Shared(publish) => publish(self.shared_snapshot_now()),
        }
    }

    /// The snapshot of now, shared, in a snapshot published earlier where one is free.
    pub(super) fn shared_snapshot_now(&mut self) -> Arc<Snapshot> {
        let mut snapshot = self.recycler.take();
        let fill = Arc::get_mut(&mut snapshot).expect("a snapshot nobody else holds");
        self.snapshot_into(fill);
        self.recycler.keep(&snapshot);
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_refilled_only_once_every_receiver_dropped_it() {
        let mut recycler = Recycler::default();
        let first = recycler.take();
        recycler.keep(&first);
        let first_at = Arc::as_ptr(&first);
        let second = recycler.take();
        assert_ne!(
            Arc::as_ptr(&second),
            first_at,
            "a held snapshot was handed out"
        );
        recycler.keep(&second);
        drop(first);
        let third = recycler.take();
        assert_eq!(
            Arc::as_ptr(&third),
            first_at,
            "the dropped snapshot was not reused"
        );
    }

    #[test]
    fn no_more_than_a_few_snapshots_are_kept() {
        let mut recycler = Recycler::default();
        let held: Vec<Arc<Snapshot>> = (0..10)
            .map(|_| {
                let snapshot = recycler.take();
                recycler.keep(&snapshot);
                snapshot
            })
            .collect();
        assert_eq!(recycler.recent.len(), KEPT);
        assert!(held.iter().all(|s| Arc::strong_count(s) <= 2));
    }
}
