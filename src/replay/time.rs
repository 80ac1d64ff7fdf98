//! Times typed by the user (`--from`, `--to`, and `g` in the replay), read against the
//! recording's span in the zone the screen shows, and the frames such a time picks.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::Timestamp;

use crate::record::reader::FrameInfo;

/// A time the user typed: the moment `at` (Unix seconds), covering `width` seconds after it.
/// A time written to the second (`03:15`, `03:15:30`, RFC 3339 without a fraction) covers that
/// second; one counted from the start or the end is an instant (width 0), since the frames do
/// not fall on whole seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Moment {
    pub(crate) at: f64,
    pub(crate) width: f64,
}

impl Moment {
    fn instant(at: f64) -> Moment {
        Moment { at, width: 0.0 }
    }

    fn second(at: f64) -> Moment {
        Moment { at, width: 1.0 }
    }

    /// Whether a frame at `t` is not after this moment (an instant includes itself).
    pub(crate) fn reaches(&self, t: f64) -> bool {
        t <= self.at || t < self.at + self.width
    }

    /// How far `t` lies outside this moment; 0 inside it.
    fn distance(&self, t: f64) -> f64 {
        if t < self.at {
            self.at - t
        } else if self.reaches(t) {
            0.0
        } else {
            t - (self.at + self.width)
        }
    }

    /// How far this moment lies outside `[start, end]`; 0 when they meet.
    fn distance_to_span(&self, start: f64, end: f64) -> f64 {
        if self.at > end {
            self.at - end
        } else if !self.reaches(start) {
            start - (self.at + self.width)
        } else {
            0.0
        }
    }
}

/// Reads `text` as a moment of a recording that runs from `start` to `end` (Unix seconds),
/// clock times in `zone`:
/// - `02:15` or `02:15:30`: that time of day on the day that puts it within the recording, or
///   nearest to it;
/// - `+10m`, `+90s`: that long after the start; `-5m`: that long before the end;
/// - an RFC 3339 time such as `2026-01-30T02:15:00Z` or `2026-01-30T03:15:00+01:00`; without an
///   offset (`2026-01-30T02:15:00`) it is read in `zone`.
pub(crate) fn parse_time(
    text: &str,
    start: f64,
    end: f64,
    zone: &TimeZone,
) -> Result<Moment, String> {
    let text = text.trim();
    let not_a_time = || format!("'{}' is not a time: {HOW}", crate::format::escape(text));
    if let Some(rest) = text.strip_prefix('+') {
        return offset(rest)
            .map(|s| Moment::instant(start + s))
            .ok_or_else(not_a_time);
    }
    if let Some(rest) = text.strip_prefix('-') {
        return offset(rest)
            .map(|s| Moment::instant(end - s))
            .ok_or_else(not_a_time);
    }
    if let Some((h, m, s)) = clock_fields(text) {
        return clock_moment(h, m, s, start, end, zone).ok_or_else(not_a_time);
    }
    rfc3339(text, zone).ok_or_else(not_a_time)
}

/// How times may be written, for error sentences (`--from`, `--to`).
pub(crate) const HOW: &str = "write HH:MM or HH:MM:SS (in the zone shown), +10m from the start, \
                              -5m from the end, or an RFC 3339 time";
/// [`HOW`] short enough for the `g` prompt on an 80-column time bar, with the keys after it;
/// the help (`?`) says what `+10m` and `-5m` count from.
pub(crate) const HOW_SHORT: &str = "HH:MM[:SS], +10m, -5m or RFC 3339";

/// Seconds of `+90`, `+90s`, `+10m`, `-1h 5m`.
fn offset(rest: &str) -> Option<f64> {
    let rest = rest.trim();
    if let Ok(seconds) = rest.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then_some(seconds);
    }
    humantime::parse_duration(rest)
        .ok()
        .map(|d| d.as_secs_f64())
}

/// Hours, minutes and seconds of "HH:MM" or "HH:MM:SS".
fn clock_fields(text: &str) -> Option<(i8, i8, i8)> {
    let parts: Vec<&str> = text.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty() || p.len() > 2) {
        return None;
    }
    let numbers: Vec<i8> = parts
        .iter()
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (h, m, s) = (numbers[0], numbers[1], numbers.get(2).copied().unwrap_or(0));
    ((0..24).contains(&h) && (0..60).contains(&m) && (0..60).contains(&s)).then_some((h, m, s))
}

