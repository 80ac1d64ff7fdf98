//! View 2, who holds the memory: the tree of live allocations by stack, navigable like a flame
//! graph turned sideways. Each row: open/closed mark, bytes, share of the whole, a bar of that
//! share, and the frame, indented by depth. The selected row's frame is spelled out below.

use ratatui::{layout::Rect, text::Line, widgets::Paragraph, Frame};

use super::render::{scroll, section, styled};
use super::state::Viewer;
use crate::format::{bytes, truncate};
use crate::memsnap::analysis::paths::{self, Step};
use crate::memsnap::output::devices_label;
use crate::memsnap::text::escape;
use crate::terminal::theme::Theme;

const BAR: usize = 10;
const EIGHTHS: [&str; 9] = ["", "▏", "▎", "▍", "▌", "▋", "▊", "▉", "█"];
/// Indentation stops growing at this depth, so that deep Python stacks keep room for names.
const MAX_INDENT: usize = 16;

pub(crate) fn render(frame: &mut Frame, area: Rect, viewer: &Viewer, theme: Theme) {
    let tree = &viewer.tree;
    let root = &tree.nodes[0];
    let mut title = format!(
        " Who holds the memory  {} live in {} block(s) on {}",
        bytes(root.bytes),
        root.blocks,
        devices_label(viewer.device)
    );
    if !viewer.filter.is_empty() {
        title.push_str(&format!("  matching '{}'", escape(&viewer.filter)));
    }
    title.push_str(if viewer.fold_cpp { "  C++ folded" } else { "" });
    let mut lines = vec![section(title, area.width, theme)];
    let rows = viewer.rows();
    let detail_height = 2;
    let height = (area.height as usize).saturating_sub(1 + detail_height);
    if rows.is_empty() {
        let why = if viewer.filter.is_empty() {
            "No live allocations."
        } else {
            "No live allocation has a frame that matches the filter (Esc clears it)."
        };
        lines.push(Line::styled(why, theme.dim()));
    }
    let first = scroll(viewer.row, rows.len(), height);
    for (i, &node) in rows.iter().enumerate().skip(first).take(height) {
        lines.push(row(
            viewer,
            node,
            i == viewer.row,
            area.width as usize,
            theme,
        ));
    }
    while lines.len() < 1 + height {
        lines.push(Line::raw(""));
    }
    if let Some(&node) = rows.get(viewer.row) {
        lines.extend(detail(viewer, node, area.width as usize, theme));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

fn row(viewer: &Viewer, node: usize, selected: bool, width: usize, theme: Theme) -> Line<'static> {
    let tree = &viewer.tree;
    let n = &tree.nodes[node];
    let mark = match (n.children.is_empty(), viewer.open.contains(&node)) {
        (true, _) => " ",
        (false, true) => "▾",
        (false, false) => "▸",
    };
    let share = tree.percent(node);
    let label = n.step.map_or_else(String::new, |s| {
        paths::label(&viewer.loaded.snapshot.frames, s)
    });
    let indent = " ".repeat(usize::from(n.depth.saturating_sub(1)).min(MAX_INDENT));
    let head = format!("{mark}{:>9} {share:5.1}% ", bytes(n.bytes));
    let room = width.saturating_sub(head.chars().count() + BAR + 1 + indent.len());
    let label_style = match n.step {
        Some(Step::Frame(id)) if viewer.loaded.snapshot.frames.frame(id).python => theme.plain(),
        _ => theme.dim(),
    };
    let spans = vec![
        styled(head, theme.plain()),
        styled(bar(share), theme.memory_bar()),
        styled(format!(" {indent}"), theme.plain()),
        styled(truncate(&label, room), label_style),
    ];
    let line = Line::from(spans);
    if selected {
        line.style(theme.selected())
    } else {
        line
    }
}

fn bar(percent: f64) -> String {
    let eighths = ((percent / 100.0) * (BAR * 8) as f64).round() as usize;
    let full = (eighths / 8).min(BAR);
    let mut text = "█".repeat(full);
    if full < BAR {
        text.push_str(EIGHTHS[eighths % 8]);
    }
    format!("{text:<BAR$}")
}

fn detail(viewer: &Viewer, node: usize, width: usize, theme: Theme) -> Vec<Line<'static>> {
    let n = &viewer.tree.nodes[node];
    let frames = &viewer.loaded.snapshot.frames;
    let what = match n.step {
        Some(Step::Frame(id)) => {
            let f = frames.frame(id);
            let line = f.line.map_or(String::new(), |l| format!(":{l}"));
            format!(
                "{} in {}{line}",
                frames.text(f.name),
                frames.text(f.filename)
            )
        }
        Some(Step::Cpp) => "C++ frames below the Python ones: press c to unfold them".to_string(),
        Some(step) => paths::label(frames, step),
        None => String::new(),
    };
    vec![
        Line::styled(truncate(&escape(&what), width), theme.label()),
        Line::styled(
            format!(
                "{} in {} live block(s), {:.1}% of what is shown",
                bytes(n.bytes),
                n.blocks,
                viewer.tree.percent(node)
            ),
            theme.dim(),
        ),
    ]
}
