//! The analysis of the fixtures, against figures computed from the pickles in Python.

use super::compare::compare;
use super::paths::{folded_lines, Step};
use super::tree::{Tree, TreeOptions};
use super::*;
use crate::memsnap::model::tests::snapshot;

const MIB: u64 = 1 << 20;

#[test]
fn summary_per_device() {
    let s = snapshot("oom.pickle").unwrap();
    let a = Analysis::new(&s);
    let d0 = &a.devices[0];
    assert_eq!(d0.device, Some(0));
    assert_eq!(
        (
            d0.segments,
            d0.large_segments,
            d0.small_segments,
            d0.expandable_segments
        ),
        (4, 3, 1, 0)
    );
    assert_eq!(d0.reserved, 65_011_712);
    assert_eq!(d0.allocated, 47_160_832);
    assert_eq!(d0.requested, 46_634_636);
    assert_eq!(d0.active, 47_165_440);
    assert_eq!(d0.inactive_split, 17_846_272);
    assert_eq!(d0.allocated_blocks, 16);
    assert_eq!(d0.largest_free_block, Some(14 * MIB));
    let fragmentation = d0.fragmentation_percent().unwrap();
    assert!((fragmentation - 27.45).abs() < 0.01, "{fragmentation}");
    let oom = d0.oom.as_ref().unwrap();
    assert_eq!(
        (oom.index, oom.requested, oom.device_free, oom.count),
        (61, 64 * MIB, 34 * MIB, 1)
    );
    let d1 = &a.devices[1];
    assert_eq!(
        (d1.reserved, d1.allocated, d1.expandable_segments),
        (12 * MIB, 8_593_920, 1)
    );
    assert!(d1.oom.is_none());
}

#[test]
fn totals_are_what_memory_viz_stats_counts() {
    let a = Analysis::new(&snapshot("oom.pickle").unwrap());
    let t = &a.totals;
    assert_eq!(
        (t.segments, t.reserved, t.requested),
        (6, 77_594_624, 54_179_980)
    );
    assert_eq!(t.requested + t.free_internal + t.free_external, t.reserved);
    assert_eq!(
        t.allocated,
        a.devices.iter().map(|d| d.allocated).sum::<u64>()
    );
}

#[test]
fn no_segments_reads_as_nothing_reserved_and_no_fragmentation() {
    let d = DeviceSummary::default();
    assert_eq!(d.fragmentation_percent(), None);
}

#[test]
fn timeline_follows_the_trace() {
    let s = snapshot("oom.pickle").unwrap();
    let a = Analysis::new(&s);
    let t = a.timeline(0).unwrap();
    assert_eq!(t.len(), 63);
    // The trace starts with an empty allocator, so nothing predates it.
    assert_eq!(t.baseline, 0);
    assert_eq!((t.peak, t.peak_bytes()), (43, 67_087_488));
    // In use at the end is every live block's requested bytes (pending frees included).
    assert_eq!(*t.in_use.last().unwrap(), 46_639_232);
    assert_eq!(*t.reserved.last().unwrap(), a.devices[0].reserved);
    assert_eq!(
        t.reserved[0],
        20 * MIB,
        "the first event is the first segment_alloc"
    );
    let kinds: Vec<(usize, Action)> = t.markers.clone();
    assert_eq!(
        kinds,
        [
            (30, Action::Snapshot),
            (61, Action::Oom),
            (62, Action::Snapshot)
        ]
    );
    let (top, live) = t.largest_live(t.peak, 5);
    assert_eq!(top.len(), 5);
    assert!(live > 5);
    assert!(top.windows(2).all(|w| w[0].size >= w[1].size));
    assert_eq!(top[0].size, 6 * MIB);
}

#[test]
fn a_trace_that_starts_late_gets_its_baseline_from_the_snapshot() {
    let mut s = snapshot("oom.pickle").unwrap();
    // Keep only the last 20 events, as a ring buffer of 20 entries would.
    let tail = s.traces[0].split_off(43);
    s.traces[0] = tail;
    let t = timeline::Timeline::new(&s, 0);
    assert!(t.baseline > 0);
    assert_eq!(
        *t.in_use.last().unwrap(),
        46_639_232,
        "the end still matches the snapshot"
    );
    assert_eq!(*t.reserved.last().unwrap(), 65_011_712);
}

