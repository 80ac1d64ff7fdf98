//! A disk that fills up under a recording and empties again: whatever write it refuses (the
//! header, a block header, a flush, a block's end, its trailer, a rotation), the recording
//! goes on once there is room, the frames in between are dropped and counted, and the files
//! read back whole, with a gap in time and no damage.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::outage::Room;
use super::{DiskEvent, FileWriter};
use crate::model::{GpuSample, Snapshot};
use crate::record::reader::Cursor;
use crate::record::{RecordOptions, Recording};

const T0: u64 = 1_800_000_000;

/// Frame `t`: a second apart; `wide` adds a name that does not compress, to fill files fast.
fn snapshot(t: u32, wide: bool) -> Arc<Snapshot> {
    let mut s = Snapshot::at(std::time::UNIX_EPOCH + Duration::from_secs(T0 + u64::from(t)));
    s.host.hostname = Some("box".into());
    s.gpus.push(GpuSample {
        index: 0,
        utilization_percent: Some(t * 7 % 101),
        name: wide.then(|| noise(t).into()),
        ..Default::default()
    });
    Arc::new(s)
}

/// 1,000 hex digits that zstd cannot shorten by much, different for each `t`.
fn noise(t: u32) -> String {
    let mut x = (u64::from(t) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..63)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("{x:016x}")
        })
        .collect()
}

fn options(path: &Path) -> RecordOptions {
    RecordOptions {
        path: path.to_path_buf(),
        max_size: None,
        interval_seconds: 1.0,
    }
}

/// The frames of a file, by `t`, each checked against what was written; the file must read
/// without a word about damage.
fn frames_of(path: &Path, wide: bool) -> Vec<u32> {
    let mut recording = Recording::open(path).unwrap();
    assert!(
        recording.issues.is_empty(),
        "{}: {:?}",
        path.display(),
        recording.issues
    );
    let mut cursor = Cursor::default();
    (0..recording.frames().len())
        .map(|i| {
            let got = recording.snapshot(&mut cursor, i).unwrap();
            let t = (got.unix_seconds - T0 as f64) as u32;
            let want = serde_json::to_string(&*snapshot(t, wide)).unwrap();
            assert_eq!(serde_json::to_string(&got).unwrap(), want, "frame {i}");
            t
        })
        .collect()
}

/// What one recording through a disk with `room` bytes did: the events, and the frames lost.
struct Run {
    events: Vec<(u32, DiskEvent)>,
    lost: u64,
}

/// Writes frames `0..n`, flushing after every third (the refresh's flush every 2 s); the disk
/// takes `room` bytes, then nothing until frame `empties`, then everything. With `max_size`,
/// the files move on at a quarter of it; it may be below what `--max-size` allows, so that a
/// test's files move on within a few frames.
fn run(path: &Path, max_size: Option<u64>, room: u64, empties: u32, n: u32, wide: bool) -> Run {
    let disk = Room::default();
    disk.set(Some(room));
    let mut writer = FileWriter::create(options(path))
        .unwrap()
        .with_room(disk.clone())
        .with_retry_every(Duration::ZERO);
    writer.options.max_size = max_size;
    let mut events = Vec::new();
    for t in 0..n {
        if t == empties {
            disk.set(None);
        }
        if let Some(event) = writer.write(&snapshot(t, wide)).unwrap() {
            events.push((t, event));
        }
        if writer.outage.is_some() {
            // Nothing waits for the disk: the frames are dropped, not kept.
            assert!(writer.block.is_none(), "a block is kept during the outage");
        }
        if t % 3 == 2 {
            if let Some(event) = writer.flush().unwrap() {
                events.push((t, event));
            }
        }
    }
    let lost = writer.lost();
    writer.finish().unwrap();
    Run { events, lost }
}

