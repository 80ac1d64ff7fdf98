//! The PyTorch panel for the selected process. Top to bottom, as rows allow: how close each of
//! its devices is to OOM (`cuda:1 = GPU 3`, the GPU's total, the headroom left on it and the
//! memory the allocator caches), the all-ranks table when the process is part of a job, then
//! each device's `memory_stats` figures ([`super::allocator_figures`]) with auto-scaled
//! sparklines of allocated and reserved. A selected row without an agent gets one line saying
//! so; the panel's full height is the same for every row with one, so that moving among them
//! resizes nothing.

use super::label::{Label, Runs};
use ratatui::{
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::{RenderDirection, Sparkline},
    Frame,
};

use crate::app::layout::ALLOCATOR_WIDE_WIDTH as WIDE_PANEL_WIDTH;
use crate::app::ranks::job_of;
use crate::app::App;
use crate::format::{self, shown};
use crate::model::history::AllocatorHistory;
use crate::model::{DeviceAllocatorStats, GpuProcess, Snapshot, TorchInfo};
use crate::terminal::theme::Theme;
use std::fmt::Write as _;

use super::allocator_figures::{figure_line_count, push_figure_lines};
use super::history::{autoscaled, bucket_size, newest_first_buckets, AUTOSCALE_TOP};
use super::processes::selected_process;
use super::ranks;

/// An agent silent for longer than this is flagged.
const AGENT_SILENT_SECONDS: f64 = 5.0;
const SPARK_LABEL_WIDTH: u16 = 11;
/// Columns for the min and the max printed beside a sparkline.
const SPARK_RANGE_WIDTH: u16 = 8;

/// Rows the panel asks for below the table at this width when the selected row has an agent:
/// the least worth drawing (the title, the OOM lines and the ranks table) and the full height
/// (with the first device's figures and one sparkline row, which need all their rows or none).
/// They depend on the snapshot only, so that moving among rows with an agent resizes nothing:
/// each is the most any process with an agent needs, plus the largest job's ranks table.
/// (0, 0) when no process has an agent.
pub(crate) fn wanted_heights(snapshot: &Snapshot, width: u16) -> (u16, u16) {
    let table = snapshot
        .jobs
        .iter()
        .map(ranks::wanted_height)
        .max()
        .unwrap_or(0);
    let (mut least, mut full) = (0, 0);
    for torch in snapshot.processes.iter().filter_map(|p| p.torch.as_ref()) {
        let oom = 1 + torch.devices.len().max(1) as u16;
        let figures = torch.devices.first().map_or(0, |device| {
            figure_line_count(device, torch, usize::from(width)) as u16
        });
        least = least.max(oom);
        full = full.max(oom + figures + 1);
    }
    if full == 0 {
        (0, 0)
    } else {
        (least + table, full + table)
    }
}

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    if area.height == 0 {
        return;
    }
    let process = selected_process(app);
    let Some((process, torch)) = process.and_then(|p| Some((p, p.torch.as_ref()?))) else {
        render_without_agent(frame, area, process, app.effective_uid, theme);
        return;
    };
    let mut scratch = super::scratch::take();
    let lines = &mut scratch.runs;
    lines.clear();
    lines.push_with(Style::new(), |t| {
        write_title(t, process, torch);
        // Padded (or cut) to the width, as the title always was.
        format::fit_left_aligned(t, 0, usize::from(area.width));
    });
    lines.end_line(Style::new());
    let buf = frame.buffer_mut();
    lines.render_styled(Rect { height: 1, ..area }, buf, theme.title());
    if let Some(age) = torch.age_seconds.filter(|a| *a > AGENT_SILENT_SECONDS) {
        let note = format!(" agent silent for {} ", format::duration(age));
        let width = (note.len() as u16).min(area.width);
        let at = Rect::new(area.right() - width, area.y, width, 1);
        frame.render_widget(Label::new(note).style(theme.warn()), at);
    }
    let mut y = area.y + 1;
    let rest = |y: u16| Rect::new(area.x, y, area.width, area.bottom().saturating_sub(y));
    if torch.devices.is_empty() {
        // The agent reads no device before the program has initialized CUDA itself (it never
        // does so on its own), so a CPU-only process never has one: not a pending report.
        let text = if process.no_gpu {
            " no GPU memory: no CUDA device in use (the agent reports one once the program has \
             initialized CUDA)"
        } else {
            " no CUDA device reported yet: the agent reports one once the program has \
             initialized CUDA"
        };
        y += line(frame, rest(y), Line::styled(text, theme.dim()));
    }
    let devices = ordered_devices(process, torch);
    for device in &devices {
        if y >= area.bottom() {
            break;
        }
        lines.clear();
        push_oom_line(lines, device, theme);
        frame.render_widget(
            &*lines,
            Rect {
                height: 1,
                ..rest(y)
            },
        );
        y += 1;
    }
    // Handed back before the devices' figures take it.
    drop(scratch);
    if let Some(job) = job_of(&app.snapshot, process.pid) {
        y += ranks::render(frame, rest(y), &app.snapshot, job, theme);
    }
    let stacked = area.width <= WIDE_PANEL_WIDTH;
    for device in &devices {
        let used = render_device(
            frame,
            rest(y),
            app,
            process.pid,
            device,
            torch,
            stacked,
            theme,
        );
        if used == 0 {
            break;
        }
        y += used;
    }
}

