//! The process table stays filled from its top when its rows or its height change, as htop's
//! does: rows scrolled off the top come back rather than blank lines below the last row (a
//! review: `End`, then a filter matching 10 of 22 rows drew 5 of them over 5 blank lines).

use super::*;
use crate::app::layout::Plan;
use crossterm::event::{KeyCode, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};

/// Four GPUs and 22 processes, pids 20000 to 20021, at 120x40 with the last row selected.
fn at_the_end() -> App {
    let mut snapshot = busy_snapshot(4, 0, 0);
    snapshot.processes = (0..22).map(|k| process(k, k % 4)).collect();
    let mut app = sized(app_with(snapshot), 120, 40);
    key(&mut app, KeyCode::End);
    app
}

/// The pids of the table's rows drawn on `screen`, top to bottom.
fn drawn_pids(screen: &str) -> Vec<u32> {
    screen
        .lines()
        .filter(|l| l.contains("train.py"))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The frame as the event loop draws it: laid out, then drawn.
fn frame(app: &mut App, width: u16, height: u16) -> String {
    let plan = crate::ui::plan(app, ratatui::layout::Rect::new(0, 0, width, height));
    app.set_layout(plan);
    screen(app, width, height)
}

#[test]
fn a_filter_typed_at_the_end_of_the_table_shows_every_match() {
    let mut app = at_the_end();
    let before = frame(&mut app, 120, 40);
    assert!(drawn_pids(&before).len() < 22, "{before}");
    key(&mut app, KeyCode::Char('/'));
    for c in "2001".chars() {
        key(&mut app, KeyCode::Char(c));
    }
    let s = frame(&mut app, 120, 40);
    assert!(s.contains("(10 of 22)"), "{s}");
    let mut drawn = drawn_pids(&s);
    drawn.sort_unstable();
    assert_eq!(drawn, (20_010..20_020).collect::<Vec<_>>(), "{s}");
}

#[test]
fn rows_that_exit_at_the_end_bring_the_rows_above_back() {
    let mut app = at_the_end();
    let shown = drawn_pids(&frame(&mut app, 120, 40)).len();
    let mut fewer = busy_snapshot(4, 0, 0);
    fewer.processes = (0..(shown as u32 - 2)).map(|k| process(k, k % 4)).collect();
    app.on_snapshot(Arc::new(fewer));
    let s = frame(&mut app, 120, 40);
    assert_eq!(drawn_pids(&s).len(), shown - 2, "{s}");
}

#[test]
fn a_taller_terminal_shows_the_rows_above_not_blank_lines() {
    let mut app = at_the_end();
    let short = drawn_pids(&frame(&mut app, 120, 30)).len();
    let s = frame(&mut app, 120, 50);
    let page = app.view.page_rows;
    assert!(page > short, "{page} rows at 120x50, {short} at 120x30");
    assert_eq!(drawn_pids(&s).len(), page.min(22), "{s}");
    // The click map agrees with what is drawn.
    let Plan::Screen(areas) = &app.view.plan else {
        panic!("no screen at 120x50");
    };
    let top = areas.processes.y + 1;
    let first = drawn_pids(&s)[0];
    app.on_mouse(MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column: areas.processes.x + 2,
        row: top,
        modifiers: KeyModifiers::NONE,
    });
    assert_eq!(app.selected_row().map(|r| r.pid), Some(first));
}
