//! Chooses where each panel goes for a given terminal size and what the panels ask for
//! ([`LayoutNeeds`]). The GPUs and the process table always get a place; history sparklines, a
//! few more process rows, the per-GPU detail lines and larger sparklines are added in that
//! order while rows are left. The event loop plans once per frame and keeps the [`Plan`] in the
//! view state, so paging and mouse clicks use the areas the user sees.
//!
//! The screen, top to bottom (the allocator panel sits right of the table from
//! [`WIDE_WIDTH`] columns, below it in narrower terminals):
//!
//! ```text
//! +--------------------------------------------------------------+
//! | header: host, driver, time                                    |  1 row
//! +--------------------------------------------------------------+
//! | GPUs: one line each, MIG instances below their GPU            |
//! |   (+ detail lines: `f` first, `a` when rows are left, `c` no) |
//! +--------------------------------------------------------------+
//! | history sparklines (optional)                                 |
//! +-------------------+------------------------------------------+
//! | balance bars      | host: CPU, memory, swap, load             |  5 rows (F2 hides)
//! +-------------------+------------------------------------------+
//! | jobs (optional, one line per job)                             |
//! | warnings (optional)                                           |
//! +----------------------------------------+---------------------+
//! | process table                          | allocator (wide)    |
//! +----------------------------------------+---------------------+
//! | allocator (narrow, optional)                                  |
//! | status line                                                   |  1 row
//! +--------------------------------------------------------------+
//! ```

use ratatui::layout::{Margin, Rect};

use super::view::Density;

pub(crate) const MIN_WIDTH: u16 = 60;
pub(crate) const MIN_HEIGHT: u16 = 16;
/// From this width the allocator panel sits beside the process table instead of below it.
pub(crate) const WIDE_WIDTH: u16 = 160;
/// The allocator panel's width when it sits beside the process table.
pub(crate) const ALLOCATOR_WIDE_WIDTH: u16 = 66;
/// Columns of one GPU's group of balance bars.
pub(crate) const BALANCE_GROUP_WIDTH: u16 = 4;
/// Balance bars on the left, host figures on the right, under one title line.
const MIDDLE_HEIGHT: u16 = 5;
/// Rows under the GPU title for the message shown without GPUs: at least two, so that the
/// panels below do not move when a short message gives way to a longer one, and at most six,
/// so that a runaway message cannot take the process table's room.
const MIN_GPU_MESSAGE_LINES: u16 = 2;
const MAX_GPU_MESSAGE_LINES: u16 = 6;
/// The process table's header and this many rows are always kept.
const MIN_PROCESS_HEIGHT: u16 = 3;
/// The fewest rows worth giving the allocator panel below the table: its title and one line.
const MIN_ALLOCATOR_HEIGHT: u16 = 2;
/// Process rows to grant before the GPU detail lines and the larger sparklines are.
const COMFORTABLE_PROCESS_ROWS: u16 = 6;

/// What the panels ask of the layout for one terminal width: the ui computes it from the app
/// (`ui::layout_needs`), so that this module needs neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LayoutNeeds {
    pub(crate) gpu_count: u16,
    /// Lines the message shown instead of the GPU table wraps to (no driver, no GPUs); 0 with
    /// GPUs.
    pub(crate) gpu_message_lines: u16,
    /// Detail lines the busiest GPU needs under its main line at this width.
    pub(crate) gpu_detail_lines: u16,
    /// Lines the warnings panel wants below its title: one per group of warnings.
    pub(crate) warnings: u16,
    /// Lines of the open warning's evidence and remedy in the `w` view at this width; 0 when
    /// none is open.
    pub(crate) warning_detail_lines: u16,
    /// Rows the jobs panel wants; 0 without jobs.
    pub(crate) jobs: u16,
    /// Rows of the process table (its content, not its place).
    pub(crate) process_rows: usize,
    /// Rows the allocator panel wants below the table; 0 when no process has an agent. It
    /// must not depend on the selection, so that moving the cursor resizes nothing.
    pub(crate) allocator_below: u16,
    /// Whether any process has an agent, so the allocator panel has a place beside a wide table.
    pub(crate) allocator_beside: bool,
    /// `a` `f` `c`: whether the GPU detail lines and the larger sparklines come before extra
    /// process rows (full), after them (auto), or never (compact).
    pub(crate) density: Density,
    /// Panels the user hid in the setup screen (F2).
    pub(crate) hide_history: bool,
    /// Sparklines per GPU in the history panel, one row each when there is room; 0 means the
    /// default three.
    pub(crate) history_metrics: u16,
    pub(crate) hide_balance: bool,
    pub(crate) hide_host: bool,
}

