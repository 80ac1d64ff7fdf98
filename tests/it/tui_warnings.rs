//! The warnings view end to end: the built torchtop in a pseudo-terminal against the fake NVML,
//! raising 15 warnings from GPU figures alone (tests/fixtures/many_warnings.toml). A person opens
//! `w`, walks to the last warning, reads its remedy and goes back, and the process they had
//! selected is still selected.

use crate::common;

use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use common::PATIENCE;

const COLS: u16 = 120;
const ROWS: u16 = 40;
/// The view's body at 120x40: columns 13..107 (inside a border 12 columns in from each side).
const BODY: std::ops::Range<usize> = 13..107;
/// The row of the view's top border at 120x40 (5 rows down from the top of the screen).
const TOP: usize = 5;
/// What the selection's background is in the default theme (blue).
const SELECTED: vt100::Color = vt100::Color::Idx(4);
const DOWN: &[u8] = b"\x1b[B";

/// The number in the panel's title " WARNINGS (N", if it is on screen.
fn warning_count(screen: &str) -> Option<usize> {
    let rest = screen.split(" WARNINGS (").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The text inside the view's border on each row between its top and bottom lines.
fn view_body(screen: &str) -> Option<Vec<String>> {
    let lines: Vec<&str> = screen.lines().collect();
    let top = lines.iter().position(|l| l.contains("┌ WARNINGS ("))?;
    let bottom = lines
        .iter()
        .position(|l| l.contains('└') && l.contains(" j k: select "))?;
    Some(
        lines[top + 1..bottom]
            .iter()
            .map(|l| {
                let chars: Vec<char> = l.chars().collect();
                let end = BODY.end.min(chars.len());
                let start = BODY.start.min(end);
                chars[start..end]
                    .iter()
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect(),
    )
}

/// The highlighted row of the view's list, trimmed, when the list is open.
fn selected_entry(session: &PtySession) -> Option<String> {
    let screen = session.screen();
    view_body(&screen)?;
    session
        .rows_with_background(20, SELECTED)
        .into_iter()
        .map(|(_, text)| {
            let chars: Vec<char> = text.chars().collect();
            chars[BODY.start..BODY.end.min(chars.len())]
                .iter()
                .collect::<String>()
                .trim()
                .to_string()
        })
        .next()
}

/// The highlighted process row's text (the process table's selection), when one is drawn.
fn selected_process_row(session: &PtySession) -> Option<String> {
    session
        .rows_with_background(3, SELECTED)
        .into_iter()
        .map(|(_, text)| text)
        .find(|text| text.trim_start().starts_with(|c: char| c.is_ascii_digit()))
}

/// "WARN throttle on GPU 4" from the list line " WARN throttle       GPU 4      message".
fn detail_title(entry: &str) -> String {
    let words: Vec<&str> = entry.split_whitespace().collect();
    let subject = if words[2] == "host" {
        words[2].to_string()
    } else {
        format!("{} {}", words[2], words[3])
    };
    format!("{} {} on {}", words[0], words[1], subject)
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one user's walk through the view, read top to bottom"
)]
fn walk_to_the_last_warning_read_its_remedy_and_the_process_selection_stays() {
    let sleepers = Sleepers::spawn(5);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("many_warnings.toml", &pids);
    let env = scenario.env();
    let mut session =
        PtySession::spawn(&common::torchtop_binary(), &[], &env_refs(&env), COLS, ROWS);
    assert!(
        session.wait_for(PATIENCE, |s| warning_count(s).is_some_and(|n| n >= 9)),
        "nine warnings never came:\n{}",
        session.screen()
    );

    // Move the selection off the first row, so that a reset would show as well as a move.
    let pid_of = |row: &str| {
        row.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        wait(&session, |s| selected_process_row(s).is_some()),
        "no process row is selected:\n{}",
        session.screen()
    );
    let first = pid_of(&selected_process_row(&session).unwrap());
    session.send(b"j");
    let moved = |s: &PtySession| selected_process_row(s).is_some_and(|r| pid_of(&r) != first);
    assert!(
        wait(&session, moved),
        "j did not move the selection:\n{}",
        session.screen()
    );
    let chosen = pid_of(&selected_process_row(&session).unwrap());

    session.send(b"w");
    let entries = |s: &PtySession| view_body(&s.screen()).map(|b| b.len());
    assert!(
        wait(&session, |s| entries(s).is_some()),
        "w opened no list:\n{}",
        session.screen()
    );
    // Tab, Down and k move inside the list too; then j walks on past the end, where the
    // selection stays. Warnings may still arrive, so the last line is read again each time.
    session.send(b"\t");
    session.send(DOWN);
    session.send(b"k");
    session.send("j".repeat(60).as_bytes());
    let last_line = |s: &PtySession| {
        let body = view_body(&s.screen())?;
        let listed: Vec<String> = body.into_iter().filter(|l| !l.trim().is_empty()).collect();
        (listed.len() >= 9).then(|| listed.last().unwrap().trim().to_string())
    };
    let at_last = |s: &PtySession| last_line(s).is_some_and(|l| selected_entry(s) == Some(l));
    assert!(
        wait(&session, at_last),
        "never reached the last of nine or more lines:\n{}",
        session.screen()
    );
    let last = selected_entry(&session).unwrap();

    session.send(b"\r");
    let title = detail_title(&last);
    let remedy_shown = |s: &str| {
        let lines: Vec<&str> = s.lines().collect();
        s.contains(&format!("┌ {title} "))
            && lines
                .iter()
                .position(|l| l.contains("│Remedy"))
                .is_some_and(|i| {
                    lines
                        .get(i + 1)
                        .is_some_and(|next| next.chars().skip(BODY.start).any(char::is_alphabetic))
                })
    };
    assert!(
        session.wait_for(PATIENCE, remedy_shown),
        "the remedy of {title:?} never showed:\n{}",
        session.screen()
    );

    // Esc goes back one level at a time and never quits from inside the view.
    session.send(b"\x1b");
    assert!(
        wait(&session, |s| entries(s).is_some()),
        "Esc did not go back to the list:\n{}",
        session.screen()
    );

    // The mouse: a click on an empty row of the view, over the process table, does nothing
    // behind it; a click selects the first line and the wheel moves down to the second.
    let body = view_body(&session.screen()).unwrap();
    let empty = body
        .iter()
        .rposition(|l| l.trim().is_empty())
        .expect("an empty row");
    session.send(&left_click(BODY.start + 5, TOP + 1 + empty));
    session.send(&left_click(BODY.start + 5, TOP + 1));
    let line = |s: &PtySession, i: usize| {
        let body = view_body(&s.screen()).unwrap_or_default();
        body.get(i).map(|l| l.trim().to_string())
    };
    let first_line = line(&session, 0).unwrap();
    let second_line = line(&session, 1).unwrap();
    assert!(
        wait(&session, |s| selected_entry(s) == Some(first_line.clone())),
        "a click did not select the first line:\n{}",
        session.screen()
    );
    session.send(&mouse(65, BODY.start + 5, TOP + 1));
    assert!(
        wait(&session, |s| selected_entry(s) == Some(second_line.clone())),
        "the wheel did not move down:\n{}",
        session.screen()
    );

    session.send(b"\x1b");
    assert!(
        session.wait_for(PATIENCE, |s| !s.contains(" j k: select ")
            && s.contains("PID")),
        "the second Esc did not close the list:\n{}",
        session.screen()
    );
    assert!(
        matches!(session.child.try_wait(), Ok(None)),
        "Esc in the view quit torchtop"
    );
    let row = selected_process_row(&session);
    assert!(
        row.as_deref().is_some_and(|r| pid_of(r) == chosen),
        "the process selection moved to {row:?}:\n{}",
        session.screen()
    );

    session.send(b"q");
    let status = session.wait_exit(PATIENCE).expect("q quits");
    assert!(status.success());
}

/// An SGR mouse report (xterm's 1006 mode, which torchtop turns on) of button code `button` at
/// the 0-based cell (`column`, `row`).
fn mouse(button: u8, column: usize, row: usize) -> Vec<u8> {
    format!("\x1b[<{button};{};{}M", column + 1, row + 1).into_bytes()
}

fn left_click(column: usize, row: usize) -> Vec<u8> {
    let mut bytes = mouse(0, column, row);
    bytes.extend(format!("\x1b[<0;{};{}m", column + 1, row + 1).into_bytes());
    bytes
}

fn wait(session: &PtySession, condition: impl Fn(&PtySession) -> bool) -> bool {
    let deadline = std::time::Instant::now() + PATIENCE;
    while std::time::Instant::now() < deadline {
        if condition(session) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    condition(session)
}
