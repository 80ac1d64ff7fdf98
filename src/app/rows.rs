//! The rows of the process table as the user sees them: the snapshot's GPU processes filtered
//! by the `/` text and sorted, or the tree view. Drawing, selection, tags and actions all read
//! this one list, so an action always names a row that was on screen.
//!
//! The order is computed once per change (snapshot, filter, sort, tree) into [`RowRef`]s,
//! which hold indices into the snapshot, and turned into borrowed [`ProcessRow`]s on demand.
//! Neither allocates in the flat table once its vectors have grown: a row of one GPU holds its
//! index inline ([`RowIndices::One`]), and a [`ProcessRow`] borrows the indices of its `RowRef`.

use std::ops::Deref;
use std::sync::Arc;

mod process_row;
pub(crate) use process_row::{ProcessRow, RowGpus, RowKey};

use crate::model::filter::{matches, sort_positions_into, SortKey};
use crate::model::tree::{build_tree, drop_subtrees_without_gpu, retain_tree, TreeRole};
use crate::model::{GpuProcess, ProcessKind, Snapshot};

/// How the table is arranged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowSettings {
    /// The `/` text; empty shows every row.
    pub(crate) filter: String,
    pub(crate) sort: SortKey,
    /// Descending instead of ascending.
    pub(crate) reverse: bool,
    pub(crate) tree: bool,
    /// Only this user's processes (`u`, `--user`); `None` shows everyone's.
    pub(crate) user: Option<String>,
    /// Only processes on these GPUs (`--gpus 0,3`, `g`); `None` shows every GPU.
    pub(crate) gpus: Option<Vec<u32>>,
    /// Only this uid's processes (`m`: the user running torchtop); `None` shows everyone's.
    pub(crate) mine: Option<u32>,
}

impl RowSettings {
    /// Whether any filter (text, user, GPUs) hides rows.
    pub(crate) fn filtering(&self) -> bool {
        !self.filter.trim().is_empty()
            || self.user.is_some()
            || self.gpus.is_some()
            || self.mine.is_some()
    }
}

impl Default for RowSettings {
    fn default() -> Self {
        RowSettings {
            filter: String::new(),
            // The biggest users of GPU memory first, as nvtop.
            sort: SortKey::GpuMemory,
            reverse: true,
            tree: false,
            user: None,
            gpus: None,
            mine: None,
        }
    }
}

/// One row, by indices into the snapshot it was computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowRef {
    /// Indices into `snapshot.processes`: one in the flat table; every GPU the process holds in
    /// the tree, none for a process without a GPU.
    pub(crate) gpus: RowIndices,
    /// Index into `snapshot.host_processes` (tree view only).
    pub(crate) host: Option<usize>,
    /// Tree guides ("│  └─ ") and why the row is in the tree; `None` in the flat table.
    pub(crate) tree: Option<(String, TreeRole)>,
}

/// A row's indices into `snapshot.processes`, read as a slice: one kept inline, so a row of
/// the flat table (the most common, rebuilt every snapshot) needs no vector of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RowIndices {
    One(usize),
    Many(Vec<usize>),
}

impl Deref for RowIndices {
    type Target = [usize];

    fn deref(&self) -> &[usize] {
        match self {
            RowIndices::One(index) => std::slice::from_ref(index),
            RowIndices::Many(indices) => indices,
        }
    }
}

impl RowRef {
    /// Whether [`ProcessRow::rank_text`] of this row is `Some`, without building the row.
    pub(crate) fn has_rank(&self, snapshot: &Snapshot) -> bool {
        let gpus = || self.gpus.iter().filter_map(|&i| snapshot.processes.get(i));
        gpus().any(|g| g.torch.is_some())
            || gpus()
                .find_map(|g| g.env.as_ref())
                .is_some_and(|e| e.rank.is_some())
            || gpus()
                .find_map(|g| g.slurm.as_ref())
                .is_some_and(|s| s.proc_id.is_some())
    }
}

/// `command` with its first word (the program) cut to its basename. A command whose first word
/// has no `/` is returned as is.
pub(crate) fn program_basename(command: &str) -> String {
    let (base, rest) = basename_parts(command);
    match rest {
        Some(rest) => format!("{base} {rest}"),
        None => base.to_string(),
    }
}

