//! Writing a recording: frames into zstd blocks, flushed to the file every few seconds so that
//! a crash loses at most those seconds, and files rotated by size with the oldest deleted.
//!
//! - [`files`]: creating, recognising and rotating the files;
//! - [`outage`]: a disk that refuses writes (full, over quota): frames are dropped, writing is
//!   tried again every [`outage::RETRY_EVERY`], and the file is kept readable throughout;
//! - [`recorder`]: [`Recorder`] runs the writer on a thread of its own, fed the same
//!   `Arc<Snapshot>`s the UI or the headless loop gets, so a slow disk never delays a refresh.

mod files;
mod outage;
#[cfg(test)]
mod outage_tests;
mod recorder;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::files::{create_file, io_error, refuse_others_directory, refuse_unusable_path, rotate};
use self::outage::{Fault, OnDisk, Outage, RETRY_EVERY};
use super::encoder::Encoder;
use super::format::{self, FrameHead, Meta};
use super::{marks, RecordError};
use crate::model::{tree::build_tree, Snapshot};

pub use self::outage::DiskEvent;
pub(crate) use self::recorder::{Feeder, Recorder, RecorderStatus};

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
    /// Frames given to zstd.
    frames: u32,
    raw: usize,
    last_flush: Instant,
    /// The time of the last frame given to zstd.
    last_time: f64,
    /// What of the block is in the file: what a failed write leaves to close it with.
    on_disk: OnDisk,
}

/// Writes one recording (a file, or a rotating set of files) frame by frame.
pub struct FileWriter {
    options: RecordOptions,
    file: File,
    /// Bytes in the current file that reached it whole: after a failed write the file is cut
    /// back to them, so that half a flush never stays in it.
    written: u64,
    encoder: Encoder,
    block: Option<Block>,
    seq: u32,
    since_key: u32,
    /// The last frame given to zstd: the next one's marks are against it.
    previous: Option<Arc<Snapshot>>,
    /// The last frame that reached the file, for the marks of the first frame after frames
    /// were lost.
    previous_on_disk: Option<Arc<Snapshot>>,
    body: Vec<u8>,
    record: Vec<u8>,
    /// Bytes written in earlier files of this recording.
    earlier: u64,
    /// The most bytes one write has added to a file: how close to its share a file may get.
    largest_put: u64,
    /// The current file has its header (written with the first frame, which names the host).
    has_header: bool,
    zstd_level: i32,
    /// The current file is full, and the next one could not be started yet.
    next_file_due: bool,
    /// Set while the disk refuses writes.
    outage: Option<Outage>,
    /// How often writing is tried again during an outage.
    retry_every: Duration,
    /// Frames handed to [`FileWriter::write`].
    frames_in: u64,
    /// Frames that reached the file.
    frames_on_disk: u64,
    /// The time of the last frame that reached the file.
    last_time_on_disk: Option<f64>,
    /// A test's stand-in for a disk that fills up.
    #[cfg(test)]
    room: Option<outage::Room>,
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
        refuse_unusable_path(&options.path)?;
        refuse_others_directory(&options.path)?;
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
            previous_on_disk: None,
            body: Vec::new(),
            record: Vec::new(),
            earlier: 0,
            largest_put: 0,
            has_header: false,
            zstd_level: ZSTD_LEVEL,
            next_file_due: false,
            outage: None,
            retry_every: RETRY_EVERY,
            frames_in: 0,
            frames_on_disk: 0,
            last_time_on_disk: None,
            #[cfg(test)]
            room: None,
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

    /// Frames recorded so far: in the file, or in the block on their way to it.
    pub(crate) fn frames(&self) -> u64 {
        self.frames_in - self.lost()
    }

    /// Frames that were handed to the writer and will never reach the file: those dropped
    /// during an outage, and those a failed write took with it.
    pub(crate) fn lost(&self) -> u64 {
        let pending = self
            .block
            .as_ref()
            .map_or(0, |b| u64::from(b.frames - b.on_disk.frames));
        self.frames_in
            .saturating_sub(self.frames_on_disk)
            .saturating_sub(pending)
    }

    fn write_header(&mut self, host: Option<String>) -> Result<(), Fault> {
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
        self.put(&bytes)?;
        self.has_header = true;
        Ok(())
    }

