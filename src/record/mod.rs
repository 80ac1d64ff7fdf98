//! Recordings: everything the monitor sees, written compactly to a file that `torchtop replay`
//! shows again in the same TUI, exports as `--json` lines or sums up.
//!
//! - [`tokens`]: a snapshot as JSON-shaped tokens, split into a head and groups of entities.
//! - [`codec`]: varints, tokens and short forms of changed numbers, as bytes; `de` reads
//!   snapshots back from tokens.
//! - [`delta`]: frames as changes since the previous frame, or whole (key frames), read back;
//!   [`encoder`] writes them straight from a snapshot's token bytes.
//! - [`mod@format`]: the file header, block header and trailer, frame records.
//! - [`marks`]: what happened at a frame (new warning, OOM, GPU state, processes).
//! - [`writer`]: zstd blocks, flushing and rotation; [`writer::Recorder`] runs it on a thread.
//! - [`reader`]: reading back, block by block, reporting what is cut off or damaged.
//! - [`headless`]: `torchtop record`; [`live`]: `R` in the monitor.
//!
//! The layout is documented for other tools in `assets/recording-format.md`.

pub(crate) mod codec;
mod de;
pub(crate) mod delta;
pub(crate) mod encoder;
pub(crate) mod format;
pub mod headless;
pub(crate) mod live;
pub(crate) mod marks;
pub mod reader;
pub(crate) mod table;
pub(crate) mod tokens;
pub mod writer;

#[cfg(test)]
mod tests;

pub use reader::Recording;
pub use writer::RecordOptions;
pub(crate) use writer::Recorder;

/// A recording could not be written or read; the sentence says why and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError(pub(crate) String);

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RecordError {}
