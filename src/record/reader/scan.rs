//! Opening a recording: every block is read in turn, and the index of its frames (time, marks,
//! where each lies) is built, with a sentence for each part that is cut off or damaged.

use super::blocks::Ended;
use super::{BlockInfo, FrameInfo, Recording};
use crate::record::format::{self, Next, BLOCK_HEADER_LEN, TRAILER_LEN};
use crate::record::writer::BLOCK_FRAMES;
use crate::record::RecordError;

/// The most frames read from one block: four times what the writer puts in one.
const MAX_BLOCK_FRAMES: usize = 4 * BLOCK_FRAMES as usize;

impl Recording {
    /// Reads every block from `pos` on, building the index and the list of issues.
    pub(super) fn scan(&mut self, mut pos: u64) -> Result<(), RecordError> {
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
                if let Some(next) = self.find_block(pos + 1)? {
                    // What was lost first (here and below): the status line of a replay cuts
                    // the end of a long sentence.
                    self.issues.push(format!(
                        "{}{}: bytes {pos} to {next} are damaged (no block starts there) and were skipped",
                        self.name,
                        self.gap_times(next)
                    ));
                    pos = next;
                    continue;
                }
                self.issues.push(format!(
                    "{}{}: the bytes from {pos} to the end ({len}) are damaged and were skipped",
                    self.name,
                    self.after_last()
                ));
                return Ok(());
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
                let lost = match next {
                    Some(next) => self.gap_times(next),
                    None => self.after_last(),
                };
                self.issues.push(format!(
                    "{}{lost}: block {number} (at byte {pos}) is damaged ({why}); {}",
                    self.name,
                    self.kept_sentence(kept),
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

    /// Adds the frames of one decompressed block to the index; says why it stopped early.
    /// A crafted block can hold millions of tiny frames in a few kilobytes of zstd, so the
    /// index is bounded twice: a block holds at most [`MAX_BLOCK_FRAMES`], and the file at
    /// most a frame for every two of its bytes (each frame carries a checksum of its own that
    /// does not compress, so a recording torchtop wrote needs at least four bytes a frame).
    fn index_frames(&mut self, block: u32, bytes: &[u8]) -> Option<String> {
        let mut at = 0;
        let first = self.frames.len();
        let most = usize::try_from(self.source.len() / 2).unwrap_or(usize::MAX);
        loop {
            if self.frames.len() - first >= MAX_BLOCK_FRAMES {
                return Some(format!(
                    "it holds more than {MAX_BLOCK_FRAMES} frames, which torchtop never writes"
                ));
            }
            if self.frames.len() >= most {
                return Some("it holds more frames than a file of this size can".into());
            }
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
}
