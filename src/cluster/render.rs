//! Drawing the cluster view: pure functions of [`ClusterApp`], in the monitor's look (its
//! theme, title bars and status line). Nodes first (each expandable to its GPUs), then the
//! jobs across nodes with their stragglers, then every node's warnings, then the status line.

use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::model::{Job, Node, NodeGpu};
use super::state::{ClusterApp, Focus};
use crate::format::{bytes_short, pad_left_aligned, pad_right_aligned, NA};
use crate::terminal::theme::Theme;

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Draws the whole view into the frame.
pub(crate) fn draw(frame: &mut Frame, app: &ClusterApp) {
    let area = frame.area();
    let lines = screen_lines(app, area);
    frame.render_widget(Paragraph::new(lines), area);
}

fn screen_lines(app: &ClusterApp, area: Rect) -> Vec<Line<'static>> {
    let theme = Theme::new(app.colors);
    let width = area.width as usize;
    let height = area.height as usize;
    let mut lines = vec![header(app, theme, width)];
    let body = height.saturating_sub(2);
    let nodes = node_lines(app, theme, width);
    let jobs = job_lines(app, theme, width);
    let warnings = warning_lines(app, theme, width);
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
    if app.stale.any() {
        spans.push(Span::raw("  "));
        spans.push(Span::styled(" STALE ", theme.critical()));
    }
    spans.push(Span::raw(format!(
        "  {}  {} nodes  {} GPUs  {} jobs  {} warnings",
        app.url,
        view.nodes.len(),
        view.gpu_count,
        view.jobs.len(),
        view.warnings.len()
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

fn title(text: String, stale: bool, theme: Theme, width: usize) -> Line<'static> {
    let text = if stale {
        format!("{text}  [stale]")
    } else {
        text
    };
    Line::styled(pad_left_aligned(&text, width), theme.title())
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

fn host_width(width: usize) -> usize {
    if width >= 110 {
        24
    } else {
        14
    }
}

fn node_lines(app: &ClusterApp, theme: Theme, width: usize) -> Vec<Line<'static>> {
    let hw = host_width(width);
    let mut lines = vec![
        title("NODES".into(), app.stale.nodes, theme, width),
        Line::styled(
            format!(
                "  {} GPUS  UTIL   MIN        MEMORY  TEMP WARN  util, last 5 min",
                pad_left_aligned("NODE", hw)
            ),
            theme.label(),
        ),
    ];
    let spark_width = width.saturating_sub(hw + 48).max(1);
    for (i, node) in app.view.nodes.iter().enumerate() {
        let selected = i == app.selected_node && app.focus == Focus::Nodes;
        let expanded = app.expanded.contains(&node.hostname);
        lines.push(node_line(node, selected, expanded, hw, spark_width, theme));
        if expanded {
            let model_width = if width >= 110 { 22 } else { 12 };
            lines.extend(
                node.gpus
                    .iter()
                    .map(|gpu| gpu_line(gpu, model_width, theme)),
            );
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
    Line::from(vec![
        Span::styled(text, style),
        Span::styled(
            sparkline(&node.utilization_history, spark_width),
            theme.utilization_bar(),
        ),
    ])
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

fn job_focus_line(app: &ClusterApp) -> Option<usize> {
    if app.focus != Focus::Jobs {
        return None;
    }
    let before: usize = app.view.jobs[..app.selected_job.min(app.view.jobs.len())]
        .iter()
        .map(|j| j.ranks.len() + 1)
        .sum();
    Some(2 + before)
}

fn job_lines(app: &ClusterApp, theme: Theme, width: usize) -> Vec<Line<'static>> {
    let mut lines = vec![
        title(
            format!(
                "JOBS ACROSS NODES  straggler: step time over {:.0}% above the job's median",
                app.straggler_percent
            ),
            app.stale.jobs,
            theme,
            width,
        ),
        Line::styled(
            format!(
                "  RANK {}     PID  GPU   MEMORY HEADROOM      STEP",
                pad_left_aligned("NODE", host_width(width))
            ),
            theme.label(),
        ),
    ];
    if app.view.jobs.is_empty() {
        lines.push(Line::styled(
            "  no job: no process exports a training_job label",
            theme.dim(),
        ));
    }
    for (i, job) in app.view.jobs.iter().enumerate() {
        let selected = app.focus == Focus::Jobs && i == app.selected_job;
        lines.push(job_title(job, selected, theme));
        for rank in &job.ranks {
            let mut text = format!(
                "  {:>4} {} {:>7} {:>4} {:>8} {:>8} {:>9}",
                rank.rank.map_or_else(|| NA.to_string(), |r| r.to_string()),
                pad_left_aligned(&rank.hostname, host_width(width)),
                rank.pid,
                rank.gpu.map_or_else(|| NA.to_string(), |g| g.to_string()),
                bytes(rank.memory_bytes),
                bytes(rank.headroom_bytes),
                rank.step_time_seconds
                    .map_or_else(|| NA.to_string(), |s| format!("{s:.3}s")),
            );
            let style = if rank.straggler {
                let above = rank.above_median_percent.unwrap_or(0.0);
                text.push_str(&format!("  STRAGGLER +{above:.0}%"));
                theme.critical()
            } else {
                theme.plain()
            };
            lines.push(Line::styled(text, style));
        }
    }
    lines
}

fn job_title(job: &Job, selected: bool, theme: Theme) -> Line<'static> {
    let median = job
        .median_step_time_seconds
        .map_or_else(|| NA.to_string(), |s| format!("{s:.3}s"));
    let text = format!(
        "JOB {}  {} ranks on {} nodes  median step {median}",
        job.id,
        job.ranks.len(),
        job.nodes
    );
    Line::styled(
        text,
        if selected {
            theme.selected()
        } else {
            theme.brand()
        },
    )
}

fn warning_lines(app: &ClusterApp, theme: Theme, width: usize) -> Vec<Line<'static>> {
    let mut lines = vec![
        title(
            "WARNINGS FROM EVERY NODE".into(),
            app.stale.warnings,
            theme,
            width,
        ),
        Line::styled(
            format!(
                "  SEV  {} WARNING          SUBJECT",
                pad_left_aligned("NODE", host_width(width))
            ),
            theme.label(),
        ),
    ];
    if app.view.warnings.is_empty() {
        lines.push(Line::styled("  none", theme.dim()));
    }
    for warning in &app.view.warnings {
        let (label, style) = match warning.severity.as_str() {
            "critical" => ("CRIT", theme.critical()),
            "warn" => ("WARN", theme.warn()),
            _ => ("INFO", theme.label()),
        };
        lines.push(Line::from(vec![
            Span::raw("  "),
            Span::styled(label, style),
            Span::raw(format!(
                " {} {} {}",
                pad_left_aligned(&warning.hostname, host_width(width)),
                pad_left_aligned(&warning.id, 16),
                pad_right_aligned(&warning.subject, warning.subject.chars().count()),
            )),
        ]));
    }
    lines
}
