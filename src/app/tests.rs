//! The state machine, key by key: no terminal, no processes touched.

use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseEvent, MouseEventKind};
use ratatui::layout::Rect;

use super::*;
use crate::actions::Action;
use crate::model::filter::SortKey;
use crate::model::{GpuProcess, HostProcess, ProcessIdentity, ProcessKind};

pub(super) fn gpu_process(pid: u32, gpu: u32, user: &str, command: &str) -> GpuProcess {
    let mut p = GpuProcess::new(pid, gpu, ProcessKind::Compute);
    p.visible = true;
    p.user = Some(user.to_string().into());
    p.command = Some(command.to_string().into());
    p.start_ticks = Some(u64::from(pid) * 7);
    p.nice = Some(0);
    p.gpu_memory_bytes = Some(u64::from(pid) << 20);
    p
}

/// Four rows in GPU order: 100 and 300 on GPU 0, 200 and an invisible 400 on GPU 1.
pub(super) fn snapshot() -> Snapshot {
    Snapshot {
        processes: vec![
            gpu_process(100, 0, "alice", "python train.py --rank 0"),
            gpu_process(300, 0, "carol", "python bench.py"),
            gpu_process(200, 1, "bob", "python eval.py"),
            GpuProcess::new(400, 1, ProcessKind::Compute),
        ],
        ..Snapshot::default()
    }
}

pub(super) fn app() -> App {
    let mut app = in_gpu_order(App::new(1.0, true, false));
    app.on_snapshot(Arc::new(snapshot()));
    app
}

/// Lays the app out on `screen` as the event loop does before each frame, with what the layout
/// needs read straight from the app (none of these processes has an agent panel).
pub(super) fn lay_out(app: &mut App, screen: Rect) {
    let needs = layout::LayoutNeeds {
        gpu_count: u16::try_from(app.snapshot.gpus.len()).unwrap(),
        process_rows: app.row_count(),
        ..Default::default()
    };
    app.set_layout(layout::plan(screen, &needs));
}

pub(super) fn press(app: &mut App, code: KeyCode) -> Effect {
    app.on_key(KeyEvent::new(code, KeyModifiers::NONE))
}

pub(super) fn type_text(app: &mut App, text: &str) {
    for c in text.chars() {
        press(app, KeyCode::Char(c));
    }
}

pub(super) fn pids(app: &App) -> Vec<u32> {
    app.rows().iter().map(|r| r.pid).collect()
}

pub(super) fn selected_pid(app: &App) -> Option<u32> {
    app.selected_row().map(|r| r.pid)
}

pub(super) fn id(pid: u32) -> ProcessIdentity {
    ProcessIdentity::new(pid, u64::from(pid) * 7)
}

pub(super) fn target_ids(targets: &[ActionTarget]) -> Vec<ProcessIdentity> {
    targets.iter().map(|t| t.identity).collect()
}

pub(super) fn select(app: &mut App, pid: u32) {
    press(app, KeyCode::Home);
    while selected_pid(app) != Some(pid) {
        let before = app.view.selected;
        press(app, KeyCode::Down);
        assert_ne!(app.view.selected, before, "{pid} is not listed");
    }
}

#[test]
fn rows_start_in_gpu_order() {
    assert_eq!(pids(&app()), [100, 300, 200, 400]);
}

#[test]
fn filter_applies_live_and_enter_selects_the_first_match() {
    let mut app = app();
    select(&mut app, 200);
    assert_eq!(press(&mut app, KeyCode::Char('/')), Effect::Redraw);
    assert_eq!(app.mode, Mode::Filter);
    type_text(&mut app, "py");
    assert_eq!(pids(&app), [100, 300, 200], "live, by command");
    // Typed keys are text, not commands: 't' is no tree and 'h' no help here.
    type_text(&mut app, "thon b");
    assert_eq!(pids(&app), [300]);
    press(&mut app, KeyCode::Backspace);
    press(&mut app, KeyCode::Backspace);
    type_text(&mut app, " ");
    assert_eq!(app.settings.filter, "python ");
    assert_eq!(press(&mut app, KeyCode::Enter), Effect::Redraw);
    assert_eq!(app.mode, Mode::Normal);
    assert_eq!(app.settings.filter, "python ");
    assert_eq!(app.view.selected, 0);
    assert_eq!(selected_pid(&app), Some(100));
}

#[test]
fn filter_matches_user_and_pid_prefix() {
    let mut app = app();
    press(&mut app, KeyCode::Char('/'));
    type_text(&mut app, "CAROL");
    assert_eq!(pids(&app), [300]);
    app.set_filter(String::new());
    type_text(&mut app, "40");
    assert_eq!(pids(&app), [400]);
}

