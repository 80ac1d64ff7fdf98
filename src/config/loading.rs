//! Reading a TOML config file of any shape: the size bound, the parse, the checks the caller's
//! type cannot make itself, and the line and key an error names, found from toml's own spans
//! (the parsed document knows where each key and value sits). The file's shape is the caller's
//! (`crate::settings::Config` for the monitor's file), so each part of it can live beside the
//! code it configures.

use std::ops::Range;
use std::path::Path;

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// The largest config file read. The full default file is about 4 KiB; this bound keeps
/// `--config /dev/zero` (or a log file named by mistake) from eating memory.
pub(crate) const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// A check a parsed file's type cannot make on its own: on failure, the full dotted key at
/// fault and what is wrong with it.
pub(crate) type Check<T> = fn(&T) -> Result<(), (String, String)>;

/// Reads and checks a config file. The error is one sentence naming the file, the line and the
/// key at fault. At most [`MAX_CONFIG_BYTES`] are read: a longer file is refused.
pub(crate) fn load<T: DeserializeOwned>(path: &Path, check: Check<T>) -> Result<T, String> {
    load_with_text(path, check).map(|(config, _)| config)
}

/// [`load`], with the text read: a part of the file read leniently (the `[ui]` table) can then
/// be located too. The file is read once, since it may be a pipe.
pub(crate) fn load_with_text<T: DeserializeOwned>(
    path: &Path,
    check: Check<T>,
) -> Result<(T, String), String> {
    let text = read_text(
        path,
        "config file",
        "a rules file is a few KiB (see torchtop --print-config)",
    )?;
    let config = parse(&text, check).map_err(|e| format!("config file {}: {e}", shown(path)))?;
    Ok((config, text))
}

/// The text of a config file of any kind (`what`: "config file", "web config"), at most
/// [`MAX_CONFIG_BYTES`] of it, so `--config /dev/zero` or a log named by mistake ends at once
/// with a sentence that says what such a file should hold (`hint`).
pub(crate) fn read_text(path: &Path, what: &str, hint: &str) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let shown = shown(path);
    let cannot_read = |e: std::io::Error| format!("cannot read {what} {shown}: {e}");
    let file = open_without_waiting(path).map_err(cannot_read)?;
    let mut bytes = Vec::new();
    if file.metadata().map_err(cannot_read)?.file_type().is_fifo() {
        read_pipe(&file, &mut bytes).map_err(|why| format!("{what} {shown} is a pipe: {why}"))?;
    } else {
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(cannot_read)?;
    }
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "{what} {shown} is larger than 1 MiB, the most torchtop reads; {hint}"
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("{what} {shown} is not UTF-8 text"))
}

/// Opens `path` for reading without waiting in open() for a FIFO's writer; the file is then
/// made blocking again, as a terminal or /dev/stdin expects.
fn open_without_waiting(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let flags = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK)?;
    Ok(file)
}

/// How long a config named as a pipe (`--config <(...)`, a FIFO) may take to arrive.
const PIPE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads a pipe to its end, at most [`MAX_CONFIG_BYTES`] and one byte, waiting at most
/// [`PIPE_PATIENCE`] for each piece: a FIFO nobody writes to must not hang torchtop.
fn read_pipe(file: &std::fs::File, bytes: &mut Vec<u8>) -> Result<(), String> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use std::io::Read;
    let patience = Timespec::try_from(PIPE_PATIENCE).unwrap_or(Timespec {
        tv_sec: 5,
        tv_nsec: 0,
    });
    let mut chunk = [0u8; 8192];
    loop {
        let mut fds = [PollFd::new(file, PollFlags::IN)];
        match poll(&mut fds, Some(&patience)) {
            Ok(0) => {
                return Err(format!(
                    "nothing came from it for {} s; is anything writing to it?",
                    PIPE_PATIENCE.as_secs()
                ))
            }
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.to_string()),
        }
        match (&*file).read(&mut chunk) {
            Ok(0) if bytes.is_empty() => return Err("it ended without a byte".into()),
            Ok(0) => return Ok(()),
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Ok(());
        }
    }
}

/// A path as an error message may show it: escaped, since a file name can hold anything.
fn shown(path: &Path) -> String {
    crate::format::escape(&path.to_string_lossy()).into_owned()
}

/// Parses and checks config text; the error names the line and the key.
pub(crate) fn parse<T: DeserializeOwned>(text: &str, check: Check<T>) -> Result<T, String> {
    let config: T = toml::from_str(text).map_err(|e| describe_toml_error(text, &e))?;
    check(&config).map_err(|(key, problem)| match key_span(text, &key) {
        Some(span) => format!("line {}: key `{key}` {problem}", line_of(text, span.start)),
        None => format!("key `{key}` {problem}"),
    })?;
    Ok(config)
}

/// Turns toml's error into "line N: key `a.b.c` what is wrong".
fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    let Some(span) = error.span() else {
        return message.to_string();
    };
    let line = line_of(text, span.start);
    let key = unknown_field_name(message)
        .and_then(|field| {
            // serde names only the field; toml's span is its key, under some table.
            key_at(text, span.start).filter(|k| k.ends_with(&field))
        })
        .or_else(|| key_at(text, span.start));
    match key {
        Some(key) if message.starts_with("must be") => {
            format!("line {line}: key `{key}` {message}")
        }
        Some(key) => format!("line {line}: key `{key}`: {message}"),
        None => format!("line {line}: {message}"),
    }
}

/// The 1-based line holding a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
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

/// The full dotted key whose key or value covers `offset`, from the parsed document's spans;
/// the deepest one when tables nest.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let (document, _) = DeTable::parse_recoverable(text);
    let mut path = Vec::new();
    deepest_key_at(document.get_ref(), offset, &mut path).then(|| path.join("."))
}

fn deepest_key_at(table: &DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    for (key, value) in table {
        path.push(key.get_ref().to_string());
        if let DeValue::Table(inner) = value.get_ref() {
            if deepest_key_at(inner, offset, path) {
                return true;
            }
        }
        if covers(key, offset) || covers(value, offset) {
            return true;
        }
        path.pop();
    }
    false
}

fn covers<T>(spanned: &Spanned<T>, offset: usize) -> bool {
    spanned.span().contains(&offset)
}

/// Where the full dotted key is written, from the parsed document's spans.
pub(crate) fn key_span(text: &str, dotted: &str) -> Option<Range<usize>> {
    let (document, _) = DeTable::parse_recoverable(text);
    let mut table = document.get_ref();
    let mut parts = dotted.split('.').peekable();
    while let Some(part) = parts.next() {
        let (key, value) = table.iter().find(|(key, _)| key.get_ref() == part)?;
        if parts.peek().is_none() {
            return Some(key.span());
        }
        let DeValue::Table(inner) = value.get_ref() else {
            return None;
        };
        table = inner;
    }
    None
}
