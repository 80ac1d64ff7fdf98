//! One block's compressed stream: decompressed as far as it goes, and the next block header
//! found past damage.

use zstd::zstd_safe::{DCtx, InBuffer, OutBuffer};

use super::Recording;
use crate::record::format::{self, BLOCK_HEADER_LEN};
use crate::record::RecordError;

/// How a block's zstd stream ended while it was read.
pub(super) enum Ended {
    Complete { consumed: u64, crc: u32 },
    Cut,
    Damaged(String),
}

impl Recording {
    /// The next offset at or after `from` where a valid block header starts.
    pub(super) fn find_block(&self, from: u64) -> Result<Option<u64>, RecordError> {
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

    /// Decompresses the zstd stream at `start` as far as it goes. zstd drops the output of the
    /// call that meets damage, so a damaged stream is read again a byte at a time, to keep every
    /// frame before the damage.
    pub(super) fn decompress(&self, start: u64) -> std::io::Result<(Vec<u8>, Ended)> {
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

fn memchr_all(haystack: &[u8], needle: u8) -> impl Iterator<Item = usize> + '_ {
    haystack
        .iter()
        .enumerate()
        .filter(move |(_, b)| **b == needle)
        .map(|(i, _)| i)
}
