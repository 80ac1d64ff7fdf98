//! The detail view (`Enter`) over the panels: one process's full command line, cwd, cgroup
//! and the memory limit that binds it (with the cgroup that sets it, when an ancestor does),
//! the Apptainer or enroot container its cgroup does not name, launcher and CUDA environment,
//! the GPUs it holds, history lines of its GPU memory, SM%, CPU%, RSS and allocator figures,
//! and its children. Every text from /proc is escaped.
//!
//! In a replay it shows what the recording holds (the command line, user, state, GPUs and
//! history of that moment) and says which parts a recording does not keep: /proc is read for
//! a live process only, since a local process may have the recorded pid.

use ratatui::{
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph, Wrap},
    Frame,
};

use crate::app::detail::DetailView;
use crate::app::layout::Areas;
use crate::app::App;
use crate::format::{self, escape};
use crate::model::history::{ProcessHistory, Series};
use crate::model::{Cgroup, GpuProcess, Limit, ProcessContainer, ProcessDetail};
use crate::terminal::theme::Theme;
use crate::ui::balance::LEVELS;
use crate::ui::history::{bucket_size, newest_first_buckets};

/// Width of the labels at the left of each line.
const LABEL: usize = 12;
/// How a history line writes one of its values.
type Figure = dyn Fn(f64) -> String;

/// The widest history line drawn.
const MAX_SPARK: usize = 120;

/// The view covers everything between the header and the status line.
pub(crate) fn area(screen: Rect, areas: &Areas) -> Rect {
    let top = areas.header.bottom().min(screen.bottom());
    let bottom = areas.status.y.max(top);
    Rect::new(screen.x, top, screen.width, bottom - top)
}

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, view: &DetailView, theme: Theme) {
    if area.height < 3 || area.width < 20 {
        return;
    }
    let rows: Vec<&GpuProcess> = app
        .snapshot
        .processes
        .iter()
        .filter(|p| p.pid == view.pid)
        .collect();
    // A replay's snapshots carry no detail read; none must come from this machine's /proc.
    let detail = app
        .snapshot
        .detail
        .as_ref()
        .filter(|d| d.pid == view.pid && !app.replay);
    let inner_width = usize::from(area.width - 2);
    let mut lines = Vec::new();
    if !app.detail_process_listed() {
        lines.push(Line::styled(
            "this process is no longer listed (it may have exited); the action keys are off",
            theme.warn(),
        ));
    }
    if app.replay {
        recorded_identity_lines(&mut lines, &rows, inner_width, theme);
    } else {
        identity_lines(&mut lines, app, view.pid, &rows, detail, inner_width, theme);
        environment_lines(&mut lines, detail, theme);
    }
    gpu_lines(&mut lines, app, &rows, theme);
    history_lines(&mut lines, app, view.pid, inner_width, theme);
    if !app.replay {
        children_lines(&mut lines, detail, theme);
    }
    let keys = if app.replay {
        " Esc close  j k scroll "
    } else {
        " Esc close  j k scroll  T K I F9 n F7 F8 act on it "
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" Process {} ", view.pid))
        .title_bottom(keys);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false })
            .scroll((view.scroll, 0)),
        area,
    );
}

fn section(lines: &mut Vec<Line<'static>>, title: &str, theme: Theme) {
    lines.push(Line::styled(title.to_string(), theme.title()));
}

/// `label`, then `value` wrapped to a frame `width` wide, each further line under the first's
/// value: a long command line or cgroup list reads as one column, not from the frame's edge.
fn labelled(width: usize, label: &str, value: String, theme: Theme) -> Vec<Line<'static>> {
    let room = width.saturating_sub(LABEL).max(MIN_VALUE_WIDTH);
    let mut pieces = crate::format::wrap::lines(&value, room).into_iter();
    let first = pieces.next().unwrap_or_default();
    let mut out = vec![Line::from(vec![
        Span::styled(format!("{label:<LABEL$}"), theme.label()),
        Span::raw(first),
    ])];
    out.extend(pieces.map(|piece| Line::raw(format!("{:LABEL$}{piece}", ""))));
    out
}

/// The narrowest a labelled value is wrapped to, however narrow the frame.
const MIN_VALUE_WIDTH: usize = 16;

/// A `Result` from the detail read: the value, "reading..." before the first read, or the
/// reason in a dim sentence.
fn read_or_reason<T>(
    detail: Option<&ProcessDetail>,
    field: impl Fn(&ProcessDetail) -> &Result<T, String>,
    show: impl Fn(&T) -> String,
) -> (String, bool) {
    match detail.map(field) {
        None => ("reading /proc...".to_string(), false),
        Some(Ok(value)) => (show(value), true),
        Some(Err(reason)) => (escape(reason).into_owned(), false),
    }
}

