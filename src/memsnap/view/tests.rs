//! The viewer on the OOM fixture: the state machine key by key, and each view drawn on
//! ratatui's TestBackend at 80x24 and 120x40, kept as insta snapshots.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::{backend::TestBackend, buffer::Buffer, Terminal};

use super::render::draw;
use super::state::{Effect, Tab, Viewer};
use crate::memsnap::analysis::paths::Step;
use crate::memsnap::model::tests::fixture;
use crate::memsnap::{load, Links};

fn viewer() -> Viewer {
    Viewer::new(
        load(&fixture("oom.pickle"), Links::Follow).expect("fixture"),
        true,
    )
}

fn render(viewer: &Viewer, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    terminal.draw(|frame| draw(frame, viewer)).expect("draw");
    terminal.backend().buffer().clone()
}

fn screen(viewer: &Viewer, width: u16, height: u16) -> String {
    let buffer = render(viewer, width, height);
    (0..buffer.area.height)
        .map(|y| {
            (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn press(viewer: &mut Viewer, keys: &str) -> Effect {
    let mut effect = Effect::Redraw;
    for c in keys.chars() {
        effect = viewer.on_key(KeyEvent::from(KeyCode::Char(c)));
    }
    effect
}

fn key(viewer: &mut Viewer, code: KeyCode) -> Effect {
    viewer.on_key(KeyEvent::from(code))
}

fn both_sizes(viewer: &Viewer, name: &str) -> [String; 2] {
    let small = screen(viewer, 80, 24);
    let large = screen(viewer, 120, 40);
    insta::assert_snapshot!(format!("{name}_80x24"), small);
    insta::assert_snapshot!(format!("{name}_120x40"), large);
    for s in [&small, &large] {
        assert!(s.contains(" torchtop "), "{s}");
        assert!(s.contains("q quit"), "{s}");
    }
    [small, large]
}

#[test]
fn summary_view() {
    let v = viewer();
    for s in both_sizes(&v, "summary") {
        assert!(s.contains("cuda:0") && s.contains("cuda:1"), "{s}");
        assert!(s.contains("reserved 62.0MiB"), "{s}");
        assert!(s.contains("allocated 45.0MiB in 16 blocks"), "{s}");
        assert!(
            s.contains("OUT OF MEMORY: 64.0MiB requested, 34.0MiB free"),
            "{s}"
        );
    }
    let large = screen(&v, 120, 40);
    assert!(large.contains("einsum (functional.py:422)"), "{large}");
}

#[test]
fn holders_view() {
    let mut v = viewer();
    press(&mut v, "2");
    let [small, large] = both_sizes(&v, "holders");
    for s in [&small, &large] {
        assert!(
            s.contains("53.2MiB live in 19 block(s) on every device"),
            "{s}"
        );
        assert!(s.contains("84.6%") && s.contains("cuda:0"), "{s}");
    }
    assert!(
        large.contains("convert (module.py:1329)"),
        "the heaviest branch is open:\n{large}"
    );
}

#[test]
fn segments_view() {
    let mut v = viewer();
    press(&mut v, "3");
    for s in both_sizes(&v, "segments") {
        assert!(s.contains("6 segment(s), 74.0MiB reserved"), "{s}");
        assert!(s.contains("block 1 of 4  active_allocated  6.0MiB"), "{s}");
        assert!(s.contains("build_model (train.py:31)"), "{s}");
    }
}

#[test]
fn timeline_view() {
    let mut v = viewer();
    press(&mut v, "4");
    for s in both_sizes(&v, "timeline") {
        assert!(
            s.contains("Timeline cuda:0  63 events  peak 64.0MiB in use at event 44"),
            "{s}"
        );
        assert!(s.contains("at the peak (event 44, 64.0MiB)"), "{s}");
        assert!(
            s.contains('O') && s.contains('S'),
            "markers for the OOM and the snapshots:\n{s}"
        );
    }
}

#[test]
fn help_and_the_filter_prompt() {
    let mut v = viewer();
    press(&mut v, "?");
    let help = screen(&v, 80, 24);
    insta::assert_snapshot!("help_80x24", help);
    assert!(help.contains("fold or unfold the C++ frames"));
    press(&mut v, "x");
    assert!(!v.help, "any key closes the help");
    press(&mut v, "/remem");
    let prompt = screen(&v, 80, 24);
    insta::assert_snapshot!("filter_prompt_80x24", prompt);
    assert!(prompt.contains("Filter by frame name:  remem▏"));
    assert!(
        prompt.contains("5.0MiB live in 3 block(s) on every device  matching 'rem"),
        "{prompt}"
    );
}

#[test]
fn a_small_terminal_gets_a_sentence() {
    let s = screen(&viewer(), 30, 8);
    assert!(s.contains("too small"), "{s}");
}

#[test]
fn tabs_switch_by_tab_and_number() {
    let mut v = viewer();
    assert_eq!(v.tab, Tab::Summary);
    key(&mut v, KeyCode::Tab);
    assert_eq!(v.tab, Tab::Holders);
    key(&mut v, KeyCode::BackTab);
    key(&mut v, KeyCode::BackTab);
    assert_eq!(v.tab, Tab::Timeline);
    press(&mut v, "3");
    assert_eq!(v.tab, Tab::Segments);
}

#[test]
fn esc_clears_the_filter_before_it_quits() {
    let mut v = viewer();
    press(&mut v, "/einsum");
    assert!(v.editing_filter);
    key(&mut v, KeyCode::Enter);
    assert_eq!((v.editing_filter, v.filter.as_str()), (false, "einsum"));
    assert_eq!(v.tree.total(), 0, "the OOM's stack holds nothing live");
    assert_eq!(key(&mut v, KeyCode::Esc), Effect::Redraw);
    assert!(v.filter.is_empty() && v.tree.total() > 0);
    assert_eq!(key(&mut v, KeyCode::Esc), Effect::Quit);
    assert_eq!(press(&mut viewer(), "q"), Effect::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(viewer().on_key(ctrl_c), Effect::Quit);
}

#[test]
fn d_cycles_the_devices() {
    let mut v = viewer();
    let all = v.tree.total();
    press(&mut v, "d");
    assert_eq!(v.device, Some(0));
    assert_eq!(v.tree.total(), 47_160_832);
    assert_eq!(v.segments().len(), 4);
    press(&mut v, "d");
    assert_eq!(v.device, Some(1));
    assert_eq!(v.timeline().map(|t| t.device), Some(1));
    press(&mut v, "d");
    assert_eq!((v.device, v.tree.total()), (None, all));
}

#[test]
fn the_tree_opens_closes_and_folds() {
    let mut v = viewer();
    press(&mut v, "2");
    let rows = v.rows();
    let first = rows[0];
    assert!(v.open.contains(&first), "the heaviest branch starts open");
    key(&mut v, KeyCode::Enter);
    assert!(!v.open.contains(&first));
    assert!(v.rows().len() < rows.len());
    key(&mut v, KeyCode::Right);
    assert!(v.open.contains(&first));
    key(&mut v, KeyCode::Right);
    assert_eq!(v.row, 1, "Right on an open row goes to its first child");
    key(&mut v, KeyCode::Left);
    key(&mut v, KeyCode::Left);
    assert_eq!(v.row, 0, "Left on a closed row goes to its parent");
    key(&mut v, KeyCode::End);
    assert_eq!(v.row, v.rows().len() - 1);
    let has_cpp = |v: &Viewer| v.tree.nodes.iter().any(|n| n.step == Some(Step::Cpp));
    assert!(has_cpp(&v));
    press(&mut v, "c");
    assert!(!v.fold_cpp && !has_cpp(&v));
}

#[test]
fn segment_and_block_selection() {
    let mut v = viewer();
    press(&mut v, "3");
    key(&mut v, KeyCode::Right);
    key(&mut v, KeyCode::Right);
    assert_eq!((v.segment, v.block), (0, 2));
    for _ in 0..10 {
        key(&mut v, KeyCode::Right);
    }
    assert_eq!(v.block, 3, "the last block of the segment");
    press(&mut v, "j");
    assert_eq!((v.segment, v.block), (1, 0));
    key(&mut v, KeyCode::End);
    assert_eq!(v.segment, 5);
}

#[test]
fn the_timeline_cursor_moves_and_jumps() {
    let mut v = viewer();
    press(&mut v, "4");
    assert_eq!(v.cursor, 43, "it opens at the peak");
    key(&mut v, KeyCode::Home);
    assert_eq!(v.cursor, 0);
    press(&mut v, "o");
    assert_eq!(v.cursor, 61, "the OOM");
    press(&mut v, "s");
    assert_eq!(v.cursor, 62, "the next snapshot");
    press(&mut v, "s");
    assert_eq!(v.cursor, 30, "wraps to the first snapshot");
    press(&mut v, ".");
    assert_eq!(v.cursor, 31);
    key(&mut v, KeyCode::End);
    press(&mut v, "p");
    assert_eq!(v.cursor, 43);
}

#[test]
fn the_summary_scrolls_no_further_than_its_end() {
    let mut v = viewer();
    v.screen = (80, 10);
    let lines = super::summary::lines(&v, 80, crate::terminal::theme::Theme::new(false)).len();
    key(&mut v, KeyCode::End);
    assert_eq!(
        v.summary_scroll,
        lines - 8,
        "the last line at the bottom of 8 rows"
    );
    key(&mut v, KeyCode::Down);
    assert_eq!(v.summary_scroll, lines - 8);
    key(&mut v, KeyCode::Up);
    assert_eq!(v.summary_scroll, lines - 9);
    v.screen = (200, 60);
    key(&mut v, KeyCode::Down);
    assert_eq!(v.summary_scroll, 0, "everything fits: nothing to scroll");
}

/// A loaded snapshot from a Python literal, pickled by python3.
fn loaded_from_python(body: &str) -> crate::memsnap::LoadedSnapshot {
    let snapshot = crate::memsnap::model::tests::from_python_dict(body).unwrap();
    let analysis = crate::memsnap::analysis::Analysis::new(&snapshot);
    crate::memsnap::LoadedSnapshot {
        path: "test.pickle".into(),
        file_bytes: 1,
        snapshot,
        analysis,
    }
}

/// A 1 GiB segment that one 2 MiB tensor in the middle keeps from being released.
const PINNED: &str =
    "{'segments': [{'device': 0, 'address': 0, 'total_size': 1024 << 20, 'blocks': [\
    {'size': 500 << 20, 'state': 'inactive', 'frames': []},\
    {'size': 2 << 20, 'requested_size': 2 << 20, 'state': 'active_allocated',\
     'frames': [{'filename': '/p/train.py', 'line': 5, 'name': 'keep'}]},\
    {'size': 522 << 20, 'state': 'inactive', 'frames': []}]}], 'device_traces': [[]]}";

#[test]
fn a_small_live_block_in_a_large_segment_shows() {
    let loaded = loaded_from_python(PINNED);
    let segment = &loaded.snapshot.segments[0];
    for cells in [10, 80, 100, 1000] {
        let owners = super::segments::cell_owners(segment, cells);
        assert!(owners.contains(&Some(1)), "{cells} cells: {owners:?}");
    }
    let mut v = Viewer::new(loaded, true);
    press(&mut v, "3");
    let screen = screen(&v, 120, 12);
    assert!(screen.contains('█'), "{screen}");
}

#[test]
fn a_free_block_is_not_said_to_be_allocated() {
    let mut v = Viewer::new(loaded_from_python(PINNED), true);
    press(&mut v, "3");
    let free = screen(&v, 120, 24);
    assert!(!free.contains("allocated at"), "{free}");
    assert!(free.contains("free: cached by the allocator"), "{free}");
    key(&mut v, KeyCode::Right);
    let live = screen(&v, 120, 24);
    assert!(
        live.contains("allocated at") && live.contains("keep (train.py:5)"),
        "{live}"
    );
}
