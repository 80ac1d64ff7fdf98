//! Turning figures into the short strings the panels show. A missing figure is always "N/A".
//! Also [`escape`], the one function every piece of outside text goes through before it reaches
//! a terminal: the TUI, `--once` text, the status line and error messages.

pub(crate) mod clock;
pub(crate) mod json;
pub(crate) mod path;
pub(crate) mod wrap;

use std::borrow::Cow;
use std::fmt::Write as _;

pub(crate) const NA: &str = "N/A";

const KIB: f64 = 1024.0;
const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];

/// Bytes in binary units with one decimal: "512B", "12.3MiB", "12.3GiB".
pub(crate) fn bytes(value: u64) -> String {
    shown::bytes(value).to_string()
}

/// Bytes with a one-letter unit, for narrow columns: "12.3G", "512M", "0B".
pub(crate) fn bytes_short(value: u64) -> String {
    shown::bytes_short(value).to_string()
}

/// The figure in the largest unit that keeps it under 1000, so that it never reads "1000.0MiB"
/// where "0.98GiB" is meant (and never takes more than 3 digits before the point).
fn scale(value: u64) -> (f64, usize) {
    let mut scaled = value as f64;
    let mut unit = 0;
    while scaled >= 1000.0 && unit + 1 < UNITS.len() {
        scaled /= KIB;
        unit += 1;
    }
    (scaled, unit)
}

/// A byte figure that may be a mean or a difference: [`bytes`] of its size, with its sign.
pub(crate) fn bytes_f64(value: f64) -> String {
    if !value.is_finite() {
        return NA.to_string();
    }
    let text = bytes(value.abs().round() as u64);
    if value < 0.0 && text != "0B" {
        format!("-{text}")
    } else {
        text
    }
}

pub(crate) fn opt_bytes(value: Option<u64>) -> String {
    shown::opt_bytes(value).to_string()
}

/// "used/total" in short units, each side N/A on its own.
/// "12.3G/80.0G"; one "N/A" when both are missing, not "N/A/N/A".
pub(crate) fn used_of_total(used: Option<u64>, total: Option<u64>) -> String {
    shown::used_of_total(used, total).to_string()
}

pub(crate) fn percent(value: Option<u32>) -> String {
    shown::percent(value).to_string()
}

pub(crate) fn percent_f(value: Option<f64>) -> String {
    shown::percent_f(value).to_string()
}

pub(crate) fn watts(value: Option<f64>) -> String {
    shown::watts(value).to_string()
}

pub(crate) fn celsius(value: Option<u32>) -> String {
    shown::celsius(value).to_string()
}

pub(crate) fn count(value: Option<u64>) -> String {
    value.map_or_else(|| NA.to_string(), |v| v.to_string())
}

/// The figures above as `Display` values, for panels that write them straight into text they
/// reuse, without a `String` each: the functions above are these, collected.
pub(crate) mod shown {
    use std::fmt::{self, Display, Formatter};

    use super::{scale, NA, UNITS};

    /// A value shown by a closure: what each function here returns.
    pub(crate) struct Shown<F>(F);

