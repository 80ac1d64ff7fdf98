//! `torchtop snapshot` end to end on the fixtures of tests/fixtures/memsnap: its figures against
//! torch's own `_memory_viz.py`, the flame graph's root, `--compare`, every malformed pickle, and
//! the viewer in a pseudo-terminal.
//!
//! `_memory_viz.py` runs as a plain script (it imports nothing of torch for `stats` and `trace`).
//! It is found at `$TORCHTOP_MEMORY_VIZ`, or in the CI's torch venv under
//! `target/torch-ci/venv/lib/python3*/site-packages/torch/cuda/`; without it those two tests
//! print `skipped:` and pass, but fail under CI (`.ci/run` makes the venv first).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::pty::PtySession;
use common::PATIENCE;
use serde_json::Value;

/// Fixtures that must read the same in torchtop and in _memory_viz.
const SNAPSHOTS: [&str; 8] = [
    "h200_torch_2_11_oom.pickle",
    "oom.pickle",
    "oom_protocol2.pickle",
    "oom_protocol5.pickle",
    "legacy_2_0.pickle",
    "state_only.pickle",
    "compare_before.pickle",
    "compare_after.pickle",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/memsnap")
        .join(name)
}

fn torchtop(args: &[&str]) -> Output {
    Command::new(common::torchtop_binary())
        .arg("snapshot")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("torchtop runs")
}

fn json(file: &str) -> Value {
    let out = torchtop(&[fixture(file).to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

fn memory_viz() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TORCHTOP_MEMORY_VIZ") {
        return Some(PathBuf::from(path));
    }
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/torch-ci/venv/lib");
    std::fs::read_dir(lib).ok()?.flatten().find_map(|python| {
        let path = python
            .path()
            .join("site-packages/torch/cuda/_memory_viz.py");
        path.exists().then_some(path)
    })
}

/// `_memory_viz`'s `_format_size`: "74.0MiB".
fn viz_size(bytes: u64) -> String {
    let mut num = bytes as f64;
    for unit in ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"] {
        if num.abs() < 1024.0 {
            return format!("{num:.1}{unit}B");
        }
        num /= 1024.0;
    }
    format!("{num:.1}YiB")
}

fn line_value<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in\n{text}"))
        .trim()
}

