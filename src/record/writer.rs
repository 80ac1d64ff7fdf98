//! Writing a recording: frames into zstd blocks, flushed to the file every few seconds so that
//! a crash loses at most those seconds, and files rotated by size with the oldest deleted.
//!
//! [`Recorder`] runs the writer on a thread of its own, fed the same `Arc<Snapshot>`s the UI
//! or the headless loop gets, so a slow disk never delays a refresh.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::delta::Encoder;
use super::format::{self, FrameHead, Meta, Trailer};
use super::{marks, RecordError};
use crate::model::{tree::build_tree, Snapshot};

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
const ZSTD_LEVEL: i32 = 6;
/// Snapshots waiting for the writer; more are dropped (and counted) rather than held.
const QUEUE: usize = 64;

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
    /// The current file has its header (written with the first frame, which names the host).
    has_header: bool,
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
        rotate(&options.path, options.max_size.map(|_| SEGMENTS))?;
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
            has_header: false,
        };
        Ok(writer)
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
        Ok(())
    }

    /// Appends a frame; flushes, closes the block and rotates the file when due.
    pub fn write(&mut self, snapshot: &Arc<Snapshot>) -> Result<(), RecordError> {
        let recorded = recordable(snapshot);
        let split = self
            .encoder
            .split(recorded.as_ref())
            .map_err(|e| RecordError(format!("a snapshot could not be recorded: {e}")))?;
        let marks = marks::marks(self.previous.as_deref(), snapshot);
        if !self.has_header {
            self.write_header(snapshot.host.hostname.clone())?;
        }
        if self.block.is_none() {
            self.open_block(snapshot.unix_seconds)?;
        }
        let block = self.block.as_mut().expect("a block was just opened");
        let key = block.frames == 0 || self.since_key + 1 >= KEY_EVERY;
        self.body.clear();
        self.encoder.encode(split, key, &mut self.body);
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
        let zstd = zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL)
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
        if self.written < max / SEGMENTS {
            return Ok(());
        }
        self.close_block()?;
        self.earlier += self.written;
        rotate(&self.options.path, Some(SEGMENTS))?;
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

fn io_error(path: &Path, what: &str, error: &std::io::Error) -> RecordError {
    RecordError(format!(
        "could not {what} {}: {error}",
        crate::format::escape(&path.display().to_string())
    ))
}

/// A new file, never through a symbolic link and never over an existing file; readable by its
/// owner only, since it holds other users' command lines.
fn create_file(path: &Path) -> Result<File, RecordError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| io_error(path, "create", &e))
}

/// Whether `path` is a recording (read without following a symbolic link); `None` if absent.
fn is_recording(path: &Path) -> Result<Option<bool>, RecordError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path);
    let mut file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(Some(false)),
        Err(e) => return Err(io_error(path, "open", &e)),
    };
    let mut magic = [0u8; 8];
    let read = file.read(&mut magic).unwrap_or(0);
    Ok(Some(read == magic.len() && &magic == format::MAGIC))
}

fn numbered(path: &Path, n: u64) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Moves `FILE` to `FILE.1`, `FILE.1` to `FILE.2` and so on; with `keep`, the files that would
/// be numbered `keep` or more are deleted. Only recordings are moved or deleted: anything else
/// in the way stops with a sentence.
fn rotate(path: &Path, keep: Option<u64>) -> Result<(), RecordError> {
    match is_recording(path)? {
        None => return Ok(()),
        Some(false) => {
            return Err(RecordError(format!(
                "{} exists and is not a torchtop recording: choose another name with -o",
                crate::format::escape(&path.display().to_string())
            )))
        }
        Some(true) => {}
    }
    let mut highest = 0;
    while is_recording(&numbered(path, highest + 1))?.is_some() {
        highest += 1;
    }
    for n in (1..=highest).rev() {
        let from = numbered(path, n);
        if is_recording(&from)? != Some(true) {
            return Err(RecordError(format!(
                "{} is not a torchtop recording, so it is left alone; choose another name with -o",
                crate::format::escape(&from.display().to_string())
            )));
        }
        if keep.is_some_and(|k| n + 1 >= k) {
            std::fs::remove_file(&from).map_err(|e| io_error(&from, "delete", &e))?;
        } else {
            let to = numbered(path, n + 1);
            std::fs::rename(&from, &to).map_err(|e| io_error(&from, "rename", &e))?;
        }
    }
    let to = numbered(path, 1);
    if keep == Some(1) {
        std::fs::remove_file(path).map_err(|e| io_error(path, "delete", &e))
    } else {
        std::fs::rename(path, &to).map_err(|e| io_error(path, "rename", &e))
    }
}

