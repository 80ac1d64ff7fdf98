//! The typed snapshot from the fixtures (built by tests/fixtures/memsnap/make_fixtures.py with
//! torch's structure) and from hand-made dicts that lack what a snapshot needs.

use std::path::PathBuf;

use super::*;
use crate::memsnap::pickle::Pickle;

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/memsnap")
        .join(name)
}

pub(crate) fn snapshot(name: &str) -> Result<Snapshot, String> {
    let bytes = std::fs::read(fixture(name)).expect("fixture");
    let pickle = Pickle::read(&bytes[..], Some(bytes.len() as u64)).map_err(|e| e.to_string())?;
    from_pickle(&pickle)
}

#[test]
fn the_oom_fixture_has_every_part_of_a_snapshot() {
    let s = snapshot("oom.pickle").unwrap();
    assert_eq!(s.segments.len(), 6);
    assert_eq!(s.traces.iter().map(Vec::len).collect::<Vec<_>>(), [63, 12]);
    for action in Action::ALL.iter().filter(|&&a| a != Action::Other) {
        assert!(
            s.traces.iter().flatten().any(|e| e.action == *action),
            "no {action:?} entry"
        );
    }
    let oom = s.traces[0]
        .iter()
        .find(|e| e.action == Action::Oom)
        .unwrap();
    assert_eq!((oom.size, oom.device_free()), (64 << 20, Some(34 << 20)));
    let settings = s.settings.as_ref().unwrap();
    assert_eq!(settings.expandable_segments, Some(true));
    assert_eq!(settings.conf.as_deref(), Some("expandable_segments:True"));
    assert_eq!(s.annotations.len(), 2);
    assert_eq!(s.annotations[0].stage.as_deref(), Some("START"));
    assert_eq!(s.devices(), [0, 1]);
    let expandable = s
        .segments
        .iter()
        .filter(|seg| seg.expandable == Some(true))
        .count();
    assert_eq!(expandable, 1);
    // Snapshot markers have no frames key: torch records them without a context.
    let marker = s.traces[0]
        .iter()
        .find(|e| e.action == Action::Snapshot)
        .unwrap();
    assert_eq!(marker.stack, StackId::EMPTY);
}

#[test]
fn frames_are_interned_once() {
    let s = snapshot("oom.pickle").unwrap();
    // make_fixtures.py builds 9 distinct tracebacks from 33 distinct frames.
    assert_eq!(s.frames.stacks.len(), 1 + 9);
    assert_eq!(s.frames.frames.len(), 33);
    let params: Vec<StackId> = s.segments[0].blocks[..3].iter().map(|b| b.stack).collect();
    assert!(params
        .iter()
        .all(|&id| id == params[0] && id != StackId::EMPTY));
    let top = s.frames.stack(params[0])[0];
    assert_eq!(
        s.frames.text(s.frames.frame(top).name),
        "torch::unwind::unwind()"
    );
    assert!(s.frames.frame(top).noise && !s.frames.frame(top).python);
}

#[test]
fn protocols_2_4_and_5_read_the_same() {
    let p4 = snapshot("oom.pickle").unwrap();
    for name in ["oom_protocol2.pickle", "oom_protocol5.pickle"] {
        let other = snapshot(name).unwrap();
        assert_eq!(other.segments, p4.segments, "{name}");
        assert_eq!(other.traces, p4.traces, "{name}");
        assert_eq!(other.settings, p4.settings, "{name}");
        assert_eq!(other.frames.stacks, p4.frames.stacks, "{name}");
    }
}

#[test]
fn torch_2_0_blocks_take_history_for_frames_and_requested_size() {
    let legacy = snapshot("legacy_2_0.pickle").unwrap();
    let current = snapshot("oom.pickle").unwrap();
    assert_eq!(legacy.segments.len(), current.segments.len());
    for (old, new) in legacy.segments.iter().zip(&current.segments) {
        assert_eq!(old.requested_size, None);
        assert_eq!(old.expandable, None);
        for (a, b) in old.blocks.iter().zip(&new.blocks) {
            assert_eq!((a.address, a.size, a.state), (b.address, b.size, b.state));
            if a.state != BlockState::Inactive {
                assert_eq!(a.requested_size, b.requested_size);
                assert_eq!(a.stack == StackId::EMPTY, b.stack == StackId::EMPTY);
            }
        }
    }
    assert!(legacy.settings.is_none());
    assert!(legacy.traces[0].iter().all(|e| e.time_us.is_none()));
}

#[test]
fn a_snapshot_without_history_has_no_stacks() {
    let s = snapshot("state_only.pickle").unwrap();
    assert!(!s.has_stacks());
    assert!(s.traces.iter().all(Vec::is_empty));
    assert_eq!(s.segments.len(), 6);
}