fn identity_lines(
    lines: &mut Vec<Line<'static>>,
    app: &App,
    pid: u32,
    rows: &[&GpuProcess],
    detail: Option<&ProcessDetail>,
    width: usize,
    theme: Theme,
) {
    let host = app.snapshot.host_processes.iter().find(|h| h.pid == pid);
    let first = rows.first();
    let user = first
        .and_then(|p| p.user.as_deref())
        .or_else(|| host.and_then(|h| h.user.as_deref()));
    let state = first
        .and_then(|p| p.state)
        .or_else(|| host.map(|h| h.state));
    let running = first.and_then(|p| p.running_seconds);
    lines.extend(labelled(
        width,
        "user",
        format!(
            "{}   state {}   nice {}   running {}",
            escape(&format::text(user)),
            state.map_or("N/A".to_string(), |s| escape(&s.to_string()).into_owned()),
            first
                .and_then(|p| p.nice)
                .map_or("N/A".to_string(), |n| n.to_string()),
            format::opt_duration(running),
        ),
        theme,
    ));
    let known = first
        .and_then(|p| p.command.clone())
        .or_else(|| host.and_then(|h| h.command.as_deref().map(Into::into)));
    let (command, _) = read_or_reason(
        detail,
        |d| &d.command,
        |c| format::text(c.as_deref().or(known.as_deref())),
    );
    lines.extend(labelled(
        width,
        "command",
        escape(&command).into_owned(),
        theme,
    ));
    let (cwd, _) = read_or_reason(detail, |d| &d.cwd, |c| escape(c).into_owned());
    lines.extend(labelled(width, "cwd", cwd, theme));
    let (cgroup, _) = read_or_reason(detail, |d| &d.cgroup, |c| escape(c).into_owned());
    lines.extend(labelled(width, "cgroup", cgroup, theme));
    if let Some(cgroup) = first.and_then(|p| p.cgroup.as_deref()) {
        lines.extend(labelled(
            width,
            "mem limit",
            memory_limit_text(cgroup),
            theme,
        ));
    }
    if let Some(inner) = first.and_then(|p| ns_pid_text(p.ns_pids.as_deref()?)) {
        lines.extend(labelled(width, "pid inside", inner, theme));
    }
    if let Some(container) = first.and_then(|p| p.container.as_deref()) {
        lines.extend(labelled(
            width,
            "container",
            container_text(container),
            theme,
        ));
    }
}

/// "apptainer pytorch.sif (/scratch/img/pytorch.sif)", "enroot pyxis_42_train (/var/lib/...)",
/// or the runtime alone where nothing else is known.
fn container_text(container: &ProcessContainer) -> String {
    let mut text = escape(&container.runtime).into_owned();
    if let Some(name) = &container.name {
        text.push(' ');
        text.push_str(&escape(name));
    }
    if let Some(path) = &container.path {
        text.push_str(&format!(" ({})", escape(path)));
    }
    text
}

/// A containerized process's pid as `ps` shows it inside each nested PID namespace, innermost
/// last: "1 (its PID namespace's init)", or "412 in one, then 7".
fn ns_pid_text(ns_pids: &[u32]) -> Option<String> {
    let inner = ns_pids.get(1..).filter(|inner| !inner.is_empty())?;
    let list: Vec<String> = inner.iter().map(u32::to_string).collect();
    let init = (inner.last() == Some(&1)).then_some(" (its PID namespace's init)");
    Some(format!("{}{}", list.join(", then "), init.unwrap_or("")))
}

/// The memory limit that binds the process's cgroup, the use it applies to, and the cgroup
/// that sets it when that is an ancestor: "8.0GiB, 7.6GiB in use (95%), set on
/// /slurm/uid_1000/job_42".
fn memory_limit_text(cgroup: &Cgroup) -> String {
    let Some(limit) = cgroup.memory_limit() else {
        return match cgroup.memory_max {
            Some(Limit::Max) => "none: no cgroup up to the root sets one".to_string(),
            _ => "N/A".to_string(),
        };
    };
    let share = cgroup
        .memory_fraction()
        .map_or_else(|| "N/A".to_string(), |f| format::percent_whole(f * 100.0));
    let mut text = format!(
        "{}, {} in use ({share})",
        format::bytes(limit.max_bytes),
        format::opt_bytes(limit.used_bytes)
    );
    if limit.inherited {
        text.push_str(&format!(", set on {}", escape(limit.path)));
    }
    text
}

