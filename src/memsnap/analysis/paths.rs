//! A stack as a path from the outermost call in, in the snapshot's order (or, for the Holders
//! tree, Python frames first and the C++ frames folded into one step), without the interpreter
//! and unwinder frames that `_memory_viz` leaves out too. Also the folded-stack lines of the live allocations, for
//! flame graphs and for comparing two snapshots.

use std::collections::HashMap;

use super::super::model::{BlockState, FrameId, Frames, Snapshot, StackId};
use super::super::text::escape;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub(crate) enum Step {
    Device(Option<i64>),
    Frame(FrameId),
    /// The C++ frames below the Python ones, folded.
    Cpp,
    /// A block without frames: history recording was off when it was allocated.
    NoStack,
}

/// Appends the path of `stack` to `out`: its frames outermost first, in the snapshot's order
/// (C++ frames can sit between Python ones, as in a checkpoint's recompute inside backward).
/// With `fold_cpp` (the Holders tree), the Python frames come first and every C++ frame is
/// folded into one step after them.
pub(crate) fn path(frames: &Frames, stack: StackId, fold_cpp: bool, out: &mut Vec<Step>) {
    let start = out.len();
    let kept = || {
        frames
            .stack(stack)
            .iter()
            .rev()
            .copied()
            .filter(|&id| !frames.frame(id).noise)
    };
    if fold_cpp {
        out.extend(
            kept()
                .filter(|&id| frames.frame(id).python)
                .map(Step::Frame),
        );
        if kept().any(|id| !frames.frame(id).python) {
            out.push(Step::Cpp);
        }
    } else {
        out.extend(kept().map(Step::Frame));
    }
    if out.len() == start {
        out.push(Step::NoStack);
    }
}

/// The text of a step, escaped for the terminal.
pub(crate) fn label(frames: &Frames, step: Step) -> String {
    match step {
        Step::Device(device) => super::device_label(device),
        Step::Frame(id) => escape(&frames.label(id)).into_owned(),
        Step::Cpp => "[C++ frames]".to_string(),
        Step::NoStack => "<no stack: history recording was off>".to_string(),
    }
}

/// A label for a folded-stack line, where ';' separates frames.
fn folded_label(frames: &Frames, step: Step) -> String {
    label(frames, step).replace(';', ":")
}

/// The live blocks of one folded stack.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) bytes: u64,
    pub(crate) blocks: u64,
    /// One of the stacks that read as this line (the lowest id): distinct stacks can read the
    /// same once unwinder frames are left out.
    pub(crate) stack: StackId,
}

/// Live bytes and block count by folded stack ("cuda:0;main (train.py:88);…"), over the
/// allocated blocks of every device, frames in the snapshot's order.
pub(crate) fn folded_stacks(snapshot: &Snapshot) -> HashMap<String, Held> {
    let mut by_path: HashMap<(Option<i64>, StackId), (u64, u64)> = HashMap::new();
    for segment in &snapshot.segments {
        for block in &segment.blocks {
            if block.state == BlockState::ActiveAllocated {
                let entry = by_path.entry((segment.device, block.stack)).or_default();
                entry.0 = entry.0.saturating_add(block.size);
                entry.1 += 1;
            }
        }
    }
    let mut out: HashMap<String, Held> = HashMap::new();
    let mut steps = Vec::new();
    for ((device, stack), (bytes, blocks)) in by_path {
        steps.clear();
        steps.push(Step::Device(device));
        path(&snapshot.frames, stack, false, &mut steps);
        let line = steps
            .iter()
            .map(|&s| folded_label(&snapshot.frames, s))
            .collect::<Vec<_>>()
            .join(";");
        let entry = out.entry(line).or_insert(Held {
            stack,
            ..Held::default()
        });
        entry.bytes = entry.bytes.saturating_add(bytes);
        entry.blocks += blocks;
        entry.stack = entry.stack.min(stack);
    }
    out
}

/// Folded-stack lines ("frame;frame;frame bytes"), sorted, for flamegraph.pl, inferno and
/// speedscope. Their weights add up to the allocated bytes.
pub(crate) fn folded_lines(snapshot: &Snapshot) -> Vec<String> {
    lines_of(folded_stacks(snapshot))
}

/// [`folded_lines`] of stacks already folded.
pub(crate) fn lines_of(stacks: HashMap<String, Held>) -> Vec<String> {
    let mut lines: Vec<String> = stacks
        .into_iter()
        .map(|(path, held)| format!("{path} {}", held.bytes))
        .collect();
    lines.sort();
    lines
}
