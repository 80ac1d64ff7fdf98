//! The newest snapshot, handed from the sampler thread to the event loop: a slot that holds
//! one value and a [`Notify`] that wakes the loop once per value.
//!
//! Why not `tokio::sync::watch`: its send wakes the waiting task from inside a loop over
//! several notifiers. On a busy core the woken event loop preempts the sampler in the middle
//! of that loop, handles the snapshot, waits again, and the rest of the loop then wakes it a
//! second time for nothing: two wake-ups of the UI thread per tick instead of one (seen with
//! `perf record -e sched:sched_wakeup`). Here the value is stored first and one waiter is
//! woken once, after which the sender touches nothing the loop waits on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

struct Shared<T> {
    value: Mutex<Option<T>>,
    notify: Notify,
    sender_gone: AtomicBool,
    receiver_gone: AtomicBool,
}

impl<T> Shared<T> {
    fn slot(&self) -> MutexGuard<'_, Option<T>> {
        // The slot holds a plain value: a panic elsewhere while it was locked left it whole.
        self.value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The sampler's end: each value sent replaces the one not yet taken.
pub(crate) struct LatestSender<T> {
    shared: Arc<Shared<T>>,
}

/// The event loop's end.
pub(crate) struct LatestReceiver<T> {
    shared: Arc<Shared<T>>,
}

/// A slot for the newest value, with its two ends.
pub(crate) fn latest<T>() -> (LatestSender<T>, LatestReceiver<T>) {
    let shared = Arc::new(Shared {
        value: Mutex::new(None),
        notify: Notify::new(),
        sender_gone: AtomicBool::new(false),
        receiver_gone: AtomicBool::new(false),
    });
    (
        LatestSender {
            shared: shared.clone(),
        },
        LatestReceiver { shared },
    )
}

impl<T> LatestSender<T> {
    /// Stores `value` in place of any not yet taken and wakes the receiver; false once the
    /// receiver is gone (the sender should stop).
    pub(crate) fn send(&self, value: T) -> bool {
        if self.shared.receiver_gone.load(Ordering::Acquire) {
            return false;
        }
        let replaced = self.shared.slot().replace(value);
        self.shared.notify.notify_one();
        // Dropped after the wake, outside the lock: a snapshot the loop never took can be big.
        drop(replaced);
        true
    }
}

impl<T> Drop for LatestSender<T> {
    fn drop(&mut self) {
        self.shared.sender_gone.store(true, Ordering::Release);
        self.shared.notify.notify_one();
    }
}

impl<T> LatestReceiver<T> {
    /// The newest value not yet taken, waiting for one if need be; `None` once the sender is
    /// gone and nothing is left.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        loop {
            // `notify_one` leaves a permit when nobody waits, so a value sent between the look
            // and the wait still ends the wait; a permit left by a value already taken only
            // makes this loop look once more.
            let notified = self.shared.notify.notified();
            if let Some(value) = self.shared.slot().take() {
                return Some(value);
            }
            if self.shared.sender_gone.load(Ordering::Acquire) {
                return None;
            }
            notified.await;
        }
    }
}

impl<T> Drop for LatestReceiver<T> {
    fn drop(&mut self) {
        self.shared.receiver_gone.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
            .block_on(future)
    }

    #[test]
    fn the_receiver_gets_only_the_newest_value() {
        let (tx, mut rx) = latest();
        assert!(tx.send(1));
        assert!(tx.send(2));
        assert_eq!(run(rx.recv()), Some(2));
        assert!(tx.send(3));
        assert_eq!(run(rx.recv()), Some(3));
    }

    #[test]
    fn a_value_sent_from_another_thread_wakes_a_waiting_receiver() {
        let (tx, mut rx) = latest();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            tx.send("snapshot")
        });
        assert_eq!(run(rx.recv()), Some("snapshot"));
        assert!(sender.join().expect("the sender thread"));
    }

    #[test]
    fn the_ends_see_each_other_go() {
        let (tx, mut rx) = latest::<u32>();
        assert!(tx.send(7));
        drop(tx);
        assert_eq!(
            run(rx.recv()),
            Some(7),
            "what was sent before is still taken"
        );
        assert_eq!(run(rx.recv()), None);
        let (tx, rx) = latest::<u32>();
        drop(rx);
        assert!(!tx.send(1), "a sender without a receiver is told to stop");
    }
}