/// The second `h:m:s` in `zone` on the day, from the day before the recording's first to the
/// day after, that meets the recording or lies nearest to it (the earliest of equals). A
/// recording runs for days at most, so a clock time that falls within it on a later day is
/// found by walking its days.
fn clock_moment(h: i8, m: i8, s: i8, start: f64, end: f64, zone: &TimeZone) -> Option<Moment> {
    let first = day_of(start, zone)?.yesterday().ok()?;
    let last = day_of(end, zone)?.tomorrow().ok()?;
    let mut best: Option<(f64, Moment)> = None;
    let mut day = first;
    while day <= last {
        if let Ok(zoned) = day.at(h, m, s, 0).to_zoned(zone.clone()) {
            let moment = Moment::second(zoned.timestamp().as_second() as f64);
            let distance = moment.distance_to_span(start, end);
            if best.is_none_or(|(d, _)| distance < d) {
                best = Some((distance, moment));
            }
        }
        day = day.tomorrow().ok()?;
    }
    best.map(|(_, moment)| moment)
}

fn day_of(t: f64, zone: &TimeZone) -> Option<Date> {
    let instant = Timestamp::from_second(t.floor() as i64).ok()?;
    Some(instant.to_zoned(zone.clone()).date())
}

/// An RFC 3339 time with an offset (`Z`, `+01:00`), or without one in `zone`; a time written to
/// the second covers that second.
fn rfc3339(text: &str, zone: &TimeZone) -> Option<Moment> {
    let instant = match text.parse::<Timestamp>() {
        Ok(instant) => instant,
        Err(_) => text
            .parse::<DateTime>()
            .ok()?
            .to_zoned(zone.clone())
            .ok()?
            .timestamp(),
    };
    let at = instant.as_second() as f64;
    if instant.subsec_nanosecond() == 0 {
        Some(Moment::second(at))
    } else {
        Some(Moment::instant(
            at + f64::from(instant.subsec_nanosecond()) / 1e9,
        ))
    }
}

/// The frames `--from` and `--to` pick: those from `from` to the end of `to`. When both name
/// the same moment, a point in time, and no frame falls in it, the frame nearest to it, if it
/// lies within the recording.
pub(crate) fn frames_between(
    frames: &[FrameInfo],
    from: Option<Moment>,
    to: Option<Moment>,
) -> std::ops::Range<usize> {
    let first = from.map_or(0, |m| frames.partition_point(|f| f.time < m.at));
    let end = to.map_or(frames.len(), |m| {
        frames.partition_point(|f| m.reaches(f.time))
    });
    if first < end {
        return first..end;
    }
    let (Some(from), Some(to), Some(a), Some(b)) = (from, to, frames.first(), frames.last()) else {
        return first..first;
    };
    if from == to && (a.time..=b.time).contains(&from.at) {
        let i = nearest(frames, from);
        return i..i + 1;
    }
    first..first
}

/// Whether frames `span` seconds apart, recorded every `interval`, have a gap between them:
/// more than three intervals, and more than one interval and two seconds (a late frame is no
/// gap).
pub(crate) fn is_gap(span: f64, interval: f64) -> bool {
    span > (3.0 * interval).max(interval + 2.0)
}

/// The gap in the recording `moment` falls in, as the times of the frames on either side of
/// it; `None` when a frame lies within the moment, or the frames around it are no gap apart.
/// The nearest frame stands for such a moment, and the reader must be told how far it is.
pub(crate) fn gap_around(
    frames: &[FrameInfo],
    moment: Moment,
    interval: f64,
) -> Option<(f64, f64)> {
    let after = frames.partition_point(|f| f.time < moment.at);
    let (before, next) = (frames.get(after.checked_sub(1)?)?, frames.get(after)?);
    if next.time == moment.at || next.time < moment.at + moment.width {
        return None;
    }
    is_gap(next.time - before.time, interval).then_some((before.time, next.time))
}

/// The frame `g` goes to: the first within the moment, else the one nearest to it (the first
/// frame for a moment before the recording, the last for one after it).
pub(crate) fn nearest(frames: &[FrameInfo], moment: Moment) -> usize {
    let after = frames.partition_point(|f| f.time < moment.at);
    let candidates = [after.checked_sub(1), Some(after)];
    candidates
        .into_iter()
        .flatten()
        .filter(|&i| i < frames.len())
        .min_by(|&a, &b| {
            let da = moment.distance(frames[a].time);
            let db = moment.distance(frames[b].time);
            da.total_cmp(&db).then(a.cmp(&b))
        })
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "time_tests.rs"]
mod tests;
