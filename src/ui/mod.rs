//! Drawing. Each panel is one pure `render` function in its own file; drawing only reads the
//! [`App`]. [`layout_needs`] tells the layout ([`crate::app::layout`]) what the
//! panels need; the event loop plans once per frame and hands the [`Plan`] to [`draw`].
//! [`crate::terminal::theme`] says how panels are coloured (or not, under NO_COLOR),
//! [`crate::format`] how figures read.

pub(crate) mod allocator;
pub(crate) mod allocator_figures;
pub(crate) mod balance;
/// The frame benchmark's way in (`torchtop::frame_bench`).
#[doc(hidden)]
pub mod bench;
pub(crate) mod detail;
pub(crate) mod dialog;
pub(crate) mod gpu_details;
pub(crate) mod gpus;
pub(crate) mod header;
pub(crate) mod help;
pub(crate) mod history;
pub(crate) mod host;
pub(crate) mod jobs;
pub(crate) mod label;
pub(crate) mod processes;
pub(crate) mod ranks;
pub(crate) mod scratch;
pub(crate) mod setup;
pub(crate) mod status;
pub(crate) mod warnings;
pub(crate) mod warnings_view;

#[cfg(test)]
mod tests;

use ratatui::{
    layout::{Alignment, Rect},
    style::Style,
    widgets::{Paragraph, Wrap},
    Frame,
};

use crate::app::layout::{self, Areas, LayoutNeeds, Plan};
use crate::app::App;
use crate::terminal::theme::Theme;

/// Draws one frame with the panels where `plan` puts them, inside `screen`, the area `plan` was
/// made for (the whole terminal, but for a replay's last row, which holds its time bar).
pub(crate) fn draw(frame: &mut Frame, screen: Rect, app: &App, plan: &Plan) {
    let theme = app.theme();
    let areas = match plan {
        // Nothing else: a dialog cut to this size could hide the pid it asks about.
        Plan::TooSmall { width, height } => {
            return draw_too_small(frame, screen, *width, *height);
        }
        Plan::Screen(areas) => areas,
    };
    draw_panels(frame, app, theme, areas);
    if app.warnings_view.is_open() {
        warnings_view::render(frame, areas.warnings_view, app, theme);
    }
    if let Some(view) = &app.detail {
        detail::render(frame, detail::area(screen, areas), app, view, theme);
    }
    if app.view.show_help {
        help::render(frame, screen, app, theme);
    }
    if let Some(setup) = &app.setup {
        setup::render(frame, screen, app, setup, theme);
    }
    dialog::render(frame, screen, app, theme);
}

/// What the panels need of a screen `width` columns wide, for [`layout::plan`].
pub(crate) fn layout_needs(app: &App, width: u16) -> LayoutNeeds {
    let panels = app.ui.panels;
    // An agent that has said nothing since it was connected to (a frozen process) is one too.
    let any_agent = (app.snapshot.processes.iter())
        .any(|p| p.torch.is_some() || p.agent_silent_seconds.is_some());
    // The PyTorch panel is about the selected row: a row without an agent gets one line saying
    // so, rather than rows of blank that the process table needs.
    let selected_agent = processes::selected_process(app).is_some_and(|p| p.torch.is_some());
    let (allocator_least, allocator_below) = match (panels.pytorch && any_agent, selected_agent) {
        (false, _) => (0, 0),
        (true, true) => allocator::wanted_heights(&app.snapshot, width),
        (true, false) => (1, 1),
    };
    LayoutNeeds {
        gpu_count: u16::try_from(app.snapshot.gpus.len()).unwrap_or(u16::MAX),
        gpu_message_lines: gpus::message_line_count(&app.snapshot, width),
        gpu_mig_lines: gpu_details::mig_line_count(&app.snapshot.gpus),
        gpu_detail_lines: if panels.gpu_details {
            gpu_details::detail_line_count(&app.snapshot.gpus, width)
        } else {
            0
        },
        warnings: u16::try_from(app.warnings_view.panel_rows()).unwrap_or(u16::MAX),
        warning_detail_lines: warnings_view::detail_line_count(&app.warnings_view, width),
        jobs: if panels.jobs {
            jobs::wanted_height(&app.snapshot)
        } else {
            0
        },
        process_rows: app.row_count(),
        allocator_least,
        allocator_below,
        allocator_beside: panels.pytorch && selected_agent,
        density: app.view.density,
        hide_history: !panels.history || app.ui.history.is_empty(),
        history_metrics: u16::try_from(app.ui.history.len()).unwrap_or(u16::MAX),
        hide_balance: !panels.balance,
        hide_host: !panels.host,
    }
}

