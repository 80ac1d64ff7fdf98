//! From an unpickled file to a typed [`Snapshot`], following torch's schema key by key.
//!
//! The walk is schema-directed (snapshot, segments, blocks, frames, frame), so it never recurses
//! deeper than that whatever the pickle holds. Shared values are converted once (each frame and
//! frame list is cached by its pickle node), and the total work is capped relative to the
//! input's size, so a pickle that lists one segment of a thousand blocks a hundred thousand
//! times is refused instead of becoming a hundred million blocks.

use std::collections::HashMap;

use ahash::RandomState;

use super::{
    Action, AllocatorSettings, Annotation, Block, BlockState, Frame, FrameId, Frames, Segment,
    SegmentType, Snapshot, StackId, TextId, TraceEntry,
};
use crate::memsnap::pickle::{Data, Pickle, Value};

/// Items converted (segments, blocks, trace entries, frames listed) per byte of input, plus a
/// floor. A block or trace entry takes at least 20 bytes in a real pickle.
const WORK_PER_BYTE: u64 = 1;
const WORK_FLOOR: u64 = 4096;
const NOT_CACHED: u32 = u32::MAX;

/// Converts a pickle that holds a memory snapshot; the error completes a sentence about the file.
pub(crate) fn from_pickle(pickle: &Pickle) -> Result<Snapshot, String> {
    let mut c = Converter::new(pickle);
    let root = pickle.root();
    let (segments, traces, settings, annotations) = match pickle.get(root) {
        // `torch.cuda.memory_snapshot()` returns the bare segment list; _memory_viz reads it too.
        Data::List(_) => (Some(root), None, None, None),
        Data::Dict(items) => {
            let top = Dict(items);
            let Some(segments) = top.get(c.keys.segments) else {
                return Err(format!(
                    "is not a PyTorch memory snapshot: its dict has no 'segments' (it has {})",
                    c.key_names(items)
                ));
            };
            (
                Some(segments),
                top.get(c.keys.device_traces),
                top.get(c.keys.allocator_settings),
                top.get(c.keys.external_annotations),
            )
        }
        _ => {
            return Err(format!(
                "is not a PyTorch memory snapshot: it holds {}, where a snapshot holds a dict \
                 with 'segments' and 'device_traces'",
                pickle.describe(root)
            ))
        }
    };
    let mut snapshot = Snapshot {
        segments: c.segments(segments)?,
        ..Snapshot::default()
    };
    snapshot.traces = c.traces(traces, &mut snapshot.compile_contexts)?;
    snapshot.settings = c.settings(settings)?;
    snapshot.annotations = c.annotations(annotations)?;
    snapshot.frames = c.frames;
    Ok(snapshot)
}

/// A dict's items (keys and values alternating), searched by key handle.
#[derive(Clone, Copy)]
struct Dict<'p>(&'p [Value]);

impl Dict<'_> {
    fn get(self, key: Option<Value>) -> Option<Value> {
        let key = key?;
        self.0
            .chunks_exact(2)
            .rev()
            .find(|pair| pair[0] == key)
            .map(|pair| pair[1])
    }
}

macro_rules! keys {
    ($($name:ident),* $(,)?) => {
        /// The handles of the key strings, found once: a key lookup compares handles.
        struct Keys { $($name: Option<Value>,)* }
        impl Keys {
            fn new(pickle: &Pickle) -> Keys {
                Keys { $($name: pickle.str_value(stringify!($name)),)* }
            }
        }
    };
}

keys!(
    segments,
    device_traces,
    allocator_settings,
    external_annotations,
    device,
    address,
    total_size,
    allocated_size,
    active_size,
    requested_size,
    stream,
    segment_type,
    segment_pool_id,
    is_expandable,
    frames,
    blocks,
    size,
    state,
    history,
    real_size,
    addr,
    action,
    time_us,
    device_free,
    filename,
    line,
    name,
    stage,
    compile_context,
    expandable_segments,
);

struct Converter<'p> {
    pickle: &'p Pickle,
    keys: Keys,
    frames: Frames,
    /// Per pickle node: the FrameId of a frame dict or the StackId of a frame list.
    node_cache: Vec<u32>,
    text_ids: HashMap<Box<str>, TextId, RandomState>,
    frame_ids: HashMap<(TextId, Option<i64>, TextId), FrameId, RandomState>,
    stack_ids: HashMap<Box<[FrameId]>, StackId, RandomState>,
    work_left: u64,
    scratch: Vec<FrameId>,
}

