//! Chooses where each panel goes for a given terminal size and what the panels ask for
//! ([`LayoutNeeds`]). As in nvtop and nvitop, the GPUs and the processes come first: the
//! header, the status line and the table's header with two rows; every GPU line with its MIG
//! sub-rows; the table's first rows (8, or a third of the screen when that is more; 6 with
//! `f`). Then, cut or left out when rows run short: the warnings, the jobs, the PyTorch panel, the balance and host
//! strip and the history, those left out named on one line ([`Hidden`]) that takes its row
//! from them, not from the table's first rows. Then the GPU detail lines and larger
//! sparklines (`f` before the warnings grow to a third of the screen, `a` after), and the rest
//! to the table. `c` keeps the first three and the warnings' title. The
//! event loop plans once per frame and keeps the [`Plan`] in the view state, so paging and
//! mouse clicks use the areas the user sees.
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
//! | what was hidden for want of rows (when something was)         |  1 row
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

mod place;

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
/// The process table's header and this many rows are kept even before the GPU lines.
const MIN_PROCESS_HEIGHT: u16 = 3;
/// The fewest rows worth giving the allocator panel below the table: its title and one line.
const MIN_ALLOCATOR_HEIGHT: u16 = 2;
/// Process rows granted before any side panel: this many, or a third of the screen's height
/// when that is more. Side panels are glanced at; the table is where actions are aimed.
const FIRST_PROCESS_ROWS: u16 = 8;
/// With `f` (full) the details come first, after this many rows.
const FULL_FIRST_PROCESS_ROWS: u16 = 6;

/// What the panels ask of the layout for one terminal width: the ui computes it from the app
/// (`ui::layout_needs`), so that this module needs neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LayoutNeeds {
    pub(crate) gpu_count: u16,
    /// Lines the message shown instead of the GPU table wraps to (no driver, no GPUs); 0 with
    /// GPUs.
    pub(crate) gpu_message_lines: u16,
    /// MIG sub-rows of every GPU together: granted with the GPU lines, before any panel, as
    /// nvitop always shows them.
    pub(crate) gpu_mig_lines: u16,
    /// Detail lines (not the MIG sub-rows) the busiest GPU needs under its main line at this
    /// width.
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
    /// Rows the allocator panel wants below the table: its full height for a selected row with
    /// an agent (the same for every such row, so that moving among them resizes nothing), one
    /// line saying so for a row without, 0 when no process has an agent.
    pub(crate) allocator_below: u16,
    /// Rows the allocator panel below the table is cut to when `allocator_below` does not fit:
    /// its title, OOM lines and ranks table, without the figures that need all their rows.
    pub(crate) allocator_least: u16,
    /// Whether the selected row has an agent, so the allocator panel has a place beside a wide
    /// table.
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
    /// Whether each GPU's MIG sub-rows are drawn under its main line (not when even the GPU
    /// lines with them leave the table less than its least).
    pub(crate) mig_rows: bool,
    /// Detail lines drawn under each GPU's main line (and its MIG sub-rows); 0 when there is
    /// no room.
    pub(crate) gpu_detail_lines: u16,
    pub(crate) history: Option<Rect>,
    /// 1: the sparklines of a GPU share one row; more: one row each.
    pub(crate) history_rows_per_gpu: u16,
    pub(crate) balance: Rect,
    pub(crate) host: Rect,
    /// The line naming the panels left out for want of rows, when there are any.
    pub(crate) hidden_note: Option<Rect>,
    pub(crate) hidden: Hidden,
    pub(crate) jobs: Option<Rect>,
    pub(crate) warnings: Option<Rect>,
    pub(crate) processes: Rect,
    pub(crate) allocator: Option<Rect>,
    pub(crate) status: Rect,
    /// The `w` view over the panels.
    pub(crate) warnings_view: WarningsViewArea,
}

