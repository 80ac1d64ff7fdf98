//! The player's tests: the history after every move, and the work a step back costs.

use super::*;
use crate::model::GpuSample;
use crate::record::reader::checkpoints::STRIDE;
use crate::record::writer::FileWriter;
use crate::record::RecordOptions;

#[test]
fn a_speed_is_one_of_the_steps_the_player_plays_at() {
    assert_eq!(parse_speed("16"), Ok(16.0));
    assert_eq!(parse_speed("0.25"), Ok(0.25));
    // 3 played at 4x, unsaid.
    assert!(parse_speed("3").unwrap_err().contains("one of 0.25"));
    assert!(parse_speed("200").is_err());
    assert!(parse_speed("fast").unwrap_err().contains("not a speed"));
}

/// A recording whose GPU 0 SM clock at frame t is t MHz (a counter the plausibility checks
/// let through, as utilization past 100% is not).
fn recording(dir: &std::path::Path, frames: u32) -> Recording {
    let path = dir.join("h.ttrec");
    let mut writer = FileWriter::create(RecordOptions {
        path: path.clone(),
        max_size: None,
        interval_seconds: 1.0,
    })
    .unwrap();
    for t in 0..frames {
        let at = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + u64::from(t));
        let mut s = Snapshot::at(at);
        s.gpus.push(GpuSample {
            index: 0,
            sm_clock_mhz: Some(t),
            ..Default::default()
        });
        writer.write(&Arc::new(s)).unwrap();
    }
    writer.finish().unwrap();
    Recording::open(&path).unwrap()
}

fn utilization(history: &History) -> Vec<u32> {
    history.gpus[&0]
        .sm_clock_mhz
        .iter()
        .map(|v| v.unwrap() as u32)
        .collect()
}

#[test]
fn the_history_is_that_of_the_moment_shown_after_every_move() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let commands = spawn(recording(dir.path(), 400), 350, 1.0, TimeZone::UTC, tx).unwrap();
    let mut next = || updates.blocking_recv().expect("an update");
    let first = next();
    // The history holds the 300 frames before the one shown (which the UI adds itself).
    assert_eq!(
        utilization(first.history.as_ref().unwrap()),
        (50..350).collect::<Vec<_>>()
    );
    // Playing may have moved on a frame or two before the step arrives.
    commands.send(Command::Step(-100)).unwrap();
    let back = loop {
        let update = next();
        if update.position.paused {
            break update;
        }
    };
    let at = back.position.index;
    assert!((250..260).contains(&at), "{at}");
    assert_eq!(
        utilization(back.history.as_ref().unwrap()),
        (0..at as u32).collect::<Vec<_>>()
    );
    let target = at + 12;
    let moment = Moment {
        at: 1_800_000_000.0 + target as f64,
        width: 1.0,
    };
    commands.send(Command::Seek(moment)).unwrap();
    let ahead = next();
    assert_eq!(ahead.position.index, target);
    let expected: Vec<u32> = (0..target as u32).collect();
    assert_eq!(utilization(ahead.history.as_ref().unwrap()), expected);
    commands.send(Command::Step(1)).unwrap();
    let one_on = next();
    assert_eq!(one_on.position.index, target + 1);
    assert!(one_on.history.is_none(), "one frame on: the UI adds it");
}

/// A recording of 2 GPUs and 40 processes whose figures change at every frame, with
/// processes that come and go (events) near the key frame at 600.
fn busy_recording(path: &std::path::Path, frames: u32) -> Recording {
    let snapshot = |t: u32| {
        let mut s = crate::replay::figures::tests::varied(t);
        s.gpus[0].utilization_percent = Some(t);
        s.processes.retain(|p| {
            p.pid % 8 == 0 && !((1040..1080).contains(&p.pid) && (610..620).contains(&t))
        });
        s
    };
    crate::replay::figures::tests::write(path, (0..frames).map(snapshot))
}

fn work_since(recording: &Recording, before: crate::record::reader::Work) -> (u64, u64) {
    let now = recording.work();
    (now.frames - before.frames, now.snapshots - before.snapshots)
}

#[test]
fn a_step_back_reads_one_frame_more_not_the_whole_history_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.ttrec");
    let recording = busy_recording(&path, 700);
    let snapshots: Vec<Snapshot> = {
        let mut again = Recording::open(&path).unwrap();
        let mut cursor = Cursor::default();
        (0..700)
            .map(|i| again.snapshot(&mut cursor, i).unwrap())
            .collect()
    };
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let mut player = Player::new(recording, 650, 1.0, TimeZone::UTC, tx);
    assert!(player.show(650, true, None));
    updates.try_recv().expect("the first frame");
    // From 649 down to 560: the frame shown crosses the key frame at 600 and the events at
    // 610 and 620, the far end of its history (301 frames) the key frame at 300.
    for shown in (560..650).rev() {
        let before = player.recording.work();
        assert!(player.obey(Command::Step(-1)));
        let (frames, whole) = work_since(&player.recording, before);
        let update = updates.try_recv().expect("a frame");
        assert_eq!(update.position.index, shown);
        assert_eq!(update.snapshot.as_deref(), Some(&snapshots[shown]));
        let mut expected = History::for_interval(1.0);
        for s in &snapshots[shown - 300..shown] {
            expected.record(s);
        }
        assert!(update.history.as_ref() == Some(&expected), "frame {shown}");
        // The frame shown, and the frame before it where it is an event.
        assert!(whole <= 2, "frame {shown}: {whole} snapshots made");
        // Up to STRIDE frames to reach the frame shown from a kept decoder state, and as many
        // for the figures of the far end of the history (and those before it on the way)...
        let most = 2 * STRIDE as u64 + 2;
        // ... except the one step whose history first reaches before the key frame at 300:
        // the frames from the key frame at 0 up to it are read once.
        if shown - 300 == 299 {
            assert!(
                frames <= 300 + most,
                "frame {shown}: {frames} frames decoded"
            );
        } else {
            assert!(frames <= most, "frame {shown}: {frames} frames decoded");
        }
    }
    let jumped = player.recording.work();
    assert!(player.obey(Command::Jump(true)));
    let update = updates.try_recv().expect("an event");
    assert_eq!(update.position.index, 610);
    assert!(update.note.unwrap().contains("went"), "the event is told");
    assert_eq!(work_since(&player.recording, jumped).1, 2);
}

/// A review: past the last event, `]` said "no warning, OOM or state change", though it also
/// stops at processes coming and going.
#[test]
fn past_the_last_event_the_note_names_every_kind_of_event() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let commands = spawn(recording(dir.path(), 3), 2, 1.0, TimeZone::UTC, tx).unwrap();
    commands.send(Command::Jump(true)).unwrap();
    let note = loop {
        let update = updates.blocking_recv().expect("an update");
        // Other notes (the end of the recording) may come first.
        if let Some(note) = update.note.filter(|n| n.ends_with("after this moment")) {
            break note;
        }
    };
    assert!(note.contains("process coming or going after"), "{note}");
}