#[test]
fn what_is_not_a_snapshot_is_named() {
    let cases = [
        (
            "malformed/not_a_snapshot.pickle",
            "its dict has no 'segments' (it has 'model', 'epochs')",
        ),
        (
            "malformed/reduce.pickle",
            "segment 0 is the Python object posix.system(...), not a dict",
        ),
        ("malformed/memo_bomb.pickle", "a memo bomb"),
        ("malformed/memo_index.pickle", "no 'segments'"),
    ];
    for (name, expected) in cases {
        let error = snapshot(name).expect_err(name);
        assert!(error.contains(expected), "{name}: {error}");
    }
}

pub(crate) fn from_python_dict(body: &str) -> Result<Snapshot, String> {
    let script =
        format!("import pickle, sys\nsys.stdout.buffer.write(pickle.dumps({body}, protocol=4))");
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pickle = Pickle::read(&out.stdout[..], Some(out.stdout.len() as u64)).unwrap();
    from_pickle(&pickle)
}

#[test]
fn missing_core_fields_are_named() {
    let cases = [
        ("[{'address': 0, 'blocks': []}]", "segment 0 has no 'total_size'"),
        ("{'segments': [{'total_size': 1, 'blocks': []}]}", "segment 0 has no 'address'"),
        ("{'segments': [{'address': 0, 'total_size': 1}]}", "segment 0 has no 'blocks'"),
        (
            "{'segments': [{'address': 0, 'total_size': 1, 'blocks': [{'size': -1, 'state': 'inactive'}]}]}",
            "segment 0, block 0's 'size' is the integer -1, not a number of bytes",
        ),
        (
            "{'segments': [{'address': 0, 'total_size': 1, 'blocks': [{'size': 1, 'state': 'gone'}]}]}",
            "'state' is the string \"gone\", not active_allocated",
        ),
        (
            "{'segments': [], 'device_traces': [[{'action': 'alloc', 'size': 1}]]}",
            "device 0's trace entry 0 (alloc) has no 'addr'",
        ),
        (
            "{'segments': [], 'device_traces': [[{'action': 'oom', 'addr': 1, 'size': 1}]]}",
            "(oom) has no 'device_free'",
        ),
        ("{'segments': 3}", "'segments' is the integer 3, not a list"),
        ("[1, 2]", "not a PyTorch memory snapshot"),
        ("'hello'", "it holds the string \"hello\""),
    ];
    for (body, expected) in cases {
        let error = from_python_dict(body).expect_err(body);
        assert!(error.contains(expected), "{body}: {error}");
    }
}

#[test]
fn every_other_field_has_a_default() {
    let s = from_python_dict(
        "{'segments': [{'address': 4096, 'total_size': 1536, 'blocks': [\
            {'size': 512, 'state': 'active_allocated'}, {'size': 1024, 'state': 'inactive'}]}],\
          'device_traces': [[{'action': 'snapshot', 'size': 0}, {'action': 'user_defined', 'size': 0}]]}",
    )
    .unwrap();
    let seg = &s.segments[0];
    assert_eq!(
        (seg.device, seg.stream, seg.segment_type, seg.pool_id),
        (None, None, None, None)
    );
    assert_eq!(seg.blocks[1].address, 4096 + 512, "blocks are contiguous");
    assert_eq!(seg.blocks[0].requested_size, None);
    assert_eq!(s.traces[0][1].action, Action::Other);
}

#[test]
fn python_frames_are_told_from_cpp_ones_by_file_and_name() {
    use super::convert::is_python;
    let python = [
        ("/opt/venv/bin/tune", "<module>"),
        ("/p/train", "main"),
        ("/p/train.py", "train_step"),
        ("<eval_with_key>.5", "forward"),
        ("<frozen runpy>", "_run_code"),
    ];
    let cpp = [
        ("??", "_start"),
        (
            "",
            "pybind11::cpp_function::dispatcher(_object*, _object*, _object*)",
        ),
        (
            "/pytorch/aten/src/ATen/native/cuda/Blas.cpp",
            "at::native::addmm_out_cuda_impl",
        ),
        (
            "/usr/include/c++/11/functional",
            "std::function<void ()>::operator()() const",
        ),
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", "__libc_start_main"),
        ("Python-3.11.7/Objects/methodobject.c", "cfunction_call"),
    ];
    for (file, name) in python {
        assert!(is_python(file, name), "{file} {name}");
    }
    for (file, name) in cpp {
        assert!(!is_python(file, name), "{file} {name}");
    }
}
