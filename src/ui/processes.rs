//! The process table: the rows of [`App::rows`] (filtered and sorted, or the tree), the
//! selected row highlighted and kept in view, tagged rows marked with `*`, and the sort column
//! marked in the header. Rows for pids that /proc does not show still appear, marked "not
//! visible here".

use super::label::Label;
use ratatui::{
    layout::{Constraint, Rect},
    style::Style,
    text::Line,
    widgets::{Cell, Row, Table},
    Frame,
};

use crate::app::columns::{self, Column, Placed};
use crate::app::view::first_visible_row;
use crate::app::{App, ProcessRow};
use crate::format::{self, NA};
use crate::model::tree::TreeRole;
use crate::model::GpuProcess;
use crate::terminal::theme::Theme;

const NOT_VISIBLE: &str = "not visible here (another container, or exited)";
/// What a process without a GPU shows in the GPU columns of the tree.
const NO_GPU: &str = "-";
const TAG_MARK: char = '*';

/// The GPU process on the selected row, if there is one (a tree row without a GPU has none).
pub(crate) fn selected_process(app: &App) -> Option<&GpuProcess> {
    app.selected_row().and_then(|row| row.gpus.first().copied())
}

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    if area.height == 0 {
        return;
    }
    let count = app.row_count();
    let height = usize::from(area.height.saturating_sub(1));
    let first = first_visible_row(app.view.offset, app.view.selected, height);
    let placed = columns::fit_shown(
        area.width,
        app.any_row_has_rank(),
        app.settings.tree,
        &app.hidden_columns(),
    );
    // Only the rows on screen are built: a table of thousands shows a few dozen.
    let body: Vec<Row> = app
        .rows_window(first, height)
        .zip(first..)
        .map(|(row, i)| {
            let tagged = app.is_tagged(&row);
            let cells = placed
                .iter()
                .map(|p| cell(p.column, row_text(p.column, &row, tagged, app)));
            Row::new(cells).style(row_style(&row, tagged, i == app.view.selected, theme))
        })
        .collect();
    let widths: Vec<Constraint> = placed
        .iter()
        .map(|p| match p.column {
            Column::Command => Constraint::Fill(1),
            _ => Constraint::Length(p.width),
        })
        .collect();
    let table = Table::new(body, widths)
        .header(header(app, &placed, count).style(theme.title()))
        .column_spacing(columns::SPACING);
    frame.render_widget(table, area);
    if count == 0 && area.height > 1 {
        let message = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        frame.render_widget(Label::new(empty_message(app)).style(theme.dim()), message);
    }
}

/// A cell aligned as its column wants.
fn cell(column: Column, text: String) -> Cell<'static> {
    if column.right_aligned() {
        Cell::from(Line::from(text).right_aligned())
    } else {
        Cell::from(text)
    }
}

