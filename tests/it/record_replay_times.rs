//! `torchtop replay`'s times, on the bundled demo: clock times before the first frame, the
//! zone the screen and the typed times share, RFC 3339 offsets, the frames a range picks, and
//! the summary's times and lengths agreeing with the JSON lines. Expected results are worked
//! out from the demo's own `--json` lines, not written in.

use std::process::{Command, Output, Stdio};

use crate::common;
use common::pty::PtySession;
use common::{output_within_patience, PATIENCE};

fn demo(args: &[&str], tz: &str) -> Output {
    output_within_patience(
        Command::new(common::torchtop_binary())
            .args(args)
            .env("TZ", tz)
            .stdin(Stdio::null()),
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The demo's JSON lines for `range` (`--from`, `--to`...), with their stderr.
fn lines(range: &[&str], tz: &str) -> (Vec<String>, String) {
    let mut args = vec!["replay", "--demo", "--json"];
    args.extend_from_slice(range);
    let out = demo(&args, tz);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{range:?}: {stderr}");
    (
        text(&out.stdout).lines().map(str::to_string).collect(),
        stderr,
    )
}

fn unix_seconds(line: &str) -> f64 {
    serde_json::from_str::<serde_json::Value>(line).unwrap()["unix_seconds"]
        .as_f64()
        .unwrap()
}

/// "HH:MM:SS" of a Unix time in UTC, shifted by `offset` hours.
fn clock(t: f64, offset: i64) -> String {
    let s = (t.floor() as i64 + offset * 3600).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[test]
fn a_clock_time_before_the_first_frame_is_that_day_not_the_next() {
    let (all, _) = lines(&[], "UTC");
    let first = unix_seconds(&all[0]);
    let minute = &clock(first, 0)[..5];
    let before = clock(first - 600.0, 0);
    // --from a minute that begins before the first frame: from the start.
    assert_eq!(lines(&["--from", minute], "UTC").0, all, "--from {minute}");
    let (summary, _) = {
        let out = demo(&["replay", "--demo", "--summary", "--from", minute], "UTC");
        (text(&out.stdout), text(&out.stderr))
    };
    assert!(
        summary.contains(&format!("{} frames", all.len())),
        "--summary --from {minute}:\n{summary}"
    );
    // --to before the first frame: nothing, with the usual sentence.
    let (none, stderr) = lines(&["--to", &before], "UTC");
    assert!(none.is_empty(), "--to {before} gave {} lines", none.len());
    assert!(stderr.contains("no frame in that range"), "{stderr}");
    // From before the start to the second after the first frame's: the frames within it.
    let second = clock(first + 1.0, 0);
    let end = first.floor() + 2.0;
    let expected: Vec<String> = all
        .iter()
        .filter(|l| unix_seconds(l) < end)
        .cloned()
        .collect();
    assert!(!expected.is_empty());
    let (got, _) = lines(&["--from", &before, "--to", &second], "UTC");
    assert_eq!(got, expected, "--from {before} --to {second}");
}

#[test]
fn a_range_picks_the_frames_within_it_and_a_point_its_nearest_frame() {
    let (all, _) = lines(&[], "UTC");
    let times: Vec<f64> = all.iter().map(|l| unix_seconds(l)).collect();
    assert_eq!(lines(&["--to", "+0s"], "UTC").0, vec![all[0].clone()]);
    let point = times[0] + 2.0;
    let nearest = (0..times.len())
        .min_by(|&a, &b| {
            (times[a] - point)
                .abs()
                .total_cmp(&(times[b] - point).abs())
        })
        .unwrap();
    let (got, _) = lines(&["--from", "+2s", "--to", "+2s"], "UTC");
    assert_eq!(got, vec![all[nearest].clone()], "--from +2s --to +2s");
}

#[test]
fn typed_times_are_read_in_the_zone_shown_and_offsets_are_accepted() {
    let (all, _) = lines(&[], "UTC");
    let first = unix_seconds(&all[0]);
    // New York is 5 hours behind UTC in the demo's November.
    let minute = &clock(first, -5)[..5];
    assert_eq!(
        lines(&["--from", minute], "America/New_York").0,
        all,
        "--from {minute} in New York"
    );
    let out = demo(
        &[
            "--utc",
            "replay",
            "--demo",
            "--json",
            "--from",
            &clock(first, 0)[..5],
        ],
        "Europe/Berlin",
    );
    assert_eq!(text(&out.stdout).lines().count(), all.len(), "--utc");
    // RFC 3339 with an offset: three seconds after the first frame's second, written in +01:00.
    let plus_one = jiff::tz::TimeZone::fixed(jiff::tz::offset(1));
    let from = jiff::Timestamp::from_second(first.floor() as i64 + 3)
        .unwrap()
        .to_zoned(plus_one)
        .strftime("%Y-%m-%dT%H:%M:%S%:z")
        .to_string();
    assert!(from.ends_with("+01:00"), "{from}");
    let expected: Vec<String> = all
        .iter()
        .filter(|l| unix_seconds(l) >= first.floor() + 3.0)
        .cloned()
        .collect();
    let (got, stderr) = lines(&["--from", &from], "UTC");
    assert_eq!(got, expected, "--from {from}: {stderr}");
}

#[test]
fn the_replay_screen_shows_one_zone_and_g_reads_it() {
    let mut session = PtySession::spawn(
        &common::torchtop_binary(),
        &["replay", "--demo", "--speed", "0.25"],
        &[("TZ", "America/New_York")],
        180,
        50,
    );
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("REPLAY demo")
            && s.contains(" EST")),
        "no demo in EST:\n{}",
        session.screen()
    );
    session.send(b" ");
    assert!(session.wait_for(PATIENCE, |s| s.contains(" || ")));
    let screen = session.screen();
    let bar = screen.lines().last().unwrap_or("");
    // The demo's hours in New York (EST in December, when it is made), from its first frame:
    // a demo made again keeps this test.
    let (frames, _) = lines(&["--to", "+1s"], "UTC");
    let start = unix_seconds(&frames[0]);
    let (hour_utc, hour_ny) = (&clock(start, 0)[..4], &clock(start, -5)[..4]);
    assert!(
        bar.contains(&format!(" {hour_ny}")) && bar.contains(" EST"),
        "{bar}"
    );
    assert!(!screen.contains(&format!(" {hour_utc}")), "{screen}");
    let two_minutes_in = clock(start + 120.0, -5);
    session.send(format!("g {}\r", &two_minutes_in[..5]).as_bytes());
    // The time bar (the last line) stands there; the status line may name an event of that
    // frame instead of "at HH:MM:SS".
    let there = format!(" {}:0", &two_minutes_in[..5]);
    assert!(
        session.wait_for(PATIENCE, |s| (s.lines().last())
            .is_some_and(|bar| bar.starts_with(" || ") && bar.contains(&there))),
        "g {} in New York:\n{}",
        &two_minutes_in[..5],
        session.screen()
    );
    session.send(b"g +10m\r");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("after the recording ends")),
        "g +10m:\n{}",
        session.screen()
    );
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).is_some(), "q did not quit");
    let mut session = PtySession::spawn(
        &common::torchtop_binary(),
        &["--utc", "replay", "--demo"],
        &[("TZ", "Europe/Berlin")],
        180,
        50,
    );
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("REPLAY demo")
            && s.contains(" UTC")),
        "no demo in UTC:\n{}",
        session.screen()
    );
    assert!(!session.screen().contains("CET"), "{}", session.screen());
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).is_some(), "q did not quit");
}

