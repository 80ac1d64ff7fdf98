//! The process table: one row per (process, GPU) pair, the selected row highlighted and kept in
//! view. Rows for pids that /proc does not show still appear, marked "not visible here".

use ratatui::{
    layout::{Constraint, Rect},
    text::Line,
    widgets::{Cell, Paragraph, Row, Table},
    Frame,
};

use crate::app::App;
use crate::model::GpuProcess;

use super::format::{self, NA};
use super::state::first_visible_row;
use super::theme::Theme;

const NOT_VISIBLE: &str = "not visible here (another container, or exited)";

/// The rows the table shows, in order. Filtering and sorting hook in here.
pub fn visible_rows(app: &App) -> Vec<&GpuProcess> {
    app.snapshot.processes.iter().collect()
}

/// The process on the selected row, if there is one.
pub fn selected_process(app: &App) -> Option<&GpuProcess> {
    visible_rows(app).get(app.view.selected).copied()
}

pub fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    if area.height == 0 {
        return;
    }
    let rows = visible_rows(app);
    let height = usize::from(area.height.saturating_sub(1));
    let first = first_visible_row(app.view.offset, app.view.selected, height);
    let body: Vec<Row> = rows
        .iter()
        .enumerate()
        .skip(first)
        .take(height)
        .map(|(i, process)| {
            let row = table_row(process, theme);
            if i == app.view.selected {
                row.style(theme.selected())
            } else {
                row
            }
        })
        .collect();
    let table = Table::new(body, widths())
        .header(header(rows.len()).style(theme.title()))
        .column_spacing(1);
    frame.render_widget(table, area);
    if rows.is_empty() && area.height > 1 {
        let message = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        frame.render_widget(
            Paragraph::new(" no processes on the GPUs").style(theme.dim()),
            message,
        );
    }
}

fn widths() -> [Constraint; 10] {
    [
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(3),
        Constraint::Length(4),
        Constraint::Length(7),
        Constraint::Length(4),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Fill(1),
    ]
}

fn header(count: usize) -> Row<'static> {
    let right = |text: &str| Cell::from(Line::from(text.to_string()).right_aligned());
    Row::new(vec![
        right("PID"),
        Cell::from("USER"),
        right("GPU"),
        Cell::from("TYPE"),
        right("GPU-MEM"),
        right("SM%"),
        right("CPU%"),
        right("RSS"),
        right("TIME"),
        Cell::from(format!("COMMAND ({count} rows)")),
    ])
}

fn table_row(process: &GpuProcess, theme: Theme) -> Row<'static> {
    let right = |text: String| Cell::from(Line::from(text).right_aligned());
    let cpu = process
        .cpu_percent
        .map_or(NA.to_string(), |c| format!("{c:.1}"));
    let sm = process.sm_percent.map_or(NA.to_string(), |s| s.to_string());
    let command = if process.visible {
        command_text(process)
    } else {
        NOT_VISIBLE.to_string()
    };
    let row = Row::new(vec![
        right(process.pid.to_string()),
        Cell::from(format::truncate(process.user.as_deref().unwrap_or(NA), 8)),
        right(process.gpu.to_string()),
        Cell::from(process.kind.short()),
        right(format::opt_bytes_short(process.gpu_memory_bytes)),
        right(sm),
        right(cpu),
        right(format::opt_bytes_short(process.rss_bytes)),
        right(format::opt_duration(process.running_seconds)),
        Cell::from(command),
    ]);
    if process.visible {
        row
    } else {
        row.style(theme.dim())
    }
}

/// The command line, prefixed with the rank when an agent reports from inside the process.
fn command_text(process: &GpuProcess) -> String {
    let command = process.command.as_deref().unwrap_or(NA);
    match &process.torch {
        Some(torch) => {
            let rank = match (torch.rank, torch.world_size) {
                (Some(r), Some(w)) => format!(" r{r}/{w}"),
                (Some(r), None) => format!(" r{r}"),
                _ => String::new(),
            };
            format!("[torch{rank}] {command}")
        }
        None => command.to_string(),
    }
}