/// The layout of `screen` for the app as it is now: what the event loop computes once a frame.
pub(crate) fn plan(app: &App, screen: Rect) -> Plan {
    layout::plan(screen, &layout_needs(app, screen.width))
}

fn draw_panels(frame: &mut Frame, app: &App, theme: Theme, areas: &Areas) {
    header::render(frame, areas.header, app, theme);
    let sub_rows = gpus::SubRows {
        mig: areas.mig_rows,
        detail_lines: areas.gpu_detail_lines,
    };
    gpus::render(frame, areas.gpus, app, theme, sub_rows);
    if let Some(area) = areas.history {
        history::render(frame, area, app, theme, areas.history_rows_per_gpu);
    }
    if !areas.balance.is_empty() {
        balance::render(frame, areas.balance, app, theme);
    }
    if !areas.host.is_empty() {
        host::render(frame, areas.host, app, theme);
    }
    if let Some(area) = areas.hidden_note {
        draw_hidden_note(frame, area, areas.hidden, theme);
    }
    if let Some(area) = areas.jobs {
        jobs::render(frame, area, app, theme);
    }
    if let Some(area) = areas.warnings {
        warnings::render(frame, area, app, theme);
    }
    processes::render(frame, areas.processes, app, theme);
    if let Some(area) = areas.allocator {
        allocator::render(frame, area, app, theme);
    }
    status::render(frame, areas.status, app, theme);
}

/// " history, balance, host hidden: enlarge the terminal to see them", as the GPU panel says
/// "+7 more GPUs: enlarge the terminal to see them" when it has to leave some out.
fn draw_hidden_note(frame: &mut Frame, area: Rect, hidden: layout::Hidden, theme: Theme) {
    let names = [
        (hidden.history, "history"),
        (hidden.balance, "balance"),
        (hidden.host, "host"),
        (hidden.jobs, "jobs"),
        (hidden.warnings, "warnings"),
        (hidden.pytorch, "PyTorch"),
    ];
    let names = names.iter().filter_map(|(h, name)| h.then_some(*name));
    // Written into the kept runs: drawn at every frame of a small terminal, it allocated five
    // times a frame.
    let mut scratch = scratch::take();
    let runs = &mut scratch.runs;
    runs.clear();
    runs.push_with(theme.dim(), |text| {
        text.push(' ');
        for (i, name) in names.enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            text.push_str(name);
        }
        text.push_str(" hidden: enlarge the terminal to see them");
    });
    runs.end_line(Style::new());
    frame.render_widget(&*runs, area);
}

fn draw_too_small(frame: &mut Frame, screen: Rect, width: u16, height: u16) {
    let message = format!(
        "torchtop needs at least {}x{}\n(now {width}x{height})\nq quits; other keys wait for a larger window",
        layout::MIN_WIDTH,
        layout::MIN_HEIGHT
    );
    let y = screen.height / 2;
    let area = Rect::new(screen.x, screen.y + y, screen.width, screen.height - y);
    frame.render_widget(
        Paragraph::new(message)
            .alignment(Alignment::Center)
            .wrap(Wrap { trim: true }),
        area,
    );
}
