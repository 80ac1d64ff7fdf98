//! Tests of the figures: the history built from them is the history built from whole
//! snapshots, and the cache stays within its bounds.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::model::{GpuState, LaunchEnv, NO_GPU};
use crate::record::reader::Cursor;
use crate::record::writer::FileWriter;
use crate::record::{RecordOptions, Recording};

/// An agent's figures on two devices.
fn torch(t: u32, pid: u32) -> Arc<TorchInfo> {
    let device = |index: u32| DeviceAllocatorStats {
        index,
        allocated_bytes: Some(u64::from(t * 1000 + pid + index)),
        reserved_bytes: (t % 3 != 0).then_some(u64::from(t * 2000 + pid)),
        segments: Some(7),
        ..Default::default()
    };
    Arc::new(TorchInfo {
        python: Some("3.12".into()),
        step: Some(u64::from(t)),
        devices: vec![device(0), device(1)],
        ..Default::default()
    })
}

/// Frame `t` of a recording with what the history treats apart: a GPU that goes stale, one
/// replaced by another at the same index (a new UUID), 300 pids (past the 256 that have a
/// history), processes on two GPUs, agents before and past the 256th pid and one without a
/// GPU, a pid reused by a new process, and processes that come and go.
pub(crate) fn varied(t: u32) -> Snapshot {
    let at = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + u64::from(t));
    let mut s = Snapshot::at(at);
    for index in 0..2u32 {
        let uuid = if index == 1 && t >= 6 {
            "GPU-c"
        } else {
            "GPU-a"
        };
        s.gpus.push(GpuSample {
            index,
            name: Some("NVIDIA H100 80GB HBM3".into()),
            uuid: Some(format!("{uuid}{index}").into()),
            state: if index == 0 && (7..9).contains(&t) {
                GpuState::Stale
            } else {
                GpuState::Ok
            },
            utilization_percent: Some((t * 7 + index) % 100),
            memory_used_bytes: Some(u64::from(t) << 30),
            power_w: Some(400.0 + f64::from(t) * 0.5),
            temperature_c: (t % 4 != 0).then_some(50 + t),
            pcie_rx_kib_s: Some(t * 100),
            ..Default::default()
        });
    }
    for pid in 1000..1300u32 {
        if (1100..1105).contains(&pid) && (12..14).contains(&t) {
            continue;
        }
        let mut row = GpuProcess::new(pid, pid % 2, ProcessKind::Compute);
        row.command = Some(format!("python train.py --rank {pid}").into());
        row.user = Some("alice".into());
        row.gpu_memory_bytes = Some(u64::from(pid * t));
        row.sm_percent = (t % 5 != 0).then_some((pid + t) % 100);
        row.cpu_percent = Some(f64::from(t) * 1.5);
        row.rss_bytes = Some(u64::from(pid) << 20);
        row.start_ticks = Some(if pid == 1001 && t >= 10 { 2 } else { 1 });
        if pid % 50 == 0 {
            row.env = Some(Arc::new(LaunchEnv {
                rank: Some(pid % 8),
                ..Default::default()
            }));
        }
        if pid == 1002 || pid == 1290 {
            row.torch = Some(torch(t, pid));
        }
        if pid < 1010 {
            let mut second = row.clone();
            second.gpu = 1 - row.gpu;
            second.gpu_memory_bytes = Some(u64::from(t));
            s.processes.push(row);
            s.processes.push(second);
        } else {
            s.processes.push(row);
        }
    }
    s.processes
        .push(GpuProcess::agent_only(4000, torch(t, 4000)));
    assert_eq!(s.processes.last().unwrap().gpu, NO_GPU);
    s
}

pub(crate) fn write(path: &Path, snapshots: impl Iterator<Item = Snapshot>) -> Recording {
    let mut writer = FileWriter::create(RecordOptions {
        path: path.to_path_buf(),
        max_size: None,
        interval_seconds: 1.0,
    })
    .unwrap();
    for s in snapshots {
        writer.write(&Arc::new(s)).unwrap();
    }
    writer.finish().unwrap();
    Recording::open(path).unwrap()
}

