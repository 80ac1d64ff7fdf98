//! Reading a recording back. Opening scans it block by block and keeps an index of its frames
//! (time, marks, where each lies); snapshots are decoded on demand from the nearest place to
//! start: the cursor's frame, a kept decoder state ([`checkpoints`]) or the key frame.
//!
//! Damage is expected, not fatal: a file cut off by a crash replays up to its last whole frame,
//! a damaged block is skipped from the damage on, and each is reported as a sentence in
//! [`Recording::issues`]. Only a file that is not a recording, or one from a newer torchtop,
//! is refused.
//!
//! - [`source`]: where the bytes come from (a file, or the demo's bytes in memory);
//! - [`scan`]: opening, block by block, building the index of frames;
//! - [`blocks`]: one block's zstd stream decompressed as far as it goes;
//! - [`checkpoints`]: decoder states kept between key frames, so that going back is cheap;
//! - [`issues`]: the sentences about what is cut off or damaged, and times as people read them;
//! - here: the recording, and snapshots decoded from the index on demand.

mod blocks;
pub(crate) mod checkpoints;
mod issues;
pub(crate) mod plausible;
mod scan;
mod source;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use self::checkpoints::Checkpoints;
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
    /// The decompressed bytes of the blocks read last, the most recent last: two, so that a
    /// replay whose history reaches into the block before the frame shown does not
    /// decompress both at every step. At most [`CACHED_BLOCKS`] times a block's bytes (16 MiB
    /// in a file torchtop wrote, [`format::MAX_BLOCK_BYTES`] in any file).
    cache: Vec<(u32, Arc<Vec<u8>>)>,
    checkpoints: Checkpoints,
    work: Work,
}

/// How many blocks' decompressed bytes are kept.
const CACHED_BLOCKS: usize = 2;

/// The work decoding has done so far, for tests, which count work rather than time.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Work {
    /// Frames decoded from their bytes.
    pub(crate) frames: u64,
    /// Whole snapshots made from decoded frames (the costly part at hundreds of processes).
    pub(crate) snapshots: u64,
    /// Blocks decompressed after opening.
    pub(crate) blocks: u64,
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

