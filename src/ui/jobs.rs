//! Distributed jobs: one line per job with each rank's memory and utilization bar, so the rank
//! that holds more memory or computes less than its peers stands out.

use super::label::Label;
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    Frame,
};

use crate::app::view::Mark;
use crate::app::App;
use crate::model::{Job, Snapshot};
use crate::terminal::theme::Theme;

use super::balance::{column_cells, LEVELS, MISSING};

/// At most this many jobs get a line.
pub(crate) const MAX_LINES: u16 = 3;

/// Rows the panel wants: one per job, none without jobs.
pub(crate) fn wanted_height(snapshot: &Snapshot) -> u16 {
    u16::try_from(snapshot.jobs.len())
        .unwrap_or(u16::MAX)
        .min(MAX_LINES)
}

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let lines: Vec<Line> = app
        .snapshot
        .jobs
        .iter()
        .take(usize::from(area.height))
        .map(|job| {
            let line = job_line(job, &app.snapshot, theme);
            if app.view.mark == Some(Mark::Job(job.id.clone())) {
                line.style(theme.selected())
            } else {
                line
            }
        })
        .collect();
    frame.render_widget(Label::new(lines), area);
}

fn job_line<'a>(job: &'a Job, snapshot: &Snapshot, theme: Theme) -> Line<'a> {
    let mut spans = vec![
        Span::styled("JOB ", theme.title()),
        Span::raw(format!("{} ", crate::format::escape(&job.id))),
    ];
    for rank in &job.ranks {
        let gpu = snapshot.gpu(rank.gpu);
        let memory = gpu.and_then(super::super::model::gpu::GpuSample::memory_fraction);
        let utilization = gpu
            .and_then(|g| g.utilization_percent)
            .map(|u| f64::from(u) / 100.0);
        let label = rank
            .rank
            .map_or_else(|| format!("p{}", rank.pid), |r| format!("r{r}"));
        spans.push(Span::styled(format!(" {label}"), theme.label()));
        spans.push(Span::styled(level(memory), theme.memory_fill(memory)));
        spans.push(Span::styled(level(utilization), theme.load(utilization)));
    }
    Line::from(spans)
}

/// One character showing a fraction in eighths, or a dot when it is unknown.
fn level(fraction: Option<f64>) -> &'static str {
    fraction.map_or(MISSING, |f| LEVELS[column_cells(f, 1)[0]])
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
    }
}
