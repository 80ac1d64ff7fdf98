//! The TUI in a pseudo-terminal against the fake NVML: what a person in tmux would see.

use crate::common;

use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use common::PATIENCE;

fn spawn(scenario: &ScenarioFile, extra_env: &[(&str, &str)], cols: u16, rows: u16) -> PtySession {
    let mut env = scenario.env();
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    PtySession::spawn(&common::torchtop_binary(), &[], &env_refs(&env), cols, rows)
}

fn line_with<'a>(screen: &'a str, needle: &str) -> Option<&'a str> {
    screen.lines().find(|l| l.contains(needle))
}

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

#[test]
fn shows_gpus_history_and_processes_and_quits_on_q() {
    let sleepers = Sleepers::spawn(2);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("four_gpus_20_procs.toml", &pids);
    let mut session = spawn(&scenario, &[], 200, 50);
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("H100")
            && s.contains(&pids[0].to_string())),
        "no GPUs or processes:\n{}",
        session.screen()
    );
    // After a few samples the history row of GPU 0 holds several different sparkline levels.
    let history_moves = |s: &str| {
        s.lines()
            .skip_while(|l| !l.starts_with("HIST"))
            .nth(1)
            .is_some_and(|row| {
                let mut levels: Vec<char> = row.chars().filter(|c| SPARK.contains(c)).collect();
                levels.sort_unstable();
                levels.dedup();
                levels.len() >= 3
            })
    };
    assert!(
        session.wait_for(PATIENCE, history_moves),
        "no moving sparkline:\n{}",
        session.screen()
    );
    session.send(b"q");
    let status = session.wait_exit(PATIENCE).expect("q quits");
    assert!(status.success());
}

/// The stuck GPU's calls block for an hour, far longer than any wait here: that torchtop quits
/// on q at all proves that quitting does not wait for the driver. How fast it quits is a figure
/// for a benchmark, not an assertion.
#[test]
fn a_hung_gpu_goes_stale_while_the_other_updates_and_q_still_quits() {
    let text = r#"
[[gpu]]
name = "Healthy GPU"
memory_total_mib = 81920
memory_used_mib = { fn = "ramp", from = 1000, to = 80000, duration_s = 20, repeat = true }
utilization_gpu = { fn = "ramp", from = 1, to = 99, duration_s = 10, repeat = true }

[[gpu]]
name = "Stuck GPU"
memory_total_mib = 81920
memory_used_mib = 2048
utilization_gpu = 50
hang = { after_s = 2, block_s = 3600 }
"#;
    let scenario = ScenarioFile::new(text);
    let mut session = spawn(&scenario, &[], 120, 40);
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("Stuck GPU")),
        "{}",
        session.screen()
    );
    let stale = |s: &str| line_with(s, "Stuck GPU").is_some_and(|l| l.contains("STALE"));
    assert!(
        session.wait_for(PATIENCE, stale),
        "never stale:\n{}",
        session.screen()
    );
    assert!(
        line_with(&session.screen(), "Healthy GPU").is_some_and(|l| l.contains("OK")),
        "{}",
        session.screen()
    );
    let healthy_before = line_with(&session.screen(), "Healthy GPU")
        .unwrap()
        .to_string();
    let changed = |s: &str| line_with(s, "Healthy GPU").is_some_and(|l| l != healthy_before);
    assert!(
        session.wait_for(PATIENCE, changed),
        "the healthy GPU stopped updating"
    );
    let unresponsive = |s: &str| line_with(s, "Stuck GPU").is_some_and(|l| l.contains("UNRESP"));
    assert!(
        session.wait_for(PATIENCE, unresponsive),
        "never unresponsive:\n{}",
        session.screen()
    );
    session.send(b"q");
    let status = session
        .wait_exit(PATIENCE)
        .expect("q quits while a driver call hangs for an hour");
    assert!(status.success());
}

