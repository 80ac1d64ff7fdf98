//! Writing a recording: frames into zstd blocks, flushed to the file every few seconds so that
//! a crash loses at most those seconds, and files rotated by size with the oldest deleted.
//!
//! - [`files`]: creating, recognising and rotating the files;
//! - [`recorder`]: [`Recorder`] runs the writer on a thread of its own, fed the same
//!   `Arc<Snapshot>`s the UI or the headless loop gets, so a slow disk never delays a refresh.

mod files;
mod recorder;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::files::{create_file, io_error, rotate};
use super::encoder::Encoder;
use super::format::{self, FrameHead, Meta, Trailer};
use super::{marks, RecordError};
use crate::model::{tree::build_tree, Snapshot};

pub(crate) use self::recorder::{Feeder, Recorder};

/// A key frame at least this often, in frames (5 minutes at 1 Hz).
pub(crate) const KEY_EVERY: u32 = 300;
/// A block holds at most this many frames (15 minutes at 1 Hz)...
pub(crate) const BLOCK_FRAMES: u32 = 900;
/// ... and at most this many bytes before compression.
const BLOCK_RAW_BYTES: usize = 16 << 20;
/// Compressed frames reach the file at least this often.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(2);
/// With `--max-size`, the recording is split into this many files at most.
pub(crate) const SEGMENTS: u64 = 4;
/// The smallest `--max-size`.
pub(crate) const MIN_MAX_SIZE: u64 = 1 << 20;
/// zstd level 3 (its default): in `cargo bench --bench record`, level 6 cost the writer 10 to
/// 50 % more CPU for 3 to 9 % fewer bytes.
const ZSTD_LEVEL: i32 = 3;

#[derive(Debug, Clone, PartialEq)]
pub struct RecordOptions {
    pub path: PathBuf,
    /// The most all files of the recording take together; `None`: no limit.
    pub max_size: Option<u64>,
    pub interval_seconds: f64,
}

/// The open block: a zstd stream whose output goes to the file at each flush.
struct Block {
    zstd: zstd::stream::write::Encoder<'static, Vec<u8>>,
    frames: u32,
    raw: usize,
    crc: crc32fast::Hasher,
    compressed: u64,
    last_flush: Instant,
}

/// Writes one recording (a file, or a rotating set of files) frame by frame.
pub struct FileWriter {
    options: RecordOptions,
    file: File,
    /// Bytes in the current file.
    written: u64,
    encoder: Encoder,
    block: Option<Block>,
    seq: u32,
    since_key: u32,
    previous: Option<Arc<Snapshot>>,
    body: Vec<u8>,
    record: Vec<u8>,
    /// Bytes written in earlier files of this recording.
    earlier: u64,
    /// The most bytes one write has added to a file: how close to its share a file may get.
    largest_put: u64,
    /// The current file has its header (written with the first frame, which names the host).
    has_header: bool,
    zstd_level: i32,
}

impl FileWriter {
    /// Creates the file (moving an earlier recording of the same name to `FILE.1`).
    pub fn create(options: RecordOptions) -> Result<Self, RecordError> {
        if let Some(max) = options.max_size {
            if max < MIN_MAX_SIZE {
                return Err(RecordError(format!(
                    "--max-size must be at least 1M (1 MiB), not {max} bytes"
                )));
            }
        }
        rotate(&options.path, options.max_size.map(numbered_budget))?;
        let file = create_file(&options.path)?;
        let writer = FileWriter {
            options,
            file,
            written: 0,
            encoder: Encoder::default(),
            block: None,
            seq: 0,
            since_key: 0,
            previous: None,
            body: Vec::new(),
            record: Vec::new(),
            earlier: 0,
            largest_put: 0,
            has_header: false,
            zstd_level: ZSTD_LEVEL,
        };
        Ok(writer)
    }

    /// Compresses the blocks opened from now on at zstd `level` instead of the default (for the
    /// benchmark, which weighs size against CPU).
    pub fn with_zstd_level(mut self, level: i32) -> Self {
        self.zstd_level = level;
        self
    }

    pub(crate) fn path(&self) -> &Path {
        &self.options.path
    }

    /// Bytes written so far, in every file of this recording.
    pub(crate) fn bytes(&self) -> u64 {
        self.earlier + self.written
    }

    fn write_header(&mut self, host: Option<String>) -> Result<(), RecordError> {
        let meta = Meta {
            torchtop: env!("CARGO_PKG_VERSION").to_string(),
            host,
            interval_seconds: self.options.interval_seconds,
            started: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            snapshot_schema: crate::model::snapshot::SCHEMA_VERSION,
            key_every: KEY_EVERY,
        };
        let mut bytes = Vec::new();
        format::put_header(&mut bytes, &meta);
        self.has_header = true;
        self.put(&bytes)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), RecordError> {
        self.file
            .write_all(bytes)
            .map_err(|e| io_error(&self.options.path, "write to", &e))?;
        self.written += bytes.len() as u64;
        self.largest_put = self.largest_put.max(bytes.len() as u64);
        Ok(())
    }

