//! Render tests of text cut at the edge of its area: where real text was cut off, the line ends
//! in `…` in its last cell (the warnings panel and the `w` view, COMMAND, the host strip), and
//! a pid too wide for its column is never shown as other digits.

use crossterm::event::KeyCode;

use super::*;

/// What the `oom-risk` rule says of a nearly full GPU (as with tests/fixtures/many_warnings.toml).
const OOM_RISK: &str = "GPU 0 has 1.5GiB of 79.6GiB free (98% in use or reserved by the driver): \
    a process that allocates more will fail with CUDA out of memory";

/// One GPU with two processes, warned of a sentence too long for a 120-column screen.
fn warned_app() -> App {
    let mut snapshot = busy_snapshot(1, 2, 0);
    snapshot.warnings = vec![
        warning(
            "oom-risk",
            Severity::Critical,
            Subject::Gpu { index: 0 },
            OOM_RISK,
        ),
        warning("swap", Severity::Warn, Subject::Host, "swap in use"),
    ];
    app_with(snapshot)
}

#[test]
fn a_warning_cut_at_the_edge_ends_in_the_mark_in_the_panel_and_the_w_view() {
    let mut app = warned_app();
    let s = screen(&app, 120, 40);
    let line = line_with(&s, "GPU 0 has 1.5GiB");
    assert!(line.ends_with('…'), "{line}");
    assert!(!line.contains("out of memory"), "the sentence fits: {line}");
    assert_eq!(
        line.chars().count(),
        120,
        "the mark is in the last cell: {line}"
    );
    // A line that fits is left alone.
    assert!(line_with(&s, "swap in use").ends_with("swap in use"), "{s}");

    key(&mut app, KeyCode::Char('w'));
    let s = screen(&app, 120, 40);
    let line = line_with(&s, "GPU 0 has 1.5GiB");
    assert!(
        line.contains("…│"),
        "the view's line ends in the mark: {line}"
    );
    assert!(line_with(&s, "swap in use").contains("swap in use "), "{s}");
}

#[test]
fn a_command_cut_at_the_edge_ends_in_the_mark() {
    let mut hidden = GpuProcess::new(777_777, 0, ProcessKind::Compute);
    hidden.gpu_memory_bytes = Some(2 * GIB);
    let app = app_with(snapshot_with(vec![gpu(0, 0)], vec![hidden]));
    let line = line_with(&screen(&app, 120, 40), "777777").to_string();
    assert!(line.contains("not visible here (another"), "{line}");
    assert!(line.ends_with('…'), "{line}");
    assert_eq!(line.chars().count(), 120, "{line}");
    // A screen wide enough for the whole sentence shows it unmarked.
    let wide = screen(&app, 250, 40);
    let line = line_with(&wide, "777777");
    assert!(line.ends_with("(another container, or exited)"), "{line}");
}

#[test]
fn the_host_strip_at_the_minimum_size_marks_its_cut_lines() {
    let s = screen(&app_with(busy_snapshot(1, 3, 0)), 60, 16);
    let line = line_with(&s, "swappiness 60");
    assert!(line.ends_with('…'), "{line}\n{s}");
    assert!(!line.contains("overcommit_memory 0"), "{line}");
}

#[test]
fn a_ten_digit_pid_is_never_shown_as_eight_other_digits() {
    let mut snapshot = busy_snapshot(1, 1, 0);
    let mut ghost = GpuProcess::new(2_147_483_000, 0, ProcessKind::Compute);
    ghost.gpu_memory_bytes = Some(2 * GIB);
    snapshot.processes.push(ghost);
    let app = app_with(snapshot);
    for (width, height) in [(80, 24), (120, 40), (200, 50)] {
        let s = screen(&app, width, height);
        let line = line_with(&s, "not visible here");
        let pid = line.split_whitespace().next().unwrap_or_default();
        assert_eq!(pid, "214748…", "at {width}x{height}: {line}");
        assert!(
            !s.split_whitespace().any(|word| word == "47483000"),
            "another pid shows at {width}x{height}:\n{s}"
        );
    }
}