/// The program's basename and the rest of `command` after the space, as
/// [`program_basename`] joins them.
fn basename_parts(command: &str) -> (&str, Option<&str>) {
    let (program, rest) = match command.split_once(' ') {
        Some((program, rest)) => (program, Some(rest)),
        None => (command, None),
    };
    let base = match program.rsplit_once('/') {
        Some((_, base)) if !base.is_empty() => base,
        _ => program,
    };
    (base, rest)
}

/// The rows of `snapshot` under `settings`, in display order.
#[cfg(test)]
pub(crate) fn compute_rows(snapshot: &Snapshot, settings: &RowSettings) -> Vec<RowRef> {
    let mut rows = Vec::new();
    compute_rows_into(snapshot, settings, &mut RowScratch::default(), &mut rows);
    rows
}

/// What computing the rows needs between snapshots, kept so the flat table is sorted again
/// without allocating once the vectors have grown.
#[derive(Debug, Default)]
pub(crate) struct RowScratch {
    by_pair: Vec<usize>,
    handed: Vec<usize>,
    sorted: Vec<usize>,
}

/// The rows of `snapshot` under `settings`, in display order, into `rows` (emptied first).
pub(crate) fn compute_rows_into(
    snapshot: &Snapshot,
    settings: &RowSettings,
    scratch: &mut RowScratch,
    rows: &mut Vec<RowRef>,
) {
    rows.clear();
    if settings.tree {
        rows.extend(tree_rows(snapshot, settings));
        return;
    }
    let (processes, key) = (&snapshot.processes, settings.sort);
    sorted_rows(processes, key, settings.reverse, scratch, rows);
    if settings.filtering() {
        rows.retain(|r| kept(settings, &materialize(snapshot, r)));
    }
}

/// Whether `row` passes every filter of `settings`.
fn kept(settings: &RowSettings, row: &ProcessRow<'_>) -> bool {
    row_matches(&settings.filter, row)
        && settings
            .user
            .as_deref()
            .is_none_or(|u| row.user() == Some(u))
        && settings.gpus.as_ref().is_none_or(|gpus| on_gpus(row, gpus))
        && settings.mine.is_none_or(|uid| row.uid() == Some(uid))
}

/// Whether the row holds one of `gpus`; a tree row without a GPU (a launcher, a worker) stays,
/// as the context of the GPU rows around it.
fn on_gpus(row: &ProcessRow<'_>, gpus: &[u32]) -> bool {
    (row.tree.is_some() && !row.is_gpu()) || row.gpus.iter().any(|g| gpus.contains(&g.gpu))
}

/// The users of the snapshot's processes, sorted, each once: the choices of the `u` menu.
pub(crate) fn users(snapshot: &Snapshot) -> Vec<String> {
    let mut users: Vec<String> = snapshot
        .processes
        .iter()
        .filter_map(|p| p.user.as_deref().map(str::to_string))
        .chain(
            snapshot
                .host_processes
                .iter()
                .filter_map(|h| h.user.clone()),
        )
        .collect();
    users.sort();
    users.dedup();
    users
}

/// Borrows the snapshot data a [`RowRef`] points at; indices that no longer exist are skipped.
pub(crate) fn materialize<'a>(snapshot: &'a Snapshot, row: &'a RowRef) -> ProcessRow<'a> {
    let tree = row.tree.as_ref();
    let tree = tree.map(|(prefix, role)| (prefix.as_str(), *role));
    borrow_row(snapshot, &row.gpus, row.host, tree)
}

/// The [`ProcessRow`] of these indices into `snapshot`.
fn borrow_row<'a>(
    snapshot: &'a Snapshot,
    gpus: &'a [usize],
    host: Option<usize>,
    tree: Option<(&'a str, TreeRole)>,
) -> ProcessRow<'a> {
    let gpus = RowGpus::new(&snapshot.processes, gpus);
    let host = host.and_then(|i| snapshot.host_processes.get(i));
    let pid = host
        .map(|h| h.pid)
        .or_else(|| gpus.first().map(|g| g.pid))
        .unwrap_or(0);
    ProcessRow {
        pid,
        gpus,
        host,
        tree,
    }
}

