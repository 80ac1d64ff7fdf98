//! The figures the history (the sparklines) is built from, frame by frame, kept so that a
//! step back in a replay rebuilds the history without making the 300 snapshots before the
//! frame shown again.
//!
//! After every move that is not one frame on, the player builds the history again from the
//! frames of the five minutes before the frame shown (301 frames at 1 s). Making a whole
//! snapshot of a frame costs about 11 ms at 16 GPUs and 500 processes, most of it in the
//! parts the history never reads (command lines, environments, cgroups); so each step back
//! took seconds. [`Figures`] are what [`History::record`] reads of a frame, read from the
//! frame's tokens with everything else skipped unbuilt (0.25 ms at that scale), and
//! [`FiguresCache`] keeps them per frame: a step back rebuilds the history from the cache.
//! The frames below the history's span are read on the way to it (from the key frame or the
//! decoder state before it), so the next steps back find theirs kept too.
//!
//! Memory: the cache keeps at most the history's span, a key-frame interval below it and
//! [`SLACK`] frames (665 frames at 1 s), and at most [`MAX_BYTES`]; at 16 GPUs and 500
//! processes a frame's figures take about 34 KB (22.5 MB for 665 frames). Past the bounds the
//! frames above the span go first (the frames stepped back from), then those farthest below
//! it, and are read again if needed: a recording taken every 0.1 s with hundreds of processes
//! (whose history spans 3,001 frames) steps back more slowly, but takes no more memory.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};

use crate::model::history::MAX_PROCESS_HISTORIES;
use crate::model::{
    DeviceAllocatorStats, GpuProcess, GpuSample, History, ProcessKind, Snapshot, TorchInfo,
};
use crate::record::writer::KEY_EVERY;

/// Frames kept beyond the history's span and the key-frame interval below it: those just
/// stepped back from.
pub(crate) const SLACK: usize = 64;
/// The most bytes of figures kept.
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// What [`History::record`] reads of one frame: its GPUs, and a few figures of each process
/// row. Only these are built from the frame's tokens; the rest of the snapshot is skipped.
#[derive(Debug, Deserialize)]
pub(crate) struct Figures {
    #[serde(default)]
    gpus: Vec<GpuSample>,
    #[serde(default)]
    processes: Vec<Row>,
}

/// The figures of one process row that the history reads.
#[derive(Debug, Deserialize)]
struct Row {
    pid: u32,
    /// The GPU of the row, to check its memory against; `None` for a row without one.
    #[serde(default)]
    gpu: Option<u32>,
    #[serde(default)]
    start_ticks: Option<u64>,
    #[serde(default)]
    gpu_memory_bytes: Option<u64>,
    #[serde(default)]
    sm_percent: Option<u32>,
    #[serde(default)]
    cpu_percent: Option<f64>,
    #[serde(default)]
    rss_bytes: Option<u64>,
    /// The agent's allocator figures per device, and nothing else of what it said.
    #[serde(default, deserialize_with = "devices_only")]
    torch: Option<Arc<TorchInfo>>,
}

/// An agent's `devices`, each with only the figures the history keeps.
fn devices_only<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Arc<TorchInfo>>, D::Error> {
    #[derive(Deserialize)]
    struct Torch {
        #[serde(default)]
        devices: Vec<Device>,
    }
    #[derive(Deserialize)]
    struct Device {
        index: u32,
        #[serde(default)]
        allocated_bytes: Option<u64>,
        #[serde(default)]
        reserved_bytes: Option<u64>,
    }
    let torch = Option::<Torch>::deserialize(d)?;
    Ok(torch.map(|torch| {
        let devices = torch
            .devices
            .into_iter()
            .map(|d| DeviceAllocatorStats {
                index: d.index,
                allocated_bytes: d.allocated_bytes,
                reserved_bytes: d.reserved_bytes,
                ..Default::default()
            })
            .collect();
        Arc::new(TorchInfo {
            devices,
            ..Default::default()
        })
    }))
}

