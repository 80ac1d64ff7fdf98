//! `imbalance`: the ranks of one distributed job differ in GPU memory or utilization.
//!
//! For each job from [`group_jobs_into`](super::jobs::group_jobs_into), each rank's GPU memory
//! (NVML's figure for the process) and utilization (the process's SM figure, else its GPU's)
//! are averaged over a full window. The job is imbalanced when the memory spread reaches both the
//! share of the largest rank and the absolute minimum, or the utilization spread reaches its
//! threshold. Ranks without a full window are left out; at least two must remain. Jobs of
//! servers (sharded inference launchers set RANK too) are left alone: the remedy is about
//! training data and batches. Where the agents of the two ranks at the memory spread's ends
//! report, the message says whether the spread is in PyTorch's allocator (their reserved memory
//! differs by at least half of it) or outside it, where batches and samplers are not the cause.

use serde::{Deserialize, Serialize};

use crate::config::{Fraction, NonNegative, Percent, Seconds};
use crate::model::{Severity, Subject, Warning};

use super::{
    fmt_bytes, fmt_opt, fmt_percent, fmt_seconds, mean, torch_device_on, warning, Inputs, Point,
    ProcPoint, BYTES_PER_MIB,
};
use crate::model::{Job, JobRank};

/// `imbalance`: the ranks of one job differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ImbalanceConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The span over which the ranks are compared. Default 30.
    pub(crate) window_seconds: Seconds,
    /// Memory spread as a share of the largest rank's memory. Default 0.2.
    pub(crate) memory_spread_fraction: Fraction,
    /// The least memory spread that counts, in MiB. Default 1024.
    pub(crate) min_memory_spread_mib: NonNegative,
    /// Utilization spread in percentage points. Default 30.
    pub(crate) utilization_spread_percent: Percent,
}

impl Default for ImbalanceConfig {
    fn default() -> Self {
        ImbalanceConfig {
            enabled: true,
            window_seconds: Seconds::new(30.0),
            memory_spread_fraction: Fraction::new(0.2),
            min_memory_spread_mib: NonNegative::new(1024.0),
            utilization_spread_percent: Percent::new(30.0),
        }
    }
}

pub(crate) const ID: &str = "imbalance";

const REMEDY: &str = "Give every rank the same per-rank batch (a DistributedSampler over the \
dataset) and initialize DDP/FSDP the same way on every rank; move work done only on rank 0 \
(logging, evaluation, checkpoint saving, torch.load without map_location, which loads onto \
GPU 0) off the training path; for a model that does not fit evenly, consider FSDP.";

/// For a memory spread outside PyTorch's allocator: what holds GPU memory beside it.
const OUTSIDE_REMEDY: &str = "The difference is memory PyTorch's caching allocator does not \
hold, so batches and samplers are not its cause: look on the heavier rank for NCCL's buffers \
(more communicators or process groups there, NCCL_BUFFSIZE), a library that allocates on its own \
(CuPy, JAX, TensorRT, a custom CUDA extension), or a larger CUDA context (more kernels loaded); \
torch.cuda.memory_reserved() against nvidia-smi on each rank shows how much, and a run without \
the suspect shows which.";

/// One rank's means over the window.
#[derive(Debug, Clone, PartialEq)]
struct RankLoad<'a> {
    rank: &'a JobRank,
    memory: Option<f64>,
    utilization: Option<f64>,
}

pub(crate) fn check(inputs: &Inputs, config: &ImbalanceConfig) -> Vec<Warning> {
    inputs
        .snapshot
        .jobs
        .iter()
        .filter(|job| !serving(inputs, job))
        .filter_map(|job| {
            let loads = || {
                job.ranks.iter().filter_map(|rank| {
                    let tracked = inputs.processes.get(&(rank.pid, rank.gpu))?;
                    let points = tracked.window.covering(config.window_seconds.get())?;
                    Some(rank_load(rank, points))
                })
            };
            // Judged before anything is worded: a job in balance costs no allocation.
            if !out_of_balance(loads(), config) {
                return None;
            }
            let loads: Vec<RankLoad> = loads().collect();
            imbalanced(inputs, job, &loads, config)
        })
        .collect()
}

