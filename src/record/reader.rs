//! Reading a recording back. Opening scans it block by block and keeps an index of its frames
//! (time, marks, where each lies); snapshots are decoded on demand from the nearest key frame.
//!
//! Damage is expected, not fatal: a file cut off by a crash replays up to its last whole frame,
//! a damaged block is skipped from the damage on, and each is reported as a sentence in
//! [`Recording::issues`]. Only a file that is not a recording, or one from a newer torchtop,
//! is refused.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use zstd::zstd_safe::{DCtx, InBuffer, OutBuffer};

use super::delta::Decoder;
use super::format::{self, HeaderError, Meta, Next, BLOCK_HEADER_LEN, TRAILER_LEN};
use super::RecordError;
use crate::format::escape;
use crate::model::snapshot::SCHEMA_VERSION;
use crate::model::Snapshot;

/// Where the bytes come from: a file, read piece by piece, or bytes in memory (the demo).
enum Source {
    File { file: File, len: u64 },
    Bytes(Cow<'static, [u8]>),
}

impl Source {
    fn len(&self) -> u64 {
        match self {
            Source::File { len, .. } => *len,
            Source::Bytes(bytes) => bytes.len() as u64,
        }
    }

    /// Fills as much of `buf` as the source has from `offset`; returns how much.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Bytes(bytes) => {
                let start = (offset as usize).min(bytes.len());
                let n = buf.len().min(bytes.len() - start);
                buf[..n].copy_from_slice(&bytes[start..start + n]);
                Ok(n)
            }
            Source::File { file, .. } => {
                let mut done = 0;
                while done < buf.len() {
                    match file.read_at(&mut buf[done..], offset + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(done)
            }
        }
    }
}

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

struct BlockInfo {
    /// Where its zstd stream starts in the file.
    data_start: u64,
}

/// How a block's zstd stream ended while it was read.
enum Ended {
    Complete { consumed: u64, crc: u32 },
    Cut,
    Damaged(String),
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
}

/// "HH:MM:SS" (UTC) of a Unix time.
pub(crate) fn clock(t: f64) -> String {
    let full = rfc3339(t);
    full.split_once('T')
        .map(|(_, rest)| rest.chars().take(8).collect())
        .unwrap_or(full)
}

/// The RFC 3339 time (UTC, whole seconds) of a Unix time.
pub(crate) fn rfc3339(t: f64) -> String {
    let t = if t.is_finite() {
        t.clamp(0.0, 1e11)
    } else {
        0.0
    };
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(t);
    humantime::format_rfc3339_seconds(time).to_string()
}

