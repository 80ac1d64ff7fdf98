//! Process actions end to end: the built torchtop in a pseudo-terminal, the fake NVML naming
//! real child processes as GPU processes, and keys typed as a person would type them.

use crate::common;

use std::os::unix::process::ExitStatusExt;

use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use common::{assert_no_fatal_signal_on_its_way, PATIENCE};

/// The F8 key as xterm sends it.
const F8: &[u8] = b"\x1b[19~";

/// Two GPU processes on one GPU: a victim and a bystander, both real children.
fn start(extra_env: &[(&str, &str)]) -> (Sleepers, ScenarioFile, PtySession) {
    start_sized(extra_env, 120)
}

/// [`start`] on a terminal `columns` wide.
fn start_sized(extra_env: &[(&str, &str)], columns: u16) -> (Sleepers, ScenarioFile, PtySession) {
    let children = Sleepers::named(&["torchtop-e2e-victim", "torchtop-e2e-bystander"]);
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &[children.pid(0), children.pid(1)]);
    let mut env = scenario.env();
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let session = PtySession::spawn(
        &common::torchtop_binary(),
        &[],
        &env_refs(&env),
        columns,
        40,
    );
    let both = [children.pid(0).to_string(), children.pid(1).to_string()];
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("victim")
            && both.iter().all(|pid| s.contains(pid.as_str()))),
        "the children never appeared as GPU processes:\n{}",
        session.screen()
    );
    (children, scenario, session)
}

fn wait_for_text(session: &PtySession, text: &str) {
    assert!(
        session.wait_for(PATIENCE, |s| s.contains(text)),
        "{text:?} never appeared:\n{}",
        session.screen()
    );
}

/// Types `/`, the text, and Enter: the filter is kept and its first match selected.
fn filter_to(session: &mut PtySession, text: &str) {
    session.send(b"/");
    wait_for_text(session, "filter: ");
    session.send(text.as_bytes());
    wait_for_text(session, &format!("filter: {text}_"));
    session.send(b"\r");
    wait_for_text(session, &format!("filter \"{text}\""));
}

#[test]
fn filter_to_the_child_press_k_then_y_and_it_is_killed() {
    let (mut children, _scenario, mut session) = start(&[]);
    let victim = children.pid(0);
    filter_to(&mut session, "victim");
    let screen = session.screen();
    assert!(
        !screen.contains("bystander"),
        "the filter hides the other process:\n{screen}"
    );

    session.send(b"K");
    wait_for_text(&session, "Send SIGKILL to this process?");
    let screen = session.screen();
    let listed = screen
        .lines()
        .find(|l| l.contains(&victim.to_string()) && l.contains("torchtop-e2e-victim 600"))
        .unwrap_or_else(|| panic!("the dialog does not name the victim:\n{screen}"));
    assert!(listed.contains(&whoami()), "{listed}");
    assert_no_fatal_signal_on_its_way(victim);

    session.send(b"y");
    let status = children
        .wait_exit(0, PATIENCE)
        .unwrap_or_else(|| panic!("the child still runs:\n{}", session.screen()));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    wait_for_text(
        &session,
        &format!("sent SIGKILL to {victim} (torchtop-e2e-victim"),
    );
    assert_no_fatal_signal_on_its_way(children.pid(1));

    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).is_some(), "q quits");
}

#[test]
fn readonly_refuses_every_action_key_with_a_sentence() {
    let (children, _scenario, mut session) = start(&[("TORCHTOP_READONLY", "1")]);
    // What the child inherited from the test run (`nice cargo test` makes it 10).
    let nice_before = nice_of(children.pid(0));
    filter_to(&mut session, "victim");
    session.send(b"K");
    wait_for_text(
        &session,
        "read-only mode: signals, renice and agent commands are turned off",
    );
    session.send(b"T");
    session.send(F8);
    // Keys are handled in order: once `t` shows the tree, T and F8 have been handled.
    session.send(b"t");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("(tree,")),
        "the keys after T and F8 did not reach the process list (a dialog open?):\n{}",
        session.screen()
    );
    assert!(!session.screen().contains("Send SIG"), "no dialog opens");
    assert_no_fatal_signal_on_its_way(children.pid(0));
    assert_eq!(nice_of(children.pid(0)), nice_before);
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).is_some());
}

#[test]
fn n_cancels_the_dialog_and_f8_renices_the_selected_child() {
    let (children, _scenario, mut session) = start(&[]);
    let bystander = children.pid(1);
    filter_to(&mut session, "bystander");
    session.send(b"T");
    wait_for_text(&session, "Send SIGTERM to this process?");
    session.send(b"n");
    wait_for_text(&session, "SIGTERM not sent");
    assert_no_fatal_signal_on_its_way(bystander);

    let before = nice_of(bystander);
    session.send(F8);
    wait_for_text(
        &session,
        &format!(
            "the nice value of {bystander} (torchtop-e2e-bystander 600) is now {}",
            before + 1
        ),
    );
    assert_eq!(nice_of(bystander), before + 1, "read back from /proc");
    assert_no_fatal_signal_on_its_way(children.pid(0));
    assert_no_fatal_signal_on_its_way(bystander);
}

