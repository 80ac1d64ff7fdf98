//! The process table: the rows of [`App::rows`] (filtered and sorted, or the tree), the
//! selected row highlighted and kept in view, tagged rows marked with `*`, and the sort column
//! marked in the header. Rows for pids that /proc does not show still appear, marked "not
//! visible here".

use std::cell::OnceCell;
use std::fmt::Write as _;

use jiff::tz::TimeZone;

use super::label::{self, Label};
use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Flex, Layout, Rect},
    style::Style,
    text::{Line, Text},
    widgets::Widget,
    Frame,
};

use crate::app::columns::{self, Column, Placed};
use crate::app::view::first_visible_row;
use crate::app::{App, ProcessRow};
use crate::format::{self, NA};
use crate::model::tree::TreeRole;
use crate::model::{GpuProcess, PlacementLabel, Snapshot};
use crate::terminal::theme::Theme;

const NOT_VISIBLE: &str = "not visible here (another container, or exited)";
/// What a process without a GPU shows in the GPU columns of the tree.
const NO_GPU: &str = "-";
const TAG_MARK: char = '*';

/// The GPU process on the selected row, if there is one (a tree row without a GPU has none).
pub(crate) fn selected_process(app: &App) -> Option<&GpuProcess> {
    app.selected_row().and_then(|row| row.gpus.first())
}

/// Draws the table as ratatui's `Table` would (a header row in the title style, one row per
/// process in its row style, each cell's text in its column), but straight into the buffer:
/// each cell's text is written into one reused `String` and put cell by cell, without a
/// `Row`, `Cell`, `Text` and grapheme walk per cell and frame.
pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    if area.height == 0 {
        return;
    }
    let count = app.row_count();
    let height = usize::from(area.height.saturating_sub(1));
    let first = first_visible_row(app.view.offset, app.view.selected, height, count);
    let mut scratch = super::scratch::take();
    let scratch = &mut *scratch;
    let (with_rank, tree) = (app.any_row_has_rank(), app.settings.tree);
    let hidden = |c| app.is_column_hidden(c);
    columns::fit_shown_into(area.width, with_rank, tree, hidden, &mut scratch.placed);
    let (placed, text) = (&scratch.placed, &mut scratch.text);
    let lefts = column_areas(
        placed,
        area,
        &mut scratch.laid_out,
        &mut scratch.column_areas,
    );
    let lefts = lefts.iter().map(|c| Rect {
        x: area.x + c.x,
        y: area.y,
        ..*c
    });
    let buf = frame.buffer_mut();
    // Asked of the system once a frame, and only when START is shown.
    let zone = OnceCell::new();
    let header = Rect { height: 1, ..area };
    buf.set_style(header, theme.title());
    for (p, column) in placed.iter().zip(lefts.clone()) {
        text.clear();
        header_text(app, p.column, count, text);
        let at = Rect {
            y: header.y,
            ..column
        };
        put(buf, at, text, p.column);
    }
    // Only the rows on screen are drawn: a table of thousands shows a few dozen.
    let ys = area.y + 1..area.bottom();
    for ((row, i), y) in app.rows_window(first, height).zip(first..).zip(ys) {
        let tagged = app.is_tagged(&row);
        let style = row_style(&row, tagged, i == app.view.selected, theme);
        // Most rows have the default style, which changes no cell.
        if style != Style::new() {
            buf.set_style(
                Rect {
                    y,
                    height: 1,
                    ..area
                },
                style,
            );
        }
        for (p, column) in placed.iter().zip(lefts.clone()) {
            text.clear();
            row_text(*p, &row, tagged, app, &zone, text);
            put(buf, Rect { y, ..column }, text, p.column);
        }
    }
    if count == 0 && area.height > 1 {
        let message = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        frame.render_widget(Label::new(empty_message(app)).style(theme.dim()), message);
    }
}

