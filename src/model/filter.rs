//! Choosing rows: the `/` text filter, tagged rows and the targets of an action, and the sort
//! orders of the process table. Pure functions over the model; no I/O.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::process::GpuProcess;
use super::ProcessIdentity;

/// True when `filter` is empty, is a case-insensitive part of the command or the user, or is
/// the start of the pid ("12" matches 1234).
pub(crate) fn matches(filter: &str, p: &GpuProcess) -> bool {
    let needle = filter.trim();
    if needle.is_empty() {
        return true;
    }
    if p.pid.to_string().starts_with(needle) {
        return true;
    }
    let needle = needle.to_lowercase();
    [p.command.as_deref(), p.user.as_deref()]
        .into_iter()
        .flatten()
        .any(|text| text.to_lowercase().contains(&needle))
}

/// Tagged processes, keyed by identity so a tag never moves to a new process that reuses the
/// pid.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tags {
    tagged: BTreeSet<ProcessIdentity>,
}

impl Tags {
    pub(crate) fn new() -> Self {
        Tags::default()
    }

    /// Tags an untagged process and untags a tagged one; returns whether it is now tagged.
    pub(crate) fn toggle(&mut self, id: ProcessIdentity) -> bool {
        if self.tagged.remove(&id) {
            false
        } else {
            self.tagged.insert(id);
            true
        }
    }

    pub(crate) fn contains(&self, id: &ProcessIdentity) -> bool {
        self.tagged.contains(id)
    }

    pub(crate) fn clear(&mut self) {
        self.tagged.clear();
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tagged.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.tagged.len()
    }

    /// Tagged identities, by pid.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &ProcessIdentity> {
        self.tagged.iter()
    }
}

/// What an action applies to: the tagged processes (by pid), or else the selected one.
pub(crate) fn action_targets(
    tags: &Tags,
    selected: Option<ProcessIdentity>,
) -> Vec<ProcessIdentity> {
    if tags.is_empty() {
        selected.into_iter().collect()
    } else {
        tags.iter().copied().collect()
    }
}

/// A column the process table can be sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SortKey {
    Pid,
    User,
    Nice,
    Gpu,
    GpuMemory,
    Sm,
    Cpu,
    Rss,
    Time,
    Command,
}

impl SortKey {
    /// Every key, in the order of the sort menu and of stepping.
    pub(crate) const ALL: [SortKey; 10] = [
        SortKey::Pid,
        SortKey::User,
        SortKey::Nice,
        SortKey::Gpu,
        SortKey::GpuMemory,
        SortKey::Sm,
        SortKey::Cpu,
        SortKey::Rss,
        SortKey::Time,
        SortKey::Command,
    ];

    /// The column heading it sorts.
    pub(crate) fn label(self) -> &'static str {
        match self {
            SortKey::Pid => "PID",
            SortKey::User => "USER",
            SortKey::Nice => "NI",
            SortKey::Gpu => "GPU",
            SortKey::GpuMemory => "GPU MEM",
            SortKey::Sm => "SM%",
            SortKey::Cpu => "CPU%",
            SortKey::Rss => "RSS",
            SortKey::Time => "TIME",
            SortKey::Command => "COMMAND",
        }
    }

    /// Whether choosing this key sorts descending first: figures that measure something
    /// (memory, utilization, CPU, time, nice), biggest first as in nvtop and htop. The pid, the
    /// GPU index and text sort ascending first: they identify rather than measure.
    pub(crate) fn descending_first(self) -> bool {
        !matches!(
            self,
            SortKey::Pid | SortKey::Gpu | SortKey::User | SortKey::Command
        )
    }

    /// The next key in [`SortKey::ALL`], wrapping around.
    pub(crate) fn next(self) -> SortKey {
        let i = self.position();
        SortKey::ALL[(i + 1) % SortKey::ALL.len()]
    }

    /// The previous key in [`SortKey::ALL`], wrapping around.
    pub(crate) fn prev(self) -> SortKey {
        let i = self.position();
        SortKey::ALL[(i + SortKey::ALL.len() - 1) % SortKey::ALL.len()]
    }

    fn position(self) -> usize {
        SortKey::ALL.iter().position(|&k| k == self).unwrap_or(0)
    }
}

/// `rows` in the order of [`sorted_positions`].
#[cfg(test)]
pub(crate) fn sort_processes(rows: &mut [GpuProcess], key: SortKey, reverse: bool) {
    let sorted: Vec<GpuProcess> = sorted_positions(rows, key, reverse)
        .into_iter()
        .map(|i| rows[i].clone())
        .collect();
    rows.clone_from_slice(&sorted);
}

