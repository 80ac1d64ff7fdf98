//! Text from a snapshot file (file names, function names, settings) made safe to print on a
//! terminal. The rules are those of the monitor's `ui::format::escape` (on the `term` branch):
//! when both meet, this function should become a call to that one.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Control characters (C0, DEL, C1) and the Unicode controls that reorder text are written out
/// as visible escapes (`\e`, `\n`, `\xNN`, `\u{NNNN}`), so no escape sequence from a crafted
/// pickle reaches the terminal.
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

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_sent() {
        assert_eq!(escape("forward"), "forward");
        assert_eq!(escape("a\x1b]52;c;x\x07b"), "a\\e]52;c;x\\x07b");
        assert_eq!(escape("two\nlines"), "two\\nlines");
        assert_eq!(escape("\u{202e}txt"), "\\u{202e}txt");
    }
}