/// A replay's identity lines: the figures the frame recorded for the process's row (a state
/// it did not record is N/A, not the state of a later process table), and a plain sentence on
/// what a recording leaves out.
fn recorded_identity_lines(
    lines: &mut Vec<Line<'static>>,
    rows: &[&GpuProcess],
    width: usize,
    theme: Theme,
) {
    let first = rows.first();
    let na = || "N/A".to_string();
    lines.extend(labelled(
        width,
        "user",
        format!(
            "{}   state {}   nice {}   running {}",
            escape(&format::text(first.and_then(|p| p.user.as_deref()))),
            first
                .and_then(|p| p.state)
                .map_or_else(na, |s| escape(&s.to_string()).into_owned()),
            first
                .and_then(|p| p.nice)
                .map_or_else(na, |n| n.to_string()),
            format::opt_duration(first.and_then(|p| p.running_seconds)),
        ),
        theme,
    ));
    let command = format::text(first.and_then(|p| p.command.as_deref()));
    lines.extend(labelled(
        width,
        "command",
        escape(&command).into_owned(),
        theme,
    ));
    if let Some(container) = first.and_then(|p| p.container.as_deref()) {
        lines.extend(labelled(
            width,
            "container",
            container_text(container),
            theme,
        ));
    }
    lines.push(Line::styled(
        "a recording does not keep a process's cwd, cgroup, environment or children",
        theme.dim(),
    ));
}

fn environment_lines(lines: &mut Vec<Line<'static>>, detail: Option<&ProcessDetail>, theme: Theme) {
    section(
        lines,
        "Environment (launcher, Slurm, CUDA, ROCm, NCCL, PyTorch, OpenMP)",
        theme,
    );
    match detail.map(|d| &d.env) {
        None => lines.push(Line::styled("  reading /proc...", theme.dim())),
        Some(Err(reason)) => lines.push(Line::styled(format!("  {}", escape(reason)), theme.dim())),
        Some(Ok(env)) if env.is_empty() => {
            lines.push(Line::styled("  none of these is set", theme.dim()));
        }
        Some(Ok(env)) => lines.extend(
            env.iter()
                .map(|(k, v)| Line::raw(format!("  {}={}", escape(k), escape(v)))),
        ),
    }
}

fn gpu_lines(lines: &mut Vec<Line<'static>>, app: &App, rows: &[&GpuProcess], theme: Theme) {
    section(lines, "GPUs", theme);
    // A row listed for its agent alone holds no GPU NVML knows of (its index is a placeholder).
    let rows: Vec<&GpuProcess> = rows.iter().copied().filter(|r| !r.no_gpu).collect();
    if rows.is_empty() {
        lines.push(Line::styled("  holds no GPU", theme.dim()));
    }
    for row in rows {
        let gpu = app.snapshot.gpu(row.gpu);
        let name = gpu.and_then(|g| g.name.as_deref());
        let share = match (row.gpu_memory_bytes, gpu.and_then(|g| g.memory_total_bytes)) {
            (Some(used), Some(total)) if total > 0 => {
                format!(
                    " ({:.0}% of {})",
                    used as f64 * 100.0 / total as f64,
                    format::bytes(total)
                )
            }
            _ => String::new(),
        };
        lines.push(Line::raw(format!(
            "  GPU {}  {}  {}  mem {}{}  SM {}",
            row.gpu,
            escape(&format::text(name)),
            row.kind.short(),
            format::opt_bytes(row.gpu_memory_bytes),
            share,
            format::percent(row.sm_percent),
        )));
        if let Some(device) = row
            .torch
            .as_ref()
            .and_then(|_| crate::rules::torch_device_on(row, &app.snapshot.gpus))
        {
            lines.push(Line::raw(format!(
                "    cuda:{}  allocated {}  reserved {}  peak {}",
                device.index,
                format::opt_bytes(device.allocated_bytes),
                format::opt_bytes(device.reserved_bytes),
                format::opt_bytes(device.peak_allocated_bytes),
            )));
        }
    }
}