fn python(args: &[&str]) -> String {
    let out = Command::new("python3")
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn totals_match_memory_viz_stats() {
    let Some(viz) = memory_viz() else {
        common::skip_or_fail("no _memory_viz.py (set TORCHTOP_MEMORY_VIZ or run .ci/torch-cpu-libtorch.sh target/torch-ci)");
        return;
    };
    let viz = viz.to_str().unwrap();
    // The same function with exact byte counts instead of "74.0MiB".
    let exact = "import importlib.util, pickle, sys\n\
        spec = importlib.util.spec_from_file_location('memory_viz', sys.argv[1])\n\
        viz = importlib.util.module_from_spec(spec); spec.loader.exec_module(viz)\n\
        viz._format_size = lambda n: str(n)\n\
        data = pickle.load(open(sys.argv[2], 'rb'))\n\
        data = {'segments': data, 'traces': []} if isinstance(data, list) else data\n\
        print(viz.segsum(data))";
    for name in SNAPSHOTS {
        let file = fixture(name);
        let ours = &json(name)["totals"];
        let (segments, reserved, allocated) = (
            ours["segments"].as_u64().unwrap(),
            ours["reserved_bytes"].as_u64().unwrap(),
            ours["requested_bytes"].as_u64().unwrap(),
        );
        let stats = python(&[viz, "stats", file.to_str().unwrap()]);
        assert_eq!(
            line_value(&stats, "segments:"),
            segments.to_string(),
            "{name}"
        );
        assert_eq!(
            line_value(&stats, "total_reserved:"),
            viz_size(reserved),
            "{name}"
        );
        assert_eq!(
            line_value(&stats, "total_allocated:"),
            viz_size(allocated),
            "{name}"
        );
        let stats = python(&["-c", exact, viz, file.to_str().unwrap()]);
        assert_eq!(
            line_value(&stats, "total_reserved:"),
            reserved.to_string(),
            "{name}"
        );
        assert_eq!(
            line_value(&stats, "total_allocated:"),
            allocated.to_string(),
            "{name}"
        );
        println!("{name}: segments {segments}, total_reserved {reserved}, total_allocated {allocated}: as _memory_viz stats");
    }
}

#[test]
fn trace_events_and_the_oom_match_memory_viz_trace() {
    let Some(viz) = memory_viz() else {
        common::skip_or_fail("no _memory_viz.py (set TORCHTOP_MEMORY_VIZ or run .ci/torch-cpu-libtorch.sh target/torch-ci)");
        return;
    };
    for name in SNAPSHOTS {
        let ours = json(name);
        let trace = python(&[
            viz.to_str().unwrap(),
            "trace",
            fixture(name).to_str().unwrap(),
        ]);
        let mut theirs = trace.split("Device ").skip(1);
        for device in ours["devices"].as_array().unwrap() {
            let Some(events) = device["trace"]["events"].as_u64() else {
                continue;
            };
            let section = theirs
                .next()
                .unwrap_or_else(|| panic!("{name}: fewer devices in\n{trace}"));
            assert!(
                section.contains(&format!("\n{events} entries\n")),
                "{name}: {events} events in\n{section}"
            );
            if let Some(oom) = device["oom"].as_object() {
                let line = format!(
                    "raise OutOfMemoryError # {} requested, {} free in CUDA",
                    viz_size(oom["requested_bytes"].as_u64().unwrap()),
                    viz_size(oom["device_free_bytes"].as_u64().unwrap())
                );
                assert!(section.contains(&line), "{name}: {line} in\n{section}");
            }
        }
    }
}

/// The one snapshot here that real CUDA torch wrote: the agent's OOM observer on an H200
/// (torch 2.11.0+cu130, 2026-12-04), for a program that held four 256 MiB blocks and asked for
/// 200 GiB (`tests/bench/on_a_gpu.sh`'s oom.py).
#[test]
fn a_snapshot_torch_wrote_on_an_h200_at_an_oom_reads_as_it_happened() {
    let doc = json("h200_torch_2_11_oom.pickle");
    let device = &doc["devices"][0];
    assert_eq!(device["segments"], 4, "{device}");
    assert_eq!(device["allocated_bytes"], 1u64 << 30, "{device}");
    let oom = &device["oom"];
    assert_eq!(oom["requested_bytes"], 200u64 << 30, "{oom}");
    assert_eq!(oom["device_free_bytes"], 148_483_670_016u64, "{oom}");
    assert_eq!(
        oom["stack"],
        serde_json::json!(["<module> (oom.py:6)", "too_big (oom.py:4)"])
    );
    assert_eq!(doc["stacks_recorded"], true);
    assert_eq!(
        doc["top_stacks"][0]["frames"],
        serde_json::json!(["<module> (oom.py:2)"])
    );
    assert_eq!(doc["top_stacks"][0]["blocks"], 4);
}

#[test]
fn the_flame_graph_root_weighs_the_allocated_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("oom.svg");
    let out = torchtop(&[
        fixture("oom.pickle").to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    let root = text
        .split("<title>all (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .expect("the root frame")
        .replace(',', "");
    let allocated = json("oom.pickle")["totals"]["allocated_bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(root.parse::<u64>().unwrap(), allocated);
    let folded = torchtop(&[fixture("oom.pickle").to_str().unwrap(), "--folded"]);
    let sum: u64 = String::from_utf8(folded.stdout)
        .unwrap()
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(sum, allocated);
    println!("flame graph root {root} bytes = folded sum {sum} = total allocated {allocated}");
}

/// Another user can plant a link where root will write a flame graph (/tmp is the usual
/// place). Before, the SVG went through the link into the file it named.
#[test]
fn the_flame_graph_replaces_a_planted_link_instead_of_writing_through_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let svg = dir.path().join("flame.svg");
    std::os::unix::fs::symlink(&victim, &svg).unwrap();
    let out = torchtop(&[
        fixture("oom.pickle").to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(&victim).unwrap() == "precious\n",
        "the flame graph was written through the link into the file it named"
    );
    let written = std::fs::symlink_metadata(&svg).unwrap();
    assert!(written.file_type().is_file(), "{written:?}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "a temporary file was left: {names:?}");
}

#[test]
fn compare_finds_the_one_stack_that_grew() {
    let (a, b) = (
        fixture("compare_before.pickle"),
        fixture("compare_after.pickle"),
    );
    let out = torchtop(&["--compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("1 stack(s) grew, 0 shrank\n"), "{text}");
    let grew = text.lines().nth(2).unwrap();
    assert!(
        grew.contains("+   6.5MiB  5.0MiB → 11.5MiB  (3 → 7 blocks)"),
        "{grew}"
    );
    assert!(grew.contains("remember (train.py:17)"), "{grew}");
    let out = torchtop(&[
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--json",
    ]);
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (diff["grew"].as_u64(), diff["shrank"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(
        diff["stacks"][0]["delta_bytes"].as_i64(),
        Some(12_058_112 - 5_242_880)
    );
    print!("{text}");
}

#[test]
fn every_malformed_pickle_gets_a_sentence() {
    let cases = [
        (
            "truncated.pickle",
            "ends early, at byte 4605: the file is truncated",
        ),
        ("empty.pickle", "is empty"),
        ("not_a_pickle.pickle", "is not a pickle"),
        (
            "not_a_snapshot.pickle",
            "is not a PyTorch memory snapshot: its dict has no 'segments'",
        ),
        ("deep_nesting.pickle", "nests values deeper than 64 levels"),
        (
            "huge_length.pickle",
            "declares a 1152921504606846976-byte value at byte 11 but only 9 bytes follow",
        ),
        (
            "memo_bomb.pickle",
            "refers to its shared values far more often than its 202131 bytes allow (a memo bomb)",
        ),
        ("memo_index.pickle", "is not a PyTorch memory snapshot"),
        (
            "reduce.pickle",
            "segment 0 is the Python object posix.system(...), not a dict",
        ),
    ];
    let pwned = Path::new("/tmp/torchtop-pwned");
    let _ = std::fs::remove_file(pwned);
    for (name, expected) in cases {
        let path = fixture(&format!("malformed/{name}"));
        let out = torchtop(&[path.to_str().unwrap(), "--json"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}: nothing on stdout");
        assert!(
            stderr.starts_with("torchtop snapshot: ") && stderr.contains(expected),
            "{name}: {stderr}"
        );
        assert_eq!(
            stderr.lines().count(),
            1,
            "{name}: one sentence, no panic: {stderr}"
        );
    }
    assert!(!pwned.exists(), "the REDUCE in reduce.pickle ran");
}

#[test]
fn a_fifo_or_a_device_is_refused_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    for path in [fifo.as_path(), Path::new("/dev/zero")] {
        let mut child = Command::new(common::torchtop_binary())
            .args(["snapshot", path.to_str().unwrap(), "--json"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("torchtop snapshot {} did not return", path.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(1));
        assert!(stderr.contains("is not a regular file"), "{stderr}");
    }
}

#[test]
fn a_pipe_gets_the_text_summary() {
    let out = torchtop(&[fixture("oom.pickle").to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("OUT OF MEMORY: 64.0MiB requested, 34.0MiB free on the device"),
        "{text}"
    );
    assert!(
        text.contains("as _memory_viz stats counts: segments 6, total_reserved 77594624 B"),
        "{text}"
    );
    assert!(text.contains("remember (train.py:17)"), "{text}");
}

#[test]
fn the_viewer_in_a_terminal_switches_views_and_quits_on_q() {
    let file = fixture("oom.pickle");
    let args = ["snapshot", file.to_str().unwrap()];
    let mut session = PtySession::spawn(&common::torchtop_binary(), &args, &[], 100, 30);
    let wait = |session: &PtySession, text: &str| {
        assert!(
            session.wait_for(PATIENCE, |s| s.contains(text)),
            "no {text:?} on\n{}",
            session.screen()
        );
    };
    wait(&session, "OUT OF MEMORY: 64.0MiB requested");
    assert!(session.on_alternate_screen());
    session.send(b"2");
    wait(&session, "Who holds the memory  53.2MiB live");
    session.send(b"3");
    wait(&session, "block 1 of 4  active_allocated");
    session.send(b"4");
    wait(&session, "Timeline cuda:0  63 events");
    session.send(b"q");
    let status = session.wait_exit(PATIENCE).expect("q quits");
    assert!(status.success());
    // The last bytes may still be on their way through the pty.
    let deadline = Instant::now() + PATIENCE;
    while session.on_alternate_screen() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!session.on_alternate_screen(), "the terminal is restored");
}

/// The viewer read keys with crossterm on its own thread: when its terminal hung up (an SSH
/// session dropped), crossterm retried the dead terminal's EOF for good, at 60% of a core, and
/// SIGTERM went unheard. Two such viewers ran for 1 h 50 min on the build machine.
#[test]
fn the_viewer_ends_when_its_terminal_hangs_up_or_on_sigterm() {
    let file = fixture("oom.pickle");
    let args = ["snapshot", file.to_str().unwrap()];
    for hang_up in [true, false] {
        let mut session = PtySession::spawn(&common::torchtop_binary(), &args, &[], 100, 30);
        assert!(
            session.wait_for(PATIENCE, |s| s.contains("OUT OF MEMORY")),
            "{}",
            session.screen()
        );
        let pid = session.pid().expect("the viewer's pid");
        if hang_up {
            session.close_terminal();
        } else {
            // SAFETY: kill(2) on the pid of the child this test started.
            assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
        }
        assert!(
            session.wait_exit(PATIENCE).is_some(),
            "the viewer still runs (hang-up: {hang_up})"
        );
    }
}

/// A snapshot another user's agent wrote can be any size, and reading one takes about 2.3 times
/// its size in memory: one larger than the memory available gets a sentence before a byte is
/// read, rather than running the reader (root's monitor, after `S`) out of memory. The file
/// here is sparse, so it takes no disk.
#[test]
fn a_snapshot_too_big_for_the_memory_available_is_refused_with_a_sentence() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.pickle");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(1 << 42).unwrap();
    drop(file);
    let out = torchtop(&[path.to_str().unwrap(), "--json"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("memory available"), "{stderr}");
}