    impl<F: Fn(&mut Formatter<'_>) -> fmt::Result> Display for Shown<F> {
        fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
            (self.0)(f)
        }
    }

    fn shown<F: Fn(&mut Formatter<'_>) -> fmt::Result>(f: F) -> Shown<F> {
        Shown(f)
    }

    /// `value` shown by `some`, or "N/A".
    fn or_na<T: Copy>(
        value: Option<T>,
        some: impl Fn(&mut Formatter<'_>, T) -> fmt::Result,
    ) -> impl Display {
        shown(move |f| match value {
            Some(v) => some(f, v),
            None => f.write_str(NA),
        })
    }

    /// See [`super::bytes`].
    pub(crate) fn bytes(value: u64) -> impl Display {
        shown(move |f| {
            let (scaled, unit) = scale(value);
            match unit {
                0 => write!(f, "{value}B"),
                // 1000 to 1023 of a unit reads as "0.98" of the next one.
                _ if scaled < 1.0 => write!(f, "{scaled:.2}{}", UNITS[unit]),
                _ => write!(f, "{scaled:.1}{}", UNITS[unit]),
            }
        })
    }

    /// See [`super::bytes_short`].
    pub(crate) fn bytes_short(value: u64) -> impl Display {
        shown(move |f| {
            let (scaled, unit) = scale(value);
            let letter = &UNITS[unit][..1];
            match unit {
                0 => write!(f, "{value}B"),
                _ if scaled >= 100.0 => write!(f, "{scaled:.0}{letter}"),
                _ => write!(f, "{scaled:.1}{letter}"),
            }
        })
    }

    pub(crate) fn opt_bytes(value: Option<u64>) -> impl Display {
        or_na(value, |f, v| write!(f, "{}", bytes(v)))
    }

    pub(crate) fn opt_bytes_short(value: Option<u64>) -> impl Display {
        or_na(value, |f, v| write!(f, "{}", bytes_short(v)))
    }

    /// See [`super::used_of_total`].
    pub(crate) fn used_of_total(used: Option<u64>, total: Option<u64>) -> impl Display {
        shown(move |f| {
            if used.is_none() && total.is_none() {
                return f.write_str(NA);
            }
            write!(f, "{}/{}", opt_bytes_short(used), opt_bytes_short(total))
        })
    }

    pub(crate) fn percent(value: Option<u32>) -> impl Display {
        or_na(value, |f, v| write!(f, "{v}%"))
    }

    pub(crate) fn percent_f(value: Option<f64>) -> impl Display {
        or_na(value, |f, v| write!(f, "{v:.1}%"))
    }

    pub(crate) fn watts(value: Option<f64>) -> impl Display {
        or_na(value, |f, v| write!(f, "{v:.0}W"))
    }

    /// "draw/limitW"; "N/A" stands in for either side that is missing.
    pub(crate) fn power_of_limit(draw: Option<f64>, limit: Option<f64>) -> impl Display {
        shown(move |f| match (draw, limit) {
            (Some(d), Some(l)) => write!(f, "{d:.0}/{l:.0}W"),
            (None, None) => f.write_str(NA),
            (draw, limit) => write!(f, "{}/{}", watts(draw), watts(limit)),
        })
    }

    pub(crate) fn celsius(value: Option<u32>) -> impl Display {
        or_na(value, |f, v| write!(f, "{v}C"))
    }

    pub(crate) fn mhz(value: Option<u32>) -> impl Display {
        or_na(value, |f, v| write!(f, "{v}MHz"))
    }

    /// A PCIe throughput given in KiB/s, as a byte rate.
    pub(crate) fn kib_rate(value: Option<u32>) -> impl Display {
        or_na(value, |f, v| write!(f, "{}/s", bytes(u64::from(v) * 1024)))
    }

    pub(crate) fn count(value: Option<u64>) -> impl Display {
        or_na(value, |f, v| write!(f, "{v}"))
    }

    /// A span in words: see [`super::span`].
    pub(crate) fn span(seconds: f64) -> impl Display {
        shown(move |f| {
            // Tenths under 10 s where they show: a stats age of 0.4 s is not "0 s".
            if seconds < 9.95 && (seconds * 10.0).round() % 10.0 != 0.0 {
                write!(f, "{seconds:.1} s")
            } else if seconds < 120.0 {
                write!(f, "{seconds:.0} s")
            } else if seconds < 7200.0 {
                write!(f, "{:.0} min", seconds / 60.0)
            } else {
                write!(f, "{:.1} h", seconds / 3600.0)
            }
        })
    }

    /// A training step's time, as the PyTorch panel and the jobs view write it: "0.512s".
    pub(crate) fn step_time(seconds: f64) -> impl Display {
        shown(move |f| write!(f, "{seconds:.3}s"))
    }

    /// A running time: see [`super::duration`].
    pub(crate) fn duration(seconds: f64) -> impl Display {
        shown(move |f| {
            let total = if seconds.is_finite() && seconds > 0.0 {
                seconds as u64
            } else {
                0
            };
            let (days, hours) = (total / 86_400, total / 3600 % 24);
            let (minutes, secs) = (total / 60 % 60, total % 60);
            if days > 0 {
                write!(f, "{days}d{hours:02}h")
            } else if hours > 0 {
                write!(f, "{hours}:{minutes:02}:{secs:02}")
            } else {
                write!(f, "{minutes}:{secs:02}")
            }
        })
    }
}