impl LayoutNeeds {
    /// Rows of the balance and host strip: none when both are hidden.
    fn middle_height(&self) -> u16 {
        if self.hide_balance && self.hide_host {
            0
        } else {
            MIDDLE_HEIGHT
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    TooSmall { width: u16, height: u16 },
    Screen(Areas),
}

impl Default for Plan {
    /// Before the first frame nothing is placed.
    fn default() -> Self {
        Plan::TooSmall {
            width: 0,
            height: 0,
        }
    }
}

impl Plan {
    /// Whether the last frame drawn said the terminal was too small, rather than the screen
    /// (before the first frame, [`Plan::default`], nothing was drawn at all).
    pub(crate) fn screen_hidden(&self) -> bool {
        matches!(self, Plan::TooSmall { width, height } if (*width, *height) != (0, 0))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Areas {
    pub(crate) header: Rect,
    pub(crate) gpus: Rect,
    /// Detail lines drawn under each GPU's main line; 0 when there is no room.
    pub(crate) gpu_detail_lines: u16,
    pub(crate) history: Option<Rect>,
    /// 1: the sparklines of a GPU share one row; more: one row each.
    pub(crate) history_rows_per_gpu: u16,
    pub(crate) balance: Rect,
    pub(crate) host: Rect,
    pub(crate) jobs: Option<Rect>,
    pub(crate) warnings: Option<Rect>,
    pub(crate) processes: Rect,
    pub(crate) allocator: Option<Rect>,
    pub(crate) status: Rect,
    /// The `w` view over the panels.
    pub(crate) warnings_view: WarningsViewArea,
}

/// Where the `w` view is drawn, and how far its evidence and remedy can scroll.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WarningsViewArea {
    /// The view with its border.
    pub(crate) frame: Rect,
    /// Inside the border: one list entry (or one line of the detail) per row.
    pub(crate) body: Rect,
    /// How many lines the open detail can scroll down before its end is on the last row.
    pub(crate) detail_max_scroll: u16,
}

/// The `w` view's place on a `screen`, centred, for `detail_lines` of evidence and remedy.
pub(crate) fn warnings_view_area(screen: Rect, detail_lines: u16) -> WarningsViewArea {
    let frame = screen.inner(Margin::new(screen.width / 10, screen.height / 8));
    let body = frame.inner(Margin::new(1, 1));
    WarningsViewArea {
        frame,
        body,
        detail_max_scroll: detail_lines.saturating_sub(body.height),
    }
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

/// Where each panel goes on a screen of `area`, given what the panels need.
pub(crate) fn plan(area: Rect, needs: &LayoutNeeds) -> Plan {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        return Plan::TooSmall {
            width: area.width,
            height: area.height,
        };
    }
    let heights = heights(area, needs);
    let mut areas = place(area, needs, &heights);
    areas.warnings_view = warnings_view_area(area, needs.warning_detail_lines);
    Plan::Screen(areas)
}

fn heights(area: Rect, needs: &LayoutNeeds) -> Heights {
    let gpu_count = needs.gpu_count;
    let wide = area.width >= WIDE_WIDTH;
    let warnings = warnings_height(needs.warnings, area.height);
    let jobs = needs.jobs;
    let gpu_base = if gpu_count == 0 {
        1 + needs
            .gpu_message_lines
            .clamp(MIN_GPU_MESSAGE_LINES, MAX_GPU_MESSAGE_LINES)
    } else {
        1 + gpu_count
    };
    let fixed = 2 + needs.middle_height() + warnings + jobs;
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
    let history_wanted = gpu_count > 0 && !needs.hide_history;
    if history_wanted && h.gpus == gpu_base && grant(&mut left, 1 + gpu_count) {
        h.history = 1 + gpu_count;
    }
    // The allocator panel takes what it wants of the rest, or what is left when that is enough
    // for its title and a device's OOM line.
    if !wide && needs.allocator_below > 0 {
        let rows = needs.allocator_below.min(left);
        if rows >= MIN_ALLOCATOR_HEIGHT {
            h.allocator_below = rows;
            left -= rows;
        }
    }
    if needs.density == Density::Full {
        grant_gpu_extras(&mut h, &mut left, needs, gpu_base);
    }
    // Seeing the processes matters more than the per-GPU detail lines, when there are any.
    let rows = u16::try_from(needs.process_rows).unwrap_or(u16::MAX);
    let unshown = rows.saturating_sub(MIN_PROCESS_HEIGHT - 1);
    let extra = COMFORTABLE_PROCESS_ROWS.min(unshown).min(left);
    left -= extra;
    h.processes += extra;
    // Every warning should be reachable without a key: the panel grows up to a third.
    let most = (area.height / 3).max(warnings);
    let wanted = if needs.warnings == 0 {
        0
    } else {
        1 + needs.warnings
    };
    let more = wanted.min(most).saturating_sub(warnings);
    let more = more.min(left);
    left -= more;
    h.warnings += more;
    if needs.density == Density::Auto {
        grant_gpu_extras(&mut h, &mut left, needs, gpu_base);
    }
    h.processes += left;
    h
}

/// The per-GPU detail lines, then the larger sparklines, each if all its rows are left.
/// The stacked sparklines (one row per chosen metric, three by default) come second.
fn grant_gpu_extras(h: &mut Heights, left: &mut u16, needs: &LayoutNeeds, gpu_base: u16) {
    let (gpu_count, detail_lines) = (needs.gpu_count, needs.gpu_detail_lines);
    if gpu_count > 0 && h.gpus == gpu_base && grant(left, detail_lines * gpu_count) {
        h.gpu_detail_lines = detail_lines;
        h.gpus += detail_lines * gpu_count;
    }
    let stacked = match needs.history_metrics {
        0 => 3,
        n => n,
    };
    let more = (stacked - 1) * gpu_count;
    if h.history > 0 && gpu_count <= 4 && grant(left, more) {
        h.history += more;
        h.history_rows_per_gpu = stacked;
    }
}

/// Takes `want` rows from `left` if all of them are there.
fn grant(left: &mut u16, want: u16) -> bool {
    let fits = want > 0 && want <= *left;
    if fits {
        *left -= want;
    }
    fits
}

fn warnings_height(count: u16, screen_height: u16) -> u16 {
    if count == 0 {
        return 0;
    }
    let most = if screen_height >= 40 { 5 } else { 2 };
    1 + count.min(most)
}

fn place(area: Rect, needs: &LayoutNeeds, h: &Heights) -> Areas {
    let mut y = area.y;
    let mut take = |height: u16| {
        let rect = Rect::new(area.x, y, area.width, height);
        y += height;
        rect
    };
    let header = take(1);
    let gpus = take(h.gpus);
    let history = (h.history > 0).then(|| take(h.history));
    let middle = take(needs.middle_height());
    let jobs = (h.jobs > 0).then(|| take(h.jobs));
    let warnings = (h.warnings > 0).then(|| take(h.warnings));
    let table = take(h.processes);
    let below = (h.allocator_below > 0).then(|| take(h.allocator_below));
    let status = take(1);
    let (balance, host) = match (needs.hide_balance, needs.hide_host) {
        (false, false) => split_middle(middle, needs.gpu_count),
        (true, _) => (Rect { width: 0, ..middle }, middle),
        (false, true) => (middle, Rect { width: 0, ..middle }),
    };
    let (processes, allocator) = match below {
        Some(rect) => (table, Some(rect)),
        None => split_table(table, needs.allocator_beside),
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
        warnings_view: WarningsViewArea::default(),
    }
}

fn split_middle(middle: Rect, gpu_count: u16) -> (Rect, Rect) {
    let wanted = gpu_count * BALANCE_GROUP_WIDTH + 2;
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
fn split_table(table: Rect, allocator_beside: bool) -> (Rect, Option<Rect>) {
    if table.width < WIDE_WIDTH || !allocator_beside {
        return (table, None);
    }
    let width = ALLOCATOR_WIDE_WIDTH;
    let processes = Rect::new(table.x, table.y, table.width - width, table.height);
    let panel = Rect::new(table.x + table.width - width, table.y, width, table.height);
    (processes, Some(panel))
}

impl Plan {
    /// How many process rows (not counting the header) this plan has room for.
    pub(crate) fn process_rows(&self) -> usize {
        match self {
            Plan::TooSmall { .. } => 0,
            Plan::Screen(areas) => usize::from(areas.processes.height.saturating_sub(1)),
        }
    }
}
