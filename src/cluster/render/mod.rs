//! Drawing the cluster view: pure functions of [`ClusterApp`], in the monitor's look (its
//! theme, title bars and status line). Nodes first (each expandable to its GPUs, a node that
//! stopped reporting marked DOWN), then the jobs across nodes with their stragglers and
//! missing ranks, then every node's warnings, then the status line.
//!
//! [`once_text`] writes the same sections as plain text for `--once`: every line, sized to
//! its content, with no selection, no key help and no padding to a screen.

use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::model::{ClusterView, Node, NodeGpu};
use super::state::{ClusterApp, Focus, Listed};
use super::warnings::down_reason;
use crate::format::{bytes_short, pad_left_aligned, NA};
use crate::terminal::theme::Theme;

mod jobs;
mod warnings;

use jobs::{job_focus_line, job_lines};
use warnings::warning_lines;

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Draws the whole view into the frame.
pub(crate) fn draw(frame: &mut Frame, app: &ClusterApp) {
    let area = frame.area();
    let lines = screen_lines(app, area);
    frame.render_widget(Paragraph::new(lines), area);
}

/// The view as plain text for `--once`: the header and every line of every section, each
/// column as wide as its longest value, so that nothing is cut, and nothing padded to a screen.
pub(crate) fn once_text(app: &ClusterApp) -> String {
    let theme = Theme::new(false);
    let cols = Columns::content(&app.view);
    let mut lines = vec![header(app, theme, usize::MAX)];
    lines.extend(node_lines(app, theme, cols, false));
    lines.extend(job_lines(app, theme, cols, false));
    lines.extend(warning_lines(app, theme, cols));
    lines
        .iter()
        .map(|line| {
            let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
            text.trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn screen_lines(app: &ClusterApp, area: Rect) -> Vec<Line<'static>> {
    let theme = Theme::new(app.colors);
    let width = area.width as usize;
    let height = area.height as usize;
    let cols = Columns::screen(width, &app.view);
    let mut lines = vec![header(app, theme, width)];
    let body = height.saturating_sub(2);
    let nodes = node_lines(app, theme, cols, true);
    let jobs = job_lines(app, theme, cols, true);
    let warnings = warning_lines(app, theme, cols);
    let [n, j, w] = allocate(body, [nodes.len(), jobs.len(), warnings.len()]);
    lines.extend(window(nodes, n, node_focus_line(app)));
    lines.extend(window(jobs, j, job_focus_line(app)));
    lines.extend(warnings.into_iter().take(w));
    while lines.len() + 1 < height {
        lines.push(Line::raw(""));
    }
    lines.push(Line::styled(
        pad_left_aligned(&app.status(), width),
        status_style(app, theme),
    ));
    lines.truncate(height);
    lines
}

/// Splits `body` lines between sections wanting `desired` lines: a fair share each, then what
/// one does not use goes to the others, in order.
fn allocate(body: usize, desired: [usize; 3]) -> [usize; 3] {
    let share = body / 3;
    let mut given = desired.map(|d| d.min(share));
    let mut left = body - given.iter().sum::<usize>();
    for (given, want) in given.iter_mut().zip(desired) {
        let more = want.saturating_sub(*given).min(left);
        *given += more;
        left -= more;
    }
    given
}

/// The first `count` lines of a section, scrolled so that line `focus` (if any) is in view;
/// the title and column header (the first two) always stay.
fn window(lines: Vec<Line<'static>>, count: usize, focus: Option<usize>) -> Vec<Line<'static>> {
    if lines.len() <= count || count <= 2 {
        return lines.into_iter().take(count).collect();
    }
    let rows = count - 2;
    let focus = focus.unwrap_or(2);
    let first = focus.saturating_sub(rows - 1).max(2);
    let mut out: Vec<Line<'static>> = lines[..2].to_vec();
    out.extend(lines.into_iter().skip(first).take(rows));
    out
}

fn status_style(app: &ClusterApp, theme: Theme) -> Style {
    if app.problems.is_empty() {
        theme.dim()
    } else {
        theme.warn()
    }
}

fn header(app: &ClusterApp, theme: Theme, width: usize) -> Line<'static> {
    let view = &app.view;
    let mut spans = vec![Span::styled("torchtop cluster", theme.brand())];
    // First, so that a narrow terminal still shows it.
    if app.stale_shown().any() {
        spans.push(Span::raw("  "));
        spans.push(Span::styled(" STALE ", theme.critical()));
    }
    // A panel that was never read has no count to give; 0 would claim there is nothing.
    let count = |panel: Listed, n: usize, noun: &str| {
        if app.unread_reason(panel).is_some() {
            format!("? {noun}s")
        } else {
            counted(n, noun)
        }
    };
    let down = if view.nodes_down > 0 {
        format!(", {} down", view.nodes_down)
    } else {
        String::new()
    };
    spans.push(Span::raw(format!(
        "  {}  {}{down}  {}  {}  {}",
        app.url,
        count(Listed::Nodes, view.nodes.len(), "node"),
        count(Listed::Nodes, view.gpu_count, "GPU"),
        count(Listed::Jobs, view.jobs.len(), "job"),
        count(Listed::Warnings, view.warnings.len(), "warning")
    )));
    if let Some(updated) = &app.updated {
        let took = app
            .took_ms
            .map(|ms| format!(" ({ms} ms)"))
            .unwrap_or_default();
        spans.push(Span::styled(
            format!("  updated {updated}{took}"),
            theme.dim(),
        ));
    }
    fit(spans, width)
}

/// Cuts a line's spans at `width` columns.
fn fit(spans: Vec<Span<'static>>, width: usize) -> Line<'static> {
    let mut left = width;
    let mut out = Vec::new();
    for span in spans {
        let len = span.content.chars().count();
        if len <= left {
            left -= len;
            out.push(span);
        } else {
            let cut: String = span.content.chars().take(left).collect();
            out.push(Span::styled(cut, span.style));
            break;
        }
    }
    Line::from(out)
}

/// "1 node", "2 nodes": a count and its noun, singular for one.
pub(super) fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// How wide the columns of text from outside are (host names, GPU models, warning ids and
/// subjects): cut to fit the screen in the TUI; in `--once`, as wide as their longest value.
#[derive(Debug, Clone, Copy)]
pub(super) struct Columns {
    /// The screen's width; `None` in `--once`, whose lines are as long as their content.
    screen: Option<usize>,
    pub(super) host: usize,
    pub(super) model: usize,
    pub(super) id: usize,
    pub(super) subject: usize,
}

impl Columns {
    /// The TUI's columns on a screen `width` wide.
    fn screen(width: usize, view: &ClusterView) -> Self {
        Columns {
            screen: Some(width),
            host: if width >= 110 { 24 } else { 14 },
            model: if width >= 110 { 22 } else { 12 },
            id: 16,
            subject: longest(view.warnings.iter().map(|w| w.subject.as_str()), "SUBJECT").min(24),
        }
    }

    /// `--once`'s columns: each as wide as its longest value or its heading.
    fn content(view: &ClusterView) -> Self {
        let hosts = (view.nodes.iter().map(|n| n.hostname.as_str()))
            .chain(view.jobs.iter().flat_map(|j| {
                let ranks = j.ranks.iter().map(|r| r.hostname.as_str());
                ranks.chain(j.missing_ranks.iter().filter_map(|m| m.hostname.as_deref()))
            }))
            .chain(view.warnings.iter().map(|w| w.hostname.as_str()));
        let models = view.nodes.iter().flat_map(|n| n.gpus.iter());
        Columns {
            screen: None,
            host: longest(hosts, "NODE"),
            model: longest(models.map(|g| g.model.as_deref().unwrap_or(NA)), NA),
            id: longest(view.warnings.iter().map(|w| w.id.as_str()), "WARNING"),
            subject: longest(view.warnings.iter().map(|w| w.subject.as_str()), "SUBJECT"),
        }
    }

    /// A whole line: padded to the screen (its background spans it) and cut there, or as is.
    fn line(&self, text: &str) -> String {
        self.screen
            .map_or_else(|| text.to_string(), |w| pad_left_aligned(text, w))
    }

    /// How many points of a sparkline fit after `used` columns: all of them in `--once`.
    fn spark(&self, used: usize) -> usize {
        self.screen
            .map_or(usize::MAX, |w| w.saturating_sub(used).max(1))
    }
}

/// The width of the longest of `texts`, and at least that of `heading`.
fn longest<'a>(texts: impl Iterator<Item = &'a str>, heading: &str) -> usize {
    texts
        .map(|t| t.chars().count())
        .fold(heading.chars().count(), usize::max)
}

fn title(text: String, stale: bool, theme: Theme, cols: Columns) -> Line<'static> {
    let text = if stale {
        format!("{text}  [stale]")
    } else {
        text
    };
    Line::styled(cols.line(&text), theme.title())
}

fn opt(value: Option<f64>, unit: &str) -> String {
    value.map_or_else(|| NA.to_string(), |v| format!("{v:.0}{unit}"))
}

fn bytes(value: Option<f64>) -> String {
    value.map_or_else(|| NA.to_string(), |v| bytes_short(v.max(0.0) as u64))
}

fn sparkline(values: &[f64], width: usize) -> String {
    let start = values.len().saturating_sub(width);
    values[start..]
        .iter()
        .map(|v| SPARK[((v.clamp(0.0, 100.0) / 100.0) * 7.0).round() as usize])
        .collect()
}

/// The line a never-read panel shows instead of its rows, when it is one.
fn unread_line(app: &ClusterApp, panel: Listed, theme: Theme) -> Option<Line<'static>> {
    let why = app.unread_reason(panel)?;
    Some(Line::styled(
        format!("  could not be read: {why}"),
        theme.warn(),
    ))
}

