//! View 3, the segment map: each segment as one line of blocks drawn to the terminal's width
//! (allocated, waiting to be freed, free), like memory_viz's Allocator State. The selected
//! block is highlighted, and its size, state, stream and allocation stack are shown below.

use ratatui::{layout::Rect, style::Style, text::Line, widgets::Paragraph, Frame};

use super::render::{scroll, section, styled};
use super::state::Viewer;
use crate::format::{bytes, bytes_short, truncate, NA};
use crate::memsnap::analysis::device_label;
use crate::memsnap::analysis::paths;
use crate::memsnap::model::{Block, BlockState, Segment, SegmentType};
use crate::terminal::theme::Theme;

const DETAIL_LINES: usize = 7;

pub(crate) fn render(frame: &mut Frame, area: Rect, viewer: &Viewer, theme: Theme) {
    let segments = viewer.segments();
    let reserved = segments
        .iter()
        .fold(0u64, |sum, s| sum.saturating_add(s.total_size));
    let mut lines = vec![section(
        format!(
            " Segments  {} segment(s), {} reserved",
            segments.len(),
            bytes(reserved)
        ),
        area.width,
        theme,
    )];
    lines.push(Line::from(vec![
        styled("█ allocated  ", theme.memory_bar()),
        styled("▒ freed, waiting on a stream  ", theme.warn()),
        styled("· free (cached)", theme.dim()),
    ]));
    let height = (area.height as usize).saturating_sub(2 + DETAIL_LINES);
    let first = scroll(viewer.segment, segments.len(), height);
    for (i, segment) in segments.iter().enumerate().skip(first).take(height) {
        let block = (i == viewer.segment).then_some(viewer.block);
        lines.push(segment_line(segment, block, area.width as usize, theme));
    }
    while lines.len() < 2 + height {
        lines.push(Line::raw(""));
    }
    if let Some(segment) = segments.get(viewer.segment) {
        let index = viewer.block.min(segment.blocks.len().saturating_sub(1));
        if let Some(block) = segment.blocks.get(index) {
            lines.extend(detail(
                viewer,
                segment,
                index,
                block,
                area.width as usize,
                theme,
            ));
        }
    } else {
        lines.push(Line::styled("No segments on this device.", theme.dim()));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

fn segment_line(
    segment: &Segment,
    selected: Option<usize>,
    width: usize,
    theme: Theme,
) -> Line<'static> {
    let kind = match segment.segment_type {
        Some(SegmentType::Large) => "L",
        Some(SegmentType::Small) => "S",
        None => "?",
    };
    let head = format!(
        "{}{:<6} {:>14x} {:>6} {kind} ",
        if selected.is_some() { "▶" } else { " " },
        device_label(segment.device),
        segment.address,
        bytes_short(segment.total_size)
    );
    let cells = width.saturating_sub(head.chars().count()).max(1);
    let mut spans = vec![styled(
        head,
        if selected.is_some() {
            theme.selected()
        } else {
            theme.plain()
        },
    )];
    let total = u128::from(segment.total_size.max(1));
    let owners = cell_owners(segment, cells);
    let mut selected_drawn = false;
    for &owner in &owners {
        let (glyph, mut style) = match owner.map(|i| segment.blocks[i].state) {
            Some(BlockState::ActiveAllocated) => ("█", theme.memory_bar()),
            Some(BlockState::ActivePendingFree) => ("▒", theme.warn()),
            Some(BlockState::Inactive) => ("·", theme.dim()),
            None => (" ", theme.plain()),
        };
        if owner.is_some() && owner == selected {
            style = theme.selected();
            selected_drawn = true;
        }
        spans.push(styled(glyph, style));
    }
    if let (Some(index), false) = (selected, selected_drawn) {
        // A block smaller than a cell still shows where it is.
        let offset = segment
            .blocks
            .iter()
            .take(index)
            .fold(0u64, |sum, b| sum.saturating_add(b.size));
        let cell = ((u128::from(offset) * cells as u128) / total) as usize;
        if let Some(span) = spans.get_mut(1 + cell.min(cells - 1)) {
            span.style = theme.selected();
        }
    }
    Line::from(spans)
}

/// For each of `cells` cells, the block it shows: an allocated block if the cell holds any of
/// its bytes (a 2 MiB tensor pinning a 1 GiB segment must show, as `_memory_viz` shows it),
/// else one waiting to be freed, else the block covering most of the cell; one pass over the
/// blocks.
pub(super) fn cell_owners(segment: &Segment, cells: usize) -> Vec<Option<usize>> {
    let total = u128::from(segment.total_size.max(1));
    let starts: Vec<u64> = segment
        .blocks
        .iter()
        .scan(0u64, |offset, b| {
            let start = *offset;
            *offset = (*offset).saturating_add(b.size);
            Some(start)
        })
        .collect();
    let mut first = 0;
    (0..cells)
        .map(|cell| {
            let lo = (cell as u128 * total / cells as u128) as u64;
            let hi = (((cell as u128 + 1) * total / cells as u128) as u64).max(lo + 1);
            while first < starts.len()
                && starts[first].saturating_add(segment.blocks[first].size) <= lo
            {
                first += 1;
            }
            (first..starts.len())
                .take_while(|&i| starts[i] < hi)
                .max_by_key(|&i| {
                    let end = starts[i].saturating_add(segment.blocks[i].size);
                    (
                        rank(segment.blocks[i].state),
                        end.min(hi).saturating_sub(starts[i].max(lo)),
                        std::cmp::Reverse(i),
                    )
                })
        })
        .collect()
}

/// Which state a cell shared by blocks shows: live memory first.
fn rank(state: BlockState) -> u8 {
    match state {
        BlockState::ActiveAllocated => 2,
        BlockState::ActivePendingFree => 1,
        BlockState::Inactive => 0,
    }
}

fn detail(
    viewer: &Viewer,
    segment: &Segment,
    index: usize,
    block: &Block,
    width: usize,
    theme: Theme,
) -> Vec<Line<'static>> {
    let frames = &viewer.loaded.snapshot.frames;
    let requested = block.requested_size.map_or(NA.to_string(), bytes);
    let stream = segment.stream.map_or(NA.to_string(), |s| {
        if s == 0 {
            "0 (default)".to_string()
        } else {
            format!("0x{s:x}")
        }
    });
    let state_style: Style = match block.state {
        BlockState::ActiveAllocated => theme.memory_bar(),
        BlockState::ActivePendingFree => theme.warn(),
        BlockState::Inactive => theme.dim(),
    };
    let mut lines = vec![
        Line::from(vec![
            styled(
                format!("block {} of {}  ", index + 1, segment.blocks.len()),
                theme.label(),
            ),
            styled(block.state.name(), state_style),
            styled(
                format!(
                    "  {} at 0x{:x}, requested {requested}",
                    bytes(block.size),
                    block.address
                ),
                theme.plain(),
            ),
        ]),
        Line::styled(
            truncate(
                &format!(
                    "segment 0x{:x}: {} {}, stream {stream}, pool {}, expandable {}",
                    segment.address,
                    bytes(segment.total_size),
                    match segment.segment_type {
                        Some(SegmentType::Large) => "large",
                        Some(SegmentType::Small) => "small",
                        None => "pool N/A",
                    },
                    segment
                        .pool_id
                        .map_or(NA.to_string(), |(a, b)| format!("({a}, {b})")),
                    segment
                        .expandable
                        .map_or(NA, |e| if e { "yes" } else { "no" }),
                ),
                width,
            ),
            theme.dim(),
        ),
    ];
    if block.state == BlockState::Inactive {
        // A free block holds no allocation: its frames, if any, are an old one's.
        lines.push(Line::styled(
            "free: cached by the allocator, held by no tensor",
            theme.dim(),
        ));
        return lines;
    }
    let mut steps = Vec::new();
    paths::path(frames, block.stack, true, &mut steps);
    lines.push(Line::styled(
        "allocated at (innermost last):",
        theme.label(),
    ));
    let room = DETAIL_LINES - lines.len();
    let skip = steps.len().saturating_sub(room);
    for &step in &steps[skip..] {
        lines.push(Line::raw(truncate(
            &format!("  {}", paths::label(frames, step)),
            width,
        )));
    }
    lines
}