/// Outside text, escaped for a terminal, or "N/A".
pub(crate) fn text(value: Option<&str>) -> String {
    escape(value.unwrap_or(NA)).into_owned()
}

/// Text that other people control (command lines, user names, host names, paths, what agents
/// and the driver say), made safe to print on a terminal.
///
/// Control characters (C0, DEL, C1) and the Unicode controls that reorder text (bidi overrides
/// and isolates) are written out as visible escapes: `\e`, `\n`, `\r`, `\t`, `\xNN`, `\u{NNNN}`.
/// So no escape sequence reaches the terminal (OSC 52 writes the clipboard, OSC 0 the title,
/// CSI 2J clears the screen) and no newline can forge a line. Text that needs nothing is
/// borrowed as is.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x1b' => out.push_str("\\e"),
            c if needs_escape(c) && c.is_ascii() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A message of several lines whose line breaks are torchtop's own (an error that quotes a
/// tool's output, say): each line goes through [`escape`], and the breaks are kept.
pub fn escape_lines(text: &str) -> String {
    text.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

/// Whether [`escape`] writes `c` out as an escape: a control character, or one that reorders
/// text.
pub(crate) fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// A running time: "0:42", "12:34", "1:02:03", then "2d03h" from one day on.
pub(crate) fn duration(seconds: f64) -> String {
    shown::duration(seconds).to_string()
}

/// A span of seconds in words, for sentences: "45 s", "2 min", "1.5 h". [`duration`] is the
/// clock-like form for columns.
pub(crate) fn span(seconds: f64) -> String {
    shown::span(seconds).to_string()
}

/// A percentage rounded to a whole number, for sentences: "98%".
pub(crate) fn percent_whole(value: f64) -> String {
    format!("{value:.0}%")
}

pub(crate) fn opt_duration(value: Option<f64>) -> String {
    value.map_or_else(|| NA.to_string(), duration)
}

/// The sentence for GPU indices a user chose (`--gpus`) that a machine of `count` GPUs does not
/// have; `None` when it has them all.
pub(crate) fn missing_gpus(chosen: &[u32], count: usize) -> Option<String> {
    let missing: Vec<String> = (chosen.iter())
        .filter(|&&i| usize::try_from(i).map_or(true, |i| i >= count))
        .map(u32::to_string)
        .collect();
    (!missing.is_empty()).then(|| {
        let have = match count {
            0 => "no GPU".to_string(),
            1 => "one GPU, 0".to_string(),
            n => format!("{n} GPUs, 0 to {}", n - 1),
        };
        format!(
            "--gpus names GPU {} that this machine does not have (it has {have})",
            missing.join(", ")
        )
    })
}

/// The longest start of `text` of at most `bytes` bytes that ends on a character: the bound
/// put on text from another process (a label, a log line, an environment value).
pub(crate) fn within_bytes(text: &str, bytes: usize) -> &str {
    if text.len() <= bytes {
        return text;
    }
    let mut end = bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Cuts `text` to at most `width` characters, marking the cut with "…".
pub(crate) fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let kept: String = text.chars().take(width - 1).collect();
    format!("{kept}…")
}

/// `text` cut to at most `cells` terminal cells, "…" marking a cut.
pub(crate) fn cut_to_cells(text: &str, cells: usize) -> String {
    use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};
    if text.width() <= cells {
        return text.to_string();
    }
    let mut kept = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > cells {
            break;
        }
        used += w;
        kept.push(c);
    }
    kept.push('…');
    kept
}

/// `text` cut or padded with spaces to exactly `width` characters, left-aligned.
pub(crate) fn pad_left_aligned(text: &str, width: usize) -> String {
    let mut out = String::new();
    push_left_aligned(&mut out, text, width);
    out
}

/// `text` cut or padded with spaces to exactly `width` characters, right-aligned.
pub(crate) fn pad_right_aligned(text: &str, width: usize) -> String {
    let mut out = String::new();
    let len = text.chars().count();
    if len <= width {
        push_spaces(&mut out, width - len);
        out.push_str(text);
    } else {
        // Cut to exactly the width: aligned either way.
        push_left_aligned(&mut out, text, width);
    }
    out
}
/// [`pad_left_aligned`] of `text`, written at the end of `out` instead of returned.
pub(crate) fn push_left_aligned(out: &mut String, text: &str, width: usize) {
    let len = text.chars().count();
    if len <= width {
        out.push_str(text);
        push_spaces(out, width - len);
    } else if width > 0 {
        let cut = text
            .char_indices()
            .nth(width - 1)
            .map_or(text.len(), |(i, _)| i);
        out.push_str(&text[..cut]);
        out.push('…');
    }
}

