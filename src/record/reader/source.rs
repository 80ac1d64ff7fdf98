//! Where a recording's bytes come from: a file, read piece by piece at any offset, or bytes in
//! memory (the demo, built into the binary).

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Where the bytes come from: a file, read piece by piece, or bytes in memory (the demo).
pub(super) enum Source {
    File { file: File, len: u64 },
    Bytes(Cow<'static, [u8]>),
}

impl Source {
    pub(super) fn len(&self) -> u64 {
        match self {
            Source::File { len, .. } => *len,
            Source::Bytes(bytes) => bytes.len() as u64,
        }
    }

    /// Fills as much of `buf` as the source has from `offset`; returns how much.
    pub(super) fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
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