/// Whether [`imbalanced`] finds anything, on the same figures, without a list of them.
fn out_of_balance<'a>(loads: impl Iterator<Item = RankLoad<'a>>, config: &ImbalanceConfig) -> bool {
    // One pass over the ranks (each load is a few means over the window): a thousand ranks
    // are read once, not once for each figure.
    let (mut memory, mut utilization) = (Span::default(), Span::default());
    for load in loads {
        memory.add(load.memory);
        utilization.add(load.utilization);
    }
    let span = |span: Span| (span.count >= 2).then_some((span.low, span.high));
    let memory = span(memory).is_some_and(|(low, high)| {
        let spread = high - low;
        spread >= config.memory_spread_fraction.get() * high
            && spread >= config.min_memory_spread_mib.get() * BYTES_PER_MIB
            && spread > 0.0
    });
    let utilization = span(utilization).is_some_and(|(low, high)| {
        let spread = high - low;
        spread >= config.utilization_spread_percent.get() && spread > 0.0
    });
    memory || utilization
}

/// The lowest and highest of the known values.
#[derive(Debug, Clone, Copy)]
struct Span {
    count: usize,
    low: f64,
    high: f64,
}

impl Default for Span {
    fn default() -> Self {
        Span {
            count: 0,
            low: f64::INFINITY,
            high: f64::NEG_INFINITY,
        }
    }
}

impl Span {
    fn add(&mut self, value: Option<f64>) {
        if let Some(v) = value {
            self.count += 1;
            self.low = self.low.min(v);
            self.high = self.high.max(v);
        }
    }
}

/// Whether any rank of the job is a known server or notebook.
fn serving(inputs: &Inputs, job: &Job) -> bool {
    (job.ranks.iter())
        .any(|rank| (inputs.rows_of(rank.pid)).any(super::training::looks_like_serving))
}

fn rank_load<'a>(rank: &'a JobRank, points: &[Point<ProcPoint>]) -> RankLoad<'a> {
    let own = mean(points.iter().filter_map(|p| p.v.sm_percent.map(f64::from)));
    let whole = || {
        mean(
            points
                .iter()
                .filter_map(|p| p.v.gpu_utilization_percent.map(f64::from)),
        )
    };
    RankLoad {
        rank,
        memory: mean(
            points
                .iter()
                .filter_map(|p| p.v.gpu_memory_bytes.map(|b| b as f64)),
        ),
        utilization: own.or_else(whole),
    }
}

/// A rank with one of its means.
type Ranked<'a> = (&'a RankLoad<'a>, f64);

/// The smallest and largest known value with their ranks.
fn extremes<'a>(
    loads: &'a [RankLoad<'a>],
    value: impl Fn(&RankLoad) -> Option<f64>,
) -> Option<(Ranked<'a>, Ranked<'a>)> {
    let known: Vec<Ranked> = loads
        .iter()
        .filter_map(|l| value(l).map(|v| (l, v)))
        .collect();
    if known.len() < 2 {
        return None;
    }
    let low = *known.iter().min_by(|a, b| a.1.total_cmp(&b.1))?;
    let high = *known.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some((low, high))
}

fn rank_name(rank: &JobRank) -> String {
    match rank.rank {
        Some(r) => format!("rank {r}"),
        None => format!("pid {}", rank.pid),
    }
}

/// A rank's reserved memory on its GPU as its agent last said; `None` without one.
fn reserved_of(inputs: &Inputs, rank: &JobRank) -> Option<f64> {
    let row = inputs.rows_of(rank.pid).find(|p| p.gpu == rank.gpu)?;
    let device = torch_device_on(row, &inputs.snapshot.gpus)?;
    device.reserved_bytes.map(|b| b as f64)
}

/// Where a memory spread of `spread` between the ranks `low` and `high` lies, when both their
/// agents report: whether outside PyTorch's allocator (its reserved memory differs by less than
/// half of it), and the words that say so.
fn where_spread_lies(
    inputs: &Inputs,
    low: &JobRank,
    high: &JobRank,
    spread: f64,
) -> Option<(bool, String)> {
    let (low_reserved, high_reserved) = (reserved_of(inputs, low)?, reserved_of(inputs, high)?);
    let outside = high_reserved - low_reserved < spread / 2.0;
    let place = if outside { "outside" } else { "in" };
    let words = format!(
        ", {place} PyTorch's allocator, which reserves {} on {} and {} on {}",
        fmt_bytes(high_reserved),
        rank_name(high),
        fmt_bytes(low_reserved),
        rank_name(low),
    );
    Some((outside, words))
}

