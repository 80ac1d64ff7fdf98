//! Reading a config file: the size bound, the parse, and the line and key an error names,
//! found by locating the key or table in the text toml reported.

use std::path::Path;

use super::Config;

/// The largest config file read. The full default file is about 4 KiB; this bound keeps
/// `--config /dev/zero` (or a log file named by mistake) from eating memory.
pub(crate) const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Reads and checks a config file. The error is one sentence naming the file, the line and the
/// key at fault. At most [`MAX_CONFIG_BYTES`] are read: a longer file is refused.
pub fn load(path: &Path) -> Result<Config, String> {
    use std::io::Read;
    let shown = crate::format::escape(&path.to_string_lossy()).into_owned();
    let cannot_read = |e: std::io::Error| format!("cannot read config file {shown}: {e}");
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot_read)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "config file {shown} is larger than 1 MiB, the most torchtop reads; \
             a rules file is a few KiB (see torchtop --print-config)"
        ));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| format!("config file {shown} is not UTF-8 text"))?;
    parse(&text).map_err(|e| format!("config file {shown}: {e}"))
}

/// Parses and checks config text; the error names the line and the key.
pub(crate) fn parse(text: &str) -> Result<Config, String> {
    let config: Config = toml::from_str(text).map_err(|e| describe_toml_error(text, &e))?;
    config
        .rules
        .check()
        .map_err(|(key, problem)| match find_key_line(text, &key) {
            Some(line) => format!("line {line}: key `{key}` {problem}"),
            None => format!("key `{key}` {problem}"),
        })?;
    Ok(config)
}

/// Turns toml's error into "line N: key `a.b.c`: what is wrong".
fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    let Some(span) = error.span() else {
        return message.to_string();
    };
    let line = line_of_offset(text, span.start);
    let key = unknown_field_name(message)
        .map(|field| match table_at_line(text, line) {
            Some(table) if !key_at_line(text, line).is_some_and(|k| k.ends_with(&field)) => {
                format!("{table}.{field}")
            }
            _ => key_at_line(text, line).unwrap_or(field),
        })
        .or_else(|| key_at_line(text, line));
    match key {
        Some(key) => format!("line {line}: key `{key}`: {message}"),
        None => format!("line {line}: {message}"),
    }
}

/// The 1-based line holding a byte offset.
fn line_of_offset(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The field serde names in "unknown field `x`, expected ...".
fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

/// Strips a TOML comment, spaces and quotes from a key or header.
fn clean_key(raw: &str) -> String {
    raw.split('.')
        .map(|part| part.trim().trim_matches('"').trim_matches('\''))
        .collect::<Vec<_>>()
        .join(".")
}

/// The `[table]` header in effect at a 1-based line, or the header on that line itself.
fn table_at_line(text: &str, line: usize) -> Option<String> {
    text.lines()
        .take(line)
        .filter_map(header_of)
        .last()
        .filter(|t| !t.is_empty())
}

pub(super) fn header_of(line: &str) -> Option<String> {
    let trimmed = line.trim();
    let inner = trimmed.strip_prefix('[')?;
    let inner = inner.split(']').next()?;
    Some(clean_key(inner.trim_start_matches('[')))
}

/// The full dotted key written on a 1-based line: its table plus the key before `=`, or the
/// header itself when the line is a `[table]` header.
fn key_at_line(text: &str, line: usize) -> Option<String> {
    let content = text.lines().nth(line.checked_sub(1)?)?;
    if let Some(header) = header_of(content) {
        return Some(header);
    }
    let (raw_key, _) = content.split_once('=')?;
    let key = clean_key(raw_key);
    if key.is_empty() || key.starts_with('#') {
        return None;
    }
    Some(match table_at_line(text, line) {
        Some(table) => format!("{table}.{key}"),
        None => key,
    })
}

/// The 1-based line where a full dotted key is set, if written out as `key = value`.
pub(super) fn find_key_line(text: &str, dotted: &str) -> Option<usize> {
    (1..=text.lines().count()).find(|&line| {
        let content = text.lines().nth(line - 1).unwrap_or("");
        header_of(content).is_none() && key_at_line(text, line).as_deref() == Some(dotted)
    })
}
