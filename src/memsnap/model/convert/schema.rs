//! The snapshot's schema level by level: segments and their blocks, device traces, frames,
//! allocator settings and annotations.

use super::{
    Action, AllocatorSettings, Annotation, Block, BlockState, Converter, Data, Dict, Frame,
    FrameId, Segment, SegmentType, StackId, TextId, TraceEntry, Value, NOT_CACHED,
};

/// `_memory_viz`'s `_frame_filter`: unwinder, interpreter and start-up frames.
const NOISE_NAMES: [&str; 8] = [
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];
const NOISE_FILES: [&str; 10] = [
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// Files a native frame's symbolizer names: C and C++ sources and headers, CUDA, assembly,
/// shared objects.
const NATIVE_SUFFIXES: [&str; 18] = [
    ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".h++", ".cu", ".cuh",
    ".inl", ".ipp", ".tcc", ".S", ".s", ".so",
];

/// Whether a frame is Python's (or TorchScript's, or FX-generated code's) rather than C++'s.
/// Torch's frames carry only a file, a line and a name, so this is read from them: a
/// console-script entry point (`/opt/venv/bin/tune`) or a script without an extension is
/// Python too. Native frames name a C-family source, a shared object, `??` or nothing as
/// their file; C++ standard headers have no extension, but their names are qualified
/// (`std::…`), where a Python name is an identifier or `<module>`-like.
pub(crate) fn is_python(filename: &str, name: &str) -> bool {
    if filename.starts_with('<') || filename.ends_with(".py") {
        return true;
    }
    let native_file = filename.is_empty()
        || filename == "??"
        || filename.contains(".so.")
        || NATIVE_SUFFIXES.iter().any(|s| filename.ends_with(s));
    let python_name = (name.starts_with('<') && name.ends_with('>'))
        || (!name.is_empty() && name.chars().all(|c| c == '_' || c.is_alphanumeric()));
    !native_file && python_name
}

impl Converter<'_> {
    pub(super) fn segments(&mut self, value: Option<Value>) -> Result<Vec<Segment>, String> {
        let Some(value) = value else {
            return Ok(Vec::new());
        };
        let items = self.list(value, "'segments'")?;
        self.spend(items.len())?;
        let mut out = Vec::with_capacity(items.len());
        for (index, &segment) in items.iter().enumerate() {
            out.push(self.segment(index, segment)?);
        }
        Ok(out)
    }

    fn segment(&mut self, index: usize, value: Value) -> Result<Segment, String> {
        let what = || format!("segment {index}");
        let d = self.dict(value, &what)?;
        let k = &self.keys;
        let (k_address, k_total, k_blocks, k_frames) =
            (k.address, k.total_size, k.blocks, k.frames);
        let address = self.address(d, k_address).ok_or_else(|| {
            format!("is not a PyTorch memory snapshot: segment {index} has no 'address'")
        })?;
        let total_size = self.size(d, (k_total, "total_size"), &what)?;
        let blocks = d.get(k_blocks).ok_or_else(|| {
            format!("is not a PyTorch memory snapshot: segment {index} has no 'blocks'")
        })?;
        let k = &self.keys;
        let pool_id = match d.get(k.segment_pool_id).map(|v| self.pickle.get(v)) {
            Some(Data::Tuple([a, b]) | Data::List([a, b])) => self
                .int(Some(*a))
                .zip(self.int(Some(*b)))
                .and_then(|(a, b)| Some((i64::try_from(a).ok()?, i64::try_from(b).ok()?))),
            _ => None,
        };
        Ok(Segment {
            device: self.opt_i64(d, k.device),
            address,
            total_size,
            allocated_size: self.opt_size(d, k.allocated_size),
            active_size: self.opt_size(d, k.active_size),
            requested_size: self.opt_size(d, k.requested_size),
            stream: self.opt_i64(d, k.stream),
            segment_type: match self.str(d.get(k.segment_type)) {
                Some("large") => Some(SegmentType::Large),
                Some("small") => Some(SegmentType::Small),
                _ => None,
            },
            pool_id,
            expandable: match self
                .pickle
                .get(d.get(k.is_expandable).unwrap_or(Value::NONE))
            {
                Data::Bool(b) => Some(b),
                _ => None,
            },
            stack: self.stack(d.get(k_frames))?,
            blocks: self.blocks(index, address, blocks)?,
        })
    }

    fn blocks(&mut self, segment: usize, start: u64, value: Value) -> Result<Vec<Block>, String> {
        let items = self.list(value, &format!("segment {segment}'s 'blocks'"))?;
        self.spend(items.len())?;
        let mut out = Vec::with_capacity(items.len());
        // Blocks are contiguous: torch 2.0 gave no addresses, torch derives them the same way.
        let mut address = start;
        for (index, &block) in items.iter().enumerate() {
            let what = || format!("segment {segment}, block {index}");
            let d = self.dict(block, &what)?;
            let k = &self.keys;
            let (k_size, k_state, k_address) = (k.size, k.state, k.address);
            let size = self.size(d, (k_size, "size"), &what)?;
            let state = match self.str(d.get(k_state)) {
                Some("active_allocated") => BlockState::ActiveAllocated,
                // The docs' name for it; torch writes active_pending_free.
                Some("active_pending_free" | "active_awaiting_free") => {
                    BlockState::ActivePendingFree
                }
                Some("inactive") => BlockState::Inactive,
                _ => {
                    return Err(format!(
                        "is not a PyTorch memory snapshot: {}'s 'state' is {}, not \
                         active_allocated, active_pending_free or inactive",
                        what(),
                        d.get(k_state)
                            .map_or("missing".to_string(), |v| self.pickle.describe(v))
                    ))
                }
            };
            let (requested_size, stack) = self.block_extra(d)?;
            address = self.address(d, k_address).unwrap_or(address);
            out.push(Block {
                address,
                size,
                requested_size,
                state,
                stack,
            });
            address = address.wrapping_add(size);
        }
        Ok(out)
    }

    /// The requested size and stack: `requested_size` and `frames`, or torch 2.0's first
    /// `history` entry's `real_size` and `frames`.
    fn block_extra(&mut self, d: Dict) -> Result<(Option<u64>, StackId), String> {
        let k = &self.keys;
        let (k_frames, k_requested, k_history, k_real) =
            (k.frames, k.requested_size, k.history, k.real_size);
        if d.get(k_frames).is_some() || d.get(k_history).is_none() {
            return Ok((self.opt_size(d, k_requested), self.stack(d.get(k_frames))?));
        }
        let first = match d.get(k_history).map(|h| self.pickle.get(h)) {
            Some(Data::List([first, ..])) => *first,
            _ => return Ok((None, StackId::EMPTY)),
        };
        match self.pickle.get(first) {
            Data::Dict(items) => {
                let h = Dict(items);
                Ok((self.opt_size(h, k_real), self.stack(h.get(k_frames))?))
            }
            _ => Ok((None, StackId::EMPTY)),
        }
    }

    pub(super) fn traces(
        &mut self,
        value: Option<Value>,
        contexts: &mut Vec<(u32, u32, TextId)>,
    ) -> Result<Vec<Vec<TraceEntry>>, String> {
        let Some(value) = value else {
            return Ok(Vec::new());
        };
        let devices = self.list(value, "'device_traces'")?;
        self.spend(devices.len())?;
        let mut out = Vec::with_capacity(devices.len());
        for (device, &trace) in devices.iter().enumerate() {
            let items = self.list(trace, &format!("device {device}'s trace"))?;
            self.spend(items.len())?;
            let mut entries = Vec::with_capacity(items.len());
            for (index, &entry) in items.iter().enumerate() {
                let (entry, context) = self.trace_entry(device, index, entry)?;
                if let Some(text) = context {
                    contexts.push((device as u32, index as u32, text));
                }
                entries.push(entry);
            }
            out.push(entries);
        }
        Ok(out)
    }

    fn trace_entry(
        &mut self,
        device: usize,
        index: usize,
        value: Value,
    ) -> Result<(TraceEntry, Option<TextId>), String> {
        let what = || format!("device {device}'s trace entry {index}");
        let d = self.dict(value, &what)?;
        let k = &self.keys;
        let (k_action, k_size, k_frames, k_context) =
            (k.action, k.size, k.frames, k.compile_context);
        let action = match self.str(d.get(k_action)) {
            Some(name) => Action::from_name(name),
            None => {
                return Err(format!(
                    "is not a PyTorch memory snapshot: {} has no 'action'",
                    what()
                ))
            }
        };
        let (addr_key, addr_name) = match action {
            Action::Oom => (self.keys.device_free, "device_free"),
            _ => (self.keys.addr, "addr"),
        };
        let addr = match (self.address(d, addr_key), action) {
            (Some(addr), _) => addr,
            // Markers carry no address worth the name.
            (None, Action::Snapshot | Action::Other) => 0,
            (None, _) => {
                return Err(format!(
                    "is not a PyTorch memory snapshot: {} ({}) has no '{addr_name}'",
                    what(),
                    action.name()
                ))
            }
        };
        let size = self.size(d, (k_size, "size"), &what)?;
        let context = match self.str(d.get(k_context)) {
            Some(text) if !text.is_empty() && text != "N/A" => Some(self.text(text)),
            _ => None,
        };
        let entry = TraceEntry {
            action,
            addr,
            size,
            stream: self.opt_i64(d, self.keys.stream),
            time_us: self.opt_i64(d, self.keys.time_us),
            stack: self.stack(d.get(k_frames))?,
        };
        Ok((entry, context))
    }

    /// A frame list, interned: the same list object, or the same frames, give the same id.
    pub(super) fn stack(&mut self, value: Option<Value>) -> Result<StackId, String> {
        let Some(value) = value else {
            return Ok(StackId::EMPTY);
        };
        let items = match self.pickle.get(value) {
            Data::None => return Ok(StackId::EMPTY),
            Data::List(items) | Data::Tuple(items) => items,
            _ => {
                return Err(format!(
                "is not a PyTorch memory snapshot: a 'frames' value is {}, not a list of frames",
                self.pickle.describe(value)
            ))
            }
        };
        // Lists only: a dict node's cache entry is a frame id.
        if let Some(node) = value.node() {
            let cached = self.node_cache[node as usize];
            if cached != NOT_CACHED {
                return Ok(StackId(cached));
            }
        }
        self.spend(items.len())?;
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        for &frame in items {
            match self.frame(frame) {
                Ok(id) => ids.push(id),
                Err(error) => {
                    self.scratch = ids;
                    return Err(error);
                }
            }
        }
        let id = if let Some(&id) = self.stack_ids.get(ids.as_slice()) {
            id
        } else {
            let id = StackId(self.frames.stacks.len() as u32);
            self.frames.stacks.push(ids.as_slice().into());
            self.stack_ids.insert(ids.as_slice().into(), id);
            id
        };
        self.scratch = ids;
        if let Some(node) = value.node() {
            self.node_cache[node as usize] = id.0;
        }
        Ok(id)
    }

    fn frame(&mut self, value: Value) -> Result<FrameId, String> {
        let d = self.dict(value, &|| "a frame".to_string())?;
        // Dicts only: a list node's cache entry is a stack id.
        let node = value.node();
        if let Some(node) = node {
            let cached = self.node_cache[node as usize];
            if cached != NOT_CACHED {
                return Ok(cached);
            }
        }
        let k = &self.keys;
        let (k_file, k_name, k_line) = (k.filename, k.name, k.line);
        let filename = self.str(d.get(k_file)).unwrap_or("");
        let name = self.str(d.get(k_name)).unwrap_or("??");
        let line = self.opt_i64(d, k_line);
        let (file_id, name_id) = (self.text(filename), self.text(name));
        let id = if let Some(&id) = self.frame_ids.get(&(file_id, line, name_id)) {
            id
        } else {
            let id = self.frames.frames.len() as FrameId;
            self.frames.frames.push(Frame {
                filename: file_id,
                name: name_id,
                line,
                python: is_python(filename, name),
                noise: NOISE_NAMES.iter().any(|n| name.contains(n))
                    || NOISE_FILES.iter().any(|f| filename.contains(f)),
            });
            self.frame_ids.insert((file_id, line, name_id), id);
            id
        };
        if let Some(node) = node {
            self.node_cache[node as usize] = id;
        }
        Ok(id)
    }

    pub(super) fn settings(
        &mut self,
        value: Option<Value>,
    ) -> Result<Option<AllocatorSettings>, String> {
        let Some(value) = value else {
            return Ok(None);
        };
        let d = self.dict(value, &|| "'allocator_settings'".to_string())?;
        self.spend(d.0.len())?;
        let entries =
            d.0.chunks_exact(2)
                .map(|pair| (self.repr(pair[0], 0), self.repr(pair[1], 0)))
                .collect();
        let conf_key = self.pickle.str_value("PYTORCH_CUDA_ALLOC_CONF");
        Ok(Some(AllocatorSettings {
            entries,
            expandable_segments: match self
                .pickle
                .get(d.get(self.keys.expandable_segments).unwrap_or(Value::NONE))
            {
                Data::Bool(b) => Some(b),
                _ => None,
            },
            conf: self.str(d.get(conf_key)).map(str::to_string),
        }))
    }

    pub(super) fn annotations(&mut self, value: Option<Value>) -> Result<Vec<Annotation>, String> {
        let Some(value) = value else {
            return Ok(Vec::new());
        };
        let items = self.list(value, "'external_annotations'")?;
        self.spend(items.len())?;
        let mut out = Vec::with_capacity(items.len());
        for (index, &item) in items.iter().enumerate() {
            let d = self.dict(item, &|| format!("annotation {index}"))?;
            let k = &self.keys;
            out.push(Annotation {
                device: self.opt_i64(d, k.device),
                time_us: self.opt_i64(d, k.time_us),
                stage: self.str(d.get(k.stage)).map(str::to_string),
                name: self.str(d.get(k.name)).map(str::to_string),
            });
        }
        Ok(out)
    }

    /// A setting's value as Python would print it, cut short: at most two levels, 16 items,
    /// 200 characters.
    fn repr(&self, value: Value, depth: u8) -> String {
        let items = |items: &[Value], step: usize, open: &str, close: &str| {
            if depth >= 2 {
                return format!("{open}…{close}");
            }
            let parts: Vec<String> = items
                .chunks(step)
                .take(16)
                .map(|c| {
                    c.iter()
                        .map(|&v| self.repr(v, depth + 1))
                        .collect::<Vec<_>>()
                        .join(": ")
                })
                .collect();
            let more = if items.len() / step > 16 { ", …" } else { "" };
            format!("{open}{}{more}{close}", parts.join(", "))
        };
        let text = match self.pickle.get(value) {
            Data::None => "None".to_string(),
            Data::Bool(b) => if b { "True" } else { "False" }.to_string(),
            Data::Int(i) => i.to_string(),
            Data::Float(f) => format!("{f:?}"),
            Data::Str(s) if depth == 0 => s.to_string(),
            Data::Str(s) => format!("'{s}'"),
            Data::Dict(d) => items(d, 2, "{", "}"),
            Data::List(l) | Data::Set(l) => items(l, 1, "[", "]"),
            Data::Tuple(t) => items(t, 1, "(", ")"),
            _ => self.pickle.describe(value),
        };
        if text.chars().count() > 200 {
            text.chars().take(199).chain(std::iter::once('…')).collect()
        } else {
            text
        }
    }
}
