//! `rank-gone`: a rank of a distributed job has left (exited, or gone from /proc and the GPUs)
//! while the job's other ranks on this host still run and have stopped stepping. Those ranks
//! wait for it in their next collective until the process group's timeout (NCCL's default is
//! 10 minutes), each holding its GPU: the classic hang after one rank dies, named minutes
//! before `training-stalled`'s own bar and with its cause.
//!
//! The engine remembers each job the snapshot groups (two ranks or more) with its ranks, by
//! (pid, start time). A rank is gone once no visible row of that process remains. The rule
//! fires once it has been gone `seconds` and no rank left has stepped for as long; it judges
//! only ranks left that report steps through an agent: without steps, a rank still
//! running after another ended is as likely finishing its own work (rank 0 saving a
//! checkpoint) as waiting. A job is forgotten once none of its ranks runs; a gone rank once
//! another process holds its rank number (a launcher restarted the group).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{fmt_seconds, warning, Inputs};
use crate::config::Seconds;
use crate::model::{GoneRank, GpuProcess, Job, JobRank, Severity, Snapshot, Subject, Warning};

/// `rank-gone`: a rank left while the job's other ranks wait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RankGoneConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Warn once a rank has been gone this long while no rank left has stepped. Default 30.
    pub(crate) seconds: Seconds,
}

impl Default for RankGoneConfig {
    fn default() -> Self {
        RankGoneConfig {
            enabled: true,
            seconds: Seconds::new(30.0),
        }
    }
}

pub(crate) const ID: &str = "rank-gone";

/// Jobs remembered at most; past it, new jobs are not (a host runs a handful).
const MAX_JOBS: usize = 256;
/// Ranks remembered per job at most (a host holds at most a few dozen of a job's ranks).
const MAX_RANKS: usize = 1024;
/// Ranks that left a job listed in the snapshot at most, those gone longest.
const MAX_GONE_LISTED: usize = 16;

const REMEDY: &str = "Find why the rank ended: its own output or log, dmesg for the kernel's \
OOM killer, and torchtop's oom and oom-killed warnings. The ranks left do not recover: end them \
(tag each with Space, then T) and restart from the last checkpoint. torchrun ends and restarts \
the whole group when a worker fails (--max-restarts); a launcher that starts each rank on its \
own (srun, a shell loop) leaves the others waiting.";

/// One rank of a remembered job.
#[derive(Debug, Clone, PartialEq)]
struct Rank {
    pid: u32,
    start_ticks: Option<u64>,
    rank: Option<u32>,
    gpu: u32,
    /// The sample time it was first missed; `None` while it runs.
    gone_at: Option<f64>,
}

/// The jobs seen, by id, with their ranks.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Memory {
    jobs: BTreeMap<String, Vec<Rank>>,
    /// (pid, start time) of the processes running without a GPU row this tick.
    without_gpu: Vec<(u32, Option<u64>)>,
    /// This tick's rows as (pid, start time, visible), ordered by pid: the ranks are looked up
    /// by binary search, so a thousand remembered ranks cost no scan of every row each.
    rows: Vec<(u32, Option<u64>, bool)>,
}

impl Memory {
    /// Notes the processes that run with no row in the snapshot the rules see (see
    /// [`crate::rules::Engine::note_rows_without_gpu`]); a rank among them has not left.
    pub(crate) fn note_without_gpu(&mut self, rows: &[GpuProcess]) {
        self.without_gpu.clear();
        (self.without_gpu).extend(rows.iter().map(|p| (p.pid, p.start_ticks)));
    }

