//! The process tree view: each GPU process with its chain of parents and all of its
//! descendants, flattened into rows ready to draw.
//!
//! Which processes appear:
//! - every GPU process (once, even when it holds several GPUs);
//! - its ancestors up to, but not including, pid 1: init (systemd, or a container's entry
//!   point) would otherwise head every tree and add nothing;
//! - all of its descendants, whether or not they use a GPU (DataLoader workers, compile
//!   workers).
//!
//! Siblings of ancestors (the other programs the shell started) are left out. A process on
//! the chains of several GPU processes appears once. Roots, and the children of each row, are
//! ordered by pid, so the same table always gives the same rows. Tables read from /proc are
//! racy, so parent cycles and duplicate pids are tolerated rather than trusted.
//!
//! A filter (`/`, a user, GPUs) keeps rows of the tree and lays them out again
//! ([`retain_tree`]): a kept row whose parent is filtered out is a root, as in htop.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::process::{GpuProcess, HostProcess};

/// Why a row is in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TreeRole {
    /// It holds a GPU.
    Gpu,
    /// It descends from a GPU process and holds no GPU itself (checked before `Ancestor`: a
    /// process between two GPU processes is the first one's work).
    Descendant,
    /// It is only a parent of GPU processes (torchrun, the shell).
    Ancestor,
}

/// One line of the tree view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeRow {
    /// 0 for a root.
    pub(crate) depth: usize,
    pub(crate) pid: u32,
    /// Drawn before the command: "" for a root, else guides such as "│  └─ ".
    pub(crate) prefix: String,
    pub(crate) role: TreeRole,
    /// Index into the host table; `None` for a GPU process /proc does not show (another
    /// container, or already gone).
    pub(crate) host: Option<usize>,
    /// Indices into the GPU process slice: one per GPU the process holds, empty for others.
    pub(crate) gpu: Vec<usize>,
}

impl TreeRow {
    #[cfg(test)]
    pub(crate) fn is_gpu(&self) -> bool {
        self.role == TreeRole::Gpu
    }
}

/// Builds the tree rows for `gpu` from the host process `table`.
pub(crate) fn build_tree(gpu: &[GpuProcess], table: &[HostProcess]) -> Vec<TreeRow> {
    let index = TableIndex::new(table);
    let gpu_rows = gpu_indices_by_pid(gpu);
    let gpu_pids: BTreeSet<u32> = gpu_rows.keys().copied().collect();

    let descendants = index.descendants_of(&gpu_pids);
    let mut members: BTreeSet<u32> = gpu_pids.clone();
    members.extend(descendants.iter().copied());
    for &pid in &gpu_pids {
        members.extend(index.ancestors_of(pid));
    }

    let role_of = |pid: u32| {
        if gpu_pids.contains(&pid) {
            TreeRole::Gpu
        } else if descendants.contains(&pid) {
            TreeRole::Descendant
        } else {
            TreeRole::Ancestor
        }
    };
    let layout = Layout::new(&members, |pid| index.parent(pid));
    layout
        .walk()
        .into_iter()
        .map(|placed| TreeRow {
            depth: placed.depth,
            pid: placed.pid,
            prefix: placed.prefix,
            role: role_of(placed.pid),
            host: index.position(placed.pid),
            gpu: gpu_rows.get(&placed.pid).cloned().unwrap_or_default(),
        })
        .collect()
}

/// The rows of `rows` (as [`build_tree`] gave them) that `keep` accepts, laid out again: a
/// kept row whose parent is not kept becomes a root, as htop shows a process whose parent it
/// does not show. Filtering rows one by one would leave such a row with the guides of a
/// parent that is not on screen (`└─ bash` heading the table).
pub(crate) fn retain_tree(
    rows: Vec<TreeRow>,
    mut keep: impl FnMut(&TreeRow) -> bool,
) -> Vec<TreeRow> {
    let parents = parents_by_depth(&rows);
    let mut kept: HashMap<u32, TreeRow> = HashMap::new();
    for row in rows {
        if keep(&row) {
            kept.insert(row.pid, row);
        }
    }
    let members: BTreeSet<u32> = kept.keys().copied().collect();
    let layout = Layout::new(&members, |pid| parents.get(&pid).copied());
    layout
        .walk()
        .into_iter()
        .filter_map(|placed| {
            let row = kept.remove(&placed.pid)?;
            Some(TreeRow {
                depth: placed.depth,
                prefix: placed.prefix,
                ..row
            })
        })
        .collect()
}

