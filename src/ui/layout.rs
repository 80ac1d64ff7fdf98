//! Chooses where each panel goes for a given terminal size and snapshot. The GPUs and the
//! process table always get a place; history sparklines, a few more process rows, the per-GPU
//! detail lines and larger sparklines are added in that order while rows are left.

use ratatui::layout::Rect;

use crate::app::App;

use super::{allocator, processes};

pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 16;
/// From this width the allocator panel sits beside the process table instead of below it.
pub const WIDE_WIDTH: u16 = 160;
/// Balance bars on the left, host figures on the right, under one title line.
const MIDDLE_HEIGHT: u16 = 5;
/// The process table's header and this many rows are always kept.
const MIN_PROCESS_HEIGHT: u16 = 3;
/// Process rows to grant before the GPU detail lines and the larger sparklines are.
const COMFORTABLE_PROCESS_ROWS: u16 = 6;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    TooSmall { width: u16, height: u16 },
    Screen(Areas),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Areas {
    pub header: Rect,
    pub gpus: Rect,
    /// Detail lines drawn under each GPU's main line; 0 when there is no room.
    pub gpu_detail_lines: u16,
    pub history: Option<Rect>,
    /// 1: the three sparklines of a GPU share one row; 3: one row each.
    pub history_rows_per_gpu: u16,
    pub balance: Rect,
    pub host: Rect,
    pub jobs: Option<Rect>,
    pub warnings: Option<Rect>,
    pub processes: Rect,
    pub allocator: Option<Rect>,
    pub status: Rect,
}

/// Rows each optional part asked for, and what it was granted.
struct Heights {
    gpus: u16,
    gpu_detail_lines: u16,
    history: u16,
    history_rows_per_gpu: u16,
    jobs: u16,
    warnings: u16,
    processes: u16,
    allocator_below: u16,
}

pub fn plan(area: Rect, app: &App) -> Plan {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        return Plan::TooSmall {
            width: area.width,
            height: area.height,
        };
    }
    let heights = heights(area, app);
    Plan::Screen(place(area, app, &heights))
}

fn heights(area: Rect, app: &App) -> Heights {
    let gpu_count = app.snapshot.gpus.len() as u16;
    let wide = area.width >= WIDE_WIDTH;
    let detail_lines = super::gpus::detail_line_count(&app.snapshot.gpus, area.width);
    let warnings = warnings_height(app, area.height);
    let jobs = super::jobs::wanted_height(&app.snapshot);
    let gpu_base = if gpu_count == 0 { 3 } else { 1 + gpu_count };
    let fixed = 2 + MIDDLE_HEIGHT + warnings + jobs;
    let available = area.height.saturating_sub(fixed);
    let mut h = Heights {
        gpus: gpu_base.min(available.saturating_sub(MIN_PROCESS_HEIGHT)),
        gpu_detail_lines: 0,
        history: 0,
        history_rows_per_gpu: 1,
        jobs,
        warnings,
        processes: MIN_PROCESS_HEIGHT,
        allocator_below: 0,
    };
    let mut left = available.saturating_sub(h.gpus + h.processes);
    if !wide {
        h.allocator_below = selected_allocator_height(app, area.width, false);
        if !grant(&mut left, h.allocator_below) {
            h.allocator_below = 0;
        }
    }
    if gpu_count > 0 && h.gpus == gpu_base && grant(&mut left, 1 + gpu_count) {
        h.history = 1 + gpu_count;
    }
    // Seeing the processes matters more than the per-GPU detail lines, when there are any.
    let rows = u16::try_from(app.row_count()).unwrap_or(u16::MAX);
    let unshown = rows.saturating_sub(MIN_PROCESS_HEIGHT - 1);
    let extra = COMFORTABLE_PROCESS_ROWS.min(unshown).min(left);
    left -= extra;
    h.processes += extra;
    if gpu_count > 0 && h.gpus == gpu_base && grant(&mut left, detail_lines * gpu_count) {
        h.gpu_detail_lines = detail_lines;
        h.gpus += detail_lines * gpu_count;
    }
    if h.history > 0 && gpu_count <= 4 && grant(&mut left, 2 * gpu_count) {
        h.history += 2 * gpu_count;
        h.history_rows_per_gpu = 3;
    }
    h.processes += left;
    h
}

/// Takes `want` rows from `left` if all of them are there.
fn grant(left: &mut u16, want: u16) -> bool {
    let fits = want > 0 && want <= *left;
    if fits {
        *left -= want;
    }
    fits
}

fn warnings_height(app: &App, screen_height: u16) -> u16 {
    let count = app.snapshot.warnings.len() as u16;
    if count == 0 {
        return 0;
    }
    let most = if screen_height >= 40 { 5 } else { 2 };
    1 + count.min(most)
}

/// Rows the allocator panel wants for the selected process; 0 when it has no agent.
fn selected_allocator_height(app: &App, width: u16, wide: bool) -> u16 {
    processes::selected_process(app)
        .and_then(|p| p.torch.as_ref())
        .map_or(0, |torch| allocator::wanted_height(torch, width, wide))
}

fn place(area: Rect, app: &App, h: &Heights) -> Areas {
    let mut y = area.y;
    let mut take = |height: u16| {
        let rect = Rect::new(area.x, y, area.width, height);
        y += height;
        rect
    };
    let header = take(1);
    let gpus = take(h.gpus);
    let history = (h.history > 0).then(|| take(h.history));
    let middle = take(MIDDLE_HEIGHT);
    let jobs = (h.jobs > 0).then(|| take(h.jobs));
    let warnings = (h.warnings > 0).then(|| take(h.warnings));
    let table = take(h.processes);
    let below = (h.allocator_below > 0).then(|| take(h.allocator_below));
    let status = take(1);
    let (balance, host) = split_middle(middle, app.snapshot.gpus.len() as u16);
    let (processes, allocator) = match below {
        Some(rect) => (table, Some(rect)),
        None => split_table(table, app),
    };
    Areas {
        header,
        gpus,
        gpu_detail_lines: h.gpu_detail_lines,
        history,
        history_rows_per_gpu: h.history_rows_per_gpu,
        balance,
        host,
        jobs,
        warnings,
        processes,
        allocator,
        status,
    }
}

fn split_middle(middle: Rect, gpu_count: u16) -> (Rect, Rect) {
    let wanted = gpu_count * super::balance::GROUP_WIDTH + 2;
    let width = wanted.clamp(24, middle.width / 2);
    let balance = Rect::new(middle.x, middle.y, width, middle.height);
    let host = Rect::new(
        middle.x + width,
        middle.y,
        middle.width - width,
        middle.height,
    );
    (balance, host)
}

/// In a wide terminal the allocator panel of the selected process sits right of the table.
fn split_table(table: Rect, app: &App) -> (Rect, Option<Rect>) {
    if table.width < WIDE_WIDTH || selected_allocator_height(app, table.width, true) == 0 {
        return (table, None);
    }
    let width = allocator::WIDE_PANEL_WIDTH;
    let processes = Rect::new(table.x, table.y, table.width - width, table.height);
    let panel = Rect::new(table.x + table.width - width, table.y, width, table.height);
    (processes, Some(panel))
}

/// How many process rows (not counting the header) the screen of this size has room for.
pub fn process_rows(area: Rect, app: &App) -> usize {
    match plan(area, app) {
        Plan::TooSmall { .. } => 0,
        Plan::Screen(areas) => usize::from(areas.processes.height.saturating_sub(1)),
    }
}