/// The node rows; `cursor` marks the selected one (the TUI's, not `--once`'s).
fn node_lines(app: &ClusterApp, theme: Theme, cols: Columns, cursor: bool) -> Vec<Line<'static>> {
    let hw = cols.host;
    let mut lines = vec![
        title("NODES".into(), app.stale_shown().nodes, theme, cols),
        Line::styled(
            format!(
                "  {} GPUS  UTIL   MIN        MEMORY  TEMP WARN  util, last 5 min",
                pad_left_aligned("NODE", hw)
            ),
            theme.label(),
        ),
    ];
    lines.extend(unread_line(app, Listed::Nodes, theme));
    let spark_width = cols.spark(hw + 48);
    for (i, node) in app.view.nodes.iter().enumerate() {
        let selected = cursor && i == app.selected_node && app.focus == Focus::Nodes;
        let expanded = app.expanded.contains(&node.hostname);
        if node.down {
            lines.push(down_line(node, selected, hw, theme));
            continue;
        }
        lines.push(node_line(node, selected, expanded, hw, spark_width, theme));
        if expanded {
            lines.extend(node.gpus.iter().map(|gpu| gpu_line(gpu, cols.model, theme)));
        }
    }
    lines
}

fn node_line(
    node: &Node,
    selected: bool,
    expanded: bool,
    hw: usize,
    spark_width: usize,
    theme: Theme,
) -> Line<'static> {
    let marker = match (selected, expanded) {
        (_, true) => "▾ ",
        (true, false) => "▸ ",
        _ => "  ",
    };
    let memory = format!(
        "{}/{}",
        bytes(node.memory_used_bytes),
        bytes(node.memory_total_bytes)
    );
    let text = format!(
        "{marker}{} {:>4} {:>5} {:>5} {:>13} {:>5} {:>4}  ",
        pad_left_aligned(&node.hostname, hw),
        node.gpus.len(),
        opt(node.utilization_mean, "%"),
        opt(node.utilization_min, "%"),
        memory,
        opt(node.temperature_max, "C"),
        node.warnings,
    );
    let style = if selected {
        theme.selected()
    } else {
        theme.plain()
    };
    // Where torchtop's exporter is down, the figures are dcgm-exporter's and nothing else is
    // known: the row says so where the sparkline was (since when, in its warning's row).
    let tail = if node.exporter_down {
        Span::styled("torchtop DOWN", theme.critical())
    } else {
        Span::styled(
            sparkline(&node.utilization_history, spark_width),
            theme.utilization_bar(),
        )
    };
    Line::from(vec![Span::styled(text, style), tail])
}

