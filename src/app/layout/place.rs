//! Turns the rows [`super::heights`] granted each panel into their rectangles, top to bottom
//! as the layout's documentation draws them, and splits the balance and host strip and (in a
//! wide terminal) the table and the allocator panel side by side.

use ratatui::layout::Rect;

use super::{
    Areas, Heights, LayoutNeeds, WarningsViewArea, ALLOCATOR_WIDE_WIDTH, BALANCE_GROUP_WIDTH,
    WIDE_WIDTH,
};
use crate::app::view::Density;

pub(super) fn place(area: Rect, needs: &LayoutNeeds, h: &Heights) -> Areas {
    let mut y = area.y;
    let mut take = |height: u16| {
        let rect = Rect::new(area.x, y, area.width, height);
        y += height;
        rect
    };
    let header = take(1);
    let gpus = take(h.gpus);
    let history = (h.history > 0).then(|| take(h.history));
    let middle = take(h.middle);
    let hidden_note = (h.note > 0).then(|| take(h.note));
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
        None => split_table(
            table,
            needs.allocator_beside && needs.density != Density::Compact,
        ),
    };
    Areas {
        header,
        gpus,
        gpu_detail_lines: h.gpu_detail_lines,
        mig_rows: h.mig_rows,
        history,
        history_rows_per_gpu: h.history_rows_per_gpu,
        balance,
        host,
        hidden_note,
        hidden: h.hidden,
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
