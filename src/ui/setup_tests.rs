//! Render tests of the setup screen (F2) and of the themes: text snapshots of the screen at
//! three sizes, a snapshot of the styles each theme draws with, and the check that no cell of
//! any theme is ANSI colour 8.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crossterm::event::KeyCode;
use ratatui::{buffer::Buffer, style::Color};

use super::{key, render, screen, text, torch_app};
use crate::app::App;
use crate::config::{ThemeName, UiConfig};

const SIZES: [(u16, u16); 3] = [(80, 24), (120, 40), (200, 50)];

/// The setup screen open, with a config file to save to.
fn setup_open() -> App {
    let mut app = torch_app().with_ui(
        UiConfig::default(),
        Some(PathBuf::from("/nonexistent/torchtop/config.toml")),
        None,
    );
    key(&mut app, KeyCode::F(2));
    app
}

/// A review: the status line said `q quit` under the setup screen, where q closes it.
#[test]
fn the_status_line_under_the_setup_screen_says_q_closes() {
    let s = screen(&setup_open(), 120, 40);
    let last = s.lines().last().unwrap();
    assert!(last.contains("q close  F10 quit"), "{last}");
    assert!(!last.contains("q quit"), "{last}");
}

#[test]
fn the_close_hint_says_when_nothing_will_be_saved() {
    let bottom = |app: &App| {
        let s = screen(app, 120, 40);
        s.lines()
            .find(|l| l.contains("Esc:"))
            .unwrap_or_default()
            .to_string()
    };
    assert!(bottom(&setup_open()).contains("Esc: save and close"));
    for (path, notice) in [
        (None, None),
        (
            Some(PathBuf::from("/nonexistent/torchtop/config.toml")),
            Some("config [ui] not used: line 2: ...".to_string()),
        ),
    ] {
        let mut app = torch_app().with_ui(UiConfig::default(), path, notice);
        key(&mut app, KeyCode::F(2));
        assert!(
            bottom(&app).contains("Esc: close (not saved)"),
            "{}",
            bottom(&app)
        );
    }
}

#[test]
fn setup_screen_at_three_sizes() {
    let app = setup_open();
    for (w, h) in SIZES {
        let s = screen(&app, w, h);
        insta::assert_snapshot!(format!("setup_{w}x{h}"), s);
        for needed in [
            "Setup (F2)",
            "Panels",
            "[x] GPU detail rows",
            "History plots",
            "[ ] temperature",
            "Process columns",
            "[x] GMEM%",
            "Refresh",
            "◀ 1 s ▶",
            "Theme",
            "◀ dark ▶",
            "Esc: save and close",
        ] {
            assert!(s.contains(needed), "{needed} at {w}x{h}:\n{s}");
        }
    }
}

#[test]
fn setup_changes_show_at_once() {
    let mut app = setup_open();
    // The first item is the GPU detail rows; the cursor is on it.
    key(&mut app, KeyCode::Char(' '));
    let s = screen(&app, 120, 40);
    assert!(s.contains("[ ] GPU detail rows"), "{s}");
    key(&mut app, KeyCode::End);
    key(&mut app, KeyCode::Right);
    assert!(screen(&app, 120, 40).contains("◀ light ▶"));
    key(&mut app, KeyCode::Esc);
    let s = screen(&app, 120, 40);
    assert!(!s.contains("Setup (F2)"), "{s}");
}

#[test]
fn a_small_screen_scrolls_the_setup_list_to_the_cursor() {
    let mut app = setup_open();
    key(&mut app, KeyCode::End);
    let s = screen(&app, 60, 16);
    assert!(s.contains("◀ dark ▶"), "{s}");
    assert!(!s.contains("GPU detail rows"), "{s}");
}

#[test]
fn hidden_panels_and_columns_leave_the_screen() {
    let mut app = torch_app();
    app.ui.panels.history = false;
    app.ui.panels.host = false;
    app.ui.hidden_columns = vec!["user".to_string()];
    let s = screen(&app, 200, 50);
    assert!(!s.contains("HISTORY"), "{s}");
    assert!(!s.contains("HOST"), "{s}");
    assert!(s.contains("BALANCE"), "{s}");
    assert!(!s.contains("USER"), "{s}");
    app.ui.panels.balance = false;
    let s = screen(&app, 200, 50);
    assert!(!s.contains("BALANCE"), "{s}");
    assert!(s.contains("PID"), "{s}");
}

