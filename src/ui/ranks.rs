//! Draws the all-ranks table of a job inside the PyTorch panel: one line per rank, the rank
//! that stands out in a column marked with `!` and its figure highlighted.

use super::label::Label;
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    Frame,
};

use crate::app::ranks::{rank_rows, RankColumn, RankRow, RANK_COLUMNS};
use crate::format;
use crate::model::{Job, Snapshot};
use crate::terminal::theme::Theme;

/// Width of a figure column, its header right-aligned over it: the table fits the 66 columns
/// of the panel beside a wide process table.
fn width(column: RankColumn) -> usize {
    match column {
        RankColumn::Reserved | RankColumn::Headroom => 9,
        RankColumn::Ooms => 5,
        _ => 8,
    }
}

fn heading(column: RankColumn) -> &'static str {
    match column {
        RankColumn::Allocated => "ALLOC",
        RankColumn::Reserved => "RESERVED",
        RankColumn::Peak => "PEAK",
        RankColumn::Headroom => "HEADROOM",
        RankColumn::StepTime => "STEP",
        RankColumn::Retries => "RETRIES",
        RankColumn::Ooms => "OOMS",
    }
}

fn cell(column: RankColumn, value: Option<f64>) -> String {
    let Some(value) = value else {
        return format::NA.to_string();
    };
    match column {
        RankColumn::StepTime => format!("{value:.3}s"),
        RankColumn::Retries | RankColumn::Ooms => format!("{}", value as u64),
        _ => format::bytes_short(value as u64),
    }
}

/// Rows [`render`] wants for `job`: a title, a header and one line per rank.
pub(crate) fn wanted_height(job: &Job) -> u16 {
    let mut pids: Vec<u32> = job.ranks.iter().map(|r| r.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    u16::try_from(pids.len() + 2).unwrap_or(u16::MAX)
}

/// Draws the table at the top of `area`; returns the rows used (ranks that do not fit are
/// counted in the title).
pub(crate) fn render(
    frame: &mut Frame,
    area: Rect,
    snapshot: &Snapshot,
    job: &Job,
    theme: Theme,
) -> u16 {
    if area.height < 3 {
        return 0;
    }
    let rows = rank_rows(snapshot, job);
    let fit = usize::from(area.height - 2).min(rows.len());
    let hidden = rows.len() - fit;
    let noun = if rows.len() == 1 { "rank" } else { "ranks" };
    let mut title = format!(" {} {noun} of {}", rows.len(), format::escape(&job.id));
    if hidden > 0 {
        title.push_str(&format!(" ({hidden} not shown)"));
    }
    for gone in &job.gone {
        let ago = format::shown::span(gone.gone_seconds);
        match gone.rank {
            Some(r) => title.push_str(&format!("; rank {r} gone {ago} ago")),
            None => title.push_str(&format!("; pid {} gone {ago} ago", gone.pid)),
        }
    }
    if rows.iter().any(|r| !r.outlier.is_empty()) {
        title.push_str("  ! stands out");
    }
    let mut lines = vec![
        Line::styled(
            format::truncate(&title, usize::from(area.width)),
            theme.label(),
        ),
        Line::styled(header(), theme.dim()),
    ];
    lines.extend(rows.iter().take(fit).map(|row| rank_line(row, theme)));
    let used = lines.len() as u16;
    frame.render_widget(
        Label::new(lines),
        Rect {
            height: used,
            ..area
        },
    );
    used
}

fn header() -> String {
    let mut text = format!(" {:>4}{:>4}", "RANK", "GPU");
    // A rank on several GPUs lists them all and pushes its line right; it is rare.
    for column in RANK_COLUMNS {
        text.push_str(&format!("{:>w$}", heading(column), w = width(column)));
    }
    text
}

fn rank_line(row: &RankRow, theme: Theme) -> Line<'static> {
    let marker = if row.outlier.is_empty() { ' ' } else { '!' };
    let rank = row
        .rank
        .map_or_else(|| format::NA.to_string(), |r| r.to_string());
    let gpus: Vec<String> = row.gpus.iter().map(u32::to_string).collect();
    // A rank that holds no GPU yet (before its first CUDA call, or on the CPU).
    let gpus = if gpus.is_empty() {
        "-".to_string()
    } else {
        gpus.join(",")
    };
    let mut spans = vec![Span::styled(
        format!("{marker}{rank:>4}{gpus:>4}"),
        if row.outlier.is_empty() {
            theme.plain()
        } else {
            theme.warn()
        },
    )];
    for (c, column) in RANK_COLUMNS.iter().enumerate() {
        let text = format!("{:>w$}", cell(*column, row.values[c]), w = width(*column));
        let style = if row.outlier.contains(column) {
            theme.warn()
        } else {
            theme.plain()
        };
        spans.push(Span::styled(text, style));
    }
    Line::from(spans)
}
