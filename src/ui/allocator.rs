//! The PyTorch panel for the selected process: what its agent says about the caching allocator
//! on each device, with sparklines of allocated and reserved memory.

use ratatui::{
    layout::Rect,
    text::{Line, Span},
    widgets::{Paragraph, RenderDirection, Sparkline},
    Frame,
};

use crate::app::layout::ALLOCATOR_WIDE_WIDTH as WIDE_PANEL_WIDTH;
use crate::app::App;
use crate::format::{self, pad_left_aligned};
use crate::model::history::AllocatorHistory;
use crate::model::{DeviceAllocatorStats, GpuProcess, TorchInfo};
use crate::terminal::theme::Theme;

use super::history::{bucket_size, newest_first_buckets};
use super::processes::selected_process;

/// An agent silent for longer than this is flagged.
const AGENT_SILENT_SECONDS: f64 = 5.0;
const SPARK_LABEL_WIDTH: u16 = 11;

/// Rows the panel asks for below the table at this width: the first device. Beside a wide table
/// it shows as many as fit, so any height will do there.
pub(crate) fn wanted_height(torch: &TorchInfo, width: u16) -> u16 {
    match torch.devices.first() {
        None => 2,
        Some(device) => {
            let lines = figure_lines(device, usize::from(width), Theme::new(false));
            1 + lines.len() as u16 + 1
        }
    }
}

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let Some(process) = selected_process(app) else {
        return;
    };
    let Some(torch) = &process.torch else {
        return;
    };
    if area.height == 0 {
        return;
    }
    let title = pad_left_aligned(&title(process, torch), usize::from(area.width));
    frame.render_widget(
        Paragraph::new(title).style(theme.title()),
        Rect { height: 1, ..area },
    );
    if let Some(age) = torch.age_seconds.filter(|a| *a > AGENT_SILENT_SECONDS) {
        let note = format!(" agent silent for {} ", format::duration(age));
        let width = (note.len() as u16).min(area.width);
        let at = Rect::new(area.right() - width, area.y, width, 1);
        frame.render_widget(Paragraph::new(note).style(theme.warn()), at);
    }
    let mut y = area.y + 1;
    if torch.devices.is_empty() && y < area.bottom() {
        let at = Rect::new(area.x, y, area.width, 1);
        frame.render_widget(
            Paragraph::new(" the agent has not reported any CUDA device yet").style(theme.dim()),
            at,
        );
    }
    let stacked = area.width <= WIDE_PANEL_WIDTH;
    for device in &torch.devices {
        let rest = Rect::new(area.x, y, area.width, area.bottom().saturating_sub(y));
        let used = render_device(frame, rest, app, process.pid, device, stacked, theme);
        if used == 0 {
            break;
        }
        y += used;
    }
}

fn title(process: &GpuProcess, torch: &TorchInfo) -> String {
    let mut parts = vec![format!(" PYTORCH pid {}", process.pid)];
    match (torch.rank, torch.world_size) {
        (Some(r), Some(w)) => parts.push(format!("rank {r}/{w}")),
        (Some(r), None) => parts.push(format!("rank {r}")),
        _ => {}
    }
    // A script that never calls `step()` has no step to show: nothing, rather than N/A twice.
    if let Some(step) = torch.step {
        parts.push(format!("step {step}"));
    }
    if let Some(seconds) = torch.step_time_seconds {
        parts.push(format!("{seconds:.3}s/step"));
    }
    parts.push(format!(
        "torch {}",
        crate::format::text(torch.torch.as_deref())
    ));
    parts.join("  ")
}

/// Draws one device; returns the rows used, 0 when it did not fit.
fn render_device(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    pid: u32,
    device: &DeviceAllocatorStats,
    stacked: bool,
    theme: Theme,
) -> u16 {
    let lines = figure_lines(device, usize::from(area.width), theme);
    let spark_rows: u16 = if stacked { 2 } else { 1 };
    let needed = lines.len() as u16 + spark_rows;
    if needed > area.height {
        return 0;
    }
    let text_area = Rect {
        height: lines.len() as u16,
        ..area
    };
    frame.render_widget(Paragraph::new(lines), text_area);
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

/// The figures as "name value" pairs, packed into as few lines as the width allows.
fn figure_lines(device: &DeviceAllocatorStats, width: usize, theme: Theme) -> Vec<Line<'static>> {
    let b = format::opt_bytes;
    let c = format::count;
    let figures = [
        ("allocated", b(device.allocated_bytes)),
        ("reserved", b(device.reserved_bytes)),
        ("active", b(device.active_bytes)),
        ("inactive-split", b(device.inactive_split_bytes)),
        ("peak", b(device.peak_allocated_bytes)),
        ("requested", b(device.requested_bytes)),
        ("segments", c(device.segments)),
        ("retries", c(device.alloc_retries)),
        ("OOMs", c(device.ooms)),
        ("non-PyTorch", b(device.non_pytorch_bytes)),
    ];
    let mut lines = Vec::new();
    let mut spans = vec![Span::styled(
        format!(" cuda:{}", device.index),
        theme.label(),
    )];
    let mut used = spans[0].content.len();
    for (name, value) in figures {
        let piece_len = 2 + name.len() + 1 + value.len();
        if used + piece_len > width && spans.len() > 1 {
            lines.push(Line::from(std::mem::take(&mut spans)));
            spans.push(Span::raw("       "));
            used = 7;
        }
        spans.push(Span::styled(format!("  {name} "), theme.dim()));
        let style = if is_alarming(name, device) {
            theme.critical()
        } else {
            theme.plain()
        };
        spans.push(Span::styled(value, style));
        used += piece_len;
    }
    lines.push(Line::from(spans));
    lines
}

fn is_alarming(name: &str, device: &DeviceAllocatorStats) -> bool {
    match name {
        "OOMs" => device.ooms.is_some_and(|n| n > 0),
        "retries" => device.alloc_retries.is_some_and(|n| n > 0),
        _ => false,
    }
}

/// Allocated and reserved on one scale, one above the other or side by side.
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
    let top = history
        .reserved_bytes
        .iter()
        .chain(history.allocated_bytes.iter())
        .flatten()
        .fold(0.0f64, f64::max);
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
        frame.render_widget(Paragraph::new(format!(" {name}")).style(theme.dim()), label);
        let width = slot.width.saturating_sub(SPARK_LABEL_WIDTH + 1);
        let spark = Rect::new(label.right(), slot.y, width, 1);
        let bucket = bucket_size(capacity, usize::from(width));
        let scale = top.max(1.0) / 1000.0;
        let data = newest_first_buckets(values, bucket, usize::from(width))
            .into_iter()
            .map(|v| v.map(|v| (v / scale).round() as u64));
        let sparkline = Sparkline::default()
            .data(data)
            .max(1000)
            .direction(RenderDirection::RightToLeft)
            .style(style);
        frame.render_widget(sparkline, spark);
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
}
