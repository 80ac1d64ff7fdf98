//! The keys an htop user reaches for without reading the help: `t` (and F5) keep the selected
//! process, `q` leaves a sub-screen or a menu, F1 F3 F4 F5 do what htop's do, `P` asks first,
//! and `s` `S` `P` on another user's process point to sudo.

use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::tests::{
    gpu_process, host, id, in_gpu_order, pids, press, select, selected_pid, snapshot, target_ids,
};
use super::*;
use crate::model::filter::SortKey;
use crate::model::Snapshot;

/// [`snapshot`] with 500 on GPUs 0 and 1 (two rows in the flat table).
fn with_a_process_on_two_gpus() -> Snapshot {
    let mut snapshot = snapshot();
    snapshot
        .processes
        .push(gpu_process(500, 0, "erin", "python big.py"));
    snapshot
        .processes
        .push(gpu_process(500, 1, "erin", "python big.py"));
    snapshot
}

/// [`with_a_process_on_two_gpus`] with the host table the tree is built from: torchrun (90)
/// started 100 and 200, and 100 has a DataLoader worker (110).
fn with_the_process_table() -> Snapshot {
    let mut snapshot = with_a_process_on_two_gpus();
    snapshot.host_processes = vec![
        host(90, 1, "torchrun"),
        host(100, 90, "python"),
        host(110, 100, "pt_data_worker"),
        host(200, 90, "python"),
        host(300, 1, "python"),
        host(500, 1, "python"),
    ];
    snapshot
}

fn app_on(snapshot: Snapshot) -> App {
    let mut app = in_gpu_order(App::new(1.0, true, false));
    app.on_snapshot(Arc::new(snapshot));
    app
}

/// Selects the flat table's row of `pid` on GPU `gpu`.
fn select_row(app: &mut App, pid: u32, gpu: u32) {
    select(app, pid);
    while selected_pid(app) != Some(pid) || selected_gpus(app) != [gpu] {
        let before = app.view.selected;
        press(app, KeyCode::Down);
        assert_ne!(
            app.view.selected, before,
            "{pid} on GPU {gpu} is not listed"
        );
    }
}

fn selected_gpus(app: &App) -> Vec<u32> {
    let row = app.selected_row().expect("a selected row");
    row.gpus.iter().map(|g| g.gpu).collect()
}

/// The reviewer's case: `t` kept the row number, not the process, so the selection jumped to
/// whatever row the tree put there, and a `K` after it named that other process.
#[test]
fn t_keeps_the_selected_process_in_the_tree_and_back() {
    let mut app = app_on(with_a_process_on_two_gpus());
    select(&mut app, 200);
    let flat_row = app.view.selected;
    press(&mut app, KeyCode::Char('t'));
    assert_eq!(selected_pid(&app), Some(200), "tree rows {:?}", pids(&app));
    assert_ne!(
        app.view.selected, flat_row,
        "200 is on another row in the tree"
    );

    // The process table comes with the next snapshot, and the tree gets its parents.
    app.on_snapshot(Arc::new(with_the_process_table()));
    assert_eq!(selected_pid(&app), Some(200), "tree rows {:?}", pids(&app));
    press(&mut app, KeyCode::Char('K'));
    let Mode::Confirm { targets, .. } = &app.mode else {
        panic!("{:?}", app.mode);
    };
    assert_eq!(target_ids(targets), [id(200)]);
    press(&mut app, KeyCode::Esc);

    press(&mut app, KeyCode::Char('t'));
    assert_eq!(selected_pid(&app), Some(200), "flat rows {:?}", pids(&app));
    assert_eq!(app.view.selected, flat_row);
}