#[test]
fn the_tree_view_shows_the_child_under_its_parents() {
    let (children, _scenario, mut session) = start(&[]);
    // The victim, selected on the second row (GPU-MEM ascending), is the first row of the
    // tree: the tree keeps the selection on it. It kept the row number before, and `K` then
    // named the bystander (or a parent, once the tree has them).
    session.send(b"r");
    wait_for_text(&session, "GPU-MEM▲");
    filter_to(&mut session, "victim");
    session.send(b"\x1b");
    assert!(
        session.wait_for(PATIENCE, |s| !s.contains("filter \"victim\"")),
        "Esc did not clear the filter:\n{}",
        session.screen()
    );
    session.send(b"t");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("(tree,")
            && s.lines().any(|l| l.contains("─ torchtop-e2e-victim 600"))),
        "no tree with the child nested under its parent:\n{}",
        session.screen()
    );
    session.send(b"K");
    wait_for_text(&session, "Send SIGKILL to this process?");
    // The dialog's row of a target starts at its left border; the tree's rows do not.
    let named = |pid: u32| format!("│ {pid:>7}  ");
    let screen = session.screen();
    assert!(
        screen.contains(&named(children.pid(0))) && !screen.contains(&named(children.pid(1))),
        "the dialog does not name the process selected before `t`:\n{screen}"
    );
    session.send(b"n");
    wait_for_text(&session, "SIGKILL not sent");
    session.send(b"t");
    assert!(
        session.wait_for(PATIENCE, |s| !s.contains("(tree,")),
        "t leaves the tree:\n{}",
        session.screen()
    );
}

/// Field 19 of /proc/PID/stat.
fn nice_of(pid: u32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    let after_comm = &stat[stat.rfind(')').expect("comm") + 1..];
    after_comm
        .split_whitespace()
        .nth(16)
        .expect("nice field")
        .parse()
        .expect("a number")
}

/// The name of the user this test runs as, as torchtop's USER column shows it.
fn whoami() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() }.to_string();
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.get(2) == Some(&uid.as_str())).then(|| fields[0].to_string())
        })
        .unwrap_or(uid)
}

#[test]
fn arrows_and_ctrl_a_e_scroll_the_command_sideways() {
    // 60 columns leave COMMAND 25 cells: "torchtop-e2e-bystander 600" is one longer.
    let (_children, _scenario, mut session) = start_sized(&[], 60);
    wait_for_text(&session, " torchtop-e2e-victim 600");
    session.send(b"\x1b[C"); // →
    wait_for_text(&session, " orchtop-e2e-victim 600");
    session.send(b"\x01"); // Ctrl-A
    wait_for_text(&session, " torchtop-e2e-victim 600");
    session.send(b"\x05"); // Ctrl-E
    wait_for_text(&session, " orchtop-e2e-bystander 600");
    session.send(b"\x1b[D"); // ←
                             // Cut at the right edge: the mark takes the last cell.
    wait_for_text(&session, " torchtop-e2e-bystander 6…");
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).is_some(), "q quits");
}

/// The F9 key as xterm sends it.
const F9: &[u8] = b"\x1b[20~";

#[test]
fn f9_then_19_stops_the_child_and_its_row_shows_state_t() {
    let (children, _scenario, mut session) = start(&[]);
    let victim = children.pid(0);
    filter_to(&mut session, "victim");
    session.send(F9);
    wait_for_text(&session, "Send a signal");
    // Typed as in htop: the signal's number, then Enter.
    session.send(b"19");
    session.send(b"\r");
    wait_for_text(&session, "Send SIGSTOP to this process?");
    session.send(b"y");
    let victim_text = victim.to_string();
    assert!(
        session.wait_for(PATIENCE, |s| s.lines().any(|l| l.contains(&victim_text)
            && l.contains(" T ")
            && l.contains("torchtop-e2e-victim"))),
        "the stopped child's row never showed state T:\n{}",
        session.screen()
    );
    // SAFETY: kill with a pid this test started and SIGCONT has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGCONT) }, 0);
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).is_some(), "q quits");
}

#[test]
fn u_shows_one_users_processes_then_everyones() {
    let (_children, _scenario, mut session) = start(&[]);
    let me = whoami();
    session.send(b"u");
    wait_for_text(&session, "Show the processes of");
    wait_for_text(&session, &format!("  {me} "));
    session.send(b"\x1b[B"); // ↓ to the first user
    session.send(b"\r");
    wait_for_text(&session, &format!(" user {me} "));
    wait_for_text(&session, "(2 of 2)");
    session.send(b"u");
    wait_for_text(&session, "Show the processes of");
    session.send(b"\x1b[H"); // Home: all users
    session.send(b"\r");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("(2 rows)")
            && !s.contains(" user ")),
        "all users again:\n{}",
        session.screen()
    );
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).is_some(), "q quits");
}