fn empty_message(app: &App) -> String {
    if app.settings.filter.trim().is_empty() {
        if app.settings.user.is_some() || app.settings.gpus.is_some() {
            " no process of the chosen user or GPUs (u chooses the user)".to_string()
        } else {
            " no processes on the GPUs".to_string()
        }
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

fn header(app: &App, placed: &[Placed], count: usize) -> Row<'static> {
    let settings = &app.settings;
    let arrow = if settings.reverse { '▼' } else { '▲' };
    Row::new(placed.iter().map(|p| {
        let title = p.column.title();
        // The tree keeps its own order.
        let sorted = !settings.tree
            && p.column.shows_sort_arrow()
            && p.column.sort_key() == Some(settings.sort);
        let mut text = if sorted {
            format!("{title}{arrow}")
        } else {
            title.to_string()
        };
        if p.column == Column::Command {
            text = format!("{text} {}", row_summary(app, count));
        }
        cell(p.column, text)
    }))
}

/// "(64 rows)", "(2 of 64)" under a filter, "(tree, 12 rows)". The filter text and the
/// tag count are in the status line, which has the room.
fn row_summary(app: &App, shown: usize) -> String {
    let tree = if app.settings.tree { "tree, " } else { "" };
    if app.settings.filtering() {
        let total = app.snapshot.processes.len();
        format!("({tree}{shown} of {total})")
    } else {
        format!("({tree}{shown} rows)")
    }
}

/// The text of one cell of `row`.
fn row_text(column: Column, row: &ProcessRow<'_>, tagged: bool, app: &App) -> String {
    let gpu_text = |value: Option<String>| {
        if row.is_gpu() {
            value.unwrap_or_else(|| NA.to_string())
        } else {
            NO_GPU.to_string()
        }
    };
    match column {
        Column::Pid => {
            let mark = if tagged { TAG_MARK } else { ' ' };
            format!("{mark}{:>7}", row.pid)
        }
        Column::User => format::truncate(&format::text(row.user()), 8),
        Column::Nice => row.nice().map_or(NA.to_string(), |n| n.to_string()),
        Column::State => row.state().map_or(NA.to_string(), |c| {
            format::escape(&c.to_string()).into_owned()
        }),
        Column::Gpu => gpu_text(Some(
            row.gpus
                .iter()
                .map(|g| g.gpu.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )),
        Column::Kind => gpu_text(row.kind().map(|k| k.short().to_string())),
        Column::GpuMemory => gpu_text(Some(format::opt_bytes_short(row.gpu_memory_bytes()))),
        Column::GpuMemoryPercent => gpu_text(
            row.gpu_memory_percent(&app.snapshot)
                .map(|p| format!("{p:.0}")),
        ),
        Column::Sm => gpu_text(row.sm_percent().map(|s| s.to_string())),
        Column::MemoryBandwidth => gpu_text(
            row.gpu_share(|g| g.memory_bandwidth_percent)
                .map(|s| s.to_string()),
        ),
        Column::Encoder => gpu_text(row.gpu_share(|g| g.encoder_percent).map(|s| s.to_string())),
        Column::Decoder => gpu_text(row.gpu_share(|g| g.decoder_percent).map(|s| s.to_string())),
        Column::Cpu => row
            .cpu_percent()
            .map_or(NA.to_string(), |c| format!("{c:.1}")),
        Column::HostMemoryPercent => row
            .host_memory_percent(&app.snapshot)
            .map_or(NA.to_string(), |p| format!("{p:.1}")),
        Column::Rss => format::opt_bytes_short(row.rss_bytes()),
        Column::Start => row
            .start_unix_seconds(&app.snapshot)
            .map_or(NA.to_string(), |start| {
                start_text(start, app.snapshot.unix_seconds, app.utc)
            }),
        Column::Time => format::opt_duration(row.running_seconds()),
        Column::Rank => row.rank_text().unwrap_or_else(|| NO_GPU.to_string()),
        Column::Container => row
            .gpus
            .iter()
            .find_map(|g| g.cgroup.as_ref())
            .map_or(NA.to_string(), |c| {
                format::truncate(&format::escape(&c.label()), 18)
            }),
        Column::Command => command_text(row, app.view.command_scroll),
    }
}

/// When a process started, in the header clock's zone (local, or UTC under `--utc`): "14:05"
/// within the last day, else "Nov30", as htop's START.
fn start_text(start: f64, now: f64, utc: bool) -> String {
    let Ok(at) = jiff::Timestamp::from_second(start.max(0.0).floor() as i64) else {
        return NA.to_string();
    };
    let zoned = at.to_zoned(super::header::zone(utc));
    if now - start < 86_400.0 {
        return zoned.strftime("%H:%M").to_string();
    }
    zoned.strftime("%b%d").to_string()
}

/// The tree guides and the command, scrolled `scroll` characters to the left.
fn command_text(row: &ProcessRow<'_>, scroll: usize) -> String {
    let prefix = row.tree.map_or("", |(prefix, _)| prefix);
    let command = row
        .display_command()
        .unwrap_or_else(|| NOT_VISIBLE.to_string());
    format!("{prefix}{command}").chars().skip(scroll).collect()
}

#[cfg(test)]
mod tests {
    use super::start_text;

    #[test]
    fn start_is_a_clock_time_today_and_a_date_before() {
        // 2025-06-01T12:34:56Z
        let now = 1_748_781_296.0;
        assert_eq!(start_text(now - 3600.0, now, true), "11:34");
        assert_eq!(start_text(now - 3.0 * 86_400.0, now, true), "May29");
        assert_eq!(start_text(-5.0, now, true), "Jan01");
    }
}