/// The positions in `processes` sorted ascending by `key`, or descending with `reverse`, without
/// copying the processes. Rows whose value is missing (N/A) go last in both directions; ties are
/// broken by pid then GPU, always ascending, so the order is stable between refreshes.
#[cfg(test)]
pub(crate) fn sorted_positions(
    processes: &[GpuProcess],
    key: SortKey,
    reverse: bool,
) -> Vec<usize> {
    let mut positions = Vec::new();
    sort_positions_into(processes, key, reverse, &mut positions);
    positions
}

/// The positions in `processes` sorted ascending by `key`, or descending with `reverse`, into
/// `positions` (emptied first), kept by the caller between refreshes: no allocation once it has
/// grown, and no process copied. Rows whose value is missing (N/A) go last in both directions;
/// ties are broken by pid then GPU, always ascending, so the order is stable between refreshes.
/// Rows equal in key, pid and GPU keep their snapshot order, as a stable sort would, without a
/// stable sort's scratch buffer.
pub(crate) fn sort_positions_into(
    processes: &[GpuProcess],
    key: SortKey,
    reverse: bool,
    positions: &mut Vec<usize>,
) {
    positions.clear();
    positions.extend(0..processes.len());
    positions.sort_unstable_by(|&i, &j| {
        let (a, b) = (&processes[i], &processes[j]);
        compare_by(key, a, b, reverse)
            .then(a.pid.cmp(&b.pid))
            .then(a.gpu.cmp(&b.gpu))
            .then(i.cmp(&j))
    });
}

fn compare_by(key: SortKey, a: &GpuProcess, b: &GpuProcess, reverse: bool) -> Ordering {
    match key {
        SortKey::Pid => directed(a.pid.cmp(&b.pid), reverse),
        SortKey::Gpu => directed(a.gpu.cmp(&b.gpu), reverse),
        SortKey::User => missing_last(a.user.as_deref(), b.user.as_deref(), reverse, caseless_cmp),
        SortKey::Command => missing_last(
            a.command.as_deref(),
            b.command.as_deref(),
            reverse,
            caseless_cmp,
        ),
        SortKey::GpuMemory => {
            missing_last(a.gpu_memory_bytes, b.gpu_memory_bytes, reverse, Ord::cmp)
        }
        SortKey::Sm => missing_last(a.sm_percent, b.sm_percent, reverse, Ord::cmp),
        SortKey::Nice => missing_last(a.nice, b.nice, reverse, Ord::cmp),
        SortKey::Rss => missing_last(a.rss_bytes, b.rss_bytes, reverse, Ord::cmp),
        SortKey::Cpu => missing_last(a.cpu_percent, b.cpu_percent, reverse, f64_cmp),
        SortKey::Time => missing_last(a.running_seconds, b.running_seconds, reverse, f64_cmp),
    }
}

fn directed(order: Ordering, reverse: bool) -> Ordering {
    if reverse {
        order.reverse()
    } else {
        order
    }
}

fn missing_last<T>(
    a: Option<T>,
    b: Option<T>,
    reverse: bool,
    cmp: impl Fn(&T, &T) -> Ordering,
) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => directed(cmp(&a, &b), reverse),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "the shape missing_last's comparators take"
)]
fn f64_cmp(a: &f64, b: &f64) -> Ordering {
    a.total_cmp(b)
}

