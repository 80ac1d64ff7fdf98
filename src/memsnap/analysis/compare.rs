//! What grew between two snapshots of the same program, by stack: the leak hunt. Stacks are
//! matched by their text (frame ids differ between files), device included.

use std::collections::{BTreeSet, HashMap};

use super::super::model::Snapshot;
use super::paths::{folded_stacks, Held};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StackDiff {
    /// Device first, then frames from the outermost call in.
    pub(crate) path: Vec<String>,
    pub(crate) before: u64,
    pub(crate) after: u64,
    pub(crate) before_blocks: u64,
    pub(crate) after_blocks: u64,
}

impl StackDiff {
    pub(crate) fn delta(&self) -> i128 {
        i128::from(self.after) - i128::from(self.before)
    }
}

/// Every stack whose live bytes changed, the largest growth first and the largest shrink last.
pub(crate) fn compare(before: &Snapshot, after: &Snapshot) -> Vec<StackDiff> {
    let a = folded_stacks(before);
    let b = folded_stacks(after);
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let held = |side: &HashMap<String, Held>, key: &String| {
        side.get(key).map_or((0, 0), |h| (h.bytes, h.blocks))
    };
    let mut out: Vec<StackDiff> = keys
        .into_iter()
        .filter_map(|key| {
            let (before, before_blocks) = held(&a, key);
            let (after, after_blocks) = held(&b, key);
            (before != after).then(|| StackDiff {
                path: key.split(';').map(str::to_string).collect(),
                before,
                after,
                before_blocks,
                after_blocks,
            })
        })
        .collect();
    out.sort_by_key(|d| std::cmp::Reverse(d.delta()));
    out
}
