//! The non-interactive outputs of `torchtop snapshot`: a text summary, JSON (the summary and
//! the top stacks), folded stacks weighted in bytes, an SVG flame graph (inferno), and the
//! comparison of two snapshots as text or JSON.

use std::io::{self, Write};

use serde_json::{json, Value as Json};

use super::analysis::compare::StackDiff;
use super::analysis::paths::{self, Step};
use super::analysis::tree::{Tree, TreeOptions};
use super::analysis::{device_label, DeviceSummary, OomEvent};
use super::model::{Frames, StackId};
use super::LoadedSnapshot;
use crate::format::bytes;

/// Stacks listed by `--json` and the text summary.
const TOP_STACKS: usize = 20;
const TEXT_STACKS: usize = 10;
/// Frames shown for a stack on one line, innermost last.
const SHORT_FRAMES: usize = 4;
/// The most live bytes a flame graph is drawn for: 4 EiB, far above any device's memory.
/// inferno adds the stacks' counts in `usize` and wraps (or panics) past it; this leaves room.
const MAX_FLAME_BYTES: u64 = 1 << 62;

/// One line of the top stacks: device then frames (outermost first), live bytes, blocks, and
/// one stack that reads as the line.
pub(crate) type TopStack = (Vec<String>, u64, u64, StackId);

/// The live allocations by full stack (frames in the snapshot's order), largest first.
pub(crate) fn top_stacks(loaded: &LoadedSnapshot, n: usize) -> Vec<TopStack> {
    let mut stacks: Vec<TopStack> = paths::folded_stacks(&loaded.snapshot)
        .into_iter()
        .map(|(path, held)| {
            let path = path.split(';').map(str::to_string).collect();
            (path, held.bytes, held.blocks, held.stack)
        })
        .collect();
    stacks.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    stacks.truncate(n);
    stacks
}

/// The innermost Python frames of a stack, outermost first, then `[C++ frames]` if it has
/// any: "… › train_step (train.py:52) › …".
pub(crate) fn short_stack(frames: &Frames, stack: StackId) -> String {
    short_steps(frames, stack, true)
}

/// [`short_stack`], with `[C++ frames]` only when the stack has no Python frame; a `…` leads
/// when outer frames are cut.
fn short_steps(frames: &Frames, stack: StackId, with_cpp: bool) -> String {
    let mut steps = Vec::new();
    paths::path(frames, stack, true, &mut steps);
    if steps.len() == 1 && steps[0] == Step::Cpp {
        return "[C++ frames only]".to_string();
    }
    if !with_cpp && steps.last() == Some(&Step::Cpp) {
        steps.pop();
    }
    let cut = steps.len().saturating_sub(SHORT_FRAMES);
    let mut text: Vec<String> = steps[cut..]
        .iter()
        .map(|&s| paths::label(frames, s))
        .collect();
    if cut > 0 {
        text.insert(0, "…".to_string());
    }
    text.join(" › ")
}

pub(crate) fn text(loaded: &LoadedSnapshot, out: &mut impl Write) -> io::Result<()> {
    let s = &loaded.snapshot;
    let a = &loaded.analysis;
    let events: usize = s.traces.iter().map(Vec::len).sum();
    writeln!(
        out,
        "{}: {} device(s), {} segment(s), {}, {events} trace event(s)",
        loaded.name(),
        a.devices.len(),
        s.segments.len(),
        s.stacks_note()
    )?;
    for device in &a.devices {
        device_text(loaded, device, out)?;
    }
    if let Some(settings) = &s.settings {
        let pairs: Vec<String> = settings
            .entries
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        writeln!(
            out,
            "allocator settings: {}",
            super::text::escape(&pairs.join(", "))
        )?;
    }
    let t = &a.totals;
    writeln!(
        out,
        "as _memory_viz stats counts: segments {}, total_reserved {} B, total_allocated {} B \
         (requested bytes of allocated blocks), total_free {} B ({} B internal)",
        t.segments,
        t.reserved,
        t.requested,
        t.free_external.saturating_add(t.free_internal),
        t.free_internal
    )?;
    let tree = Tree::build(s, &TreeOptions::default());
    writeln!(out, "who holds the memory ({} live):", bytes(tree.total()))?;
    for (path, held, blocks, stack) in top_stacks(loaded, TEXT_STACKS) {
        let share = 100.0 * held as f64 / tree.total().max(1) as f64;
        writeln!(
            out,
            "  {:>9} {share:5.1}% {blocks:>5} block(s)  {} {}",
            bytes(held),
            path[0],
            short_steps(&s.frames, stack, false)
        )?;
    }
    Ok(())
}