/// Compares as `to_lowercase` copies would, without making them (a sort compares each row
/// many times per frame).
fn caseless_cmp(a: &&str, b: &&str) -> Ordering {
    a.chars()
        .flat_map(char::to_lowercase)
        .cmp(b.chars().flat_map(char::to_lowercase))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessKind;

    fn row(pid: u32, user: &str, command: &str) -> GpuProcess {
        let mut p = GpuProcess::new(pid, 0, ProcessKind::Compute);
        p.user = Some(user.to_string().into());
        p.command = Some(command.to_string().into());
        p.start_ticks = Some(u64::from(pid) * 100);
        p
    }

    fn id(pid: u32) -> ProcessIdentity {
        ProcessIdentity::new(pid, u64::from(pid) * 100)
    }

    fn pids(rows: &[GpuProcess]) -> Vec<u32> {
        rows.iter().map(|r| r.pid).collect()
    }

    #[test]
    fn filter_matches_command_user_and_pid_prefix() {
        let p = row(4321, "Alice", "python Train.py --lr 3e-4");
        for hit in [
            "", "  ", "train", "TRAIN.PY", "alice", "ALI", "43", "4321", " 4321 ",
        ] {
            assert!(matches(hit, &p), "{hit:?} should match");
        }
        for miss in ["bob", "321", "43210", "eval"] {
            assert!(!matches(miss, &p), "{miss:?} should not match");
        }
    }

    #[test]
    fn rows_equal_in_key_pid_and_gpu_keep_their_snapshot_order() {
        // 600 rows of one pid on one GPU, all N/A in every key, then a few others: each
        // key in each direction orders them as a stable sort does, the equal ones as given.
        let mut rows: Vec<GpuProcess> = (0..600)
            .map(|_| GpuProcess::new(9, 0, ProcessKind::Compute))
            .collect();
        rows.extend([row(3, "bob", "b"), row(12, "amy", "a"), row(9, "cy", "c")]);
        for key in SortKey::ALL {
            for reverse in [false, true] {
                let mut stable: Vec<usize> = (0..rows.len()).collect();
                stable.sort_by(|&i, &j| {
                    let (a, b) = (&rows[i], &rows[j]);
                    compare_by(key, a, b, reverse)
                        .then(a.pid.cmp(&b.pid))
                        .then(a.gpu.cmp(&b.gpu))
                });
                let mut kept = vec![7; 3];
                sort_positions_into(&rows, key, reverse, &mut kept);
                assert_eq!(kept, stable, "{key:?}, reverse {reverse}");
            }
        }
    }

    #[test]
    fn filter_on_a_row_without_proc_data_uses_the_pid_only() {
        let p = GpuProcess::new(555, 0, ProcessKind::Compute);
        assert!(matches("55", &p));
        assert!(!matches("python", &p));
    }

    #[test]
    fn tags_toggle_and_follow_identity_not_pid() {
        let mut tags = Tags::new();
        assert!(tags.toggle(id(10)));
        assert!(tags.toggle(id(20)));
        assert!(!tags.toggle(id(20)));
        assert!(tags.contains(&id(10)));
        assert!(!tags.contains(&id(20)));
        // Same pid, another start time: another process, not tagged.
        assert!(!tags.contains(&ProcessIdentity::new(10, 1)));
        tags.clear();
        assert!(tags.is_empty());
    }

    #[test]
    fn actions_target_tagged_rows_else_the_selection() {
        let mut tags = Tags::new();
        assert_eq!(action_targets(&tags, Some(id(7))), vec![id(7)]);
        assert_eq!(action_targets(&tags, None), vec![]);
        tags.toggle(id(30));
        tags.toggle(id(10));
        assert_eq!(action_targets(&tags, Some(id(7))), vec![id(10), id(30)]);
    }

    #[test]
    fn missing_values_sort_last_in_both_directions() {
        let mut rows: Vec<GpuProcess> = [(1, Some(300)), (2, None), (3, Some(100)), (4, Some(200))]
            .into_iter()
            .map(|(pid, mem)| {
                let mut p = row(pid, "u", "c");
                p.gpu_memory_bytes = mem;
                p
            })
            .collect();
        sort_processes(&mut rows, SortKey::GpuMemory, false);
        assert_eq!(pids(&rows), [3, 4, 1, 2]);
        sort_processes(&mut rows, SortKey::GpuMemory, true);
        assert_eq!(pids(&rows), [1, 4, 3, 2]);
    }

    #[test]
    fn float_and_text_keys_sort_with_ties_by_pid() {
        let mut rows: Vec<GpuProcess> = [(5, 50.0, "bob"), (2, 50.0, "Carol"), (9, 1.5, "alice")]
            .into_iter()
            .map(|(pid, cpu, user)| {
                let mut p = row(pid, user, "c");
                p.cpu_percent = Some(cpu);
                p
            })
            .collect();
        rows.push(GpuProcess::new(1, 0, ProcessKind::Compute));
        sort_processes(&mut rows, SortKey::Cpu, true);
        assert_eq!(pids(&rows), [2, 5, 9, 1]);
        sort_processes(&mut rows, SortKey::User, false);
        assert_eq!(pids(&rows), [9, 5, 2, 1]);
        sort_processes(&mut rows, SortKey::User, true);
        assert_eq!(pids(&rows), [2, 5, 9, 1]);
        sort_processes(&mut rows, SortKey::Pid, true);
        assert_eq!(pids(&rows), [9, 5, 2, 1]);
    }

    #[test]
    fn sort_keys_step_and_wrap() {
        assert_eq!(SortKey::Pid.next(), SortKey::User);
        assert_eq!(SortKey::Command.next(), SortKey::Pid);
        assert_eq!(SortKey::Pid.prev(), SortKey::Command);
        for key in SortKey::ALL {
            assert_eq!(key.next().prev(), key);
        }
    }
}
