//! The all-ranks table of a distributed job: one row per rank with its allocator figures, the
//! headroom on its GPU and its step time, and which rank stands out. Pure: built from a
//! snapshot, drawn by `ui::ranks`.

use crate::model::{DeviceAllocatorStats, GpuProcess, Job, Snapshot};

/// A value this far from the median of the ranks (as a fraction of it) marks an outlier.
const OUTLIER_FRACTION: f64 = 0.15;
/// Below this many ranks there is no median to stand out from.
const MIN_RANKS_FOR_OUTLIER: usize = 3;

/// The columns of the table, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RankColumn {
    Allocated,
    Reserved,
    Peak,
    Headroom,
    StepTime,
    Retries,
    Ooms,
}

pub(crate) const RANK_COLUMNS: [RankColumn; 7] = [
    RankColumn::Allocated,
    RankColumn::Reserved,
    RankColumn::Peak,
    RankColumn::Headroom,
    RankColumn::StepTime,
    RankColumn::Retries,
    RankColumn::Ooms,
];

/// One rank's figures; `None` where its agent (or NVML) did not say. A rank on several GPUs has
/// one row: its memory summed over them, the least headroom among them.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct RankRow {
    pub(crate) rank: Option<u32>,
    pub(crate) pid: u32,
    pub(crate) gpus: Vec<u32>,
    pub(crate) values: [Option<f64>; 7],
    /// The columns in which this rank is the outlier.
    pub(crate) outlier: Vec<RankColumn>,
}

/// The job whose table the selection asks for: the job the selected process is a rank of, or
/// the job whose ranks descend from the selected process (the launcher's row).
pub(crate) fn job_of(snapshot: &Snapshot, pid: u32) -> Option<&Job> {
    let is_rank = |job: &&Job| job.ranks.iter().any(|r| r.pid == pid);
    let launched = |job: &&Job| {
        job.ranks.iter().any(|r| {
            snapshot
                .processes
                .iter()
                .any(|p| p.pid == r.pid && p.ppid == Some(pid))
        })
    };
    snapshot
        .jobs
        .iter()
        .find(is_rank)
        .or_else(|| snapshot.jobs.iter().find(launched))
}

/// The rows of `job`'s table, one per rank in the job's rank order, with outliers marked.
pub(crate) fn rank_rows(snapshot: &Snapshot, job: &Job) -> Vec<RankRow> {
    let mut rows: Vec<RankRow> = Vec::new();
    for rank in &job.ranks {
        // A rank that holds no GPU yet lists none.
        let gpu = (rank.gpu != crate::model::NO_GPU).then_some(rank.gpu);
        match rows.iter_mut().find(|r| r.pid == rank.pid) {
            Some(row) => row.gpus.extend(gpu),
            None => rows.push(RankRow {
                rank: rank.rank,
                pid: rank.pid,
                gpus: gpu.into_iter().collect(),
                ..RankRow::default()
            }),
        }
    }
    for row in &mut rows {
        let process = snapshot.processes.iter().find(|p| p.pid == row.pid);
        row.values = values(process, &row.gpus);
    }
    mark_outliers(&mut rows);
    rows
}

fn values(process: Option<&GpuProcess>, gpus: &[u32]) -> [Option<f64>; 7] {
    let torch = process.and_then(|p| p.torch.as_ref());
    let devices: Vec<&DeviceAllocatorStats> = torch.map_or_else(Vec::new, |t| {
        let mapped: Vec<&DeviceAllocatorStats> = t
            .devices
            .iter()
            .filter(|d| d.gpu.is_some_and(|g| gpus.contains(&g)))
            .collect();
        if mapped.is_empty() && t.devices.len() == 1 {
            vec![&t.devices[0]]
        } else {
            mapped
        }
    });
    let sum = |f: fn(&DeviceAllocatorStats) -> Option<u64>| -> Option<f64> {
        if devices.is_empty() {
            return None;
        }
        devices.iter().map(|d| f(d).map(|b| b as f64)).sum()
    };
    let least_headroom = devices
        .iter()
        .map(|d| d.headroom_bytes.map(|b| b as f64))
        .collect::<Option<Vec<f64>>>()
        .and_then(|all| all.into_iter().reduce(f64::min));
    [
        sum(|d| d.allocated_bytes),
        sum(|d| d.reserved_bytes),
        sum(|d| d.peak_allocated_bytes),
        least_headroom,
        torch.and_then(|t| t.step_time_seconds),
        sum(|d| d.alloc_retries),
        sum(|d| d.ooms),
    ]
}