impl Cursor {
    /// About how many bytes its decoder's state takes (see [`Decoder::weight`]).
    #[cfg(test)]
    pub(crate) fn weight(&self) -> usize {
        self.decoder.weight()
    }
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
        let mut meta = meta;
        let mut issues = Vec::new();
        if !format::INTERVALS.contains(&meta.interval_seconds) {
            // Only a hand-made file says this; its frames are still worth showing.
            issues.push(format!(
                "its header gives a refresh interval of {} s, which torchtop never writes \
                 (0.1 s to a day): it is played as 1 s",
                meta.interval_seconds
            ));
            meta.interval_seconds = 1.0;
        }
        let mut recording = Recording {
            source,
            name,
            meta,
            frames: Vec::new(),
            blocks: Vec::new(),
            issues,
            cache: Vec::new(),
            checkpoints: Checkpoints::default(),
            work: Work::default(),
        };
        recording.scan(header_len as u64)?;
        Ok(recording)
    }

    fn io(&self, e: std::io::Error) -> RecordError {
        RecordError(format!("could not read {}: {e}", self.name))
    }

    /// The work done so far.
    #[cfg(test)]
    pub(crate) fn work(&self) -> Work {
        self.work
    }

    /// The decompressed bytes of block `block`, from the cache or the source.
    fn block_bytes(&mut self, block: u32) -> Result<Arc<Vec<u8>>, RecordError> {
        if let Some(at) = self.cache.iter().position(|(b, _)| *b == block) {
            let entry = self.cache.remove(at);
            self.cache.push(entry);
        } else {
            let start = self.blocks[block as usize].data_start;
            let (bytes, _) = self.decompress(start).map_err(|e| self.io(e))?;
            self.work.blocks += 1;
            if self.cache.len() == CACHED_BLOCKS {
                self.cache.remove(0);
            }
            self.cache.push((block, Arc::new(bytes)));
        }
        Ok(self.cache.last().expect("just filled").1.clone())
    }

    /// The reads to come are about frame `i` (the frame a replay shows, which may be stepped
    /// back from): decoder states are kept from now on, those below `i` first.
    pub(crate) fn aim(&mut self, i: usize) {
        self.checkpoints.aim(i);
    }

    /// The snapshot of frame `i`, its figures no machine reports dropped to N/A.
    pub fn snapshot(&mut self, cursor: &mut Cursor, i: usize) -> Result<Snapshot, RecordError> {
        self.work.snapshots += 1;
        let mut snapshot: Snapshot = self.read(cursor, i)?;
        plausible::drop_implausible(&mut snapshot);
        Ok(snapshot)
    }

    /// Frame `i` read as a `T`: a [`Snapshot`], or only the parts of one a reader needs, which
    /// costs a fraction of a whole snapshot (the fields left out are skipped, not built).
    pub(crate) fn read<T: DeserializeOwned>(
        &mut self,
        cursor: &mut Cursor,
        i: usize,
    ) -> Result<T, RecordError> {
        let target = self.reach(cursor, i)?;
        let state = cursor
            .decoder
            .state()
            .ok_or_else(|| RecordError("internal: no frame was decoded".into()))?;
        state.read().map_err(|e| undecodable(&target, &e.0))
    }

    /// The first frame that reading frame `i` with `cursor` decodes (`i + 1` when it decodes
    /// none): a reader that wants the frames before `i` too can read them on the way for
    /// little more than `i` alone.
    pub(crate) fn decoding_starts(&self, cursor: &Cursor, i: usize) -> usize {
        match self.frames.get(i) {
            Some(_) => self.start(cursor, i).0,
            None => i + 1,
        }
    }

    /// Where decoding frame `i` starts: the first frame to decode, and the frame of the kept
    /// decoder state to start from, if any. The cheapest of: on from the cursor's frame, on
    /// from a kept state, or from the key frame before `i`.
    fn start(&self, cursor: &Cursor, i: usize) -> (usize, Option<usize>) {
        if cursor.at == Some(i) {
            return (i + 1, None);
        }
        let block = self.frames[i].block;
        let key = (0..=i)
            .rev()
            .take_while(|&k| self.frames[k].block == block)
            .find(|&k| self.frames[k].key)
            .unwrap_or(i);
        let from = match cursor.at {
            // Past the key frame, the cursor's frame is nearer than it.
            Some(j) if j < i && j >= key => j + 1,
            _ => key,
        };
        match self.checkpoints.nearest(from, i) {
            Some(at) => (at + 1, Some(at)),
            None => (from, None),
        }
    }

    /// Moves `cursor` to frame `i`, decoding the frames in between; returns frame `i`'s entry.
    fn reach(&mut self, cursor: &mut Cursor, i: usize) -> Result<FrameInfo, RecordError> {
        let target = *self
            .frames
            .get(i)
            .ok_or_else(|| RecordError(format!("{} has no frame {i}", self.name)))?;
        let (from, kept) = self.start(cursor, i);
        if from > i && kept.is_none() {
            return Ok(target);
        }
        if let Some((bad, why)) = &cursor.broken {
            let chain = self.frames[*bad..=i.max(*bad)].iter();
            if (from..=i).contains(bad) && !chain.skip(1).any(|f| f.key) {
                return Err(undecodable(&target, why));
            }
        }
        cursor.at = None;
        if let Some(decoder) = kept.and_then(|at| self.checkpoints.copy(at)) {
            cursor.decoder = decoder;
        }
        if from > i {
            // Frame `i` is a kept state: nothing to decode, nor any block to read.
            cursor.at = Some(i);
            return Ok(target);
        }
        let bytes = self.block_bytes(target.block)?;
        for k in from..=i {
            let frame = self.frames[k];
            let body = bytes
                .get(frame.body_start as usize..frame.body_end as usize)
                .unwrap_or_default();
            self.work.frames += 1;
            if let Err(e) = cursor.decoder.decode(frame.key, body) {
                cursor.broken = Some((k, e.0.clone()));
                return Err(undecodable(&frame, &e.0));
            }
            if !frame.key && self.checkpoints.wants(k) {
                self.checkpoints.keep(k, cursor.decoder.clone());
            }
        }
        cursor.at = Some(i);
        Ok(target)
    }
}
