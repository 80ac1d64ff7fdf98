//! Distributed jobs: one line per job with each rank's memory and utilization bar, so the rank
//! that holds more memory or computes less than its peers stands out, then the ranks that left
//! it ("r1 gone 34 s").

use super::label::Runs;
use ratatui::{layout::Rect, style::Style, Frame};

use crate::app::view::Mark;
use crate::app::App;
use crate::model::{Job, Snapshot};
use crate::terminal::theme::Theme;

use super::balance::{LEVELS, MISSING};

/// At most this many jobs get a line.
pub(crate) const MAX_LINES: u16 = 3;

/// Rows the panel wants: one per job, none without jobs.
pub(crate) fn wanted_height(snapshot: &Snapshot) -> u16 {
    u16::try_from(snapshot.jobs.len())
        .unwrap_or(u16::MAX)
        .min(MAX_LINES)
}

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let mut scratch = super::scratch::take();
    let lines = &mut scratch.runs;
    lines.clear();
    for job in app.snapshot.jobs.iter().take(usize::from(area.height)) {
        write_job_line(lines, job, &app.snapshot, theme);
        let marked = matches!(&app.view.mark, Some(Mark::Job(id)) if *id == job.id);
        lines.end_line(if marked {
            theme.selected()
        } else {
            Style::new()
        });
    }
    frame.render_widget(&*lines, area);
}

/// A job's line, span for span as it has always been drawn, written into `out`.
fn write_job_line(out: &mut Runs, job: &Job, snapshot: &Snapshot, theme: Theme) {
    out.push(theme.title(), "JOB ");
    let id = crate::format::escape(&job.id);
    out.push_fmt(Style::new(), format_args!("{id} "));
    for rank in &job.ranks {
        let gpu = snapshot.gpu(rank.gpu);
        let memory = gpu.and_then(super::super::model::gpu::GpuSample::memory_fraction);
        let utilization = gpu
            .and_then(|g| g.utilization_percent)
            .map(|u| f64::from(u) / 100.0);
        match rank.rank {
            Some(r) => out.push_fmt(theme.label(), format_args!(" r{r}")),
            None => out.push_fmt(theme.label(), format_args!(" p{}", rank.pid)),
        }
        out.push(theme.memory_fill(memory), level(memory));
        out.push(theme.load(utilization), level(utilization));
    }
    // A rank that left stays on the line, so a job down to one process still says why.
    for gone in &job.gone {
        let ago = crate::format::shown::span(gone.gone_seconds);
        match gone.rank {
            Some(r) => out.push_fmt(theme.warn(), format_args!(" r{r} gone {ago}")),
            None => out.push_fmt(theme.warn(), format_args!(" p{} gone {ago}", gone.pid)),
        }
    }
}

/// One character showing a fraction in eighths, or a dot when it is unknown: a bar one cell
/// high, as `column_cells` fills it.
fn level(fraction: Option<f64>) -> &'static str {
    fraction.map_or(MISSING, |f| {
        LEVELS[((f.clamp(0.0, 1.0) * 8.0).round() as usize).min(8)]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fraction_is_one_eighth_block_and_unknown_is_a_dot() {
        assert_eq!(level(Some(1.0)), "█");
        assert_eq!(level(Some(0.5)), "▄");
        assert_eq!(level(Some(0.0)), " ");
        assert_eq!(level(None), "·");
        for f in [-1.0, 0.0, 0.06, 0.07, 0.3, 0.5, 0.99, 1.0, 7.0] {
            let cells = super::super::balance::column_cells(f, 1);
            assert_eq!(level(Some(f)), LEVELS[cells[0]], "{f}");
        }
    }
}
