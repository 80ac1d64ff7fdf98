//! The process table: the rows of [`App::rows`] (filtered and sorted, or the tree), the
//! selected row highlighted and kept in view, tagged rows marked with `*`, and the sort column
//! marked in the header. Rows for pids that /proc does not show still appear, marked "not
//! visible here".

use ratatui::{
    layout::{Constraint, Rect},
    style::Style,
    text::Line,
    widgets::{Cell, Paragraph, Row, Table},
    Frame,
};

use crate::app::view::first_visible_row;
use crate::app::{App, ProcessRow};
use crate::format::{self, NA};
use crate::model::filter::SortKey;
use crate::model::tree::TreeRole;
use crate::model::GpuProcess;
use crate::terminal::theme::Theme;

const NOT_VISIBLE: &str = "not visible here (another container, or exited)";
/// What a process without a GPU shows in the GPU columns of the tree.
const NO_GPU: &str = "-";
const TAG_MARK: char = '*';

/// The rows the table shows, in order; the same rows the selection and actions use.
pub(crate) fn visible_rows(app: &App) -> Vec<ProcessRow<'_>> {
    app.rows()
}

/// The GPU process on the selected row, if there is one (a tree row without a GPU has none).
pub(crate) fn selected_process(app: &App) -> Option<&GpuProcess> {
    app.selected_row().and_then(|row| row.gpus.first().copied())
}

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
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
        .map(|(i, row)| {
            let tagged = app.is_tagged(row);
            let cells = columns.keep(row_cells(row, tagged));
            cells.style(row_style(row, tagged, i == app.view.selected, theme))
        })
        .collect();
    let table = Table::new(body, columns.widths())
        .header(columns.keep(header(app, rows.len())).style(theme.title()))
        .column_spacing(1);
    frame.render_widget(table, area);
    if rows.is_empty() && area.height > 1 {
        let message = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        frame.render_widget(
            Paragraph::new(empty_message(app)).style(theme.dim()),
            message,
        );
    }
}

fn empty_message(app: &App) -> String {
    if app.settings.filter.trim().is_empty() {
        " no processes on the GPUs".to_string()
    } else {
        format!(
            " no process matches \"{}\" (Esc clears the filter)",
            format::escape(&app.settings.filter)
        )
    }
}

/// Selected beats tagged, which beats dimmed (not visible, or only a parent in the tree).
fn row_style(row: &ProcessRow<'_>, tagged: bool, selected: bool, theme: Theme) -> Style {
    if selected {
        theme.selected()
    } else if tagged {
        theme.tagged()
    } else if !row.visible() || matches!(row.tree, Some((_, TreeRole::Ancestor))) {
        theme.dim()
    } else {
        Style::new()
    }
}

/// Widths of PID (with the tag mark), USER, GPU, TYPE, GPU-MEM, SM%, CPU%, RSS, TIME;
/// COMMAND takes the rest.
const WIDTHS: [u16; 9] = [8, 8, 4, 4, 8, 4, 6, 7, 8];
/// The columns each sort key orders.
const SORT_COLUMNS: [(SortKey, usize); 9] = [
    (SortKey::Pid, 0),
    (SortKey::User, 1),
    (SortKey::Gpu, 2),
    (SortKey::GpuMemory, 4),
    (SortKey::Sm, 5),
    (SortKey::Cpu, 6),
    (SortKey::Rss, 7),
    (SortKey::Time, 8),
    (SortKey::Command, 9),
];
const TYPE: usize = 3;
/// RSS and TIME, dropped when the terminal is narrow.
const NARROW_DROPS: [usize; 2] = [7, 8];
/// Below this width RSS and TIME give their room to COMMAND.
const ALL_COLUMNS_WIDTH: u16 = 80;
/// Below this width TYPE (nearly always "C") does too.
const TYPE_WIDTH: u16 = 100;

/// Which columns fit the terminal's width.
struct Columns {
    width: u16,
}

