//! The file's layout: the header, the block header and trailer, and the frame records inside a
//! block's compressed stream. Described for people in `assets/recording-format.md`.

use serde::{Deserialize, Serialize};

use super::codec::{self, Corrupt, Result};

/// The first eight bytes of every recording.
pub(crate) const MAGIC: &[u8; 8] = b"\x89TTREC\r\n";
/// The recording format this torchtop writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// A header's description may be at most this long.
pub(crate) const MAX_META: usize = 64 * 1024;
/// The start of a block.
pub(crate) const BLOCK_MAGIC: &[u8; 4] = b"TTBK";
/// The end of a block.
pub(crate) const TRAILER_MAGIC: &[u8; 4] = b"TTEN";
pub(crate) const BLOCK_HEADER_LEN: usize = 20;
pub(crate) const TRAILER_LEN: usize = 24;
/// A block's frames may take at most this much once decompressed; a reader refuses more.
pub(crate) const MAX_BLOCK_BYTES: usize = 64 << 20;
/// One frame record may be at most this long.
pub(crate) const MAX_FRAME_BYTES: usize = 32 << 20;
/// The refresh intervals `record -d` accepts, 0.1 s to a day.
pub(crate) const INTERVALS: std::ops::RangeInclusive<f64> = 0.1..=86_400.0;
/// The times a frame may carry, in seconds since the epoch: up to the year 5138. A time
/// outside them (NaN, negative, 1e300) is damage, and no frame time may reach a `Duration`
/// it cannot hold.
const FRAME_TIMES: std::ops::RangeInclusive<f64> = 0.0..=1e11;

/// What the header says about the recording, as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub(crate) struct Meta {
    /// The torchtop version that wrote the file.
    pub(crate) torchtop: String,
    pub(crate) host: Option<String>,
    /// The refresh interval of the sampler.
    pub(crate) interval_seconds: f64,
    /// When the recording started, RFC 3339.
    pub(crate) started: String,
    /// The `--json` schema of the snapshots inside.
    pub(crate) snapshot_schema: u32,
    /// A key frame comes at least this often, in frames.
    pub(crate) key_every: u32,
}

pub(crate) fn put_header(out: &mut Vec<u8>, meta: &Meta) {
    let json = serde_json::to_vec(meta).unwrap_or_default();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    let crc = crc32fast::hash(out);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Why a header cannot be read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum HeaderError {
    NotARecording,
    /// Written in a later format; the torchtop version that wrote it, when readable.
    Newer {
        version: u32,
        writer: Option<String>,
    },
    Cut,
    Damaged(String),
}

fn le32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
}

fn le64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
}

/// Reads the header from the first bytes of a file; returns it and its length.
pub(crate) fn read_header(bytes: &[u8]) -> std::result::Result<(Meta, usize), HeaderError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(if MAGIC.starts_with(bytes) && !bytes.is_empty() {
            HeaderError::Cut
        } else {
            HeaderError::NotARecording
        });
    }
    if bytes.len() < 16 {
        return Err(HeaderError::Cut);
    }
    let version = le32(&bytes[8..]);
    let len = le32(&bytes[12..]) as usize;
    let json = bytes.get(16..16 + len.min(MAX_META));
    if version != FORMAT_VERSION {
        // Later formats keep the magic, the version and the JSON description in place.
        let writer = json
            .and_then(|j| serde_json::from_slice::<serde_json::Value>(j).ok())
            .and_then(|v| v.get("torchtop")?.as_str().map(str::to_string));
        return Err(HeaderError::Newer { version, writer });
    }
    if len > MAX_META {
        return Err(HeaderError::Damaged(format!(
            "its description claims {len} bytes"
        )));
    }
    let Some(stored) = bytes.get(16 + len..20 + len) else {
        return Err(HeaderError::Cut);
    };
    if crc32fast::hash(&bytes[..16 + len]) != le32(stored) {
        return Err(HeaderError::Damaged("its checksum does not match".into()));
    }
    let meta: Meta = serde_json::from_slice(&bytes[16..16 + len])
        .map_err(|e| HeaderError::Damaged(format!("its description is not readable: {e}")))?;
    Ok((meta, 20 + len))
}

