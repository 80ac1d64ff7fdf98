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
    let columns = Columns::for_width(area.width);
    let body: Vec<Row> = rows
        .iter()
        .enumerate()
        .skip(first)
        .take(height)
        .map(|(i, process)| {
            let row = table_row(process, &columns, theme);
            if i == app.view.selected {
                row.style(theme.selected())
            } else {
                row
            }
        })
        .collect();
    let table = Table::new(body, columns.widths())
        .header(columns.keep(header(rows.len())).style(theme.title()))
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

/// Widths of PID, USER, GPU, TYPE, GPU-MEM, SM%, CPU%, RSS, TIME; COMMAND takes the rest.
const WIDTHS: [u16; 9] = [7, 8, 3, 4, 7, 4, 6, 7, 8];
/// RSS and TIME, dropped first when the terminal is narrow.
const OPTIONAL: [usize; 2] = [7, 8];
/// Below this width RSS and TIME give their room to COMMAND.
const ALL_COLUMNS_WIDTH: u16 = 80;

/// Which columns fit: all of them, or all but RSS and TIME.
struct Columns {
    all: bool,
}

impl Columns {
    fn for_width(width: u16) -> Self {
        Columns {
            all: width >= ALL_COLUMNS_WIDTH,
        }
    }

    fn shown(&self, column: usize) -> bool {
        self.all || !OPTIONAL.contains(&column)
    }

    fn widths(&self) -> Vec<Constraint> {
        let mut widths: Vec<Constraint> = (0..WIDTHS.len())
            .filter(|c| self.shown(*c))
            .map(|c| Constraint::Length(WIDTHS[c]))
            .collect();
        widths.push(Constraint::Fill(1));
        widths
    }

    /// The row with the cells of hidden columns left out.
    fn keep(&self, cells: Vec<Cell<'static>>) -> Row<'static> {
        Row::new(
            cells
                .into_iter()
                .enumerate()
                .filter(|(c, _)| *c >= WIDTHS.len() || self.shown(*c))
                .map(|(_, cell)| cell),
        )
    }
}

fn header(count: usize) -> Vec<Cell<'static>> {
    let right = |text: &str| Cell::from(Line::from(text.to_string()).right_aligned());
    vec![
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
    ]
}

fn table_row(process: &GpuProcess, columns: &Columns, theme: Theme) -> Row<'static> {
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
    let row = columns.keep(vec![
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