/// What a running recording has done so far, for the header's indicator.
#[derive(Debug)]
pub(crate) struct RecorderStatus {
    pub(crate) path: PathBuf,
    pub(crate) started: Instant,
    pub(crate) bytes: AtomicU64,
    pub(crate) frames: AtomicU64,
    /// Snapshots dropped because the writer fell behind.
    pub(crate) dropped: AtomicU64,
    /// Why the recording stopped early, if it did.
    pub(crate) failed: Mutex<Option<String>>,
}

impl RecorderStatus {
    pub(crate) fn failure(&self) -> Option<String> {
        self.failed.lock().map(|f| f.clone()).unwrap_or(None)
    }
}

/// What the writer thread is told.
enum Message {
    Frame(Arc<Snapshot>),
    Stop,
}

/// A recording in progress on a thread of its own.
pub(crate) struct Recorder {
    feeder: Feeder,
    thread: Option<JoinHandle<Result<u64, RecordError>>>,
}

/// Hands snapshots to a [`Recorder`] from any thread.
#[derive(Clone)]
pub(crate) struct Feeder {
    messages: SyncSender<Message>,
    status: Arc<RecorderStatus>,
}

impl Feeder {
    /// Hands a snapshot to the writer without waiting; a full queue drops it (and counts it).
    pub(crate) fn push(&self, snapshot: Arc<Snapshot>) {
        if let Err(TrySendError::Full(_)) = self.messages.try_send(Message::Frame(snapshot)) {
            self.status.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn status(&self) -> &Arc<RecorderStatus> {
        &self.status
    }
}

impl Recorder {
    /// Creates the file now (so that a bad path is reported at once) and starts the writer.
    pub(crate) fn start(options: RecordOptions) -> Result<Self, RecordError> {
        let mut writer = FileWriter::create(options)?;
        let status = Arc::new(RecorderStatus {
            path: writer.path().to_path_buf(),
            started: Instant::now(),
            bytes: AtomicU64::new(writer.bytes()),
            frames: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            failed: Mutex::new(None),
        });
        let (messages, queue) = mpsc::sync_channel::<Message>(QUEUE);
        let shared = status.clone();
        let thread = std::thread::Builder::new()
            .name("torchtop-record".into())
            .spawn(move || {
                for message in queue {
                    let Message::Frame(snapshot) = message else {
                        break;
                    };
                    if let Err(error) = writer.write(&snapshot) {
                        if let Ok(mut failed) = shared.failed.lock() {
                            *failed = Some(error.0.clone());
                        }
                        return Err(error);
                    }
                    shared.bytes.store(writer.bytes(), Ordering::Relaxed);
                    shared.frames.fetch_add(1, Ordering::Relaxed);
                }
                writer.finish()
            })
            .map_err(|e| RecordError(format!("could not start the recording thread: {e}")))?;
        Ok(Recorder {
            feeder: Feeder { messages, status },
            thread: Some(thread),
        })
    }

    pub(crate) fn status(&self) -> &Arc<RecorderStatus> {
        &self.feeder.status
    }

    pub(crate) fn feeder(&self) -> Feeder {
        self.feeder.clone()
    }

    pub(crate) fn push(&self, snapshot: Arc<Snapshot>) {
        self.feeder.push(snapshot);
    }

    /// Writes what is queued, closes the file and says how many bytes it holds.
    pub(crate) fn stop(mut self) -> Result<u64, RecordError> {
        // Blocks only while the queue is full, which the writer empties.
        let _ = self.feeder.messages.send(Message::Stop);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(RecordError("the recording thread panicked".into())),
            None => Ok(self.feeder.status.bytes.load(Ordering::Relaxed)),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.feeder.messages.send(Message::Stop);
            let _ = thread.join();
        }
    }
}