/// The panel's line for a row without an agent: the pid, and why there is no panel.
/// Another user's process under a monitor that is not root's may well have an agent: it
/// speaks only to root's monitor or its own user's, so the advice is sudo, not `torchtop run`
/// (as `s`, `S` and `P` say on such a row).
fn render_without_agent(
    frame: &mut Frame,
    area: Rect,
    process: Option<&GpuProcess>,
    effective_uid: u32,
    theme: Theme,
) {
    let others = |p: &GpuProcess| effective_uid != 0 && p.uid.is_some_and(|u| u != effective_uid);
    let silent;
    let (title, text) = match process {
        Some(p) if p.agent_silent_seconds.is_some() => {
            let seconds = p.agent_silent_seconds.unwrap_or_default();
            silent = format!(
                "  its agent has said nothing for {} since torchtop connected: {}",
                format::span(seconds.round()),
                p.why_agent_silent()
            );
            (format!(" PYTORCH pid {}", p.pid), silent.as_str())
        }
        Some(p) if !p.visible => (
            format!(" PYTORCH pid {}", p.pid),
            "  not in this machine's /proc (it has exited, or runs in another container): no \
             agent to reach",
        ),
        Some(p) if others(p) => (
            format!(" PYTORCH pid {}", p.pid),
            "  another user's process: run torchtop with sudo to reach its agent, if it has one",
        ),
        Some(p) => (
            format!(" PYTORCH pid {}", p.pid),
            "  no torchtop agent in this process: start it with `torchtop run -- …` to see its allocator",
        ),
        None => (" PYTORCH".to_string(), "  no process selected"),
    };
    let line = Line::from(vec![
        Span::styled(title, theme.title()),
        Span::styled(text, theme.dim()),
    ]);
    frame.render_widget(Label::new(line), Rect { height: 1, ..area });
}

/// Draws one line at the top of `area`; returns the rows used (0 when there is none left).
fn line(frame: &mut Frame, area: Rect, line: Line<'static>) -> u16 {
    if area.height == 0 {
        return 0;
    }
    frame.render_widget(Label::new(line), Rect { height: 1, ..area });
    1
}

/// The process's devices, the one on the selected row's GPU first.
fn ordered_devices<'a>(
    process: &GpuProcess,
    torch: &'a TorchInfo,
) -> Vec<&'a DeviceAllocatorStats> {
    let mut devices: Vec<&DeviceAllocatorStats> = torch.devices.iter().collect();
    devices.sort_by_key(|d| (d.gpu != Some(process.gpu) || process.no_gpu, d.index));
    devices
}