fn imbalanced(
    inputs: &Inputs,
    job: &Job,
    loads: &[RankLoad],
    config: &ImbalanceConfig,
) -> Option<Warning> {
    let mut findings = Vec::new();
    let mut spreads = Vec::new();
    let mut remedy = REMEDY;
    if let Some(((low, low_v), (high, high_v))) = extremes(loads, |l| l.memory) {
        let spread = high_v - low_v;
        spreads.push(("memory spread", fmt_bytes(spread)));
        let wide = spread >= config.memory_spread_fraction.get() * high_v
            && spread >= config.min_memory_spread_mib.get() * BYTES_PER_MIB;
        if wide && spread > 0.0 {
            let lies = where_spread_lies(inputs, low.rank, high.rank, spread);
            if lies.as_ref().is_some_and(|(outside, _)| *outside) {
                remedy = OUTSIDE_REMEDY;
            }
            findings.push(format!(
                "{} uses {} of GPU memory against {} on {}{}",
                rank_name(high.rank),
                fmt_bytes(high_v),
                fmt_bytes(low_v),
                rank_name(low.rank),
                lies.map(|(_, words)| words).unwrap_or_default(),
            ));
        }
    }
    if let Some(((low, low_v), (high, high_v))) = extremes(loads, |l| l.utilization) {
        let spread = high_v - low_v;
        spreads.push(("utilization spread", format!("{spread:.0} points")));
        if spread >= config.utilization_spread_percent.get() && spread > 0.0 {
            findings.push(format!(
                "{} runs at {} utilization against {} on {}",
                rank_name(high.rank),
                fmt_percent(high_v),
                fmt_percent(low_v),
                rank_name(low.rank),
            ));
        }
    }
    if findings.is_empty() {
        return None;
    }
    // The subject names the job; the message does not repeat it ("job job X job X").
    let message = format!(
        "{} ranks out of balance over {}: {}",
        loads.len(),
        fmt_seconds(config.window_seconds.get()),
        findings.join("; ")
    );
    let mut evidence: Vec<(&str, String)> = spreads;
    let per_rank: Vec<(String, String)> = loads
        .iter()
        .map(|l| {
            (
                format!(
                    "{} (pid {}, GPU {})",
                    rank_name(l.rank),
                    l.rank.pid,
                    l.rank.gpu
                ),
                format!(
                    "{}, {}",
                    fmt_opt(l.memory.map(fmt_bytes)),
                    fmt_opt(l.utilization.map(fmt_percent)),
                ),
            )
        })
        .collect();
    evidence.push(("ranks", loads.len().to_string()));
    let mut found = warning(
        ID,
        Severity::Warn,
        Subject::Job { id: job.id.clone() },
        message,
        evidence,
        remedy,
    );
    found.evidence.extend(per_rank);
    Some(found)
}