#[test]
fn a_lost_gpu_is_shown_lost() {
    let text = r#"
[[gpu]]
name = "Healthy GPU"
memory_total_mib = 81920
memory_used_mib = 4096

[[gpu]]
name = "Fallen GPU"
memory_total_mib = 81920
memory_used_mib = 4096
lost_after_s = 1
"#;
    let scenario = ScenarioFile::new(text);
    let session = spawn(&scenario, &[], 120, 40);
    let lost = |s: &str| line_with(s, "Fallen GPU").is_some_and(|l| l.contains("LOST"));
    assert!(session.wait_for(PATIENCE, lost), "{}", session.screen());
    assert!(line_with(&session.screen(), "Healthy GPU").is_some_and(|l| l.contains("OK")));
}

/// The review's GPU 3: 70 W of a 700 W limit and memory rising, then lost. Its power history
/// keeps the lowest bar it had (70 W of 700 W), not full blocks scaled to its own max.
#[test]
fn a_lost_gpus_history_keeps_its_scale() {
    let text = r#"
[[gpu]]
name = "NVIDIA A100 80GB"
memory_total_mib = 81920
memory_used_mib = { fn = "ramp", from = 1000, to = 60000, duration_s = 5 }
power_w = 70
power_limit_w = 700
lost_after_s = 5
"#;
    let scenario = ScenarioFile::new(text);
    let session = spawn(&scenario, &[], 80, 24);
    let power = |s: &str| {
        let row = s.lines().find(|l| l.starts_with("     power"))?;
        Some(row.chars().skip(12).take(59).collect::<String>())
    };
    let settled = |s: &str| {
        let lost = line_with(s, "A100").is_some_and(|l| l.contains("LOST"));
        lost && power(s).is_some_and(|p| p.contains('·') && p.contains('▁'))
    };
    assert!(session.wait_for(PATIENCE, settled), "{}", session.screen());
    let screen = session.screen();
    let row = power(&screen).unwrap();
    assert!(!row.contains('█'), "rescaled once lost: {row}\n{screen}");
}

#[test]
fn eight_gpus_and_64_processes_fit_at_80x24_and_200x50_and_resize_live() {
    let sleepers = Sleepers::spawn(64);
    let scenario = ScenarioFile::from_fixture("eight_gpus.toml", &sleepers.pids());
    let session = spawn(&scenario, &[], 200, 50);
    let all_gpus = |s: &str| {
        (0..8).all(|i| {
            s.lines()
                .any(|l| l.trim_start().starts_with(&format!("{i} ")) && l.contains("H100"))
        })
    };
    assert!(
        session.wait_for(PATIENCE, all_gpus),
        "200x50:\n{}",
        session.screen()
    );
    session.resize(80, 24);
    // Every GPU on one line and at least 8 process rows; the balance bars and the host figures
    // give way, and a line says so.
    let pids: Vec<String> = sleepers.pids().iter().map(u32::to_string).collect();
    let process_rows = |s: &str| {
        s.lines()
            .filter(|l| pids.iter().any(|p| l.split_whitespace().next() == Some(p)))
            .count()
    };
    let fits = |s: &str| {
        all_gpus(s)
            && process_rows(s) >= 8
            && line_with(s, "hidden").is_some_and(|l| l.contains("balance, host"))
            && !s.contains("SM 1980MHz")
    };
    assert!(
        session.wait_for(PATIENCE, fits),
        "80x24:\n{}",
        session.screen()
    );
    let screen = session.screen();
    assert!(screen.lines().all(|l| l.chars().count() <= 80));
    session.resize(40, 10);
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("needs at least")),
        "small terminal:\n{}",
        session.screen()
    );
}

/// The help line is the last row ratatui writes, cells going row by row: once it shows, the
/// first frame has been read whole, colours included.
fn first_frame_drawn(s: &str) -> bool {
    s.contains("H100") && s.contains("F6 sort")
}

#[test]
fn no_color_draws_without_colours() {
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &[1, 1]);
    let coloured = spawn(&scenario, &[], 120, 40);
    assert!(
        coloured.wait_for(PATIENCE, first_frame_drawn),
        "{}",
        coloured.screen()
    );
    assert!(
        coloured.any_colour_on_screen(),
        "the default theme has colours"
    );
    let plain = spawn(&scenario, &[("NO_COLOR", "1")], 120, 40);
    assert!(
        plain.wait_for(PATIENCE, first_frame_drawn),
        "{}",
        plain.screen()
    );
    assert!(
        !plain.any_colour_on_screen(),
        "NO_COLOR must turn colours off"
    );
}
