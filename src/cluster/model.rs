//! The cluster as the view shows it, built from Prometheus' answers without I/O: nodes with
//! their GPUs (and those whose exporter is down), jobs across nodes with their ranks,
//! straggler and missing ranks; the warnings are [`super::warnings`]'.
//!
//! Everything Prometheus returns is text other people chose (host names, job ids from
//! environments): it goes through [`printable`] before it is kept. Its numbers are as
//! untrusted: a figure outside what a GPU or a training job can have (the local collector's
//! [`limits`], the agent protocol's bounds) is unknown, as NVML's implausible readings are.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use serde::Serialize;

use super::fetch::{NODE_DOWN, RANK_LOST};
use super::promql::{Range, Sample};
use super::warnings::ClusterWarning;
use crate::model::gpu::limits;
use crate::protocol::{MAX_STEP_TIME_S, MAX_WORLD_SIZE};
use crate::serve::torchtop::JOB_LABEL;

const MIB: f64 = 1048576.0;
/// The most bytes of memory one GPU, or one process on it, can have.
const MAX_BYTES: f64 = limits::MEMORY_BYTES as f64;
/// The oldest "last seen" believed: the down query looks back [`super::fetch::DOWN_WINDOW`].
const MAX_AGE_SECONDS: f64 = 86_400.0;

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
    /// Whether the node stopped reporting: Prometheus cannot scrape its exporter now, though
    /// it did a few minutes ago. Such a node has no GPUs and no figures.
    pub(crate) down: bool,
    /// Whether torchtop's exporter on a node that another exporter still reports (dcgm-exporter
    /// beside it) cannot be scraped now: the GPUs' figures are the other exporter's, and the
    /// node's warnings and ranks are not known.
    pub(crate) exporter_down: bool,
    /// For a node that is down, or whose exporter is: how long ago torchtop's exporter last
    /// answered a scrape.
    pub(crate) last_seen_seconds_ago: Option<f64>,
    /// For a node that is down, or whose exporter is: torchtop's exporter's address, as
    /// Prometheus' `instance`.
    pub(crate) instance: Option<String>,
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

/// A rank of a job that no node reports now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub(crate) struct MissingRank {
    pub(crate) rank: Option<u32>,
    /// The node it last ran on, whose exporter is down; `None` for a rank number below the
    /// job's highest that no node reports (its node is gone for longer, or never reported).
    pub(crate) hostname: Option<String>,
    pub(crate) pid: Option<u32>,
}

/// Ranks that share a job label, across nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub(crate) struct Job {
    pub(crate) id: String,
    /// How many nodes report ranks of the job now.
    pub(crate) nodes: usize,
    pub(crate) median_step_time_seconds: Option<f64>,
    pub(crate) ranks: Vec<Rank>,
    /// Ranks that no node reports now, by rank number.
    pub(crate) missing_ranks: Vec<MissingRank>,
    /// The ranks the job was started with, as its processes' `world_size` label says (the
    /// largest any of them says); `None` when no exporter knows it.
    pub(crate) world_size: Option<u32>,
}

/// Everything the view draws.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub(crate) struct ClusterView {
    pub(crate) gpu_count: usize,
    /// How many of `nodes` are down.
    pub(crate) nodes_down: usize,
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

/// `value` if it lies in `plausible`; NaN and infinities never do.
fn within(value: f64, plausible: RangeInclusive<f64>) -> Option<f64> {
    plausible.contains(&value).then_some(value)
}

/// A rank label, unknown when no job could have it.
fn rank_label(sample: &Sample) -> Option<u32> {
    number(sample, "rank").filter(|&r: &u32| r < MAX_WORLD_SIZE)
}

/// Nodes from the GPU panel's answer, with sparklines joined in, and the nodes that are down
/// in their place among them (by host name); a node another exporter still reports, whose
/// torchtop exporter is down, is marked so. Their warnings are counted once the warnings are
/// known ([`super::warnings::count`]): a node that is down, or whose exporter is, raises one.
pub(crate) fn nodes(gpus: &[Sample], history: &[Range]) -> Vec<Node> {
    let mut nodes: BTreeMap<String, Node> = reporting_nodes(gpus, history)
        .into_iter()
        .map(|node| (node.hostname.clone(), node))
        .collect();
    for down in down_nodes(gpus) {
        match nodes.get_mut(&down.hostname) {
            // A host another exporter still reports (dcgm-exporter beside a dead `torchtop
            // serve`) is not down. Unless another torchtop exporter of it is up (one restarted
            // on a new port: its GPUs have a torchtop state), nothing watches it: its warnings
            // and ranks went with the exporter.
            Some(reporting) => {
                if reporting.gpus.iter().all(|gpu| gpu.state.is_none()) {
                    reporting.exporter_down = true;
                    reporting.last_seen_seconds_ago = down.last_seen_seconds_ago;
                    reporting.instance = down.instance;
                }
            }
            None => {
                nodes.insert(down.hostname.clone(), down);
            }
        }
    }
    nodes.into_values().collect()
}