#[test]
fn esc_in_the_prompt_clears_the_filter_and_esc_after_enter_too() {
    let mut app = app();
    press(&mut app, KeyCode::Char('/'));
    type_text(&mut app, "eval");
    assert_eq!(pids(&app), [200]);
    assert_eq!(press(&mut app, KeyCode::Esc), Effect::Redraw);
    assert_eq!(app.mode, Mode::Normal);
    assert_eq!(app.settings.filter, "");
    assert_eq!(pids(&app).len(), 4);

    press(&mut app, KeyCode::Char('/'));
    type_text(&mut app, "eval");
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        press(&mut app, KeyCode::Esc),
        Effect::Redraw,
        "clears, not quits"
    );
    assert_eq!(pids(&app).len(), 4);
    assert_eq!(
        press(&mut app, KeyCode::Esc),
        Effect::Redraw,
        "a second Esc never quits"
    );
    assert_eq!(app.status.as_deref(), Some(ESC_HAS_NOTHING_TO_CLOSE));
    assert_eq!(
        press(&mut app, KeyCode::Char('?')),
        Effect::Redraw,
        "the help opens"
    );
    assert_eq!(app.status, None, "the hint answered one Esc only");
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.status, None, "this Esc closed the help");
    press(&mut app, KeyCode::Esc);
    assert_eq!(
        press(&mut app, KeyCode::Char('~')),
        Effect::Redraw,
        "a key that does nothing still takes the hint off the screen"
    );
    assert_eq!(app.status, None);
    app.status = Some("sent SIGTERM to 300".to_string());
    press(&mut app, KeyCode::Char('?'));
    press(&mut app, KeyCode::Esc);
    assert_eq!(
        app.status.as_deref(),
        Some("sent SIGTERM to 300"),
        "an action's outcome stays"
    );
}

#[test]
fn space_tags_and_k_targets_the_tagged_rows() {
    let mut app = app();
    press(&mut app, KeyCode::Char(' '));
    assert_eq!(selected_pid(&app), Some(300), "Space moves down");
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Char(' '));
    assert!(app.tags.contains(&id(100)) && app.tags.contains(&id(200)));
    assert!(!app.tags.contains(&id(300)));

    assert_eq!(press(&mut app, KeyCode::Char('K')), Effect::Redraw);
    let Mode::Confirm { signal, targets } = app.mode.clone() else {
        panic!("no confirmation: {:?}", app.mode);
    };
    assert_eq!(signal, Signal::Kill);
    assert_eq!(target_ids(&targets), [id(100), id(200)]);
    assert_eq!(targets[0].user.as_deref(), Some("alice"));
    assert_eq!(
        targets[0].command.as_deref(),
        Some("python train.py --rank 0")
    );

    let effect = press(&mut app, KeyCode::Char('y'));
    assert_eq!(
        effect,
        Effect::Act(ActionRequest {
            action: Action::Signal(Signal::Kill),
            targets,
        })
    );
    assert_eq!(app.mode, Mode::Normal);
}

#[test]
fn a_tagged_row_hidden_by_the_filter_is_not_a_target() {
    let mut app = app();
    press(&mut app, KeyCode::Char(' '));
    press(&mut app, KeyCode::Char('/'));
    type_text(&mut app, "eval");
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('T'));
    let Mode::Confirm { targets, .. } = &app.mode else {
        panic!("{:?}", app.mode);
    };
    assert_eq!(target_ids(targets), [id(200)]);
}

#[test]
fn enter_confirms_and_n_or_esc_cancel() {
    for (key, sends) in [
        (KeyCode::Enter, true),
        (KeyCode::Char('y'), true),
        (KeyCode::Char('n'), false),
        (KeyCode::Esc, false),
    ] {
        let mut app = app();
        select(&mut app, 300);
        press(&mut app, KeyCode::Char('T'));
        let effect = press(&mut app, key);
        assert_eq!(app.mode, Mode::Normal, "{key:?}");
        match effect {
            Effect::Act(request) => {
                assert!(sends, "{key:?} sent");
                assert_eq!(request.action, Action::Signal(Signal::Term));
                assert_eq!(target_ids(&request.targets), [id(300)]);
            }
            other => {
                assert!(!sends, "{key:?} gave {other:?}");
                assert_eq!(app.status.as_deref(), Some("SIGTERM not sent"));
            }
        }
    }
}

#[test]
fn other_keys_in_the_confirmation_do_nothing() {
    let mut app = app();
    press(&mut app, KeyCode::Char('I'));
    for key in [KeyCode::Char('q'), KeyCode::Char('K'), KeyCode::Down] {
        assert_eq!(press(&mut app, key), Effect::None);
    }
    assert!(matches!(
        app.mode,
        Mode::Confirm {
            signal: Signal::Int,
            ..
        }
    ));
}

