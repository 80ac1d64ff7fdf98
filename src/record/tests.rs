//! Writing and reading whole files: round trips, cut-off and damaged files, rotation.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::reader::Cursor;
use super::writer::{FileWriter, BLOCK_FRAMES};
use super::{RecordOptions, Recording};
use crate::model::{GpuProcess, GpuSample, ProcessKind, Snapshot};

fn snapshot(t: u32) -> Arc<Snapshot> {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000 + u64::from(t));
    let mut s = Snapshot::at(at);
    s.host.hostname = Some("box".into());
    for index in 0..2 {
        s.gpus.push(GpuSample {
            index,
            utilization_percent: Some((t * 3 + index) % 101),
            ..Default::default()
        });
    }
    let mut p = GpuProcess::new(100 + t / 50, 0, ProcessKind::Compute);
    p.running_seconds = Some(f64::from(t) * 1.01);
    s.processes.push(p);
    Arc::new(s)
}

fn options(path: &Path) -> RecordOptions {
    RecordOptions {
        path: path.to_path_buf(),
        max_size: None,
        interval_seconds: 1.0,
    }
}

/// Writes `n` snapshots, flushing after each (as a slow refresh would).
fn write(path: &Path, n: u32) {
    let mut writer = FileWriter::create(options(path)).unwrap();
    for t in 0..n {
        writer.write(&snapshot(t)).unwrap();
        writer.flush().unwrap();
    }
    writer.finish().unwrap();
}

fn json(s: &Snapshot) -> String {
    serde_json::to_string(s).unwrap()
}

/// Decodes every frame; checks each against what was written.
fn check_all(recording: &mut Recording) -> Vec<u32> {
    let mut cursor = Cursor::default();
    let mut seen = Vec::new();
    for i in 0..recording.frames().len() {
        let got = recording.snapshot(&mut cursor, i).unwrap();
        let t = (got.unix_seconds - 1_800_000_000.0) as u32;
        assert_eq!(json(&got), json(&snapshot(t)), "frame {i}");
        seen.push(t);
    }
    seen
}

fn temp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    (dir, path)
}

#[test]
fn a_file_of_several_blocks_reads_back_frame_for_frame_and_seeks() {
    let (_dir, path) = temp("a.ttrec");
    let n = BLOCK_FRAMES * 2 + 10;
    write(&path, n);
    let mut recording = Recording::open(&path).unwrap();
    assert!(recording.issues.is_empty(), "{:?}", recording.issues);
    assert_eq!(recording.meta.host.as_deref(), Some("box"));
    assert_eq!(check_all(&mut recording), (0..n).collect::<Vec<_>>());
    // Backwards and across blocks, from a fresh cursor and from a used one.
    let mut cursor = Cursor::default();
    for i in [1500usize, 3, 950, 949, 1809, 0] {
        let got = recording.snapshot(&mut cursor, i).unwrap();
        assert_eq!(json(&got), json(&snapshot(i as u32)), "frame {i}");
    }
}

#[test]
fn a_file_cut_anywhere_replays_up_to_the_cut_and_says_so() {
    let (_dir, path) = temp("cut.ttrec");
    write(&path, 40);
    let whole = std::fs::read(&path).unwrap();
    let cut_path = path.with_extension("cut");
    let mut last_count = 0;
    for cut in (60..whole.len()).step_by(7) {
        std::fs::write(&cut_path, &whole[..cut]).unwrap();
        let mut recording = match Recording::open(&cut_path) {
            Ok(r) => r,
            Err(e) => {
                assert!(e.0.contains("cut off inside its header"), "{cut}: {e}");
                continue;
            }
        };
        let seen = check_all(&mut recording);
        assert_eq!(seen, (0..seen.len() as u32).collect::<Vec<_>>());
        assert!(seen.len() >= last_count, "cut {cut}");
        last_count = seen.len();
        let said = recording.issues.join("\n");
        assert!(said.contains("is cut off at byte"), "cut {cut}: {said}");
    }
    assert!(last_count >= 38, "flushed frames were lost: {last_count}");
}

