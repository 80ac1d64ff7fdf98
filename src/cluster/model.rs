//! The cluster as the view shows it, built from Prometheus' answers without I/O: nodes with
//! their GPUs, jobs across nodes with their ranks and straggler, and every node's warnings.
//!
//! Everything Prometheus returns is text other people chose (host names, job ids from
//! environments): it goes through [`printable`] before it is kept.

use std::collections::BTreeMap;

use serde::Serialize;

use super::promql::{Range, Sample};
use crate::serve::torchtop::JOB_LABEL;

const MIB: f64 = 1048576.0;

/// One GPU of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub(crate) struct NodeGpu {
    pub(crate) gpu: u32,
    pub(crate) model: Option<String>,
    pub(crate) uuid: Option<String>,
    pub(crate) utilization_percent: Option<f64>,
    pub(crate) memory_used_bytes: Option<f64>,
    pub(crate) memory_free_bytes: Option<f64>,
    pub(crate) temperature_c: Option<f64>,
    pub(crate) power_w: Option<f64>,
    /// "ok", "stale" or "lost", from `torchtop_gpu_state`; `None` for a GPU only DCGM reports.
    pub(crate) state: Option<String>,
}

/// One machine.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub(crate) struct Node {
    pub(crate) hostname: String,
    pub(crate) gpus: Vec<NodeGpu>,
    pub(crate) utilization_mean: Option<f64>,
    pub(crate) utilization_min: Option<f64>,
    pub(crate) memory_used_bytes: Option<f64>,
    pub(crate) memory_total_bytes: Option<f64>,
    pub(crate) temperature_max: Option<f64>,
    pub(crate) warnings: usize,
    /// Mean utilization over the last minutes, oldest first, for the sparkline.
    pub(crate) utilization_history: Vec<f64>,
}

/// One rank of a job: a process on a node.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub(crate) struct Rank {
    pub(crate) hostname: String,
    pub(crate) pid: u32,
    pub(crate) rank: Option<u32>,
    pub(crate) gpu: Option<u32>,
    pub(crate) memory_bytes: Option<f64>,
    /// Free memory on the rank's GPU.
    pub(crate) headroom_bytes: Option<f64>,
    pub(crate) step_time_seconds: Option<f64>,
    /// How far the step time is above the job's median, in percent.
    pub(crate) above_median_percent: Option<f64>,
    pub(crate) straggler: bool,
}

/// Ranks that share a job label, across nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub(crate) struct Job {
    pub(crate) id: String,
    pub(crate) nodes: usize,
    pub(crate) median_step_time_seconds: Option<f64>,
    pub(crate) ranks: Vec<Rank>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub(crate) struct ClusterWarning {
    pub(crate) hostname: String,
    pub(crate) id: String,
    pub(crate) severity: String,
    pub(crate) subject: String,
}

/// Everything the view draws.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub(crate) struct ClusterView {
    pub(crate) gpu_count: usize,
    pub(crate) nodes: Vec<Node>,
    pub(crate) jobs: Vec<Job>,
    pub(crate) warnings: Vec<ClusterWarning>,
}

/// Text from Prometheus made safe for a terminal by the one escaping function every outside
/// text goes through ([`crate::format::escape`]), and bounded in length.
pub(crate) fn printable(text: &str) -> String {
    crate::format::escape(text).chars().take(256).collect()
}

fn label(sample: &Sample, name: &str) -> Option<String> {
    sample.label(name).map(printable)
}

fn number<T: std::str::FromStr>(sample: &Sample, name: &str) -> Option<T> {
    sample.label(name)?.parse().ok()
}

fn finite(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}

/// Nodes from the GPU panel's answer, with warning counts and sparklines joined in.
pub(crate) fn nodes(gpus: &[Sample], warnings: &[ClusterWarning], history: &[Range]) -> Vec<Node> {
    let mut by_host: BTreeMap<String, BTreeMap<u32, NodeGpu>> = BTreeMap::new();
    for sample in gpus {
        let (Some(host), Some(index)) = (label(sample, "Hostname"), number::<u32>(sample, "gpu"))
        else {
            continue;
        };
        let gpu = by_host.entry(host).or_default().entry(index).or_default();
        gpu.gpu = index;
        gpu.model = gpu.model.take().or_else(|| label(sample, "modelName"));
        gpu.uuid = gpu.uuid.take().or_else(|| label(sample, "UUID"));
        let value = finite(sample.value);
        match sample.name() {
            "DCGM_FI_DEV_GPU_UTIL" => gpu.utilization_percent = value,
            "DCGM_FI_DEV_FB_USED" => gpu.memory_used_bytes = value.map(|v| v * MIB),
            "DCGM_FI_DEV_FB_FREE" => gpu.memory_free_bytes = value.map(|v| v * MIB),
            "DCGM_FI_DEV_GPU_TEMP" => gpu.temperature_c = value,
            "DCGM_FI_DEV_POWER_USAGE" => gpu.power_w = value,
            "torchtop_gpu_state" if sample.value == 1.0 => gpu.state = label(sample, "state"),
            _ => {}
        }
    }
    by_host
        .into_iter()
        .map(|(hostname, gpus)| {
            let gpus: Vec<NodeGpu> = gpus.into_values().collect();
            let mut node = summarize(hostname, gpus);
            node.warnings = warnings
                .iter()
                .filter(|w| w.hostname == node.hostname)
                .count();
            node.utilization_history = history
                .iter()
                .find(|r| {
                    r.labels.get("Hostname").map(|h| printable(h)) == Some(node.hostname.clone())
                })
                .map(|r| {
                    r.points
                        .iter()
                        .map(|p| p.1)
                        .filter(|v| v.is_finite())
                        .collect()
                })
                .unwrap_or_default();
            node
        })
        .collect()
}