#[test]
fn readonly_refuses_every_action_key() {
    let mut app = app();
    app.readonly = true;
    for key in [
        KeyCode::Char('T'),
        KeyCode::Char('K'),
        KeyCode::Char('I'),
        KeyCode::F(9),
        KeyCode::F(7),
        KeyCode::F(8),
        KeyCode::Char('n'),
    ] {
        app.status = None;
        assert_eq!(press(&mut app, key), Effect::Redraw, "{key:?}");
        assert_eq!(app.mode, Mode::Normal, "{key:?}");
        assert_eq!(app.status.as_deref(), Some(READONLY_REFUSAL), "{key:?}");
    }
    assert!(READONLY_REFUSAL.contains("--readonly"));
}

#[test]
fn a_row_not_visible_in_proc_is_never_offered() {
    let mut app = app();
    select(&mut app, 400);
    for key in [
        KeyCode::Char('K'),
        KeyCode::F(9),
        KeyCode::F(8),
        KeyCode::Char(' '),
    ] {
        app.status = None;
        let effect = press(&mut app, key);
        assert!(!matches!(effect, Effect::Act(_)), "{key:?}");
        assert_eq!(app.mode, Mode::Normal);
        let status = app.status.clone().unwrap_or_default();
        assert!(
            status.starts_with("process 400 is not visible in /proc here"),
            "{key:?}: {status}"
        );
    }
    assert!(app.tags.is_empty());
}

#[test]
fn f7_and_f8_renice_by_one_as_in_htop() {
    let mut app = app();
    select(&mut app, 200);
    let request = |delta| {
        Effect::Act(ActionRequest {
            action: Action::AdjustNice(delta),
            targets: vec![ActionTarget {
                identity: id(200),
                user: Some("bob".to_string()),
                command: Some("python eval.py".to_string()),
            }],
        })
    };
    assert_eq!(press(&mut app, KeyCode::F(7)), request(-1));
    assert_eq!(press(&mut app, KeyCode::F(8)), request(1));
}

#[test]
fn the_nice_dialog_takes_a_value_in_range() {
    let mut app = app();
    press(&mut app, KeyCode::Char('n'));
    let Mode::NiceInput { current, .. } = &app.mode else {
        panic!("{:?}", app.mode);
    };
    assert_eq!(*current, Some(0));
    type_text(&mut app, "25");
    assert_eq!(press(&mut app, KeyCode::Enter), Effect::Redraw);
    let Mode::NiceInput { error, .. } = &app.mode else {
        panic!("{:?}", app.mode);
    };
    assert_eq!(
        error.as_deref(),
        Some("nice value 25 is out of range: it must be from -20 to 19")
    );
    press(&mut app, KeyCode::Backspace);
    press(&mut app, KeyCode::Backspace);
    type_text(&mut app, "x-5");
    match press(&mut app, KeyCode::Enter) {
        Effect::Act(request) => {
            assert_eq!(request.action, Action::SetNice(-5));
            assert_eq!(target_ids(&request.targets), [id(100)]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(app.mode, Mode::Normal);

    press(&mut app, KeyCode::Char('n'));
    assert_eq!(press(&mut app, KeyCode::Enter), Effect::Redraw, "empty");
    assert!(matches!(app.mode, Mode::NiceInput { error: Some(_), .. }));
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::Normal);
}

#[test]
fn the_signal_menu_leads_to_a_confirmation() {
    let mut app = app();
    select(&mut app, 300);
    press(&mut app, KeyCode::F(9));
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Down);
    assert!(matches!(app.mode, Mode::SignalMenu { selected: 2, .. }));
    let selected_signal = |app: &App| match app.mode {
        Mode::SignalMenu { selected, .. } => Some(Signal::ALL[selected]),
        _ => None,
    };
    // Digits type the signal's number, as in htop: one digit, or two in a row.
    press(&mut app, KeyCode::Char('9'));
    assert_eq!(selected_signal(&app), Some(Signal::Kill));
    type_text(&mut app, "15");
    assert_eq!(selected_signal(&app), Some(Signal::Term));
    press(&mut app, KeyCode::Char('2'));
    assert_eq!(selected_signal(&app), Some(Signal::Int));
    press(&mut app, KeyCode::Char('7'));
    assert_eq!(
        selected_signal(&app),
        Some(Signal::Int),
        "no signal 7 in the menu"
    );
    type_text(&mut app, "19");
    assert_eq!(selected_signal(&app), Some(Signal::Stop));
    type_text(&mut app, "18");
    assert_eq!(selected_signal(&app), Some(Signal::Cont));
    press(&mut app, KeyCode::Enter);
    let Mode::Confirm { signal, targets } = &app.mode else {
        panic!("{:?}", app.mode);
    };
    assert_eq!(*signal, Signal::Cont);
    assert_eq!(target_ids(targets), [id(300)]);
    press(&mut app, KeyCode::Esc);
    press(&mut app, KeyCode::F(9));
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::Normal);
}