impl Columns {
    fn for_width(width: u16) -> Self {
        Columns { width }
    }

    fn shown(&self, column: usize) -> bool {
        if column == TYPE {
            self.width >= TYPE_WIDTH
        } else {
            self.width >= ALL_COLUMNS_WIDTH || !NARROW_DROPS.contains(&column)
        }
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

fn header(app: &App, count: usize) -> Vec<Cell<'static>> {
    let settings = &app.settings;
    let arrow = if settings.reverse { '▼' } else { '▲' };
    let sorted = SORT_COLUMNS
        .iter()
        .find(|(key, _)| *key == settings.sort)
        .map(|(_, column)| *column);
    let label = |column: usize, text: &str| match sorted {
        // The tree keeps its own order.
        Some(c) if c == column && !settings.tree => format!("{text}{arrow}"),
        _ => text.to_string(),
    };
    let right =
        |column: usize, text: &str| Cell::from(Line::from(label(column, text)).right_aligned());
    vec![
        right(0, "PID"),
        Cell::from(label(1, "USER")),
        right(2, "GPU"),
        Cell::from("TYPE"),
        right(4, "GPU-MEM"),
        right(5, "SM%"),
        right(6, "CPU%"),
        right(7, "RSS"),
        right(8, "TIME"),
        Cell::from(format!(
            "{} {}",
            label(9, "COMMAND"),
            row_summary(app, count)
        )),
    ]
}

/// "(64 rows)", "(2 of 64)" under a filter, "(tree, 12 rows)". The filter text and the
/// tag count are in the status line, which has the room.
fn row_summary(app: &App, shown: usize) -> String {
    let tree = if app.settings.tree { "tree, " } else { "" };
    if app.settings.filter.trim().is_empty() {
        format!("({tree}{shown} rows)")
    } else {
        let total = app.snapshot.processes.len();
        format!("({tree}{shown} of {total})")
    }
}

fn row_cells(row: &ProcessRow<'_>, tagged: bool) -> Vec<Cell<'static>> {
    let right = |text: String| Cell::from(Line::from(text).right_aligned());
    let mark = if tagged { TAG_MARK } else { ' ' };
    let gpu_text = |value: Option<String>| {
        if row.is_gpu() {
            value.unwrap_or_else(|| NA.to_string())
        } else {
            NO_GPU.to_string()
        }
    };
    let gpus = row
        .gpus
        .iter()
        .map(|g| g.gpu.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let command = if row.visible() {
        command_text(row)
    } else {
        NOT_VISIBLE.to_string()
    };
    let prefix = row.tree.map_or("", |(prefix, _)| prefix);
    vec![
        right(format!("{mark}{:>7}", row.pid)),
        Cell::from(format::truncate(&format::text(row.user()), 8)),
        right(gpu_text(Some(gpus))),
        Cell::from(gpu_text(row.kind().map(|k| k.short().to_string()))),
        right(gpu_text(Some(format::opt_bytes_short(
            row.gpu_memory_bytes(),
        )))),
        right(gpu_text(row.sm_percent().map(|s| s.to_string()))),
        right(
            row.cpu_percent()
                .map_or(NA.to_string(), |c| format!("{c:.1}")),
        ),
        right(format::opt_bytes_short(row.rss_bytes())),
        right(format::opt_duration(row.running_seconds())),
        Cell::from(format!("{prefix}{command}")),
    ]
}

/// The command line, prefixed with the rank when an agent reports from inside the process.
fn command_text(row: &ProcessRow<'_>) -> String {
    let command = format::text(row.command().as_deref());
    match row.gpus.iter().find_map(|g| g.torch.as_ref()) {
        Some(torch) => {
            let rank = match (torch.rank, torch.world_size) {
                (Some(r), Some(w)) => format!(" r{r}/{w}"),
                (Some(r), None) => format!(" r{r}"),
                _ => String::new(),
            };
            format!("[torch{rank}] {command}")
        }
        None => command,
    }
}