/// What follows `start` in `out`, cut or padded in place as [`pad_left_aligned`] would.
pub(crate) fn fit_left_aligned(out: &mut String, start: usize, width: usize) {
    let len = out[start..].chars().count();
    if len <= width {
        push_spaces(out, width - len);
    } else if width == 0 {
        out.truncate(start);
    } else {
        let cut = out[start..]
            .char_indices()
            .nth(width - 1)
            .map_or(out.len(), |(i, _)| start + i);
        out.truncate(cut);
        out.push('…');
    }
}

/// `count` spaces at the end of `out`.
pub(crate) fn push_spaces(out: &mut String, mut count: usize) {
    const SPACES: &str = "                                ";
    out.reserve(count);
    while count > 0 {
        let n = count.min(SPACES.len());
        out.push_str(&SPACES[..n]);
        count -= n;
    }
}

/// The formatted `args` at the end of `out`, right-aligned in `width` characters as
/// `{:>width$}` pads a string (never cut).
pub(crate) fn push_right_aligned(out: &mut String, width: usize, args: std::fmt::Arguments) {
    let start = out.len();
    let _ = out.write_fmt(args);
    pad_front(out, start, width);
}

/// Spaces inserted at `start` (a char boundary of `out`) until what follows it is at least
/// `width` characters: the right alignment of text already written.
pub(crate) fn pad_front(out: &mut String, start: usize, width: usize) {
    const SPACES: &str = "                                ";
    let mut missing = width.saturating_sub(out[start..].chars().count());
    while missing > 0 {
        let n = missing.min(SPACES.len());
        out.insert_str(start, &SPACES[..n]);
        missing -= n;
    }
}

/// Spaces appended until what follows `start` in `out` is at least `width` characters: the
/// left alignment of text already written (`{:<width$}`, never cut).
pub(crate) fn pad_back(out: &mut String, start: usize, width: usize) {
    let missing = width.saturating_sub(out[start..].chars().count());
    push_spaces(out, missing);
}

