//! Render tests of the warnings panel and the `w` view at several terminal sizes: the panel
//! grows into free rows (up to a third of the screen), groups share a line, and the view's
//! list, opened group and detail read whole.

use crossterm::event::KeyCode;

use super::*;

/// Eight GPUs with two processes each, and 24 warnings in 16 groups: two `gpu-starved`
/// processes on each GPU, and one each of the rest.
fn warned_app() -> App {
    let mut snapshot = busy_snapshot(8, 2, 0);
    snapshot.warnings = (0..16)
        .map(|k| {
            warning(
                "gpu-starved",
                Severity::Warn,
                Subject::Process { pid: 20_000 + k },
                "SM 12% while the CPU is at 100%",
            )
        })
        .collect();
    snapshot.warnings.extend([
        warning(
            "throttle",
            Severity::Info,
            Subject::Gpu { index: 5 },
            "power cap",
        ),
        warning(
            "oom-risk",
            Severity::Warn,
            Subject::Gpu { index: 0 },
            "GPU memory 97% used",
        ),
        warning(
            "leak",
            Severity::Warn,
            Subject::Process { pid: 20_003 },
            "allocated memory rises 480 MiB/min",
        ),
        warning(
            "fragmentation",
            Severity::Warn,
            Subject::Process { pid: 20_004 },
            "1.2 GiB reserved but unusable",
        ),
        warning(
            "ecc",
            Severity::Critical,
            Subject::Gpu { index: 3 },
            "4 uncorrected ECC errors",
        ),
        warning("swap", Severity::Warn, Subject::Host, "swap in use"),
        warning(
            "zombie-memory",
            Severity::Warn,
            Subject::Process { pid: 999_999 },
            "pid 999999 holds 2 GiB",
        ),
        warning(
            "throttle",
            Severity::Info,
            Subject::Gpu { index: 6 },
            "power cap",
        ),
    ]);
    snapshot.warnings[20].remedy = "Stop the jobs on this GPU, check nvidia-smi -q -d ECC and the \
        retired or remapped pages, then reset the GPU or reboot; if errors come back, have the \
        GPU replaced. A few corrected errors are handled by the hardware, but a steady rise is a \
        sign of failing memory."
        .to_string();
    app_with(snapshot)
}

/// The rows of the panel: from its title to the process table's header.
fn panel(screen: &str) -> Vec<&str> {
    screen
        .lines()
        .skip_while(|l| !l.starts_with(" WARNINGS"))
        .take_while(|l| !l.contains("PID"))
        .collect()
}

#[test]
fn the_panel_grows_into_free_rows_up_to_a_third_of_the_screen() {
    let app = warned_app();
    let sizes = [(80, 24), (120, 40), (200, 60)];
    let screens: Vec<String> = sizes.iter().map(|&(w, h)| screen(&app, w, h)).collect();
    insta::assert_snapshot!("warnings_panel_80x24", screens[0]);
    insta::assert_snapshot!("warnings_panel_120x40", screens[1]);
    insta::assert_snapshot!("warnings_panel_200x60", screens[2]);
    for (s, &(_, height)) in screens.iter().zip(&sizes) {
        let rows = panel(s);
        assert!(rows.len() <= usize::from(height / 3), "{s}");
        assert!(rows[0].contains("WARNINGS (24 in 16 lines)"), "{s}");
        assert!(rows[1].contains("CRIT ecc"), "critical first:\n{s}");
    }
    assert!(panel(&screens[0]).len() >= 3);
    let large = panel(&screens[2]);
    assert_eq!(large.len(), 17, "every group on its line:\n{}", screens[2]);
    assert!(!screens[2].contains("more: w lists"), "{}", screens[2]);
    let order: Vec<usize> = [
        "CRIT ecc",
        "WARN oom-risk",
        "WARN leak",
        "WARN fragmentation",
        "WARN zombie-memory",
        "WARN swap",
        "WARN gpu-starved    GPU 0      ▸ 2 processes on GPU 0: SM 12%",
        "WARN gpu-starved    GPU 7",
        "INFO throttle       GPU 5",
        "INFO throttle       GPU 6",
    ]
    .iter()
    .map(|needle| row_of(&screens[2], needle))
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{}", screens[2]);
    assert!(
        screens[1].contains(" more: w lists them all"),
        "{}",
        screens[1]
    );
}

/// One GPU, eight processes and four warnings: at 60x16 the panel gets its title and one row.
fn four_warnings_app() -> App {
    let mut snapshot = busy_snapshot(1, 8, 0);
    snapshot.warnings = vec![
        warning("swap", Severity::Warn, Subject::Host, "swap in use"),
        warning(
            "ecc",
            Severity::Critical,
            Subject::Gpu { index: 0 },
            "4 uncorrected ECC errors",
        ),
        warning(
            "oom-risk",
            Severity::Warn,
            Subject::Gpu { index: 0 },
            "GPU memory 97% used",
        ),
        warning(
            "throttle",
            Severity::Info,
            Subject::Gpu { index: 0 },
            "power cap",
        ),
    ];
    app_with(snapshot)
}

