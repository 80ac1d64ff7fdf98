//! Drawing. Each panel is one pure `render` function in its own file; drawing only reads the
//! [`App`](crate::app::App).

mod state;

pub use state::ViewState;

use ratatui::{widgets::Paragraph, Frame};

use crate::app::App;

pub fn draw(frame: &mut Frame, app: &App) {
    let names: Vec<String> = app
        .snapshot
        .gpus
        .iter()
        .map(|g| format!("{} {}", g.index, g.name.as_deref().unwrap_or("N/A")))
        .chain(app.snapshot.driver.error.clone())
        .collect();
    frame.render_widget(Paragraph::new(names.join("\n")), frame.area());
}