/// The tree, filtered as a tree: a row whose parent the filters hide is drawn as a root.
fn tree_rows(snapshot: &Snapshot, settings: &RowSettings) -> impl Iterator<Item = RowRef> {
    let mut tree = build_tree(&snapshot.processes, &snapshot.host_processes);
    if settings.filtering() {
        tree = retain_tree(tree, |row| {
            let tree = Some((row.prefix.as_str(), row.role));
            kept(settings, &borrow_row(snapshot, &row.gpu, row.host, tree))
        });
    }
    if settings.gpus.is_some() {
        tree = drop_subtrees_without_gpu(tree);
    }
    tree.into_iter().map(|row| RowRef {
        gpus: RowIndices::Many(row.gpu),
        host: row.host,
        tree: Some((row.prefix, row.role)),
    })
}

/// Sorts copies of the rows with the model's order, then maps them back to their indices by
/// (pid, GPU), which NVML reports once per GPU, appending them to `rows`.
fn sorted_rows(
    processes: &[GpuProcess],
    key: SortKey,
    reverse: bool,
    scratch: &mut RowScratch,
    rows: &mut Vec<RowRef>,
) {
    // Rows of the same pid and GPU take their positions in snapshot order, as before: each
    // (pid, GPU)'s positions in ascending order, handed out in turn. One sorted vector of
    // positions and one of counters, not a map of one vector per process.
    let pair = |i: usize| (processes[i].pid, processes[i].gpu);
    let RowScratch {
        by_pair,
        handed,
        sorted,
    } = scratch;
    by_pair.clear();
    by_pair.extend(0..processes.len());
    by_pair.sort_unstable_by_key(|&i| (pair(i), i));
    handed.clear();
    handed.resize(processes.len(), 0);
    sort_positions_into(processes, key, reverse, sorted);
    rows.extend(sorted.iter().filter_map(|&i| {
        let first = by_pair.partition_point(|&j| pair(j) < pair(i));
        let next = first + handed[first];
        let position = *by_pair.get(next).filter(|&&j| pair(j) == pair(i))?;
        handed[first] += 1;
        Some(RowRef {
            gpus: RowIndices::One(position),
            host: None,
            tree: None,
        })
    }));
}

