//! A disk that refuses writes (full, over quota, a file size limit, an I/O error): the
//! recording goes on as well as it can, as a long-running logger's should.
//!
//! The frame whose write failed, and those after it, are dropped (never queued: the memory a
//! long outage takes stays that of one frame). The file is cut back at once to what reached it
//! whole, so that a recorder killed during the outage leaves a file that replays up to its
//! last flush. Every [`RETRY_EVERY`] the writer tries again: it ends the block the failure
//! broke at its last flush (an empty last zstd block and the trailer, so the block reads as
//! whole), then writes the frame of the moment in a new block, starting with a key frame, and
//! flushes it at once. The recording then has a gap in time, and no damage.
//! [`DiskEvent`] says when writing stopped, and when it works again how long it did not.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use jiff::tz::TimeZone;

use super::files::io_error;
use super::FileWriter;
use crate::format::{clock, escape};
use crate::record::format::{self, Trailer, TRAILER_LEN};
use crate::record::RecordError;

/// How often writing is tried again while the disk refuses it.
pub(crate) const RETRY_EVERY: Duration = Duration::from_secs(5);

/// The end of a zstd frame cut after a flush: an empty raw block marked last (RFC 8878, 3.1.1.2;
/// what zstd itself writes to end a frame after a flush). A block's frames have no zstd
/// checksum ([`FileWriter`] turns it off), so this is all the frame lacks.
const END_OF_ZSTD_FRAME: [u8; 3] = [0x01, 0x00, 0x00];

/// Why a write did not happen.
pub(super) enum Fault {
    /// The disk refused it (the sentence says what and why): tried again later.
    Disk(String),
    /// No retry mends it (a snapshot with no JSON form, zstd failing).
    Fatal(RecordError),
}

/// What of a block is in the file.
#[derive(Clone)]
pub(super) struct OnDisk {
    /// Where its header starts in the file.
    pub(super) start: u64,
    /// Its frames in the file.
    pub(super) frames: u32,
    compressed: u64,
    crc: crc32fast::Hasher,
    /// Its zstd frame is ended in the file (only the trailer may be missing).
    pub(super) ended: bool,
}

impl OnDisk {
    pub(super) fn new(start: u64) -> Self {
        OnDisk {
            start,
            frames: 0,
            compressed: 0,
            crc: crc32fast::Hasher::new(),
            ended: false,
        }
    }

    /// `bytes` of the zstd frame reached the file, and with them its first `frames` frames.
    pub(super) fn add(&mut self, bytes: &[u8], frames: u32, ended: bool) {
        self.crc.update(bytes);
        self.compressed += bytes.len() as u64;
        self.frames = frames;
        self.ended |= ended;
    }

    pub(super) fn trailer(&self) -> [u8; TRAILER_LEN] {
        format::trailer(Trailer {
            frames: self.frames,
            compressed_len: self.compressed,
            compressed_crc: self.crc.clone().finalize(),
        })
    }

    /// The bytes that end the block where the file holds it: the end of its zstd frame unless
    /// it has one, then its trailer. `None` when none of its frames is in the file: the block
    /// is then cut off whole, from its header on.
    pub(super) fn closing(&self) -> Option<Vec<u8>> {
        if self.frames == 0 {
            return None;
        }
        let mut ended = self.clone();
        let mut bytes = Vec::with_capacity(END_OF_ZSTD_FRAME.len() + TRAILER_LEN);
        if !ended.ended {
            ended.add(&END_OF_ZSTD_FRAME, self.frames, true);
            bytes.extend_from_slice(&END_OF_ZSTD_FRAME);
        }
        bytes.extend_from_slice(&ended.trailer());
        Some(bytes)
    }
}

/// The disk refuses writes since `since`.
pub(super) struct Outage {
    pub(super) since: Instant,
    pub(super) next_try: Instant,
    /// [`FileWriter::lost`] before the outage.
    pub(super) lost_before: u64,
    /// The block the failure broke, to be ended before anything else is written.
    pub(super) broken_block: Option<OnDisk>,
    /// The time of the last frame in the file when the outage began.
    pub(super) last_time: Option<f64>,
}

/// A change in whether the disk takes the recording's writes.
#[derive(Debug, Clone, PartialEq)]
pub enum DiskEvent {
    /// A write was refused: snapshots are dropped until writing works again.
    Failed {
        error: String,
        retry_every: Duration,
    },
    /// Writing works again.
    Resumed {
        path: PathBuf,
        /// How long writing did not work.
        down: Duration,
        /// Snapshots that never reached the file.
        dropped: u64,
        /// The last frame in the file before the gap (`None`: there was none).
        last_before: Option<f64>,
        /// The first frame after it.
        first_after: f64,
    },
}

