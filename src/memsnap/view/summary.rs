//! View 1, the summary per device: reserved, allocated, active, inactive split, the largest free
//! block, segments, fragmentation, expandable segments, the OOM (requested against free), the
//! trace's peak, and the allocator settings.

use ratatui::{layout::Rect, text::Line, widgets::Paragraph, Frame};

use super::render::{section, styled};
use super::state::Viewer;
use crate::format::{bytes, pack, percent_f, truncate, NA};
use crate::memsnap::analysis::DeviceSummary;
use crate::memsnap::output::{oom_text, short_stack};
use crate::memsnap::text::escape;
use crate::terminal::theme::Theme;

pub(crate) fn render(frame: &mut Frame, area: Rect, viewer: &Viewer, theme: Theme) {
    let lines = lines(viewer, area.width, theme);
    let scroll = viewer
        .summary_scroll
        .min(lines.len().saturating_sub(area.height as usize));
    frame.render_widget(Paragraph::new(lines).scroll((scroll as u16, 0)), area);
}

/// The summary's lines at a width; the state machine counts them to bound the scrolling.
pub(crate) fn lines(viewer: &Viewer, area_width: u16, theme: Theme) -> Vec<Line<'static>> {
    let loaded = &viewer.loaded;
    let s = &loaded.snapshot;
    let width = area_width as usize;
    let mut lines = vec![section(
        format!(
            " Summary  {} segment(s)  {}",
            s.segments.len(),
            s.stacks_note()
        ),
        area_width,
        theme,
    )];
    let devices = loaded
        .analysis
        .devices
        .iter()
        .filter(|d| viewer.device.is_none() || d.device == viewer.device);
    for d in devices {
        device_lines(viewer, d, width, theme, &mut lines);
    }
    if let Some(settings) = &s.settings {
        lines.push(Line::styled("Allocator settings", theme.label()));
        let expandable = match settings.expandable_segments {
            Some(true) => "on",
            Some(false) => "off",
            None => NA,
        };
        let mut pieces = vec![vec![styled(
            format!("expandable_segments {expandable}"),
            theme.plain(),
        )]];
        pieces.extend(
            settings
                .entries
                .iter()
                .filter(|(k, _)| k != "expandable_segments")
                .map(|(k, v)| vec![styled(format!("{}={}", escape(k), escape(v)), theme.dim())]),
        );
        lines.extend(pack(pieces, width, 2));
    }
    let t = &loaded.analysis.totals;
    lines.push(Line::styled("As _memory_viz stats counts", theme.label()));
    lines.extend(pack(
        vec![
            vec![styled(format!("segments {}", t.segments), theme.plain())],
            vec![styled(
                format!("total_reserved {}", bytes(t.reserved)),
                theme.plain(),
            )],
            vec![styled(
                format!("total_allocated {} (requested)", bytes(t.requested)),
                theme.plain(),
            )],
            vec![styled(
                format!(
                    "total_free {} ({} internal)",
                    bytes(t.free_external.saturating_add(t.free_internal)),
                    bytes(t.free_internal)
                ),
                theme.plain(),
            )],
        ],
        width,
        2,
    ));
    if !s.annotations.is_empty() {
        lines.push(Line::styled(
            format!("{} record_function annotation(s)", s.annotations.len()),
            theme.dim(),
        ));
    }
    lines
}

fn device_lines(
    viewer: &Viewer,
    d: &DeviceSummary,
    width: usize,
    theme: Theme,
    lines: &mut Vec<Line<'static>>,
) {
    let frag = d.fragmentation_percent();
    let frag_style = match frag {
        Some(p) if p >= 30.0 => theme.critical(),
        Some(p) if p >= 10.0 => theme.warn(),
        _ => theme.plain(),
    };
    lines.push(Line::from(vec![
        styled(d.label(), theme.brand()),
        styled(
            format!(
                "  {} segment(s): {} large, {} small, {} expandable",
                d.segments, d.large_segments, d.small_segments, d.expandable_segments
            ),
            theme.dim(),
        ),
    ]));
    let field = |name: &str, value: String| {
        vec![
            styled(format!("{name} "), theme.label()),
            styled(value, theme.plain()),
        ]
    };
    let mut pieces = vec![
        field("reserved", bytes(d.reserved)),
        field(
            "allocated",
            format!("{} in {} blocks", bytes(d.allocated), d.allocated_blocks),
        ),
        field("requested", bytes(d.requested)),
        field("active", bytes(d.active)),
        field("cached", bytes(d.reserved.saturating_sub(d.allocated))),
        field("inactive split", bytes(d.inactive_split)),
        vec![
            styled("fragmentation ".to_string(), theme.label()),
            styled(percent_f(frag), frag_style),
        ],
        field(
            "largest free block",
            d.largest_free_block.map_or(NA.to_string(), bytes),
        ),
    ];
    if let Some(t) = d
        .device
        .and_then(|dev| viewer.loaded.analysis.timeline(dev))
    {
        pieces.push(field(
            "trace",
            format!("{} events, peak {} in use", t.len(), bytes(t.peak_bytes())),
        ));
    }
    lines.extend(pack(pieces, width, 2));
    if let Some(oom) = &d.oom {
        let at = short_stack(&viewer.loaded.snapshot.frames, oom.stack);
        let missing = oom.requested.saturating_sub(oom.device_free);
        let cached = d.reserved.saturating_sub(d.allocated);
        let texts = [
            (
                format!("  {}", oom_text(oom, d.trace_entries)),
                theme.critical(),
            ),
            (format!("    at {at}"), theme.warn()),
            (
                format!(
                    "    {} more than was free; at the snapshot this process held {} cached \
                     (reserved, not allocated)",
                    bytes(missing),
                    bytes(cached)
                ),
                theme.dim(),
            ),
        ];
        lines.extend(
            texts
                .into_iter()
                .map(|(text, style)| Line::styled(truncate(&text, width), style)),
        );
    }
}