/// The `/` filter on any row: the model's rule (pid prefix, or part of the command or user).
fn row_matches(filter: &str, row: &ProcessRow<'_>) -> bool {
    if let Some(gpu) = row.gpus.first() {
        if matches(filter, gpu) {
            return true;
        }
    }
    let Some(host) = row.host else {
        return false;
    };
    let mut probe = GpuProcess::new(host.pid, 0, ProcessKind::Compute);
    probe.user = host.user.as_deref().map(Arc::from);
    probe.command = Some(host.command.as_deref().unwrap_or(&host.comm).into());
    matches(filter, &probe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::ProcessIdentity;
    use crate::model::HostProcess;

    fn gpu_row(pid: u32, gpu: u32, command: &str, memory_gib: u64) -> GpuProcess {
        let mut p = GpuProcess::new(pid, gpu, ProcessKind::Compute);
        p.visible = true;
        p.user = Some("alice".to_string().into());
        p.command = Some(command.to_string().into());
        p.start_ticks = Some(u64::from(pid) * 10);
        p.gpu_memory_bytes = Some(memory_gib << 30);
        p
    }

    fn host(pid: u32, ppid: u32, command: Option<&str>, comm: &str) -> HostProcess {
        HostProcess {
            pid,
            ppid,
            start_ticks: u64::from(pid) * 10,
            user: Some("bob".to_string()),
            comm: comm.to_string(),
            command: command.map(str::to_string),
            state: 'S',
            ..HostProcess::default()
        }
    }

    fn pids(snapshot: &Snapshot, rows: &[RowRef]) -> Vec<u32> {
        rows.iter().map(|r| materialize(snapshot, r).pid).collect()
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            processes: vec![
                gpu_row(300, 1, "python eval.py", 5),
                gpu_row(200, 0, "python train.py", 30),
                gpu_row(200, 1, "python train.py", 20),
            ],
            ..Snapshot::default()
        }
    }

    /// A plain `srun` task has SLURM_PROCID and SLURM_NTASKS, no RANK: the JOB line showed
    /// "r0 r1" while the RANK column stayed hidden.
    #[test]
    fn a_slurm_tasks_number_is_its_rank() {
        let mut snap = snapshot();
        snap.processes[0].slurm = Some(Arc::new(crate::model::SlurmTask {
            job_id: "77".into(),
            proc_id: Some(1),
            ntasks: Some(2),
            ..Default::default()
        }));
        let rows = compute_rows(&snap, &RowSettings::default());
        let row = rows
            .iter()
            .find(|r| materialize(&snap, r).pid == 300)
            .unwrap();
        assert!(row.has_rank(&snap));
        assert_eq!(materialize(&snap, row).rank_text().as_deref(), Some("1/2"));
    }

    #[test]
    fn flat_rows_sort_by_the_chosen_key_and_filter_on_text() {
        let snap = snapshot();
        let mut settings = RowSettings::default();
        let rows = compute_rows(&snap, &settings);
        assert_eq!(pids(&snap, &rows), [200, 200, 300]);
        assert_eq!(*rows[1].gpus, [2]);
        settings.sort = SortKey::GpuMemory;
        settings.reverse = true;
        assert_eq!(
            pids(&snap, &compute_rows(&snap, &settings)),
            [200, 200, 300]
        );
        settings.reverse = false;
        assert_eq!(
            pids(&snap, &compute_rows(&snap, &settings)),
            [300, 200, 200]
        );
        settings.filter = "EVAL".to_string();
        assert_eq!(pids(&snap, &compute_rows(&snap, &settings)), [300]);
        settings.filter = "nothing".to_string();
        assert!(compute_rows(&snap, &settings).is_empty());
    }

    #[test]
    fn tree_rows_include_children_without_a_gpu_and_filter_on_them() {
        let mut snap = snapshot();
        snap.host_processes = vec![
            host(100, 1, Some("torchrun --nproc 2 train.py"), "torchrun"),
            host(200, 100, Some("python train.py"), "python"),
            host(300, 100, Some("python eval.py"), "python"),
            host(210, 200, None, "pt_data_worker"),
        ];
        let settings = RowSettings {
            tree: true,
            ..RowSettings::default()
        };
        let rows = compute_rows(&snap, &settings);
        assert_eq!(pids(&snap, &rows), [100, 200, 210, 300]);
        let rank = materialize(&snap, &rows[1]);
        assert_eq!(rank.gpus.len(), 2, "one row for both GPUs");
        assert_eq!(rank.gpu_memory_bytes(), Some(50 << 30));
        assert_eq!(rank.identity(), Some(ProcessIdentity::new(200, 2000)));
        assert_eq!(rank.key().gpu, None);
        let worker = materialize(&snap, &rows[2]);
        assert!(!worker.is_gpu());
        assert_eq!(worker.command().as_deref(), Some("[pt_data_worker]"));
        assert_eq!(worker.tree, Some(("│  └─ ", TreeRole::Descendant)));

        let filtered = RowSettings {
            filter: "data_worker".to_string(),
            ..settings.clone()
        };
        assert_eq!(pids(&snap, &compute_rows(&snap, &filtered)), [210]);
        let by_user = RowSettings {
            filter: "BOB".to_string(),
            ..settings
        };
        assert_eq!(compute_rows(&snap, &by_user).len(), 4);
    }

    /// A user's review: `└─ bash` headed the tree, its parent (root's sshd) and its other
    /// child (carol's process, known only through its agent) hidden by the user filter.
    #[test]
    fn a_tree_row_whose_parent_is_filtered_out_is_drawn_as_a_root() {
        let mut snap = snapshot();
        let mut agent_only = GpuProcess::agent_only(400, Arc::default());
        agent_only.user = Some("carol".to_string().into());
        snap.processes.push(agent_only);
        let owned = |mut h: HostProcess, user: &str| {
            h.user = Some(user.to_string());
            h
        };
        snap.host_processes = vec![
            owned(host(50, 1, Some("sshd: bob"), "sshd"), "root"),
            host(100, 50, Some("-bash"), "bash"),
            host(200, 100, Some("python train.py"), "python"),
            owned(host(400, 100, Some("python probe.py"), "python"), "carol"),
        ];
        let settings = RowSettings {
            tree: true,
            user: Some("bob".to_string()),
            ..RowSettings::default()
        };
        let rows = compute_rows(&snap, &settings);
        let drawn = pids_and_guides(&snap, &rows);
        assert_eq!(drawn, [(100, ""), (200, "└─ ")]);
    }

    /// Each tree row's pid and the guides drawn before it.
    fn pids_and_guides<'a>(snap: &'a Snapshot, rows: &'a [RowRef]) -> Vec<(u32, &'a str)> {
        let guides = |r: &'a RowRef| r.tree.as_ref().map_or("", |(prefix, _)| prefix.as_str());
        (rows.iter())
            .map(|r| (materialize(snap, r).pid, guides(r)))
            .collect()
    }

    /// With `g` on GPU 0, the DataLoader worker of a rank on GPU 1 stayed as context, drawn at
    /// the top as if it were GPU 0's.
    #[test]
    fn a_gpu_filter_in_the_tree_keeps_context_only_around_the_gpus_it_shows() {
        let snap = Snapshot {
            host_processes: vec![
                host(10, 1, Some("torchrun train.py"), "torchrun"),
                host(200, 10, Some("python train.py"), "python"),
                host(201, 200, Some("pt_data_worker"), "python"),
                host(300, 10, Some("python eval.py"), "python"),
                host(301, 300, Some("pt_data_worker"), "python"),
                host(400, 1, Some("-bash"), "bash"),
            ],
            ..snapshot()
        };
        let settings = RowSettings {
            tree: true,
            gpus: Some(vec![0]),
            ..RowSettings::default()
        };
        let rows = compute_rows(&snap, &settings);
        let drawn = pids_and_guides(&snap, &rows);
        assert_eq!(drawn, [(10, ""), (200, "└─ "), (201, "   └─ ")]);
    }

    #[test]
    fn tree_before_the_process_table_arrives_shows_the_gpu_rows() {
        let snap = snapshot();
        let settings = RowSettings {
            tree: true,
            ..RowSettings::default()
        };
        let rows = compute_rows(&snap, &settings);
        assert_eq!(pids(&snap, &rows), [200, 300]);
        let rank = materialize(&snap, &rows[0]);
        assert!(rank.host.is_none());
        assert_eq!(rank.identity(), Some(ProcessIdentity::new(200, 2000)));
        assert_eq!(rank.user(), Some("alice"));
    }

    #[test]
    fn the_program_is_shown_by_its_basename() {
        assert_eq!(
            program_basename("/home/alice/.pyenv/versions/3.11.7/bin/python3 train.py --lr 3e-4"),
            "python3 train.py --lr 3e-4"
        );
        assert_eq!(
            program_basename("python3 /srv/x/train.py"),
            "python3 /srv/x/train.py"
        );
        assert_eq!(program_basename("/usr/bin/nvidia-smi"), "nvidia-smi");
        assert_eq!(program_basename("/weird/ -x"), "/weird/ -x");
        assert_eq!(program_basename(""), "");
    }

    #[test]
    fn the_rank_comes_from_the_agent_or_the_launcher() {
        let mut p = gpu_row(500, 0, "/usr/bin/python3 t.py", 1);
        let snap = |p: &GpuProcess| Snapshot {
            processes: vec![p.clone()],
            ..Snapshot::default()
        };
        let first = |s: &Snapshot| {
            let rows = compute_rows(s, &RowSettings::default());
            let row = materialize(s, &rows[0]);
            (row.rank_text(), row.display_command())
        };
        let plain = snap(&p);
        assert_eq!(first(&plain).0, None);
        p.env = Some(
            crate::model::LaunchEnv {
                rank: Some(3),
                world_size: Some(8),
                ..Default::default()
            }
            .into(),
        );
        assert_eq!(first(&snap(&p)).0.as_deref(), Some("3/8"));
        p.env = None;
        p.torch = Some(std::sync::Arc::new(crate::model::TorchInfo::default()));
        assert_eq!(first(&snap(&p)).0.as_deref(), Some("torch"));
        p.command = Some(format!("/usr/bin/python3 t{}.py", '\u{1b}').into());
        assert_eq!(first(&snap(&p)).1.as_deref(), Some("python3 t\\e.py"));
    }

    #[test]
    fn shares_of_gpu_and_host_memory_and_the_start_time() {
        let mut snap = snapshot();
        let rows = compute_rows(&snap, &RowSettings::default());
        let first = materialize(&snap, &rows[0]);
        assert_eq!(first.gpu_memory_percent(&snap), None, "no GPU total: N/A");
        assert_eq!(first.host_memory_percent(&snap), None);
        assert_eq!(first.state(), None);
        assert_eq!(first.start_unix_seconds(&snap), None);
        snap.gpus = (0..2)
            .map(|index| crate::model::GpuSample {
                index,
                memory_total_bytes: Some(80 << 30),
                ..Default::default()
            })
            .collect();
        snap.host.memory.total_bytes = Some(64 << 30);
        snap.unix_seconds = 10_000.0;
        snap.processes[1].rss_bytes = Some(16 << 30);
        snap.processes[1].running_seconds = Some(600.0);
        snap.processes[1].state = Some('T');
        let first = materialize(&snap, &rows[0]);
        assert_eq!(first.pid, 200);
        assert_eq!(first.gpu_memory_percent(&snap), Some(37.5));
        assert_eq!(first.host_memory_percent(&snap), Some(25.0));
        assert_eq!(first.state(), Some('T'));
        assert_eq!(first.start_unix_seconds(&snap), Some(9_400.0));
    }

    #[test]
    fn user_and_gpu_filters_keep_only_their_rows() {
        let mut snap = snapshot();
        snap.processes[0].user = Some("bob".to_string().into());
        let by_user = RowSettings {
            user: Some("alice".to_string()),
            ..RowSettings::default()
        };
        assert_eq!(pids(&snap, &compute_rows(&snap, &by_user)), [200, 200]);
        let by_gpu = RowSettings {
            gpus: Some(vec![1]),
            ..RowSettings::default()
        };
        let rows = compute_rows(&snap, &by_gpu);
        assert_eq!(pids(&snap, &rows), [200, 300]);
        assert!(rows.iter().all(|r| snap.processes[r.gpus[0]].gpu == 1));
        let both = RowSettings {
            gpus: Some(vec![1]),
            user: Some("bob".to_string()),
            ..RowSettings::default()
        };
        assert_eq!(pids(&snap, &compute_rows(&snap, &both)), [300]);
        assert_eq!(users(&snap), ["alice", "bob"]);
    }

    #[test]
    fn a_row_not_visible_in_proc_has_no_identity() {
        let mut p = gpu_row(400, 0, "x", 1);
        p.visible = false;
        let snap = Snapshot {
            processes: vec![p],
            ..Snapshot::default()
        };
        let rows = compute_rows(&snap, &RowSettings::default());
        let row = materialize(&snap, &rows[0]);
        assert!(!row.visible());
        assert_eq!(row.identity(), None);
    }
}

