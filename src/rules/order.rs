//! A tick's processes grouped by sorting, in room kept from tick to tick.
//!
//! Rules that judge groups of processes (a cgroup's, a job's, a GPU's) find them here instead
//! of comparing each process with every other: on a host with a thousand training processes
//! that comparison made a tick take more than a second. Sorting costs n log n, and once the
//! room has grown to the host's size a tick allocates nothing.

use crate::model::{GpuProcess, Job};

/// Room for the rows of one grouping.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rows(Vec<usize>);

impl Rows {
    /// The rows of `processes` that `keep` passes (of a pid's rows only the first, when
    /// `once_per_pid`), grouped by `key`: the groups in `key` order, each group's rows in
    /// their order in `processes`.
    pub(crate) fn group<'s, K: Ord>(
        &'s mut self,
        processes: &[GpuProcess],
        keep: impl Fn(&GpuProcess) -> bool,
        once_per_pid: bool,
        key: impl Fn(usize) -> K + 's,
    ) -> impl Iterator<Item = &'s [usize]> + 's {
        let rows = &mut self.0;
        rows.clear();
        rows.extend((0..processes.len()).filter(|&i| keep(&processes[i])));
        if once_per_pid {
            rows.sort_unstable_by_key(|&i| (processes[i].pid, i));
            rows.dedup_by_key(|i| processes[*i].pid);
        }
        rows.sort_unstable_by(|&a, &b| key(a).cmp(&key(b)).then(a.cmp(&b)));
        rows.chunk_by(move |&a, &b| key(a) == key(b))
    }
}

/// The rows of each pid in the snapshot's process table, looked up by binary search.
#[derive(Debug, Clone, Default)]
pub(crate) struct PidIndex(Vec<(u32, usize)>);

impl PidIndex {
    pub(crate) fn fill(&mut self, processes: &[GpuProcess]) {
        self.0.clear();
        self.0
            .extend(processes.iter().enumerate().map(|(row, p)| (p.pid, row)));
        self.0.sort_unstable();
    }

    /// The rows of `pid`, first row first.
    pub(crate) fn rows(&self, pid: u32) -> impl Iterator<Item = usize> + '_ {
        let from = self.0.partition_point(|&(p, _)| p < pid);
        (self.0[from..].iter())
            .take_while(move |&&(p, _)| p == pid)
            .map(|&(_, row)| row)
    }
}

/// Which job each pid is a rank of, looked up by binary search.
#[derive(Debug, Clone, Default)]
pub(crate) struct JobIndex(Vec<(u32, usize)>);

impl JobIndex {
    /// Indexes `jobs` (the snapshot's, which are ordered by id).
    pub(crate) fn fill(&mut self, jobs: &[Job]) {
        self.0.clear();
        for (at, job) in jobs.iter().enumerate() {
            self.0.extend(job.ranks.iter().map(|rank| (rank.pid, at)));
        }
        self.0.sort_unstable();
        self.0.dedup();
    }

    /// The place in the indexed jobs of the first job `pid` is a rank of.
    pub(crate) fn of(&self, pid: u32) -> Option<usize> {
        let at = self.0.partition_point(|&(p, _)| p < pid);
        (self.0.get(at)).and_then(|&(p, job)| (p == pid).then_some(job))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobRank;
    use crate::rules::testkit::process;

    /// Process rows of (pid, GPU).
    fn table(rows: &[(u32, u32)]) -> Vec<GpuProcess> {
        (rows.iter())
            .map(|&(pid, gpu)| process(pid, gpu, 1))
            .collect()
    }

    fn rank(pid: u32) -> JobRank {
        JobRank {
            pid,
            gpu: 0,
            rank: None,
            local_rank: None,
            world_size: None,
        }
    }

    #[test]
    fn groups_come_in_key_order_with_their_rows_in_table_order() {
        let processes = table(&[(5, 1), (3, 0), (9, 1), (4, 2), (7, 0)]);
        let mut rows = Rows::default();
        let key = |i: usize| processes[i].gpu;
        let groups: Vec<Vec<usize>> = (rows.group(&processes, |p| p.pid != 4, false, key))
            .map(<[usize]>::to_vec)
            .collect();
        assert_eq!(groups, [vec![1, 4], vec![0, 2]]);
    }

    #[test]
    fn once_per_pid_keeps_a_pids_first_row() {
        let processes = table(&[(5, 1), (3, 0), (5, 0), (3, 1)]);
        let mut rows = Rows::default();
        let key = |i: usize| processes[i].gpu;
        let groups: Vec<Vec<usize>> = (rows.group(&processes, |_| true, true, key))
            .map(<[usize]>::to_vec)
            .collect();
        assert_eq!(groups, [vec![1], vec![0]]);
    }

    #[test]
    fn a_pid_finds_its_rows_in_table_order() {
        let processes = table(&[(5, 1), (3, 0), (5, 0), (9, 1)]);
        let mut index = PidIndex::default();
        index.fill(&processes);
        let rows = |pid| index.rows(pid).collect::<Vec<_>>();
        assert_eq!(rows(5), [0, 2]);
        assert_eq!(rows(3), [1]);
        assert_eq!(rows(9), [3]);
        assert!(rows(4).is_empty() && rows(10).is_empty() && rows(0).is_empty());
    }

    #[test]
    fn a_pid_finds_its_job_and_a_stranger_none() {
        let jobs = [
            Job {
                gone: Vec::new(),
                id: "a".into(),
                ranks: vec![rank(30), rank(10)],
            },
            Job {
                gone: Vec::new(),
                id: "b".into(),
                ranks: vec![rank(20), rank(20)],
            },
        ];
        let mut index = JobIndex::default();
        index.fill(&jobs);
        let found: Vec<Option<usize>> = [10, 20, 30, 15, 40, 0].map(|p| index.of(p)).to_vec();
        assert_eq!(found, [Some(0), Some(1), Some(0), None, None, None]);
    }
}