fn summarize(hostname: String, gpus: Vec<NodeGpu>) -> Node {
    let utils: Vec<f64> = gpus.iter().filter_map(|g| g.utilization_percent).collect();
    let used: Vec<f64> = gpus.iter().filter_map(|g| g.memory_used_bytes).collect();
    let totals: Vec<f64> = gpus
        .iter()
        .filter_map(|g| Some(g.memory_used_bytes? + g.memory_free_bytes?))
        .collect();
    let temps: Vec<f64> = gpus.iter().filter_map(|g| g.temperature_c).collect();
    let sum = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>());
    Node {
        hostname,
        utilization_mean: sum(&utils).map(|s| s / utils.len() as f64),
        utilization_min: utils.iter().copied().reduce(f64::min),
        memory_used_bytes: sum(&used),
        memory_total_bytes: sum(&totals),
        temperature_max: temps.iter().copied().reduce(f64::max),
        gpus,
        ..Default::default()
    }
}

/// Warnings from the warnings panel's answer, most severe first.
pub(crate) fn warnings(samples: &[Sample]) -> Vec<ClusterWarning> {
    let mut out: Vec<ClusterWarning> = samples
        .iter()
        .filter(|s| s.value == 1.0)
        .map(|s| ClusterWarning {
            hostname: label(s, "Hostname").unwrap_or_default(),
            id: label(s, "id").unwrap_or_default(),
            severity: label(s, "severity").unwrap_or_default(),
            subject: label(s, "subject").unwrap_or_default(),
        })
        .collect();
    let weight = |s: &str| match s {
        "critical" => 0,
        "warn" => 1,
        _ => 2,
    };
    out.sort_by(|a, b| {
        (weight(&a.severity), &a.hostname, &a.id, &a.subject).cmp(&(
            weight(&b.severity),
            &b.hostname,
            &b.id,
            &b.subject,
        ))
    });
    out.dedup();
    out
}

/// Jobs from the jobs panel's answer, with each rank's headroom from the nodes' GPUs and the
/// stragglers marked: ranks whose step time is more than `straggler_percent` above the median.
pub(crate) fn jobs(samples: &[Sample], nodes: &[Node], straggler_percent: f64) -> Vec<Job> {
    let mut by_job: BTreeMap<String, BTreeMap<(String, u32), Rank>> = BTreeMap::new();
    for sample in samples {
        let (Some(job), Some(host), Some(pid)) = (
            label(sample, JOB_LABEL),
            label(sample, "Hostname"),
            number::<u32>(sample, "pid"),
        ) else {
            continue;
        };
        let rank = by_job
            .entry(job)
            .or_default()
            .entry((host.clone(), pid))
            .or_default();
        rank.hostname = host;
        rank.pid = pid;
        rank.rank = rank.rank.or(number(sample, "rank"));
        let value = finite(sample.value);
        match sample.name() {
            "torchtop_process_gpu_memory_bytes" => {
                rank.memory_bytes = Some(rank.memory_bytes.unwrap_or(0.0) + value.unwrap_or(0.0));
                rank.gpu = rank.gpu.or(number(sample, "gpu"));
            }
            "torchtop_step_time_seconds" => rank.step_time_seconds = value,
            _ => {}
        }
    }
    by_job
        .into_iter()
        .map(|(id, ranks)| {
            let mut ranks: Vec<Rank> = ranks.into_values().collect();
            for rank in &mut ranks {
                rank.headroom_bytes = headroom(nodes, &rank.hostname, rank.gpu);
            }
            ranks.sort_by_key(|r| (r.rank.unwrap_or(u32::MAX), r.hostname.clone(), r.pid));
            let mut nodes_of_job: Vec<&str> = ranks.iter().map(|r| r.hostname.as_str()).collect();
            nodes_of_job.sort_unstable();
            nodes_of_job.dedup();
            let mut job = Job {
                id,
                nodes: nodes_of_job.len(),
                median_step_time_seconds: None,
                ranks,
            };
            mark_stragglers(&mut job, straggler_percent);
            job
        })
        .collect()
}

fn headroom(nodes: &[Node], hostname: &str, gpu: Option<u32>) -> Option<f64> {
    let gpu = gpu?;
    let node = nodes.iter().find(|n| n.hostname == hostname)?;
    node.gpus.iter().find(|g| g.gpu == gpu)?.memory_free_bytes
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len() % 2 == 0 {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    })
}