/// Panels the layout left out for want of rows (not those turned off with F2 or `c`): the
/// screen names them, so that a missing panel is not taken for a fault.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Hidden {
    pub(crate) history: bool,
    pub(crate) balance: bool,
    pub(crate) host: bool,
    pub(crate) jobs: bool,
    pub(crate) warnings: bool,
    pub(crate) pytorch: bool,
}

impl Hidden {
    pub(crate) fn any(self) -> bool {
        self != Hidden::default()
    }
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
#[derive(Clone, Copy)]
struct Heights {
    gpus: u16,
    mig_rows: bool,
    gpu_detail_lines: u16,
    history: u16,
    history_rows_per_gpu: u16,
    middle: u16,
    note: u16,
    hidden: Hidden,
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
    let mut areas = place::place(area, needs, &heights);
    areas.warnings_view = warnings_view_area(area, needs.warning_detail_lines);
    Plan::Screen(areas)
}

/// Hands out the rows in the order the module's documentation gives.
fn heights(area: Rect, needs: &LayoutNeeds) -> Heights {
    let gpu_base = gpu_base(needs);
    // Less the header and the status line; MIN_HEIGHT leaves the table its least below them.
    let mut left = area.height - 2;
    // The MIG sub-rows come with the GPU lines when the table keeps its first rows, or not at
    // all, leaving the GPU lines their rows (a review: 2 GPUs of 7 instances each left 3 of 14
    // processes at 80x24).
    let first_rows = first_table_height(area.height, needs);
    let mig_rows = needs.gpu_mig_lines > 0 && gpu_base.saturating_add(first_rows) <= left;
    let gpus = if mig_rows {
        gpu_base
    } else {
        (gpu_base - needs.gpu_mig_lines).min(left - MIN_PROCESS_HEIGHT)
    };
    left -= gpus;
    let processes = first_rows.min(left);
    left -= processes;
    let mut h = Heights {
        gpus,
        mig_rows,
        gpu_detail_lines: 0,
        history: 0,
        history_rows_per_gpu: 1,
        middle: 0,
        note: 0,
        hidden: Hidden::default(),
        jobs: 0,
        warnings: 0,
        processes,
        allocator_below: 0,
    };
    if needs.density == Density::Compact {
        // The warnings' title only: their count, and `w` for the rest.
        h.warnings = warnings_height(needs.warnings, area.height)
            .min(1)
            .min(left);
        h.processes += left - h.warnings;
        return h;
    }
    grant_panels_and_note(&mut h, &mut left, area, needs);
    if needs.density == Density::Full {
        grant_gpu_extras(&mut h, &mut left, needs, gpu_base);
    }
    grow_warnings(&mut h, &mut left, area.height, needs);
    if needs.density == Density::Auto {
        grant_gpu_extras(&mut h, &mut left, needs, gpu_base);
    }
    h.processes += left;
    h
}

/// The GPU panel's rows: its title, a line per GPU and the MIG sub-rows, or the message shown
/// without GPUs.
fn gpu_base(needs: &LayoutNeeds) -> u16 {
    if needs.gpu_count == 0 {
        1 + needs
            .gpu_message_lines
            .clamp(MIN_GPU_MESSAGE_LINES, MAX_GPU_MESSAGE_LINES)
    } else {
        // Saturating: a crafted recording may list any number of MIG devices.
        1u16.saturating_add(needs.gpu_count)
            .saturating_add(needs.gpu_mig_lines)
    }
}

/// The table's header and the rows it gets before any side panel: no more than there are
/// processes, never fewer than [`MIN_PROCESS_HEIGHT`] holds.
fn first_table_height(height: u16, needs: &LayoutNeeds) -> u16 {
    let wanted = match needs.density {
        Density::Full => FULL_FIRST_PROCESS_ROWS,
        Density::Auto | Density::Compact => FIRST_PROCESS_ROWS.max(height / 3),
    };
    let rows = u16::try_from(needs.process_rows).unwrap_or(u16::MAX);
    1 + wanted.min(rows).max(MIN_PROCESS_HEIGHT - 1)
}

/// The side panels, most needed first. The warnings and the jobs are cut to the rows left;
/// the others show whole or not at all. What did not fit goes into `h.hidden`.
fn grant_panels(h: &mut Heights, left: &mut u16, area: Rect, needs: &LayoutNeeds, gpu_base: u16) {
    let warnings = warnings_height(needs.warnings, area.height);
    h.warnings = warnings.min(*left);
    *left -= h.warnings;
    h.hidden.warnings = warnings > 0 && h.warnings == 0;
    h.jobs = needs.jobs.min(*left);
    *left -= h.jobs;
    h.hidden.jobs = needs.jobs > 0 && h.jobs == 0;
    grant_allocator(h, left, area, needs);
    let middle = needs.middle_height();
    if grant(left, middle) {
        h.middle = middle;
    } else {
        h.hidden.balance = !needs.hide_balance;
        h.hidden.host = !needs.hide_host;
    }
    let gpu_count = needs.gpu_count;
    if gpu_count > 0 && !needs.hide_history {
        if h.gpus == gpu_base && grant(left, 1 + gpu_count) {
            h.history = 1 + gpu_count;
        } else {
            h.hidden.history = true;
        }
    }
}

/// The allocator panel below a narrow table (or the line for a row without an agent): what it
/// wants, else its least (or what is left of it when that holds its title and a device's OOM
/// line), never rows it would leave blank.
fn grant_allocator(h: &mut Heights, left: &mut u16, area: Rect, needs: &LayoutNeeds) {
    let wanted = needs.allocator_below;
    let beside = area.width >= WIDE_WIDTH && needs.allocator_beside;
    if wanted == 0 || beside {
        return;
    }
    let rows = if wanted <= *left {
        wanted
    } else {
        needs.allocator_least.min(*left)
    };
    if rows == wanted || rows >= MIN_ALLOCATOR_HEIGHT {
        h.allocator_below = rows;
        *left -= rows;
    } else {
        h.hidden.pytorch = true;
    }
}

/// The side panels, then a line naming what was hidden. That line's row comes out of the side
/// panels (they are granted again with one row less), never out of the table's first rows;
/// only when no row at all is left for the side panels does the table give it one.
fn grant_panels_and_note(h: &mut Heights, left: &mut u16, area: Rect, needs: &LayoutNeeds) {
    let (before, rows, gpu_base) = (*h, *left, gpu_base(needs));
    grant_panels(h, left, area, needs, gpu_base);
    if h.hidden.any() && *left == 0 && rows > 0 {
        (*h, *left) = (before, rows - 1);
        grant_panels(h, left, area, needs, gpu_base);
        *left += 1;
    }
    grant_note(h, left);
}

/// A line naming what was hidden: from the rows left, else from the table while it keeps
/// more than its least.
fn grant_note(h: &mut Heights, left: &mut u16) {
    if !h.hidden.any() {
        return;
    }
    if *left > 0 {
        *left -= 1;
        h.note = 1;
    } else if h.processes > MIN_PROCESS_HEIGHT {
        h.processes -= 1;
        h.note = 1;
    }
}

/// Every warning should be reachable without a key: the panel grows up to a third.
fn grow_warnings(h: &mut Heights, left: &mut u16, height: u16, needs: &LayoutNeeds) {
    let most = (height / 3).max(h.warnings);
    let wanted = if needs.warnings == 0 {
        0
    } else {
        1 + needs.warnings
    };
    let more = wanted.min(most).saturating_sub(h.warnings).min(*left);
    *left -= more;
    h.warnings += more;
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

impl Plan {
    /// How many process rows (not counting the header) this plan has room for.
    pub(crate) fn process_rows(&self) -> usize {
        match self {
            Plan::TooSmall { .. } => 0,
            Plan::Screen(areas) => usize::from(areas.processes.height.saturating_sub(1)),
        }
    }
}