/// Where each column's cells go across a row of `area`, from its left edge, laid out as `Table`
/// lays out its columns: the fixed widths, COMMAND filling the rest, shrunk by the same solver
/// when the columns do not fit. Laid out again only when the columns or the width changed
/// since `laid_out`, into `areas`.
fn column_areas<'s>(
    placed: &[Placed],
    area: Rect,
    laid_out: &mut Option<(u16, Vec<Placed>)>,
    areas: &'s mut Vec<Rect>,
) -> &'s [Rect] {
    if laid_out
        .as_ref()
        .is_some_and(|(width, was)| *width == area.width && was == placed)
    {
        return areas;
    }
    let widths = placed.iter().map(|p| match p.column {
        Column::Command => Constraint::Fill(1),
        _ => Constraint::Length(p.width),
    });
    let split = Layout::horizontal(widths)
        .flex(Flex::Start)
        .spacing(columns::SPACING)
        .split(Rect::new(0, 0, area.width, 1));
    areas.clear();
    areas.extend(split.iter().map(|c| Rect::new(c.x, 0, c.width, 1)));
    *laid_out = Some((area.width, placed.to_vec()));
    areas
}

/// `text` in `area` (one row), aligned as `column` wants, as a `Table` cell draws it, the cells'
/// styles kept, but for a text too wide: a `Table` cuts it at the right edge, or at the left
/// when right-aligned, which shows a figure as other digits (the last 8 of a 10-digit pid read
/// as another pid). Here any text too wide is cut at the right and, when real text was cut,
/// ends in [`label::CUT_MARK`]. Text that is not one cell a character goes through ratatui's own
/// `Text`.
fn put(buf: &mut Buffer, area: Rect, text: &str, column: Column) {
    let area = area.intersection(buf.area);
    if area.is_empty() || text.is_empty() {
        return;
    }
    if !text.chars().all(label::is_one_cell) {
        let line = Line::from(text);
        if column.right_aligned() && line.width() <= usize::from(area.width) {
            Text::from(line.right_aligned()).render(area, buf);
            return;
        }
        let text = Text::from(text);
        (&text).render(area, buf);
        let first = text.lines.first();
        if first.is_some_and(|line| label::line_loses_text(line, area.width)) {
            label::mark_cut(buf, area, area.y);
        }
        return;
    }
    let (len, width) = (text.chars().count(), usize::from(area.width));
    let indent = if column.right_aligned() && len <= width {
        width - len
    } else {
        0
    };
    // The cell's row of the buffer, as one slice: no position arithmetic per character.
    let start = buf.index_of(area.x + indent as u16, area.y);
    let cells = &mut buf.content[start..start + width - indent];
    for (cell, c) in cells.iter_mut().zip(text.chars()) {
        cell.set_char(c);
    }
    if len > width && text.chars().skip(width).any(|c| c != ' ') {
        label::mark_cut(buf, area, area.y);
    }
}

