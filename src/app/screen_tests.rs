//! Keys of issue 14's screen work: the detail view (`Enter`), the density (`a` `f` `c`), the
//! GPU (`g`) and "only mine" (`m`) filters, and a renice showing at once.

use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;

use super::view::Density;
use super::*;
use crate::actions::Action;
use crate::model::{GpuProcess, GpuSample, ProcessKind};

fn process(pid: u32, gpu: u32, uid: u32) -> GpuProcess {
    let mut p = GpuProcess::new(pid, gpu, ProcessKind::Compute);
    p.visible = true;
    p.uid = Some(uid);
    p.user = Some(format!("user{uid}").into());
    p.command = Some(format!("python3 job{pid}.py").into());
    p.start_ticks = Some(u64::from(pid) * 7);
    p.nice = Some(0);
    p.gpu_memory_bytes = Some(u64::from(pid) << 20);
    p
}

fn app() -> App {
    let mut app = App::new(1.0, true, false);
    app.my_uid = 1000;
    app.on_snapshot(Arc::new(Snapshot {
        gpus: (0..3)
            .map(|index| GpuSample {
                index,
                ..Default::default()
            })
            .collect(),
        processes: vec![
            process(100, 0, 1000),
            process(200, 1, 1001),
            process(300, 2, 1000),
        ],
        ..Snapshot::default()
    }));
    app
}

fn press(app: &mut App, code: KeyCode) -> Effect {
    app.on_key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn pids(app: &App) -> Vec<u32> {
    let mut pids: Vec<u32> = app.rows().iter().map(|r| r.pid).collect();
    pids.sort_unstable();
    pids
}

#[test]
fn enter_opens_the_detail_view_through_the_sampler_and_esc_closes_it() {
    let mut app = app();
    let pid = app.selected_row().unwrap().pid;
    assert_eq!(
        press(&mut app, KeyCode::Enter),
        Effect::AskSampler(SamplerRequest::Detail { pid: Some(pid) })
    );
    assert_eq!(app.detail.as_ref().map(|d| d.pid), Some(pid));
    // j and k scroll the view; they do not move the selection off its process.
    press(&mut app, KeyCode::Char('j'));
    assert_eq!(app.selected_row().unwrap().pid, pid);
    assert_eq!(app.detail.as_ref().unwrap().scroll, 1);
    assert_eq!(
        press(&mut app, KeyCode::Esc),
        Effect::AskSampler(SamplerRequest::Detail { pid: None })
    );
    assert!(app.detail.is_none());
    assert_eq!(
        app.status, None,
        "Esc closed the view; it said nothing about quitting"
    );
}

#[test]
fn action_keys_work_from_the_detail_view_on_its_process() {
    let mut app = app();
    let pid = app.selected_row().unwrap().pid;
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('K'));
    let Mode::Confirm { targets, .. } = &app.mode else {
        panic!("K asks first: {:?}", app.mode);
    };
    assert_eq!(targets[0].pid(), pid);
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::Normal);
    assert!(app.detail.is_some(), "the dialog closed, the view stays");
    press(&mut app, KeyCode::Char('n'));
    assert!(matches!(app.mode, Mode::NiceInput { .. }));
    press(&mut app, KeyCode::Esc);
    assert!(matches!(press(&mut app, KeyCode::F(9)), Effect::Redraw));
    assert!(matches!(app.mode, Mode::SignalMenu { .. }));
}

#[test]
fn actions_are_refused_once_the_process_is_gone() {
    let mut app = app();
    let pid = app.selected_row().unwrap().pid;
    press(&mut app, KeyCode::Enter);
    let mut snapshot = (*app.snapshot).clone();
    snapshot.processes.retain(|p| p.pid != pid);
    app.on_snapshot(Arc::new(snapshot));
    assert_eq!(press(&mut app, KeyCode::Char('K')), Effect::Redraw);
    assert_eq!(app.mode, Mode::Normal);
    assert!(app.status.as_deref().unwrap().contains("no longer listed"));
}

#[test]
fn g_cycles_through_the_gpus_and_m_shows_only_mine() {
    let mut app = app();
    press(&mut app, KeyCode::Char('g'));
    assert_eq!(pids(&app), vec![100]);
    press(&mut app, KeyCode::Char('g'));
    assert_eq!(pids(&app), vec![200]);
    press(&mut app, KeyCode::Char('g'));
    press(&mut app, KeyCode::Char('g'));
    assert_eq!(app.settings.gpus, None);
    assert_eq!(pids(&app), vec![100, 200, 300]);
    press(&mut app, KeyCode::Char('m'));
    assert_eq!(pids(&app), vec![100, 300]);
    press(&mut app, KeyCode::Char('m'));
    assert_eq!(pids(&app), vec![100, 200, 300]);
}

#[test]
fn a_renice_shows_at_once_in_the_row_and_the_dialog() {
    let mut app = app();
    let target = app.targets().unwrap();
    let report = ActionReport {
        request: ActionRequest {
            action: Action::SetNice(7),
            targets: target,
        },
        results: vec![Ok(Some(7))],
    };
    app.on_action_done(&report);
    assert_eq!(app.selected_row().unwrap().nice(), Some(7));
    press(&mut app, KeyCode::Char('n'));
    let Mode::NiceInput { current, .. } = &app.mode else {
        panic!("{:?}", app.mode);
    };
    assert_eq!(*current, Some(7));
}

/// Process rows on a 120x40 screen with 4 GPUs, 20 processes and every detail line wanted.
fn rows_at_120x40(density: Density) -> usize {
    let needs = layout::LayoutNeeds {
        gpu_count: 4,
        gpu_detail_lines: 2,
        process_rows: 20,
        density,
        ..Default::default()
    };
    layout::plan(Rect::new(0, 0, 120, 40), &needs).process_rows()
}

#[test]
fn compact_leaves_room_for_19_processes_and_full_shows_every_detail() {
    assert!(rows_at_120x40(Density::Compact) >= 19);
    assert!(rows_at_120x40(Density::Auto) < 19);
    let needs = layout::LayoutNeeds {
        gpu_count: 4,
        gpu_detail_lines: 2,
        process_rows: 20,
        density: Density::Full,
        ..Default::default()
    };
    let layout::Plan::Screen(areas) = layout::plan(Rect::new(0, 0, 120, 40), &needs) else {
        panic!("too small");
    };
    assert_eq!(areas.gpu_detail_lines, 2);
    assert_eq!(areas.history_rows_per_gpu, 3);
    let mut app = app();
    press(&mut app, KeyCode::Char('c'));
    assert_eq!(app.view.density, Density::Compact);
    press(&mut app, KeyCode::Char('f'));
    assert_eq!(app.view.density, Density::Full);
    press(&mut app, KeyCode::Char('a'));
    assert_eq!(app.view.density, Density::Auto);
}
