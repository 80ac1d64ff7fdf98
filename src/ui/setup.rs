//! The setup screen (F2) drawn over the monitor: its sections flow into as many columns as the
//! screen holds; where even one column of everything does not fit, a single list scrolls to
//! keep the cursor in view.

use super::label::Label;
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Clear},
    Frame,
};

use crate::app::setup::{self, is_on, Item, Section, SetupScreen};
use crate::app::App;
use crate::config::HistoryMetric;
use crate::model::GpuSample;
use crate::terminal::theme::Theme;

/// Cells of one column of items.
const COLUMN_WIDTH: u16 = 34;

pub(crate) fn render(
    frame: &mut Frame,
    screen: Rect,
    app: &App,
    setup: &SetupScreen,
    theme: Theme,
) {
    let sections = sections(app, setup.cursor, theme);
    let tallest = sections.iter().map(Vec::len).max().unwrap_or(0) as u16;
    let body_height = screen.height.saturating_sub(2).max(1);
    let columns = balanced(&sections, tallest, body_height.max(tallest));
    // Each column as wide as its longest line, so that three fit an 80-column terminal.
    let widths: Vec<u16> = columns.iter().map(|c| column_width(c)).collect();
    let width = (widths.iter().map(|w| w + 2).sum::<u16>() + 1).max(50) + 2;
    let (columns, widths, width) = if width <= screen.width && tallest <= body_height {
        (columns, widths, width)
    } else {
        let list = scrolled(&sections, setup.cursor, body_height);
        (
            vec![list],
            vec![COLUMN_WIDTH],
            screen.width.min(COLUMN_WIDTH + 4),
        )
    };
    let lines_high = columns.iter().map(Vec::len).max().unwrap_or(0) as u16;
    let height = (lines_high + 2).min(screen.height);
    let area = Rect::new(
        screen.x + (screen.width - width.min(screen.width)) / 2,
        screen.y + (screen.height - height) / 2,
        width.min(screen.width),
        height,
    );
    // Said before Esc is pressed: a change that will not be saved (no file, or a [ui] table
    // the monitor could not read) is a surprise after.
    let close = if app.setup_saves() {
        " ↑↓ move  Space/←→ change  Esc: save and close "
    } else {
        " ↑↓ move  Space/←→ change  Esc: close (not saved) "
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Setup (F2) ")
        .title_bottom(close);
    frame.render_widget(Clear, area);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut x = inner.x + 1;
    for (column, column_width) in columns.into_iter().zip(widths) {
        if x >= inner.right() {
            break;
        }
        let rect = Rect::new(
            x,
            inner.y,
            column_width.min(inner.right() - x),
            inner.height,
        );
        frame.render_widget(Label::new(column), rect);
        x = x.saturating_add(column_width + 2);
    }
}

/// The widest line of a column, at most [`COLUMN_WIDTH`].
fn column_width(lines: &[Line<'_>]) -> u16 {
    let widest = lines.iter().map(Line::width).max().unwrap_or(0);
    u16::try_from(widest).unwrap_or(u16::MAX).min(COLUMN_WIDTH)
}

/// Each section's lines: its title, then one line per item.
fn sections(app: &App, cursor: usize, theme: Theme) -> Vec<Vec<Line<'static>>> {
    let mut sections: Vec<(Section, Vec<Line<'static>>)> = Vec::new();
    for (i, item) in setup::items().into_iter().enumerate() {
        let section = item.section();
        if sections.last().map(|(s, _)| *s) != Some(section) {
            let title = Line::styled(section.title(), theme.label());
            sections.push((section, vec![title]));
        }
        let mut line = item_line(app, item, theme);
        if i == cursor {
            line = line.style(theme.selected());
        }
        if let Some((_, lines)) = sections.last_mut() {
            lines.push(line);
        }
    }
    sections.into_iter().map(|(_, lines)| lines).collect()
}

fn item_line(app: &App, item: Item, theme: Theme) -> Line<'static> {
    let check = |text: String| {
        let mark = if is_on(&app.ui, item) { "[x] " } else { "[ ] " };
        Span::raw(format!("  {mark}{text}"))
    };
    let spans = match item {
        Item::Panel(kind) => vec![check(kind.label().to_string())],
        Item::Metric(metric) => metric_spans(metric, &app.snapshot.gpus, check, theme),
        Item::Column(column) => vec![check(column.title().to_string())],
        Item::Refresh => value_spans("every", &format_seconds(app.delay_seconds)),
        Item::Theme => {
            let mut spans = value_spans("colours", app.ui.theme.name());
            if !app.colors {
                // --no-color or NO_COLOR wins over the saved theme for this run.
                spans.push(Span::styled("  mono: NO_COLOR", theme.dim()));
            }
            spans
        }
    };
    Line::from(spans)
}

fn metric_spans(
    metric: HistoryMetric,
    gpus: &[GpuSample],
    check: impl Fn(String) -> Span<'static>,
    theme: Theme,
) -> Vec<Span<'static>> {
    let mut spans = vec![check(metric.key().replace('_', " "))];
    // The model has the figure, but these GPUs may not report it: say so before it is chosen.
    if !gpus.is_empty() && !gpus.iter().any(|g| has_metric(g, metric)) {
        spans.push(Span::styled("  N/A here", theme.dim()));
    }
    spans
}