/// Builds the history of every frame both ways, and compares them frame by frame.
fn same_history_both_ways(recording: &mut Recording, frames: usize) {
    let (mut whole, mut read) = (Cursor::default(), Cursor::default());
    let interval = recording.meta.interval_seconds;
    let mut expected = History::for_interval(interval);
    let mut got = History::for_interval(interval);
    let mut scratch = Snapshot::default();
    for i in 0..frames {
        expected.record(&recording.snapshot(&mut whole, i).unwrap());
        let mut figures: Figures = recording.read(&mut read, i).unwrap();
        figures.trim();
        figures.record(&mut got, &mut scratch);
        assert_eq!(got, expected, "frame {i}");
    }
    assert!(!expected.gpus.is_empty());
}

#[test]
fn the_history_from_figures_is_the_history_from_whole_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let mut recording = write(&dir.path().join("v.ttrec"), (0..20).map(varied));
    same_history_both_ways(&mut recording, 20);
    let mut cursor = Cursor::default();
    let mut figures: Figures = recording.read(&mut cursor, 3).unwrap();
    assert_eq!(figures.processes.len(), 311);
    figures.trim();
    // The first 256 pids (ten of them on two GPUs), and the agents past them.
    assert_eq!(figures.processes.len(), 266 + 2);
    let history = {
        let mut history = History::for_interval(1.0);
        figures.record(&mut history, &mut Snapshot::default());
        history
    };
    assert_eq!(
        history.allocators.len(),
        6,
        "three agents, two past the 256th pid"
    );
}

#[test]
fn the_history_from_figures_is_that_of_the_demo() {
    let mut demo = Recording::from_bytes("the demo", crate::replay::DEMO).unwrap();
    let frames = demo.frames().len().min(400);
    same_history_both_ways(&mut demo, frames);
}

fn figures(rows: usize) -> Option<Arc<Figures>> {
    let row = |pid| Row {
        pid,
        gpu: Some(0),
        start_ticks: Some(1),
        gpu_memory_bytes: None,
        sm_percent: None,
        cpu_percent: None,
        rss_bytes: None,
        torch: None,
    };
    Some(Arc::new(Figures {
        gpus: vec![GpuSample::default()],
        processes: (0..rows as u32).map(row).collect(),
    }))
}

#[test]
fn the_cache_keeps_the_span_and_drops_the_frames_above_it_first() {
    let mut cache = FiguresCache::new(10);
    let most = 10 + KEY_EVERY as usize + SLACK;
    let span = 400..410;
    for i in 0..410 {
        cache.insert(i, figures(3), &span);
    }
    // Below the span, the farthest go first.
    assert_eq!(cache.len(), most);
    assert!(!cache.contains(410 - most - 1) && cache.contains(410 - most));
    // Stepping back: the span moves down, and the frames above it go first, the highest
    // first, even before frames far below it.
    let span = 300..310;
    cache.insert(25, None, &span);
    assert!(cache.contains(25) && !cache.contains(409) && cache.contains(408));
    assert!(matches!(cache.get(25), Some(None)));
    let per_frame = figures(3).unwrap().bytes();
    assert_eq!(cache.bytes_kept(), (cache.len() - 1) * per_frame);
}

#[test]
fn the_cache_keeps_at_most_its_bytes() {
    let mut cache = FiguresCache::new(300);
    let big = figures(150_000);
    let each = big.as_ref().unwrap().bytes();
    assert!(each > MAX_BYTES / 8, "{each}");
    for i in 0..20 {
        cache.insert(i, big.clone(), &(0..20));
        assert!(cache.bytes_kept() <= MAX_BYTES, "{}", cache.bytes_kept());
    }
    assert_eq!(cache.len(), MAX_BYTES / each);
}
