//! The reader going back: from the nearest kept decoder state, with the recent blocks' bytes
//! kept, and within its bounds.

use std::path::Path;
use std::sync::Arc;

use super::checkpoints::{MAX_BYTES, MAX_CHECKPOINTS, STRIDE};
use super::{Cursor, Recording};
use crate::model::{GpuProcess, GpuSample, ProcessKind, Snapshot};
use crate::record::writer::{FileWriter, BLOCK_FRAMES};
use crate::record::RecordOptions;

/// `frames` frames of 1 GPU and `processes` processes whose figures change at every frame.
fn write(path: &Path, frames: u32, processes: u32) -> Recording {
    let mut writer = FileWriter::create(RecordOptions {
        path: path.to_path_buf(),
        max_size: None,
        interval_seconds: 1.0,
    })
    .unwrap();
    for t in 0..frames {
        let at =
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000 + u64::from(t));
        let mut s = Snapshot::at(at);
        s.gpus.push(GpuSample {
            index: 0,
            utilization_percent: Some(t % 101),
            ..Default::default()
        });
        for pid in 0..processes {
            let mut p = GpuProcess::new(100 + pid, 0, ProcessKind::Compute);
            p.running_seconds = Some(f64::from(t) * 1.01);
            s.processes.push(p);
        }
        writer.write(&Arc::new(s)).unwrap();
    }
    writer.finish().unwrap();
    Recording::open(path).unwrap()
}

fn json(s: &Snapshot) -> String {
    serde_json::to_string(s).unwrap()
}

#[test]
fn going_back_decodes_from_the_nearest_kept_state_and_keeps_few() {
    let dir = tempfile::tempdir().unwrap();
    let mut recording = write(&dir.path().join("back.ttrec"), 700, 5);
    recording.aim(699);
    let mut cursor = Cursor::default();
    let forward: Vec<String> = (0..700)
        .map(|i| json(&recording.snapshot(&mut cursor, i).unwrap()))
        .collect();
    // 43 frames are multiples of 16 past the key frame at 0; the most recent are kept.
    assert_eq!(recording.checkpoints.len(), MAX_CHECKPOINTS);
    let mut back = Cursor::default();
    for i in (400..700).rev() {
        recording.aim(i);
        let before = recording.work().frames;
        let got = recording.snapshot(&mut back, i).unwrap();
        assert_eq!(json(&got), forward[i], "frame {i}");
        let decoded = recording.work().frames - before;
        // Without kept states, up to 300 (from the key frame at 300 or 600).
        assert!(
            decoded <= STRIDE as u64,
            "frame {i}: {decoded} frames decoded"
        );
    }
    assert_eq!(recording.checkpoints.len(), MAX_CHECKPOINTS);
}

#[test]
fn going_to_and_fro_between_two_blocks_decompresses_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut recording = write(&dir.path().join("blocks.ttrec"), BLOCK_FRAMES + 100, 5);
    let mut cursor = Cursor::default();
    let first = BLOCK_FRAMES as usize;
    for i in [first + 50, 100, first + 51, 101, first + 52, 102] {
        recording.snapshot(&mut cursor, i).unwrap();
    }
    assert_eq!(recording.work().blocks, 2);
}

#[test]
fn kept_states_stay_within_their_bytes_and_those_above_the_aim_go_first() {
    const FRAMES: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let mut recording = write(&dir.path().join("big.ttrec"), FRAMES as u32, 1200);
    let mut cursor = Cursor::default();
    recording.snapshot(&mut cursor, 1).unwrap();
    let weight = cursor.decoder.weight();
    let fit = MAX_BYTES / weight;
    assert!(
        fit < FRAMES / STRIDE - 1,
        "{weight} bytes a state: the test needs fewer to fit"
    );
    recording.aim(FRAMES - 1);
    for i in 2..FRAMES {
        recording.snapshot(&mut cursor, i).unwrap();
        assert!(recording.checkpoints.bytes() <= MAX_BYTES);
    }
    // The nearest below the frame aimed at.
    let kept = |r: &Recording| {
        (0..FRAMES)
            .filter(|&i| r.checkpoints.copy(i).is_some())
            .collect::<Vec<_>>()
    };
    let top = (FRAMES - 1) / STRIDE * STRIDE;
    let highest: Vec<usize> = (0..fit).rev().map(|k| top - k * STRIDE).collect();
    assert_eq!(kept(&recording), highest);
    // Aimed lower, the states on the way there replace those above it, the highest first.
    recording.aim(40);
    recording.snapshot(&mut Cursor::default(), 40).unwrap();
    let now = kept(&recording);
    assert!(highest[0] > 40, "{highest:?}");
    assert_eq!(now[..2], [16, 32]);
    assert_eq!(now[2..], highest[..fit - 2]);
}