    /// Records this snapshot's jobs and which remembered ranks still run.
    pub(crate) fn record(&mut self, snapshot: &Snapshot) {
        // No job seen now or before: nothing to look up, and no index to build (a machine of a
        // thousand unrelated GPU processes sorted them every tick for nothing).
        if snapshot.jobs.is_empty() && self.jobs.is_empty() {
            return;
        }
        let t = snapshot.unix_seconds;
        self.rows.clear();
        (self.rows).extend(
            snapshot
                .processes
                .iter()
                .map(|p| (p.pid, p.start_ticks, p.visible)),
        );
        (self.rows).extend(
            self.without_gpu
                .iter()
                .map(|&(pid, start)| (pid, start, true)),
        );
        self.rows.sort_unstable();
        let rows = &self.rows;
        for job in &snapshot.jobs {
            if !self.jobs.contains_key(&job.id) {
                if self.jobs.len() >= MAX_JOBS {
                    continue;
                }
                // The id is copied once, when the job is first seen, not at every tick.
                self.jobs.insert(job.id.clone(), Vec::new());
            }
            let Some(ranks) = self.jobs.get_mut(&job.id) else {
                continue;
            };
            for seen in &job.ranks {
                let start_ticks = rows_of(rows, seen.pid).find_map(|&(_, start, _)| start);
                let known = |r: &Rank| r.pid == seen.pid && r.start_ticks == start_ticks;
                if ranks.iter().any(known) || ranks.len() >= MAX_RANKS {
                    continue;
                }
                // A new process with a gone rank's number: the launcher restarted it.
                ranks.retain(|r| r.gone_at.is_none() || r.rank != seen.rank || seen.rank.is_none());
                ranks.push(Rank {
                    pid: seen.pid,
                    start_ticks,
                    rank: seen.rank,
                    gpu: seen.gpu,
                    gone_at: None,
                });
            }
        }
        for ranks in self.jobs.values_mut() {
            // A rank gone stays gone: its (pid, start time) never runs again.
            for rank in ranks.iter_mut().filter(|r| r.gone_at.is_none()) {
                if !runs(rows, rank) {
                    rank.gone_at = Some(t);
                }
            }
        }
        self.jobs
            .retain(|_, ranks| ranks.iter().any(|r| r.gone_at.is_none()));
    }

    /// Writes into the snapshot's jobs the ranks that left them (`Job::gone`), and puts back a
    /// job down to one process, which grouping drops (a job needs two), so that the jobs panel
    /// and the JSON say which rank went and when. Run after the rules, on the snapshot with
    /// every row (those without a GPU included). Allocates only while a rank is gone.
    pub(crate) fn gone_into(&self, snapshot: &mut Snapshot) {
        let now = snapshot.unix_seconds;
        for (id, ranks) in &self.jobs {
            if ranks.iter().all(|r| r.gone_at.is_none()) {
                continue;
            }
            let at = if let Some(at) = snapshot.jobs.iter().position(|j| j.id == *id) {
                at
            } else {
                let live = live_ranks(snapshot, ranks);
                if live.is_empty() {
                    continue;
                }
                snapshot.jobs.push(Job {
                    id: id.clone(),
                    ranks: live,
                    gone: Vec::new(),
                });
                snapshot.jobs.len() - 1
            };
            let gone = ranks.iter().filter_map(|r| {
                Some(GoneRank {
                    pid: r.pid,
                    gpu: r.gpu,
                    rank: r.rank,
                    gone_seconds: (now - r.gone_at?).max(0.0),
                })
            });
            let job = &mut snapshot.jobs[at];
            job.gone.clear();
            job.gone.extend(gone);
            // The ranks that went first, most likely the cause; a job a user restarts ranks
            // of over and over lists no more than a line can say.
            (job.gone).sort_by(|a, b| b.gone_seconds.total_cmp(&a.gone_seconds));
            job.gone.truncate(MAX_GONE_LISTED);
        }
    }
}

/// The rows of a remembered job's ranks that still run, as grouping writes them.
fn live_ranks(snapshot: &Snapshot, ranks: &[Rank]) -> Vec<JobRank> {
    let mut pids: Vec<u32> = (ranks.iter())
        .filter(|r| r.gone_at.is_none())
        .map(|r| r.pid)
        .collect();
    pids.sort_unstable();
    let mut live: Vec<JobRank> = (snapshot.processes.iter())
        .filter(|p| p.visible && pids.binary_search(&p.pid).is_ok())
        .map(super::jobs::job_rank)
        .collect();
    live.sort_unstable_by_key(|r| (r.rank.unwrap_or(u32::MAX), r.pid, r.gpu));
    live.dedup_by_key(|r| (r.pid, r.gpu));
    live
}

