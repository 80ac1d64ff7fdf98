//! The warnings view, key by key and click by click: grouping and order, walking the list,
//! Esc one level at a time, `g`, and that nothing typed in the view reaches the table behind it.

use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::Rect;

use super::view::Mark;
use super::warning_groups::{Cause, GroupKey};
use super::warnings_view::{Entry, Level};
use super::*;
use crate::model::filter::SortKey;
use crate::model::{GpuProcess, Job, JobRank, ProcessKind, Severity, Subject, Warning};

fn gpu_process(pid: u32, gpu: u32) -> GpuProcess {
    let mut p = GpuProcess::new(pid, gpu, ProcessKind::Compute);
    p.visible = true;
    p.command = Some(format!("python worker{pid}.py").into());
    p.start_ticks = Some(u64::from(pid) * 7);
    p.gpu_memory_bytes = Some(u64::from(pid) << 20);
    p
}

fn warning(id: &str, severity: Severity, subject: Subject) -> Warning {
    Warning {
        id: id.to_string(),
        severity,
        subject,
        message: format!("{id} message"),
        evidence: vec![("figure".to_string(), "42".to_string())],
        remedy: format!("{id} remedy"),
        since: "2025-06-01T12:34:56Z".to_string(),
    }
}

fn process(pid: u32) -> Subject {
    Subject::Process { pid }
}

/// Ranks 100..=104 of job "run7" on GPU 0, and 200..=202 alone on GPU 1; nine warnings.
fn snapshot() -> Snapshot {
    let ranks = (0..5).map(|r| JobRank {
        pid: 100 + r,
        gpu: 0,
        rank: Some(r),
        local_rank: Some(r),
        world_size: Some(5),
    });
    let mut warnings: Vec<Warning> = (100..105)
        .map(|pid| warning("gpu-starved", Severity::Warn, process(pid)))
        .collect();
    warnings.extend((200..203).map(|pid| warning("gpu-starved", Severity::Warn, process(pid))));
    warnings.extend([
        warning("throttle", Severity::Info, Subject::Gpu { index: 1 }),
        warning("swap", Severity::Warn, Subject::Host),
        warning("leak", Severity::Warn, process(201)),
        warning("oom-risk", Severity::Warn, Subject::Gpu { index: 0 }),
        warning("ecc", Severity::Critical, Subject::Gpu { index: 1 }),
    ]);
    Snapshot {
        processes: (100..105)
            .map(|pid| gpu_process(pid, 0))
            .chain((200..203).map(|pid| gpu_process(pid, 1)))
            .collect(),
        jobs: vec![Job {
            gone: Vec::new(),
            id: "torchelastic run run7".to_string(),
            ranks: ranks.collect(),
        }],
        warnings,
        ..Snapshot::default()
    }
}

/// An app laid out on a 100x30 screen, as the event loop does before each frame.
fn app() -> App {
    let mut app = in_gpu_order(App::new(1.0, true, false));
    app.on_snapshot(Arc::new(snapshot()));
    lay_out(&mut app);
    app
}

fn lay_out(app: &mut App) {
    let needs = layout::LayoutNeeds {
        process_rows: app.row_count(),
        warnings: u16::try_from(app.warnings_view.groups.len()).unwrap(),
        warning_detail_lines: 40,
        ..Default::default()
    };
    app.set_layout(layout::plan(Rect::new(0, 0, 100, 30), &needs));
}