/// Drops each top-level subtree of `rows` (a tree as [`retain_tree`] lays it out) that holds
/// no GPU process. A GPU filter keeps the rows without a GPU as context, the launcher above a
/// rank and the workers below it; a subtree of none is context of nothing, such as the
/// DataLoader workers of a rank on a GPU the filter hides.
pub(crate) fn drop_subtrees_without_gpu(rows: Vec<TreeRow>) -> Vec<TreeRow> {
    let mut kept = Vec::with_capacity(rows.len());
    let mut subtree: Vec<TreeRow> = Vec::new();
    let mut holds_gpu = false;
    for row in rows {
        if row.depth == 0 {
            if holds_gpu {
                kept.append(&mut subtree);
            }
            subtree.clear();
            holds_gpu = false;
        }
        holds_gpu |= !row.gpu.is_empty();
        subtree.push(row);
    }
    if holds_gpu {
        kept.append(&mut subtree);
    }
    kept
}

/// Each row's parent in a drawn tree: the nearest row above it one level up. Reading it from
/// the rows rather than the table keeps the forest [`build_tree`] chose (cycles broken).
fn parents_by_depth(rows: &[TreeRow]) -> HashMap<u32, u32> {
    let mut parents = HashMap::with_capacity(rows.len());
    let mut chain: Vec<u32> = Vec::new();
    for row in rows {
        chain.truncate(row.depth);
        if let Some(&parent) = chain.last() {
            parents.insert(row.pid, parent);
        }
        chain.push(row.pid);
    }
    parents
}

fn gpu_indices_by_pid(gpu: &[GpuProcess]) -> BTreeMap<u32, Vec<usize>> {
    let mut by_pid: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, p) in gpu.iter().enumerate() {
        by_pid.entry(p.pid).or_default().push(i);
    }
    by_pid
}

/// The host table by pid (first entry wins for a duplicated pid) and by parent.
struct TableIndex<'a> {
    table: &'a [HostProcess],
    by_pid: HashMap<u32, usize>,
    children: HashMap<u32, Vec<u32>>,
}

impl<'a> TableIndex<'a> {
    fn new(table: &'a [HostProcess]) -> Self {
        let mut by_pid = HashMap::new();
        for (i, p) in table.iter().enumerate() {
            by_pid.entry(p.pid).or_insert(i);
        }
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for (&pid, &i) in &by_pid {
            let ppid = table[i].ppid;
            if ppid != pid {
                children.entry(ppid).or_default().push(pid);
            }
        }
        for kids in children.values_mut() {
            kids.sort_unstable();
        }
        TableIndex {
            table,
            by_pid,
            children,
        }
    }

    fn position(&self, pid: u32) -> Option<usize> {
        self.by_pid.get(&pid).copied()
    }

    /// The parent shown in the tree: `None` at pid 1, pid 0, or a parent not in the table.
    fn parent(&self, pid: u32) -> Option<u32> {
        let ppid = self.table[self.position(pid)?].ppid;
        let shown = ppid > 1 && ppid != pid && self.by_pid.contains_key(&ppid);
        shown.then_some(ppid)
    }

    fn children(&self, pid: u32) -> &[u32] {
        self.children.get(&pid).map_or(&[], Vec::as_slice)
    }

    /// Parents of `pid` up to, not including, pid 1; stops at a cycle.
    fn ancestors_of(&self, pid: u32) -> Vec<u32> {
        let mut chain = Vec::new();
        let mut seen = BTreeSet::from([pid]);
        let mut current = pid;
        while let Some(parent) = self.parent(current) {
            if !seen.insert(parent) {
                break;
            }
            chain.push(parent);
            current = parent;
        }
        chain
    }

    /// Every process below any of `roots`, the roots themselves excluded.
    fn descendants_of(&self, roots: &BTreeSet<u32>) -> BTreeSet<u32> {
        let mut found = BTreeSet::new();
        let mut stack: Vec<u32> = roots.iter().copied().collect();
        while let Some(pid) = stack.pop() {
            for &child in self.children(pid) {
                if !roots.contains(&child) && found.insert(child) {
                    stack.push(child);
                }
            }
        }
        found
    }
}

/// A member placed in the drawing order.
struct Placed {
    pid: u32,
    depth: usize,
    prefix: String,
}

