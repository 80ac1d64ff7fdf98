//! The layout's priorities as the screen shows them: every GPU line and a table of at least 8
//! process rows (a third of a taller screen) come before the history, balance, host, jobs and
//! warnings panels, which shrink or hide first and are named on screen when hidden; `c` gives
//! the table the most rows at every size; the PyTorch panel takes rows only for a selected row
//! with an agent.

use super::*;
use crate::app::layout::Plan;
use crossterm::event::KeyCode;
use ratatui::layout::Rect;

/// The sizes the reviewer drove the monitor at, and two more.
const SIZES: [(u16, u16); 6] = [
    (60, 16),
    (80, 24),
    (100, 30),
    (120, 40),
    (200, 50),
    (300, 20),
];

fn plan_of(app: &App, width: u16, height: u16) -> Plan {
    crate::ui::plan(app, Rect::new(0, 0, width, height))
}

fn rows(app: &App, width: u16, height: u16) -> usize {
    plan_of(app, width, height).process_rows()
}

/// Eight GPUs, 64 processes and seven warnings of seven kinds (seven lines in the panel).
fn eight_gpus_with_warnings() -> App {
    app_after(|t| {
        let mut snapshot = busy_snapshot(8, 8, t);
        snapshot.warnings = (0..7)
            .map(|i| {
                let id = format!("rule-{i}");
                warning(
                    &id,
                    Severity::Info,
                    Subject::Gpu { index: i },
                    "clocks held",
                )
            })
            .collect();
        snapshot
    })
}

/// Eight GPUs and 64 processes; the last of the table (the least GPU memory) has an agent.
fn one_agent_app() -> App {
    app_after(|t| {
        let mut snapshot = busy_snapshot(8, 8, t);
        let last = snapshot.processes.last_mut().expect("64 processes");
        last.gpu_memory_bytes = Some(GIB);
        last.torch = Some(Arc::new(torch_info(0, t)));
        snapshot
    })
}

fn gpu_lines_shown(s: &str) -> usize {
    (0..8)
        .filter(|i| {
            let start = format!("  {i} ");
            s.lines()
                .any(|l| l.starts_with(&start) && l.contains("H100"))
        })
        .count()
}

#[test]
fn at_80x24_every_gpu_line_and_8_process_rows_come_before_balance_host_and_warnings() {
    let app = sized(eight_gpus_with_warnings(), 80, 24);
    let shown = rows(&app, 80, 24);
    let s = screen(&app, 80, 24);
    assert!(shown >= 8, "{shown} process rows:\n{s}");
    assert_eq!(gpu_lines_shown(&s), 8, "{s}");
    assert!(
        s.contains("WARNINGS (7)"),
        "the warnings' count stays:\n{s}"
    );
    let note = line_with(&s, "hidden");
    assert!(
        note.contains("balance") && note.contains("host") && note.contains("enlarge"),
        "{note}"
    );
}

#[test]
fn gpu_lines_come_before_balance_and_host_on_short_screens() {
    for (width, height) in [(60, 16), (300, 20)] {
        let app = sized(eight_gpu_app(), width, height);
        let s = screen(&app, width, height);
        assert!(!s.contains("more GPUs"), "{width}x{height}:\n{s}");
        assert_eq!(gpu_lines_shown(&s), 8, "{width}x{height}:\n{s}");
        assert!(!s.contains("BALANCE"), "{width}x{height}:\n{s}");
        assert!(line_with(&s, "hidden").contains("balance"), "{s}");
        assert!(rows(&app, width, height) >= 3, "{width}x{height}:\n{s}");
    }
    // Where the panels fit, nothing is said hidden.
    let s = screen(&sized(eight_gpu_app(), 200, 50), 200, 50);
    assert!(s.contains("BALANCE") && !s.contains("hidden"), "{s}");
}

#[test]
fn compact_gives_the_table_more_rows_than_auto_at_every_size() {
    for (width, height) in SIZES {
        let mut app = sized(eight_gpus_with_warnings(), width, height);
        let auto = rows(&app, width, height);
        key(&mut app, KeyCode::Char('c'));
        let app = sized(app, width, height);
        let compact = rows(&app, width, height);
        let s = screen(&app, width, height);
        assert!(
            compact > auto,
            "{width}x{height}: compact {compact}, auto {auto}:\n{s}"
        );
        assert!(!s.contains("BALANCE") && !s.contains("HIST"), "{s}");
        let Plan::Screen(areas) = plan_of(&app, width, height) else {
            panic!("too small");
        };
        assert!(areas.history.is_none() && areas.balance.height == 0, "{s}");
    }
}

#[test]
fn an_agent_in_another_process_takes_no_rows_from_a_plain_selected_row() {
    for (width, height) in [(80, 24), (120, 40), (200, 50)] {
        let without = rows(&sized(eight_gpu_app(), width, height), width, height);
        let mut app = sized(one_agent_app(), width, height);
        let selected = crate::ui::processes::selected_process(&app).unwrap();
        assert!(selected.torch.is_none(), "a plain row is selected");
        let with = rows(&app, width, height);
        let s = screen(&app, width, height);
        // One line at most says the selected row has no agent.
        assert!(
            with + 1 >= without,
            "{width}x{height}: {with} < {without}:\n{s}"
        );
        assert_eq!(s.matches("PYTORCH").count(), 1, "{s}");
        assert!(
            line_with(&s, "PYTORCH").contains("no torchtop agent"),
            "{s}"
        );
        // On the agent's row, the panel opens with its figures.
        key(&mut app, KeyCode::End);
        let app = sized(app, width, height);
        let Plan::Screen(areas) = plan_of(&app, width, height) else {
            panic!("too small");
        };
        assert!(areas.allocator.is_some_and(|a| a.height > 1), "{areas:?}");
        let s = screen(&app, width, height);
        assert!(s.contains("cuda:0 = GPU 0"), "{width}x{height}:\n{s}");
    }
}

/// `gpus` GPUs and seven processes; the first row (the most GPU memory) has an agent.
fn seven_processes_one_agent(gpus: u32) -> App {
    app_after(|t| {
        let mut snapshot = busy_snapshot(gpus, 0, t);
        snapshot.processes = (0..7).map(|k| process(k, k % gpus)).collect();
        let first = &mut snapshot.processes[0];
        first.gpu_memory_bytes = Some(20 * GIB);
        first.torch = Some(Arc::new(torch_info(0, t)));
        snapshot
    })
}

/// At 80x24, and at 80x23 (a replay's screen, whose last row is its time bar).
#[test]
fn at_80x24_seven_process_rows_come_before_the_pytorch_panel() {
    for (gpus, height) in (1..=8).flat_map(|gpus| [(gpus, 24), (gpus, 23)]) {
        let app = sized(seven_processes_one_agent(gpus), 80, height);
        let selected = crate::ui::processes::selected_process(&app).unwrap();
        assert!(selected.torch.is_some(), "the agent's row is selected");
        let s = screen(&app, 80, height);
        assert!(
            rows(&app, 80, height) >= 7,
            "{gpus} GPUs, 80x{height}:\n{s}"
        );
        for k in 0..7 {
            let pid = format!("{}", 20_000 + k);
            assert!(s.contains(&pid), "{gpus} GPUs, 80x{height}, {pid}:\n{s}");
        }
        // The panel is cut to what is left, or named as hidden.
        let named = || line_with(&s, "hidden").contains("PyTorch");
        assert!(s.contains("PYTORCH") || named(), "{s}");
    }
}
