//! What a snapshot says, computed once when it is opened: a summary per device (reserved,
//! allocated, fragmentation, the OOM), the totals `_memory_viz stats` prints, and a timeline
//! per traced device. The tree of who holds the memory ([`tree`]) is built on demand, for a
//! device and name filter, and [`compare`] diffs two snapshots by stack.

pub(crate) mod compare;
pub(crate) mod paths;
pub(crate) mod timeline;
pub(crate) mod tree;

use super::model::{Action, BlockState, SegmentType, Snapshot, StackId};
use timeline::Timeline;

/// One device's allocator state at the moment of the snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DeviceSummary {
    pub(crate) device: Option<i64>,
    pub(crate) segments: usize,
    pub(crate) large_segments: usize,
    pub(crate) small_segments: usize,
    pub(crate) expandable_segments: usize,
    /// Bytes in segments: `memory_reserved()`.
    pub(crate) reserved: u64,
    /// Bytes of blocks held by tensors: `memory_allocated()`.
    pub(crate) allocated: u64,
    /// What the program asked for in those blocks (the block size where torch gave none).
    pub(crate) requested: u64,
    /// Allocated plus blocks waiting on another stream before they are free.
    pub(crate) active: u64,
    /// Free blocks inside segments that are split: memory that `empty_cache()` cannot return.
    pub(crate) inactive_split: u64,
    pub(crate) largest_free_block: Option<u64>,
    pub(crate) allocated_blocks: usize,
    pub(crate) oom: Option<OomEvent>,
    pub(crate) trace_entries: usize,
}

impl DeviceSummary {
    /// inactive-split / reserved, in percent; N/A with nothing reserved.
    pub(crate) fn fragmentation_percent(&self) -> Option<f64> {
        (self.reserved > 0).then(|| 100.0 * self.inactive_split as f64 / self.reserved as f64)
    }

    pub(crate) fn label(&self) -> String {
        device_label(self.device)
    }
}

pub(crate) fn device_label(device: Option<i64>) -> String {
    device.map_or_else(|| "cuda:?".to_string(), |d| format!("cuda:{d}"))
}

/// The last out-of-memory event of a device's trace.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct OomEvent {
    pub(crate) index: usize,
    /// The (rounded) request that failed.
    pub(crate) requested: u64,
    /// What CUDA reported free at that moment.
    pub(crate) device_free: u64,
    pub(crate) time_us: Option<i64>,
    pub(crate) stack: StackId,
    /// OOM events in the trace, this one included.
    pub(crate) count: usize,
}

/// The figures `_memory_viz stats` prints, over every segment of every device: its
/// `total_allocated` is the requested bytes of allocated blocks, and the rounding up to the
/// block size counts as internal free memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Totals {
    pub(crate) segments: usize,
    pub(crate) reserved: u64,
    pub(crate) allocated: u64,
    pub(crate) requested: u64,
    pub(crate) free_external: u64,
    pub(crate) free_internal: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Analysis {
    pub(crate) devices: Vec<DeviceSummary>,
    pub(crate) totals: Totals,
    pub(crate) timelines: Vec<Timeline>,
}

impl Analysis {
    pub(crate) fn new(snapshot: &Snapshot) -> Analysis {
        let devices: Vec<DeviceSummary> = snapshot
            .devices()
            .into_iter()
            .map(Some)
            .chain(
                snapshot
                    .segments
                    .iter()
                    .any(|s| s.device.is_none())
                    .then_some(None),
            )
            .map(|device| summarize(snapshot, device))
            .collect();
        let timelines = snapshot
            .traces
            .iter()
            .enumerate()
            .filter(|(_, trace)| !trace.is_empty())
            .map(|(device, _)| Timeline::new(snapshot, device))
            .collect();
        Analysis {
            totals: totals(snapshot),
            devices,
            timelines,
        }
    }

    pub(crate) fn timeline(&self, device: i64) -> Option<&Timeline> {
        self.timelines.iter().find(|t| t.device as i64 == device)
    }
}

fn summarize(snapshot: &Snapshot, device: Option<i64>) -> DeviceSummary {
    let mut s = DeviceSummary {
        device,
        ..DeviceSummary::default()
    };
    for segment in snapshot.segments.iter().filter(|seg| seg.device == device) {
        s.segments += 1;
        s.reserved = s.reserved.saturating_add(segment.total_size);
        match segment.segment_type {
            Some(SegmentType::Large) => s.large_segments += 1,
            Some(SegmentType::Small) => s.small_segments += 1,
            None => {}
        }
        s.expandable_segments += usize::from(segment.expandable == Some(true));
        let split = segment.blocks.len() > 1;
        for block in &segment.blocks {
            match block.state {
                BlockState::ActiveAllocated => {
                    s.allocated = s.allocated.saturating_add(block.size);
                    s.requested = s
                        .requested
                        .saturating_add(block.requested_size.unwrap_or(block.size));
                    s.active = s.active.saturating_add(block.size);
                    s.allocated_blocks += 1;
                }
                BlockState::ActivePendingFree => s.active = s.active.saturating_add(block.size),
                BlockState::Inactive => {
                    if split {
                        s.inactive_split = s.inactive_split.saturating_add(block.size);
                    }
                    s.largest_free_block = s.largest_free_block.max(Some(block.size));
                }
            }
        }
    }
    if let Some(trace) = device
        .and_then(|d| usize::try_from(d).ok())
        .and_then(|d| snapshot.traces.get(d))
    {
        s.trace_entries = trace.len();
        let ooms: Vec<(usize, _)> = trace
            .iter()
            .enumerate()
            .filter(|(_, e)| e.action == Action::Oom)
            .collect();
        s.oom = ooms.last().map(|&(index, entry)| OomEvent {
            index,
            requested: entry.size,
            device_free: entry.addr,
            time_us: entry.time_us,
            stack: entry.stack,
            count: ooms.len(),
        });
    }
    s
}

fn totals(snapshot: &Snapshot) -> Totals {
    let mut t = Totals {
        segments: snapshot.segments.len(),
        ..Totals::default()
    };
    for segment in &snapshot.segments {
        t.reserved = t.reserved.saturating_add(segment.total_size);
        for block in &segment.blocks {
            if block.state == BlockState::ActiveAllocated {
                let requested = block.requested_size.unwrap_or(block.size);
                t.allocated = t.allocated.saturating_add(block.size);
                t.requested = t.requested.saturating_add(requested);
                t.free_internal = t
                    .free_internal
                    .saturating_add(block.size.saturating_sub(requested));
            } else {
                t.free_external = t.free_external.saturating_add(block.size);
            }
        }
    }
    t
}

#[cfg(test)]
mod tests;
