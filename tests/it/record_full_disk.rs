//! Recording on a disk that fills up and empties again, with the built binary and the fake
//! NVML, headless (`torchtop record`) and from the monitor (`R`). A file size limit
//! (RLIMIT_FSIZE) stands in for the full disk, without a filesystem to mount: torchtop ignores
//! SIGXFSZ while it records, so a write past the limit fails with EFBIG as one on a full disk
//! fails with ENOSPC. The limit is lifted from outside with prlimit(2) while torchtop runs.
//! The recorder must say once that it cannot write, go on, say when it writes again, and leave
//! a file that replays whole, with a gap.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use crate::common;
use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use common::{output_within_patience, PATIENCE};

/// What the recorder in the monitor may write before its writes fail: its header and first
/// block, not much more (the 8-GPU scenario's key frame alone is a few KB once compressed).
const FILE_SIZE_LIMIT: libc::rlim_t = 12 << 10;

/// More than a header and an empty block's header: the file holds compressed frames.
const FRAMES_ON_DISK: u64 = 512;

/// The file's size once the recorder's first flush (a key frame and the frames after it) is in
/// it. The next flush comes 2 s later, so a limit set at once falls between the two.
fn first_flush_size(file: &std::path::Path) -> Result<libc::rlim_t, String> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let size = std::fs::metadata(file).map_or(0, |m| m.len());
        if size > FRAMES_ON_DISK {
            return Ok(size);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} never held frames ({size} bytes)",
                file.display()
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn limit_file_size(pid: Option<libc::pid_t>, soft: libc::rlim_t) -> std::io::Result<()> {
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let target = pid.unwrap_or(0);
    // SAFETY: prlimit reads and writes the two rlimit structs given, nothing else; it is
    // async-signal-safe, so it may run between fork and exec.
    unsafe {
        if libc::prlimit(target, libc::RLIMIT_FSIZE, std::ptr::null(), &raw mut now) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let new = libc::rlimit {
            rlim_cur: soft.min(now.rlim_max),
            rlim_max: now.rlim_max,
        };
        if libc::prlimit(
            target,
            libc::RLIMIT_FSIZE,
            &raw const new,
            std::ptr::null_mut(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[test]
fn a_recording_on_a_disk_that_fills_up_goes_on_and_replays_with_a_gap() {
    let sleepers = Sleepers::spawn(64);
    let scenario = ScenarioFile::from_fixture("eight_gpus.toml", &sleepers.pids());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("full.ttrec");
    let mut command = Command::new(common::torchtop_binary());
    command
        .args(["--utc", "record", "-o", file.to_str().unwrap(), "-d", "0.2"])
        .envs(scenario.env())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("run torchtop record");
    let pid = child.id() as libc::pid_t;
    // The disk fills up once the first frames are in the file, so that the replay has frames
    // on both sides of the gap however large the key frame is on this machine.
    let first_flush = first_flush_size(&file).unwrap_or_else(|why| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{why}")
    });
    limit_file_size(Some(pid), first_flush).expect("limit the file size");
    let (lines_tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut said = Vec::new();
    let mut wait_for = |what: &str, said: &mut Vec<String>| {
        let deadline = Instant::now() + PATIENCE;
        while !said.iter().any(|line| line.contains(what)) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = lines.recv_timeout(left) else {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "no line with {what:?} on stderr; it said:\n{}",
                    said.join("\n")
                );
            };
            said.push(line);
        }
    };
    wait_for("could not write to", &mut said);
    let failed = said.last().unwrap().clone();
    assert!(
        failed.contains("File too large") && failed.contains("the monitor goes on"),
        "{failed}"
    );
    // The disk has room again.
    limit_file_size(Some(pid), libc::RLIM_INFINITY).expect("lift the file size limit");
    wait_for("works again", &mut said);
    let resumed = said.last().unwrap().clone();
    assert!(
        resumed.contains("snapshots were dropped") && resumed.contains("the recording has a gap"),
        "{resumed}"
    );
    // A few frames after the gap, then a clean stop.
    std::thread::sleep(std::time::Duration::from_secs(1));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    said.extend(lines.iter());
    let said = said.join("\n");
    assert!(status.success(), "{status}: {said}");
    assert_eq!(
        said.matches("could not write to").count(),
        1,
        "said once: {said}"
    );
    assert!(
        said.contains("snapshots were not recorded because the disk refused writes"),
        "{said}"
    );

    eprintln!("the first flush left {first_flush} bytes; torchtop record said:\n{said}");

    // The file replays whole: no word of damage, every frame in order, with the gap.
    let replay = output_within_patience(Command::new(common::torchtop_binary()).args([
        "replay",
        file.to_str().unwrap(),
        "--json",
    ]));
    let stderr = String::from_utf8_lossy(&replay.stderr);
    assert!(replay.status.success() && stderr.is_empty(), "{stderr}");
    let times: Vec<f64> = String::from_utf8_lossy(&replay.stdout)
        .lines()
        .map(|line| {
            let doc: serde_json::Value = serde_json::from_str(line).unwrap();
            doc["unix_seconds"].as_f64().unwrap()
        })
        .collect();
    let steps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(steps.iter().all(|&s| s > 0.0), "{times:?}");
    let gap = steps.iter().copied().fold(0.0, f64::max);
    // Snapshots come every 0.2 s; a retry comes 5 s after the failure at the earliest.
    assert!(gap >= 4.0, "no gap in {times:?}");
    let after = steps.iter().position(|&s| s == gap).unwrap();
    assert!(times.len() - after > 2, "frames after the gap: {times:?}");
}

/// `R` in the monitor, on a disk that fills up: the indicator says the recording is paused and
/// the status line why; once there is room the status line says it records again, and the
/// file replays whole.
#[test]
fn r_in_the_monitor_pauses_on_a_full_disk_and_records_again() {
    let sleepers = Sleepers::spawn(64);
    let scenario = ScenarioFile::from_fixture("eight_gpus.toml", &sleepers.pids());
    let dir = tempfile::tempdir().unwrap();
    let mut env = scenario.env();
    env.push((
        "TORCHTOP_RECORD_DIR".into(),
        dir.path().to_str().unwrap().to_string(),
    ));
    let mut session = PtySession::spawn(
        &common::torchtop_binary(),
        &["-d", "0.2"],
        &env_refs(&env),
        220,
        50,
    );
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("H100")),
        "{}",
        session.screen()
    );
    let pid = session.pid().unwrap() as libc::pid_t;
    limit_file_size(Some(pid), FILE_SIZE_LIMIT).expect("limit the file size");
    session.send(b"R");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("REC PAUSED")
            && s.contains("could not write to")),
        "{}",
        session.screen()
    );
    limit_file_size(Some(pid), libc::RLIM_INFINITY).expect("lift the file size limit");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("works again")
            && s.contains("\u{25cf} REC")),
        "{}",
        session.screen()
    );
    session.send(b"R");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("recording saved")
            && s.contains("snapshots were not recorded")),
        "{}",
        session.screen()
    );
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).is_some(), "q did not quit");
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let replay = output_within_patience(Command::new(common::torchtop_binary()).args([
        "replay",
        files[0].to_str().unwrap(),
        "--json",
    ]));
    let stderr = String::from_utf8_lossy(&replay.stderr);
    assert!(replay.status.success() && stderr.is_empty(), "{stderr}");
}