fn history_lines(lines: &mut Vec<Line<'static>>, app: &App, pid: u32, width: usize, theme: Theme) {
    // One span for every row, the process figures' (which keep fewer samples at a fast
    // refresh), so that a column is the same moment on every row.
    let capacity = app
        .history
        .capacity()
        .min(crate::model::history::MAX_PROCESS_SAMPLES);
    let span = capacity.saturating_sub(1) as f64 * app.delay_seconds;
    section(
        lines,
        &format!(
            "History (last {}, scaled to its min..max)",
            format::duration(span)
        ),
        theme,
    );
    let Some(history) = app.history.processes.get(&pid) else {
        lines.push(Line::styled("  no samples yet", theme.dim()));
        return;
    };
    let spark = spark_width(width);
    let columns = HistoryColumns {
        spark,
        bucket: bucket_size(capacity, spark),
    };
    let bytes = |v: f64| format::bytes(v.max(0.0) as u64);
    let percent = |v: f64| format!("{v:.0}%");
    let ProcessHistory {
        gpu_memory_bytes,
        sm_percent,
        cpu_percent,
        rss_bytes,
        ..
    } = history;
    let series: [(&str, &Series, &Figure); 4] = [
        ("GPU memory", gpu_memory_bytes, &bytes),
        ("SM%", sm_percent, &percent),
        ("CPU%", cpu_percent, &percent),
        ("RSS", rss_bytes, &bytes),
    ];
    for (label, series, show) in series {
        lines.push(history_line(label, series, columns, show, theme));
    }
    for ((_, device), allocator) in app.history.allocators.range((pid, 0)..=(pid, u32::MAX)) {
        let label = format!("cuda:{device} alloc");
        let series = &allocator.allocated_bytes;
        lines.push(history_line(&label, series, columns, &bytes, theme));
        let label = format!("cuda:{device} resv");
        let series = &allocator.reserved_bytes;
        lines.push(history_line(&label, series, columns, &bytes, theme));
    }
}

/// Columns of the figures after each history sparkline: the widest is a byte figure and its
/// range, "999.9GiB (999.9GiB..999.9GiB)". Fixed, so that every row's newest sample is in the
/// same column whatever its figures.
const HISTORY_FIGURES: usize = 29;

/// The sparkline's cells on a line of `line` cells: what the label, the gaps and the figures
/// leave, within 4..[`MAX_SPARK`].
fn spark_width(line: usize) -> usize {
    line.saturating_sub(2 + LABEL + 1 + 2 + HISTORY_FIGURES)
        .clamp(4, MAX_SPARK)
}

/// What every history row shares: its sparkline's width and the samples a cell stands for.
#[derive(Clone, Copy)]
struct HistoryColumns {
    spark: usize,
    bucket: usize,
}

/// "  SM%          ▂▃▅▇  85% (60%..90%)": the series in `columns.spark` cells, oldest at the
/// left, each cell the highest sample of its bucket, scaled to the min..max of the samples
/// drawn (printed after the current value) so that a small change shows.
fn history_line(
    label: &str,
    series: &Series,
    columns: HistoryColumns,
    show: &Figure,
    theme: Theme,
) -> Line<'static> {
    let HistoryColumns {
        spark: width,
        bucket,
    } = columns;
    let (mut values, range) = newest_first_buckets(series, bucket, width);
    let now = series.iter().next_back().flatten();
    let figures = match range {
        None => "N/A".to_string(),
        Some((low, high)) => format!(
            "{} ({}..{})",
            now.map_or("N/A".to_string(), show),
            show(low),
            show(high)
        ),
    };
    values.reverse();
    let (low, high) = range.unwrap_or((0.0, 0.0));
    let spark: String = values
        .iter()
        .map(|v| match v {
            None => " ",
            Some(_) if high <= low => LEVELS[4],
            Some(v) => {
                LEVELS[1 + ((v - low) / (high - low) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect();
    Line::from(vec![
        // Cut to its column, so that a long name (cuda:10) moves no sparkline.
        Span::styled(format!("  {label:<LABEL$.LABEL$} "), theme.label()),
        Span::styled(format!("{spark:>width$}"), theme.memory_bar()),
        Span::raw(format!("  {figures}")),
    ])
}

fn children_lines(lines: &mut Vec<Line<'static>>, detail: Option<&ProcessDetail>, theme: Theme) {
    let Some(detail) = detail else {
        section(lines, "Children", theme);
        lines.push(Line::styled("  reading /proc...", theme.dim()));
        return;
    };
    section(
        lines,
        &format!(
            "Children ({})",
            detail.children.len() + detail.children_left_out
        ),
        theme,
    );
    if detail.children.is_empty() {
        lines.push(Line::styled("  none", theme.dim()));
        return;
    }
    lines.push(Line::styled(
        format!("  {:>8} S {:>6} {:>9} NAME", "PID", "CPU%", "RSS"),
        theme.label(),
    ));
    for child in &detail.children {
        lines.push(Line::raw(format!(
            "  {:>8} {} {:>6} {:>9} {}",
            child.pid,
            child
                .state
                .map_or("?".to_string(), |s| escape(&s.to_string()).into_owned()),
            format::percent_f(child.cpu_percent),
            format::opt_bytes(child.rss_bytes),
            escape(&child.comm),
        )));
    }
    if detail.children_left_out > 0 {
        lines.push(Line::styled(
            format!("  and {} more", detail.children_left_out),
            theme.dim(),
        ));
    }
}