/// The frames kept are those before the failure and those from the resumption on, and the
/// events say so: one failure, one resumption, the gap and the count of frames dropped.
fn check_gap(kept: &[u32], run: &Run, empties: u32, n: u32) {
    let Some(resumed_at) = kept.iter().position(|&t| t >= empties) else {
        panic!("nothing after the disk emptied: {kept:?}");
    };
    let (before, after) = kept.split_at(resumed_at);
    assert_eq!(before, (0..before.len() as u32).collect::<Vec<_>>());
    assert_eq!(after, (empties..n).collect::<Vec<_>>());
    let dropped = u64::from(empties) - before.len() as u64;
    assert_eq!(run.lost, dropped);
    if dropped == 0 {
        assert!(run.events.is_empty(), "{:?}", run.events);
        return;
    }
    let [(_, DiskEvent::Failed { error, .. }), (at, resumed)] = &run.events[..] else {
        panic!("one failure, then one resumption: {:?}", run.events);
    };
    assert!(
        error.starts_with("could not write to ") && error.contains("No space left on device"),
        "{error}"
    );
    assert_eq!(*at, empties);
    let DiskEvent::Resumed {
        dropped: said,
        last_before,
        first_after,
        ..
    } = resumed
    else {
        panic!("{resumed:?}");
    };
    assert_eq!(*said, dropped);
    let last = before.last().map(|&t| (T0 + u64::from(t)) as f64);
    assert_eq!(
        (*last_before, *first_after),
        (last, (T0 + u64::from(empties)) as f64)
    );
}

#[test]
fn a_disk_full_anywhere_in_a_file_leaves_a_gap_and_no_damage() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.ttrec");
    run(&clean, None, u64::MAX, 0, 40, false);
    let size = std::fs::metadata(&clean).unwrap().len();
    // Every few bytes from the header to the last flush: each write is cut somewhere.
    for room in (0..size).step_by(5) {
        let path = dir.path().join(format!("full-{room}.ttrec"));
        let run = run(&path, None, room, 30, 40, false);
        let kept = frames_of(&path, false);
        check_gap(&kept, &run, 30, 40);
        std::fs::remove_file(&path).unwrap();
    }
}

/// A file that fills up as it is about to move on: its last block's end, its trailer, the
/// moves and the new file are refused in turn, and each is done once there is room.
#[test]
fn a_disk_full_as_a_file_moves_on_leaves_every_file_readable() {
    const MAX: Option<u64> = Some(64 << 10);
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.ttrec");
    run(&clean, MAX, u64::MAX, 0, 60, true);
    let first = std::fs::metadata(dir.path().join("clean.ttrec.1"))
        .unwrap()
        .len();
    // From the first file's last flush to the second file's first: its block's end, its
    // trailer, the move, the new file's header, block header and first flush.
    for room in (first - 40..first + 300).step_by(4) {
        let sub = dir.path().join(format!("r{room}"));
        std::fs::create_dir(&sub).unwrap();
        let path = sub.join("r.ttrec");
        let run = run(&path, MAX, room, 50, 60, true);
        let mut kept = Vec::new();
        for name in ["r.ttrec.3", "r.ttrec.2", "r.ttrec.1", "r.ttrec"] {
            if sub.join(name).exists() {
                kept.extend(frames_of(&sub.join(name), true));
            }
        }
        check_gap(&kept, &run, 50, 60);
        std::fs::remove_dir_all(&sub).unwrap();
    }
}

/// Stopped while the disk is still full: the file is cut back to its last flush and replays up
/// to it; the sentence says so.
#[test]
fn a_recording_stopped_during_an_outage_replays_up_to_its_last_flush() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stopped.ttrec");
    let disk = Room::default();
    let mut writer = FileWriter::create(options(&path))
        .unwrap()
        .with_room(disk.clone());
    for t in 0..6 {
        writer.write(&snapshot(t, false)).unwrap();
    }
    writer.flush().unwrap();
    disk.set(Some(10));
    let mut events = Vec::new();
    for t in 6..20 {
        events.extend(writer.write(&snapshot(t, false)).unwrap());
        events.extend(writer.flush().unwrap());
    }
    assert_eq!(events.len(), 1, "said once: {events:?}");
    let error = writer.finish().unwrap_err().0;
    assert!(
        error.contains("No space left on device")
            && error.contains("could not be ended and replays up to"),
        "{error}"
    );
    let mut recording = Recording::open(&path).unwrap();
    assert_eq!(recording.frames().len(), 6);
    let said = recording.issues.join("\n");
    assert!(said.contains("is cut off"), "{said}");
    let mut cursor = Cursor::default();
    let last = recording.snapshot(&mut cursor, 5).unwrap();
    assert_eq!(last.unix_seconds, (T0 + 5) as f64);
}