/// Packs pieces (each a few spans) into lines of at most `width` columns, two spaces apart;
/// lines after the first start with `indent` spaces. A piece wider than a line gets its own.
pub(crate) fn pack(
    pieces: Vec<Vec<ratatui::text::Span<'static>>>,
    width: usize,
    indent: usize,
) -> Vec<ratatui::text::Line<'static>> {
    use ratatui::text::{Line, Span};
    let mut lines = Vec::new();
    let mut spans: Vec<Span<'static>> = vec![Span::raw(" ".repeat(indent))];
    let mut used = indent;
    let mut empty = true;
    for piece in pieces {
        let len: usize = piece.iter().map(|s| s.content.chars().count()).sum();
        let gap = if empty { 0 } else { 2 };
        if !empty && used + gap + len > width {
            lines.push(Line::from(std::mem::take(&mut spans)));
            spans.push(Span::raw(" ".repeat(indent)));
            used = indent;
            empty = true;
        }
        if !empty {
            spans.push(Span::raw("  "));
            used += 2;
        }
        spans.extend(piece);
        used += len;
        empty = false;
    }
    if !empty {
        lines.push(Line::from(spans));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_bytes_ends_on_a_character() {
        assert_eq!(within_bytes("abc", 3), "abc");
        // 'é' is two bytes: a cut inside it keeps the text before it.
        assert_eq!(within_bytes("aéb", 2), "a");
        assert_eq!(within_bytes("aéb", 3), "aé");
        assert_eq!(within_bytes("é", 0), "");
    }

    #[test]
    fn bytes_use_binary_units() {
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(1536), "1.5KiB");
        assert_eq!(bytes(13_207_024_435), "12.3GiB");
        assert_eq!(bytes_short(80 * 1024 * 1024 * 1024), "80.0G");
        assert_eq!(bytes_short(300 * 1024 * 1024), "300M");
        assert_eq!(bytes_short(0), "0B");
        assert_eq!(bytes(1000 * 1024 * 1024), "0.98GiB");
        assert_eq!(bytes_f64(20.1 * 1024.0 * 1024.0 * 1024.0), "20.1GiB");
        assert_eq!(bytes_f64(-512.0 * 1024.0 * 1024.0), "-512.0MiB");
        assert_eq!(bytes_f64(f64::NAN), "N/A");
        assert_eq!(span(45.0), "45 s");
        assert_eq!(
            span(0.4),
            "0.4 s",
            "a review: a stats age of 0.4 s read 0 s"
        );
        assert_eq!(span(2.0), "2 s");
        assert_eq!(span(9.97), "10 s");
        assert_eq!(span(300.0), "5 min");
        assert_eq!(bytes(1010 * 1024), "0.99MiB");
        assert_eq!(bytes(999 * 1024 * 1024), "999.0MiB");
    }

    #[test]
    fn missing_values_read_na_not_zero() {
        assert_eq!(opt_bytes(None), "N/A");
        assert_eq!(percent(None), "N/A");
        assert_eq!(watts(None), "N/A");
        assert_eq!(
            shown::power_of_limit(None, Some(700.0)).to_string(),
            "N/A/700W"
        );
        assert_eq!(used_of_total(None, None), "N/A");
        assert_eq!(used_of_total(None, Some(1 << 30)), "N/A/1.0G");
        assert_eq!(shown::power_of_limit(None, None).to_string(), "N/A");
        assert_eq!(opt_duration(None), "N/A");
    }

    #[test]
    fn durations_grow_units() {
        assert_eq!(duration(42.0), "0:42");
        assert_eq!(duration(754.0), "12:34");
        assert_eq!(duration(3723.0), "1:02:03");
        assert_eq!(duration(2.0 * 86_400.0 + 3.0 * 3600.0 + 59.0), "2d03h");
        assert_eq!(duration(f64::NAN), "0:00");
        assert_eq!(duration(-5.0), "0:00");
    }

    #[test]
    fn packing_wraps_whole_pieces() {
        use ratatui::text::Span;
        let piece = |t: &str| vec![Span::raw(t.to_string())];
        let lines = pack(vec![piece("aaaa"), piece("bbbb"), piece("cc")], 12, 2);
        let text: Vec<String> = lines.iter().map(std::string::ToString::to_string).collect();
        assert_eq!(text, vec!["  aaaa  bbbb", "  cc"]);
        assert!(pack(Vec::new(), 10, 2).is_empty());
    }

    #[test]
    fn escape_sequences_and_newlines_become_visible_text() {
        let hostile = "py\x1b]52;c;aGk=\x07\x1b]0;owned\x07\x1b[2J\nroot  FORGED\r\t\x7f\u{9b}31m";
        let shown = escape(hostile);
        assert_eq!(
            shown,
            "py\\e]52;c;aGk=\\x07\\e]0;owned\\x07\\e[2J\\nroot  FORGED\\r\\t\\x7f\\u{009b}31m"
        );
        assert!(!shown.chars().any(char::is_control));
        assert_eq!(escape("abc\u{202e}gpj.exe"), "abc\\u{202e}gpj.exe");
        assert!(matches!(
            escape("python train.py --lr 3e-4 ü"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            escape_lines("gdb said:\nNo \x1b[2J symbol"),
            "gdb said:\nNo \\e[2J symbol"
        );
        assert_eq!(text(Some("a\nb")), "a\\nb");
        assert_eq!(text(None), "N/A");
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("python train.py", 8), "python …");
        assert_eq!(truncate("short", 8), "short");
        assert_eq!(pad_right_aligned("7", 3), "  7");
        assert_eq!(pad_left_aligned("abcdef", 4), "abc…");
        for text in ["", "abc", "abcdef", "数据加载器", "ab…", &"x".repeat(40)] {
            for width in [0, 1, 2, 3, 4, 5, 6, 7, 33, 70] {
                let (mut pushed, mut fitted) = ("x".to_string(), format!("x{text}"));
                push_left_aligned(&mut pushed, text, width);
                fit_left_aligned(&mut fitted, 1, width);
                let padded = format!("x{}", pad_left_aligned(text, width));
                assert_eq!(
                    (&pushed, &fitted),
                    (&padded, &padded),
                    "{text:?} in {width}"
                );
            }
        }
    }
}
