//! The sentences a reader says about a recording: times as people read them, what a cut-off
//! or damaged part lost, and why a file cannot be replayed at all.

use super::{FrameInfo, Recording};
use crate::format::escape;
use crate::record::format::{self, HeaderError, BLOCK_HEADER_LEN};
use crate::record::RecordError;

/// "HH:MM:SS UTC" of a Unix time. These sentences are made while the file is read, before
/// any screen's zone is known, so they name theirs.
fn clock(t: f64) -> String {
    crate::format::clock::clock_named(t, &jiff::tz::TimeZone::UTC)
}

impl Recording {
    pub(super) fn kept_sentence(&self, kept: usize) -> String {
        match (kept, self.frames.last()) {
            (0, _) | (_, None) => "none of its frames could be read".to_string(),
            (n, Some(last)) => format!(
                "its first {n} frames were kept (up to {}) and the rest was skipped",
                clock(last.time)
            ),
        }
    }

    /// ": nothing between HH:MM:SS and HH:MM:SS could be replayed", between the last frame and
    /// the block at `next`; it goes right after the file's name, before what was damaged.
    pub(super) fn gap_times(&self, next: u64) -> String {
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

    pub(super) fn after_last(&self) -> String {
        match self.frames.last() {
            Some(last) => format!(": the replay ends at {}", clock(last.time)),
            None => String::new(),
        }
    }

    /// The file ends inside block `block` (or between blocks).
    pub(super) fn issue_cut(&mut self, block: Option<u32>) {
        let until = match self.frames.last() {
            Some(last) => format!("it replays up to {}", clock(last.time)),
            None => "it holds no complete frame".to_string(),
        };
        let inside = block
            .map(|b| format!(" inside block {b}"))
            .unwrap_or_default();
        // What was lost before why: the status line of a replay cuts the end of a long one.
        self.issues.push(format!(
            "{} is cut off at byte {}{inside}; {until} (torchtop was stopped without closing it: \
             killed, a crash, a full disk, or it is still being written)",
            self.name,
            self.source.len()
        ));
    }
}

pub(super) fn undecodable(frame: &FrameInfo, why: &str) -> RecordError {
    RecordError(format!(
        "the frame at {} cannot be decoded ({why})",
        clock(frame.time)
    ))
}

pub(super) fn header_error(name: &str, error: HeaderError, len: usize) -> RecordError {
    let mine = env!("CARGO_PKG_VERSION");
    RecordError(match error {
        HeaderError::NotARecording if len == 0 => {
            format!("{name} is empty: the recording never got its first frame")
        }
        HeaderError::NotARecording => format!(
            "{name} is not a torchtop recording (it does not start with a recording's header)"
        ),
        HeaderError::Newer { version, writer } => {
            let by = writer.map_or_else(|| "a newer torchtop".into(), |w| escape(&w).into_owned());
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