/// A node that stopped reporting: when it was last seen, and the exporter to look at.
fn down_line(node: &Node, selected: bool, hw: usize, theme: Theme) -> Line<'static> {
    let marker = if selected { "▸ " } else { "  " };
    let style = if selected {
        theme.selected()
    } else {
        theme.critical()
    };
    Line::styled(
        format!(
            "{marker}{} {:>4}  DOWN  {}",
            pad_left_aligned(&node.hostname, hw),
            NA,
            down_reason(node)
        ),
        style,
    )
}

fn gpu_line(gpu: &NodeGpu, model_width: usize, theme: Theme) -> Line<'static> {
    let total = match (gpu.memory_used_bytes, gpu.memory_free_bytes) {
        (Some(u), Some(f)) => Some(u + f),
        _ => None,
    };
    let state = gpu.state.clone().unwrap_or_else(|| NA.to_string());
    let style = match state.as_str() {
        "ok" => theme.plain(),
        "stale" => theme.warn(),
        _ => theme.critical(),
    };
    Line::styled(
        format!(
            "      GPU {:>2} {} util {:>4}  mem {:>13}  {:>4}  {:>5}  {state}",
            gpu.gpu,
            pad_left_aligned(gpu.model.as_deref().unwrap_or(NA), model_width),
            opt(gpu.utilization_percent, "%"),
            format!("{}/{}", bytes(gpu.memory_used_bytes), bytes(total)),
            opt(gpu.temperature_c, "C"),
            opt(gpu.power_w, "W"),
        ),
        style,
    )
}

fn node_focus_line(app: &ClusterApp) -> Option<usize> {
    let mut line = 2;
    for (i, node) in app.view.nodes.iter().enumerate() {
        if i == app.selected_node {
            return Some(line);
        }
        line += 1;
        if app.expanded.contains(&node.hostname) {
            line += node.gpus.len();
        }
    }
    None
}