    /// Writes `bytes` whole, or fails leaving [`FileWriter::written`] as it was (the file may
    /// hold part of them, which [`FileWriter::cut_back_to`] removes).
    fn put(&mut self, bytes: &[u8]) -> Result<(), Fault> {
        self.write_through(bytes)
            .map_err(|e| Fault::Disk(io_error(&self.options.path, "write to", &e).0))?;
        self.written += bytes.len() as u64;
        self.largest_put = self.largest_put.max(bytes.len() as u64);
        Ok(())
    }

    #[cfg(not(test))]
    fn write_through(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)
    }

    #[cfg(test)]
    fn write_through(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &self.room {
            Some(room) => room.write(&mut self.file, bytes),
            None => self.file.write_all(bytes),
        }
    }

    /// Appends a frame; flushes, closes the block and rotates the file when due. A write the
    /// disk refuses is not an error: the frame is dropped, and [`DiskEvent::Failed`] says so
    /// once; the frames after it are dropped until writing works again, tried every
    /// [`RETRY_EVERY`], which [`DiskEvent::Resumed`] says. An error is what no retry mends.
    pub fn write(&mut self, snapshot: &Arc<Snapshot>) -> Result<Option<DiskEvent>, RecordError> {
        let lost_before = self.lost();
        self.frames_in += 1;
        let Some(outage) = &self.outage else {
            return match self.write_frame(snapshot, false) {
                Ok(()) => Ok(None),
                Err(fault) => self.fail(fault, lost_before),
            };
        };
        if Instant::now() < outage.next_try {
            return Ok(None);
        }
        // The frame goes to the disk at once, so that "resumed" is said only of a frame that
        // is in the file.
        let tried = self
            .repair()
            .and_then(|()| self.write_frame(snapshot, true));
        match tried {
            Ok(()) => Ok(self.resumed(snapshot.unix_seconds)),
            Err(fault) => self.fail(fault, lost_before),
        }
    }

    /// The frame into the open block (a new one, with a key frame, when none is open).
    fn write_frame(&mut self, snapshot: &Arc<Snapshot>, flush_now: bool) -> Result<(), Fault> {
        let recorded = recordable(snapshot);
        self.encoder.prepare(recorded.as_ref()).map_err(|e| {
            Fault::Fatal(RecordError(format!(
                "a snapshot could not be recorded: {e}"
            )))
        })?;
        if self.next_file_due {
            self.start_next_file()?;
        }
        if !self.has_header {
            self.write_header(snapshot.host.hostname.as_deref().map(str::to_string))?;
        }
        if self.block.is_none() {
            self.open_block(snapshot.unix_seconds)?;
        }
        let marks = marks::marks(self.previous.as_deref(), snapshot);
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
            .map_err(|e| Fault::Fatal(RecordError(format!("compressing a frame failed: {e}"))))?;
        block.frames += 1;
        block.raw += self.record.len();
        block.last_time = snapshot.unix_seconds;
        self.since_key = if key { 0 } else { self.since_key + 1 };
        self.previous = Some(snapshot.clone());
        if block.frames >= BLOCK_FRAMES || block.raw >= BLOCK_RAW_BYTES {
            self.close_block()?;
        } else if flush_now || block.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush_block()?;
        }
        self.rotate_if_full()
    }

    fn open_block(&mut self, time: f64) -> Result<(), Fault> {
        let header = format::block_header(self.seq, time);
        let start = self.written;
        self.put(&header)?;
        self.seq = self.seq.wrapping_add(1);
        let zstd = zstd::stream::write::Encoder::new(Vec::new(), self.zstd_level)
            .and_then(|mut zstd| {
                // Without a checksum, a block cut short by a failed write can be ended at its
                // last flush ([`outage::END_OF_ZSTD_FRAME`]): no checksum of lost bytes to give.
                zstd.include_checksum(false)?;
                Ok(zstd)
            })
            .map_err(|e| Fault::Fatal(RecordError(format!("zstd could not start a block: {e}"))))?;
        self.block = Some(Block {
            zstd,
            frames: 0,
            raw: 0,
            last_flush: Instant::now(),
            last_time: time,
            on_disk: OnDisk::new(start),
        });
        Ok(())
    }

    /// Sends every frame written so far to the file (as the writer does every
    /// [`FLUSH_EVERY`]), for tests that make each frame reach the file.
    #[cfg(test)]
    pub(crate) fn flush(&mut self) -> Result<Option<DiskEvent>, RecordError> {
        let lost_before = self.lost();
        match self.flush_block() {
            Ok(()) => Ok(None),
            Err(fault) => self.fail(fault, lost_before),
        }
    }

    fn flush_block(&mut self) -> Result<(), Fault> {
        let Some(block) = self.block.as_mut() else {
            return Ok(());
        };
        block
            .zstd
            .flush()
            .map_err(|e| Fault::Fatal(RecordError(format!("compressing frames failed: {e}"))))?;
        block.last_flush = Instant::now();
        let out = std::mem::take(block.zstd.get_mut());
        self.put_block_bytes(&out, false)?;
        if let Some(block) = self.block.as_mut() {
            *block.zstd.get_mut() = reuse(out);
        }
        Ok(())
    }

    /// Puts compressed bytes of the open block; once they are in the file, so are its frames
    /// so far.
    fn put_block_bytes(&mut self, out: &[u8], ended: bool) -> Result<(), Fault> {
        self.put(out)?;
        let Some(block) = self.block.as_mut() else {
            return Ok(());
        };
        self.frames_on_disk += u64::from(block.frames - block.on_disk.frames);
        block.on_disk.add(out, block.frames, ended);
        self.last_time_on_disk = Some(block.last_time);
        self.previous_on_disk.clone_from(&self.previous);
        Ok(())
    }

    /// Ends the block: the rest of its zstd frame, then its trailer.
    fn close_block(&mut self) -> Result<(), Fault> {
        let Some(block) = self.block.as_mut() else {
            return Ok(());
        };
        if !block.on_disk.ended {
            block.zstd.do_finish().map_err(|e| {
                Fault::Fatal(RecordError(format!("compressing frames failed: {e}")))
            })?;
            let out = std::mem::take(block.zstd.get_mut());
            self.put_block_bytes(&out, true)?;
        }
        let trailer = match &self.block {
            Some(block) => block.on_disk.trailer(),
            None => return Ok(()),
        };
        self.put(&trailer)?;
        self.block = None;
        Ok(())
    }

    fn rotate_if_full(&mut self) -> Result<(), Fault> {
        let Some(max) = self.options.max_size else {
            return Ok(());
        };
        // A file grows by whole writes (a flush of two seconds of frames, a block's end): it
        // moves on while the largest write so far still fits, so that no file passes its share.
        if self.written.saturating_add(self.largest_put) < max / SEGMENTS {
            return Ok(());
        }
        self.close_block()?;
        // Said before the move, so that a move the disk refuses is tried again, not forgotten.
        self.next_file_due = true;
        self.start_next_file()
    }

    /// Moves the full file on (`FILE` to `FILE.1`, ...) and starts `FILE` anew. Tried again
    /// until it works: a move or a new file can fail on a full disk as a write does.
    fn start_next_file(&mut self) -> Result<(), Fault> {
        let budget = self.options.max_size.map(numbered_budget);
        rotate(&self.options.path, budget).map_err(|e| Fault::Disk(e.0))?;
        self.file = create_file(&self.options.path).map_err(|e| Fault::Disk(e.0))?;
        self.earlier += self.written;
        self.written = 0;
        self.has_header = false;
        self.next_file_due = false;
        Ok(())
    }

    /// Closes the last block; the file is complete. During an outage the end is tried once
    /// more; a file that still cannot be ended is left cut back to its last flush, which a
    /// replay reads up to (and says it is cut off).
    pub fn finish(mut self) -> Result<u64, RecordError> {
        let repaired = if self.outage.is_some() {
            self.repair()
        } else {
            Ok(())
        };
        let ended = repaired
            .and_then(|()| {
                // A file that was due to move on is whole; the next one needs no header yet.
                if self.has_header || self.next_file_due {
                    Ok(())
                } else {
                    self.write_header(None)
                }
            })
            .and_then(|()| self.close_block());
        match ended {
            Ok(()) => Ok(self.bytes()),
            Err(Fault::Fatal(error)) => Err(error),
            Err(Fault::Disk(error)) => {
                let _ = self.cut_back_to(self.written);
                Err(RecordError(format!(
                    "{error}; the recording could not be ended and replays up to {}",
                    outage::last_frame_text(self.last_time_on_disk)
                )))
            }
        }
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
