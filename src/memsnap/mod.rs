//! `torchtop snapshot`: the post-mortem of a CUDA out-of-memory error in the terminal. Reads
//! the pickles that `torch.cuda.memory._dump_snapshot()` writes and shows who holds the memory.
//!
//! - [`pickle`]: a small unpickler that never executes anything and bounds what it allocates.
//! - [`model`]: the typed snapshot, frames and stacks interned once.
//! - [`analysis`]: per-device summary, the tree of live allocations by stack, the timeline
//!   over trace events, and the comparison of two snapshots by stack.
//! - [`output`]: text, JSON, folded stacks and the SVG flame graph.
//! - [`view`]: the interactive viewer, also meant to be opened from the live monitor.
//! - [`cli`]: the `torchtop snapshot` subcommand.
//! - [`memory`]: the guard that refuses a file too big for the memory torchtop may use.

pub(crate) mod analysis;
pub mod cli;
mod memory;
pub(crate) mod model;
pub(crate) mod output;
pub(crate) mod pickle;
pub(crate) mod text;
pub(crate) mod view;

use std::fs::{File, OpenOptions};
use std::io::BufReader;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use analysis::Analysis;
use model::Snapshot;

/// Reads of a few hundred kilobytes keep the syscall count low on big files.
const READ_BUFFER: usize = 256 * 1024;

/// A snapshot file, read and analysed, ready for the viewer or an output.
pub(crate) struct LoadedSnapshot {
    pub(crate) path: PathBuf,
    pub(crate) file_bytes: u64,
    pub(crate) snapshot: Snapshot,
    pub(crate) analysis: Analysis,
}

/// Why a snapshot file could not be opened: a sentence that names the file.
#[derive(Debug)]
pub(crate) struct LoadError {
    path: PathBuf,
    message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path.display().to_string();
        write!(f, "{} {}", text::escape(&path), text::escape(&self.message))
    }
}

impl std::error::Error for LoadError {}

impl LoadError {
    pub(crate) fn new(path: &Path, message: String) -> Self {
        LoadError {
            path: path.to_path_buf(),
            message,
        }
    }
}

/// Whether a symbolic link at the path is followed: yes for a path the user typed, no for a
/// path that an agent (another user's process) reported.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Links {
    Follow,
    Refuse,
}

/// Reads and analyses a snapshot file.
pub(crate) fn load(path: &Path, links: Links) -> Result<LoadedSnapshot, LoadError> {
    let file = open_regular(path, links).map_err(|message| LoadError::new(path, message))?;
    load_opened(path, file)
}

/// Reads and analyses a snapshot file opened already (a regular file), found at `path`.
pub(crate) fn load_opened(path: &Path, file: File) -> Result<LoadedSnapshot, LoadError> {
    let fail = |message: String| LoadError::new(path, message);
    let file_bytes = file.metadata().map(|m| m.len()).ok();
    if let Some(problem) = file_bytes.and_then(memory::too_big_for_memory) {
        return Err(fail(problem));
    }
    let reader = BufReader::with_capacity(READ_BUFFER, file);
    let pickle = pickle::Pickle::read(reader, file_bytes).map_err(|e| fail(e.to_string()))?;
    let snapshot = model::from_pickle(&pickle).map_err(fail)?;
    let input_len = pickle.input_len();
    drop(pickle);
    let analysis = Analysis::new(&snapshot);
    Ok(LoadedSnapshot {
        path: path.to_path_buf(),
        file_bytes: file_bytes.unwrap_or(input_len),
        snapshot,
        analysis,
    })
}

/// Opens a regular file for reading without blocking on a FIFO or a device.
fn open_regular(path: &Path, links: Links) -> Result<File, String> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(libc::ELOOP) => "is a symbolic link, which torchtop does not follow here; \
                                  open the file it points to instead"
                .to_string(),
            _ => format!("could not be opened: {error}"),
        })?;
    let metadata = file
        .metadata()
        .map_err(|error| format!("could not be read: {error}"))?;
    if !metadata.is_file() {
        return Err("is not a regular file: give the path of a snapshot pickle".to_string());
    }
    Ok(file)
}

impl LoadedSnapshot {
    /// The file name, for titles.
    pub(crate) fn name(&self) -> String {
        let name = self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        text::escape(&name).into_owned()
    }
}

#[cfg(test)]
mod tests;