#[test]
fn a_damaged_block_is_skipped_and_reported_and_the_next_block_plays() {
    let (_dir, path) = temp("bad.ttrec");
    let n = BLOCK_FRAMES * 2 + 10;
    write(&path, n);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 4;
    for b in &mut bytes[middle..middle + 64] {
        *b ^= 0x5a;
    }
    std::fs::write(&path, &bytes).unwrap();
    let mut recording = Recording::open(&path).unwrap();
    let said = recording.issues.join("\n");
    eprintln!(
        "damaged at {middle} of {}; {} frames",
        bytes.len(),
        recording.frames().len()
    );
    assert!(
        said.contains("block 1") && said.contains("is damaged"),
        "{said}"
    );
    assert!(said.contains("could be replayed"), "{said}");
    let seen = check_all(&mut recording);
    assert!(seen.len() < n as usize);
    assert!(
        seen.contains(&BLOCK_FRAMES),
        "the second block plays: {seen:?}"
    );
    assert!(seen.contains(&(n - 1)));
}

#[test]
fn a_newer_format_or_a_foreign_file_is_refused_with_a_sentence() {
    let (_dir, path) = temp("new.ttrec");
    write(&path, 3);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8] = 9;
    std::fs::write(&path, &bytes).unwrap();
    let error = Recording::open(&path).err().unwrap().0;
    assert!(error.contains("recording format 9"), "{error}");
    assert!(
        error.contains("replay it with torchtop 0.1.0 or later"),
        "{error}"
    );
    std::fs::write(&path, b"{\"schema\": 1}\n").unwrap();
    let error = Recording::open(&path).err().unwrap().0;
    assert!(error.contains("is not a torchtop recording"), "{error}");
    std::fs::write(&path, b"").unwrap();
    assert!(Recording::open(&path).err().unwrap().0.contains("is empty"));
}

#[test]
fn an_existing_recording_moves_aside_and_rotation_deletes_the_oldest() {
    let (dir, path) = temp("r.ttrec");
    write(&path, 2);
    write(&path, 3);
    assert!(path.with_extension("ttrec.1").exists());
    let mut options = options(&path);
    options.max_size = Some(1 << 20);
    let mut writer = FileWriter::create(options).unwrap();
    let mut t = 0;
    while !dir.path().join("r.ttrec.3").exists() || t < 200 {
        let mut s = (*snapshot(t)).clone();
        // Incompressible names, so that the files fill up quickly.
        s.gpus[0].name = Some(
            format!(
                "{:x}",
                (u64::from(t) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            )
            .repeat(200),
        );
        writer.write(&Arc::new(s)).unwrap();
        writer.flush().unwrap();
        t += 1;
        assert!(t < 20_000, "no rotation");
    }
    writer.finish().unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.contains(&"r.ttrec.4".to_string()), "{names:?}");
    for name in &names {
        let recording = Recording::open(&dir.path().join(name)).unwrap();
        assert!(
            recording.issues.is_empty(),
            "{name}: {:?}",
            recording.issues
        );
    }
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let refused = FileWriter::create(super::RecordOptions {
        path: dir.path().join("notes.txt"),
        ..options_for_refusal()
    });
    assert!(refused
        .err()
        .unwrap()
        .0
        .contains("is not a torchtop recording"));
}

fn options_for_refusal() -> RecordOptions {
    options(Path::new("/nonexistent"))
}

