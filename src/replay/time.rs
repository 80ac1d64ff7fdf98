//! Times typed by the user (`--from`, `--to`, and `g` in the replay), read against the
//! recording's span.

/// Reads `text` as a moment of a recording that runs from `start` to `end` (Unix seconds):
/// - `02:15` or `02:15:30`: that UTC clock time, the first one at or after the start;
/// - `+10m`, `+90s`: that long after the start; `-5m`: that long before the end;
/// - an RFC 3339 time such as `2026-01-30T02:15:00Z`.
pub(crate) fn parse_time(text: &str, start: f64, end: f64) -> Result<f64, String> {
    let text = text.trim();
    let shown = crate::format::escape(text);
    let offset = |rest: &str| -> Result<f64, String> {
        let rest = rest.trim();
        if let Ok(seconds) = rest.parse::<f64>() {
            if seconds.is_finite() && seconds >= 0.0 {
                return Ok(seconds);
            }
        }
        humantime::parse_duration(rest)
            .map(|d| d.as_secs_f64())
            .map_err(|_| format!("'{shown}' is not a time: {HOW}"))
    };
    if let Some(rest) = text.strip_prefix('+') {
        return Ok(start + offset(rest)?);
    }
    if let Some(rest) = text.strip_prefix('-') {
        return Ok(end - offset(rest)?);
    }
    if let Some(seconds) = clock_seconds(text) {
        let day = (start / 86_400.0).floor() * 86_400.0;
        let mut at = day + seconds;
        if at + 1.0 < start {
            at += 86_400.0;
        }
        return Ok(at);
    }
    humantime::parse_rfc3339_weak(text)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64())
        .ok_or_else(|| format!("'{shown}' is not a time: {HOW}"))
}

/// How times may be written, for error sentences and prompts.
pub(crate) const HOW: &str =
    "write HH:MM or HH:MM:SS (UTC), +10m from the start, -5m from the end, or an RFC 3339 time";

/// Seconds since midnight of "HH:MM" or "HH:MM:SS".
fn clock_seconds(text: &str) -> Option<f64> {
    let parts: Vec<&str> = text.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty() || p.len() > 2) {
        return None;
    }
    let numbers: Vec<u32> = parts
        .iter()
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (h, m, s) = (numbers[0], numbers[1], numbers.get(2).copied().unwrap_or(0));
    (h < 24 && m < 60 && s < 60).then(|| f64::from(h * 3600 + m * 60 + s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_times_offsets_and_rfc3339_are_read_against_the_span() {
        // 2026-01-30T23:50:00Z to the next day 00:20:00Z.
        let start = 1_769_817_000.0;
        let end = start + 1800.0;
        assert_eq!(parse_time("+10m", start, end), Ok(start + 600.0));
        assert_eq!(parse_time("+90", start, end), Ok(start + 90.0));
        assert_eq!(parse_time("-5m", start, end), Ok(end - 300.0));
        assert_eq!(parse_time("23:55", start, end), Ok(start + 300.0));
        assert_eq!(parse_time("00:10:30", start, end), Ok(start + 1230.0));
        assert_eq!(
            parse_time("2026-01-31T00:00:00Z", start, end),
            Ok(start + 600.0)
        );
        for bad in ["soon", "25:00", "+x", "12:3:", "\u{1b}[2J"] {
            let error = parse_time(bad, start, end).unwrap_err();
            assert!(
                error.contains("is not a time") && !error.contains('\u{1b}'),
                "{error}"
            );
        }
    }
}