fn mark_stragglers(job: &mut Job, straggler_percent: f64) {
    let mut times: Vec<f64> = job
        .ranks
        .iter()
        .filter_map(|r| r.step_time_seconds)
        .collect();
    job.median_step_time_seconds = median(&mut times);
    let Some(median) = job.median_step_time_seconds.filter(|m| *m > 0.0) else {
        return;
    };
    // One rank alone has nothing to lag behind.
    if times.len() < 2 {
        return;
    }
    for rank in &mut job.ranks {
        let Some(time) = rank.step_time_seconds else {
            continue;
        };
        let above = (time / median - 1.0) * 100.0;
        rank.above_median_percent = Some(above);
        rank.straggler = above > straggler_percent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Sample {
        let mut map: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        map.insert("__name__".into(), name.into());
        Sample { labels: map, value }
    }

    fn gpu_samples(
        host: &str,
        gpu: &str,
        util: f64,
        used_mib: f64,
        free_mib: f64,
        temp: f64,
    ) -> Vec<Sample> {
        let l = [("Hostname", host), ("gpu", gpu), ("modelName", "H100")];
        vec![
            sample("DCGM_FI_DEV_GPU_UTIL", &l, util),
            sample("DCGM_FI_DEV_FB_USED", &l, used_mib),
            sample("DCGM_FI_DEV_FB_FREE", &l, free_mib),
            sample("DCGM_FI_DEV_GPU_TEMP", &l, temp),
        ]
    }

    #[test]
    fn nodes_summarize_their_gpus() {
        let mut gpus = gpu_samples("a", "0", 90.0, 1000.0, 3000.0, 60.0);
        gpus.extend(gpu_samples("a", "1", 30.0, 2000.0, 2000.0, 70.0));
        gpus.extend(gpu_samples("b", "0", 50.0, 0.0, 4000.0, 40.0));
        let warnings = vec![ClusterWarning {
            hostname: "a".into(),
            ..Default::default()
        }];
        let nodes = nodes(&gpus, &warnings, &[]);
        assert_eq!(nodes.len(), 2);
        let a = &nodes[0];
        assert_eq!(a.gpus.len(), 2);
        assert_eq!(a.utilization_mean, Some(60.0));
        assert_eq!(a.utilization_min, Some(30.0));
        assert_eq!(a.memory_used_bytes, Some(3000.0 * MIB));
        assert_eq!(a.memory_total_bytes, Some(8000.0 * MIB));
        assert_eq!(a.temperature_max, Some(70.0));
        assert_eq!(a.warnings, 1);
        assert_eq!(nodes[1].warnings, 0);
    }

    #[test]
    fn the_rank_far_above_the_median_is_the_straggler() {
        let rank = |host: &str, pid: &str, r: &str, gpu: &str, step: f64| {
            let l = [
                ("Hostname", host),
                ("pid", pid),
                ("rank", r),
                ("gpu", gpu),
                (JOB_LABEL, "job 10.0.0.1:29500"),
            ];
            vec![
                sample("torchtop_process_gpu_memory_bytes", &l, 1e9),
                sample(
                    "torchtop_step_time_seconds",
                    &l[..3].iter().chain(&l[4..]).copied().collect::<Vec<_>>(),
                    step,
                ),
            ]
        };
        let mut samples = rank("a", "10", "0", "0", 0.40);
        samples.extend(rank("a", "11", "1", "1", 0.41));
        samples.extend(rank("b", "10", "2", "0", 0.39));
        samples.extend(rank("b", "12", "3", "1", 0.90));
        let gpus = gpu_samples("b", "1", 50.0, 1000.0, 500.0, 50.0);
        let nodes = nodes(&gpus, &[], &[]);
        let jobs = jobs(&samples, &nodes, 20.0);
        assert_eq!(jobs.len(), 1);
        let job = &jobs[0];
        assert_eq!(job.nodes, 2);
        assert_eq!(job.ranks.len(), 4);
        let stragglers: Vec<Option<u32>> = job
            .ranks
            .iter()
            .filter(|r| r.straggler)
            .map(|r| r.rank)
            .collect();
        assert_eq!(stragglers, [Some(3)]);
        assert!((job.median_step_time_seconds.unwrap() - 0.405).abs() < 1e-9);
        assert_eq!(job.ranks[3].headroom_bytes, Some(500.0 * MIB));
        assert_eq!(
            job.ranks[0].headroom_bytes, None,
            "node a's GPUs are unknown"
        );
    }

    #[test]
    fn hostile_labels_cannot_reach_the_terminal() {
        assert_eq!(printable("job\x1b[2J\n1"), "job\\e[2J\\n1");
        let gpus = gpu_samples("evil\x1b]0;x\x07", "0", 1.0, 1.0, 1.0, 1.0);
        assert!(!nodes(&gpus, &[], &[])[0].hostname.contains('\x1b'));
    }
}
