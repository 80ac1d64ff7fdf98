//! Splits an agent's byte stream into lines of at most [`MAX_LINE_BYTES`], in time linear in
//! the bytes received: each byte is scanned for a newline once, however slowly a line arrives,
//! and a complete line is handed out in place, without a copy.

use super::MAX_LINE_BYTES;

/// A buffer that keeps more than this once its line is done is given back to the allocator, so
/// one long line does not pin a megabyte per connection for the rest of the run.
const KEEP_CAPACITY: usize = 64 * 1024;

/// Why a stream was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TooLong;

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a line is longer than {MAX_LINE_BYTES} bytes")
    }
}

/// The unfinished line of one connection.
#[derive(Default)]
pub(crate) struct LineSplitter {
    pending: Vec<u8>,
    /// Bytes ever scanned for a newline: the splitter's work, which tests hold to O(input).
    examined: u64,
}

impl LineSplitter {
    /// Appends `data` and calls `on_line` with each line it completes (newline excluded; blank
    /// lines skipped). Stops at the first `Err` from `on_line` and returns it.
    pub(crate) fn push<E>(
        &mut self,
        data: &[u8],
        mut on_line: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), SplitError<E>> {
        let mut rest = data;
        while let Some(newline) = memchr::memchr(b'\n', rest) {
            self.examined += newline as u64 + 1;
            if self.pending.len() + newline > MAX_LINE_BYTES {
                return Err(SplitError::TooLong(TooLong));
            }
            let (head, tail) = rest.split_at(newline);
            rest = &tail[1..];
            let outcome = if self.pending.is_empty() {
                emit(head, &mut on_line)
            } else {
                self.pending.extend_from_slice(head);
                let outcome = emit(&self.pending, &mut on_line);
                self.pending.clear();
                outcome
            };
            outcome.map_err(SplitError::Line)?;
        }
        self.examined += rest.len() as u64;
        if self.pending.len() + rest.len() > MAX_LINE_BYTES {
            return Err(SplitError::TooLong(TooLong));
        }
        self.pending.extend_from_slice(rest);
        if self.pending.is_empty() && self.pending.capacity() > KEEP_CAPACITY {
            self.pending = Vec::new();
        }
        Ok(())
    }

    /// Bytes of the unfinished line.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Memory the unfinished line holds, what the budget across connections counts.
    pub(crate) fn held_bytes(&self) -> usize {
        self.pending.capacity()
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
        match splitter.push(data, |line| {
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
    fn a_finished_long_line_gives_its_memory_back() {
        let mut s = LineSplitter::default();
        lines(&mut s, &vec![b'x'; 512 * 1024]).unwrap();
        assert!(s.held_bytes() >= 512 * 1024);
        lines(&mut s, b"\n").unwrap();
        assert_eq!(s.held_bytes(), 0);
    }

    #[test]
    fn the_callback_error_stops_the_split() {
        let mut s = LineSplitter::default();
        let mut seen = 0;
        let outcome = s.push(b"a\nb\nc\n", |_| {
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
