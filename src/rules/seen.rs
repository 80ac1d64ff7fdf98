//! Which warnings hold, from one evaluation to the next: when each was first seen (its
//! `since`), and, for the rules that clear at a lower bar than they raise at, whether the last
//! evaluation held it ([`Held`]).

use std::collections::HashMap;

use super::{impact_rank, subject_order};
use crate::model::Subject;

/// When a warning was first seen, and the sample that last saw it.
#[derive(Debug, Clone)]
pub(super) struct FirstSeen {
    pub(super) id: String,
    pub(super) since: String,
    pub(super) stamp: u64,
}

/// The first-seen key: an id's place in [`IMPACT`](super::IMPACT) and the subject as
/// [`subject_order`] has it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(super) struct SeenKey {
    rank: usize,
    kind: u8,
    number: u32,
    name: String,
}

impl SeenKey {
    /// Rewrites the key in place, in its name's room.
    pub(super) fn set(&mut self, rank: usize, subject: &Subject) {
        let (kind, number, name) = subject_order(subject);
        self.rank = rank;
        self.kind = kind;
        self.number = number;
        if self.name != name {
            self.name.clear();
            self.name.push_str(name);
        }
    }
}

/// How far below its bar a share must fall before a warning raised on it clears (3 points of
/// 100 %): memory, a cgroup's use and `/dev/shm` waver at a bar with each step.
pub(super) const CLEAR_MARGIN: f64 = 0.03;

/// The warnings the last evaluation held, for a rule that clears at a lower bar than it raises
/// at (hysteresis): a figure that wavers at the bar raised and cleared its warning every tick,
/// with a new `since` each time, and an alert on its series never held long enough to fire.
#[derive(Clone, Copy)]
pub(crate) struct Held<'a> {
    first_seen: &'a HashMap<SeenKey, FirstSeen>,
    /// The count of the evaluation before this one: the stamp of what it held.
    last: u64,
}

impl<'a> Held<'a> {
    pub(super) fn new(first_seen: &'a HashMap<SeenKey, FirstSeen>, last: u64) -> Self {
        Held { first_seen, last }
    }

    /// `bar`, or `bar` less [`CLEAR_MARGIN`] while the warning `id` on `subject` holds: once
    /// raised, a warning clears only clearly below the bar that raised it.
    pub(crate) fn bar(&self, id: &str, subject: &Subject, bar: f64) -> f64 {
        if self.holds(id, subject) {
            bar - CLEAR_MARGIN
        } else {
            bar
        }
    }

    /// Whether the last evaluation held the warning `id` on `subject`.
    pub(crate) fn holds(&self, id: &str, subject: &Subject) -> bool {
        let mut key = SeenKey::default();
        key.set(impact_rank(id), subject);
        (self.first_seen.get(&key)).is_some_and(|seen| seen.stamp == self.last && seen.id == id)
    }
}