fn press(app: &mut App, code: KeyCode) -> Effect {
    app.on_key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn selected_pid(app: &App) -> Option<u32> {
    app.selected_row().map(|r| r.pid)
}

/// Each list entry as "id cause" for groups and "id subject" for warnings.
fn listed(app: &App) -> Vec<String> {
    let view = &app.warnings_view;
    view.entries
        .iter()
        .map(|&e| match view.warning_of(e, &app.snapshot) {
            Some(w) if matches!(e, Entry::Member { .. }) => format!("  {} {:?}", w.id, w.subject),
            Some(w) => format!("{} {:?}", w.id, w.subject),
            None => {
                let g = &view.groups[e.group()];
                format!("{} {:?} x{}", g.key.id, g.key.cause, g.members.len())
            }
        })
        .collect()
}

fn open_detail_id(app: &App) -> Option<(String, Subject)> {
    match &app.warnings_view.level {
        Level::Detail(d) => Some((d.warning.id.clone(), d.warning.subject.clone())),
        _ => None,
    }
}

#[test]
fn warnings_of_one_id_and_cause_share_a_line_most_severe_then_most_harmful_first() {
    let app = app();
    assert_eq!(
        listed(&app),
        [
            "ecc Gpu { index: 1 }",
            "oom-risk Gpu { index: 0 }",
            "leak Process { pid: 201 }",
            "swap Host",
            "gpu-starved Job(\"torchelastic run run7\") x5",
            "gpu-starved Gpu(1) x3",
            "throttle Gpu { index: 1 }",
        ]
    );
}

#[test]
fn keys_in_the_view_never_act_on_the_table_behind_it() {
    let mut app = app();
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Down);
    let before = selected_pid(&app);
    assert_eq!(before, Some(102));
    press(&mut app, KeyCode::Char('w'));
    for code in [
        KeyCode::Char('j'),
        KeyCode::Down,
        KeyCode::Tab,
        KeyCode::Char('k'),
        KeyCode::Up,
        KeyCode::PageDown,
        KeyCode::End,
        KeyCode::Home,
        KeyCode::Char(' '),
        KeyCode::Char('K'),
        KeyCode::Char('T'),
        KeyCode::F(9),
        KeyCode::Char('n'),
        KeyCode::Char('/'),
        KeyCode::Char('t'),
        KeyCode::Char('s'),
        KeyCode::F(6),
    ] {
        let effect = press(&mut app, code);
        assert!(
            matches!(effect, Effect::None | Effect::Redraw),
            "{code:?} gave {effect:?}"
        );
        assert_eq!(selected_pid(&app), before, "{code:?} moved the table");
        assert_eq!(app.mode, Mode::Normal, "{code:?} opened a dialog");
        assert!(app.tags.is_empty() && app.settings.filter.is_empty());
        assert!(!app.settings.tree);
        assert!(app.warnings_view.is_open(), "{code:?} closed the view");
    }
}

#[test]
fn walking_to_the_last_warning_shows_its_remedy_and_esc_goes_back_one_level() {
    let mut app = app();
    press(&mut app, KeyCode::Char('w'));
    for _ in 0..20 {
        press(&mut app, KeyCode::Char('j'));
    }
    assert_eq!(app.warnings_view.selected, 6, "stops at the last entry");
    assert_eq!(press(&mut app, KeyCode::Enter), Effect::Redraw);
    let open = open_detail_id(&app);
    assert_eq!(open, Some(("throttle".into(), Subject::Gpu { index: 1 })));
    assert_eq!(press(&mut app, KeyCode::Esc), Effect::Redraw);
    assert_eq!(app.warnings_view.level, Level::List);
    assert_eq!(press(&mut app, KeyCode::Esc), Effect::Redraw);
    assert!(!app.warnings_view.is_open());
    assert_eq!(
        press(&mut app, KeyCode::Esc),
        Effect::Redraw,
        "the monitor's Esc never quits"
    );
}

#[test]
fn enter_opens_a_group_to_its_members_and_left_closes_it() {
    let mut app = app();
    press(&mut app, KeyCode::Char('w'));
    for _ in 0..4 {
        press(&mut app, KeyCode::Down);
    }
    press(&mut app, KeyCode::Enter);
    let rows = listed(&app);
    assert_eq!(rows.len(), 12, "{rows:#?}");
    assert_eq!(rows[5], "  gpu-starved Process { pid: 100 }");
    assert_eq!(rows[9], "  gpu-starved Process { pid: 104 }");
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Enter);
    let open = open_detail_id(&app);
    assert_eq!(open, Some(("gpu-starved".into(), process(101))));
    press(&mut app, KeyCode::Esc);
    press(&mut app, KeyCode::Left);
    assert_eq!(listed(&app).len(), 7, "closed again");
    assert_eq!(app.warnings_view.selected, 4, "on the group's line");
}