/// In each column, the rank farthest from the median on the bad side (less headroom, more of
/// anything else), when it is more than [`OUTLIER_FRACTION`] away (any retry or OOM where the
/// median rank has none counts).
fn mark_outliers(rows: &mut [RankRow]) {
    for (c, column) in RANK_COLUMNS.iter().enumerate() {
        let mut present: Vec<f64> = rows.iter().filter_map(|r| r.values[c]).collect();
        if present.len() < MIN_RANKS_FOR_OUTLIER {
            continue;
        }
        present.sort_by(f64::total_cmp);
        let median = present[present.len() / 2];
        let distance = |v: f64| {
            if *column == RankColumn::Headroom {
                median - v
            } else {
                v - median
            }
        };
        let farthest = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i, distance(r.values[c]?))))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let Some((i, far)) = farthest else {
            continue;
        };
        let stands_out = far > 0.0 && (median == 0.0 || far / median.abs() > OUTLIER_FRACTION);
        if stands_out {
            rows[i].outlier.push(*column);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JobRank, ProcessKind, TorchInfo};

    fn snapshot(step_times: &[f64], retries: &[u64]) -> (Snapshot, Job) {
        let mut snapshot = Snapshot::default();
        let mut ranks = Vec::new();
        for (r, (&t, &n)) in step_times.iter().zip(retries).enumerate() {
            let r = r as u32;
            let mut p = GpuProcess::new(100 + r, r, ProcessKind::Compute);
            p.ppid = Some(1);
            p.torch = Some(std::sync::Arc::new(TorchInfo {
                step_time_seconds: Some(t),
                devices: vec![DeviceAllocatorStats {
                    index: 0,
                    gpu: Some(r),
                    allocated_bytes: Some(1000),
                    alloc_retries: Some(n),
                    ..Default::default()
                }],
                ..Default::default()
            }));
            snapshot.processes.push(p);
            ranks.push(JobRank {
                pid: 100 + r,
                gpu: r,
                rank: Some(r),
                local_rank: Some(r),
                world_size: Some(step_times.len() as u32),
            });
        }
        let job = Job {
            gone: Vec::new(),
            id: "job x".into(),
            ranks,
        };
        snapshot.jobs = vec![job.clone()];
        (snapshot, job)
    }

    #[test]
    fn the_slow_rank_and_the_retrying_rank_are_marked() {
        let (snapshot, job) = snapshot(&[0.5, 0.51, 0.8, 0.5], &[0, 0, 0, 4]);
        let rows = rank_rows(&snapshot, &job);
        assert_eq!(rows[2].outlier, vec![RankColumn::StepTime]);
        assert_eq!(rows[3].outlier, vec![RankColumn::Retries]);
        assert!(rows[0].outlier.is_empty() && rows[1].outlier.is_empty());
        assert_eq!(rows[1].values[0], Some(1000.0));
    }

    #[test]
    fn even_ranks_mark_nothing_and_a_rank_or_its_launcher_finds_the_job() {
        let (mut snapshot, job) = snapshot(&[0.5, 0.52, 0.5], &[0, 0, 0]);
        assert!(rank_rows(&snapshot, &job)
            .iter()
            .all(|r| r.outlier.is_empty()));
        assert_eq!(job_of(&snapshot, 101).map(|j| j.id.as_str()), Some("job x"));
        assert!(job_of(&snapshot, 7).is_none());
        for p in &mut snapshot.processes {
            p.ppid = Some(7);
        }
        assert_eq!(job_of(&snapshot, 7).map(|j| j.id.as_str()), Some("job x"));
    }
}