impl DiskEvent {
    /// The sentence for people, its times in `zone`.
    pub(crate) fn sentence(&self, zone: &TimeZone) -> String {
        match self {
            DiskEvent::Failed { error, retry_every } => format!(
                "{error}; the monitor goes on, and the recording drops its snapshots until it \
                 can write again (tried every {} s)",
                retry_every.as_secs_f64()
            ),
            DiskEvent::Resumed {
                path,
                down,
                dropped,
                last_before,
                first_after,
            } => {
                let gap = match last_before {
                    Some(t) => format!(
                        "from {} to {}",
                        clock::clock(*t, zone),
                        clock::clock_named(*first_after, zone)
                    ),
                    None => format!("before {}", clock::clock_named(*first_after, zone)),
                };
                format!(
                    "writing to {} works again after {}: {dropped} snapshots were dropped, and \
                     the recording has a gap {gap}",
                    escape(&path.display().to_string()),
                    crate::format::span(down.as_secs_f64()),
                )
            }
        }
    }
}

/// "03:10:04 UTC", the last frame in the file, for a sentence; local time.
pub(super) fn last_frame_text(time: Option<f64>) -> String {
    match time {
        Some(t) => clock::clock_named(t, &clock::zone(false)),
        None => "its start: no frame reached it".to_string(),
    }
}

impl FileWriter {
    /// A write the disk refused (a fatal fault is returned as it is): the file is cut back to
    /// what reached it whole, and the broken block is kept to be ended once writing works.
    pub(super) fn fail(
        &mut self,
        fault: Fault,
        lost_before: u64,
    ) -> Result<Option<DiskEvent>, RecordError> {
        let error = match fault {
            Fault::Fatal(error) => return Err(error),
            Fault::Disk(error) => error,
        };
        // Half a flush must not stay in the file should torchtop be killed before it writes
        // again; shrinking a file takes no room. Tried again before the next write if it fails.
        let _ = self.cut_back_to(self.written);
        let broken = self.block.take().map(|block| block.on_disk);
        // The next frame is marked against the last one in the file, not one that was lost.
        self.previous.clone_from(&self.previous_on_disk);
        let next_try = Instant::now() + self.retry_every;
        if let Some(outage) = &mut self.outage {
            outage.next_try = next_try;
            if broken.is_some() {
                outage.broken_block = broken;
            }
            return Ok(None);
        }
        self.outage = Some(Outage {
            since: Instant::now(),
            next_try,
            lost_before,
            broken_block: broken,
            last_time: self.last_time_on_disk,
        });
        Ok(Some(DiskEvent::Failed {
            error,
            retry_every: self.retry_every,
        }))
    }

    /// Makes the file whole after a refused write: cuts off what the write left, ends the
    /// block it broke at its last flush (or removes it when none of its frames reached the
    /// file), and starts the next file if one was due. Tried again until it works.
    pub(super) fn repair(&mut self) -> Result<(), Fault> {
        self.cut_back_to(self.written)?;
        let broken = self.outage.as_ref().and_then(|o| o.broken_block.clone());
        if let Some(broken) = broken {
            if let Some(bytes) = broken.closing() {
                self.put(&bytes)?;
            } else {
                self.cut_back_to(broken.start)?;
                self.written = broken.start;
            }
            if let Some(outage) = &mut self.outage {
                outage.broken_block = None;
            }
        }
        if self.next_file_due {
            self.start_next_file()?;
        }
        Ok(())
    }

    /// The outage is over: what it cost.
    pub(super) fn resumed(&mut self, time: f64) -> Option<DiskEvent> {
        let outage = self.outage.take()?;
        Some(DiskEvent::Resumed {
            path: self.options.path.clone(),
            down: outage.since.elapsed(),
            dropped: self.lost().saturating_sub(outage.lost_before),
            last_before: outage.last_time,
            first_after: time,
        })
    }

    /// Cuts the file back to `len` bytes and goes on writing there.
    pub(super) fn cut_back_to(&mut self, len: u64) -> Result<(), Fault> {
        use std::io::{Seek, SeekFrom};
        self.file
            .set_len(len)
            .and_then(|()| self.file.seek(SeekFrom::Start(len)).map(|_| ()))
            .map_err(|e| Fault::Disk(io_error(&self.options.path, "cut back", &e).0))
    }

    /// Tries writing again after this long during an outage, instead of [`RETRY_EVERY`].
    #[cfg(test)]
    pub(crate) fn with_retry_every(mut self, every: Duration) -> Self {
        self.retry_every = every;
        self
    }

    /// Writes through `room`, which a test fills and empties as a disk fills up.
    #[cfg(test)]
    pub(crate) fn with_room(mut self, room: Room) -> Self {
        self.room = Some(room);
        self
    }
}

/// A test's disk: `None` takes every write, `Some(n)` the next `n` bytes, then refuses the rest
/// with ENOSPC after writing the part that fits, as a full disk does.
#[cfg(test)]
#[derive(Debug, Clone, Default)]
pub(crate) struct Room(std::sync::Arc<std::sync::Mutex<Option<u64>>>);

#[cfg(test)]
impl Room {
    pub(crate) fn set(&self, bytes: Option<u64>) {
        *self.0.lock().unwrap() = bytes;
    }

    pub(super) fn write(&self, file: &mut std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let mut room = self.0.lock().unwrap();
        let Some(left) = *room else {
            return file.write_all(bytes);
        };
        let fits = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
        file.write_all(&bytes[..fits])?;
        *room = Some(left - fits as u64);
        if fits < bytes.len() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }
}
