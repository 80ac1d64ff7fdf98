//! Parsers and readers for the /proc files torchtop uses: the one place that reads /proc, for
//! the collectors, the actions and `torchtop run`/`attach`.
//!
//! Every parser takes the file's text and returns a typed value or a [`ParseError`] that names
//! the file and what was wrong; none of them panics on garbled input. The readers are thin:
//! they take a proc root (`/proc` in production, a fixture tree in tests), read one file with
//! as few syscalls as possible (open, read until EOF, close) and hand the text to a parser.
//! A file that is gone, or a pid that died while it was read, comes back as
//! [`ProcError::Gone`], so callers can tell a vanished process from an unreadable file.
//!
//! - `host`: the system-wide files (meminfo, stat, loadavg, uptime, sysctls);
//! - `pid`: one process's files (stat, status, cmdline, environ, task, children);
//! - `maps`: /proc/PID/maps, for the injector;
//! - `detail`: cwd, the chosen environment, cgroup and children, for the detail view.

mod detail;
mod host;
mod maps;
mod pid;

#[cfg(test)]
mod tests;

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

pub(crate) use detail::*;
pub(crate) use host::*;
pub(crate) use maps::*;
pub(crate) use pid::*;

/// The /proc every caller reads outside tests.
pub(crate) const PROC_ROOT: &str = "/proc";

/// The most read from one /proc file. The maps of a process with libtorch are about 1 MiB.
pub(crate) const MAX_FILE_BYTES: u64 = 64 << 20;

/// What was wrong with a file's contents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file} could not be parsed: {reason}")]
pub(crate) struct ParseError {
    /// The file, as a /proc path pattern ("/proc/PID/stat").
    pub(crate) file: &'static str,
    pub(crate) reason: String,
}

impl ParseError {
    pub(crate) fn new(file: &'static str, reason: impl Into<String>) -> Self {
        ParseError {
            file,
            reason: reason.into(),
        }
    }
}

/// Why a /proc file could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProcError {
    /// The file is not there, or its process exited while it was read.
    #[error("{} is gone (the process may have exited)", .0.display())]
    Gone(PathBuf),
    /// The kernel refused to show it (another user's environ, hidepid, ...).
    #[error("permission to read {} was denied", .0.display())]
    Denied(PathBuf),
    /// Any other read failure.
    #[error("{} could not be read: {}", .0.display(), .1)]
    Io(PathBuf, io::Error),
    /// It was read but its contents made no sense.
    #[error("{}: {}", .0.display(), .1.reason)]
    Parse(PathBuf, ParseError),
}

impl ProcError {
    pub(crate) fn from_io(path: &Path, err: io::Error) -> Self {
        if err.kind() == io::ErrorKind::NotFound || err.raw_os_error() == Some(libc::ESRCH) {
            ProcError::Gone(path.to_path_buf())
        } else if err.kind() == io::ErrorKind::PermissionDenied {
            ProcError::Denied(path.to_path_buf())
        } else {
            ProcError::Io(path.to_path_buf(), err)
        }
    }
}

/// Reads a small file with open + read until EOF + close; `std::fs::read` would also stat it
/// for a size hint, which /proc files do not have. At most [`MAX_FILE_BYTES`] are read: a
/// process controls the size of its environment and the names of the files it maps.
pub(crate) fn read_bytes(path: &Path) -> Result<Vec<u8>, ProcError> {
    let file = File::open(path).map_err(|e| ProcError::from_io(path, e))?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut file = file.take(MAX_FILE_BYTES);
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ProcError::from_io(path, e)),
        }
    }
    Ok(bytes)
}

/// [`read_bytes`] as text; bytes that are not UTF-8 (command lines may hold any) are replaced.
pub(crate) fn read_text(path: &Path) -> Result<String, ProcError> {
    let bytes = read_bytes(path)?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

fn read_parsed<T>(
    path: PathBuf,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, ProcError> {
    let text = read_text(&path)?;
    parse(&text).map_err(|e| ProcError::Parse(path, e))
}

pub(crate) fn pid_dir(root: &Path, pid: u32) -> PathBuf {
    root.join(pid.to_string())
}