/// " PYTORCH pid 42  rank 1/2  step 7  0.500s/step  torch 2.11.0", written at the end of
/// `out`; the rank and the step only where the agent reports them.
fn write_title(out: &mut String, process: &GpuProcess, torch: &TorchInfo) {
    // Writing into a String does not fail.
    let _ = write!(out, " PYTORCH pid {}", process.pid);
    let _ = match (torch.rank, torch.world_size) {
        (Some(r), Some(w)) => write!(out, "  rank {r}/{w}"),
        (Some(r), None) => write!(out, "  rank {r}"),
        _ => Ok(()),
    };
    // A script that never calls `step()` has no step to show: nothing, rather than N/A twice.
    if let Some(step) = torch.step {
        let _ = write!(out, "  step {step}");
    }
    if let Some(seconds) = torch.step_time_seconds {
        let _ = write!(out, "  {}/step", format::shown::step_time(seconds));
    }
    let version = format::escape(torch.torch.as_deref().unwrap_or(format::NA));
    let _ = write!(out, "  torch {version}");
}

#[cfg(test)]
fn title(process: &GpuProcess, torch: &TorchInfo) -> String {
    let mut out = String::new();
    write_title(&mut out, process, torch);
    out
}

/// How close to OOM: the GPU's total, the headroom on it, and what the allocator caches, as
/// figures and as shares of the device; one line written into `out`.
fn push_oom_line(out: &mut Runs, device: &DeviceAllocatorStats, theme: Theme) {
    let total = device.device_total_bytes;
    let with_share = |t: &mut String, bytes: Option<u64>| {
        let _ = write!(t, "{}", shown::opt_bytes(bytes));
        if let (Some(b), Some(t_)) = (bytes, total) {
            if t_ > 0 {
                let _ = write!(t, " ({:.0}%)", b as f64 * 100.0 / t_ as f64);
            }
        }
    };
    let headroom = device.headroom_bytes;
    let low = match (headroom, total) {
        (Some(h), Some(t)) => (h as f64) < 0.05 * t as f64,
        _ => false,
    };
    let cached = device.cached_bytes();
    // `cuda:1 = GPU 3`, or `cuda:1 = GPU ?` where the physical GPU could not be told.
    match device.gpu {
        Some(gpu) => out.push_fmt(
            theme.label(),
            format_args!(" cuda:{} = GPU {gpu}", device.index),
        ),
        None => out.push_fmt(
            theme.label(),
            format_args!(" cuda:{} = GPU ?", device.index),
        ),
    }
    out.push(theme.dim(), "  total ");
    out.push_fmt(theme.plain(), format_args!("{}", shown::opt_bytes(total)));
    out.push(theme.dim(), "  headroom ");
    let headroom_style = if low { theme.critical() } else { theme.plain() };
    out.push_with(headroom_style, |t| with_share(t, headroom));
    out.push(theme.dim(), "  cached ");
    out.push_with(theme.plain(), |t| with_share(t, cached));
    out.end_line(Style::new());
}

/// Draws one device's figures and sparklines; returns the rows used, 0 when they did not fit.
#[allow(clippy::too_many_arguments)]
fn render_device(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    pid: u32,
    device: &DeviceAllocatorStats,
    torch: &TorchInfo,
    stacked: bool,
    theme: Theme,
) -> u16 {
    let width = usize::from(area.width);
    let count = u16::try_from(figure_line_count(device, torch, width)).unwrap_or(u16::MAX);
    let spark_rows: u16 = if stacked { 2 } else { 1 };
    let needed = count.saturating_add(spark_rows);
    if needed > area.height {
        return 0;
    }
    let text_area = Rect {
        height: count,
        ..area
    };
    let mut scratch = super::scratch::take();
    let lines = &mut scratch.runs;
    lines.clear();
    push_figure_lines(lines, device, torch, width, theme);
    frame.render_widget(&*lines, text_area);
    drop(scratch);
    let spark_area = Rect {
        y: text_area.bottom(),
        height: spark_rows,
        ..area
    };
    let empty = AllocatorHistory::default();
    let history = app
        .history
        .allocators
        .get(&(pid, device.index))
        .unwrap_or(&empty);
    render_sparklines(frame, spark_area, app.history.capacity(), history, theme);
    needed
}