#[test]
fn a_reader_that_reads_on_and_on_keeps_no_states() {
    let dir = tempfile::tempdir().unwrap();
    let mut recording = write(&dir.path().join("on.ttrec"), 100, 5);
    let mut cursor = Cursor::default();
    for i in 0..100 {
        recording.snapshot(&mut cursor, i).unwrap();
    }
    assert_eq!(recording.checkpoints.len(), 0);
}

/// The robustness review: a header's interval of 1e300 let a gap between two frames reach
/// `Duration::from_secs_f64` too big; the frames are kept and the interval played as 1 s.
#[test]
fn an_interval_torchtop_never_writes_is_named_and_played_as_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("interval.ttrec");
    write(&path, 5, 1);
    let bytes = std::fs::read(&path).unwrap();
    // (JSON has no NaN: serde writes null, and the header is refused as unreadable.)
    for interval in [1e300, 0.0, -1.0, 1e-300] {
        let (mut meta, len) = crate::record::format::read_header(&bytes).unwrap();
        meta.interval_seconds = interval;
        let mut patched = Vec::new();
        crate::record::format::put_header(&mut patched, &meta);
        patched.extend_from_slice(&bytes[len..]);
        std::fs::write(&path, &patched).unwrap();
        let recording = Recording::open(&path).unwrap();
        assert_eq!(recording.meta.interval_seconds, 1.0, "{interval}");
        assert_eq!(recording.frames().len(), 5);
        assert!(
            recording.issues[0].contains("which torchtop never writes"),
            "{:?}",
            recording.issues
        );
    }
}

/// The robustness review: replayed GPU figures skipped the checks live readings pass, so a
/// crafted file's 1e308 W printed 309 digits and NaN printed "NaNW".
#[test]
fn a_replayed_figure_no_gpu_reports_is_not_known() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("implausible.ttrec");
    let mut writer = FileWriter::create(RecordOptions {
        path: path.clone(),
        max_size: None,
        interval_seconds: 1.0,
    })
    .unwrap();
    let mut s = Snapshot::at(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30));
    s.gpus.push(GpuSample {
        index: 0,
        power_w: Some(1e308),
        power_limit_w: Some(-1.0),
        temperature_c: Some(64),
        memory_total_bytes: Some(80 << 30),
        ..Default::default()
    });
    let mut p = GpuProcess::new(100, 0, ProcessKind::Compute);
    p.gpu_memory_bytes = Some(1 << 50);
    // The diff review: host and process CPU, an agent's step time and ranks of 309 digits.
    p.cpu_percent = Some(1e308);
    p.torch = Some(Arc::new(crate::model::TorchInfo {
        step_time_seconds: Some(1e308),
        rank: Some(u32::MAX),
        local_rank: Some(3),
        world_size: Some(0),
        ..Default::default()
    }));
    s.processes.push(p);
    s.host.cpu_percent = Some(f64::INFINITY);
    writer.write(&Arc::new(s)).unwrap();
    writer.finish().unwrap();
    let mut recording = Recording::open(&path).unwrap();
    let got = recording.snapshot(&mut Cursor::default(), 0).unwrap();
    assert_eq!(got.gpus[0].power_w, None);
    assert_eq!(got.gpus[0].power_limit_w, None);
    assert_eq!(got.gpus[0].temperature_c, Some(64));
    assert_eq!(got.processes[0].gpu_memory_bytes, None);
    assert_eq!(got.processes[0].cpu_percent, None);
    assert_eq!(got.host.cpu_percent, None);
    let torch = got.processes[0].torch.as_deref().unwrap();
    let figures = (torch.step_time_seconds, torch.rank, torch.world_size);
    assert_eq!(figures, (None, None, None));
    assert_eq!(torch.local_rank, Some(3), "below 2^20 without a world size");
}
