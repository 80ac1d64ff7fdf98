//! The jobs panel of the cluster view: each job's title, its ranks (stragglers marked), and
//! the ranks no node reports (on a node that is down, or missing from the numbering).

use ratatui::text::Line;

use super::{bytes, counted, title, unread_line, Columns};
use crate::cluster::model::{Job, MissingRank};
use crate::cluster::state::{ClusterApp, Focus, Listed};
use crate::format::{pad_left_aligned, NA};
use crate::terminal::theme::Theme;

pub(super) fn job_focus_line(app: &ClusterApp) -> Option<usize> {
    if app.focus != Focus::Jobs {
        return None;
    }
    let before: usize = app.view.jobs[..app.selected_job.min(app.view.jobs.len())]
        .iter()
        .map(|j| 1 + j.ranks.len() + missing_line_count(&j.missing_ranks))
        .sum();
    Some(2 + before)
}

/// The jobs with their ranks; `cursor` marks the selected job (the TUI's, not `--once`'s).
pub(super) fn job_lines(
    app: &ClusterApp,
    theme: Theme,
    cols: Columns,
    cursor: bool,
) -> Vec<Line<'static>> {
    let mut lines = vec![
        title(
            format!(
                "JOBS ACROSS NODES  straggler: step time over {:.0}% above the job's median",
                app.straggler_percent
            ),
            app.stale_shown().jobs,
            theme,
            cols,
        ),
        Line::styled(
            format!(
                "  RANK {}     PID  GPU   MEMORY HEADROOM      STEP",
                pad_left_aligned("NODE", cols.host)
            ),
            theme.label(),
        ),
    ];
    let unread = unread_line(app, Listed::Jobs, theme);
    if app.view.jobs.is_empty() && unread.is_none() {
        lines.push(Line::styled(
            "  no job: no process exports a training_job label",
            theme.dim(),
        ));
    }
    lines.extend(unread);
    for (i, job) in app.view.jobs.iter().enumerate() {
        let selected = cursor && app.focus == Focus::Jobs && i == app.selected_job;
        lines.push(job_title(job, selected, theme));
        for rank in &job.ranks {
            let mut text = format!(
                "  {:>4} {} {:>7} {:>4} {:>8} {:>8} {:>9}",
                rank.rank.map_or_else(|| NA.to_string(), |r| r.to_string()),
                pad_left_aligned(&rank.hostname, cols.host),
                rank.pid,
                rank.gpu.map_or_else(|| NA.to_string(), |g| g.to_string()),
                bytes(rank.memory_bytes),
                bytes(rank.headroom_bytes),
                rank.step_time_seconds.map_or_else(
                    || NA.to_string(),
                    |s| crate::format::shown::step_time(s).to_string()
                ),
            );
            let style = if rank.straggler {
                let above = rank.above_median_percent.unwrap_or(0.0);
                text.push_str(&format!("  STRAGGLER +{above:.0}%"));
                theme.critical()
            } else {
                theme.plain()
            };
            lines.push(Line::styled(text, style));
        }
        lines.extend(missing_lines(job, cols, theme));
    }
    lines
}

/// A row for each missing rank last seen on a node that is down, then one line for the rank
/// numbers no node reports.
fn missing_lines(job: &Job, cols: Columns, theme: Theme) -> Vec<Line<'static>> {
    let missing = &job.missing_ranks;
    let mut lines: Vec<Line<'static>> = missing
        .iter()
        .filter_map(|m| {
            let host = m.hostname.as_deref()?;
            Some(Line::styled(
                format!(
                    "  {:>4} {} {:>7}  NOT REPORTING: its node is down",
                    m.rank.map_or_else(|| NA.to_string(), |r| r.to_string()),
                    pad_left_aligned(host, cols.host),
                    m.pid.map_or_else(|| NA.to_string(), |p| p.to_string()),
                ),
                theme.critical(),
            ))
        })
        .collect();
    let numbers: Vec<u32> = missing
        .iter()
        .filter(|m| m.hostname.is_none())
        .filter_map(|m| m.rank)
        .collect();
    if !numbers.is_empty() {
        let of = job.world_size.map_or_else(
            || "below the highest rank".to_string(),
            |n| format!("of a world size of {n}"),
        );
        lines.push(Line::styled(
            format!(
                "  NOT REPORTING: rank {} ({of}; no node reports it)",
                ranges(&numbers)
            ),
            theme.critical(),
        ));
    }
    lines
}

/// How many lines [`missing_lines`] writes.
fn missing_line_count(missing: &[MissingRank]) -> usize {
    let rows = missing.iter().filter(|m| m.hostname.is_some()).count();
    let numbers = missing
        .iter()
        .any(|m| m.hostname.is_none() && m.rank.is_some());
    rows + usize::from(numbers)
}

/// Sorted numbers as ranges: "1, 4-7, 9", the first 20 ranges at most.
fn ranges(numbers: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < numbers.len() {
        let start = numbers[i];
        while i + 1 < numbers.len() && numbers[i + 1] == numbers[i] + 1 {
            i += 1;
        }
        parts.push(if numbers[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", numbers[i])
        });
        i += 1;
    }
    if parts.len() > 20 {
        let more = parts.len() - 20;
        parts.truncate(20);
        parts.push(format!("and {more} more ranges"));
    }
    parts.join(", ")
}

fn job_title(job: &Job, selected: bool, theme: Theme) -> Line<'static> {
    let median = job.median_step_time_seconds.map_or_else(
        || NA.to_string(),
        |s| crate::format::shown::step_time(s).to_string(),
    );
    let missing = match job.missing_ranks.len() {
        0 => String::new(),
        n => format!(", {n} missing"),
    };
    // "1 rank", "2 of 4 ranks", "1 of 1 rank": the noun agrees with the number before it.
    let ranks = match job.world_size {
        Some(n) => format!("{} of {}", job.ranks.len(), counted(n as usize, "rank")),
        None => counted(job.ranks.len(), "rank"),
    };
    let text = format!(
        "JOB {}  {ranks} on {}{missing}  median step {median}",
        job.id,
        counted(job.nodes, "node")
    );
    let style = if selected {
        theme.selected()
    } else if job.missing_ranks.is_empty() {
        theme.brand()
    } else {
        theme.critical()
    };
    Line::styled(text, style)
}