/// The members as a forest: each member hangs under its parent when that parent is a member.
struct Layout {
    roots: Vec<u32>,
    children: BTreeMap<u32, Vec<u32>>,
    members: BTreeSet<u32>,
}

impl Layout {
    /// `parent` names a member's parent, member or not.
    fn new(members: &BTreeSet<u32>, parent: impl Fn(u32) -> Option<u32>) -> Self {
        let mut roots = Vec::new();
        let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for &pid in members {
            match parent(pid).filter(|parent| members.contains(parent)) {
                Some(parent) => children.entry(parent).or_default().push(pid),
                None => roots.push(pid),
            }
        }
        Layout {
            roots,
            children,
            members: members.clone(),
        }
    }

    /// Depth-first, children by pid. Members caught in a parent cycle have no root above
    /// them; each unreached one is then drawn as a root so nothing is lost.
    fn walk(&self) -> Vec<Placed> {
        let mut out = Vec::with_capacity(self.members.len());
        let mut visited = BTreeSet::new();
        for &root in &self.roots {
            self.place(root, 0, String::new(), "", &mut visited, &mut out);
        }
        for &pid in &self.members {
            if !visited.contains(&pid) {
                self.place(pid, 0, String::new(), "", &mut visited, &mut out);
            }
        }
        out
    }

    /// `guides` holds one column ("│  " or "   ") per level above this row's parent level;
    /// `branch` is this row's own connector.
    fn place(
        &self,
        pid: u32,
        depth: usize,
        guides: String,
        branch: &str,
        visited: &mut BTreeSet<u32>,
        out: &mut Vec<Placed>,
    ) {
        if !visited.insert(pid) {
            return;
        }
        out.push(Placed {
            pid,
            depth,
            prefix: format!("{guides}{branch}"),
        });
        let kids = self.children.get(&pid).map_or(&[][..], Vec::as_slice);
        let child_guides = match branch {
            "" => guides,
            BRANCH_LAST => format!("{guides}{GUIDE_BLANK}"),
            _ => format!("{guides}{GUIDE_LINE}"),
        };
        for (i, &kid) in kids.iter().enumerate() {
            let kid_branch = if i + 1 == kids.len() {
                BRANCH_LAST
            } else {
                BRANCH_MID
            };
            self.place(
                kid,
                depth + 1,
                child_guides.clone(),
                kid_branch,
                visited,
                out,
            );
        }
    }
}