/// A process on two GPUs has two flat rows and one tree row: back from the tree, the selection
/// is on the row it left, or on the process's first row once the user moved in the tree.
#[test]
fn back_from_the_tree_a_process_on_two_gpus_keeps_its_gpu() {
    let mut app = app_on(with_the_process_table());
    select_row(&mut app, 500, 1);
    press(&mut app, KeyCode::Char('t'));
    assert_eq!(selected_pid(&app), Some(500), "tree rows {:?}", pids(&app));
    assert_eq!(selected_gpus(&app), [0, 1]);
    app.on_snapshot(Arc::new(with_the_process_table()));
    press(&mut app, KeyCode::Char('t'));
    assert_eq!(selected_pid(&app), Some(500));
    assert_eq!(selected_gpus(&app), [1], "the row it left");

    press(&mut app, KeyCode::Char('t'));
    press(&mut app, KeyCode::Home);
    select(&mut app, 500);
    press(&mut app, KeyCode::Char('t'));
    assert_eq!(selected_pid(&app), Some(500));
    assert_eq!(selected_gpus(&app), [0], "its first row");
}

fn ctrl_c() -> KeyEvent {
    KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)
}

/// `q` quit from the help, the detail view and the warnings view, where the menus close with
/// it; an htop user presses it to leave a sub-screen. F10 and Ctrl-C still quit from each.
#[test]
fn q_closes_the_help_and_the_detail_view_and_f10_or_ctrl_c_quit_from_them() {
    let mut app = super::tests::app();
    press(&mut app, KeyCode::Char('?'));
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Redraw);
    assert!(!app.view.show_help);

    select(&mut app, 300);
    press(&mut app, KeyCode::Enter);
    assert!(app.detail.is_some());
    press(&mut app, KeyCode::Char('?'));
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Redraw);
    assert!(!app.view.show_help && app.detail.is_some(), "the help only");
    assert_eq!(
        press(&mut app, KeyCode::Char('q')),
        Effect::AskSampler(SamplerRequest::Detail { pid: None })
    );
    assert!(app.detail.is_none());
    assert_eq!(selected_pid(&app), Some(300));

    for quit in [KeyEvent::from(KeyCode::F(10)), ctrl_c()] {
        press(&mut app, KeyCode::Char('?'));
        assert_eq!(app.on_key(quit), Effect::Quit, "{quit:?} from the help");
        press(&mut app, KeyCode::Esc);
        press(&mut app, KeyCode::Enter);
        assert_eq!(app.on_key(quit), Effect::Quit, "{quit:?} from the detail");
        press(&mut app, KeyCode::Esc);
    }
    assert_eq!(
        press(&mut app, KeyCode::Char('q')),
        Effect::Quit,
        "the monitor"
    );
}

/// The README says `q` closes the menus (F6, `u`, F9) as it closes the help; only Esc did.
/// Where text is typed, `q` stays text: the filter takes it, and a signal number is digits.
#[test]
fn q_closes_the_sort_user_and_signal_menus_but_is_typed_in_the_filter() {
    let mut app = super::tests::app();
    select(&mut app, 300);
    for open in [KeyCode::F(6), KeyCode::Char('u'), KeyCode::F(9)] {
        assert_eq!(press(&mut app, open), Effect::Redraw);
        assert_ne!(app.mode, Mode::Normal, "{open:?} opens its menu");
        assert_eq!(
            press(&mut app, KeyCode::Char('q')),
            Effect::Redraw,
            "{open:?}"
        );
        assert_eq!(app.mode, Mode::Normal, "q closes the menu of {open:?}");
    }
    // A digit typed in the signal menu, then q: the menu closes, nothing is sent.
    press(&mut app, KeyCode::F(9));
    press(&mut app, KeyCode::Char('1'));
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Redraw);
    assert_eq!(app.mode, Mode::Normal);

    press(&mut app, KeyCode::Char('/'));
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Redraw);
    assert_eq!(app.mode, Mode::Filter, "q is typed");
    assert_eq!(app.settings.filter, "q");
}