/// Per-stage timing of the writer on a realistic snapshot (run with --release --ignored).
#[test]
#[ignore]
fn stage_timing() {
    use std::time::Instant;
    let mut s = Snapshot::at(std::time::SystemTime::now());
    s.host.hostname = Some("box".into());
    for index in 0..8 {
        s.gpus.push(GpuSample {
            index,
            name: Some("NVIDIA H100 80GB HBM3".into()),
            uuid: Some("GPU-00000000-a100-4e00-8f00-c0ffee000000".into()),
            utilization_percent: Some(50),
            power_w: Some(412.5),
            ..Default::default()
        });
    }
    for pid in 0..64 {
        let mut p = GpuProcess::new(1000 + pid, pid % 8, ProcessKind::Compute);
        p.command = Some("python train.py --config llama.yaml".into());
        p.user = Some("root".into());
        p.env = Some(Default::default());
        p.running_seconds = Some(12.5);
        p.cpu_percent = Some(0.0);
        s.processes.push(p);
    }
    let n = 300;
    let frames: Vec<Arc<Snapshot>> = (0..n)
        .map(|t| {
            let mut f = s.clone();
            f.unix_seconds += f64::from(t);
            for g in &mut f.gpus {
                g.utilization_percent = Some(t % 100);
                g.power_w = Some(400.0 + f64::from(t % 7));
            }
            for p in &mut f.processes {
                p.running_seconds = Some(12.5 + f64::from(t) * 1.0001);
                p.sm_percent = Some(t % 13);
            }
            Arc::new(f)
        })
        .collect();
    let t0 = Instant::now();
    let mut total = 0;
    for f in &frames {
        total += serde_json::to_string(f.as_ref()).unwrap().len();
    }
    let json_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    eprintln!("json {json_us:.0}us {total}");
    let t0 = Instant::now();
    for _ in 0..20 {
        for f in &frames {
            std::hint::black_box(super::tokens::split(f.as_ref()).unwrap());
        }
    }
    let split_only_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(n) / 20.0;
    eprintln!("split only {split_only_us:.0}us");
    let t0 = Instant::now();
    let mut splits = Vec::new();
    for f in &frames {
        splits.push(super::tokens::split(f.as_ref()).unwrap());
    }
    let split_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let t0 = Instant::now();
    let mut enc = super::delta::Encoder::default();
    let mut bodies = Vec::new();
    for (i, sp) in splits.into_iter().enumerate() {
        let mut out = Vec::new();
        enc.encode(sp, i == 0, &mut out);
        bodies.push(out);
    }
    let enc_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let t0 = Instant::now();
    let mut m = 0;
    for w in frames.windows(2) {
        m |= super::marks::marks(Some(&w[0]), &w[1]);
    }
    let marks_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let t0 = Instant::now();
    let mut z = zstd::stream::write::Encoder::new(Vec::new(), 6).unwrap();
    use std::io::Write;
    for b in &bodies {
        z.write_all(b).unwrap();
    }
    let out = z.finish().unwrap();
    let zstd_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let raw: usize = bodies.iter().skip(1).map(Vec::len).sum::<usize>() / (n as usize - 1);
    let t0 = Instant::now();
    let mut dec = super::delta::Decoder::default();
    for (i, b) in bodies.iter().enumerate() {
        dec.decode(i == 0, b).unwrap();
        let _ = dec.state().unwrap().snapshot().unwrap();
    }
    let dec_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    eprintln!("split {split_us:.0}us encode {enc_us:.0}us marks {marks_us:.0}us zstd {zstd_us:.0}us decode {dec_us:.0}us; raw change frame {raw} bytes, key {} bytes, compressed {} bytes/frame {m}", bodies[0].len(), out.len() / n as usize);
}