#[test]
fn a_replay_without_a_terminal_names_its_own_outputs() {
    let out = demo(&["replay", "--demo"], "UTC");
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--summary") && !stderr.contains("--once"),
        "{stderr}"
    );
}

#[test]
fn the_summary_says_when_processes_went_as_the_frames_do_and_rounds_lengths() {
    let (all, _) = lines(&[], "UTC");
    let docs: Vec<serde_json::Value> = all
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let pids = |doc: &serde_json::Value| -> Vec<u64> {
        doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pid"].as_u64().unwrap())
            .collect()
    };
    let out = demo(&["replay", "--demo", "--summary"], "UTC");
    let summary = text(&out.stdout);
    let mut checked = 0;
    for line in summary
        .lines()
        .filter(|l| l.trim_start().starts_with("went "))
    {
        let pid: u64 = line
            .split("pid ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let last = docs.iter().rposition(|d| pids(d).contains(&pid)).unwrap();
        let went = docs[last + 1]["unix_seconds"].as_f64().unwrap();
        assert!(
            line.contains(&format!("went {} ", clock(went, 0))),
            "pid {pid} was first missing at {}: {line}",
            clock(went, 0)
        );
        checked += 1;
    }
    assert!(checked > 0, "no process went:\n{summary}");
    let seconds = (unix_seconds(&all[all.len() - 1]) - unix_seconds(&all[0])).round() as u64;
    let length = format!("({}:{:02}, ", seconds / 60, seconds % 60);
    assert!(summary.contains(&length), "{length} missing:\n{summary}");
}

/// A review: `--from +2s --to +1s` answered "no frame in that range", and `--summary` of a
/// file with no whole frame said "no frame in that range; it holds no frame" and exited 0.
/// Another: a reversed range and `--from 25:00` exited 1, where usage errors exit 2.
#[test]
fn a_reversed_range_and_a_file_without_a_frame_are_refused() {
    let usage_errors: [(&[&str], &str); 3] = [
        (
            &["--from", "+2s", "--to", "+1s"],
            "--to names a time before --from",
        ),
        (&["--from", "25:00"], "'25:00' is not a time"),
        (&["--to", "soon"], "'soon' is not a time"),
    ];
    for (range, sentence) in usage_errors {
        let mut args = vec!["replay", "--demo", "--summary"];
        args.extend_from_slice(range);
        let out = demo(&args, "UTC");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{range:?}: {stderr}");
        assert!(stderr.contains(sentence), "{range:?}: {stderr}");
    }
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.ttrec");
    let demo_file =
        std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo.ttrec"))
            .unwrap();
    std::fs::write(&cut, &demo_file[..1024]).unwrap();
    for mode in ["--summary", "--json"] {
        let out = demo(&["replay", cut.to_str().unwrap(), mode], "UTC");
        assert_eq!(out.status.code(), Some(1), "{mode}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("holds no whole frame"),
            "{mode}: {}",
            text(&out.stderr)
        );
    }
}