/// Below the smallest size the screen says only "q quits", so q does, whatever is open
/// behind it: an overlay, a menu, a confirmation (left unanswered), the nice dialog or the
/// filter prompt. A review found F6 then q at 50x12 doing nothing.
#[test]
fn q_quits_while_the_screen_is_too_small_whatever_is_open() {
    let mut app = with_an_agent();
    super::tests::lay_out(&mut app, ratatui::layout::Rect::new(0, 0, 20, 5));
    assert!(app.view.plan.screen_hidden());
    press(&mut app, KeyCode::Char('?'));
    assert!(!app.view.show_help, "keys wait");
    for open in [
        KeyCode::Char('?'),
        KeyCode::Enter,
        KeyCode::Char('w'),
        KeyCode::F(6),
        KeyCode::Char('u'),
        KeyCode::F(9),
        KeyCode::Char('K'),
        KeyCode::Char('P'),
        KeyCode::Char('n'),
        KeyCode::Char('/'),
    ] {
        let mut app = with_an_agent();
        select(&mut app, 100);
        super::tests::lay_out(&mut app, ratatui::layout::Rect::new(0, 0, 120, 40));
        press(&mut app, open);
        let opened = app.mode != Mode::Normal
            || app.view.show_help
            || app.detail.is_some()
            || app.warnings_view.is_open();
        assert!(opened, "{open:?} opens something");
        super::tests::lay_out(&mut app, ratatui::layout::Rect::new(0, 0, 50, 12));
        assert_eq!(
            press(&mut app, KeyCode::Char('q')),
            Effect::Quit,
            "{open:?}"
        );
    }
}

/// The setup screen keeps what its own q does, saving what changed, and then quits.
#[test]
fn q_while_the_screen_is_too_small_saves_the_setup_screen_and_quits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let mut app =
        super::tests::app().with_ui(crate::config::UiConfig::default(), Some(path.clone()), None);
    super::tests::lay_out(&mut app, ratatui::layout::Rect::new(0, 0, 120, 40));
    press(&mut app, KeyCode::F(2));
    press(&mut app, KeyCode::Char(' '));
    super::tests::lay_out(&mut app, ratatui::layout::Rect::new(0, 0, 50, 12));
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Quit);
    assert!(app.setup.is_none());
    let saved = std::fs::read_to_string(&path).expect("the changed settings were saved");
    assert!(saved.contains("[ui]"), "{saved}");
    // No status line shows at this size: the outcome is said once the terminal is restored.
    let farewell = app.farewell.as_deref().unwrap_or_default();
    assert!(farewell.starts_with("settings saved to "), "{farewell:?}");
}

/// htop's function keys: F1 help, F3 search and F4 filter (the one filter here), F5 tree.
#[test]
fn f1_f3_f4_and_f5_do_what_htops_do() {
    let mut app = super::tests::app();
    assert_eq!(press(&mut app, KeyCode::F(1)), Effect::Redraw);
    assert!(app.view.show_help);
    press(&mut app, KeyCode::F(1));
    assert!(!app.view.show_help, "F1 closes it again");

    for key in [KeyCode::F(3), KeyCode::F(4)] {
        assert_eq!(press(&mut app, key), Effect::Redraw);
        assert_eq!(app.mode, Mode::Filter, "{key:?}");
        super::tests::type_text(&mut app, "eval");
        assert_eq!(pids(&app), [200], "{key:?} filters as it is typed");
        press(&mut app, KeyCode::Esc);
        assert_eq!(app.mode, Mode::Normal);
    }

    select(&mut app, 200);
    let Effect::AskSampler(SamplerRequest::ProcessTable { wanted: true, .. }) =
        press(&mut app, KeyCode::F(5))
    else {
        panic!("F5 did not ask for the tree");
    };
    assert!(app.settings.tree);
    assert_eq!(selected_pid(&app), Some(200));
    press(&mut app, KeyCode::F(5));
    assert!(!app.settings.tree);

    // F1 opens the help over the detail and the warnings views too.
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::F(1));
    assert!(app.view.show_help && app.detail.is_some());
    press(&mut app, KeyCode::F(1));
    press(&mut app, KeyCode::Esc);
    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::F(1));
    assert!(app.view.show_help && app.warnings_view.is_open());
}