/// Allocated and reserved, side by side on one row (or one above the other on two), each
/// auto-scaled to its window with the window's min and max beside it: those of the raw
/// samples, so that the max is never below the figure printed above; a bar is its bucket's
/// highest sample.
fn render_sparklines(
    frame: &mut Frame,
    area: Rect,
    capacity: usize,
    history: &AllocatorHistory,
    theme: Theme,
) {
    let series = [
        (
            "allocated",
            &history.allocated_bytes,
            theme.utilization_bar(),
        ),
        ("reserved", &history.reserved_bytes, theme.memory_bar()),
    ];
    let slots: Vec<Rect> = if area.height >= 2 {
        (0..2)
            .map(|i| Rect::new(area.x, area.y + i, area.width, 1))
            .collect()
    } else {
        let half = area.width / 2;
        vec![
            Rect::new(area.x, area.y, half, 1),
            Rect::new(area.x + half, area.y, area.width - half, 1),
        ]
    };
    for ((name, values, style), slot) in series.into_iter().zip(slots) {
        let label = Rect::new(slot.x, slot.y, SPARK_LABEL_WIDTH.min(slot.width), 1);
        frame.render_widget(Label::new(format!(" {name}")).style(theme.dim()), label);
        let width = slot
            .width
            .saturating_sub(SPARK_LABEL_WIDTH + 2 * SPARK_RANGE_WIDTH + 1);
        let bucket = bucket_size(capacity, usize::from(width));
        let (buckets, range) = newest_first_buckets(values, bucket, usize::from(width));
        let data = autoscaled(&buckets, range);
        let short = |v: f64| format::bytes_short(v as u64);
        let (low, high) = range.map_or((format::NA.to_string(), String::new()), |(lo, hi)| {
            (short(lo), short(hi))
        });
        let min_at = Rect::new(label.right(), slot.y, SPARK_RANGE_WIDTH, 1);
        let spark = Rect::new(min_at.right(), slot.y, width, 1);
        let max_at = Rect::new(spark.right() + 1, slot.y, SPARK_RANGE_WIDTH, 1);
        frame.render_widget(
            Label::new(format::pad_right_aligned(&low, 7)).style(theme.dim()),
            min_at,
        );
        let sparkline = Sparkline::default()
            .data(data)
            .max(AUTOSCALE_TOP)
            .direction(RenderDirection::RightToLeft)
            .style(style);
        frame.render_widget(sparkline, spark);
        frame.render_widget(Label::new(high).style(theme.dim()), max_at);
    }
}

#[cfg(test)]
mod title_tests {
    use super::*;

    #[test]
    fn a_script_without_steps_shows_no_step_figures() {
        let process = GpuProcess::new(42, 0, crate::model::ProcessKind::Compute);
        let mut torch = TorchInfo {
            torch: Some("2.11.0".into()),
            ..TorchInfo::default()
        };
        assert_eq!(title(&process, &torch), " PYTORCH pid 42  torch 2.11.0");
        torch.step = Some(7);
        torch.step_time_seconds = Some(0.5);
        torch.rank = Some(1);
        torch.world_size = Some(2);
        assert_eq!(
            title(&process, &torch),
            " PYTORCH pid 42  rank 1/2  step 7  0.500s/step  torch 2.11.0"
        );
    }

    #[test]
    fn the_oom_line_gives_total_headroom_and_cache_with_shares() {
        const GIB: u64 = 1 << 30;
        let device = DeviceAllocatorStats {
            index: 1,
            gpu: Some(3),
            allocated_bytes: Some(30 * GIB),
            reserved_bytes: Some(38 * GIB),
            device_total_bytes: Some(80 * GIB),
            headroom_bytes: Some(20 * GIB),
            ..Default::default()
        };
        let oom_text = |device: &DeviceAllocatorStats| {
            let mut runs = Runs::default();
            push_oom_line(&mut runs, device, Theme::new(false));
            let area = Rect::new(0, 0, 100, 1);
            let mut buffer = ratatui::buffer::Buffer::empty(area);
            ratatui::widgets::Widget::render(&runs, area, &mut buffer);
            let text: String = buffer
                .content
                .iter()
                .map(ratatui::buffer::Cell::symbol)
                .collect();
            text.trim_end().to_string()
        };
        assert_eq!(
            oom_text(&device),
            " cuda:1 = GPU 3  total 80.0GiB  headroom 20.0GiB (25%)  cached 8.0GiB (10%)"
        );
        let unknown = DeviceAllocatorStats::default();
        assert_eq!(
            oom_text(&unknown),
            " cuda:0 = GPU ?  total N/A  headroom N/A  cached N/A"
        );
    }
}
