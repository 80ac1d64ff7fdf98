//! Clock times in the one zone a screen shows: the local zone (`TZ`, or the system's), or UTC
//! under `--utc`. The live header and a replay both take their zone from here, so a replay's
//! header, time bar, notes and the times typed after `g` or `--from` agree.

use jiff::tz::TimeZone;
use jiff::Timestamp;

/// The zone every clock time on screen is shown in: UTC under `--utc`, else the local zone.
pub(crate) fn zone(utc: bool) -> TimeZone {
    if utc {
        TimeZone::UTC
    } else {
        TimeZone::system()
    }
}

/// The whole second a Unix time falls in; times out of jiff's range are clamped to it.
fn instant(t: f64) -> Timestamp {
    let seconds = if t.is_finite() { t.floor() } else { 0.0 };
    let seconds = seconds.clamp(
        Timestamp::MIN.as_second() as f64,
        Timestamp::MAX.as_second() as f64,
    );
    Timestamp::from_second(seconds as i64).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// "HH:MM:SS" of a Unix time in `zone`.
pub(crate) fn clock(t: f64, zone: &TimeZone) -> String {
    let zoned = instant(t).to_zoned(zone.clone());
    format!(
        "{:02}:{:02}:{:02}",
        zoned.hour(),
        zoned.minute(),
        zoned.second()
    )
}

/// The zone's name at that moment, as the header writes it: "UTC", "CET", "EST".
pub(crate) fn zone_name(t: f64, zone: &TimeZone) -> String {
    let info = zone.to_offset_info(instant(t));
    crate::format::escape(info.abbreviation()).into_owned()
}

/// "HH:MM:SS UTC": a clock time with its zone, for a sentence that stands alone.
pub(crate) fn clock_named(t: f64, zone: &TimeZone) -> String {
    format!("{} {}", clock(t, zone), zone_name(t, zone))
}

/// The RFC 3339 time of a Unix time in `zone`, whole seconds, with its offset:
/// "2026-12-02T12:58:06-05:00" ("Z" in UTC).
pub(crate) fn rfc3339(t: f64, zone: &TimeZone) -> String {
    let zoned = instant(t).to_zoned(zone.clone());
    if zoned.offset().seconds() == 0 && zone == &TimeZone::UTC {
        return zoned.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    }
    zoned.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_reads_in_the_zone_asked_for() {
        // 2026-12-02T17:58:06.6Z: the second it falls in, not the next.
        let t = 1_796_234_286.6;
        let new_york = TimeZone::get("America/New_York").unwrap();
        assert_eq!(clock(t, &TimeZone::UTC), "17:58:06");
        assert_eq!(clock_named(t, &new_york), "12:58:06 EST");
        assert_eq!(rfc3339(t, &TimeZone::UTC), "2026-12-02T17:58:06Z");
        assert_eq!(rfc3339(t, &new_york), "2026-12-02T12:58:06-05:00");
    }
}