/// [`snapshot`] with an agent in 100, the only process with one.
fn with_an_agent() -> App {
    let mut snapshot = snapshot();
    snapshot.processes[0].torch = Some(Arc::new(crate::model::TorchInfo::default()));
    app_on(snapshot)
}

fn reset_peak(pid: u32) -> Effect {
    Effect::AskSampler(SamplerRequest::Agent {
        pid,
        command: AgentCommand::ResetPeak,
    })
}

/// `P` reset the agent's peaks at once, and htop users press it to sort by CPU: it asks
/// first, as the signal keys do.
#[test]
fn p_asks_before_it_resets_the_peaks_and_n_or_esc_cancel() {
    let mut app = with_an_agent();
    select(&mut app, 100);
    assert_eq!(press(&mut app, KeyCode::Char('P')), Effect::Redraw);
    let Mode::ConfirmPeakReset { target } = &app.mode else {
        panic!("no confirmation: {:?}", app.mode);
    };
    assert_eq!(target.pid, 100);
    assert_eq!(target.user.as_deref(), Some("alice"));
    for other in [KeyCode::Char('P'), KeyCode::Char('q'), KeyCode::Down] {
        assert_eq!(press(&mut app, other), Effect::None, "{other:?}");
    }
    assert_eq!(press(&mut app, KeyCode::Char('y')), reset_peak(100));
    assert_eq!(app.mode, Mode::Normal);

    for cancel in [KeyCode::Char('n'), KeyCode::Esc] {
        press(&mut app, KeyCode::Char('P'));
        assert_eq!(press(&mut app, cancel), Effect::Redraw, "{cancel:?}");
        assert_eq!(app.mode, Mode::Normal);
        assert_eq!(
            app.status.as_deref(),
            Some(agent_keys::PEAK_RESET_CANCELLED)
        );
    }
    press(&mut app, KeyCode::Char('P'));
    assert_eq!(press(&mut app, KeyCode::Enter), reset_peak(100));
}

#[test]
fn p_from_the_detail_view_asks_about_its_process_and_refusals_open_nothing() {
    let mut app = with_an_agent();
    select(&mut app, 100);
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('P'));
    assert!(
        matches!(&app.mode, Mode::ConfirmPeakReset { target } if target.pid == 100),
        "{:?}",
        app.mode
    );
    assert_eq!(press(&mut app, KeyCode::Char('y')), reset_peak(100));
    assert!(app.detail.is_some(), "the view stays open");
    press(&mut app, KeyCode::Esc);

    select(&mut app, 300);
    assert_eq!(press(&mut app, KeyCode::Char('P')), Effect::Redraw);
    assert_eq!(app.mode, Mode::Normal, "no agent in 300");
    assert!(app.status.as_deref().unwrap().contains("no torchtop agent"));

    let mut readonly = in_gpu_order(App::new(1.0, true, true));
    readonly.on_snapshot(app.snapshot.clone());
    select(&mut readonly, 100);
    assert_eq!(press(&mut readonly, KeyCode::Char('P')), Effect::Redraw);
    assert_eq!(readonly.mode, Mode::Normal);
    assert_eq!(readonly.status.as_deref(), Some(READONLY_REFUSAL));
}

/// As with a signal: a confirmation no one can read is never answered yes.
#[test]
fn the_p_confirmation_waits_while_the_screen_is_too_small_but_n_cancels() {
    let mut app = with_an_agent();
    select(&mut app, 100);
    press(&mut app, KeyCode::Char('P'));
    super::tests::lay_out(&mut app, ratatui::layout::Rect::new(0, 0, 20, 5));
    for code in [KeyCode::Char('y'), KeyCode::Enter] {
        assert_eq!(press(&mut app, code), Effect::None, "{code:?}");
    }
    assert!(matches!(app.mode, Mode::ConfirmPeakReset { .. }));
    press(&mut app, KeyCode::Char('n'));
    assert_eq!(app.mode, Mode::Normal);
}

