//! The typed snapshot: what `torch.cuda.memory._snapshot()` holds, as Rust types. Segments
//! with their blocks, one trace per device with every action type, the allocator settings and
//! the external annotations. Frames and stacks are interned once in a [`Frames`] table, so a
//! stack shared by a million trace entries costs one [`StackId`] each.
//!
//! Every field except the core sizes (a segment's address and total size, a block's size and
//! state, a trace entry's action and size) has a default, for older torch versions: 2.0 had
//! `history` instead of `frames` and `requested_size`, and no settings or time stamps.

mod convert;

pub(crate) use convert::from_pickle;

/// An index into [`Frames::texts`].
pub(crate) type TextId = u32;
/// An index into [`Frames::frames`].
pub(crate) type FrameId = u32;

/// An interned stack: frames most recent call first, as torch lists them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub(crate) struct StackId(pub(crate) u32);

impl StackId {
    /// No frames: history recording was off, or torch kept no context for this entry.
    pub(crate) const EMPTY: StackId = StackId(0);
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Frame {
    pub(crate) filename: TextId,
    pub(crate) name: TextId,
    pub(crate) line: Option<i64>,
    /// A Python (or TorchScript, or FX-generated) frame, rather than a C++ one.
    pub(crate) python: bool,
    /// Interpreter and unwinder frames that `_memory_viz` leaves out too.
    pub(crate) noise: bool,
}

/// Every distinct text, frame and stack of a snapshot, each stored once.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    pub(crate) texts: Vec<Box<str>>,
    pub(crate) frames: Vec<Frame>,
    pub(crate) stacks: Vec<Box<[FrameId]>>,
}

impl Frames {
    pub(crate) fn text(&self, id: TextId) -> &str {
        &self.texts[id as usize]
    }

    pub(crate) fn frame(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }

    /// The stack's frames, most recent call first.
    pub(crate) fn stack(&self, id: StackId) -> &[FrameId] {
        &self.stacks[id.0 as usize]
    }

    /// "name (file.py:12)", with the file's last path component, as `_memory_viz` shortens it.
    pub(crate) fn label(&self, id: FrameId) -> String {
        let frame = self.frame(id);
        let file = self.text(frame.filename);
        let short = file.rsplit('/').next().unwrap_or(file);
        let name = self.text(frame.name);
        match (short.is_empty(), frame.line) {
            (true, _) => name.to_string(),
            (false, Some(line)) if line > 0 => format!("{name} ({short}:{line})"),
            (false, _) => format!("{name} ({short})"),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum BlockState {
    /// Held by a tensor.
    ActiveAllocated,
    /// Freed by the program, waiting on another stream before it can be reused.
    ActivePendingFree,
    /// Free, cached by the allocator.
    Inactive,
}

impl BlockState {
    pub(crate) fn name(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Block {
    pub(crate) address: u64,
    pub(crate) size: u64,
    /// What the program asked for; `size` is that rounded up (or a whole unsplit block).
    pub(crate) requested_size: Option<u64>,
    pub(crate) state: BlockState,
    pub(crate) stack: StackId,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SegmentType {
    Large,
    Small,
}

/// One cudaMalloc'd (or, with expandable segments, mapped) range and the blocks it is cut in.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Segment {
    pub(crate) device: Option<i64>,
    pub(crate) address: u64,
    pub(crate) total_size: u64,
    pub(crate) allocated_size: Option<u64>,
    pub(crate) active_size: Option<u64>,
    pub(crate) requested_size: Option<u64>,
    pub(crate) stream: Option<i64>,
    pub(crate) segment_type: Option<SegmentType>,
    /// The memory pool: (0, 0) is the default one; CUDA graphs have private pools.
    pub(crate) pool_id: Option<(i64, i64)>,
    pub(crate) expandable: Option<bool>,
    /// Where the segment was allocated.
    pub(crate) stack: StackId,
    pub(crate) blocks: Vec<Block>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    /// An action newer than this reader.
    Other,
}

impl Action {
    pub(crate) const ALL: [Action; 10] = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Snapshot,
        Action::Oom,
        Action::Other,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::Other => "other",
        }
    }

    fn from_name(name: &str) -> Action {
        Action::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .unwrap_or(Action::Other)
    }
}

/// One event of a device's allocator trace.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TraceEntry {
    pub(crate) action: Action,
    /// The address; for `oom`, torch stores the device's free bytes here (`device_free`).
    pub(crate) addr: u64,
    /// Bytes: requested by the program for alloc and frees, the segment's for segment
    /// actions, the rounded request for `oom`, active bytes for `snapshot`.
    pub(crate) size: u64,
    pub(crate) stream: Option<i64>,
    pub(crate) time_us: Option<i64>,
    pub(crate) stack: StackId,
}

impl TraceEntry {
    /// For an `oom` event: the free memory CUDA reported.
    pub(crate) fn device_free(&self) -> Option<u64> {
        (self.action == Action::Oom).then_some(self.addr)
    }
}

/// A `record_function` annotation (`_record_memory_history(global_record_annotations=True)`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Annotation {
    pub(crate) device: Option<i64>,
    pub(crate) time_us: Option<i64>,
    pub(crate) stage: Option<String>,
    pub(crate) name: Option<String>,
}

/// `allocator_settings`: each setting as text, in the file's order, and the two that matter
/// most, typed.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct AllocatorSettings {
    pub(crate) entries: Vec<(String, String)>,
    pub(crate) expandable_segments: Option<bool>,
    pub(crate) conf: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) segments: Vec<Segment>,
    /// One trace per device, by device index.
    pub(crate) traces: Vec<Vec<TraceEntry>>,
    pub(crate) settings: Option<AllocatorSettings>,
    pub(crate) annotations: Vec<Annotation>,
    pub(crate) frames: Frames,
    /// Non-default `compile_context` texts of trace entries: (device, entry index, text).
    pub(crate) compile_contexts: Vec<(u32, u32, TextId)>,
}

impl Snapshot {
    /// Every device a segment or a trace mentions, in order.
    pub(crate) fn devices(&self) -> Vec<i64> {
        let mut devices: Vec<i64> = self.segments.iter().filter_map(|s| s.device).collect();
        devices.extend(
            self.traces
                .iter()
                .enumerate()
                .filter(|(_, t)| !t.is_empty())
                .map(|(i, _)| i as i64),
        );
        devices.sort_unstable();
        devices.dedup();
        devices
    }

    /// Whether any block or trace entry carries frames: history recording was on.
    pub(crate) fn has_stacks(&self) -> bool {
        self.frames.stacks.len() > 1
    }

    /// What the snapshot says of its stacks, for titles: a snapshot with no segment and no
    /// trace event has no allocation that could have carried one.
    pub(crate) fn stacks_note(&self) -> &'static str {
        if self.has_stacks() {
            "stacks recorded"
        } else if self.segments.is_empty() && self.traces.iter().all(Vec::is_empty) {
            "empty: no segments and no trace events"
        } else {
            "no stacks: history recording was off"
        }
    }

    pub(crate) fn compile_context(&self, device: usize, index: usize) -> Option<&str> {
        let key = (device as u32, index as u32);
        self.compile_contexts
            .binary_search_by_key(&key, |&(d, i, _)| (d, i))
            .ok()
            .map(|at| self.frames.text(self.compile_contexts[at].2))
    }
}

#[cfg(test)]
pub(crate) mod tests;
