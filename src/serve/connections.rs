//! The exporter's open connections, and which one to close when a new one arrives and all
//! [`MAX_CONNECTIONS`] are taken.
//!
//! A cap taken before `accept()` let any local user hold every slot with silent sockets, each
//! kept for the 10 s header timeout and reopened at once, while Prometheus' new connection
//! waited in the kernel's queue behind them until its scrape timed out. The exporter now
//! accepts every connection and, when full, closes the one that matters least: one that has
//! never sent a whole request (oldest first), else the keep-alive connection idle the longest.
//! A request being answered is never cut. A scraper sends its request the moment it connects,
//! so a flood of sockets would have to open hundreds of connections after it, within the
//! milliseconds its request takes, to push it out.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::task::AbortHandle;

/// The most connections kept open at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// What a connection's task reports of itself, read when a victim is chosen.
#[derive(Debug)]
pub(crate) struct Activity {
    /// Set while a request is being answered.
    busy: AtomicBool,
    /// When the last request began, in milliseconds after the registry's start, plus one;
    /// 0 while the connection has sent no whole request.
    last_request: AtomicU64,
    epoch: Instant,
}

impl Activity {
    /// Marks a request as begun; the connection stays protected until the guard drops.
    pub(crate) fn request(self: &Arc<Self>) -> Busy {
        let millis = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.last_request.store(millis + 1, Ordering::Relaxed);
        self.busy.store(true, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// How readily this connection is closed: lower goes first, `None` never.
    fn eviction_rank(&self, accepted: u64) -> Option<(bool, u64)> {
        if self.busy.load(Ordering::Relaxed) {
            return None;
        }
        match self.last_request.load(Ordering::Relaxed) {
            0 => Some((false, accepted)),
            last => Some((true, last)),
        }
    }
}

/// Held while a request is answered.
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Relaxed);
    }
}

struct Entry {
    id: u64,
    /// Milliseconds after the registry's start.
    accepted: u64,
    activity: Arc<Activity>,
    abort: Option<AbortHandle>,
}

#[derive(Default)]
struct Inner {
    entries: Vec<Entry>,
    next_id: u64,
}

/// The open connections. Cheap to clone; every clone is the same registry.
#[derive(Clone)]
pub(crate) struct Registry {
    inner: Arc<Mutex<Inner>>,
    epoch: Instant,
    limit: usize,
}

/// A connection's place in the registry; leaving it (dropping the slot) frees the place.
pub(crate) struct Slot {
    registry: Registry,
    id: u64,
    pub(crate) activity: Arc<Activity>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        inner.entries.retain(|entry| entry.id != self.id);
    }
}

impl Registry {
    pub(crate) fn new(limit: usize) -> Registry {
        Registry {
            inner: Arc::new(Mutex::new(Inner::default())),
            epoch: Instant::now(),
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic under the lock leaves the list whole (each change is one Vec operation).
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes room for a connection just accepted and runs it: `start` spawns its task given
    /// its slot. Returns false, and runs nothing, when every connection is answering a
    /// request, so that the caller drops the new one.
    pub(crate) fn admit(&self, start: impl FnOnce(Slot) -> AbortHandle) -> bool {
        let mut inner = self.lock();
        if inner.entries.len() >= self.limit && !evict_one(&mut inner) {
            return false;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let activity = Arc::new(Activity {
            busy: AtomicBool::new(false),
            last_request: AtomicU64::new(0),
            epoch: self.epoch,
        });
        let accepted = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        inner.entries.push(Entry {
            id,
            accepted,
            activity: activity.clone(),
            abort: None,
        });
        let slot = Slot {
            registry: self.clone(),
            id,
            activity,
        };
        // The task's own removal waits for this lock, so the entry is still there to be
        // given its handle, whatever the task has done by now.
        let abort = start(slot);
        if let Some(entry) = inner.entries.iter_mut().find(|entry| entry.id == id) {
            entry.abort = Some(abort);
        }
        true
    }

    /// How many connections are open.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

/// Closes the connection that matters least; false when every one is answering a request.
fn evict_one(inner: &mut Inner) -> bool {
    let victim = inner
        .entries
        .iter()
        .enumerate()
        .filter_map(|(at, entry)| Some((entry.activity.eviction_rank(entry.accepted)?, at)))
        .min()
        .map(|(_, at)| at);
    let Some(at) = victim else {
        return false;
    };
    let entry = inner.entries.swap_remove(at);
    if let Some(abort) = entry.abort {
        abort.abort();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Admits a connection whose task waits forever, as a silent socket's would.
    fn admit_idle(registry: &Registry, slots: &Arc<Mutex<Vec<Arc<Activity>>>>) -> bool {
        let slots = slots.clone();
        registry.admit(|slot| {
            slots.lock().unwrap().push(slot.activity.clone());
            tokio::spawn(async move {
                let _slot = slot;
                std::future::pending::<()>().await;
            })
            .abort_handle()
        })
    }

    async fn settle(registry: &Registry, want: usize) {
        for _ in 0..1000 {
            if registry.len() == want {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("{} connections, expected {want}", registry.len());
    }

    #[tokio::test]
    async fn a_new_connection_closes_one_that_never_sent_a_request_before_a_scraper() {
        let registry = Registry::new(3);
        let slots = Arc::new(Mutex::new(Vec::new()));
        assert!(admit_idle(&registry, &slots));
        // The first connection is a scraper: it sent a request and is now idle (keep-alive).
        drop(slots.lock().unwrap()[0].request());
        assert!(admit_idle(&registry, &slots));
        assert!(admit_idle(&registry, &slots));
        assert!(admit_idle(&registry, &slots));
        settle(&registry, 3).await;
        let kept: Vec<u64> = registry.lock().entries.iter().map(|e| e.id).collect();
        assert!(kept.contains(&0), "the scraper was closed: {kept:?}");
        assert!(
            !kept.contains(&1),
            "the oldest silent one was kept: {kept:?}"
        );
    }

    #[tokio::test]
    async fn a_request_being_answered_is_never_cut() {
        let registry = Registry::new(2);
        let slots = Arc::new(Mutex::new(Vec::new()));
        assert!(admit_idle(&registry, &slots));
        assert!(admit_idle(&registry, &slots));
        let busy: Vec<Busy> = slots
            .lock()
            .unwrap()
            .iter()
            .map(Activity::request)
            .collect();
        assert!(!admit_idle(&registry, &slots), "a busy connection was cut");
        settle(&registry, 2).await;
        drop(busy);
        assert!(admit_idle(&registry, &slots));
        settle(&registry, 2).await;
    }
}