/// Which figures take the bytes of a recording (TORCHTOP_ANALYZE=FILE, --release --ignored).
#[test]
#[ignore]
fn what_takes_the_bytes() {
    use std::io::Write;
    let Some(path) = std::env::var_os("TORCHTOP_ANALYZE") else {
        return;
    };
    let mut recording = Recording::open(Path::new(&path)).unwrap();
    let mut cursor = Cursor::default();
    let snaps: Vec<Snapshot> = (0..recording.frames().len())
        .map(|i| recording.snapshot(&mut cursor, i).unwrap())
        .collect();
    for level in [3, 6, 9, 12, 15, 19] {
        let t0 = std::time::Instant::now();
        let mut enc = super::delta::Encoder::default();
        let mut z = zstd::stream::write::Encoder::new(Vec::new(), level).unwrap();
        for (i, s) in snaps.iter().enumerate() {
            let mut out = Vec::new();
            enc.encode(super::tokens::split(s).unwrap(), i == 0, &mut out);
            z.write_all(&out).unwrap();
            if i % 2 == 1 {
                z.flush().unwrap();
            }
        }
        let n = z.finish().unwrap().len();
        eprintln!(
            "level {level}: {} bytes/frame, {:.0} us/frame",
            n / snaps.len(),
            t0.elapsed().as_secs_f64() * 1e6 / snaps.len() as f64
        );
    }
    let size = |f: &dyn Fn(&mut Snapshot)| {
        let mut enc = super::delta::Encoder::default();
        let mut z = zstd::stream::write::Encoder::new(Vec::new(), 6).unwrap();
        let mut raw = 0;
        for (i, s) in snaps.iter().enumerate() {
            let mut s = s.clone();
            f(&mut s);
            let mut out = Vec::new();
            enc.encode(super::tokens::split(&s).unwrap(), i == 0, &mut out);
            if i > 0 {
                raw += out.len();
            }
            z.write_all(&out).unwrap();
        }
        (
            raw / (snaps.len() - 1),
            z.finish().unwrap().len() / snaps.len(),
        )
    };
    eprintln!("all: {:?}", size(&|_| {}));
    eprintln!(
        "no running_seconds: {:?}",
        size(&|s| for p in &mut s.processes {
            p.running_seconds = None
        })
    );
    eprintln!(
        "no sm%: {:?}",
        size(&|s| for p in &mut s.processes {
            p.sm_percent = None
        })
    );
    eprintln!(
        "no cpu%: {:?}",
        size(&|s| for p in &mut s.processes {
            p.cpu_percent = None;
            p.children_cpu_percent = None
        })
    );
    eprintln!(
        "no torch: {:?}",
        size(&|s| for p in &mut s.processes {
            p.torch = None
        })
    );
    eprintln!(
        "no torch age/step: {:?}",
        size(&|s| for p in &mut s.processes {
            if let Some(t) = &mut p.torch {
                t.age_seconds = None;
                t.step_time_seconds = None;
                t.step = None
            }
        })
    );
    eprintln!("no warnings: {:?}", size(&|s| s.warnings.clear()));
    eprintln!("no gpus: {:?}", size(&|s| s.gpus.clear()));
    eprintln!("no host: {:?}", size(&|s| s.host = Default::default()));
    eprintln!(
        "no time: {:?}",
        size(&|s| {
            s.time.clear();
            s.unix_seconds = 0.0
        })
    );
}

/// The writer's time per frame on a real recording (TORCHTOP_ANALYZE=FILE, --release --ignored).
#[test]
#[ignore]
fn writer_timing() {
    let Some(path) = std::env::var_os("TORCHTOP_ANALYZE") else {
        return;
    };
    let mut recording = Recording::open(Path::new(&path)).unwrap();
    let mut cursor = Cursor::default();
    let snaps: Vec<Arc<Snapshot>> = (0..recording.frames().len())
        .map(|i| Arc::new(recording.snapshot(&mut cursor, i).unwrap()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    for round in 0..5 {
        let mut writer =
            FileWriter::create(options(&dir.path().join(format!("w{round}")))).unwrap();
        let t0 = std::time::Instant::now();
        for s in &snaps {
            writer.write(s).unwrap();
        }
        writer.finish().unwrap();
        eprintln!(
            "writer: {:.0} us/frame",
            t0.elapsed().as_secs_f64() * 1e6 / snaps.len() as f64
        );
    }
}