#[test]
fn a_panel_of_one_row_shows_the_most_severe_warning_and_counts_the_rest_in_its_title() {
    let app = four_warnings_app();
    let s = screen(&app, 60, 16);
    let rows = panel(&s);
    assert_eq!(rows.len(), 2, "title and one row at 60x16:\n{s}");
    assert!(rows[0].contains("WARNINGS (4)  +3 more"), "{s}");
    assert!(
        rows[1].contains("CRIT ecc"),
        "the most severe on the row:\n{s}"
    );
    assert!(!s.contains("more: w lists"), "{s}");
}

#[test]
fn the_view_lists_every_group_and_opens_one() {
    for (width, height) in [(80, 24), (200, 50)] {
        let mut app = sized(warned_app(), width, height);
        key(&mut app, KeyCode::Char('w'));
        let list = screen(&app, width, height);
        insta::assert_snapshot!(format!("warnings_view_{width}x{height}"), list);
        assert!(list.contains("WARNINGS (24)"), "{list}");
        assert!(list.contains("Enter: open"), "{list}");
        for _ in 0..6 {
            key(&mut app, KeyCode::Down);
        }
        key(&mut app, KeyCode::Enter);
        let opened = screen(&app, width, height);
        insta::assert_snapshot!(format!("warnings_group_{width}x{height}"), opened);
        assert!(line_with(&opened, "▾ 2 processes on GPU 0").contains("gpu-starved"));
        assert!(line_with(&opened, "└ WARN gpu-starved    pid 20000").contains("SM 12%"));
        assert!(opened.contains("pid 20008"), "{opened}");
    }
}

#[test]
fn the_detail_wraps_the_remedy_and_scrolls_to_its_end() {
    for (width, height) in [(80, 24), (200, 50)] {
        let mut app = sized(warned_app(), width, height);
        key(&mut app, KeyCode::Char('w'));
        key(&mut app, KeyCode::Enter);
        let app = sized(app, width, height);
        let detail = screen(&app, width, height);
        insta::assert_snapshot!(format!("warnings_detail_{width}x{height}"), detail);
        assert!(detail.contains("CRIT ecc on GPU 3"), "{detail}");
        assert!(detail.contains("4 uncorrected ECC errors"), "{detail}");
        assert!(
            detail.contains("memory used: 78.2GiB of 80.0GiB"),
            "{detail}"
        );
        assert!(detail.contains("Stop the jobs on this GPU"), "{detail}");
        assert!(detail.contains("Esc: back to the list"), "{detail}");
    }
    // The smallest screen torchtop draws on has no room for the whole remedy.
    let mut app = sized(warned_app(), 60, 16);
    key(&mut app, KeyCode::Char('w'));
    key(&mut app, KeyCode::Enter);
    let mut app = sized(app, 60, 16);
    let top = screen(&app, 60, 16);
    assert!(!top.contains("sign of failing memory."), "{top}");
    key(&mut app, KeyCode::End);
    let end = screen(&app, 60, 16);
    insta::assert_snapshot!("warnings_detail_end_60x16", end);
    assert!(end.contains("sign of failing memory."), "{end}");
    assert!(
        !end.contains("4 uncorrected ECC errors"),
        "scrolled:\n{end}"
    );
}

#[test]
fn g_highlights_the_gpu_and_selects_its_first_process() {
    let mut app = sized(warned_app(), 120, 40);
    key(&mut app, KeyCode::Char('w'));
    key(&mut app, KeyCode::Char('g'));
    let buffer = render(&app, 120, 40);
    let s = text(&buffer);
    let gpu_row = s
        .lines()
        .position(|l| l.starts_with("  3 ") && l.contains("H100"))
        .expect("GPU 3's line") as u16;
    assert_eq!(buffer[(2, gpu_row)].bg, Color::Blue, "{s}");
    let last = s.lines().last().unwrap();
    assert!(last.contains("GPU 3: its first process"), "{last}");
}

/// Throttle warnings that come and go every few seconds moved the process table (and what a
/// click lands on) at each change. The panel keeps the rows of warnings that went for 30 s.
#[test]
fn the_table_stays_put_while_warnings_come_and_go() {
    let with = |count: u32, t: u32| {
        let mut snapshot = busy_snapshot(2, 3, t);
        snapshot.unix_seconds = 1_800_000_000.0 + f64::from(t);
        snapshot.warnings = (0..count)
            .map(|index| {
                warning(
                    "throttle",
                    Severity::Info,
                    Subject::Gpu { index },
                    "power cap",
                )
            })
            .collect();
        Arc::new(snapshot)
    };
    let header_row = |app: &App| {
        let s = screen(app, 100, 40);
        s.lines()
            .position(|l| l.contains("PID USER"))
            .expect("the table")
    };
    let mut app = app_with((*with(2, 0)).clone());
    let two = header_row(&app);
    app.on_snapshot(with(0, 5));
    assert_eq!(header_row(&app), two, "5 s after the warnings went");
    let s = screen(&app, 100, 40);
    let title = panel(&s)[0];
    assert!(
        title.contains("WARNINGS (0): the ones shown have cleared"),
        "{s}"
    );
    assert!(!title.contains("walk the list"), "nothing to walk:\n{s}");
    app.on_snapshot(with(1, 20));
    assert_eq!(header_row(&app), two, "one came back");
    app.on_snapshot(with(0, 60));
    assert!(header_row(&app) < two, "held past 30 s");
}