/// A review: as a user, `s` on another user's process said "use `torchtop attach`", which
/// cannot attach to it, while its agent, if any, serves a directory only root's monitor reads.
#[test]
fn s_p_and_capital_s_on_another_users_process_say_sudo_not_attach() {
    let mut snapshot = snapshot();
    for p in &mut snapshot.processes {
        p.uid = Some(if p.pid == 300 { 1001 } else { 1000 });
    }
    let mut app = app_on(snapshot);
    app.effective_uid = 1000;
    for key in ['s', 'S', 'P'] {
        select(&mut app, 300);
        app.status = None;
        assert_eq!(press(&mut app, KeyCode::Char(key)), Effect::Redraw, "{key}");
        assert_eq!(app.mode, Mode::Normal, "{key} opened no dialog");
        let status = app.status.clone().unwrap();
        assert!(
            status.contains("process 300 is another user's: run torchtop with sudo")
                && status.chars().count() <= 80,
            "{key}: {status}"
        );
        assert!(!status.contains("attach"), "{key}: {status}");
        // One's own process without an agent still gets the way to start one.
        select(&mut app, 100);
        press(&mut app, KeyCode::Char(key));
        let status = app.status.clone().unwrap();
        assert!(status.contains("torchtop attach 100"), "{key}: {status}");
    }
    // Root reads every user's agents: there a process without one has none.
    app.effective_uid = 0;
    select(&mut app, 300);
    press(&mut app, KeyCode::Char('s'));
    let status = app.status.clone().unwrap();
    assert!(
        status.contains("process 300 has no torchtop agent"),
        "{status}"
    );
}

/// Found trying the monitor: on a process stopped before the monitor started, whose agent
/// never said hello, `s` said it had no agent and to start one.
#[test]
fn s_on_a_process_whose_agent_is_silent_says_why_it_cannot_answer() {
    let mut snapshot = snapshot();
    for p in snapshot.processes.iter_mut().filter(|p| p.pid == 300) {
        p.state = Some('T');
        p.agent_silent_seconds = Some(12.3);
    }
    let mut app = app_on(snapshot);
    app.effective_uid = 0;
    select(&mut app, 300);
    assert_eq!(press(&mut app, KeyCode::Char('s')), Effect::Redraw);
    assert_eq!(
        app.status.as_deref(),
        Some(
            "process 300's agent cannot answer: the process is stopped (state T); it has said \
             nothing for 12 s since torchtop connected"
        )
    );
}

/// The tree keeps its order by parent and pid and shows no sort arrow, so `>` `<` `r` and the
/// sort menu there changed nothing on screen: the benchmark saw no change within 900 ms of
/// `>` in the tree. They now say where the order went, and the tree's rows stay as they were.
#[test]
fn a_sort_key_in_the_tree_says_it_sorts_the_flat_table() {
    let mut app = App::new(1.0, true, false);
    app.on_snapshot(Arc::new(with_the_process_table()));
    press(&mut app, KeyCode::Char('>'));
    assert_eq!(app.status, None, "the flat table shows its own arrow");
    press(&mut app, KeyCode::Char('t'));
    let tree = pids(&app);
    press(&mut app, KeyCode::Char('>'));
    let status = app.status.clone().unwrap_or_default();
    assert!(
        status.contains("sorted by CPU%▼ in the flat table"),
        "{status}"
    );
    assert_eq!(pids(&app), tree, "the tree keeps its order");
    press(&mut app, KeyCode::Char('r'));
    let status = app.status.clone().unwrap_or_default();
    assert!(status.contains("CPU%▲"), "{status}");
    press(&mut app, KeyCode::Char('t'));
    assert_eq!(app.settings.sort, SortKey::Cpu);
}
