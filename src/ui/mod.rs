//! Drawing. Each panel is one pure `render` function in its own file; drawing only reads the
//! [`App`](crate::app::App). [`layout`] decides where the panels go for the terminal's size,
//! [`theme`] how they are coloured (or not, under NO_COLOR), [`format`] how figures read.

pub mod allocator;
pub mod balance;
pub mod dialog;
pub mod format;
pub mod gpus;
pub mod header;
pub mod help;
pub mod history;
pub mod host;
pub mod jobs;
pub mod layout;
pub mod processes;
mod state;
pub mod status;
pub mod theme;
pub mod warnings;

#[cfg(test)]
mod tests;

pub use processes::{selected_process, visible_rows};
pub use state::{first_visible_row, ViewState};

use ratatui::{
    layout::{Alignment, Rect},
    widgets::{Paragraph, Wrap},
    Frame,
};

use crate::app::App;
use layout::{Areas, Plan};
use theme::Theme;

pub fn draw(frame: &mut Frame, app: &App) {
    draw_in(frame, frame.area(), app);
}

/// Draws everything inside `screen` (a replay keeps the last row for its time bar).
pub fn draw_in(frame: &mut Frame, screen: Rect, app: &App) {
    let theme = Theme::new(app.colors);
    match layout::plan(screen, app) {
        Plan::TooSmall { width, height } => draw_too_small(frame, screen, width, height),
        Plan::Screen(areas) => draw_panels(frame, app, theme, &areas),
    }
    if app.view.warnings_expanded && !app.snapshot.warnings.is_empty() {
        warnings::render_expanded(frame, screen, app, theme);
    }
    if app.view.show_help {
        help::render(frame, screen, app, theme);
    }
    dialog::render(frame, screen, app, theme);
}

/// How many process rows a terminal of `size` shows, for [`ViewState::set_page_rows`].
pub fn process_rows_visible(size: Rect, app: &App) -> usize {
    layout::process_rows(size, app)
}

fn draw_panels(frame: &mut Frame, app: &App, theme: Theme, areas: &Areas) {
    header::render(frame, areas.header, app, theme);
    gpus::render(frame, areas.gpus, app, theme, areas.gpu_detail_lines);
    if let Some(area) = areas.history {
        history::render(frame, area, app, theme, areas.history_rows_per_gpu);
    }
    balance::render(frame, areas.balance, app, theme);
    host::render(frame, areas.host, app, theme);
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

fn draw_too_small(frame: &mut Frame, screen: Rect, width: u16, height: u16) {
    let message = format!(
        "torchtop needs at least {}x{}\n(now {width}x{height})",
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