const BRANCH_MID: &str = "├─ ";
const BRANCH_LAST: &str = "└─ ";
const GUIDE_LINE: &str = "│  ";
const GUIDE_BLANK: &str = "   ";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessKind;

    fn host(pid: u32, ppid: u32, comm: &str) -> HostProcess {
        HostProcess {
            pid,
            ppid,
            start_ticks: u64::from(pid) * 10,
            comm: comm.to_string(),
            state: 'S',
            ..HostProcess::default()
        }
    }

    fn gpu(pid: u32, gpu: u32) -> GpuProcess {
        GpuProcess::new(pid, gpu, ProcessKind::Compute)
    }

    /// init -> sshd -> bash -> torchrun -> ranks 200 and 300 -> 4 DataLoader workers each;
    /// plus an unrelated vim under the same shell and an unrelated daemon.
    fn training_table() -> Vec<HostProcess> {
        let mut table = vec![
            host(1, 0, "systemd"),
            host(50, 1, "sshd"),
            host(100, 50, "bash"),
            host(150, 100, "torchrun"),
            host(200, 150, "python"),
            host(300, 150, "python"),
            host(120, 100, "vim"),
            host(900, 1, "cron"),
        ];
        for (rank, first_worker) in [(200, 210), (300, 310)] {
            for worker in first_worker..first_worker + 4 {
                table.push(host(worker, rank, "pt_data_worker"));
            }
        }
        table
    }

    fn render(rows: &[TreeRow], table: &[HostProcess]) -> String {
        rows.iter()
            .map(|r| {
                let name = r.host.map_or("?", |i| table[i].comm.as_str());
                let mark = if r.is_gpu() { " [gpu]" } else { "" };
                format!("{}{} {}{}\n", r.prefix, r.pid, name, mark)
            })
            .collect()
    }

    #[test]
    fn ranks_appear_with_their_launchers_and_workers() {
        let table = training_table();
        let rows = build_tree(&[gpu(300, 1), gpu(200, 0)], &table);
        let expected = "\
50 sshd
└─ 100 bash
   └─ 150 torchrun
      ├─ 200 python [gpu]
      │  ├─ 210 pt_data_worker
      │  ├─ 211 pt_data_worker
      │  ├─ 212 pt_data_worker
      │  └─ 213 pt_data_worker
      └─ 300 python [gpu]
         ├─ 310 pt_data_worker
         ├─ 311 pt_data_worker
         ├─ 312 pt_data_worker
         └─ 313 pt_data_worker
";
        assert_eq!(render(&rows, &table), expected);
        let depths: Vec<usize> = rows.iter().take(5).map(|r| r.depth).collect();
        assert_eq!(depths, [0, 1, 2, 3, 4]);
        assert_eq!(rows[3].gpu, vec![1]);
        assert_eq!(rows[1].role, TreeRole::Ancestor);
        assert_eq!(rows[4].role, TreeRole::Descendant);
        for unrelated in [1, 120, 900] {
            assert!(rows.iter().all(|r| r.pid != unrelated), "{unrelated} shown");
        }
    }

    #[test]
    fn a_process_on_two_gpus_is_one_row_with_both_indices() {
        let table = training_table();
        let rows = build_tree(&[gpu(200, 0), gpu(200, 1)], &table);
        let rank: Vec<&TreeRow> = rows.iter().filter(|r| r.pid == 200).collect();
        assert_eq!(rank.len(), 1);
        assert_eq!(rank[0].gpu, vec![0, 1]);
        assert!(rows.iter().all(|r| r.pid != 300 && r.pid != 310));
    }

    #[test]
    fn an_invisible_gpu_process_is_a_root_without_host_data() {
        let table = training_table();
        let rows = build_tree(&[gpu(200, 0), gpu(77, 0)], &table);
        assert_eq!(rows[0].pid, 50);
        let invisible = rows.iter().find(|r| r.pid == 77).unwrap();
        assert_eq!((invisible.depth, invisible.host), (0, None));
        assert!(invisible.is_gpu());
        assert_eq!(invisible.prefix, "");
    }

    #[test]
    fn a_gpu_process_under_another_is_nested_once() {
        let mut table = training_table();
        table.push(host(400, 210, "python"));
        let rows = build_tree(&[gpu(200, 0), gpu(400, 1)], &table);
        let pids: Vec<u32> = rows.iter().map(|r| r.pid).collect();
        assert_eq!(pids, [50, 100, 150, 200, 210, 400, 211, 212, 213]);
        assert_eq!(rows[5].depth, 5);
        assert_eq!(rows[5].prefix, "         │  └─ ");
        assert_eq!(rows[4].role, TreeRole::Descendant);
    }

    #[test]
    fn parent_cycles_and_duplicates_do_not_loop_or_lose_rows() {
        let table = vec![
            host(10, 11, "a"),
            host(11, 10, "b"),
            host(10, 99, "duplicate"),
            host(12, 12, "self-parent"),
        ];
        let rows = build_tree(&[gpu(10, 0), gpu(12, 0)], &table);
        let mut pids: Vec<u32> = rows.iter().map(|r| r.pid).collect();
        pids.sort_unstable();
        assert_eq!(pids, [10, 11, 12]);
        assert_eq!(rows.iter().find(|r| r.pid == 10).unwrap().host, Some(0));
    }

    /// Filtered one by one, rows kept the guides of a hidden parent: `└─ bash` headed the
    /// table. A row whose parent is hidden is a root, among the roots by pid, as in htop.
    #[test]
    fn a_row_whose_parent_is_not_kept_becomes_a_root() {
        let table = training_table();
        let rows = build_tree(&[gpu(300, 1), gpu(200, 0)], &table);
        let rows = retain_tree(rows, |r| ![150, 210, 311, 312].contains(&r.pid));
        let expected = "\
50 sshd
└─ 100 bash
200 python [gpu]
├─ 211 pt_data_worker
├─ 212 pt_data_worker
└─ 213 pt_data_worker
300 python [gpu]
├─ 310 pt_data_worker
└─ 313 pt_data_worker
";
        assert_eq!(render(&rows, &table), expected);
        let depths: Vec<usize> = rows.iter().map(|r| r.depth).collect();
        assert_eq!(depths, [0, 1, 0, 1, 1, 1, 0, 1, 1]);
        assert_eq!(rows[2].gpu, vec![1]);
    }

    #[test]
    fn no_gpu_processes_means_no_rows() {
        assert!(build_tree(&[], &training_table()).is_empty());
    }
}
