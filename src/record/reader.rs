//! Reading a recording back. Opening scans it block by block and keeps an index of its frames
//! (time, marks, where each lies); snapshots are decoded on demand from the nearest key frame.
//!
//! Damage is expected, not fatal: a file cut off by a crash replays up to its last whole frame,
//! a damaged block is skipped from the damage on, and each is reported as a sentence in
//! [`Recording::issues`]. Only a file that is not a recording, or one from a newer torchtop,
//! is refused.
//!
//! - [`source`]: where the bytes come from (a file, or the demo's bytes in memory);
//! - [`scan`]: opening, block by block, building the index of frames;
//! - [`blocks`]: one block's zstd stream decompressed as far as it goes;
//! - [`issues`]: the sentences about what is cut off or damaged, and times as people read them;
//! - here: the recording, and snapshots decoded from the index on demand.

mod blocks;
mod issues;
mod scan;
mod source;

use std::borrow::Cow;
use std::path::Path;

use self::issues::{header_error, undecodable};
use self::source::Source;
use super::delta::Decoder;
use super::format::{self, Meta};
use super::RecordError;
use crate::format::escape;
use crate::model::snapshot::SCHEMA_VERSION;
use crate::model::Snapshot;

/// One frame of the recording, as the index knows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameInfo {
    /// The snapshot's `unix_seconds`.
    pub time: f64,
    /// What happened at this frame ([`super::marks`]).
    pub(crate) marks: u64,
    pub(crate) key: bool,
    block: u32,
    body_start: u32,
    body_end: u32,
}

impl FrameInfo {
    /// A frame at `time` with nothing behind it, for tests of what picks frames by time.
    #[cfg(test)]
    pub(crate) fn at(time: f64) -> FrameInfo {
        FrameInfo {
            time,
            marks: 0,
            key: true,
            block: 0,
            body_start: 0,
            body_end: 0,
        }
    }
}

struct BlockInfo {
    /// Where its zstd stream starts in the file.
    data_start: u64,
}

/// An open recording: its header, the index of its frames, and what was wrong with it.
pub struct Recording {
    source: Source,
    /// The file's name as sentences show it.
    name: String,
    pub(crate) meta: Meta,
    frames: Vec<FrameInfo>,
    blocks: Vec<BlockInfo>,
    /// Sentences about the parts that could not be read.
    pub issues: Vec<String>,
    cache: Option<(u32, Vec<u8>)>,
}

/// Where a reader stands: the frame its decoder holds.
#[derive(Debug, Default, Clone)]
pub struct Cursor {
    decoder: Decoder,
    at: Option<usize>,
    /// A frame that could not be decoded, with why: the frames after it up to the next key
    /// frame build on it, so each fails at once instead of decoding its block again from the
    /// key frame (a crafted file made that work grow with the square of its frames).
    broken: Option<(usize, String)>,
}

impl Recording {
    pub fn open(path: &Path) -> Result<Recording, RecordError> {
        use std::os::unix::fs::OpenOptionsExt;
        let name = escape(&path.display().to_string()).into_owned();
        // Not blocking in open(): a FIFO given by mistake would wait for a writer for ever.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| RecordError(format!("could not open {name}: {e}")))?;
        let metadata = file
            .metadata()
            .map_err(|e| RecordError(format!("could not read {name}: {e}")))?;
        if !metadata.is_file() {
            return Err(RecordError(format!(
                "{name} is not a regular file: give the path of a recording (torchtop record)"
            )));
        }
        Self::load(
            Source::File {
                file,
                len: metadata.len(),
            },
            name,
        )
    }

    pub(crate) fn from_bytes(name: &str, bytes: &'static [u8]) -> Result<Recording, RecordError> {
        Self::load(Source::Bytes(Cow::Borrowed(bytes)), name.to_string())
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub fn frames(&self) -> &[FrameInfo] {
        &self.frames
    }

    fn load(source: Source, name: String) -> Result<Recording, RecordError> {
        let mut head = vec![0u8; 20 + format::MAX_META];
        let n = source
            .read_at(0, &mut head)
            .map_err(|e| RecordError(format!("could not read {name}: {e}")))?;
        let (meta, header_len) =
            format::read_header(&head[..n]).map_err(|e| header_error(&name, e, n))?;
        if meta.snapshot_schema > SCHEMA_VERSION {
            return Err(RecordError(format!(
                "{name} holds snapshots in JSON schema {}, written by torchtop {}; this torchtop ({}) \
                 knows schema {SCHEMA_VERSION}: replay it with torchtop {} or later",
                meta.snapshot_schema,
                escape(&meta.torchtop),
                env!("CARGO_PKG_VERSION"),
                escape(&meta.torchtop)
            )));
        }
        let mut recording = Recording {
            source,
            name,
            meta,
            frames: Vec::new(),
            blocks: Vec::new(),
            issues: Vec::new(),
            cache: None,
        };
        recording.scan(header_len as u64)?;
        Ok(recording)
    }

    fn io(&self, e: std::io::Error) -> RecordError {
        RecordError(format!("could not read {}: {e}", self.name))
    }

    /// The decompressed bytes of block `block`, from the cache or the source.
    fn block_bytes(&mut self, block: u32) -> Result<&[u8], RecordError> {
        if self.cache.as_ref().is_none_or(|(b, _)| *b != block) {
            let start = self.blocks[block as usize].data_start;
            let (bytes, _) = self.decompress(start).map_err(|e| self.io(e))?;
            self.cache = Some((block, bytes));
        }
        Ok(&self.cache.as_ref().expect("just filled").1)
    }

    /// The snapshot of frame `i`, decoded from the cursor's frame or the last key frame.
    pub fn snapshot(&mut self, cursor: &mut Cursor, i: usize) -> Result<Snapshot, RecordError> {
        let target = *self
            .frames
            .get(i)
            .ok_or_else(|| RecordError(format!("{} has no frame {i}", self.name)))?;
        let from = match cursor.at {
            Some(j) if j == i => None,
            Some(j) if j < i && self.frames[j].block == target.block => Some(j + 1),
            _ => Some(
                (0..=i)
                    .rev()
                    .take_while(|&k| self.frames[k].block == target.block)
                    .find(|&k| self.frames[k].key)
                    .unwrap_or(i),
            ),
        };
        if let Some(from) = from {
            if let Some((bad, why)) = &cursor.broken {
                let chain = self.frames[*bad..=i.max(*bad)].iter();
                if (from..=i).contains(bad) && !chain.skip(1).any(|f| f.key) {
                    return Err(undecodable(&target, why));
                }
            }
            cursor.at = None;
            let frames: Vec<(usize, FrameInfo)> = (from..=i)
                .zip(self.frames[from..=i].iter().copied())
                .collect();
            let bytes = self.block_bytes(target.block)?;
            for (k, frame) in frames {
                let body = bytes
                    .get(frame.body_start as usize..frame.body_end as usize)
                    .unwrap_or_default();
                if let Err(e) = cursor.decoder.decode(frame.key, body) {
                    cursor.broken = Some((k, e.0.clone()));
                    return Err(undecodable(&frame, &e.0));
                }
            }
            cursor.at = Some(i);
        }
        let state = cursor
            .decoder
            .state()
            .ok_or_else(|| RecordError("internal: no frame was decoded".into()))?;
        state.snapshot().map_err(|e| undecodable(&target, &e.0))
    }
}