#[test]
fn sort_menu_stepping_and_reverse() {
    let mut app = app();
    press(&mut app, KeyCode::F(6));
    assert_eq!(app.mode, Mode::SortMenu { selected: 3 }, "starts on GPU");
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.settings.sort, SortKey::GpuMemory);
    assert_eq!(app.mode, Mode::Normal);
    assert!(app.settings.reverse, "a figure sorts descending first");
    assert_eq!(
        pids(&app),
        [300, 200, 100, 400],
        "biggest first, unknown last"
    );
    press(&mut app, KeyCode::Char('r'));
    assert!(!app.settings.reverse);
    assert_eq!(pids(&app), [100, 200, 300, 400]);
    press(&mut app, KeyCode::Char('<'));
    assert_eq!(app.settings.sort, SortKey::Gpu);
    assert!(!app.settings.reverse, "an index sorts ascending first");
    press(&mut app, KeyCode::Char('<'));
    assert_eq!(app.settings.sort, SortKey::Nice);
    assert!(app.settings.reverse);
    press(&mut app, KeyCode::Char('<'));
    assert_eq!(app.settings.sort, SortKey::User);
    assert!(!app.settings.reverse, "text sorts ascending first");
    assert_eq!(pids(&app), [100, 200, 300, 400]);
    press(&mut app, KeyCode::Char('r'));
    assert_eq!(pids(&app), [300, 200, 100, 400]);
    press(&mut app, KeyCode::Char('>'));
    assert_eq!(app.settings.sort, SortKey::Nice);
}

#[test]
fn the_default_order_is_gpu_memory_descending() {
    let mut app = App::new(1.0, true, false);
    app.on_snapshot(Arc::new(snapshot()));
    assert_eq!(
        (app.settings.sort, app.settings.reverse),
        (SortKey::GpuMemory, true)
    );
    assert_eq!(pids(&app), [300, 200, 100, 400], "unknown memory last");
}

#[test]
fn a_click_on_a_title_sorts_by_it_and_a_second_click_reverses() {
    let mut app = app();
    lay_out(&mut app, Rect::new(0, 0, 200, 40));
    let Plan::Screen(areas) = &app.view.plan else {
        panic!("screen too small");
    };
    let table = areas.processes;
    let placed = app.columns();
    let x_of = |column: columns::Column| {
        let p = placed.iter().find(|p| p.column == column).unwrap();
        table.x + p.x + 1
    };
    let click = |column: u16| MouseEvent {
        kind: MouseEventKind::Down(crossterm::event::MouseButton::Left),
        column,
        row: table.y,
        modifiers: KeyModifiers::NONE,
    };
    select(&mut app, 200);
    assert_eq!(
        app.on_mouse(click(x_of(columns::Column::GpuMemory))),
        Effect::Redraw
    );
    assert_eq!(
        (app.settings.sort, app.settings.reverse),
        (SortKey::GpuMemory, true)
    );
    assert_eq!(pids(&app), [300, 200, 100, 400]);
    assert_eq!(
        selected_pid(&app),
        Some(200),
        "the selection stays on its process"
    );
    app.on_mouse(click(x_of(columns::Column::GpuMemory)));
    assert!(!app.settings.reverse, "the second click reverses");
    app.on_mouse(click(x_of(columns::Column::User)));
    assert_eq!(
        (app.settings.sort, app.settings.reverse),
        (SortKey::User, false)
    );
    assert_eq!(pids(&app), [100, 200, 300, 400]);
    assert_eq!(
        app.on_mouse(click(x_of(columns::Column::State))),
        Effect::None,
        "S is not sortable"
    );
    assert_eq!(app.settings.sort, SortKey::User);
}

#[test]
fn the_selection_follows_its_process_across_refreshes() {
    let mut app = app();
    select(&mut app, 200);
    let mut next = snapshot();
    next.processes
        .insert(0, gpu_process(50, 0, "dave", "python new.py"));
    app.on_snapshot(Arc::new(next));
    assert_eq!(selected_pid(&app), Some(200));
    assert_eq!(app.view.selected, 3);

    // The process exits: the selection stays at its place, on a row that exists.
    let mut gone = snapshot();
    gone.processes.retain(|p| p.pid != 200);
    app.on_snapshot(Arc::new(gone));
    assert_eq!(app.view.selected, 2);
    assert_eq!(selected_pid(&app), Some(400));
}

