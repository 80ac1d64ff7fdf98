//! Key latency: how long from a key's bytes reaching the terminal to its effect on the screen,
//! with two cores kept busy by spinning processes (the load of a training job's data loaders).
//!
//! Each key is sent just after a tick's frame has been drawn, so the first change of the screen
//! that follows is the key's own (the next tick is most of a second away). Every key in the
//! list changes the text of the screen, so the text alone tells when the effect is drawn.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::pty::PtySession;

/// A key's name and its bytes.
pub(crate) type Key = (&'static str, &'static [u8]);

/// The tree view's key, timed as it opens the tree and as it closes it.
const TREE_ON: Key = ("t (tree on)", b"t");
const TREE_OFF: Key = ("t (tree off)", b"t");

/// The other keys timed, in the order sent: each pair leaves the screen as it found it.
const OTHERS: &[Key] = &[
    ("? (help)", b"?"),
    ("Esc (help off)", b"\x1b"),
    ("> (next sort)", b">"),
    ("< (previous sort)", b"<"),
    ("r (reverse)", b"r"),
    ("r (reverse back)", b"r"),
    ("/ (filter)", b"/"),
    ("Esc (filter off)", b"\x1b"),
];

/// The keys timed: `t` twice first, closing the tree and opening it again where it is open
/// (so that the rest act on the tree), else the other way round.
pub(crate) fn keys(tree_open: bool) -> Vec<Key> {
    let tree = if tree_open {
        [TREE_OFF, TREE_ON]
    } else {
        [TREE_ON, TREE_OFF]
    };
    tree.into_iter().chain(OTHERS.iter().copied()).collect()
}

/// Processes that spin until dropped.
pub(crate) struct BusyCores(Vec<Child>);

impl BusyCores {
    pub(crate) fn spin(count: usize) -> Self {
        BusyCores(
            (0..count)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("start a busy loop")
                })
                .collect(),
        )
    }
}

impl Drop for BusyCores {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls the screen closely until it differs from `before`; the time it took, or `None`.
fn until_changed(session: &PtySession, before: &str, timeout: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if session.screen() != before {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    None
}

/// Waits for a tick's frame (a change with no key sent), then lets it settle.
fn after_a_tick(session: &PtySession) {
    let before = session.screen();
    let _ = until_changed(session, &before, Duration::from_millis(1500));
    std::thread::sleep(Duration::from_millis(100));
}

/// Each key's latency in ms over `rounds` rounds (`None` where nothing changed within 900 ms).
pub(crate) fn latencies(
    session: &mut PtySession,
    keys: &[Key],
    rounds: usize,
) -> Vec<(&'static str, Vec<Option<f64>>)> {
    let mut results: Vec<(&str, Vec<Option<f64>>)> =
        keys.iter().map(|(name, _)| (*name, Vec::new())).collect();
    for _ in 0..rounds {
        for (i, (_, bytes)) in keys.iter().enumerate() {
            after_a_tick(session);
            let before = session.screen();
            session.send(bytes);
            let took = until_changed(session, &before, Duration::from_millis(900));
            results[i].1.push(took.map(|d| d.as_secs_f64() * 1000.0));
        }
    }
    results
}

/// "median / worst" in ms, or what went wrong.
pub(crate) fn summary(times: &[Option<f64>]) -> String {
    let mut seen: Vec<f64> = times.iter().flatten().copied().collect();
    if seen.is_empty() {
        return "no change seen".into();
    }
    seen.sort_by(f64::total_cmp);
    let missed = times.len() - seen.len();
    let mut text = format!("{:.1} / {:.1}", seen[seen.len() / 2], seen[seen.len() - 1]);
    if missed > 0 {
        text.push_str(&format!(" ({missed} of {} unseen)", times.len()));
    }
    text
}
