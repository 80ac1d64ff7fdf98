//! Tests of reading typed times and of the frames they pick.

use super::*;

/// 2026-12-02T07:34:19.4Z, the first frame of the reviewer's recording.
const START: f64 = 1_796_196_859.4;

fn new_york() -> TimeZone {
    TimeZone::get("America/New_York").unwrap()
}

/// Frames 0.99 s apart from `START`, as a recorder at 1 s writes them.
fn frames(count: usize) -> Vec<FrameInfo> {
    (0..count)
        .map(|i| FrameInfo::at(START + i as f64 * 0.99))
        .collect()
}

fn at(text: &str, frames: &[FrameInfo], zone: &TimeZone) -> Moment {
    let (start, end) = (frames[0].time, frames[frames.len() - 1].time);
    parse_time(text, start, end, zone).unwrap()
}

#[test]
fn offsets_and_bad_times() {
    let (start, end) = (1_769_817_000.0, 1_769_818_800.0);
    let read = |t| parse_time(t, start, end, &TimeZone::UTC).map(|m| m.at);
    assert_eq!(read("+10m"), Ok(start + 600.0));
    assert_eq!(read("+90"), Ok(start + 90.0));
    assert_eq!(read("-5m"), Ok(end - 300.0));
    for bad in [
        "soon",
        "25:00",
        "+x",
        "12:3:",
        "\u{1b}[2J",
        "2026-13-01T00:00:00Z",
    ] {
        let error = parse_time(bad, start, end, &TimeZone::UTC).unwrap_err();
        assert!(
            error.contains("is not a time") && !error.contains('\u{1b}'),
            "{error}"
        );
    }
}

#[test]
fn a_clock_time_is_the_one_within_or_nearest_to_the_recording() {
    // 2026-01-30T23:50:00Z to the next day 00:20:00Z: both days are found.
    let (start, end) = (1_769_817_000.0, 1_769_818_800.0);
    let read = |t| parse_time(t, start, end, &TimeZone::UTC).map(|m| m.at);
    assert_eq!(read("23:55"), Ok(start + 300.0));
    assert_eq!(read("00:10:30"), Ok(start + 1230.0));
    // Before the start on the same day: that day, not the next.
    let f = frames(13);
    assert_eq!(at("07:30", &f, &TimeZone::UTC).at, START.floor() - 259.0);
    // The second the first frame falls in meets the recording.
    assert_eq!(at("07:34:19", &f, &TimeZone::UTC).at, START.floor());
    // 23:59 is nearer on the day before than on the recording's own day.
    assert!(at("23:59", &f, &TimeZone::UTC).at < START - 7.0 * 3600.0);
}

#[test]
fn clock_times_and_rfc3339_without_an_offset_are_read_in_the_zone_shown() {
    let f = frames(13);
    // 07:34:19Z is 02:34:19 in New York (EST, -5).
    assert_eq!(at("02:34:19", &f, &new_york()).at, START.floor());
    assert_eq!(at("2026-12-02T02:34:19", &f, &new_york()).at, START.floor());
    assert_eq!(
        at("2026-12-02T07:34:19", &f, &TimeZone::UTC).at,
        START.floor()
    );
}

#[test]
fn rfc3339_times_with_an_offset_are_read() {
    let f = frames(13);
    for text in [
        "2026-12-02T08:34:22+01:00",
        "2026-12-02T07:34:22Z",
        "2026-12-02T02:34:22-05:00",
    ] {
        let moment = at(text, &f, &TimeZone::UTC);
        assert_eq!(moment.at, START.floor() + 3.0, "{text}");
        assert_eq!(moment.width, 1.0, "{text}: a time to the second covers it");
    }
    assert_eq!(at("2026-12-02T07:34:22.5Z", &f, &TimeZone::UTC).width, 0.0);
}

fn picked(text_from: Option<&str>, text_to: Option<&str>, f: &[FrameInfo]) -> Vec<usize> {
    let read = |t: Option<&str>| t.map(|t| at(t, f, &TimeZone::UTC));
    frames_between(f, read(text_from), read(text_to)).collect()
}

#[test]
fn from_and_to_pick_the_frames_within_the_range() {
    let f = frames(13);
    let all: Vec<usize> = (0..13).collect();
    // A time before the start: --from means from the start, --to means nothing.
    assert_eq!(picked(Some("07:30"), None, &f), all);
    assert_eq!(picked(None, Some("07:30"), &f), Vec::<usize>::new());
    // 07:34:19 to 07:34:20 holds the frames at 19.4, 20.39 (and nothing of 21.38).
    assert_eq!(picked(Some("07:30"), Some("07:34:20"), &f), vec![0, 1]);
    // An instant includes the frame on it, and no later one.
    assert_eq!(picked(None, Some("+0s"), &f), vec![0]);
    // The same instant on both sides: the frame nearest to it (1.98 s, not 2.97 s).
    assert_eq!(picked(Some("+2s"), Some("+2s"), &f), vec![2]);
    // A point outside the recording picks nothing.
    assert_eq!(picked(Some("+1h"), Some("+1h"), &f), Vec::<usize>::new());
}

#[test]
fn g_goes_to_the_nearest_frame_and_stops_at_the_ends() {
    let f = frames(13);
    let go = |text: &str| nearest(&f, at(text, &f, &TimeZone::UTC));
    assert_eq!(go("+2s"), 2);
    assert_eq!(go("07:34:21"), 2, "the first frame within that second");
    assert_eq!(go("+10m"), 12, "past the end: the last frame");
    assert_eq!(go("07:30"), 0, "before the start: the first frame");
}

/// The admin review: `--from 10:23:00 --to 10:23:00` gave the frame of 10:22:47 across a
/// 27 s gap without a word, as did `g 10:23:00`.
#[test]
fn a_moment_in_a_gap_names_the_gap_and_one_with_a_frame_does_not() {
    let mut f = frames(10);
    let gap_end = f[9].time + 27.0;
    f.push(FrameInfo::at(gap_end));
    let before = f[9].time;
    let inside = Moment::second((before + 13.0).floor());
    assert_eq!(gap_around(&f, inside, 1.0), Some((before, gap_end)));
    assert_eq!(frames_between(&f, Some(inside), Some(inside)), 9..10);
    // A moment with a frame in it, or between two frames a second apart: no gap.
    assert_eq!(gap_around(&f, Moment::second(f[3].time.floor()), 1.0), None);
    assert_eq!(gap_around(&f, Moment::instant(f[3].time + 0.5), 1.0), None);
    // Outside the recording: the ends are said otherwise.
    assert_eq!(gap_around(&f, Moment::instant(START - 100.0), 1.0), None);
    assert_eq!(gap_around(&f, Moment::instant(gap_end + 100.0), 1.0), None);
    // At a 10 s interval, 27 s is under three intervals: a late frame, not a gap.
    assert_eq!(gap_around(&f, inside, 10.0), None);
}