#[test]
fn the_tree_weighs_the_allocated_bytes() {
    let s = snapshot("oom.pickle").unwrap();
    let a = Analysis::new(&s);
    let tree = Tree::build(&s, &TreeOptions::default());
    assert_eq!(tree.total(), a.totals.allocated);
    // Two devices: the first level is the device.
    let first: Vec<Option<Step>> = tree.nodes[0]
        .children
        .iter()
        .map(|&c| tree.nodes[c].step)
        .collect();
    assert_eq!(
        first,
        [Some(Step::Device(Some(0))), Some(Step::Device(Some(1)))]
    );
    // Children are sorted, largest first, and add up to at most their parent.
    for node in &tree.nodes {
        let sum: u64 = node.children.iter().map(|&c| tree.nodes[c].bytes).sum();
        assert!(sum <= node.bytes);
        assert!(node
            .children
            .windows(2)
            .all(|w| tree.nodes[w[0]].bytes >= tree.nodes[w[1]].bytes));
    }
    let one = Tree::build(
        &s,
        &TreeOptions {
            device: Some(1),
            ..TreeOptions::default()
        },
    );
    assert_eq!(one.total(), a.devices[1].allocated);
    assert!(one
        .nodes
        .iter()
        .all(|n| !matches!(n.step, Some(Step::Device(_)))));
}

#[test]
fn python_frames_come_first_and_cpp_frames_fold() {
    let s = snapshot("oom.pickle").unwrap();
    let label = |tree: &Tree, n: usize| super::paths::label(&s.frames, tree.nodes[n].step.unwrap());
    let folded = Tree::build(
        &s,
        &TreeOptions {
            device: Some(0),
            fold_cpp: true,
            ..TreeOptions::default()
        },
    );
    let top = folded.nodes[0].children[0];
    assert_eq!(label(&folded, top), "<module> (train.py:95)");
    let cpp: Vec<usize> = (0..folded.nodes.len())
        .filter(|&n| folded.nodes[n].step == Some(Step::Cpp))
        .collect();
    assert!(!cpp.is_empty());
    assert!(
        cpp.iter().all(|&n| folded.nodes[n].children.is_empty()),
        "C++ frames fold into a leaf"
    );
    let unfolded = Tree::build(
        &s,
        &TreeOptions {
            device: Some(0),
            ..TreeOptions::default()
        },
    );
    assert!(unfolded.nodes.len() > folded.nodes.len());
    assert!(unfolded.nodes.iter().all(|n| n.step != Some(Step::Cpp)));
    // The unwinder and interpreter frames are left out, as _memory_viz leaves them out.
    let labels: Vec<String> = (1..unfolded.nodes.len())
        .map(|n| label(&unfolded, n))
        .collect();
    assert!(!labels
        .iter()
        .any(|l| l.contains("PyEval") || l.contains("unwind") || l.contains("_start")));
}

#[test]
fn the_name_filter_keeps_matching_stacks() {
    let s = snapshot("oom.pickle").unwrap();
    let tree = Tree::build(
        &s,
        &TreeOptions {
            filter: "REMEMBER".to_string(),
            ..TreeOptions::default()
        },
    );
    assert_eq!((tree.total(), tree.nodes[0].blocks), (5_242_880, 3));
    let none = Tree::build(
        &s,
        &TreeOptions {
            filter: "no such frame".to_string(),
            ..TreeOptions::default()
        },
    );
    assert_eq!(none.total(), 0);
    assert!(none.rows(&none.default_expanded()).is_empty());
}

#[test]
fn rows_follow_what_is_open() {
    let s = snapshot("oom.pickle").unwrap();
    let tree = Tree::build(
        &s,
        &TreeOptions {
            device: Some(0),
            fold_cpp: true,
            ..TreeOptions::default()
        },
    );
    let closed = tree.rows(&std::collections::HashSet::default());
    assert_eq!(closed, tree.nodes[0].children);
    let open = tree.default_expanded();
    let rows = tree.rows(&open);
    assert!(rows.len() > closed.len());
    // Depth first: every row's parent is the root or comes before it.
    for (i, &r) in rows.iter().enumerate() {
        let parent = tree.nodes[r].parent;
        assert!(parent == 0 || rows[..i].contains(&parent));
    }
}

#[test]
fn folded_lines_weigh_the_allocated_bytes() {
    let s = snapshot("oom.pickle").unwrap();
    let lines = folded_lines(&s);
    let sum: u64 = lines
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(sum, Analysis::new(&s).totals.allocated);
    assert!(lines.iter().all(|l| l.starts_with("cuda:")));
}