#[test]
fn tags_of_exited_or_reused_pids_are_dropped() {
    let mut app = app();
    press(&mut app, KeyCode::Char(' '));
    press(&mut app, KeyCode::Char(' '));
    assert_eq!(app.tags.len(), 2);
    let mut next = snapshot();
    next.processes[0].start_ticks = Some(1); // pid 100 now names another process
    app.on_snapshot(Arc::new(next));
    assert_eq!(app.tags.iter().copied().collect::<Vec<_>>(), [id(300)]);
}

pub(super) fn host(pid: u32, ppid: u32, comm: &str) -> HostProcess {
    HostProcess {
        pid,
        ppid,
        start_ticks: u64::from(pid) * 7,
        user: Some("alice".to_string()),
        comm: comm.to_string(),
        command: Some(comm.to_string()),
        state: 'S',
        ..HostProcess::default()
    }
}

#[test]
fn the_tree_asks_for_the_process_table_and_acts_on_children() {
    let mut app = app();
    assert_eq!(
        press(&mut app, KeyCode::Char('t')),
        Effect::AskSampler(SamplerRequest::ProcessTable {
            wanted: true,
            visible: None
        })
    );
    assert_eq!(
        pids(&app),
        [100, 200, 300, 400],
        "GPU rows until the table comes"
    );

    let mut next = snapshot();
    next.host_processes = vec![
        host(90, 1, "torchrun"),
        host(100, 90, "python"),
        host(110, 100, "pt_data_worker"),
        host(200, 90, "python"),
        host(300, 1, "python"),
    ];
    app.on_snapshot(Arc::new(next));
    assert_eq!(pids(&app), [90, 100, 110, 200, 300, 400]);
    select(&mut app, 110);
    press(&mut app, KeyCode::Char('K'));
    let Mode::Confirm { targets, .. } = &app.mode else {
        panic!("{:?}", app.mode);
    };
    assert_eq!(target_ids(targets), [id(110)]);
    assert_eq!(targets[0].command.as_deref(), Some("pt_data_worker"));
    press(&mut app, KeyCode::Esc);

    assert_eq!(
        press(&mut app, KeyCode::Char('t')),
        Effect::AskSampler(SamplerRequest::ProcessTable {
            wanted: false,
            visible: None
        })
    );
    assert_eq!(pids(&app), [100, 300, 200, 400]);
}

#[test]
fn a_click_selects_the_row_under_it_and_the_wheel_scrolls() {
    let mut app = app();
    lay_out(&mut app, Rect::new(0, 0, 100, 30));
    let Plan::Screen(areas) = &app.view.plan else {
        panic!("screen too small");
    };
    let table = areas.processes;
    let click = |row: u16| MouseEvent {
        kind: MouseEventKind::Down(crossterm::event::MouseButton::Left),
        column: table.x + 10,
        row,
        modifiers: KeyModifiers::NONE,
    };
    assert_eq!(app.on_mouse(click(table.y + 3)), Effect::Redraw);
    assert_eq!(selected_pid(&app), Some(200));
    let gap_in_header = MouseEvent {
        column: table.x + 8,
        ..click(table.y)
    };
    assert_eq!(
        app.on_mouse(gap_in_header),
        Effect::None,
        "between two titles"
    );
    assert_eq!(app.on_mouse(click(table.y + 4 + 1)), Effect::None, "no row");
    assert_eq!(selected_pid(&app), Some(200));
    let wheel = MouseEvent {
        kind: MouseEventKind::ScrollDown,
        ..click(0)
    };
    app.on_mouse(wheel);
    assert_eq!(selected_pid(&app), Some(400));
}

#[test]
fn page_keys_move_by_the_tables_height() {
    let mut app = in_gpu_order(App::new(1.0, true, false));
    let mut many = snapshot();
    many.processes = (0..40)
        .map(|k| gpu_process(1000 + k, 0, "u", "python"))
        .collect();
    app.on_snapshot(Arc::new(many));
    lay_out(&mut app, Rect::new(0, 0, 100, 30));
    let page = app.view.page_rows;
    assert!(page > 3, "{page}");
    press(&mut app, KeyCode::PageDown);
    assert_eq!(app.view.selected, page);
    press(&mut app, KeyCode::End);
    assert_eq!(selected_pid(&app), Some(1039));
    press(&mut app, KeyCode::PageUp);
    assert_eq!(app.view.selected, 39 - page);
}