#[test]
fn g_selects_the_process_gpu_or_job_and_closes_the_view() {
    let mut app = app();
    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Char('g'));
    assert!(!app.warnings_view.is_open());
    assert_eq!(selected_pid(&app), Some(201), "the leak's process");

    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::Home);
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('g'));
    assert_eq!(app.view.mark, Some(Mark::Gpu(1)), "ecc's GPU");
    assert_eq!(selected_pid(&app), Some(200), "the GPU's first process");
    assert_eq!(
        press(&mut app, KeyCode::Esc),
        Effect::Redraw,
        "Esc drops the mark"
    );
    assert_eq!(app.view.mark, None);

    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::Home);
    for _ in 0..4 {
        press(&mut app, KeyCode::Down);
    }
    press(&mut app, KeyCode::Char('g'));
    let job = Mark::Job("torchelastic run run7".into());
    assert_eq!(app.view.mark, Some(job), "the group's job");
    assert_eq!(selected_pid(&app), Some(100), "its first rank");
}

/// Tried as a user: `g` on rank-gone, whose job is down to one process and so no longer among
/// the snapshot's jobs, said "job job 127.0.0.1:29577 (root) has no listed process now" while
/// the rank left was listed.
#[test]
fn g_on_a_job_down_to_one_process_selects_the_rank_left() {
    let mut survivor = gpu_process(300, 0);
    survivor.env = Some(
        crate::model::LaunchEnv {
            rank: Some(0),
            world_size: Some(2),
            master_addr: Some("127.0.0.1".into()),
            master_port: Some("29577".into()),
            ..Default::default()
        }
        .into(),
    );
    survivor.user = Some("root".into());
    let id = crate::rules::job_key(&survivor).unwrap();
    assert_eq!(id, "job 127.0.0.1:29577 (root)");
    let snapshot = Snapshot {
        processes: vec![gpu_process(200, 0), survivor],
        warnings: vec![warning(
            "rank-gone",
            Severity::Warn,
            Subject::Job { id: id.clone() },
        )],
        ..Snapshot::default()
    };
    let mut app = in_gpu_order(App::new(1.0, true, false));
    app.on_snapshot(Arc::new(snapshot));
    lay_out(&mut app);
    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::Char('g'));
    assert_eq!(selected_pid(&app), Some(300));
    assert_eq!(
        app.status.as_deref(),
        Some("job 127.0.0.1:29577 (root): its first rank, pid 300, is selected")
    );
}

#[test]
fn g_clears_a_filter_that_hides_the_subject() {
    let mut app = app();
    press(&mut app, KeyCode::Char('/'));
    for c in "worker100".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Char('g'));
    assert_eq!(app.settings.filter, "");
    assert_eq!(selected_pid(&app), Some(201));
}

fn mouse(kind: MouseEventKind, column: u16, row: u16) -> MouseEvent {
    MouseEvent {
        kind,
        column,
        row,
        modifiers: KeyModifiers::NONE,
    }
}