/// The header of block number `seq`, whose first frame was taken at `time`.
pub(crate) fn block_header(seq: u32, time: f64) -> [u8; BLOCK_HEADER_LEN] {
    let mut out = [0u8; BLOCK_HEADER_LEN];
    out[..4].copy_from_slice(BLOCK_MAGIC);
    out[4..8].copy_from_slice(&seq.to_le_bytes());
    out[8..16].copy_from_slice(&time.to_le_bytes());
    let crc = crc32fast::hash(&out[..16]);
    out[16..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// `(seq, time)` of a block header, if these bytes are one.
pub(crate) fn read_block_header(bytes: &[u8]) -> Option<(u32, f64)> {
    let bytes = bytes.get(..BLOCK_HEADER_LEN)?;
    if &bytes[..4] != BLOCK_MAGIC || crc32fast::hash(&bytes[..16]) != le32(&bytes[16..]) {
        return None;
    }
    Some((le32(&bytes[4..]), f64::from_bits(le64(&bytes[8..]))))
}

/// What the trailer of a block says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trailer {
    pub(crate) frames: u32,
    pub(crate) compressed_len: u64,
    pub(crate) compressed_crc: u32,
}

pub(crate) fn trailer(t: Trailer) -> [u8; TRAILER_LEN] {
    let mut out = [0u8; TRAILER_LEN];
    out[..4].copy_from_slice(TRAILER_MAGIC);
    out[4..8].copy_from_slice(&t.frames.to_le_bytes());
    out[8..16].copy_from_slice(&t.compressed_len.to_le_bytes());
    out[16..20].copy_from_slice(&t.compressed_crc.to_le_bytes());
    let crc = crc32fast::hash(&out[..20]);
    out[20..].copy_from_slice(&crc.to_le_bytes());
    out
}

pub(crate) fn read_trailer(bytes: &[u8]) -> Option<Trailer> {
    let bytes = bytes.get(..TRAILER_LEN)?;
    if &bytes[..4] != TRAILER_MAGIC || crc32fast::hash(&bytes[..20]) != le32(&bytes[20..]) {
        return None;
    }
    Some(Trailer {
        frames: le32(&bytes[4..]),
        compressed_len: le64(&bytes[8..]),
        compressed_crc: le32(&bytes[16..]),
    })
}

/// The fixed part of a frame record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FrameHead {
    pub(crate) key: bool,
    /// The snapshot's `unix_seconds`.
    pub(crate) time: f64,
    /// What happened at this frame ([`super::marks`]).
    pub(crate) marks: u64,
}

/// Appends one frame record: its length, the head and body, and their CRC32.
pub(crate) fn put_frame(out: &mut Vec<u8>, head: FrameHead, body: &[u8]) {
    let mut payload = Vec::with_capacity(body.len() + 12);
    payload.push(u8::from(!head.key));
    payload.extend_from_slice(&head.time.to_le_bytes());
    codec::put_varint(&mut payload, head.marks);
    payload.extend_from_slice(body);
    codec::put_varint(out, payload.len() as u64);
    out.extend_from_slice(&payload);
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
}

/// One frame record read from a block: its head, and where its body lies in `bytes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FrameRecord {
    pub(crate) head: FrameHead,
    pub(crate) body_start: usize,
    pub(crate) body_end: usize,
    /// Where the next record starts.
    pub(crate) next: usize,
}

/// The outcome of reading a record at `at`: a record, the clean end of the bytes, or why not.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Next {
    Frame(FrameRecord),
    End,
    /// The bytes stop inside a record.
    Cut,
    Damaged(String),
}

