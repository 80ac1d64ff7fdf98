//! Splits an agent's byte stream into lines of at most [`MAX_LINE_BYTES`], in time linear in
//! the bytes received: each byte is scanned for a newline once, however slowly a line arrives,
//! and a line that arrived whole in one read is handed out in place, without a copy.
//!
//! An unfinished line is kept in pieces of [`CHUNK`] bytes rather than one growing buffer: the
//! memory it holds is its length rounded up to a piece, and pieces freed by one connection fit
//! the next one exactly, so hundreds of connections that come and go with long unfinished
//! lines do not fragment the heap into more than the budget they are held to.

use super::MAX_LINE_BYTES;

/// The size of the pieces an unfinished line is kept in.
pub(crate) const CHUNK: usize = 64 * 1024;

/// Why a stream was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a line is longer than {MAX_LINE_BYTES} bytes")]
pub(crate) struct TooLong;

/// The unfinished line of one connection.
#[derive(Default)]
pub(crate) struct LineSplitter {
    /// Each of capacity [`CHUNK`]; all full but the last.
    chunks: Vec<Vec<u8>>,
    pending: usize,
    /// Bytes ever scanned for a newline: the splitter's work, which tests hold to O(input).
    examined: u64,
}

impl LineSplitter {
    /// Appends `data` and calls `on_line` with each line it completes (newline excluded; blank
    /// lines skipped). A line that spans reads is put together in `scratch`, a buffer the
    /// caller keeps for all its splitters. Stops at the first `Err` from `on_line`.
    pub(crate) fn push<E>(
        &mut self,
        data: &[u8],
        scratch: &mut Vec<u8>,
        mut on_line: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), SplitError<E>> {
        let mut rest = data;
        while let Some(newline) = memchr::memchr(b'\n', rest) {
            self.examined += newline as u64 + 1;
            if self.pending + newline > MAX_LINE_BYTES {
                return Err(SplitError::TooLong(TooLong));
            }
            let (head, tail) = rest.split_at(newline);
            rest = &tail[1..];
            let outcome = if self.pending == 0 {
                emit(head, &mut on_line)
            } else {
                scratch.clear();
                for chunk in self.chunks.drain(..) {
                    scratch.extend_from_slice(&chunk);
                }
                scratch.extend_from_slice(head);
                self.pending = 0;
                emit(scratch, &mut on_line)
            };
            outcome.map_err(SplitError::Line)?;
        }
        self.examined += rest.len() as u64;
        if self.pending + rest.len() > MAX_LINE_BYTES {
            return Err(SplitError::TooLong(TooLong));
        }
        self.keep(rest);
        Ok(())
    }

    fn keep(&mut self, mut rest: &[u8]) {
        self.pending += rest.len();
        while !rest.is_empty() {
            let room = self.chunks.last().map_or(0, |c| CHUNK - c.len());
            if room == 0 {
                self.chunks.push(Vec::with_capacity(CHUNK));
                continue;
            }
            let (now, later) = rest.split_at(room.min(rest.len()));
            if let Some(chunk) = self.chunks.last_mut() {
                chunk.extend_from_slice(now);
            }
            rest = later;
        }
    }

    /// Bytes of the unfinished line.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending
    }

    /// Memory the unfinished line holds, what the budget across connections counts.
    pub(crate) fn held_bytes(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// Bytes ever scanned for a newline.
    #[cfg(test)]
    pub(crate) fn examined(&self) -> u64 {
        self.examined
    }
}

/// Why [`LineSplitter::push`] stopped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SplitError<E> {
    TooLong(TooLong),
    Line(E),
}

fn emit<E>(line: &[u8], on_line: &mut impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    on_line(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(splitter: &mut LineSplitter, data: &[u8]) -> Result<Vec<Vec<u8>>, TooLong> {
        let mut out = Vec::new();
        match splitter.push(data, &mut Vec::new(), |line| {
            out.push(line.to_vec());
            Ok::<(), ()>(())
        }) {
            Ok(()) => Ok(out),
            Err(SplitError::TooLong(e)) => Err(e),
            Err(SplitError::Line(())) => unreachable!(),
        }
    }

    #[test]
    fn splits_and_skips_blank_lines() {
        let mut s = LineSplitter::default();
        assert_eq!(lines(&mut s, b"ab").unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(lines(&mut s, b"c\n\n  \nd").unwrap(), vec![b"abc".to_vec()]);
        assert_eq!(s.pending_bytes(), 1);
        assert_eq!(
            lines(&mut s, b"e\nf\n").unwrap(),
            vec![b"de".to_vec(), b"f".to_vec()]
        );
        assert_eq!(s.pending_bytes(), 0);
    }

    #[test]
    fn the_limit_is_exact() {
        let mut s = LineSplitter::default();
        assert!(
            lines(&mut s, &vec![b'x'; MAX_LINE_BYTES]).is_ok(),
            "exactly the limit is fine"
        );
        assert_eq!(lines(&mut s, b"\n").unwrap().len(), 1);
        assert!(lines(&mut s, &vec![b'x'; MAX_LINE_BYTES + 1]).is_err());
        let mut s = LineSplitter::default();
        let mut long = vec![b'x'; MAX_LINE_BYTES + 1];
        long.push(b'\n');
        assert!(lines(&mut s, &long).is_err(), "a long line in one read");
        let mut s = LineSplitter::default();
        assert!(lines(&mut s, &vec![b'x'; MAX_LINE_BYTES - 1]).is_ok());
        assert!(lines(&mut s, b"yy\n").is_err(), "a long line across reads");
    }

    #[test]
    fn a_trickled_megabyte_line_is_scanned_once() {
        let mut s = LineSplitter::default();
        let line = vec![b'x'; MAX_LINE_BYTES];
        let mut got = Vec::new();
        for piece in line.chunks(7) {
            got.extend(lines(&mut s, piece).unwrap());
        }
        got.extend(lines(&mut s, b"\n").unwrap());
        assert_eq!(got, vec![line.clone()]);
        // Linear: every byte looked at once (a rescan per read would be ~75 billion).
        assert_eq!(s.examined(), MAX_LINE_BYTES as u64 + 1);
    }

    #[test]
    fn an_unfinished_line_holds_whole_pieces_until_it_ends() {
        let mut s = LineSplitter::default();
        lines(&mut s, &vec![b'x'; 512 * 1024 + 1]).unwrap();
        assert_eq!(s.held_bytes(), 512 * 1024 + CHUNK);
        for piece in [&b"ab"[..], &vec![b'y'; CHUNK * 2][..]] {
            lines(&mut s, piece).unwrap();
        }
        assert_eq!(s.pending_bytes(), 512 * 1024 + 3 + CHUNK * 2);
        let done = lines(&mut s, b"z\nrest").unwrap();
        assert_eq!(done[0].len(), 512 * 1024 + 4 + CHUNK * 2);
        assert!(done[0].ends_with(b"yyz") && done[0][512 * 1024..].starts_with(b"xab"));
        assert_eq!((s.pending_bytes(), s.held_bytes()), (4, CHUNK));
    }

    #[test]
    fn the_callback_error_stops_the_split() {
        let mut s = LineSplitter::default();
        let mut seen = 0;
        let outcome = s.push(b"a\nb\nc\n", &mut Vec::new(), |_| {
            seen += 1;
            if seen == 2 {
                Err("bad")
            } else {
                Ok(())
            }
        });
        assert_eq!(outcome, Err(SplitError::Line("bad")));
        assert_eq!(seen, 2);
    }
}
