//! Balance across GPUs: for each GPU a memory bar and a utilization bar side by side, drawn
//! vertically so that eight GPUs fit in a third of an 80-column screen and a skewed job stands
//! out at a glance. With one GPU there is nothing to balance: the bars are labelled with
//! their figures instead, and without GPUs the panel says so.

use std::fmt::Write as _;

use super::label::Runs;
use ratatui::{layout::Rect, style::Style, Frame};

use crate::app::layout::BALANCE_GROUP_WIDTH as GROUP_WIDTH;
use crate::app::App;
use crate::format::{fit_left_aligned, shown};
use crate::model::GpuSample;
use crate::terminal::theme::Theme;

/// Columns per GPU when [`GROUP_WIDTH`] (memory bar, utilization bar, two spaces) is too wide.
const NARROW_GROUP_WIDTH: u16 = 3;
/// A cell filled by 0 to 8 eighths.
pub(crate) const LEVELS: [&str; 9] = [" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"];
/// A bar whose value is unknown.
pub(crate) const MISSING: &str = "·";

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    if area.height < 3 {
        return;
    }
    let gpus = &app.snapshot.gpus;
    // One text for the title and every label of the frame, each padded as it always was.
    let mut scratch = super::scratch::take();
    let text = &mut scratch.runs;
    text.clear();
    text.push_with(Style::new(), |t| {
        let _ = match gpus.as_slice() {
            [] => t.write_str("BALANCE: no GPUs"),
            [one] => write!(t, "GPU {} mem|util", one.index),
            _ => t.write_str("BALANCE mem|util"),
        };
        fit_left_aligned(t, 0, usize::from(area.width));
    });
    text.end_line(Style::new());
    let title_area = Rect { height: 1, ..area };
    text.render_styled(title_area, frame.buffer_mut(), theme.title());
    let bar_height = area.height - 2;
    let label_y = area.bottom() - 1;
    let group = group_width(app.snapshot.gpus.len(), area.width);
    let mut x = area.x + 1;
    for gpu in &app.snapshot.gpus {
        if x + 2 > area.right() {
            break;
        }
        let utilization = gpu.utilization_percent.map(|u| f64::from(u) / 100.0);
        let top = area.y + 1;
        draw_bar(
            frame,
            x,
            top,
            bar_height,
            gpu.memory_fraction(),
            theme.memory_fill(gpu.memory_fraction()),
            theme,
        );
        draw_bar(
            frame,
            x + 1,
            top,
            bar_height,
            utilization,
            theme.load(utilization),
            theme,
        );
        let label = Rect::new(x, label_y, group.min(area.right() - x), 1);
        text.clear();
        text.push_fmt(Style::new(), format_args!("{}", gpu.index));
        text.end_line(Style::new());
        text.render_styled(label, frame.buffer_mut(), theme.label());
        x += group;
    }
    if let [one] = gpus.as_slice() {
        label_single_gpu(frame, area, one, theme, text);
    }
}

/// Beside the one GPU's bars: their figures, and why there is no balance to show.
fn label_single_gpu(frame: &mut Frame, area: Rect, gpu: &GpuSample, theme: Theme, text: &mut Runs) {
    let left = area.x + 4;
    if left >= area.right() {
        return;
    }
    let width = usize::from(area.right() - left);
    let memory = gpu.memory_fraction().map(|f| f * 100.0);
    for row in 0..3_u16 {
        let y = area.y + 1 + row;
        if y >= area.bottom() {
            break;
        }
        text.clear();
        text.push_with(Style::new(), |t| {
            let _ = match row {
                0 => write!(t, "mem  {}", shown::percent_f(memory)),
                1 => write!(t, "util {}", shown::percent(gpu.utilization_percent)),
                _ => t.write_str("balance: 2+ GPUs"),
            };
            fit_left_aligned(t, 0, width);
        });
        text.end_line(Style::new());
        let style = if row == 2 { theme.dim() } else { theme.plain() };
        let area = Rect::new(left, y, width as u16, 1);
        text.render_styled(area, frame.buffer_mut(), style);
    }
}

fn draw_bar(
    frame: &mut Frame,
    x: u16,
    top: u16,
    height: u16,
    fraction: Option<f64>,
    style: Style,
    theme: Theme,
) {
    let buffer = frame.buffer_mut();
    let bottom = top + height - 1;
    let Some(fraction) = fraction else {
        buffer[(x, bottom)]
            .set_symbol(MISSING)
            .set_style(theme.dim());
        return;
    };
    // As `column_cells`, without its vector each frame.
    let total = (fraction.clamp(0.0, 1.0) * f64::from(height) * 8.0).round() as usize;
    for row in 0..height {
        let eighths = total.saturating_sub(usize::from(row) * 8).min(8);
        buffer[(x, bottom - row)]
            .set_symbol(LEVELS[eighths])
            .set_style(style);
    }
}

/// The fill of each cell of a vertical bar, bottom cell first, in eighths (0..=8): what the
/// bars here and the jobs' levels draw, without its vector; the tests' reference.
#[cfg(test)]
pub(crate) fn column_cells(fraction: f64, height: u16) -> Vec<usize> {
    let total = (fraction.clamp(0.0, 1.0) * f64::from(height) * 8.0).round() as usize;
    (0..usize::from(height))
        .map(|row| total.saturating_sub(row * 8).min(8))
        .collect()
}

fn group_width(gpu_count: usize, width: u16) -> u16 {
    if gpu_count * usize::from(GROUP_WIDTH) < usize::from(width) {
        GROUP_WIDTH
    } else {
        NARROW_GROUP_WIDTH
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_fill_from_the_bottom_in_eighths() {
        assert_eq!(column_cells(1.0, 3), vec![8, 8, 8]);
        assert_eq!(column_cells(0.5, 3), vec![8, 4, 0]);
        assert_eq!(column_cells(0.0, 2), vec![0, 0]);
        assert_eq!(column_cells(7.0, 1), vec![8]);
    }
}