/// Why the table is empty, naming the filter that emptied it: "no processes on the GPUs"
/// under `m` would say the GPUs are idle when only others' processes are on them.
fn empty_message(app: &App) -> String {
    let settings = &app.settings;
    if settings.filter.trim().is_empty() {
        // Only once a driver has counted the GPUs: while NVML loads, none is listed yet.
        let driver = &app.snapshot.driver;
        let counted = driver.gpu_count.is_some() || driver.amd_gpu_count.is_some();
        let missing = (settings.gpus.as_deref())
            .filter(|_| counted)
            .and_then(|gpus| format::missing_gpus(gpus, app.snapshot.gpus.len()));
        let chosen = settings.user.is_some() || settings.gpus.is_some();
        if let Some(missing) = missing {
            format!(" {missing}; g chooses another")
        } else if settings.mine.is_some() && chosen {
            " no process of yours among the chosen user or GPUs (m shows everyone's)".to_string()
        } else if settings.mine.is_some() {
            " no process of yours on the GPUs (m shows everyone's)".to_string()
        } else if chosen {
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

/// A column's title, the sort arrow on the sorted one, and the row count after COMMAND.
fn header_text(app: &App, column: Column, count: usize, out: &mut String) {
    let settings = &app.settings;
    out.push_str(column.title());
    // The tree keeps its own order.
    let sorted =
        !settings.tree && column.shows_sort_arrow() && column.sort_key() == Some(settings.sort);
    if sorted {
        out.push(if settings.reverse { '▼' } else { '▲' });
    }
    if column == Column::Command {
        out.push(' ');
        row_summary(app, count, out);
    }
}

/// "(64 rows)", "(2 of 64)" under a filter, "(tree, 12 rows)". The filter text and the
/// tag count are in the status line, which has the room.
fn row_summary(app: &App, shown: usize, out: &mut String) {
    let tree = if app.settings.tree { "tree, " } else { "" };
    if app.settings.filtering() {
        let total = app.snapshot.processes.len();
        let _ = write!(out, "({tree}{shown} of {total})");
    } else {
        let _ = write!(out, "({tree}{shown} rows)");
    }
}

/// The text of one cell of `row` in the column `placed`, written to `out`; START's times in
/// `zone` (the clock's, looked up on first use).
fn row_text(
    placed: Placed,
    row: &ProcessRow<'_>,
    tagged: bool,
    app: &App,
    zone: &OnceCell<TimeZone>,
    out: &mut String,
) {
    let column = placed.column;
    // A GPU column of a row without a GPU (in the tree) shows NO_GPU instead.
    if is_gpu_column(column) && !row.is_gpu() {
        out.push_str(NO_GPU);
        return;
    }
    // Writing to a String does not fail: the results of `write!` are not looked at.
    match column {
        Column::Pid => {
            let mark = if tagged { TAG_MARK } else { ' ' };
            let _ = write!(out, "{mark}{:>7}", row.pid);
        }
        Column::User => push_truncated(out, &format::escape(row.user().unwrap_or(NA)), 8),
        Column::Nice => opt(out, row.nice(), shown),
        Column::State => opt(out, row.state(), |out, c| {
            let mut text = [0; 4];
            out.push_str(&format::escape(c.encode_utf8(&mut text)));
        }),
        Column::Gpu => {
            let places = row.gpus.iter().map(|g| gpu_place(&app.snapshot, g));
            push_gpu_list(out, places, placed.width.into());
        }
        Column::Kind => opt(out, row.kind(), |out, k| out.push_str(k.short())),
        Column::GpuMemory => shown(out, format::shown::opt_bytes_short(row.gpu_memory_bytes())),
        Column::GpuMemoryPercent => opt(out, row.gpu_memory_percent(&app.snapshot), |out, p| {
            let _ = write!(out, "{p:.0}");
        }),
        Column::Sm => opt(out, row.sm_percent(), shown),
        Column::MemoryBandwidth => opt(out, row.gpu_share(|g| g.memory_bandwidth_percent), shown),
        Column::Encoder => opt(out, row.gpu_share(|g| g.encoder_percent), shown),
        Column::Decoder => opt(out, row.gpu_share(|g| g.decoder_percent), shown),
        Column::Cpu => opt(out, row.cpu_percent(), |out, c| {
            let _ = write!(out, "{c:.1}");
        }),
        Column::HostMemoryPercent => opt(out, row.host_memory_percent(&app.snapshot), |out, p| {
            let _ = write!(out, "{p:.1}");
        }),
        Column::Rss => shown(out, format::shown::opt_bytes_short(row.rss_bytes())),
        Column::Start => opt(out, row.start_unix_seconds(&app.snapshot), |out, start| {
            let zone = zone.get_or_init(|| crate::format::clock::zone(app.utc));
            start_text(start, app.snapshot.unix_seconds, zone, out);
        }),
        Column::Time => opt(out, row.running_seconds(), |out, seconds| {
            shown(out, format::shown::duration(seconds));
        }),
        Column::Rank => {
            if !row.write_rank_text(out) {
                out.push_str(NO_GPU);
            }
        }
        Column::Container => opt(
            out,
            (row.gpus.iter())
                .map(|g| g.placement_label())
                .find(PlacementLabel::is_known),
            |out, label| {
                let start = out.len();
                let _ = write!(out, "{label}");
                fit_written(out, start, 18);
            },
        ),
        Column::Command => command_text(row, app.view.command_scroll, out),
    }
}

/// Where a process runs: its GPU, and the MIG device on it when it runs on one.
fn gpu_place(snapshot: &Snapshot, process: &GpuProcess) -> (u32, Option<u32>) {
    let mig = snapshot
        .gpu(process.gpu)
        .and_then(|gpu| gpu.mig_device_of(process.pid));
    (process.gpu, mig.map(|m| m.index))
}

/// A row's GPUs, "0,2,4", a MIG device as "0:1" (GPU 0's MIG device 1, as nvitop writes it):
/// as many as fit `width` and a `+` for the rest where they do not (a tree row of a process on
/// eight GPUs), so that the cut never leaves a leading comma or half an index.
fn push_gpu_list(out: &mut String, gpus: impl Iterator<Item = (u32, Option<u32>)>, width: usize) {
    let start = out.len();
    let mut gpus = gpus.peekable();
    while let Some((gpu, mig)) = gpus.next() {
        let before = out.len();
        if before > start {
            out.push(',');
        }
        let _ = match mig {
            Some(mig) => write!(out, "{gpu}:{mig}"),
            None => write!(out, "{gpu}"),
        };
        let room = if gpus.peek().is_some() {
            width.saturating_sub(1)
        } else {
            width
        };
        if out.len() - start > room {
            out.truncate(before);
            out.push('+');
            return;
        }
    }
}

/// The columns of figures about a GPU, which a tree row without one has none of.
fn is_gpu_column(column: Column) -> bool {
    matches!(
        column,
        Column::Gpu
            | Column::Kind
            | Column::GpuMemory
            | Column::GpuMemoryPercent
            | Column::Sm
            | Column::MemoryBandwidth
            | Column::Encoder
            | Column::Decoder
    )
}

/// `value` written by `write`, or N/A when missing.
fn opt<T>(out: &mut String, value: Option<T>, write: impl FnOnce(&mut String, T)) {
    match value {
        Some(value) => write(out, value),
        None => out.push_str(NA),
    }
}

/// `text` cut to at most `width` characters, the cut marked with "…", as
/// [`format::truncate`] cuts it.
fn push_truncated(out: &mut String, text: &str, width: usize) {
    let start = out.len();
    out.push_str(text);
    cut_written(out, start, width);
}

/// What `out` holds from `start` on, escaped and cut to `width` characters: in place, so that a
/// plain, short text (nearly every cgroup label) costs no copy a row a frame.
fn fit_written(out: &mut String, start: usize, width: usize) {
    if let std::borrow::Cow::Owned(escaped) = format::escape(&out[start..]) {
        out.truncate(start);
        out.push_str(&escaped);
    }
    cut_written(out, start, width);
}

/// Cuts what `out` holds from `start` on to at most `width` characters, the cut marked with
/// "…" (nothing is left at width 0), as [`format::truncate`] cuts.
fn cut_written(out: &mut String, start: usize, width: usize) {
    let written = &out[start..];
    if written.chars().nth(width).is_none() {
        return;
    }
    let keep = written.char_indices().nth(width.saturating_sub(1));
    out.truncate(keep.map_or(out.len(), |(at, _)| start + at));
    if width > 0 {
        out.push('…');
    }
}

/// A figure as `Display` writes it.
fn shown(out: &mut String, value: impl std::fmt::Display) {
    let _ = write!(out, "{value}");
}

/// When a process started, in the header clock's zone (local, or UTC under `--utc`): "14:05"
/// within the last day, else "Nov30", as htop's START.
fn start_text(start: f64, now: f64, zone: &TimeZone, out: &mut String) {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let Ok(at) = jiff::Timestamp::from_second(start.max(0.0).floor() as i64) else {
        out.push_str(NA);
        return;
    };
    // As strftime's "%H:%M" and "%b%d" write them, without parsing a format for each row.
    let time = zone.to_datetime(at);
    if now - start < 86_400.0 {
        let _ = write!(out, "{:02}:{:02}", time.hour(), time.minute());
        return;
    }
    let month = MONTHS[usize::from(time.month().unsigned_abs()) - 1];
    let _ = write!(out, "{month}{:02}", time.day());
}

/// The tree guides and the command, scrolled `scroll` characters to the left.
fn command_text(row: &ProcessRow<'_>, scroll: usize, out: &mut String) {
    let start = out.len();
    out.push_str(row.tree.map_or("", |(prefix, _)| prefix));
    if !row.write_display_command(out) {
        out.push_str(NOT_VISIBLE);
    }
    // The scrolled-off characters, dropped in place.
    let cut = out[start..]
        .char_indices()
        .nth(scroll)
        .map_or(out.len(), |(i, _)| start + i);
    out.drain(start..cut);
}

#[cfg(test)]
mod tests {
    use ratatui::style::Color;
    use ratatui::widgets::{Cell, Row, Table};

    use super::*;

    #[test]
    fn a_gpu_list_longer_than_its_column_ends_in_a_plus_after_whole_indices() {
        let list = |gpus: &[u32], width| {
            let mut out = String::from("kept");
            push_gpu_list(&mut out, gpus.iter().map(|&g| (g, None)), width);
            out.split_off(4)
        };
        assert_eq!(list(&[3], 4), "3");
        assert_eq!(list(&[0, 2], 4), "0,2");
        assert_eq!(list(&[0, 2, 4], 5), "0,2,4");
        assert_eq!(list(&[0, 2, 4, 6], 4), "0,2+");
        assert_eq!(list(&[0, 2, 4], 4), "0,2+");
        assert_eq!(list(&[10, 11], 4), "10+");
        assert_eq!(list(&[12, 3], 4), "12,3");
        assert_eq!(list(&[123, 4], 4), "123+");
        assert_eq!(list(&[1234, 5], 4), "+");
        let mig = |gpus: &[(u32, Option<u32>)], width| {
            let mut out = String::new();
            push_gpu_list(&mut out, gpus.iter().copied(), width);
            out
        };
        assert_eq!(mig(&[(0, Some(1))], 4), "0:1");
        assert_eq!(mig(&[(0, Some(1)), (0, Some(2))], 4), "0:1+");
        assert_eq!(list(&[0, 1], 0), "+");
        for gpus in [
            &[0, 1, 2, 3, 4, 5, 6, 7][..],
            &[8, 9, 10, 11, 12, 13, 14, 15],
        ] {
            for width in 2..20 {
                let shown = list(gpus, width);
                assert!(shown.len() <= width, "{shown} in {width}");
                let whole: Vec<_> = gpus.iter().map(u32::to_string).collect();
                let listed = shown.trim_end_matches('+');
                assert!(whole.join(",").starts_with(listed), "{shown}");
                assert!(!listed.ends_with(','), "{shown}");
            }
        }
    }

    /// A cell drawn by `put` is the cell ratatui's `Table` draws from the same text, but for a
    /// text too wide: cut at the right whatever its alignment, and marked where text was lost.
    #[test]
    fn cells_draw_as_table_cells_draw() {
        let texts = [
            "",
            "12345",
            "1234567890123",
            "├─ python train.py ▲",
            "数据 wide",
            "e\u{301} combined",
            "two\nlines",
            "trailing spaces        ",
        ];
        for text in texts {
            for column in [Column::Pid, Column::Command] {
                for width in [0, 3, 5, 12, 24] {
                    let mut base = Buffer::empty(Rect::new(0, 0, 30, 3));
                    base.set_string(0, 1, "#".repeat(30), Style::new().bg(Color::Blue));
                    let (mut theirs, mut ours) = (base.clone(), base);
                    let too_wide = Line::from(text).width() > usize::from(width);
                    let content: Text = if column.right_aligned() && !too_wide {
                        Line::from(text).right_aligned().into()
                    } else {
                        Text::from(text)
                    };
                    let area = Rect::new(2, 1, width, 1);
                    let table = Table::new([Row::new([Cell::from(content)])], [width]);
                    Widget::render(table, area, &mut theirs);
                    let first = Line::from(text.lines().next().unwrap_or_default());
                    if label::line_loses_text(&first, width) {
                        label::mark_cut(&mut theirs, area, area.y);
                    }
                    put(&mut ours, area, text, column);
                    assert_eq!(ours, theirs, "{text:?} {column:?} {width}");
                }
            }
        }
    }

    /// The cells' text of a cell `width` wide drawn by `put`.
    fn put_text(text: &str, column: Column, width: u16) -> String {
        let area = Rect::new(0, 0, width, 1);
        let mut buf = Buffer::empty(area);
        put(&mut buf, area, text, column);
        (0..width).map(|x| buf[(x, 0)].symbol()).collect()
    }

    /// The PID column is 8 cells: the tag mark and 7 digits, room for any Linux pid (pid_max
    /// is at most 4194304). NVML may report a longer one; its last 8 digits would read as
    /// another pid, which a user could signal.
    #[test]
    fn a_pid_too_wide_for_its_column_is_never_shown_as_other_digits() {
        assert_eq!(put_text(" 2147483000", Column::Pid, 8), " 214748…");
        assert_eq!(put_text("*2147483000", Column::Pid, 8), "*214748…");
        assert_eq!(put_text(" 4194304", Column::Pid, 8), " 4194304");
        assert_eq!(put_text("   20000", Column::Pid, 8), "   20000");
        // Any figure too wide, through ratatui's `Text` too.
        assert_eq!(put_text("123456.7", Column::Cpu, 6), "12345…");
        assert_eq!(put_text("1234°", Column::Cpu, 4), "123…");
    }

    #[test]
    fn a_command_cut_at_the_right_edge_ends_in_the_mark() {
        assert_eq!(
            put_text(NOT_VISIBLE, Column::Command, 30),
            "not visible here (another con…"
        );
        assert_eq!(
            put_text("python3 train.py  ", Column::Command, 16),
            "python3 train.py"
        );
        assert_eq!(put_text("数据 python3", Column::Command, 8), "数 据  py…");
    }

    #[test]
    fn a_text_fitted_in_place_is_the_text_escaped_and_cut() {
        let texts = [
            "",
            "job-42",
            "slurm/uid_1000/job_123456789",
            "a\x1b[31mred",
            "数据数据数据数据数据数据数据数据数据数据",
            "tab\there",
        ];
        for text in texts {
            for width in [0, 1, 5, 18, 40] {
                let expected = format!("before {}", format::truncate(&format::escape(text), width));
                let mut ours = String::from("before ");
                ours.push_str(text);
                fit_written(&mut ours, "before ".len(), width);
                assert_eq!(ours, expected, "{text:?} at {width}");
            }
        }
    }

    fn start(start: f64, now: f64, zone: &TimeZone) -> String {
        let mut out = String::new();
        start_text(start, now, zone, &mut out);
        out
    }

    #[test]
    fn start_is_a_clock_time_today_and_a_date_before() {
        // 2025-06-01T12:34:56Z
        let now = 1_748_781_296.0;
        let utc = TimeZone::UTC;
        assert_eq!(start(now - 3600.0, now, &utc), "11:34");
        assert_eq!(start(now - 3.0 * 86_400.0, now, &utc), "May29");
        assert_eq!(start(-5.0, now, &utc), "Jan01");
        // As strftime writes them, in a zone off UTC too.
        let zone = TimeZone::fixed(jiff::tz::offset(-7));
        for then in [now - 60.0, now - 40_000.0, now - 86_400.0, now - 9e6, 1e9] {
            let zoned = jiff::Timestamp::from_second(then as i64)
                .unwrap()
                .to_zoned(zone.clone());
            let format = if now - then < 86_400.0 {
                "%H:%M"
            } else {
                "%b%d"
            };
            assert_eq!(start(then, now, &zone), zoned.strftime(format).to_string());
        }
    }
}