fn device_text(loaded: &LoadedSnapshot, d: &DeviceSummary, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "{}  reserved {}  allocated {} (requested {})  active {}",
        d.label(),
        bytes(d.reserved),
        bytes(d.allocated),
        bytes(d.requested),
        bytes(d.active)
    )?;
    writeln!(
        out,
        "        inactive split {}  fragmentation {}  largest free block {}",
        bytes(d.inactive_split),
        d.fragmentation_percent()
            .map_or("N/A".to_string(), |p| format!("{p:.1}%")),
        d.largest_free_block.map_or("N/A".to_string(), bytes)
    )?;
    writeln!(
        out,
        "        segments {} ({} large, {} small, {} expandable)",
        d.segments, d.large_segments, d.small_segments, d.expandable_segments
    )?;
    if let Some(oom) = &d.oom {
        writeln!(out, "        {}", oom_text(oom, d.trace_entries))?;
        writeln!(
            out,
            "          at {}",
            short_stack(&loaded.snapshot.frames, oom.stack)
        )?;
    }
    if let Some(t) = d.device.and_then(|dev| loaded.analysis.timeline(dev)) {
        writeln!(
            out,
            "        trace: {} events, peak {} in use at event {}",
            t.len(),
            bytes(t.peak_bytes()),
            t.peak + 1
        )?;
    }
    Ok(())
}

pub(crate) fn oom_text(oom: &OomEvent, events: usize) -> String {
    let more = if oom.count > 1 {
        format!(", the last of {}", oom.count)
    } else {
        String::new()
    };
    format!(
        "OUT OF MEMORY: {} requested, {} free on the device (event {} of {events}{more})",
        bytes(oom.requested),
        bytes(oom.device_free),
        oom.index + 1
    )
}

pub(crate) fn json(loaded: &LoadedSnapshot) -> Json {
    let s = &loaded.snapshot;
    let a = &loaded.analysis;
    let t = &a.totals;
    let devices: Vec<Json> = a.devices.iter().map(|d| device_json(loaded, d)).collect();
    let stacks: Vec<Json> = top_stacks(loaded, TOP_STACKS)
        .into_iter()
        .map(|(path, held, blocks, _)| json!({"bytes": held, "blocks": blocks, "device": path[0], "frames": path[1..]}))
        .collect();
    json!({
        "file": loaded.path.display().to_string(),
        "file_bytes": loaded.file_bytes,
        "stacks_recorded": s.has_stacks(),
        "totals": {
            "segments": t.segments,
            "reserved_bytes": t.reserved,
            "allocated_bytes": t.allocated,
            "requested_bytes": t.requested,
            "free_bytes": t.free_external.saturating_add(t.free_internal),
            "free_internal_bytes": t.free_internal,
        },
        "devices": devices,
        "allocator_settings": s.settings.as_ref().map(|st| {
            st.entries
                .iter()
                .map(|(k, v)| (k.clone(), Json::String(v.clone())))
                .collect::<serde_json::Map<_, _>>()
        }),
        "annotations": s.annotations.len(),
        "top_stacks": stacks,
    })
}

