//! The byte source of the unpickler: buffered reads that count the offset, and declared
//! lengths checked against what remains of the input before anything is allocated for them.

use std::io::{self, BufRead, Read};

use super::{Error, Result};

/// A declared length this far past the end of the file reads as a cut file; further, as a
/// corrupt or crafted one.
const PLAUSIBLY_CUT: u64 = 16 << 20;
/// GLOBAL's module and name lines; real ones are a few dozen bytes.
const MAX_LINE: usize = 4096;

/// The byte source: buffered, counting its offset, and knowing what remains when it can.
pub(super) struct Input<R> {
    pub(super) inner: R,
    pub(super) offset: u64,
    pub(super) len: Option<u64>,
}

impl<R: BufRead> Input<R> {
    pub(super) fn byte(&mut self) -> Result<u8> {
        let buf = self.inner.fill_buf()?;
        let Some(&byte) = buf.first() else {
            return Err(Error::Truncated(self.offset));
        };
        self.inner.consume(1);
        self.offset += 1;
        Ok(byte)
    }

    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        let buf = self.inner.fill_buf()?;
        if buf.len() >= N {
            out.copy_from_slice(&buf[..N]);
            self.inner.consume(N);
        } else {
            self.inner
                .read_exact(&mut out)
                .map_err(|e| match e.kind() {
                    io::ErrorKind::UnexpectedEof => Error::Truncated(self.offset),
                    _ => Error::Io(e),
                })?;
        }
        self.offset += N as u64;
        Ok(out)
    }

    /// Reads a declared number of bytes into `out`, refusing lengths the input cannot hold.
    pub(super) fn bytes(&mut self, declared: u64, out: &mut Vec<u8>) -> Result<()> {
        if let Some(len) = self.len {
            let remaining = len.saturating_sub(self.offset);
            if declared > remaining && declared - remaining <= PLAUSIBLY_CUT {
                return Err(Error::Truncated(len));
            }
            if declared > remaining {
                return Err(Error::HugeLength {
                    offset: self.offset,
                    declared,
                    remaining,
                });
            }
        }
        out.clear();
        let buffered = self.inner.fill_buf()?;
        if let Some(bytes) = buffered.get(..declared.try_into().unwrap_or(usize::MAX)) {
            out.extend_from_slice(bytes);
            self.inner.consume(out.len());
            self.offset += declared;
            return Ok(());
        }
        // Without a known length, the buffer grows only as bytes actually arrive.
        let got = (&mut self.inner).take(declared).read_to_end(out)? as u64;
        self.offset += got;
        if got < declared {
            return Err(Error::Truncated(self.offset));
        }
        Ok(())
    }

    pub(super) fn line(&mut self, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        let got = (&mut self.inner)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', out)?;
        self.offset += got as u64;
        match out.pop() {
            Some(b'\n') => Ok(()),
            _ if got > MAX_LINE => Err(Error::Malformed {
                offset: self.offset,
                what: "a GLOBAL name longer than 4096 bytes",
            }),
            _ => Err(Error::Truncated(self.offset)),
        }
    }
}
