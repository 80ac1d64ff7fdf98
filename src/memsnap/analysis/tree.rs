//! Who holds the memory: the live allocations (allocated blocks) of a snapshot aggregated into a
//! tree by stack, Python frames first, each node with its bytes and block count. Filtered by
//! device and by a name that any frame of the stack contains.

use std::collections::{HashMap, HashSet};

use super::super::model::{BlockState, Snapshot, StackId};
use super::paths::{self, Step};

/// How far the heaviest branch is opened when a tree is first shown.
const AUTO_EXPAND_DEPTH: u16 = 12;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TreeOptions {
    /// `None`: every device.
    pub(crate) device: Option<i64>,
    /// Case-insensitive; empty keeps everything.
    pub(crate) filter: String,
    pub(crate) fold_cpp: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    /// `None` for the root.
    pub(crate) step: Option<Step>,
    pub(crate) bytes: u64,
    pub(crate) blocks: u64,
    pub(crate) children: Vec<usize>,
    pub(crate) parent: usize,
    pub(crate) depth: u16,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tree {
    /// `nodes[0]` is the root; children are sorted by bytes, largest first.
    pub(crate) nodes: Vec<Node>,
}

impl Tree {
    pub(crate) fn build(snapshot: &Snapshot, options: &TreeOptions) -> Tree {
        let needle = options.filter.to_lowercase();
        let mut matches: HashMap<StackId, bool> = HashMap::new();
        let mut held: HashMap<(Option<i64>, StackId), (u64, u64)> = HashMap::new();
        for segment in &snapshot.segments {
            if options.device.is_some() && segment.device != options.device {
                continue;
            }
            for block in &segment.blocks {
                if block.state != BlockState::ActiveAllocated {
                    continue;
                }
                let keep = *matches
                    .entry(block.stack)
                    .or_insert_with(|| stack_matches(snapshot, block.stack, &needle));
                if keep {
                    let entry = held.entry((segment.device, block.stack)).or_default();
                    entry.0 = entry.0.saturating_add(block.size);
                    entry.1 += 1;
                }
            }
        }
        let devices: HashSet<Option<i64>> = held.keys().map(|(d, _)| *d).collect();
        let by_device = devices.len() > 1;
        let mut held: Vec<_> = held.into_iter().collect();
        held.sort_unstable_by_key(|&((device, stack), _)| (device, stack));
        let mut tree = Tree {
            nodes: vec![Node {
                step: None,
                bytes: 0,
                blocks: 0,
                children: Vec::new(),
                parent: 0,
                depth: 0,
            }],
        };
        let mut index: HashMap<(usize, Step), usize> = HashMap::new();
        let mut steps = Vec::new();
        for ((device, stack), (bytes, blocks)) in held {
            steps.clear();
            if by_device {
                steps.push(Step::Device(device));
            }
            paths::path(&snapshot.frames, stack, options.fold_cpp, &mut steps);
            tree.add(&steps, bytes, blocks, &mut index);
        }
        tree.sort();
        tree
    }

    fn add(
        &mut self,
        steps: &[Step],
        bytes: u64,
        blocks: u64,
        index: &mut HashMap<(usize, Step), usize>,
    ) {
        let mut at = 0;
        self.nodes[0].bytes = self.nodes[0].bytes.saturating_add(bytes);
        self.nodes[0].blocks += blocks;
        for &step in steps {
            let next = if let Some(&next) = index.get(&(at, step)) {
                next
            } else {
                let next = self.nodes.len();
                let depth = self.nodes[at].depth + 1;
                self.nodes.push(Node {
                    step: Some(step),
                    bytes: 0,
                    blocks: 0,
                    children: Vec::new(),
                    parent: at,
                    depth,
                });
                self.nodes[at].children.push(next);
                index.insert((at, step), next);
                next
            };
            self.nodes[next].bytes = self.nodes[next].bytes.saturating_add(bytes);
            self.nodes[next].blocks += blocks;
            at = next;
        }
    }

    fn sort(&mut self) {
        for i in 0..self.nodes.len() {
            let mut children = std::mem::take(&mut self.nodes[i].children);
            children.sort_by_key(|&c| (std::cmp::Reverse(self.nodes[c].bytes), self.nodes[c].step));
            self.nodes[i].children = children;
        }
    }

    /// The bytes of every live allocation in the tree.
    pub(crate) fn total(&self) -> u64 {
        self.nodes[0].bytes
    }

    /// The nodes open at first: the root, and the heaviest child at each level down to a depth.
    pub(crate) fn default_expanded(&self) -> HashSet<usize> {
        let mut open = HashSet::from([0]);
        let mut at = 0;
        while let Some(&heaviest) = self.nodes[at].children.first() {
            if self.nodes[heaviest].depth >= AUTO_EXPAND_DEPTH {
                break;
            }
            open.insert(heaviest);
            at = heaviest;
        }
        open
    }

    /// The rows on screen: every child of an open node, depth first; the root is not a row.
    pub(crate) fn rows(&self, open: &HashSet<usize>) -> Vec<usize> {
        let mut rows = Vec::new();
        let mut todo: Vec<usize> = self.nodes[0].children.iter().rev().copied().collect();
        while let Some(node) = todo.pop() {
            rows.push(node);
            if open.contains(&node) {
                todo.extend(self.nodes[node].children.iter().rev());
            }
        }
        rows
    }

    /// Share of the whole tree, in percent.
    pub(crate) fn percent(&self, node: usize) -> f64 {
        let total = self.total();
        if total == 0 {
            0.0
        } else {
            100.0 * self.nodes[node].bytes as f64 / total as f64
        }
    }
}

fn stack_matches(snapshot: &Snapshot, stack: StackId, needle: &str) -> bool {
    if needle.is_empty() {
        return true;
    }
    let frames = &snapshot.frames;
    frames.stack(stack).iter().any(|&id| {
        let frame = frames.frame(id);
        !frame.noise
            && (frames.text(frame.name).to_lowercase().contains(needle)
                || frames.text(frame.filename).to_lowercase().contains(needle))
    })
}