/// The rows of `pid` in `rows` (ordered by pid).
fn rows_of(
    rows: &[(u32, Option<u64>, bool)],
    pid: u32,
) -> impl Iterator<Item = &(u32, Option<u64>, bool)> {
    let from = rows.partition_point(|&(p, ..)| p < pid);
    rows[from..].iter().take_while(move |&&(p, ..)| p == pid)
}

/// Whether a visible row of the rank's process is in the snapshot, or its process runs
/// without a GPU row.
fn runs(rows: &[(u32, Option<u64>, bool)], rank: &Rank) -> bool {
    rows_of(rows, rank.pid).any(|&(_, start, visible)| {
        visible && (start.is_none() || rank.start_ticks.is_none() || start == rank.start_ticks)
    })
}

pub(crate) fn check(inputs: &Inputs, config: &RankGoneConfig) -> Vec<Warning> {
    let now = inputs.snapshot.unix_seconds;
    let mut found = Vec::new();
    for (id, ranks) in &inputs.ranks.jobs {
        // The rank gone longest.
        let Some(gone) = (ranks.iter())
            .filter_map(|r| Some((r, r.gone_at?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
        else {
            continue;
        };
        let (gone, gone_at) = gone;
        if now - gone_at < config.seconds.get() {
            continue;
        }
        let left: Vec<&Rank> = ranks.iter().filter(|r| r.gone_at.is_none()).collect();
        // Each rank left reports steps, and none has stepped for as long. Not "since the rank
        // went": an agent reports its step once an interval (1 s by default), so the last step
        // a rank made before it stopped may reach the monitor after the loss did.
        let still = (left.iter())
            .map(|r| Some(now - inputs.steps.get(&r.pid)?.still_since()?))
            .try_fold(f64::INFINITY, |least, still| Some(least.min(still?)));
        let Some(still) = still.filter(|s| s.is_finite() && *s >= config.seconds.get()) else {
            continue;
        };
        found.push(gone_warning(id, gone, &left, now - gone_at, still));
    }
    found
}

/// "rank 1 (pid 19580) of job X left 45 s ago, and rank 0 has not stepped for 44 s: ...",
/// `still` being the least time any rank left has not stepped.
fn gone_warning(id: &str, gone: &Rank, left: &[&Rank], seconds: f64, still: f64) -> Warning {
    let name = |r: &Rank| match r.rank {
        Some(rank) => format!("rank {rank} (pid {})", r.pid),
        None => format!("pid {}", r.pid),
    };
    let names: Vec<String> = left.iter().map(|r| name(r)).collect();
    let gpus: Vec<String> = (left.iter())
        .filter(|r| r.gpu != crate::model::NO_GPU)
        .map(|r| format!("GPU {}", r.gpu))
        .collect();
    let (verb, pronoun) = if left.len() == 1 {
        ("has", "it most likely waits")
    } else {
        ("have", "they most likely wait")
    };
    let holding = if gpus.is_empty() {
        String::new()
    } else {
        format!(", holding {}", gpus.join(", "))
    };
    let message = format!(
        "{} of {id} left {} ago, and {} {verb} not stepped for {}: {pronoun} for it in the \
         next collective until the process group's timeout (NCCL's default is 10 minutes)\
         {holding}",
        name(gone),
        fmt_seconds(seconds),
        names.join(", "),
        fmt_seconds(still),
    );
    let evidence = vec![
        ("gone", name(gone)),
        ("gone for", fmt_seconds(seconds)),
        ("ranks left", names.join(", ")),
        ("no step for", fmt_seconds(still)),
    ];
    warning(
        ID,
        Severity::Warn,
        Subject::Job { id: id.to_string() },
        message,
        evidence,
        REMEDY,
    )
}

#[cfg(test)]
mod tests {
    use crate::model::{LaunchEnv, Snapshot, Subject, TorchInfo};
    use crate::rules::testkit::{at, evidence, find, gpu, process, replay_default, with_id};

    const GIB: u64 = 1 << 30;

    /// A two-rank job; rank 1 exits at `exit` (never with `u32::MAX`); rank 0 steps until
    /// `stop`, with an agent when `agent` holds.
    fn job(exit: u32, stop: u32, agent: bool) -> impl Fn(u32) -> Snapshot {
        move |t| {
            let mut snap = at(t);
            for r in 0..2 {
                snap.gpus.push(gpu(r, 20 * GIB, 80 * GIB, 90));
                if r == 1 && t >= exit {
                    continue;
                }
                let mut p = process(100 + r, r, 18 * GIB);
                p.env = Some(
                    LaunchEnv {
                        rank: Some(r),
                        world_size: Some(2),
                        torchelastic_run_id: Some("run7".into()),
                        ..Default::default()
                    }
                    .into(),
                );
                if agent {
                    p.torch = Some(std::sync::Arc::new(TorchInfo {
                        step: Some(u64::from(t.min(stop))),
                        step_time_seconds: Some(1.0),
                        age_seconds: Some(0.2),
                        ..Default::default()
                    }));
                }
                snap.processes.push(p);
            }
            snap
        }
    }

    fn subject() -> Subject {
        Subject::Job {
            id: "torchelastic run run7".into(),
        }
    }

    /// Tried as a user: a rank of a two-rank job killed, the other waiting in its collective;
    /// nothing said so until training-stalled's five minutes, and then without the cause.
    #[test]
    fn a_rank_gone_while_the_rank_left_stops_stepping_is_named() {
        let warnings = replay_default(60, job(20, 20, true));
        let w = find(&warnings, "rank-gone", &subject());
        assert_eq!(
            w.message,
            "rank 1 (pid 101) of torchelastic run run7 left 40 s ago, and rank 0 (pid 100) has \
             not stepped for 40 s: it most likely waits for it in the next collective until the \
             process group's timeout (NCCL's default is 10 minutes), holding GPU 0"
        );
        assert_eq!(evidence(w, "gone"), "rank 1 (pid 101)");
        assert!(w.remedy.contains("dmesg") && w.remedy.contains("--max-restarts"));
        // Under the 30 s: not yet.
        assert!(with_id(&replay_default(45, job(20, 20, true)), "rank-gone").is_empty());
        // Tried with the default 1 s stats: the last step made before the loss reached the
        // monitor after it, and "not stepped since the loss" never held.
        let late = replay_default(60, job(20, 22, true));
        let w = find(&late, "rank-gone", &subject());
        assert_eq!(evidence(w, "no step for"), "38 s");
    }

    /// Rank 0 saving a checkpoint after the others ended steps on, or has no steps to judge:
    /// no warning. Nor for a job whose ranks all run.
    #[test]
    fn a_rank_left_that_steps_or_reports_no_steps_or_a_whole_job_is_not_warned_of() {
        let stepping = replay_default(60, job(20, u32::MAX, true));
        assert!(with_id(&stepping, "rank-gone").is_empty(), "{stepping:#?}");
        let no_agent = replay_default(60, job(20, 0, false));
        assert!(with_id(&no_agent, "rank-gone").is_empty(), "{no_agent:#?}");
        let whole = replay_default(60, job(u32::MAX, 20, true));
        assert!(with_id(&whole, "rank-gone").is_empty(), "{whole:#?}");
    }

    /// Tried as a user: rank 1 before its first CUDA call (its agent's row holds no GPU, and
    /// the sampler joins such rows to the snapshot only after the rules ran) while rank 0
    /// waits for it in a collective. Rank 1 runs: nothing left the job.
    #[test]
    fn a_rank_that_holds_no_gpu_yet_has_not_left() {
        let mut engine = crate::rules::Engine::new(crate::rules::RulesConfig::default());
        let mut last = Vec::new();
        for t in 0..=60 {
            let mut snap = job(u32::MAX, 20, true)(t);
            let mut cpu_rank = snap.processes.remove(1);
            cpu_rank.gpu = crate::model::NO_GPU;
            cpu_rank.no_gpu = true;
            let agent_only = [cpu_rank];
            let all: Vec<_> = snap.processes.iter().chain(&agent_only).cloned().collect();
            snap.jobs = crate::rules::group_jobs(&all);
            assert_eq!(snap.jobs.len(), 1, "one job of two ranks");
            engine.note_rows_without_gpu(&agent_only);
            last = engine.evaluate(&snap);
        }
        assert!(with_id(&last, "rank-gone").is_empty(), "{last:#?}");
    }

    /// The job down to rank 0 (grouping drops a job of one process) is put back after the
    /// rules with the rank that left; a job whose ranks all run lists none gone.
    #[test]
    fn the_snapshot_lists_the_rank_that_left_and_keeps_the_job_of_one() {
        let mut engine = crate::rules::Engine::new(crate::rules::RulesConfig::default());
        let mut snap = Snapshot::default();
        for t in 0..=40 {
            snap = job(20, 20, true)(t);
            snap.jobs = crate::rules::group_jobs(&snap.processes);
            engine.evaluate(&snap);
            engine.gone_ranks_into(&mut snap);
            if t < 20 {
                assert!(snap.jobs[0].gone.is_empty(), "{:?}", snap.jobs);
            }
        }
        assert_eq!(snap.jobs.len(), 1, "{:?}", snap.jobs);
        let job = &snap.jobs[0];
        assert_eq!(job.id, "torchelastic run run7");
        let live: Vec<_> = job.ranks.iter().map(|r| (r.pid, r.rank)).collect();
        assert_eq!(live, [(100, Some(0))]);
        assert_eq!(
            job.gone,
            [crate::model::GoneRank {
                pid: 101,
                gpu: 1,
                rank: Some(1),
                gone_seconds: 20.0,
            }]
        );
    }

    /// A job whose ranks left one a second, the last rank first, 40 of them: the snapshot
    /// lists the 16 gone longest, the first to go first.
    #[test]
    fn a_job_lists_at_most_sixteen_ranks_gone_the_first_to_go_first() {
        let ranks = 41;
        let snapshot = |t: u32| {
            let mut snap = at(t);
            for r in (0..ranks).filter(|&r| r == 0 || ranks - r > t) {
                let mut p = process(100 + r, 0, GIB);
                p.env = Some(
                    LaunchEnv {
                        rank: Some(r),
                        world_size: Some(ranks),
                        torchelastic_run_id: Some("run8".into()),
                        ..Default::default()
                    }
                    .into(),
                );
                snap.processes.push(p);
            }
            snap.jobs = crate::rules::group_jobs(&snap.processes);
            snap
        };
        let mut memory = super::Memory::default();
        let mut snap = Snapshot::default();
        for t in 0..=50 {
            snap = snapshot(t);
            memory.record(&snap);
        }
        memory.gone_into(&mut snap);
        let gone: Vec<_> = (snap.jobs[0].gone.iter())
            .map(|g| (g.rank, g.gone_seconds))
            .collect();
        let expected: Vec<_> = (25..=40)
            .rev()
            .map(|r| (Some(r), f64::from(50 - (ranks - r))))
            .collect();
        assert_eq!(gone, expected);
    }

    /// A launcher that restarts the rank (a new process with its rank number) ends it: the
    /// gone one is forgotten, so that a later loss names the rank that went then. So does the
    /// end of the ranks left.
    #[test]
    fn a_restarted_rank_or_the_end_of_the_job_clears_it() {
        let restarted = |t: u32| {
            let mut snap = job(20, 20, true)(t);
            if t >= 50 {
                let mut again = job(u32::MAX, 20, true)(t).processes.remove(1);
                again.pid = 201;
                again.start_ticks = Some(5_000);
                snap.processes.push(again);
            }
            snap.jobs = crate::rules::group_jobs(&snap.processes);
            snap
        };
        let mut memory = super::Memory::default();
        for t in 0..=60 {
            memory.record(&restarted(t));
        }
        let ranks = &memory.jobs["torchelastic run run7"];
        let pids: Vec<_> = ranks.iter().map(|r| (r.pid, r.gone_at)).collect();
        assert_eq!(pids, [(100, None), (201, None)]);
        let warnings = replay_default(60, restarted);
        assert!(with_id(&warnings, "rank-gone").is_empty(), "{warnings:#?}");
        let ended = replay_default(60, |t| {
            let mut snap = job(20, 20, true)(t);
            if t >= 55 {
                snap.processes.clear();
            }
            snap
        });
        assert!(with_id(&ended, "rank-gone").is_empty(), "{ended:#?}");
    }
}
