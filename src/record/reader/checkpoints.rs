//! Decoded frames kept as places to start decoding from, between the key frames.
//!
//! A change frame decodes only after every frame since the last key frame (a key frame comes
//! every 300 frames), so reaching a frame behind the decoder meant decoding up to 299 frames
//! again: at 16 GPUs and 500 processes, 0.7 ms each. Stepping back in a replay does that at
//! every press, so the reader keeps the decoder's state at every [`STRIDE`]th frame it decodes,
//! and starts from the nearest one at or before the frame asked for: a frame with a kept state
//! less than [`STRIDE`] frames before it costs fewer decodes than that.
//!
//! Which states are worth keeping depends on where the replay goes, which the player says
//! ([`Checkpoints::aim`]); a reader that has not said (`--json`, `--summary`, which read on
//! and on) keeps none. Stepping back from a frame needs the states below it, so past the
//! bounds the states above that frame go first (the highest first), then those farthest below
//! it. States read on the way to somewhere else (the far end of the replay's history) are
//! the first to go, and are not kept at all when they would go at once.
//!
//! Memory: at most [`MAX_CHECKPOINTS`] states and [`MAX_BYTES`] of them. A state holds every
//! entity's tokens and, for the prediction of changed numbers, those of the frame before:
//! 3.2 MB at 16 GPUs and 500 processes whose figures all change every frame (6.4 KB a
//! process), so 10 states there.

use std::collections::BTreeMap;

use crate::record::delta::Decoder;

/// The decoder's state is kept at every frame whose index is a multiple of this.
pub(crate) const STRIDE: usize = 16;
/// At most this many states are kept: 640 frames' worth of places to start.
pub(crate) const MAX_CHECKPOINTS: usize = 40;
/// At most this many bytes of states are kept.
pub(crate) const MAX_BYTES: usize = 32 << 20;

#[derive(Default)]
pub(super) struct Checkpoints {
    /// Frame index to its state and the bytes it takes.
    states: BTreeMap<usize, (Decoder, usize)>,
    bytes: usize,
    /// The frame the reads are about: states below and near it are kept first. None kept
    /// until a reader says.
    anchor: Option<usize>,
}

impl Checkpoints {
    /// Reads will be about frame `i` (the frame a replay shows): the states below it are the
    /// ones to keep.
    pub(super) fn aim(&mut self, i: usize) {
        self.anchor = Some(i);
    }

    /// The frame of the nearest state at or after `first` and at or before `i`.
    pub(super) fn nearest(&self, first: usize, i: usize) -> Option<usize> {
        self.states.range(first..=i).next_back().map(|(&at, _)| at)
    }

    /// A copy of the state kept at frame `at`.
    pub(super) fn copy(&self, at: usize) -> Option<Decoder> {
        self.states.get(&at).map(|(state, _)| state.clone())
    }

    /// Whether frame `i`'s state should be kept: it falls on the stride, is not kept yet,
    /// and would not be the first to go.
    pub(super) fn wants(&self, i: usize) -> bool {
        let Some(anchor) = self.anchor else {
            return false;
        };
        if i % STRIDE != 0 || self.states.contains_key(&i) {
            return false;
        }
        let average = self.bytes / self.states.len().max(1);
        let full = self.states.len() >= MAX_CHECKPOINTS || self.bytes + average > MAX_BYTES;
        let lowest = self
            .states
            .first_key_value()
            .map_or(usize::MAX, |(&at, _)| at);
        !(full && self.above().is_none() && i < lowest && i <= anchor)
    }

    pub(super) fn keep(&mut self, i: usize, state: Decoder) {
        let bytes = state.weight();
        self.bytes += bytes;
        if let Some((_, old)) = self.states.insert(i, (state, bytes)) {
            self.bytes -= old;
        }
        // Strictly: a state bigger than the whole budget is not kept at all.
        while !self.states.is_empty()
            && (self.states.len() > MAX_CHECKPOINTS || self.bytes > MAX_BYTES)
        {
            let lowest = self.states.first_key_value().map(|(&at, _)| at);
            let Some(victim) = self.above().or(lowest) else {
                break;
            };
            if let Some((_, old)) = self.states.remove(&victim) {
                self.bytes -= old;
            }
        }
    }

    /// The highest state above the anchor, the first to go.
    fn above(&self) -> Option<usize> {
        let above = self.anchor?.checked_add(1)?;
        self.states.range(above..).next_back().map(|(&at, _)| at)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.states.len()
    }

    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}