/// The nodes Prometheus marked down in the nodes query, one per host (the most recently seen
/// exporter where a host had two).
fn down_nodes(samples: &[Sample]) -> Vec<Node> {
    let mut by_host: BTreeMap<String, Node> = BTreeMap::new();
    for sample in samples.iter().filter(|s| s.name() == NODE_DOWN) {
        let Some(host) = label(sample, "Hostname") else {
            continue;
        };
        let ago = within(sample.value, 0.0..=MAX_AGE_SECONDS);
        let node = by_host.entry(host.clone()).or_insert_with(|| Node {
            hostname: host,
            down: true,
            ..Default::default()
        });
        let newer = match (ago, node.last_seen_seconds_ago) {
            (Some(ago), Some(kept)) => ago < kept,
            (Some(_), None) => true,
            (None, _) => node.instance.is_none(),
        };
        if newer {
            node.last_seen_seconds_ago = ago;
            node.instance = label(sample, "instance");
        }
    }
    by_host.into_values().collect()
}

fn reporting_nodes(gpus: &[Sample], history: &[Range]) -> Vec<Node> {
    let mut by_host: BTreeMap<String, BTreeMap<u32, NodeGpu>> = BTreeMap::new();
    for sample in gpus.iter().filter(|s| s.name() != NODE_DOWN) {
        let (Some(host), Some(index)) = (label(sample, "Hostname"), number::<u32>(sample, "gpu"))
        else {
            continue;
        };
        let gpu = by_host.entry(host).or_default().entry(index).or_default();
        gpu.gpu = index;
        gpu.model = gpu.model.take().or_else(|| label(sample, "modelName"));
        gpu.uuid = gpu.uuid.take().or_else(|| label(sample, "UUID"));
        let value = sample.value;
        let mib = || within(value * MIB, 0.0..=MAX_BYTES);
        match sample.name() {
            "DCGM_FI_DEV_GPU_UTIL" => gpu.utilization_percent = within(value, 0.0..=100.0),
            "DCGM_FI_DEV_FB_USED" => gpu.memory_used_bytes = mib(),
            "DCGM_FI_DEV_FB_FREE" => gpu.memory_free_bytes = mib(),
            "DCGM_FI_DEV_GPU_TEMP" => {
                gpu.temperature_c = within(value, 0.0..=f64::from(limits::TEMPERATURE_C));
            }
            "DCGM_FI_DEV_POWER_USAGE" => gpu.power_w = within(value, 0.0..=limits::POWER_W),
            "torchtop_gpu_state" if sample.value == 1.0 => gpu.state = label(sample, "state"),
            _ => {}
        }
    }
    by_host
        .into_iter()
        .map(|(hostname, gpus)| {
            let gpus: Vec<NodeGpu> = gpus.into_values().collect();
            let mut node = summarize(hostname, gpus);
            node.utilization_history = history
                .iter()
                .find(|r| {
                    r.labels.get("Hostname").map(|h| printable(h)) == Some(node.hostname.clone())
                })
                .map(|r| {
                    r.points
                        .iter()
                        .filter_map(|p| within(p.1, 0.0..=100.0))
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

/// Jobs from the jobs panel's answer, with each rank's headroom from the nodes' GPUs and the
/// stragglers marked: ranks whose step time is more than `straggler_percent` above the median.
pub(crate) fn jobs(samples: &[Sample], nodes: &[Node], straggler_percent: f64) -> Vec<Job> {
    let mut lost = lost_ranks(samples);
    let world_sizes = world_sizes(samples);
    let mut jobs: Vec<Job> = reporting_ranks(samples)
        .into_iter()
        .map(|(id, ranks)| job(id, ranks, nodes, straggler_percent))
        .collect();
    for job in &mut jobs {
        let lost_here = lost.remove(&job.id).unwrap_or_default();
        job.world_size = world_sizes.get(&job.id).copied();
        job.missing_ranks = missing_ranks(&job.ranks, lost_here, job.world_size);
    }
    // A job whose every rank was on nodes that are down now.
    for (id, lost_here) in lost {
        let world_size = world_sizes.get(&id).copied();
        jobs.push(Job {
            missing_ranks: missing_ranks(&[], lost_here, world_size),
            world_size,
            ..job(id, BTreeMap::new(), nodes, straggler_percent)
        });
    }
    jobs.sort_by(|a, b| a.id.cmp(&b.id));
    jobs
}

/// The ranks the jobs query marked lost (last seen on a node that is down), by job.
fn lost_ranks(samples: &[Sample]) -> BTreeMap<String, Vec<MissingRank>> {
    let mut by_job: BTreeMap<String, Vec<MissingRank>> = BTreeMap::new();
    for sample in samples.iter().filter(|s| s.name() == RANK_LOST) {
        let Some(job) = label(sample, JOB_LABEL) else {
            continue;
        };
        by_job.entry(job).or_default().push(MissingRank {
            rank: rank_label(sample),
            hostname: label(sample, "Hostname"),
            pid: number(sample, "pid"),
        });
    }
    by_job
}

/// The largest `world_size` label of each job's samples, reporting or lost, of those a job
/// can have.
fn world_sizes(samples: &[Sample]) -> BTreeMap<String, u32> {
    let mut by_job: BTreeMap<String, u32> = BTreeMap::new();
    for sample in samples {
        let size =
            number(sample, "world_size").filter(|&w: &u32| (1..=MAX_WORLD_SIZE).contains(&w));
        if let (Some(job), Some(size)) = (label(sample, JOB_LABEL), size) {
            let known = by_job.entry(job).or_default();
            *known = (*known).max(size);
        }
    }
    by_job
}

/// Highest rank number for which the numbers below it are checked for gaps: ranks count from
/// 0 in steps of 1, and a label far above any real world size is not one to fill in.
const MAX_RANK_FOR_GAPS: u32 = 65_536;

/// The ranks of a job that no node reports: the lost ones (unless the same process reports
/// again), then every number below the job's world size, or below the highest known rank when
/// the world size is not known, that neither reports nor is lost.
fn missing_ranks(
    ranks: &[Rank],
    lost: Vec<MissingRank>,
    world_size: Option<u32>,
) -> Vec<MissingRank> {
    let reporting: std::collections::BTreeSet<u32> = ranks.iter().filter_map(|r| r.rank).collect();
    let mut missing: Vec<MissingRank> = lost
        .into_iter()
        .filter(|m| {
            !ranks
                .iter()
                .any(|r| Some(&r.hostname) == m.hostname.as_ref() && Some(r.pid) == m.pid)
        })
        .filter(|m| m.rank.is_none_or(|n| !reporting.contains(&n)))
        .collect();
    let known: std::collections::BTreeSet<u32> = reporting
        .iter()
        .copied()
        .chain(missing.iter().filter_map(|m| m.rank))
        .collect();
    let highest = known.last().copied().unwrap_or(0);
    let world_size = world_size.filter(|&w| w < MAX_RANK_FOR_GAPS);
    let end = world_size.unwrap_or(0).max(highest);
    if end < MAX_RANK_FOR_GAPS {
        missing.extend(
            (0..end)
                .filter(|n| !known.contains(n))
                .map(|n| MissingRank {
                    rank: Some(n),
                    ..Default::default()
                }),
        );
    }
    missing.sort_by(|a, b| {
        (a.rank.unwrap_or(u32::MAX), &a.hostname, a.pid).cmp(&(
            b.rank.unwrap_or(u32::MAX),
            &b.hostname,
            b.pid,
        ))
    });
    missing.dedup();
    missing
}

fn job(
    id: String,
    ranks: BTreeMap<(String, u32), Rank>,
    nodes: &[Node],
    straggler_percent: f64,
) -> Job {
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
        ranks,
        ..Default::default()
    };
    mark_stragglers(&mut job, straggler_percent);
    job
}

/// The ranks the jobs query reports now, by job and then by (host, pid).
fn reporting_ranks(samples: &[Sample]) -> BTreeMap<String, BTreeMap<(String, u32), Rank>> {
    let mut by_job: BTreeMap<String, BTreeMap<(String, u32), Rank>> = BTreeMap::new();
    for sample in samples.iter().filter(|s| s.name() != RANK_LOST) {
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
        rank.rank = rank.rank.or(rank_label(sample));
        match sample.name() {
            "torchtop_process_gpu_memory_bytes" => {
                let bytes = within(sample.value, 0.0..=MAX_BYTES);
                rank.memory_bytes = [rank.memory_bytes, bytes]
                    .into_iter()
                    .flatten()
                    .reduce(|a, b| a + b);
                rank.gpu = rank.gpu.or(number(sample, "gpu"));
            }
            "torchtop_step_time_seconds" => {
                rank.step_time_seconds = within(sample.value, 0.0..=MAX_STEP_TIME_S);
            }
            _ => {}
        }
    }
    by_job
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
        // A median of a few subnormal seconds makes any other time infinitely far above it.
        let above = Some((time / median - 1.0) * 100.0).filter(|a| a.is_finite());
        rank.above_median_percent = above;
        rank.straggler = above.is_some_and(|a| a > straggler_percent);
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
        let mut nodes = nodes(&gpus, &[]);
        super::super::warnings::count(&mut nodes, &warnings);
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
        let nodes = nodes(&gpus, &[]);
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

    fn down(host: &str, instance: &str, ago: f64) -> Sample {
        sample(
            NODE_DOWN,
            &[
                ("Hostname", host),
                ("instance", instance),
                ("job", "torchtop"),
            ],
            ago,
        )
    }

    #[test]
    fn a_node_whose_exporter_is_down_is_listed_down_in_its_place() {
        let mut answer = gpu_samples("a", "0", 90.0, 1000.0, 3000.0, 60.0);
        let a_state = [("Hostname", "a"), ("gpu", "0"), ("state", "ok")];
        answer.push(sample("torchtop_gpu_state", &a_state, 1.0));
        answer.extend(gpu_samples("c", "0", 90.0, 1000.0, 3000.0, 60.0));
        answer.push(down("b", "10.0.0.2:9400", 42.5));
        // Another torchtop exporter of host "a" died, but "a" still reports through the first.
        answer.push(down("a", "10.0.0.1:9401", 10.0));
        // Host "c"'s torchtop died; dcgm-exporter still reports its GPUs.
        answer.push(down("c", "10.0.0.3:9400", 7.0));
        let nodes = nodes(&answer, &[]);
        let hosts: Vec<(&str, bool, bool)> = nodes
            .iter()
            .map(|n| (n.hostname.as_str(), n.down, n.exporter_down))
            .collect();
        assert_eq!(
            hosts,
            [("a", false, false), ("b", true, false), ("c", false, true)]
        );
        let b = &nodes[1];
        assert_eq!(b.last_seen_seconds_ago, Some(42.5));
        assert_eq!(b.instance.as_deref(), Some("10.0.0.2:9400"));
        assert!(b.gpus.is_empty(), "a node that is down has no figures");
        assert_eq!(
            (nodes[0].last_seen_seconds_ago, &nodes[0].instance),
            (None, &None)
        );
        let c = &nodes[2];
        assert_eq!(c.last_seen_seconds_ago, Some(7.0));
        assert_eq!(c.instance.as_deref(), Some("10.0.0.3:9400"));
        assert_eq!(c.gpus.len(), 1, "dcgm-exporter's figures stay");
    }

    fn rank_samples(host: &str, pid: &str, rank: &str) -> Vec<Sample> {
        let l = [
            ("Hostname", host),
            ("pid", pid),
            ("rank", rank),
            ("gpu", "0"),
            (JOB_LABEL, "j"),
        ];
        vec![sample("torchtop_process_gpu_memory_bytes", &l, 1e9)]
    }

    fn lost(job: &str, host: &str, pid: &str, rank: &str) -> Sample {
        let l = [
            ("Hostname", host),
            ("pid", pid),
            ("rank", rank),
            (JOB_LABEL, job),
        ];
        sample(RANK_LOST, &l, 1.0)
    }

    #[test]
    fn a_job_that_lost_a_node_lists_the_ranks_no_node_reports() {
        let mut answer = rank_samples("a", "10", "0");
        answer.extend(rank_samples("a", "11", "1"));
        answer.extend(rank_samples("c", "30", "5"));
        answer.push(lost("j", "b", "20", "2"));
        answer.push(lost("j", "b", "21", "3"));
        // A job whose only node is down is still listed, with nothing reporting.
        answer.push(lost("k", "d", "40", "0"));
        let jobs = jobs(&answer, &[], 20.0);
        assert_eq!(jobs.len(), 2);
        let j = &jobs[0];
        assert_eq!((j.id.as_str(), j.ranks.len(), j.nodes), ("j", 3, 2));
        let missing: Vec<(Option<u32>, Option<&str>)> = j
            .missing_ranks
            .iter()
            .map(|m| (m.rank, m.hostname.as_deref()))
            .collect();
        assert_eq!(
            missing,
            [(Some(2), Some("b")), (Some(3), Some("b")), (Some(4), None)],
            "ranks 2 and 3 were on b, which is down; no node reports rank 4"
        );
        assert_eq!(j.ranks.len(), 3, "lost ranks are not reporting ranks");
        let k = &jobs[1];
        assert_eq!((k.id.as_str(), k.ranks.len(), k.nodes), ("k", 0, 0));
        assert_eq!(k.missing_ranks.len(), 1);
    }

    /// Ranks 0 and 1 of a job of 4 report, on a node that still answers; ranks 2 and 3 ran on
    /// a node gone for longer than Prometheus' window, so only the world size tells of them.
    #[test]
    fn the_world_size_counts_ranks_above_the_highest_that_reports() {
        let with_world = |pid: &str, rank: &str| {
            let l = [
                ("Hostname", "a"),
                ("pid", pid),
                ("rank", rank),
                ("world_size", "4"),
                ("gpu", "0"),
                (JOB_LABEL, "j"),
            ];
            sample("torchtop_process_gpu_memory_bytes", &l, 1e9)
        };
        let answer = vec![with_world("10", "0"), with_world("11", "1")];
        let jobs = jobs(&answer, &[], 20.0);
        assert_eq!(jobs[0].world_size, Some(4));
        let missing: Vec<_> = jobs[0].missing_ranks.iter().map(|m| m.rank).collect();
        assert_eq!(missing, [Some(2), Some(3)]);
        // Without the label, nothing above rank 1 can be known.
        let jobs = super::jobs(&rank_samples("a", "10", "1"), &[], 20.0);
        assert_eq!(jobs[0].world_size, None);
        assert_eq!(jobs[0].missing_ranks.len(), 1, "rank 0 only");
    }

    #[test]
    fn a_rank_label_far_above_any_world_size_fills_no_gaps() {
        let mut answer = rank_samples("a", "10", "0");
        answer.extend(rank_samples("a", "11", "4000000000"));
        let jobs = jobs(&answer, &[], 20.0);
        assert!(jobs[0].missing_ranks.is_empty(), "{:?}", jobs[0]);
        // Nor does a world size far above any real one.
        let mut huge = rank_samples("a", "10", "1");
        huge[0]
            .labels
            .insert("world_size".into(), "4000000000".into());
        let jobs = super::jobs(&huge, &[], 20.0);
        let missing: Vec<_> = jobs[0].missing_ranks.iter().map(|m| m.rank).collect();
        assert_eq!(missing, [Some(0)], "the gap below rank 1 only");
    }

    #[test]
    fn no_rank_is_infinitely_far_above_a_median_of_subnormal_seconds() {
        let mut answer = Vec::new();
        for (pid, step) in [("10", 1e-320), ("11", 1e-320), ("12", 0.4)] {
            let l = [("Hostname", "a"), ("pid", pid), (JOB_LABEL, "j")];
            answer.push(sample("torchtop_step_time_seconds", &l, step));
        }
        let jobs = jobs(&answer, &[], 20.0);
        let slow = &jobs[0].ranks[2];
        assert_eq!(slow.step_time_seconds, Some(0.4));
        assert_eq!((slow.above_median_percent, slow.straggler), (None, false));
    }

    #[test]
    fn hostile_labels_cannot_reach_the_terminal() {
        assert_eq!(printable("job\x1b[2J\n1"), "job\\e[2J\\n1");
        let gpus = gpu_samples("evil\x1b]0;x\x07", "0", 1.0, 1.0, 1.0, 1.0);
        assert!(!nodes(&gpus, &[])[0].hostname.contains('\x1b'));
    }
}
