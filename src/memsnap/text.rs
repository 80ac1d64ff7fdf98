//! Text from a snapshot file (file names, function names, settings) made safe to print on a
//! terminal, through the monitor's one escaping function.

pub(crate) use crate::format::escape;

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
