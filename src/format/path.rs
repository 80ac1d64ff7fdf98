//! Paths in torchtop's sentences. Another user's environment names the directories root reads
//! agents in, so a path can carry any text: `/tmp/x: all agents read; GPU 0 healthy` passed for
//! torchtop's own words on root's status line, escaped but unmarked. A path of plain characters
//! is written as it is; any other is quoted, escaped and cut, so that where it ends is plain.

use std::borrow::Cow;
use std::path::Path;

/// The most characters of an unusual path kept, before escaping (an escaped character takes
/// up to 10), quotes aside.
const MAX_SHOWN: usize = 96;

/// `path` for a sentence: as it is when it holds only characters that paths are usually made of,
/// else in double quotes, cut at [`MAX_SHOWN`] characters with "…", and escaped for the terminal
/// (cut first, so that no escape is cut in half: a lone `\` before the "…").
pub(crate) fn named(path: &Path) -> Cow<'_, str> {
    let text = path.to_string_lossy();
    let plain = text.chars().count() <= MAX_SHOWN
        && matches!(text, Cow::Borrowed(_))
        && text.chars().all(is_plain);
    if plain {
        return text;
    }
    let mut chars = text.chars();
    let cut: String = chars.by_ref().take(MAX_SHOWN).collect();
    // The backslash first: a name holding `\"` or `\e` must not read as an escape of ours.
    let escaped = super::escape(&cut.replace('\\', "\\\\")).replace('"', "\\\"");
    let mut out = String::with_capacity(escaped.len() + 8);
    out.push('"');
    out.push_str(&escaped);
    if chars.next().is_some() {
        out.push('…');
    }
    out.push('"');
    Cow::Owned(out)
}

fn is_plain(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | '@' | '=' | ',' | '~' | '%')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn plain_paths_are_written_as_they_are() {
        for plain in [
            "/tmp/torchtop-1000",
            "/run/user/1000/torchtop",
            "/home/ann/.t@x",
        ] {
            assert_eq!(named(Path::new(plain)), plain);
        }
    }

    #[test]
    fn any_other_is_quoted_escaped_and_cut() {
        let forged = Path::new("/tmp/x: all agents read; GPU 0 \"healthy\"");
        assert_eq!(
            named(forged),
            r#""/tmp/x: all agents read; GPU 0 \"healthy\"""#
        );
        assert_eq!(
            named(Path::new("/tmp/t\x1b]2;PWNED")),
            r#""/tmp/t\e]2;PWNED""#
        );
        assert_eq!(named(Path::new(r"/tmp/a\e")), r#""/tmp/a\\e""#);
        let bytes = Path::new(OsStr::from_bytes(b"/tmp/\xff"));
        assert_eq!(named(bytes), "\"/tmp/\u{fffd}\"");
        let long = format!("/tmp/{}", "a".repeat(200));
        let shown = named(Path::new(&long));
        assert_eq!(shown.chars().count(), MAX_SHOWN + 3, "{shown}");
        assert!(shown.ends_with("a…\""), "{shown}");
        // A cut never halves an escape: before, this ended in a lone `\` before the "…".
        let quotes = format!("/tmp/{}{}", "a".repeat(90), "\"".repeat(20));
        let shown = named(Path::new(&quotes));
        assert!(shown.ends_with("\\\"…\""), "{shown}");
        let escapes = format!("/tmp/{}{}", "a".repeat(90), "\x1b".repeat(20));
        let shown = named(Path::new(&escapes));
        assert!(shown.ends_with("\\e…\""), "{shown}");
    }
}
