//! JSON for stdout: serde_json's output with every character a terminal would act on written as
//! a `\uXXXX` escape. serde_json escapes only C0 controls; DEL, the C1 controls (xterm reads
//! U+009B as CSI) and the bidirectional overrides went out raw, so another user's command line
//! or environment in `--json` output could drive root's terminal or reorder its lines. The
//! escapes leave the JSON's values as they were.

use std::io;

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};

/// The value as one line of JSON.
pub(crate) fn line<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    to_string(value, Safe(CompactFormatter))
}

/// The value as indented JSON.
pub(crate) fn pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    to_string(value, Safe(PrettyFormatter::new()))
}

fn to_string<T: Serialize + ?Sized, F: Formatter>(
    value: &T,
    formatter: Safe<F>,
) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(256);
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut out, formatter,
    ))?;
    // serde_json writes only valid UTF-8, and the escapes are ASCII.
    Ok(String::from_utf8(out).unwrap_or_default())
}

/// A formatter that writes as `F` does, but escapes what [`super::needs_escape`] names.
struct Safe<F>(F);

impl<F: Formatter> Formatter for Safe<F> {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| super::needs_escape(*c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            // Every character needs_escape names is in the Basic Multilingual Plane.
            write!(writer, "\\u{:04x}", u32::from(c))?;
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }

    // The layout is the wrapped formatter's.
    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }
    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }
    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }
    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }
    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }
    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }
    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_escaped_and_the_value_is_kept() {
        let hostile = "a\u{9b}31m b\u{202e}c \u{7f} d\u{1b}]0;x\u{7} é 日本";
        for text in [line(hostile).unwrap(), pretty(&[hostile]).unwrap()] {
            let raw = |c: char| c != '\n' && super::super::needs_escape(c);
            assert!(!text.chars().any(raw), "{text:?}");
            assert!(
                text.contains("\\u009b") && text.contains("\\u202e"),
                "{text}"
            );
            assert!(text.contains("é 日本"), "{text}");
        }
        let back: String = serde_json::from_str(&line(hostile).unwrap()).unwrap();
        assert_eq!(back, hostile);
    }

    #[test]
    fn the_layout_is_serde_jsons() {
        let value = serde_json::json!({"a": [1, {"b": null}], "c": "plain"});
        assert_eq!(
            line(&value).unwrap(),
            serde_json::to_string(&value).unwrap()
        );
        assert_eq!(
            pretty(&value).unwrap(),
            serde_json::to_string_pretty(&value).unwrap()
        );
    }
}