/// Whether this GPU reports `metric` now.
fn has_metric(gpu: &GpuSample, metric: HistoryMetric) -> bool {
    match metric {
        HistoryMetric::Util => gpu.utilization_percent.is_some(),
        HistoryMetric::Memory => gpu.memory_used_bytes.is_some(),
        HistoryMetric::Power => gpu.power_w.is_some(),
        HistoryMetric::Temperature => gpu.temperature_c.is_some(),
        HistoryMetric::SmClock => gpu.sm_clock_mhz.is_some(),
        HistoryMetric::MemoryClock => gpu.memory_clock_mhz.is_some(),
        HistoryMetric::PcieRx => gpu.pcie_rx_kib_s.is_some(),
        HistoryMetric::PcieTx => gpu.pcie_tx_kib_s.is_some(),
        HistoryMetric::Encoder => gpu.encoder_percent.is_some(),
        HistoryMetric::Decoder => gpu.decoder_percent.is_some(),
    }
}

fn value_spans(what: &str, value: &str) -> Vec<Span<'static>> {
    vec![Span::raw(format!("  {what:<8}◀ {value} ▶"))]
}

fn format_seconds(seconds: f64) -> String {
    format!("{seconds} s")
}

/// The sections in as few columns as fit `most` rows, each column as short as that allows.
fn balanced(sections: &[Vec<Line<'static>>], least: u16, most: u16) -> Vec<Vec<Line<'static>>> {
    let count = flow(sections, most).len();
    (least..=most)
        .map(|height| flow(sections, height))
        .find(|columns| columns.len() <= count)
        .unwrap_or_else(|| flow(sections, most))
}

/// The sections in columns no taller than `height`, a blank line between two in one column.
fn flow(sections: &[Vec<Line<'static>>], height: u16) -> Vec<Vec<Line<'static>>> {
    let height = usize::from(height);
    let mut columns: Vec<Vec<Line<'static>>> = vec![Vec::new()];
    for section in sections {
        let column = columns.last_mut().expect("starts with one column");
        let gap = usize::from(!column.is_empty());
        if !column.is_empty() && column.len() + gap + section.len() > height {
            columns.push(section.clone());
            continue;
        }
        if gap == 1 {
            column.push(Line::default());
        }
        column.extend(section.iter().cloned());
    }
    columns
}

/// Everything in one list, scrolled to show the cursor's line in `height` rows.
fn scrolled(sections: &[Vec<Line<'static>>], cursor: usize, height: u16) -> Vec<Line<'static>> {
    let mut all = Vec::new();
    let mut cursor_line = 0;
    let mut items_seen = 0;
    for section in sections {
        for (i, line) in section.iter().enumerate() {
            if i > 0 {
                if items_seen == cursor {
                    cursor_line = all.len();
                }
                items_seen += 1;
            }
            all.push(line.clone());
        }
    }
    let height = usize::from(height);
    let first = (cursor_line + 1).saturating_sub(height);
    all.into_iter().skip(first).take(height).collect()
}