#[test]
fn compare_finds_the_one_stack_that_grew() {
    let before = snapshot("compare_before.pickle").unwrap();
    let after = snapshot("compare_after.pickle").unwrap();
    let diffs = compare(&before, &after);
    let grew: Vec<_> = diffs.iter().filter(|d| d.delta() > 0).collect();
    assert_eq!(grew.len(), 1, "{diffs:#?}");
    assert!(grew[0].path.iter().any(|f| f == "remember (train.py:17)"));
    assert_eq!((grew[0].before_blocks, grew[0].after_blocks), (3, 7));
    assert_eq!((grew[0].before, grew[0].after), (5_242_880, 12_058_112));
    assert!(compare(&after, &after).is_empty());
}

/// A snapshot of one live 1 KiB block on cuda:0 whose stack is `frames` (file, line, name),
/// innermost first as torch lists them.
fn one_block(frames: &[(&str, i64, &str)]) -> Snapshot {
    let frames: Vec<String> = frames
        .iter()
        .map(|(file, line, name)| {
            format!("{{'filename': {file:?}, 'line': {line}, 'name': {name:?}}}")
        })
        .collect();
    crate::memsnap::model::tests::from_python_dict(&format!(
        "{{'segments': [{{'device': 0, 'address': 4096, 'total_size': 1024, 'blocks': [\
            {{'size': 1024, 'requested_size': 1024, 'state': 'active_allocated', \
              'frames': [{}]}}]}}], 'device_traces': [[]]}}",
        frames.join(", ")
    ))
    .unwrap()
}

/// The folded line torch's order gives: the frames reversed, outermost first.
fn expected_line(s: &Snapshot, frames: &[(&str, i64, &str)]) -> String {
    let labels: Vec<String> = frames
        .iter()
        .rev()
        .map(|(file, line, name)| {
            let short = file.rsplit('/').next().unwrap();
            format!("{name} ({short}:{line})")
        })
        .collect();
    let device = super::device_label(s.segments[0].device);
    format!("{device};{} 1024", labels.join(";"))
}

#[test]
fn an_entry_point_without_py_is_the_outermost_python_frame() {
    // A console script: `tune run full_finetune`.
    let frames = [
        (
            "/opt/venv/lib/python3.11/site-packages/torchtune/recipes/full_finetune.py",
            700,
            "train",
        ),
        (
            "/opt/venv/lib/python3.11/site-packages/torchtune/_cli/run.py",
            200,
            "_run_cmd",
        ),
        ("/opt/venv/bin/tune", 8, "<module>"),
    ];
    let s = one_block(&frames);
    assert_eq!(folded_lines(&s), [expected_line(&s, &frames)]);
    let tree = Tree::build(
        &s,
        &TreeOptions {
            fold_cpp: true,
            ..TreeOptions::default()
        },
    );
    assert!(
        tree.nodes.iter().all(|n| n.step != Some(Step::Cpp)),
        "a stack without C++ frames shows no [C++ frames]"
    );
}

#[test]
fn cpp_frames_between_python_frames_keep_their_place() {
    // A checkpoint's recompute inside backward, recorded with stacks="all".
    let v = "/opt/venv/lib/python3.11/site-packages/torch";
    let (linear, checkpoint) = (
        format!("{v}/nn/modules/linear.py"),
        format!("{v}/utils/checkpoint.py"),
    );
    let (graph, tensor) = (format!("{v}/autograd/graph.py"), format!("{v}/_tensor.py"));
    let frames = [
        (
            "/pytorch/c10/cuda/CUDACachingAllocator.cpp",
            1159,
            "c10::cuda::CUDACachingAllocator::malloc",
        ),
        (
            "/pytorch/aten/src/ATen/native/cuda/Blas.cpp",
            391,
            "at::native::addmm_out_cuda_impl",
        ),
        (linear.as_str(), 125, "forward"),
        (checkpoint.as_str(), 1129, "recompute_fn"),
        (
            "/pytorch/torch/csrc/autograd/python_saved_variable_hooks.cpp",
            24,
            "torch::autograd::PySavedVariableHooks::call_unpack_hook()",
        ),
        (
            "/pytorch/torch/csrc/autograd/engine.cpp",
            1250,
            "torch::autograd::Engine::execute",
        ),
        (graph.as_str(), 829, "_engine_run_backward"),
        (tensor.as_str(), 647, "backward"),
        ("/p/train.py", 50, "train_step"),
        ("/p/train.py", 90, "<module>"),
    ];
    let s = one_block(&frames);
    assert_eq!(folded_lines(&s), [expected_line(&s, &frames)]);
    let before = one_block(&frames[..0]);
    let diffs = compare(&before, &s);
    assert_eq!(
        diffs[0].path.join(";") + " 1024",
        expected_line(&s, &frames)
    );
}