fn device_json(loaded: &LoadedSnapshot, d: &DeviceSummary) -> Json {
    let frames = &loaded.snapshot.frames;
    let stack_json = |stack: StackId| -> Vec<String> {
        let mut steps = Vec::new();
        paths::path(frames, stack, false, &mut steps);
        steps.iter().map(|&s| paths::label(frames, s)).collect()
    };
    let trace = d.device.and_then(|dev| loaded.analysis.timeline(dev)).map(|t| {
        let (top, live) = t.largest_live(t.peak, 5);
        json!({
            "events": t.len(),
            "peak_in_use_bytes": t.peak_bytes(),
            "peak_event": t.peak + 1,
            "live_at_peak": live,
            "largest_at_peak": top.iter().map(|i| json!({
                "bytes": i.size, "addr": i.addr, "allocated_at_event": i.start.map(|e| e + 1), "stack": stack_json(i.stack)
            })).collect::<Vec<_>>(),
        })
    });
    json!({
        "device": d.device,
        "segments": d.segments,
        "large_segments": d.large_segments,
        "small_segments": d.small_segments,
        "expandable_segments": d.expandable_segments,
        "reserved_bytes": d.reserved,
        "allocated_bytes": d.allocated,
        "requested_bytes": d.requested,
        "active_bytes": d.active,
        "inactive_split_bytes": d.inactive_split,
        "largest_free_block_bytes": d.largest_free_block,
        "fragmentation_percent": d.fragmentation_percent(),
        "oom": d.oom.as_ref().map(|o| json!({
            "requested_bytes": o.requested,
            "device_free_bytes": o.device_free,
            "event": o.index + 1,
            "time_us": o.time_us,
            "count": o.count,
            "stack": stack_json(o.stack),
        })),
        "trace": trace,
    })
}

/// Folded stacks, one line per stack: "cuda:0;frame;…;frame BYTES".
pub(crate) fn folded(loaded: &LoadedSnapshot, out: &mut impl Write) -> io::Result<()> {
    for line in paths::folded_lines(&loaded.snapshot) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// An SVG flame graph of live bytes by stack; its root weighs the allocated bytes.
pub(crate) fn flamegraph(loaded: &LoadedSnapshot, out: impl Write) -> Result<(), String> {
    let stacks = paths::folded_stacks(&loaded.snapshot);
    if stacks.is_empty() {
        return Err("holds no live allocations: there is nothing to draw".to_string());
    }
    let total = (stacks.values()).try_fold(0u64, |sum, held| sum.checked_add(held.bytes));
    if total.is_none_or(|t| t > MAX_FLAME_BYTES) {
        return Err(
            "holds live allocations whose sizes add up to more than 4 EiB (2^62 bytes), \
                    more than any device holds: it cannot be drawn as a flame graph"
                .to_string(),
        );
    }
    let lines = paths::lines_of(stacks);
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!("Live CUDA memory by stack: {}", loaded.name());
    options.count_name = "bytes".to_string();
    options.name_type = "Frame:".to_string();
    options.colors =
        inferno::flamegraph::color::Palette::Basic(inferno::flamegraph::color::BasicPalette::Mem);
    options.hash = true;
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .map_err(|e| format!("could not be drawn as a flame graph: {e}"))
}

pub(crate) fn compare_text(diffs: &[StackDiff], out: &mut impl Write) -> io::Result<()> {
    let grew: Vec<&StackDiff> = diffs.iter().filter(|d| d.delta() > 0).collect();
    let shrank: Vec<&StackDiff> = diffs.iter().filter(|d| d.delta() < 0).collect();
    writeln!(out, "{} stack(s) grew, {} shrank", grew.len(), shrank.len())?;
    for (title, list) in [("grew", grew), ("shrank", shrank)] {
        if list.is_empty() {
            continue;
        }
        writeln!(out, "{title}:")?;
        for d in list {
            let sign = if d.delta() > 0 { "+" } else { "-" };
            writeln!(
                out,
                "  {sign}{:>9}  {} → {}  ({} → {} blocks)  {}",
                bytes(d.delta().unsigned_abs() as u64),
                bytes(d.before),
                bytes(d.after),
                d.before_blocks,
                d.after_blocks,
                d.path.join(" › ")
            )?;
        }
    }
    Ok(())
}

pub(crate) fn compare_json(diffs: &[StackDiff]) -> Json {
    json!({
        "stacks": diffs.iter().map(|d| json!({
            "device": d.path.first(),
            "frames": d.path.get(1..),
            "before_bytes": d.before,
            "after_bytes": d.after,
            "delta_bytes": i64::try_from(d.delta()).ok(),
            "before_blocks": d.before_blocks,
            "after_blocks": d.after_blocks,
        })).collect::<Vec<_>>(),
        "grew": diffs.iter().filter(|d| d.delta() > 0).count(),
        "shrank": diffs.iter().filter(|d| d.delta() < 0).count(),
    })
}

/// "cuda:0" or "every device", for titles.
pub(crate) fn devices_label(device: Option<i64>) -> String {
    device.map_or_else(|| "every device".to_string(), |d| device_label(Some(d)))
}