impl Figures {
    /// Drops what the history would not read: past its first [`MAX_PROCESS_HISTORIES`] pids,
    /// it reads a row only for the agent's allocator figures.
    pub(crate) fn trim(&mut self) {
        // The history's figures pass the checks the frame's snapshot passes
        // ([`crate::model::Snapshot::drop_implausible`]): a crafted 1e308 W would else
        // scale the power plot of a replay while the panel said N/A.
        for gpu in &mut self.gpus {
            gpu.drop_implausible();
        }
        let gpus = &self.gpus;
        for row in &mut self.processes {
            row.cpu_percent = crate::record::reader::plausible::process_cpu(row.cpu_percent);
            let gpu = gpus.iter().find(|g| Some(g.index) == row.gpu);
            if let (Some(gpu), Some(bytes)) = (gpu, row.gpu_memory_bytes) {
                if !gpu.plausible_process_memory(bytes) {
                    row.gpu_memory_bytes = None;
                }
            }
        }
        let mut pids: Vec<u32> = self.processes.iter().map(|r| r.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        if let Some(&last) = pids.get(MAX_PROCESS_HISTORIES - 1) {
            self.processes
                .retain(|row| row.pid <= last || row.torch.is_some());
        }
        self.gpus.shrink_to_fit();
        self.processes.shrink_to_fit();
    }

    /// About how many bytes these figures take.
    pub(crate) fn bytes(&self) -> usize {
        // A GPU's name, UUID and bus id, and an agent's allocation: about this much each.
        const TEXT: usize = 64;
        let torch: usize = self
            .processes
            .iter()
            .filter_map(|row| row.torch.as_ref())
            .map(|torch| {
                std::mem::size_of::<TorchInfo>()
                    + TEXT
                    + torch.devices.len() * std::mem::size_of::<DeviceAllocatorStats>()
            })
            .sum();
        std::mem::size_of::<Figures>()
            + self.gpus.len() * (std::mem::size_of::<GpuSample>() + 3 * TEXT)
            + self.processes.len() * std::mem::size_of::<Row>()
            + torch
    }

    /// Records these figures into `history` as the snapshot they were read from would be.
    /// `scratch` is a snapshot kept by the caller, so that its rows are not allocated again
    /// for every frame; it holds only these figures afterwards.
    pub(crate) fn record(&self, history: &mut History, scratch: &mut Snapshot) {
        scratch.gpus.clone_from(&self.gpus);
        scratch.processes.resize_with(self.processes.len(), || {
            GpuProcess::new(0, 0, ProcessKind::Compute)
        });
        for (row, process) in self.processes.iter().zip(scratch.processes.iter_mut()) {
            process.pid = row.pid;
            process.start_ticks = row.start_ticks;
            process.gpu_memory_bytes = row.gpu_memory_bytes;
            process.sm_percent = row.sm_percent;
            process.cpu_percent = row.cpu_percent;
            process.rss_bytes = row.rss_bytes;
            process.torch.clone_from(&row.torch);
        }
        history.record(scratch);
    }
}

/// The figures of recent frames, by frame index; `None` for a frame that could not be read,
/// which the history skips.
pub(crate) struct FiguresCache {
    frames: BTreeMap<usize, Option<Arc<Figures>>>,
    bytes: usize,
    /// The history's span, a key-frame interval and [`SLACK`].
    most: usize,
}

impl FiguresCache {
    /// A cache for a history of `capacity` samples.
    pub(crate) fn new(capacity: usize) -> Self {
        FiguresCache {
            frames: BTreeMap::new(),
            bytes: 0,
            most: capacity + KEY_EVERY as usize + SLACK,
        }
    }

    /// The figures of frame `i`: `None` when not kept, `Some(None)` when it could not be read.
    pub(crate) fn get(&self, i: usize) -> Option<Option<Arc<Figures>>> {
        self.frames.get(&i).cloned()
    }

    pub(crate) fn contains(&self, i: usize) -> bool {
        self.frames.contains_key(&i)
    }

    /// Keeps the figures of frame `i`; past the bounds, drops the frames above `span` (the
    /// frames the history being built needs) first, the highest first, then those farthest
    /// below it.
    pub(crate) fn insert(&mut self, i: usize, figures: Option<Arc<Figures>>, span: &Range<usize>) {
        self.bytes += figures.as_ref().map_or(0, |f| f.bytes());
        if let Some(Some(old)) = self.frames.insert(i, figures) {
            self.bytes -= old.bytes();
        }
        while self.frames.len() > 1 && (self.frames.len() > self.most || self.bytes > MAX_BYTES) {
            let above = self.frames.range(span.end..).next_back().map(|(&at, _)| at);
            let lowest = self.frames.first_key_value().map(|(&at, _)| at);
            let Some(drop) = above.or(lowest) else {
                break;
            };
            if let Some(Some(old)) = self.frames.remove(&drop) {
                self.bytes -= old.bytes();
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }

    #[cfg(test)]
    pub(crate) fn bytes_kept(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
#[path = "figures_tests.rs"]
pub(crate) mod tests;
