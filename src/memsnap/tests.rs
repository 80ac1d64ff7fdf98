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
    everything(&out.stdout);
}