/// Each distinct style on screen, in order of first appearance, with the text it first drew.
fn styles_used(buffer: &Buffer) -> String {
    let mut seen: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let width = usize::from(buffer.area.width);
    for (i, cell) in buffer.content().iter().enumerate() {
        let style = format!("fg={:?} bg={:?} mod={:?}", cell.fg, cell.bg, cell.modifier);
        let entry = seen.entry(style).or_insert_with(|| (i, String::new()));
        // A sample of the text: up to 16 cells of the first row it appeared on.
        if i / width == entry.0 / width && entry.1.chars().count() < 16 {
            entry.1.push_str(cell.symbol());
        }
    }
    let mut rows: Vec<(usize, String)> = seen
        .into_iter()
        .map(|(style, (at, sample))| (at, format!("{style:<60} {:?}", sample.trim())))
        .collect();
    rows.sort();
    rows.into_iter()
        .map(|(_, r)| r)
        .collect::<Vec<_>>()
        .join("\n")
}

fn themed(name: ThemeName) -> App {
    let mut app = torch_app();
    app.ui.theme = name;
    app.status = Some("sent SIGTERM to 20000".to_string());
    let mut snapshot = (*app.snapshot).clone();
    snapshot.gpus[0].throttle_reasons = Some(vec!["sw_power_cap".to_string()].into());
    snapshot.gpus[1].throttle_reasons = Some(vec!["hw_thermal_slowdown".to_string()].into());
    app.on_snapshot(Arc::new(snapshot));
    app
}

#[test]
fn each_theme_draws_with_its_own_styles() {
    for name in ThemeName::ALL {
        let app = themed(name);
        let styles = styles_used(&render(&app, 120, 40));
        insta::assert_snapshot!(format!("theme_{}_styles_120x40", name.name()), styles);
        insta::assert_snapshot!(format!("theme_{}_80x24", name.name()), screen(&app, 80, 24));
    }
}

#[test]
fn no_cell_of_any_theme_is_ansi_colour_8() {
    for name in ThemeName::ALL {
        let mut app = themed(name);
        for with_setup in [false, true] {
            if with_setup {
                key(&mut app, KeyCode::F(2));
            }
            for (w, h) in SIZES {
                let buffer = render(&app, w, h);
                for cell in buffer.content() {
                    for color in [cell.fg, cell.bg] {
                        assert!(
                            !matches!(color, Color::DarkGray | Color::Indexed(8)),
                            "{name:?} at {w}x{h}:\n{}",
                            text(&buffer)
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn mono_and_no_color_draw_no_colour() {
    let mut app = themed(ThemeName::Dark);
    app.colors = false;
    let buffer = render(&app, 120, 40);
    assert!(buffer
        .content()
        .iter()
        .all(|c| c.fg == Color::Reset && c.bg == Color::Reset));
}

#[test]
fn load_colours_and_limits() {
    let app = themed(ThemeName::Dark);
    let buffer = render(&app, 200, 50);
    let s = text(&buffer);
    let row = |needle: &str| super::row_of(&s, needle) as u16;
    // GPU 0 is held at its power cap, GPU 1 at its thermal limit: their index cells stand out.
    let gpu0 = row("0 NVIDIA H100");
    let index0 = buffer[(2, gpu0)].style();
    assert_eq!(index0.bg, Some(Color::Yellow), "{s}");
    let gpu1 = row("1 NVIDIA H100");
    assert_eq!(buffer[(2, gpu1)].style().fg, Some(Color::Red), "{s}");
}

#[test]
fn the_history_plots_the_chosen_metrics_and_na_for_missing_ones() {
    use crate::config::HistoryMetric;
    let mut app = super::app_after(|t| {
        let mut snapshot = super::busy_snapshot(2, 1, t);
        snapshot.gpus[1].decoder_percent = None;
        snapshot
    });
    app.ui.history = vec![
        HistoryMetric::Temperature,
        HistoryMetric::PcieRx,
        HistoryMetric::Decoder,
    ];
    let s = screen(&app, 120, 40);
    insta::assert_snapshot!("history_chosen_120x40", s);
    let gpu0 = super::row_of(&s, "HISTORY") + 1;
    let rows: Vec<&str> = s.lines().skip(gpu0).take(6).collect();
    assert!(rows[0].contains("temp") && rows[0].ends_with("55C"), "{s}");
    assert!(
        rows[1].contains("pci rx") && rows[1].ends_with("G/s"),
        "{s}"
    );
    assert!(rows[2].contains("dec") && rows[2].ends_with("0%"), "{s}");
    assert!(rows[5].contains("dec") && rows[5].ends_with("N/A"), "{s}");
    assert!(
        !s.contains("memory  "),
        "util, memory and power were unchosen:\n{s}"
    );
    // None chosen: no history panel at all.
    app.ui.history.clear();
    assert!(!screen(&app, 120, 40).contains("HISTORY"));
}