    /// Appends a frame; flushes, closes the block and rotates the file when due.
    pub fn write(&mut self, snapshot: &Arc<Snapshot>) -> Result<(), RecordError> {
        let recorded = recordable(snapshot);
        self.encoder
            .prepare(recorded.as_ref())
            .map_err(|e| RecordError(format!("a snapshot could not be recorded: {e}")))?;
        let marks = marks::marks(self.previous.as_deref(), snapshot);
        if !self.has_header {
            self.write_header(snapshot.host.hostname.as_deref().map(str::to_string))?;
        }
        if self.block.is_none() {
            self.open_block(snapshot.unix_seconds)?;
        }
        let block = self.block.as_mut().expect("a block was just opened");
        let key = block.frames == 0 || self.since_key + 1 >= KEY_EVERY;
        self.body.clear();
        self.encoder.encode(key, &mut self.body);
        self.record.clear();
        let head = FrameHead {
            key,
            time: snapshot.unix_seconds,
            marks,
        };
        format::put_frame(&mut self.record, head, &self.body);
        block
            .zstd
            .write_all(&self.record)
            .map_err(|e| RecordError(format!("compressing a frame failed: {e}")))?;
        block.frames += 1;
        block.raw += self.record.len();
        self.since_key = if key { 0 } else { self.since_key + 1 };
        self.previous = Some(snapshot.clone());
        if block.frames >= BLOCK_FRAMES || block.raw >= BLOCK_RAW_BYTES {
            self.close_block()?;
        } else if block.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        self.rotate_if_full()
    }

    fn open_block(&mut self, time: f64) -> Result<(), RecordError> {
        let header = format::block_header(self.seq, time);
        self.seq = self.seq.wrapping_add(1);
        self.put(&header)?;
        let zstd = zstd::stream::write::Encoder::new(Vec::new(), self.zstd_level)
            .map_err(|e| RecordError(format!("zstd could not start a block: {e}")))?;
        self.block = Some(Block {
            zstd,
            frames: 0,
            raw: 0,
            crc: crc32fast::Hasher::new(),
            compressed: 0,
            last_flush: Instant::now(),
        });
        Ok(())
    }

    /// Sends every frame written so far to the file.
    pub(crate) fn flush(&mut self) -> Result<(), RecordError> {
        let Some(block) = self.block.as_mut() else {
            return Ok(());
        };
        block
            .zstd
            .flush()
            .map_err(|e| RecordError(format!("compressing frames failed: {e}")))?;
        block.last_flush = Instant::now();
        let out = std::mem::take(block.zstd.get_mut());
        block.crc.update(&out);
        block.compressed += out.len() as u64;
        self.put(&out)?;
        if let Some(block) = self.block.as_mut() {
            *block.zstd.get_mut() = reuse(out);
        }
        Ok(())
    }

    /// Ends the block: the rest of its zstd frame, then its trailer.
    fn close_block(&mut self) -> Result<(), RecordError> {
        let Some(block) = self.block.take() else {
            return Ok(());
        };
        let Block {
            zstd,
            frames,
            mut crc,
            mut compressed,
            ..
        } = block;
        let out = zstd
            .finish()
            .map_err(|e| RecordError(format!("compressing frames failed: {e}")))?;
        crc.update(&out);
        compressed += out.len() as u64;
        self.put(&out)?;
        let trailer = format::trailer(Trailer {
            frames,
            compressed_len: compressed,
            compressed_crc: crc.finalize(),
        });
        self.put(&trailer)
    }

    fn rotate_if_full(&mut self) -> Result<(), RecordError> {
        let Some(max) = self.options.max_size else {
            return Ok(());
        };
        // A file grows by whole writes (a flush of two seconds of frames, a block's end): it
        // moves on while the largest write so far still fits, so that no file passes its share.
        if self.written.saturating_add(self.largest_put) < max / SEGMENTS {
            return Ok(());
        }
        self.close_block()?;
        self.earlier += self.written;
        rotate(&self.options.path, Some(numbered_budget(max)))?;
        self.file = create_file(&self.options.path)?;
        self.written = 0;
        self.has_header = false;
        Ok(())
    }

    /// Closes the last block; the file is complete.
    pub fn finish(mut self) -> Result<u64, RecordError> {
        if !self.has_header {
            self.write_header(None)?;
        }
        self.close_block()?;
        Ok(self.bytes())
    }
}

/// What the numbered files may take under `--max-size max`: the rest is the room of the file
/// being written (a [`SEGMENTS`]th).
fn numbered_budget(max: u64) -> u64 {
    max - max / SEGMENTS
}

fn reuse(mut buffer: Vec<u8>) -> Vec<u8> {
    buffer.clear();
    buffer
}

/// The snapshot as recorded: the host process table, when there is one, is cut down to the
/// processes the tree view shows (the GPU processes' parents and descendants).
fn recordable(snapshot: &Snapshot) -> std::borrow::Cow<'_, Snapshot> {
    if snapshot.host_processes.is_empty() {
        return std::borrow::Cow::Borrowed(snapshot);
    }
    let rows = build_tree(&snapshot.processes, &snapshot.host_processes);
    let mut keep: Vec<usize> = rows.iter().filter_map(|r| r.host).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut cut = snapshot.clone();
    cut.host_processes = keep
        .into_iter()
        .map(|i| snapshot.host_processes[i].clone())
        .collect();
    std::borrow::Cow::Owned(cut)
}