#[test]
fn help_esc_and_quit_keys() {
    let mut app = app();
    press(&mut app, KeyCode::Char('?'));
    assert!(app.view.show_help);
    assert_eq!(
        press(&mut app, KeyCode::Char('K')),
        Effect::None,
        "help has the keys"
    );
    assert_eq!(press(&mut app, KeyCode::Esc), Effect::Redraw);
    assert!(!app.view.show_help);
    press(&mut app, KeyCode::Char('h'));
    assert!(app.view.show_help);
    // q leaves the help as it leaves htop's, and quits from the monitor.
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Redraw);
    assert!(!app.view.show_help);
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Quit);
    press(&mut app, KeyCode::Char('/'));
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(app.on_key(ctrl_c), Effect::Quit, "even while typing");
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Redraw, "typed");
    assert_eq!(
        press(&mut app, KeyCode::F(10)),
        Effect::Quit,
        "F10, as in htop"
    );
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::Normal);
    for _ in 0..3 {
        assert_eq!(
            press(&mut app, KeyCode::Esc),
            Effect::Redraw,
            "Esc never quits"
        );
    }
    assert_eq!(press(&mut app, KeyCode::F(10)), Effect::Quit);
    press(&mut app, KeyCode::F(9));
    assert!(matches!(app.mode, Mode::SignalMenu { .. }));
    assert_eq!(
        press(&mut app, KeyCode::F(10)),
        Effect::Quit,
        "from a dialog too"
    );
}

#[test]
fn an_action_report_becomes_the_status_sentence() {
    let mut app = app();
    let report = ActionReport {
        request: ActionRequest {
            action: Action::Signal(Signal::Term),
            targets: vec![ActionTarget {
                identity: id(100),
                user: None,
                command: Some("python train.py".to_string()),
            }],
        },
        results: vec![Ok(None)],
    };
    app.on_action_done(&report);
    assert_eq!(
        app.status.as_deref(),
        Some("sent SIGTERM to 100 (python train.py)")
    );

    // Notices (another user's agents coming and going) do not hide it before the next key.
    let mut next = snapshot();
    next.notices
        .push("pid 7: connection ended: the agent closed it".into());
    app.on_snapshot(Arc::new(next.clone()));
    assert_eq!(
        app.status.as_deref(),
        Some("sent SIGTERM to 100 (python train.py)")
    );
    press(&mut app, KeyCode::Down);
    app.on_snapshot(Arc::new(next));
    assert_eq!(
        app.status.as_deref(),
        Some("pid 7: connection ended: the agent closed it")
    );
}

#[test]
fn s_asks_the_agent_of_the_selected_process_for_a_snapshot() {
    let mut with_agent = snapshot();
    with_agent.processes[0].torch = Some(std::sync::Arc::new(crate::model::TorchInfo::default()));
    let mut app = in_gpu_order(App::new(1.0, true, false));
    app.on_snapshot(Arc::new(with_agent));
    select(&mut app, 100);
    assert_eq!(
        press(&mut app, KeyCode::Char('s')),
        Effect::AskSampler(SamplerRequest::Agent {
            pid: 100,
            command: AgentCommand::Snapshot
        })
    );
    // P asks first (the tests in keys_tests.rs), then sends the reset.
    assert_eq!(press(&mut app, KeyCode::Char('P')), Effect::Redraw);
    assert_eq!(
        press(&mut app, KeyCode::Char('y')),
        Effect::AskSampler(SamplerRequest::Agent {
            pid: 100,
            command: AgentCommand::ResetPeak
        })
    );
    select(&mut app, 300);
    assert_eq!(press(&mut app, KeyCode::Char('s')), Effect::Redraw);
    assert!(app
        .status
        .as_deref()
        .unwrap()
        .contains("process 300 has no torchtop agent"));

    let mut readonly = in_gpu_order(App::new(1.0, true, true));
    readonly.on_snapshot(app.snapshot.clone());
    select(&mut readonly, 100);
    assert_eq!(press(&mut readonly, KeyCode::Char('s')), Effect::Redraw);
    assert_eq!(readonly.status.as_deref(), Some(READONLY_REFUSAL));
}

#[test]
fn s_on_a_row_proc_no_longer_shows_says_what_f8_says_not_torchtop_attach() {
    let mut app = app();
    // 400: listed by the driver, gone from /proc (it exited, or lives in another container).
    select(&mut app, 400);
    press(&mut app, KeyCode::F(8));
    let f8 = app.status.clone().expect("F8 says why it does nothing");
    assert!(f8.contains("process 400") && f8.contains("exited"), "{f8}");
    for key in ['s', 'S', 'P'] {
        app.status = None;
        assert_eq!(press(&mut app, KeyCode::Char(key)), Effect::Redraw);
        assert_eq!(app.status.as_deref(), Some(&f8[..]), "{key}");
        assert_eq!(app.mode, Mode::Normal, "{key} opened no dialog");
    }
}

