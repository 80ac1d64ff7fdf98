//! Opening snapshot files: symbolic links, directories, and the figures a load gives.

use super::{load, Links};
use crate::memsnap::model::tests::fixture;

/// A scratch directory, removed when the returned guard drops.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("torchtop-memsnap-unit-")
        .tempdir()
        .unwrap()
}

#[test]
fn a_link_is_followed_for_a_typed_path_and_refused_for_a_reported_one() {
    let scratch = scratch();
    let dir = scratch.path();
    let link = dir.join("snapshot.pickle");
    std::os::unix::fs::symlink(fixture("oom.pickle"), &link).unwrap();
    let loaded = load(&link, Links::Follow).expect("a typed path may be a link");
    assert_eq!(loaded.snapshot.segments.len(), 6);
    assert_eq!(
        loaded.file_bytes,
        std::fs::metadata(fixture("oom.pickle")).unwrap().len()
    );
    let error = load(&link, Links::Refuse)
        .err()
        .expect("refused")
        .to_string();
    assert!(error.contains("is a symbolic link"), "{error}");
}

#[test]
fn a_directory_is_not_a_snapshot() {
    let scratch = scratch();
    let dir = scratch.path();
    let error = load(dir, Links::Follow).err().expect("refused").to_string();
    assert!(
        error.ends_with("is not a regular file: give the path of a snapshot pickle"),
        "{error}"
    );
    let missing = load(&dir.join("absent.pickle"), Links::Follow)
        .err()
        .unwrap()
        .to_string();
    assert!(
        missing.contains("could not be opened: No such file or directory"),
        "{missing}"
    );
}

#[test]
fn errors_name_the_file_with_control_characters_escaped() {
    let scratch = scratch();
    let dir = scratch.path();
    let path = dir.join("evil\x1b]0;pwned\x07.pickle");
    std::fs::write(&path, b"not a pickle").unwrap();
    let error = load(&path, Links::Follow).err().unwrap().to_string();
    assert!(
        !error.contains('\x1b') && error.contains("evil\\e]0;pwned\\x07.pickle is not a pickle"),
        "{error}"
    );
}

/// Reads, converts, analyses, prints and draws `bytes`; whatever they hold, nothing panics.
fn everything(bytes: &[u8]) {
    use crate::memsnap::analysis::{paths, tree, Analysis};
    use crate::memsnap::view::{render, state::Viewer};
    let Ok(pickle) = crate::memsnap::pickle::Pickle::read(bytes, Some(bytes.len() as u64)) else {
        return;
    };
    let Ok(snapshot) = crate::memsnap::model::from_pickle(&pickle) else {
        return;
    };
    let analysis = Analysis::new(&snapshot);
    let loaded = super::LoadedSnapshot {
        path: "fuzz.pickle".into(),
        file_bytes: bytes.len() as u64,
        snapshot,
        analysis,
    };
    let _ = paths::folded_lines(&loaded.snapshot);
    let _ = tree::Tree::build(&loaded.snapshot, &tree::TreeOptions::default());
    let _ = crate::memsnap::output::json(&loaded);
    let mut text = Vec::new();
    crate::memsnap::output::text(&loaded, &mut text).unwrap();
    let mut viewer = Viewer::new(loaded, false);
    for tab in "1234".chars() {
        let key = crossterm::event::KeyEvent::from(crossterm::event::KeyCode::Char(tab));
        viewer.on_key(key);
        let mut terminal =
            ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).unwrap();
        terminal.draw(|frame| render::draw(frame, &viewer)).unwrap();
    }
}

#[test]
fn a_snapshot_cut_anywhere_reads_or_fails_with_a_sentence() {
    let bytes = std::fs::read(fixture("oom.pickle")).unwrap();
    for end in 0..bytes.len() {
        everything(&bytes[..end]);
    }
}

#[test]
fn a_snapshot_with_bytes_changed_reads_or_fails_with_a_sentence() {
    let good = std::fs::read(fixture("oom.pickle")).unwrap();
    // A fixed linear congruential sequence: the same cases on every run.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state >> 33
    };
    for _ in 0..1000 {
        let mut bytes = good.clone();
        for _ in 0..=(next() % 4) {
            let at = next() as usize % bytes.len();
            bytes[at] = match next() % 3 {
                0 => next() as u8,
                1 => 0xff,
                _ => bytes[at] ^ 0x80,
            };
        }
        everything(&bytes);
    }
}