#[cfg(test)]
mod sorted_rows_tests {
    use std::collections::HashMap;

    use crate::model::filter::sorted_positions;

    use super::*;
    use crate::model::ProcessKind;

    /// Rows of one pid on one GPU take their positions in snapshot order, whatever the sort:
    /// as the map of positions per (pid, GPU) handed them out before.
    #[test]
    fn rows_of_one_pid_and_gpu_keep_snapshot_order_under_every_sort() {
        let process = |pid: u32, gpu: u32, memory: u64| {
            let mut p = GpuProcess::new(pid, gpu, ProcessKind::Compute);
            p.gpu_memory_bytes = Some(memory);
            p
        };
        let processes = vec![
            process(7, 0, 10),
            process(3, 1, 50),
            process(7, 0, 90),
            process(3, 1, 20),
            process(7, 1, 30),
            process(7, 0, 40),
            process(1, 0, 60),
        ];
        for key in SortKey::ALL {
            for reverse in [false, true] {
                let mut positions: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
                for (i, p) in processes.iter().enumerate().rev() {
                    positions.entry((p.pid, p.gpu)).or_default().push(i);
                }
                let expected: Vec<Vec<usize>> = sorted_positions(&processes, key, reverse)
                    .into_iter()
                    .map(|i| &processes[i])
                    .filter_map(|p| positions.get_mut(&(p.pid, p.gpu))?.pop())
                    .map(|i| vec![i])
                    .collect();
                let mut rows = Vec::new();
                let scratch = &mut RowScratch::default();
                sorted_rows(&processes, key, reverse, scratch, &mut rows);
                let rows: Vec<Vec<usize>> = rows.into_iter().map(|r| r.gpus.to_vec()).collect();
                assert_eq!(rows, expected, "{key:?}, reverse {reverse}");
            }
        }
    }
}