#[test]
fn a_sampler_notice_shows_in_the_status_line() {
    let mut app = app();
    let mut next = snapshot();
    next.notices
        .push("agent of 100: snapshot written to /tmp/x.pickle".into());
    app.on_snapshot(Arc::new(next));
    assert_eq!(
        app.status.as_deref(),
        Some("agent of 100: snapshot written to /tmp/x.pickle")
    );
}

#[test]
fn capital_s_asks_for_the_memory_viewer_and_each_written_file_opens_once() {
    let mut with_agent = snapshot();
    with_agent.processes[0].torch = Some(std::sync::Arc::new(crate::model::TorchInfo::default()));
    let mut app = in_gpu_order(App::new(1.0, true, false));
    app.on_snapshot(Arc::new(with_agent.clone()));
    select(&mut app, 100);
    assert_eq!(
        press(&mut app, KeyCode::Char('S')),
        Effect::AskSampler(SamplerRequest::MemoryView { pid: 100 })
    );
    select(&mut app, 300);
    assert_eq!(press(&mut app, KeyCode::Char('S')), Effect::Redraw);
    assert!(app.status.as_deref().unwrap().contains("no torchtop agent"));
    assert_eq!(app.take_memsnap(), None);

    let ready = crate::model::MemsnapReady {
        request: 7,
        pid: 100,
        path: "/run/t/100-snapshot-20260101-000000.pickle".into(),
        file: None,
    };
    with_agent.memsnap_ready = Some(ready.clone());
    app.on_snapshot(Arc::new(with_agent.clone()));
    assert_eq!(app.take_memsnap(), Some(ready.clone()));
    app.on_snapshot(Arc::new(with_agent.clone()));
    assert_eq!(
        app.take_memsnap(),
        None,
        "the same file is not opened again"
    );
    with_agent.memsnap_ready = Some(crate::model::MemsnapReady {
        request: 8,
        ..ready
    });
    app.on_snapshot(Arc::new(with_agent));
    assert_eq!(app.take_memsnap().map(|r| r.request), Some(8));
}

#[test]
fn arrows_and_ctrl_a_e_scroll_the_command_within_the_longest_one() {
    let long = format!("/opt/conda/bin/python3 train.py {}", "--flag ".repeat(12));
    let mut app = in_gpu_order(App::new(1.0, true, false));
    app.on_snapshot(Arc::new(Snapshot {
        processes: vec![gpu_process(100, 0, "alice", &long)],
        ..Snapshot::default()
    }));
    lay_out(&mut app, Rect::new(0, 0, 80, 24));
    let width = usize::from(columns::command_width(&app.columns()));
    let shown = app.rows()[0].display_command().unwrap();
    assert!(shown.starts_with("python3 train.py --flag"), "{shown}");
    let end = shown.chars().count() - width;
    assert!(end > 16, "the command is longer than its column");
    press(&mut app, KeyCode::Right);
    press(&mut app, KeyCode::Right);
    assert_eq!(app.view.command_scroll, 16);
    press(&mut app, KeyCode::Left);
    assert_eq!(app.view.command_scroll, 8);
    let ctrl = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL);
    app.on_key(ctrl('e'));
    assert_eq!(app.view.command_scroll, end);
    press(&mut app, KeyCode::Right);
    assert_eq!(app.view.command_scroll, end, "never past the end");
    app.on_key(ctrl('a'));
    assert_eq!(app.view.command_scroll, 0);
    press(&mut app, KeyCode::Left);
    assert_eq!(app.view.command_scroll, 0);
    assert_eq!(
        selected_pid(&app),
        Some(100),
        "the arrows never move the selection"
    );
}

/// These tests read rows in GPU order (ascending); the default order, GPU memory descending,
/// has its own test.
pub(super) fn in_gpu_order(mut app: App) -> App {
    app.settings.sort = SortKey::Gpu;
    app.settings.reverse = false;
    app
}

#[test]
fn u_chooses_whose_processes_are_shown() {
    let mut app = app();
    press(&mut app, KeyCode::Char('u'));
    let Mode::UserMenu { selected, users } = &app.mode else {
        panic!("{:?}", app.mode);
    };
    assert_eq!(*selected, 0);
    assert_eq!(users, &["alice", "bob", "carol"]);
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.mode, Mode::Normal);
    assert_eq!(app.settings.user.as_deref(), Some("bob"));
    assert_eq!(pids(&app), [200]);
    press(&mut app, KeyCode::Char('u'));
    assert!(
        matches!(app.mode, Mode::UserMenu { selected: 2, .. }),
        "opens on the choice"
    );
    press(&mut app, KeyCode::Home);
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.settings.user, None);
    assert_eq!(pids(&app).len(), 4);
}