impl<'p> Converter<'p> {
    fn new(pickle: &'p Pickle) -> Self {
        let mut c = Converter {
            pickle,
            keys: Keys::new(pickle),
            frames: Frames::default(),
            node_cache: vec![NOT_CACHED; pickle.node_count()],
            text_ids: HashMap::default(),
            frame_ids: HashMap::default(),
            stack_ids: HashMap::default(),
            work_left: WORK_FLOOR + WORK_PER_BYTE * pickle.input_len(),
            scratch: Vec::new(),
        };
        c.frames.stacks.push(Box::new([]));
        c.stack_ids.insert(Box::new([]), StackId::EMPTY);
        c
    }

    fn spend(&mut self, items: usize) -> Result<(), String> {
        let items = items as u64;
        if items > self.work_left {
            return Err(format!(
                "refers to its shared values far more often than its {} bytes allow (a memo \
                 bomb): the file is corrupt or crafted",
                self.pickle.input_len()
            ));
        }
        self.work_left -= items;
        Ok(())
    }

    fn key_names(&self, items: &[Value]) -> String {
        let names: Vec<String> = items
            .chunks_exact(2)
            .take(8)
            .map(|pair| match self.pickle.get(pair[0]) {
                Data::Str(s) => format!("'{}'", s.chars().take(40).collect::<String>()),
                _ => self.pickle.describe(pair[0]),
            })
            .collect();
        if names.is_empty() {
            "no keys".to_string()
        } else {
            names.join(", ")
        }
    }

    fn list(&self, value: Value, what: &str) -> Result<&'p [Value], String> {
        match self.pickle.get(value) {
            Data::List(items) | Data::Tuple(items) => Ok(items),
            _ => Err(format!(
                "is not a PyTorch memory snapshot: {what} is {}, not a list",
                self.pickle.describe(value)
            )),
        }
    }

    fn dict(&self, value: Value, what: &dyn Fn() -> String) -> Result<Dict<'p>, String> {
        match self.pickle.get(value) {
            Data::Dict(items) => Ok(Dict(items)),
            _ => Err(format!(
                "is not a PyTorch memory snapshot: {} is {}, not a dict",
                what(),
                self.pickle.describe(value)
            )),
        }
    }

    fn int(&self, value: Option<Value>) -> Option<i128> {
        match self.pickle.get(value?) {
            Data::Int(i) => Some(i),
            Data::Bool(b) => Some(i128::from(b)),
            _ => None,
        }
    }

    /// A required byte count.
    fn size(
        &self,
        dict: Dict,
        (key, name): (Option<Value>, &str),
        what: &dyn Fn() -> String,
    ) -> Result<u64, String> {
        let Some(value) = dict.get(key) else {
            return Err(format!(
                "is not a PyTorch memory snapshot: {} has no '{name}'",
                what()
            ));
        };
        match self.int(Some(value)).map(u64::try_from) {
            Some(Ok(bytes)) => Ok(bytes),
            _ => Err(format!(
                "is not a PyTorch memory snapshot: {}'s '{name}' is {}, not a number of bytes",
                what(),
                self.pickle.describe(value)
            )),
        }
    }

    fn opt_size(&self, dict: Dict, key: Option<Value>) -> Option<u64> {
        self.int(dict.get(key)).and_then(|i| u64::try_from(i).ok())
    }

    fn opt_i64(&self, dict: Dict, key: Option<Value>) -> Option<i64> {
        self.int(dict.get(key)).and_then(|i| i64::try_from(i).ok())
    }

    /// An address: torch's C++ writer stores addresses as int64, so negative ones wrap.
    fn address(&self, dict: Dict, key: Option<Value>) -> Option<u64> {
        self.int(dict.get(key)).and_then(|i| {
            u64::try_from(i)
                .ok()
                .or_else(|| i64::try_from(i).ok().map(|s| s as u64))
        })
    }

    fn str(&self, value: Option<Value>) -> Option<&'p str> {
        match self.pickle.get(value?) {
            Data::Str(s) => Some(s),
            _ => None,
        }
    }

    fn text(&mut self, text: &str) -> TextId {
        if let Some(&id) = self.text_ids.get(text) {
            return id;
        }
        let id = self.frames.texts.len() as TextId;
        self.frames.texts.push(text.into());
        self.text_ids.insert(text.into(), id);
        id
    }
}

mod schema;

#[cfg(test)]
pub(super) use schema::is_python;