#[test]
fn clicks_and_the_wheel_walk_the_view_and_never_reach_the_table() {
    let mut app = app();
    let before = selected_pid(&app);
    press(&mut app, KeyCode::Char('w'));
    let body = app.warnings_view.area.body;
    let click = |row| mouse(MouseEventKind::Down(MouseButton::Left), body.x + 2, row);
    assert_eq!(app.on_mouse(click(body.y + 3)), Effect::Redraw);
    assert_eq!(app.warnings_view.selected, 3);
    assert_eq!(app.on_mouse(click(body.y + 3)), Effect::Redraw, "again");
    assert_eq!(open_detail_id(&app), Some(("swap".into(), Subject::Host)));
    press(&mut app, KeyCode::Esc);
    let scroll = mouse(MouseEventKind::ScrollDown, body.x + 2, body.y);
    app.on_mouse(scroll);
    assert_eq!(app.warnings_view.selected, 4);
    let table = match &app.view.plan {
        Plan::Screen(areas) => areas.processes,
        Plan::TooSmall { .. } => panic!("100x30 fits"),
    };
    let outside = click(table.bottom() - 1);
    assert_eq!(app.on_mouse(outside), Effect::None, "below the view");
    assert_eq!(app.on_mouse(click(body.bottom() + 5)), Effect::None);
    assert_eq!(selected_pid(&app), before);
}

#[test]
fn the_selection_follows_its_warning_and_an_open_warning_outlives_it() {
    let mut app = app();
    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Down);
    let mut next = snapshot();
    next.warnings.retain(|w| w.id != "oom-risk");
    app.on_snapshot(Arc::new(next.clone()));
    let selected = app.warnings_view.selected_entry().unwrap();
    let leak = app
        .warnings_view
        .warning_of(selected, &app.snapshot)
        .unwrap();
    assert_eq!((leak.id.as_str(), app.warnings_view.selected), ("leak", 1));
    press(&mut app, KeyCode::Enter);
    next.warnings.retain(|w| w.id != "leak");
    app.on_snapshot(Arc::new(next));
    let Level::Detail(detail) = &app.warnings_view.level else {
        panic!("the detail closed when its warning cleared");
    };
    assert!(detail.cleared);
    assert_eq!(detail.warning.remedy, "leak remedy");
}

#[test]
fn the_detail_scrolls_within_its_text() {
    let mut app = app();
    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::Enter);
    let most = app.warnings_view.area.detail_max_scroll;
    assert!(most > 0, "40 lines do not fit in 30 rows");
    for _ in 0..100 {
        press(&mut app, KeyCode::Char('j'));
    }
    let scroll = |app: &App| match &app.warnings_view.level {
        Level::Detail(d) => d.scroll,
        _ => panic!("not in the detail"),
    };
    assert_eq!(scroll(&app), most);
    press(&mut app, KeyCode::Home);
    assert_eq!(scroll(&app), 0);
}

#[test]
fn an_empty_view_opens_and_closes() {
    let mut app = in_gpu_order(App::new(1.0, true, false));
    app.on_snapshot(Arc::new(Snapshot::default()));
    press(&mut app, KeyCode::Char('w'));
    assert!(app.warnings_view.is_open());
    assert_eq!(press(&mut app, KeyCode::Enter), Effect::Redraw);
    assert_eq!(press(&mut app, KeyCode::Char('g')), Effect::None);
    assert_eq!(press(&mut app, KeyCode::Esc), Effect::Redraw);
    assert!(!app.warnings_view.is_open());
    let key = GroupKey {
        id: "x".into(),
        cause: Cause::Host,
    };
    assert!(!app.warnings_view.opened.contains(&key));
}

#[test]
fn help_opens_over_the_view_and_esc_closes_only_the_help() {
    let mut app = app();
    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::Char('?'));
    assert!(app.view.show_help && app.warnings_view.is_open());
    assert_eq!(press(&mut app, KeyCode::Esc), Effect::Redraw);
    assert!(!app.view.show_help && app.warnings_view.is_open());
    assert_eq!(
        press(&mut app, KeyCode::Char('w')),
        Effect::Redraw,
        "w closes"
    );
    assert!(!app.warnings_view.is_open());
}