#[test]
fn user_and_gpu_filters_from_the_command_line() {
    let mut app = in_gpu_order(App::new(1.0, true, false))
        .with_filters(Some("alice".to_string()), Some(vec![0]));
    app.on_snapshot(Arc::new(snapshot()));
    assert_eq!(pids(&app), [100]);
    let mut app = in_gpu_order(App::new(1.0, true, false)).with_filters(None, Some(vec![1]));
    app.on_snapshot(Arc::new(snapshot()));
    assert_eq!(pids(&app), [200, 400]);
}

#[test]
fn the_tree_tells_the_sampler_which_rows_are_on_screen() {
    let mut app = app();
    press(&mut app, KeyCode::Char('t'));
    let mut next = snapshot();
    next.host_processes = vec![
        host(90, 1, "torchrun"),
        host(100, 90, "python"),
        host(110, 100, "pt_data_worker"),
        host(200, 90, "python"),
        host(300, 1, "python"),
    ];
    app.on_snapshot(Arc::new(next));
    assert_eq!(pids(&app), [90, 100, 110, 200, 300, 400]);
    app.view.set_page_rows(2, app.rows().len());
    let told = |visible: &[u32]| {
        Some(SamplerRequest::ProcessTable {
            wanted: true,
            visible: Some(visible.to_vec()),
        })
    };
    // The selection stayed on 100 (the second row), at the top of the window: the sampler is
    // told of the rows on screen and half a page (one row) on each side.
    assert_eq!(app.screen_rows_request(), told(&[90, 100, 110, 200]));
    assert_eq!(app.screen_rows_request(), None, "told once");
    select(&mut app, 200);
    assert_eq!(app.screen_rows_request(), None, "110 and 200 were told of");
    select(&mut app, 300);
    assert_eq!(app.screen_rows_request(), told(&[110, 200, 300, 400]));
    // Back to the GPU table: its rows on screen, which the sampler reads each tick too.
    let Effect::AskSampler(SamplerRequest::ProcessTable { wanted, visible }) =
        press(&mut app, KeyCode::Char('t'))
    else {
        panic!("closing the tree asks the sampler");
    };
    assert!(!wanted);
    let visible = visible.expect("the GPU rows on screen");
    assert!(visible.iter().all(|pid| pids(&app).contains(pid)));
    assert_eq!(app.screen_rows_request(), None, "told with the key");
    app.retell_rows_on_screen();
    assert!(
        app.screen_rows_request().is_some(),
        "told again after a recording"
    );
}

/// Below the smallest size only the "too small" message is drawn. Before, keys still moved the
/// unseen selection and a confirmation cut to the width (pid hidden) still sent its signal.
#[test]
fn keys_that_act_on_processes_wait_while_the_screen_is_too_small() {
    let mut app = app();
    lay_out(&mut app, Rect::new(0, 0, 120, 40));
    press(&mut app, KeyCode::Char('K'));
    assert!(matches!(app.mode, Mode::Confirm { .. }), "{:?}", app.mode);
    lay_out(&mut app, Rect::new(0, 0, 20, 5));
    assert!(app.view.plan.screen_hidden());
    for code in [KeyCode::Char('y'), KeyCode::Enter] {
        assert_eq!(press(&mut app, code), Effect::None, "{code:?}");
    }
    assert!(matches!(app.mode, Mode::Confirm { .. }), "{:?}", app.mode);
    press(&mut app, KeyCode::Char('n'));
    assert_eq!(app.mode, Mode::Normal);
    let selected = app.view.selected;
    for code in [
        KeyCode::Down,
        KeyCode::Char('j'),
        KeyCode::Char('K'),
        KeyCode::Char('T'),
        KeyCode::F(9),
        KeyCode::F(7),
        KeyCode::F(8),
    ] {
        assert_eq!(press(&mut app, code), Effect::None, "{code:?}");
        assert_eq!(app.mode, Mode::Normal, "{code:?}");
    }
    assert_eq!(app.view.selected, selected);
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Quit);
    // Back at a size that fits, keys act again.
    lay_out(&mut app, Rect::new(0, 0, 120, 40));
    press(&mut app, KeyCode::Char('K'));
    assert!(matches!(app.mode, Mode::Confirm { .. }), "{:?}", app.mode);
}