pub(crate) fn next_frame(bytes: &[u8], at: usize) -> Next {
    if at == bytes.len() {
        return Next::End;
    }
    let mut input = &bytes[at..];
    let len = match codec::get_varint(&mut input) {
        Ok(len) if len as usize <= MAX_FRAME_BYTES => len as usize,
        Ok(len) => return Next::Damaged(format!("a frame claims {len} bytes")),
        Err(_) => return Next::Cut,
    };
    let start = bytes.len() - input.len();
    if input.len() < len + 4 {
        return Next::Cut;
    }
    let payload = &bytes[start..start + len];
    if crc32fast::hash(payload) != le32(&bytes[start + len..]) {
        return Next::Damaged("a frame's checksum does not match".into());
    }
    match read_frame_head(payload) {
        Ok((head, used)) => Next::Frame(FrameRecord {
            head,
            body_start: start + used,
            body_end: start + len,
            next: start + len + 4,
        }),
        Err(Corrupt(why)) => Next::Damaged(why),
    }
}

fn read_frame_head(payload: &[u8]) -> Result<(FrameHead, usize)> {
    let mut input = payload;
    let kind = codec::get_u8(&mut input)?;
    if kind > 1 {
        return Err(Corrupt(format!("unknown frame kind {kind}")));
    }
    let time = f64::from_bits(le64(codec::get_bytes(&mut input, 8)?));
    if !FRAME_TIMES.contains(&time) {
        return Err(Corrupt(format!("a frame's time, {time}, is not a date")));
    }
    let marks = codec::get_varint(&mut input)?;
    let head = FrameHead {
        key: kind == 0,
        time,
        marks,
    };
    Ok((head, payload.len() - input.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_every_damage_is_named() {
        let meta = Meta {
            torchtop: "0.1.0".into(),
            host: Some("box".into()),
            interval_seconds: 1.0,
            started: "2026-01-01T00:00:00Z".into(),
            snapshot_schema: 1,
            key_every: 300,
        };
        let mut bytes = Vec::new();
        put_header(&mut bytes, &meta);
        assert_eq!(read_header(&bytes), Ok((meta.clone(), bytes.len())));
        assert_eq!(read_header(&bytes[..20]), Err(HeaderError::Cut));
        assert_eq!(read_header(b"hello world"), Err(HeaderError::NotARecording));
        let mut newer = bytes.clone();
        newer[8] = 2;
        assert_eq!(
            read_header(&newer),
            Err(HeaderError::Newer {
                version: 2,
                writer: Some("0.1.0".into())
            })
        );
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(matches!(
            read_header(&flipped),
            Err(HeaderError::Damaged(_))
        ));
    }

    #[test]
    fn frames_and_blocks_round_trip_and_a_flipped_bit_is_caught() {
        let head = FrameHead {
            key: true,
            time: 12.5,
            marks: 3,
        };
        let mut bytes = Vec::new();
        put_frame(&mut bytes, head, b"body");
        let Next::Frame(record) = next_frame(&bytes, 0) else {
            panic!("no frame");
        };
        assert_eq!(record.head, head);
        assert_eq!(&bytes[record.body_start..record.body_end], b"body");
        assert_eq!(next_frame(&bytes, record.next), Next::End);
        assert_eq!(next_frame(&bytes[..bytes.len() - 1], 0), Next::Cut);
        let mut flipped = bytes.clone();
        flipped[3] ^= 4;
        assert!(matches!(next_frame(&flipped, 0), Next::Damaged(_)));
        assert_eq!(read_block_header(&block_header(7, 1.5)), Some((7, 1.5)));
        let t = Trailer {
            frames: 9,
            compressed_len: 1000,
            compressed_crc: 42,
        };
        assert_eq!(read_trailer(&trailer(t)), Some(t));
        let mut bad = trailer(t);
        bad[5] ^= 1;
        assert_eq!(read_trailer(&bad), None);
    }

    /// The robustness review: a frame time of NaN (or 1e300) reached the player, whose
    /// `Duration::from_secs_f64` panicked; a frame's time must be a date.
    #[test]
    fn a_frame_whose_time_is_no_date_is_damage() {
        for time in [f64::NAN, f64::INFINITY, -1.0, 1e300] {
            let mut bytes = Vec::new();
            let head = FrameHead {
                key: true,
                time,
                marks: 0,
            };
            put_frame(&mut bytes, head, b"body");
            let Next::Damaged(why) = next_frame(&bytes, 0) else {
                panic!("{time} was read as a frame time");
            };
            assert!(why.ends_with("is not a date"), "{why}");
        }
    }
}