/// `body`, a Python expression, pickled by Python (protocol 4, as torch writes snapshots).
fn pickled(body: &str) -> Vec<u8> {
    let script =
        format!("import pickle, sys\nsys.stdout.buffer.write(pickle.dumps({body}, protocol=4))");
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn sizes_at_the_edge_of_u64_do_not_overflow() {
    let max = u64::MAX;
    let body = format!(
        "{{'segments': [{{'device': 0, 'address': {max}, 'total_size': {max}, 'blocks': [\
            {{'size': {max}, 'requested_size': {max}, 'state': 'active_allocated', 'frames': []}},\
            {{'size': {max}, 'state': 'inactive'}}, {{'size': {max}, 'state': 'active_pending_free'}}]}},\
          {{'device': 0, 'address': 0, 'total_size': {max}, 'blocks': [{{'size': {max}, 'state': 'active_allocated'}}]}}],\
          'device_traces': [[{{'action': 'alloc', 'addr': 1, 'size': {max}}}, {{'action': 'alloc', 'addr': 2, 'size': {max}}},\
            {{'action': 'segment_alloc', 'addr': 1, 'size': {max}}}, {{'action': 'segment_unmap', 'addr': 1, 'size': {max}}},\
            {{'action': 'free_completed', 'addr': 9, 'size': {max}}}, {{'action': 'oom', 'device_free': {max}, 'size': {max}}}]]}}"
    );
    let pickled = pickled(&body);
    everything(&pickled);
}

/// The text summary of a loaded snapshot.
fn text_of(loaded: &super::LoadedSnapshot) -> String {
    let mut out = Vec::new();
    crate::memsnap::output::text(loaded, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// The number after `before` in `text`.
fn number_after(text: &str, before: &str) -> u64 {
    let at = text
        .find(before)
        .unwrap_or_else(|| panic!("no {before:?} in {text}"))
        + before.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

#[test]
fn json_numbers_events_as_the_text_does() {
    let loaded = load(&fixture("oom.pickle"), Links::Follow).unwrap();
    let text = text_of(&loaded);
    let json = crate::memsnap::output::json(&loaded);
    let device = &json["devices"][0];
    assert_eq!(
        device["oom"]["event"],
        number_after(&text, "free on the device (event ")
    );
    assert_eq!(
        device["trace"]["peak_event"],
        number_after(&text, " in use at event ")
    );
}

#[test]
fn the_holders_list_keeps_generated_frames_and_marks_a_cut() {
    let frame = |file: &str, line: u32, name: &str| {
        format!("{{'filename': '{file}', 'line': {line}, 'name': '{name}'}}")
    };
    let frames = [
        frame(
            "/pytorch/aten/src/ATen/native/cuda/Blas.cpp",
            391,
            "at::native::addmm_out_cuda_impl",
        ),
        frame("<eval_with_key>.5", 14, "forward"),
        frame("/p/model.py", 30, "block"),
        frame("/p/model.py", 40, "layer"),
        frame("/p/train.py", 50, "train_step"),
        frame("/p/train.py", 90, "<module>"),
    ];
    let snapshot = crate::memsnap::model::tests::from_python_dict(&format!(
        "{{'segments': [{{'device': 0, 'address': 0, 'total_size': 4096, 'blocks': [\
            {{'size': 4096, 'requested_size': 4096, 'state': 'active_allocated', 'frames': [{}]}}]}}]}}",
        frames.join(", ")
    ))
    .unwrap();
    let analysis = crate::memsnap::analysis::Analysis::new(&snapshot);
    let loaded = super::LoadedSnapshot {
        path: "generated.pickle".into(),
        file_bytes: 1,
        snapshot,
        analysis,
    };
    let text = text_of(&loaded);
    let line = text.lines().last().unwrap();
    assert!(
        line.ends_with(
            " cuda:0 … › train_step (train.py:50) › layer (model.py:40) › block (model.py:30) › \
             forward (<eval_with_key>.5:14)"
        ),
        "{text}"
    );
}

#[test]
fn an_empty_snapshot_is_not_said_to_lack_history() {
    let snapshot = crate::memsnap::model::tests::from_python_dict(
        "{'segments': [], 'device_traces': [[]], 'allocator_settings': {}}",
    )
    .unwrap();
    assert_eq!(
        snapshot.stacks_note(),
        "empty: no segments and no trace events"
    );
    let off = crate::memsnap::model::tests::snapshot("state_only.pickle").unwrap();
    assert_eq!(off.stacks_note(), "no stacks: history recording was off");
}

#[test]
fn the_cgroup_limit_applies_when_it_leaves_less_than_memavailable() {
    use super::memory::{refusal, room};
    let scratch = scratch();
    let mount = scratch.path();
    std::fs::write(mount.join("cgroup.controllers"), "memory cpu\n").unwrap();
    let job = mount.join("job_42");
    let step = job.join("step_0");
    std::fs::create_dir_all(&step).unwrap();
    // The job's limit binds: its step has none of its own.
    std::fs::write(job.join("memory.max"), "450000000\n").unwrap();
    std::fs::write(job.join("memory.current"), "50000000\n").unwrap();
    std::fs::write(step.join("memory.max"), "max\n").unwrap();
    std::fs::write(step.join("memory.current"), "40000000\n").unwrap();
    let meminfo = "MemTotal: 65536000 kB\nMemFree: 30000000 kB\nMemAvailable: 60000000 kB\n";
    let found = room(Some(meminfo), Some("0::/job_42/step_0\n"), mount).unwrap();
    assert_eq!(found.bytes, 400_000_000);
    let sentence = refusal(100_000_000, &found).expect("refused");
    assert!(
        sentence.contains("torchtop's cgroup still allows"),
        "{sentence}"
    );
    assert!(sentence.contains("job_42/memory.max"), "{sentence}");
    // With more memory in the cgroup than on the machine, MemAvailable applies.
    std::fs::write(job.join("memory.max"), "900000000000\n").unwrap();
    let found = room(Some(meminfo), Some("0::/job_42/step_0\n"), mount).unwrap();
    assert_eq!(found.bytes, 60_000_000 * 1024);
    assert!(
        found.source.contains("memory available"),
        "{}",
        found.source
    );
}

#[test]
fn a_v1_memory_limit_applies_too() {
    use super::memory::room;
    let scratch = scratch();
    let dir = scratch.path().join("memory/slurm/uid_0/job_7");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("memory.limit_in_bytes"), "1000000\n").unwrap();
    std::fs::write(dir.join("memory.usage_in_bytes"), "250000\n").unwrap();
    let found = room(None, Some("4:memory:/slurm/uid_0/job_7\n"), scratch.path()).unwrap();
    assert_eq!(found.bytes, 750_000);
}

/// Two live blocks of 2^63 bytes each, as mkfg.py in the review wrote them: their sum wraps
/// a `usize`, which inferno adds counts in.
#[test]
fn a_flame_graph_whose_sizes_add_past_any_device_is_refused_with_a_sentence() {
    let size = 1u64 << 63;
    let segment = |address: u64| {
        format!(
            "{{'device': 0, 'address': {address}, 'total_size': {size}, 'blocks': [{{'size': \
             {size}, 'state': 'active_allocated', 'address': {address}, 'frames': \
             [{{'filename': 'train.py', 'line': {address}, 'name': 'f{address}'}}]}}]}}"
        )
    };
    let body = format!(
        "{{'segments': [{}, {}], 'device_traces': [[]]}}",
        segment(0),
        segment(1)
    );
    let pickled = pickled(&body);
    let pickle = crate::memsnap::pickle::Pickle::read(pickled.as_slice(), None).unwrap();
    let snapshot = crate::memsnap::model::from_pickle(&pickle).unwrap();
    let loaded = super::LoadedSnapshot {
        path: "overflow.pickle".into(),
        file_bytes: pickled.len() as u64,
        analysis: crate::memsnap::analysis::Analysis::new(&snapshot),
        snapshot,
    };
    let error = crate::memsnap::output::flamegraph(&loaded, Vec::new()).unwrap_err();
    assert_eq!(
        error,
        "holds live allocations whose sizes add up to more than 4 EiB (2^62 bytes), more than any device \
         holds: it cannot be drawn as a flame graph"
    );
}