#[test]
fn clicks_on_a_screen_too_small_to_draw_the_view_do_nothing() {
    let mut app = app();
    press(&mut app, KeyCode::Char('w'));
    let body = app.warnings_view.area.body;
    app.set_layout(layout::plan(
        Rect::new(0, 0, 40, 10),
        &layout::LayoutNeeds::default(),
    ));
    let click = mouse(
        MouseEventKind::Down(MouseButton::Left),
        body.x + 2,
        body.y + 3,
    );
    assert_eq!(app.on_mouse(click), Effect::None);
    assert_eq!(app.warnings_view.selected, 0);
}

/// These tests read rows in GPU order (ascending); the default order, GPU memory descending,
/// has its own test.
fn in_gpu_order(mut app: App) -> App {
    app.settings.sort = SortKey::Gpu;
    app.settings.reverse = false;
    app
}

/// The same warnings are not grouped again, and give the groups grouping them again gives; a
/// process moving to a job or another GPU changes its warnings' cause, and they are regrouped.
#[test]
fn the_same_warnings_are_not_grouped_again() {
    let mut snap = snapshot();
    let mut grouper = super::warning_groups::Grouper::default();
    let mut groups = Vec::new();
    assert!(grouper.regroup(&snap, &mut groups));
    let first = groups.clone();
    assert!(!grouper.regroup(&snap, &mut groups));
    assert_eq!(groups, first);
    let mut fresh = super::warning_groups::Grouper::default();
    let cause_of = |groups: &[super::warning_groups::Group], id: &str| -> Vec<Cause> {
        let of_id = groups.iter().filter(|g| g.key.id == id);
        of_id.map(|g| g.key.cause.clone()).collect()
    };
    assert_eq!(cause_of(&groups, "leak"), [Cause::Gpu(1)]);
    snap.jobs[0].ranks[0].pid = 201;
    assert!(grouper.regroup(&snap, &mut groups));
    let job = Cause::Job(snap.jobs[0].id.clone());
    assert_eq!(cause_of(&groups, "leak"), [job]);
    let mut again = Vec::new();
    fresh.regroup(&snap, &mut again);
    assert_eq!(groups, again);
    snap.warnings.clear();
    assert!(grouper.regroup(&snap, &mut groups));
    assert!(groups.is_empty());
    assert!(!grouper.regroup(&snap, &mut groups));
}

/// `q` leaves the view from the list and from a warning's evidence, as the menus close with
/// it; only F10 and Ctrl-C quit from here.
#[test]
fn q_closes_the_view_from_the_list_and_from_the_evidence() {
    let mut app = app();
    let selected = selected_pid(&app);
    press(&mut app, KeyCode::Char('w'));
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Redraw);
    assert!(!app.warnings_view.is_open());
    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::End);
    press(&mut app, KeyCode::Enter);
    assert!(open_detail_id(&app).is_some());
    assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Redraw);
    assert!(!app.warnings_view.is_open());
    assert_eq!(selected_pid(&app), selected, "nothing reached the table");
    press(&mut app, KeyCode::Char('w'));
    assert_eq!(press(&mut app, KeyCode::F(10)), Effect::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(app.on_key(ctrl_c), Effect::Quit);
}

#[test]
fn the_list_opens_on_its_first_line_when_a_more_severe_warning_came_first_since() {
    let mut app = app();
    // As in the demo: oom-risk leads the list, then an OOM comes first.
    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::Char('j'));
    assert_eq!(
        listed(&app)[app.warnings_view.selected],
        "oom-risk Gpu { index: 0 }"
    );
    press(&mut app, KeyCode::Char('w'));
    let mut next = snapshot();
    next.warnings
        .insert(0, warning("oom", Severity::Critical, process(100)));
    app.on_snapshot(Arc::new(next));
    press(&mut app, KeyCode::Char('w'));
    assert_eq!(app.warnings_view.selected, 0, "{:?}", listed(&app));
    let first = listed(&app)[0].clone();
    press(&mut app, KeyCode::Enter);
    let (id, subject) = open_detail_id(&app).expect("Enter opens the first line");
    assert_eq!(format!("{id} {subject:?}"), first);
}
