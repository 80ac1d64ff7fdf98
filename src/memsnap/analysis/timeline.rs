//! The timeline of one device's trace: memory in use after each event, reserved memory after
//! each event, the OOM and snapshot markers, and every allocation as an interval of events, so
//! that what was live at any moment (a cursor, the peak) is a scan, not a replay.
//!
//! In use counts an allocation from its `alloc` to its `free_completed` (memory that another
//! stream still uses is in use), in requested bytes as the trace records them. The trace is a
//! ring buffer's tail, so the baseline comes from the snapshot: blocks alive at the end that the
//! trace never allocated, plus allocations the trace frees without having seen them made.

use std::collections::HashMap;

use super::super::model::{Action, BlockState, Snapshot, StackId};

/// One allocation's life in event indexes: `None` start means before the trace began, `None`
/// end means still alive when the snapshot was taken.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Interval {
    pub(crate) start: Option<u32>,
    pub(crate) end: Option<u32>,
    pub(crate) size: u64,
    pub(crate) addr: u64,
    pub(crate) stack: StackId,
}

impl Interval {
    fn live_at(&self, index: usize) -> bool {
        self.start.is_none_or(|s| s as usize <= index)
            && self.end.is_none_or(|e| e as usize > index)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Timeline {
    pub(crate) device: usize,
    /// Bytes in use after each event.
    pub(crate) in_use: Vec<u64>,
    /// Bytes reserved after each event.
    pub(crate) reserved: Vec<u64>,
    /// Bytes in use before the first event.
    pub(crate) baseline: u64,
    pub(crate) intervals: Vec<Interval>,
    /// OOM and snapshot events, by index.
    pub(crate) markers: Vec<(usize, Action)>,
    pub(crate) peak: usize,
}

impl Timeline {
    pub(crate) fn new(snapshot: &Snapshot, device: usize) -> Timeline {
        let trace = &snapshot.traces[device];
        // A trace recorded with skip_actions=["free_completed"] frees at the request.
        let free_action = if trace.iter().any(|e| e.action == Action::FreeCompleted) {
            Action::FreeCompleted
        } else {
            Action::FreeRequested
        };
        let mut intervals = Vec::new();
        let mut live: HashMap<u64, usize, ahash::RandomState> = HashMap::default();
        let mut relative = Vec::with_capacity(trace.len());
        let mut running: i128 = 0;
        let mut freed_unseen: u64 = 0;
        let mut markers = Vec::new();
        for (i, entry) in trace.iter().enumerate() {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            match entry.action {
                Action::Alloc => {
                    if let Some(old) = live.insert(entry.addr, intervals.len()) {
                        // Allocated again without a free in the trace: the free was skipped.
                        intervals_end(&mut intervals, old, index, &mut running);
                    }
                    intervals.push(Interval {
                        start: Some(index),
                        end: None,
                        size: entry.size,
                        addr: entry.addr,
                        stack: entry.stack,
                    });
                    running += i128::from(entry.size);
                }
                action if action == free_action => {
                    if let Some(at) = live.remove(&entry.addr) {
                        intervals_end(&mut intervals, at, index, &mut running);
                    } else {
                        freed_unseen = freed_unseen.saturating_add(entry.size);
                        running -= i128::from(entry.size);
                        intervals.push(Interval {
                            start: None,
                            end: Some(index),
                            size: entry.size,
                            addr: entry.addr,
                            stack: StackId::EMPTY,
                        });
                    }
                }
                Action::Oom | Action::Snapshot => markers.push((i, entry.action)),
                _ => {}
            }
            relative.push(running);
        }
        let alive_before = alive_from_before(snapshot, device, &live, &mut intervals);
        let baseline = freed_unseen.saturating_add(alive_before);
        let in_use: Vec<u64> = relative
            .iter()
            .map(|&r| u64::try_from(i128::from(baseline) + r).unwrap_or(0))
            .collect();
        let peak = in_use
            .iter()
            .enumerate()
            .max_by_key(|&(i, &bytes)| (bytes, std::cmp::Reverse(i)))
            .map_or(0, |(i, _)| i);
        Timeline {
            device,
            reserved: reserved_series(snapshot, device),
            in_use,
            baseline,
            intervals,
            markers,
            peak,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.in_use.len()
    }

    pub(crate) fn peak_bytes(&self) -> u64 {
        self.in_use.get(self.peak).copied().unwrap_or(self.baseline)
    }

    /// The `n` largest allocations live after event `index`, and how many are live in all.
    pub(crate) fn largest_live(&self, index: usize, n: usize) -> (Vec<&Interval>, usize) {
        let mut live: Vec<&Interval> = self.intervals.iter().filter(|i| i.live_at(index)).collect();
        let count = live.len();
        live.sort_by_key(|i| (std::cmp::Reverse(i.size), i.start, i.addr));
        live.truncate(n);
        (live, count)
    }
}

fn intervals_end(intervals: &mut [Interval], at: usize, index: u32, running: &mut i128) {
    intervals[at].end = Some(index);
    *running -= i128::from(intervals[at].size);
}

/// Blocks in use at the snapshot that the trace never allocated: alive from before it began.
fn alive_from_before(
    snapshot: &Snapshot,
    device: usize,
    live: &HashMap<u64, usize, ahash::RandomState>,
    intervals: &mut Vec<Interval>,
) -> u64 {
    let mut bytes: u64 = 0;
    let on_device = snapshot
        .segments
        .iter()
        .filter(|s| s.device == Some(device as i64));
    for block in on_device.flat_map(|s| &s.blocks) {
        if block.state == BlockState::Inactive || live.contains_key(&block.address) {
            continue;
        }
        let size = block.requested_size.unwrap_or(block.size);
        bytes = bytes.saturating_add(size);
        intervals.push(Interval {
            start: None,
            end: None,
            size,
            addr: block.address,
            stack: block.stack,
        });
    }
    bytes
}

/// Reserved bytes after each event, worked back from the segments at the snapshot.
fn reserved_series(snapshot: &Snapshot, device: usize) -> Vec<u64> {
    let trace = &snapshot.traces[device];
    let mut reserved: i128 = snapshot
        .segments
        .iter()
        .filter(|s| s.device == Some(device as i64))
        .map(|s| i128::from(s.total_size))
        .sum();
    let mut out = vec![0; trace.len()];
    for (i, entry) in trace.iter().enumerate().rev() {
        out[i] = u64::try_from(reserved).unwrap_or(0);
        match entry.action {
            Action::SegmentAlloc | Action::SegmentMap => reserved -= i128::from(entry.size),
            Action::SegmentFree | Action::SegmentUnmap => reserved += i128::from(entry.size),
            _ => {}
        }
    }
    out
}