impl Recording {
    pub fn open(path: &Path) -> Result<Recording, RecordError> {
        let name = escape(&path.display().to_string()).into_owned();
        let file =
            File::open(path).map_err(|e| RecordError(format!("could not open {name}: {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| RecordError(format!("could not read {name}: {e}")))?
            .len();
        Self::load(Source::File { file, len }, name)
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

    /// Reads every block from `pos` on, building the index and the list of issues.
    fn scan(&mut self, mut pos: u64) -> Result<(), RecordError> {
        let len = self.source.len();
        while pos < len {
            let mut header = [0u8; BLOCK_HEADER_LEN];
            let n = self
                .source
                .read_at(pos, &mut header)
                .map_err(|e| self.io(e))?;
            if n < BLOCK_HEADER_LEN {
                self.issue_cut(None);
                return Ok(());
            }
            if format::read_block_header(&header).is_none() {
                match self.find_block(pos + 1)? {
                    Some(next) => {
                        self.issues.push(format!(
                            "{}: bytes {pos} to {next} are damaged (no block starts there) and were skipped{}",
                            self.name,
                            self.gap_times(next)
                        ));
                        pos = next;
                        continue;
                    }
                    None => {
                        self.issues.push(format!(
                            "{}: the bytes from {pos} to the end ({len}) are damaged and were skipped{}",
                            self.name,
                            self.after_last()
                        ));
                        return Ok(());
                    }
                }
            }
            match self.scan_block(pos)? {
                Some(next) => pos = next,
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// Indexes the block whose header is at `pos`; returns where to go on, or `None` to stop.
    fn scan_block(&mut self, pos: u64) -> Result<Option<u64>, RecordError> {
        let data_start = pos + BLOCK_HEADER_LEN as u64;
        let block = self.blocks.len() as u32;
        let (bytes, ended) = self.decompress(data_start).map_err(|e| self.io(e))?;
        let before = self.frames.len();
        let frame_problem = self.index_frames(block, &bytes);
        self.blocks.push(BlockInfo { data_start });
        let kept = self.frames.len() - before;
        let number = block + 1;
        match (ended, frame_problem) {
            (Ended::Complete { consumed, crc }, None) => {
                self.check_trailer(number, data_start + consumed, consumed, crc, kept)
            }
            (Ended::Cut, _) => {
                self.issue_cut(Some(number));
                Ok(None)
            }
            (Ended::Complete { .. }, Some(why)) | (Ended::Damaged(why), _) => {
                let next = self.find_block(data_start)?;
                self.issues.push(format!(
                    "{}: block {number} (at byte {pos}) is damaged ({why}); {}{}",
                    self.name,
                    self.kept_sentence(kept),
                    match next {
                        Some(next) => self.gap_times(next),
                        None => self.after_last(),
                    }
                ));
                Ok(next)
            }
        }
    }

    /// Checks a whole block's trailer; its frames are kept either way (each has its checksum).
    fn check_trailer(
        &mut self,
        number: u32,
        at: u64,
        consumed: u64,
        crc: u32,
        kept: usize,
    ) -> Result<Option<u64>, RecordError> {
        let mut bytes = [0u8; TRAILER_LEN];
        let n = self
            .source
            .read_at(at, &mut bytes)
            .map_err(|e| self.io(e))?;
        if n < TRAILER_LEN {
            self.issue_cut(Some(number));
            return Ok(None);
        }
        match format::read_trailer(&bytes) {
            Some(t)
                if t.compressed_len == consumed
                    && t.compressed_crc == crc
                    && t.frames as usize == kept =>
            {
                Ok(Some(at + TRAILER_LEN as u64))
            }
            _ => {
                let next = self.find_block(at)?;
                self.issues.push(format!(
                    "{}: the end of block {number} (at byte {at}) is damaged; its {kept} frames were \
                     kept, as each has its own checksum",
                    self.name
                ));
                Ok(next)
            }
        }
    }

    fn kept_sentence(&self, kept: usize) -> String {
        match (kept, self.frames.last()) {
            (0, _) | (_, None) => "none of its frames could be read".to_string(),
            (n, Some(last)) => format!(
                "its first {n} frames were kept (up to {}) and the rest was skipped",
                clock(last.time)
            ),
        }
    }

    /// " (HH:MM:SS to HH:MM:SS are missing)" between the last frame and the block at `next`.
    fn gap_times(&self, next: u64) -> String {
        let mut header = [0u8; BLOCK_HEADER_LEN];
        let resumes = match self.source.read_at(next, &mut header) {
            Ok(BLOCK_HEADER_LEN) => format::read_block_header(&header).map(|(_, t)| t),
            _ => None,
        };
        match (self.frames.last(), resumes) {
            (Some(last), Some(resumes)) => format!(
                ": nothing between {} and {} could be replayed",
                clock(last.time),
                clock(resumes)
            ),
            (None, Some(resumes)) => format!(": replay starts at {}", clock(resumes)),
            _ => String::new(),
        }
    }

    fn after_last(&self) -> String {
        match self.frames.last() {
            Some(last) => format!(": the replay ends at {}", clock(last.time)),
            None => String::new(),
        }
    }

    /// The file ends inside block `block` (or between blocks).
    fn issue_cut(&mut self, block: Option<u32>) {
        let until = match self.frames.last() {
            Some(last) => format!("it replays up to {}", clock(last.time)),
            None => "it holds no complete frame".to_string(),
        };
        let inside = block
            .map(|b| format!(" inside block {b}"))
            .unwrap_or_default();
        self.issues.push(format!(
            "{} is cut off at byte {}{inside} (torchtop was stopped without closing it: killed, \
             a crash, a full disk, or it is still being written); {until}",
            self.name,
            self.source.len()
        ));
    }

    /// The next offset at or after `from` where a valid block header starts.
    fn find_block(&self, from: u64) -> Result<Option<u64>, RecordError> {
        const CHUNK: usize = 1 << 20;
        let mut buf = vec![0u8; CHUNK + BLOCK_HEADER_LEN];
        let mut pos = from;
        while pos < self.source.len() {
            let n = self.source.read_at(pos, &mut buf).map_err(|e| self.io(e))?;
            let window = &buf[..n];
            for i in memchr_all(window, format::BLOCK_MAGIC[0]) {
                if i >= CHUNK {
                    break;
                }
                if format::read_block_header(&window[i..]).is_some() {
                    return Ok(Some(pos + i as u64));
                }
            }
            pos += CHUNK as u64;
        }
        Ok(None)
    }

    /// Adds the frames of one decompressed block to the index; says why it stopped early.
    fn index_frames(&mut self, block: u32, bytes: &[u8]) -> Option<String> {
        let mut at = 0;
        loop {
            match format::next_frame(bytes, at) {
                Next::End => return None,
                Next::Cut => return Some("its last frame is incomplete".into()),
                Next::Damaged(why) => return Some(why),
                Next::Frame(record) => {
                    let first = at == 0;
                    if first && !record.head.key {
                        return Some("it does not start with a key frame".into());
                    }
                    self.frames.push(FrameInfo {
                        time: record.head.time,
                        marks: record.head.marks,
                        key: record.head.key,
                        block,
                        body_start: record.body_start as u32,
                        body_end: record.body_end as u32,
                    });
                    at = record.next;
                }
            }
        }
    }

    /// Decompresses the zstd stream at `start` as far as it goes. zstd drops the output of the
    /// call that meets damage, so a damaged stream is read again a byte at a time, to keep every
    /// frame before the damage.
    fn decompress(&self, start: u64) -> std::io::Result<(Vec<u8>, Ended)> {
        let (out, ended) = self.decompress_by(start, 64 << 10)?;
        match ended {
            Ended::Damaged(_) => self.decompress_by(start, 1),
            ended => Ok((out, ended)),
        }
    }

    fn decompress_by(&self, start: u64, step: usize) -> std::io::Result<(Vec<u8>, Ended)> {
        let mut dctx = DCtx::create();
        let mut out = Vec::new();
        let mut chunk = vec![0u8; 64 << 10];
        let mut buffer = vec![0u8; DCtx::out_size()];
        let mut crc = crc32fast::Hasher::new();
        let mut pos = start;
        loop {
            let n = self.source.read_at(pos, &mut chunk)?;
            if n == 0 {
                return Ok((out, Ended::Cut));
            }
            for piece_start in (0..n).step_by(step) {
                let piece = &chunk[piece_start..n.min(piece_start + step)];
                match decompress_piece(&mut dctx, piece, &mut buffer, &mut out) {
                    Piece::More => {}
                    Piece::Damaged(why) => return Ok((out, Ended::Damaged(why))),
                    Piece::Done(used) => {
                        crc.update(&chunk[..piece_start + used]);
                        let consumed = pos - start + (piece_start + used) as u64;
                        let crc = crc.finalize();
                        return Ok((out, Ended::Complete { consumed, crc }));
                    }
                }
            }
            crc.update(&chunk[..n]);
            pos += n as u64;
        }
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
            cursor.at = None;
            let frames: Vec<FrameInfo> = self.frames[from..=i].to_vec();
            let bytes = self.block_bytes(target.block)?;
            for frame in frames {
                let body = bytes
                    .get(frame.body_start as usize..frame.body_end as usize)
                    .unwrap_or_default();
                cursor
                    .decoder
                    .decode(frame.key, body)
                    .map_err(|e| undecodable(&frame, &e.0))?;
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

/// What feeding one piece of input to zstd gave.
enum Piece {
    More,
    Damaged(String),
    /// The stream ended after this many bytes of the piece.
    Done(usize),
}

fn decompress_piece(dctx: &mut DCtx, piece: &[u8], buffer: &mut [u8], out: &mut Vec<u8>) -> Piece {
    let mut input = InBuffer::around(piece);
    loop {
        let mut output = OutBuffer::around(&mut buffer[..]);
        let result = dctx.decompress_stream(&mut output, &mut input);
        let produced = output.pos();
        out.extend_from_slice(&buffer[..produced]);
        if out.len() > format::MAX_BLOCK_BYTES {
            return Piece::Damaged(format!(
                "it holds more than {} MiB",
                format::MAX_BLOCK_BYTES >> 20
            ));
        }
        match result {
            Err(code) => {
                return Piece::Damaged(format!("zstd: {}", zstd::zstd_safe::get_error_name(code)))
            }
            Ok(0) => return Piece::Done(input.pos()),
            Ok(_) if input.pos() == piece.len() && produced < buffer.len() => return Piece::More,
            Ok(_) => {}
        }
    }
}

fn undecodable(frame: &FrameInfo, why: &str) -> RecordError {
    RecordError(format!(
        "the frame at {} cannot be decoded ({why})",
        clock(frame.time)
    ))
}

fn memchr_all(haystack: &[u8], needle: u8) -> impl Iterator<Item = usize> + '_ {
    haystack
        .iter()
        .enumerate()
        .filter(move |(_, b)| **b == needle)
        .map(|(i, _)| i)
}

fn header_error(name: &str, error: HeaderError, len: usize) -> RecordError {
    let mine = env!("CARGO_PKG_VERSION");
    RecordError(match error {
        HeaderError::NotARecording if len == 0 => {
            format!("{name} is empty: the recording never got its first frame")
        }
        HeaderError::NotARecording => format!(
            "{name} is not a torchtop recording (it does not start with a recording's header)"
        ),
        HeaderError::Newer { version, writer } => {
            let by = writer.map(|w| escape(&w).into_owned()).unwrap_or_else(|| "a newer torchtop".into());
            format!(
                "{name} was written by torchtop {by} in recording format {version}; this torchtop \
                 ({mine}) reads format {}: replay it with torchtop {by} or later",
                format::FORMAT_VERSION
            )
        }
        HeaderError::Cut => format!(
            "{name} is cut off inside its header ({len} bytes): the recording never got its first frame"
        ),
        HeaderError::Damaged(why) => {
            format!("{name} has a damaged header ({why}), so it cannot be replayed")
        }
    })
}