#[cfg(test)]
mod tests {
    use crate::model::{LaunchEnv, Snapshot, Subject};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    /// An 8-rank torchrun job; rank r holds `memory(r)` and runs at `util(r)`.
    fn job(
        memory: impl Fn(u32) -> u64 + Copy,
        util: impl Fn(u32) -> u32 + Copy,
    ) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            for r in 0..8 {
                snap.gpus.push(gpu(r, memory(r) + GIB, 80 * GIB, util(r)));
                let mut p = process(100 + r, r, memory(r));
                p.sm_percent = Some(util(r));
                p.env = Some(
                    LaunchEnv {
                        rank: Some(r),
                        local_rank: Some(r),
                        world_size: Some(8),
                        torchelastic_run_id: Some("run7".into()),
                        master_port: Some("29500".into()),
                        ..Default::default()
                    }
                    .into(),
                );
                snap.processes.push(p);
            }
            snap
        }
    }

    #[test]
    fn one_rank_with_far_more_memory_fires_on_the_job() {
        let heavy_rank0 = |r: u32| if r == 0 { 60 * GIB } else { 30 * GIB };
        let warnings = replay_default(30, job(heavy_rank0, |_| 95));
        let w = find(
            &warnings,
            "imbalance",
            &Subject::Job {
                id: "torchelastic run run7".into(),
            },
        );
        assert!(w.message.contains("rank 0 uses 60.0GiB"), "{}", w.message);
        assert_eq!(evidence(w, "memory spread"), "30.0GiB");
        assert_eq!(evidence(w, "ranks"), "8");
        assert_eq!(evidence(w, "rank 0 (pid 100, GPU 0)"), "60.0GiB, 95%");
        assert!(w.remedy.contains("DistributedSampler"));
    }

    /// Found beside a real job: rank 1's GPU memory was 55 GiB above rank 0's while both
    /// allocators reserved the same, and the remedy spoke of batches and samplers.
    #[test]
    fn a_spread_the_allocators_do_not_share_is_said_to_lie_outside_them() {
        let heavy_rank0 = |r: u32| if r == 0 { 60 * GIB } else { 30 * GIB };
        let with_agents = |reserved: fn(u32) -> u64| {
            move |step: u32| {
                let mut snap = job(heavy_rank0, |_| 95)(step);
                for (r, p) in (0u32..).zip(&mut snap.processes) {
                    let mut on_its_gpu = device(0, reserved(r) / 2, reserved(r));
                    on_its_gpu.gpu = Some(r);
                    p.torch = Some(std::sync::Arc::new(torch_on(vec![on_its_gpu])));
                }
                snap
            }
        };
        let even = replay_default(30, with_agents(|_| 20 * GIB));
        let w = with_id(&even, "imbalance");
        assert_eq!(w.len(), 1, "{even:#?}");
        assert!(
            w[0].message.ends_with(
                "rank 0 uses 60.0GiB of GPU memory against 30.0GiB on rank 1, outside \
                 PyTorch's allocator, which reserves 20.0GiB on rank 0 and 20.0GiB on rank 1"
            ),
            "{}",
            w[0].message
        );
        assert!(w[0].remedy.contains("NCCL"), "{}", w[0].remedy);
        assert!(!w[0].remedy.contains("DistributedSampler"));

        let uneven = replay_default(
            30,
            with_agents(|r| if r == 0 { 48 * GIB } else { 18 * GIB }),
        );
        let w = with_id(&uneven, "imbalance");
        assert_eq!(w.len(), 1, "{uneven:#?}");
        assert!(
            w[0].message.ends_with(
                ", in PyTorch's allocator, which reserves 48.0GiB on rank 0 and 18.0GiB on rank 1"
            ),
            "{}",
            w[0].message
        );
        assert!(w[0].remedy.contains("DistributedSampler"));
    }

    #[test]
    fn one_slow_rank_fires_on_utilization() {
        let warnings = replay_default(30, job(|_| 30 * GIB, |r| if r == 5 { 40 } else { 97 }));
        let w = with_id(&warnings, "imbalance");
        assert_eq!(w.len(), 1, "{warnings:#?}");
        assert!(
            w[0].message.contains("against 40% on rank 5"),
            "{}",
            w[0].message
        );
    }

    #[test]
    fn a_balanced_job_and_a_short_history_stay_silent() {
        let near = |r: u32| 30 * GIB + u64::from(r) * 100 * MIB;
        let balanced = replay_default(60, job(near, |r| 90 + r));
        assert!(with_id(&balanced, "imbalance").is_empty(), "{balanced:#?}");
        let heavy = |r: u32| if r == 0 { 60 * GIB } else { 30 * GIB };
        let short = replay_default(20, job(heavy, |_| 95));
        assert!(with_id(&short, "imbalance").is_empty(), "{short:#?}");
    }

    #[test]
    fn a_tighter_spread_fires_where_the_default_does_not() {
        let uneven = job(|_| 30 * GIB, |r| if r == 3 { 75 } else { 95 });
        assert!(with_id(&replay_default(30, &uneven), "imbalance").is_empty());
        let mut config = RulesConfig::default();
        config.imbalance.utilization_spread_percent = crate::config::Percent::new(15.0);
        assert_eq!(with_id(&replay(config, 30, uneven), "imbalance").len(), 1);
    }

    #[test]
    fn a_sharded_inference_server_is_not_a_training_job_out_of_balance() {
        let serve = |step: u32| {
            let mut snap = job(|r| if r == 5 { 60 * GIB } else { 20 * GIB }, |_| 80)(step);
            for p in &mut snap.processes {
                p.command = Some("text-generation-server serve model --sharded".into());
            }
            snap
        };
        let warnings = replay_default(60, serve);
        assert!(with_id(&warnings, "imbalance").is_empty(), "{warnings:#?}");
    }
}
