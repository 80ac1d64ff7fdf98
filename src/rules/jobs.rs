//! Grouping GPU processes, and the processes an agent lists that hold no GPU yet (ranks before
//! their first CUDA call, CPU ranks), into distributed jobs (torchrun, DDP, FSDP).
//!
//! A process belongs to a job when it knows its rank or a world size above one (from its
//! agent's hello, else from RANK / WORLD_SIZE in its environment). Processes share a job when
//! they share, in this order of preference: a Slurm job (SLURM_JOB_ID, or the job of its
//! Slurm cgroup), a TORCHELASTIC_RUN_ID (other than torchrun's default "none"), a
//! MASTER_ADDR:MASTER_PORT (which also joins the pods of a Kubernetes PyTorchJob), or a parent
//! process (mp.spawn and launchers that set the rendezvous in code). Under `srun` without a
//! launcher, SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS stand in for the rank, local rank and
//! world size. A job needs at least two processes.

use std::cmp::Ordering;
use std::fmt::{self, Write as _};

use crate::model::{GpuProcess, Job, JobRank};

/// The jobs among `processes`, ordered by id.
#[cfg(test)]
pub(crate) fn group_jobs(processes: &[GpuProcess]) -> Vec<Job> {
    let mut jobs = Vec::new();
    group_jobs_into(processes, &mut jobs);
    jobs
}

/// The jobs among `processes`, ordered by id, into `jobs`, whose jobs (their ids and rank lists)
/// are rewritten in place: a tick whose jobs are those of the last one allocates nothing. The
/// jobs are kept in id order as they are found, so each process finds its job by binary search:
/// a host with hundreds of jobs costs n log n, not n times the jobs.
pub(crate) fn group_jobs_into<'a>(
    processes: impl IntoIterator<Item = &'a GpuProcess>,
    jobs: &mut Vec<Job>,
) {
    let mut used = 0;
    for process in processes {
        let Some(key) = job_key_of(process) else {
            continue;
        };
        let at = match jobs[..used].binary_search_by(|j| key.cmp_text(&j.id).reverse()) {
            Ok(at) => at,
            Err(at) => {
                if used == jobs.len() {
                    jobs.push(Job {
                        id: String::new(),
                        ranks: Vec::new(),
                        gone: Vec::new(),
                    });
                }
                // The room past the jobs found (the last tick's, or new) moves into its place.
                jobs[at..=used].rotate_right(1);
                let job = &mut jobs[at];
                job.id.clear();
                // Writing into a String cannot fail.
                let _ = write!(job.id, "{key}");
                job.ranks.clear();
                job.gone.clear();
                used += 1;
                at
            }
        };
        jobs[at].ranks.push(job_rank(process));
    }
    for job in &mut jobs[..used] {
        (job.ranks).sort_unstable_by_key(|r| (r.rank.unwrap_or(u32::MAX), r.pid, r.gpu));
        // A process listed twice on one GPU is one rank.
        (job.ranks).dedup_by_key(|r| (r.pid, r.gpu));
    }
    // A job needs two processes; whatever the last tick left past `used` goes too.
    let mut kept = 0;
    for i in 0..used {
        let ranks = &jobs[i].ranks;
        if ranks.iter().any(|r| r.pid != ranks[0].pid) {
            jobs.swap(kept, i);
            kept += 1;
        }
    }
    jobs.truncate(kept);
}

/// The process's rank, local rank and world size, from its agent's hello, else its environment.
pub(crate) fn job_rank(process: &GpuProcess) -> JobRank {
    let torch = process.torch.as_ref();
    let env = process.env.as_ref();
    let slurm = process.slurm.as_ref();
    JobRank {
        pid: process.pid,
        gpu: process.gpu,
        rank: torch
            .and_then(|t| t.rank)
            .or(env.and_then(|e| e.rank))
            .or(slurm.and_then(|s| s.proc_id)),
        local_rank: torch
            .and_then(|t| t.local_rank)
            .or(env.and_then(|e| e.local_rank))
            .or(slurm.and_then(|s| s.local_id)),
        world_size: torch
            .and_then(|t| t.world_size)
            .or(env.and_then(|e| e.world_size))
            .or(slurm.and_then(|s| s.ntasks)),
    }
}

/// The job a process belongs to, as its human-readable id; `None` when it is not distributed.
/// Also names the job of a lone rank (one of a job spread over many machines).
pub(crate) fn job_key(process: &GpuProcess) -> Option<String> {
    job_key_of(process).map(|key| key.to_string())
}

/// A job's id as the parts it is written from, borrowed from the process: compared with
/// [`JobKey::cmp_text`] or written with `Display` (the text of [`job_key`]), never kept.
///
/// The keys a process's environment makes (a torchelastic run id, a rendezvous address) carry
/// its user: any user can set `MASTER_ADDR`, `MASTER_PORT` and `RANK` to join another user's
/// job, whose rank list, rules and exporter series then took in their process. A launcher's
/// pid is not theirs to choose, nor a Slurm job id that the process's cgroup names (slurmd makes
/// those); one read from SLURM_JOB_ID alone carries the user like the others.
#[derive(Debug, Clone, Copy)]
pub(crate) enum JobKey<'a> {
    Slurm(&'a str, Owner<'a>),
    Torchelastic(&'a str, Owner<'a>),
    /// `scope`: the pod or container of a loopback (or missing) address, which names a
    /// network namespace's own rendezvous: two containers' `torchrun`s both use 127.0.0.1:29500.
    Master {
        addr: &'a str,
        port: &'a str,
        scope: Option<Scope<'a>>,
        owner: Owner<'a>,
    },
    Parent(u32),
}

/// The user of a job's processes, written after its id: " (alice)"; nothing where unknown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner<'a>(Option<&'a str>);

impl fmt::Display for Owner<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.map_or(Ok(()), |user| write!(f, " ({user})"))
    }
}

/// Where a loopback rendezvous address is local to: a pod (its containers share one network
/// namespace) or a container, by the first 12 characters of its id.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    Pod(&'a str),
    Container { runtime: &'a str, id: &'a str },
}

impl fmt::Display for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn short(id: &str) -> &str {
            id.get(..12).unwrap_or(id)
        }
        match self {
            Scope::Pod(uid) => write!(f, " in pod {}", short(uid)),
            Scope::Container { runtime, id } => write!(f, " in {runtime} {}", short(id)),
        }
    }
}

impl fmt::Display for JobKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobKey::Slurm(id, owner) => write!(f, "slurm job {id}{owner}"),
            JobKey::Torchelastic(id, owner) => write!(f, "torchelastic run {id}{owner}"),
            JobKey::Master {
                addr,
                port,
                scope,
                owner,
            } => {
                write!(f, "job {addr}:{port}")?;
                scope.map_or(Ok(()), |scope| write!(f, "{scope}"))?;
                write!(f, "{owner}")
            }
            JobKey::Parent(ppid) => write!(f, "job under pid {ppid}"),
        }
    }
}

impl JobKey<'_> {
    /// This key's text compared with `id`, without writing it out.
    pub(crate) fn cmp_text(&self, id: &str) -> Ordering {
        let mut against = Comparer {
            rest: id.as_bytes(),
            order: Ordering::Equal,
        };
        // A difference stops the writing with an error, and leaves the order.
        let _ = write!(against, "{self}");
        match against.order {
            Ordering::Equal if !against.rest.is_empty() => Ordering::Less,
            order => order,
        }
    }
}

/// The text still to compare with, and how what was written compared with it.
struct Comparer<'a> {
    rest: &'a [u8],
    order: Ordering,
}

impl fmt::Write for Comparer<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let s = s.as_bytes();
        let n = s.len().min(self.rest.len());
        self.order = match s[..n].cmp(&self.rest[..n]) {
            Ordering::Equal if s.len() > n => Ordering::Greater,
            Ordering::Equal => {
                self.rest = &self.rest[n..];
                return Ok(());
            }
            order => order,
        };
        Err(fmt::Error)
    }
}

/// [`job_key`] borrowed: the parts its text is written from.
pub(crate) fn job_key_of(process: &GpuProcess) -> Option<JobKey<'_>> {
    let identity = job_rank(process);
    // RANK=0 WORLD_SIZE=1 is a job of one: left on, it made one "job" of every such process.
    let distributed = match identity.world_size {
        Some(world) => world > 1,
        None => identity.rank.is_some(),
    };
    if !distributed {
        return None;
    }
    let owner = Owner(process.user.as_deref());
    if let Some(slurm) = &process.slurm {
        let cgroup_job = process
            .cgroup
            .as_deref()
            .and_then(|c| c.slurm_job.as_deref());
        let from_slurmd = cgroup_job == Some(slurm.job_id.as_str());
        return Some(JobKey::Slurm(
            &slurm.job_id,
            if from_slurmd { Owner(None) } else { owner },
        ));
    }
    let env = process.env.as_ref();
    let run_id = env
        .and_then(|e| non_empty(e.torchelastic_run_id.as_ref()))
        .filter(|id| *id != "none");
    if let Some(run_id) = run_id {
        return Some(JobKey::Torchelastic(run_id, owner));
    }
    if let Some(port) = env.and_then(|e| non_empty(e.master_port.as_ref())) {
        let addr = env
            .and_then(|e| non_empty(e.master_addr.as_ref()))
            .unwrap_or("");
        let scope = is_loopback(addr).then(|| scope_of(process)).flatten();
        return Some(JobKey::Master {
            addr,
            port,
            scope,
            owner,
        });
    }
    // Pid 1 (and a subreaper at pid 1 of a container) adopts every orphan: not a launcher.
    process.ppid.filter(|&ppid| ppid > 1).map(JobKey::Parent)
}

/// A rendezvous address that means "this network namespace": loopback, or none given.
fn is_loopback(addr: &str) -> bool {
    addr.is_empty()
        || addr == "localhost"
        || addr
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn scope_of(process: &GpuProcess) -> Option<Scope<'_>> {
    let cgroup = process.cgroup.as_deref()?;
    if let Some(pod) = &cgroup.pod {
        return Some(Scope::Pod(&pod.uid));
    }
    let container = cgroup.container.as_ref()?;
    Some(Scope::Container {
        runtime: &container.runtime,
        id: &container.id,
    })
}

/// The variable's value trimmed, unless that leaves nothing.
fn non_empty(value: Option<&String>) -> Option<&str> {
    value.map(|v| v.trim()).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LaunchEnv, TorchInfo};
    use crate::rules::testkit::process;

    fn ranked(pid: u32, gpu: u32, env: LaunchEnv) -> GpuProcess {
        let mut p = process(pid, gpu, 1 << 30);
        p.env = Some(env.into());
        p
    }

    fn torchrun(rank: u32, run_id: &str, port: &str) -> LaunchEnv {
        LaunchEnv {
            rank: Some(rank),
            local_rank: Some(rank),
            world_size: Some(4),
            torchelastic_run_id: Some(run_id.into()),
            master_addr: Some("127.0.0.1".into()),
            master_port: Some(port.into()),
            ..Default::default()
        }
    }

    #[test]
    fn many_jobs_found_in_any_order_come_out_by_id_and_a_lone_pid_is_no_job() {
        let mut processes = Vec::new();
        for job in [7u32, 3, 9, 1, 5] {
            let id = format!("run{job}");
            processes.push(ranked(100 + job, 0, torchrun(1, &id, "1")));
            processes.push(ranked(200 + job, 1, torchrun(0, &id, "1")));
        }
        // One process on two GPUs, listed twice on one of them: one rank per GPU, no job.
        for gpu in [0, 1, 0] {
            processes.push(ranked(300, gpu, torchrun(0, "lone", "1")));
        }
        let mut jobs = Vec::new();
        group_jobs_into(&processes, &mut jobs);
        let found: Vec<(&str, Vec<u32>)> = (jobs.iter())
            .map(|j| (j.id.as_str(), j.ranks.iter().map(|r| r.pid).collect()))
            .collect();
        let want: Vec<(String, Vec<u32>)> = [1, 3, 5, 7, 9]
            .map(|n| (format!("torchelastic run run{n}"), vec![200 + n, 100 + n]))
            .to_vec();
        let want: Vec<(&str, Vec<u32>)> = (want.iter())
            .map(|(id, p)| (id.as_str(), p.clone()))
            .collect();
        assert_eq!(found, want);
        processes.push(ranked(301, 2, torchrun(1, "lone", "1")));
        group_jobs_into(&processes, &mut jobs);
        let lone = jobs
            .iter()
            .find(|j| j.id == "torchelastic run lone")
            .unwrap();
        let rows: Vec<(u32, u32)> = lone.ranks.iter().map(|r| (r.pid, r.gpu)).collect();
        assert_eq!(rows, [(300, 0), (300, 1), (301, 2)]);
    }

    #[test]
    fn torchrun_processes_group_by_run_id_in_rank_order() {
        let processes = vec![
            ranked(12, 2, torchrun(2, "abc", "29500")),
            ranked(10, 0, torchrun(0, "abc", "29500")),
            ranked(11, 1, torchrun(1, "abc", "29500")),
            ranked(20, 3, torchrun(0, "xyz", "29501")),
            ranked(21, 4, torchrun(1, "xyz", "29501")),
        ];
        let jobs = group_jobs(&processes);
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["torchelastic run abc", "torchelastic run xyz"]);
        let ranks: Vec<Option<u32>> = jobs[0].ranks.iter().map(|r| r.rank).collect();
        assert_eq!(ranks, [Some(0), Some(1), Some(2)]);
        assert_eq!(jobs[0].ranks[2].pid, 12);
        assert_eq!(jobs[0].ranks[2].world_size, Some(4));
    }

    #[test]
    fn the_default_run_id_falls_back_to_the_master_port() {
        let processes = vec![
            ranked(10, 0, torchrun(0, "none", "29500")),
            ranked(11, 1, torchrun(1, "none", "29500")),
            ranked(20, 2, torchrun(0, "none", "29600")),
            ranked(21, 3, torchrun(1, "none", "29600")),
        ];
        let ids: Vec<String> = group_jobs(&processes).into_iter().map(|j| j.id).collect();
        assert_eq!(ids, ["job 127.0.0.1:29500", "job 127.0.0.1:29600"]);
    }

    /// Two containers each run `torchrun --nproc_per_node=2` with its defaults: both
    /// rendezvous at 127.0.0.1:29500, each in its own network namespace. They were one job of
    /// four ranks "r0 r0 r1 r1".
    #[test]
    fn loopback_rendezvous_in_two_containers_are_two_jobs() {
        let in_container = |pid: u32, rank: u32, id: char| {
            let mut p = ranked(pid, rank, torchrun(rank, "none", "29500"));
            p.cgroup = Some(std::sync::Arc::new(crate::model::Cgroup {
                container: Some(crate::model::ContainerRef {
                    runtime: "docker".into(),
                    id: id.to_string().repeat(64),
                }),
                ..Default::default()
            }));
            p
        };
        let processes = vec![
            in_container(10, 0, 'a'),
            in_container(11, 1, 'a'),
            in_container(20, 0, 'b'),
            in_container(21, 1, 'b'),
        ];
        let jobs = group_jobs(&processes);
        let found: Vec<(&str, Vec<u32>)> = (jobs.iter())
            .map(|j| (j.id.as_str(), j.ranks.iter().map(|r| r.pid).collect()))
            .collect();
        assert_eq!(
            found,
            [
                ("job 127.0.0.1:29500 in docker aaaaaaaaaaaa", vec![10, 11]),
                ("job 127.0.0.1:29500 in docker bbbbbbbbbbbb", vec![20, 21]),
            ]
        );
        // A routable address is one rendezvous whatever the containers.
        let mut routable = processes.clone();
        for p in &mut routable {
            let mut env = (**p.env.as_ref().unwrap()).clone();
            env.master_addr = Some("10.0.0.5".into());
            p.env = Some(env.into());
        }
        let jobs = group_jobs(&routable);
        assert_eq!(jobs.len(), 1, "{jobs:#?}");
        assert_eq!(jobs[0].id, "job 10.0.0.5:29500");
    }

    /// Processes with RANK=0 WORLD_SIZE=1, or orphans adopted by pid 1, were one job "under
    /// pid 1".
    #[test]
    fn a_world_of_one_and_the_orphans_of_pid_1_are_no_job() {
        let alone = |pid: u32, ppid: u32, world: Option<u32>| {
            let mut p = process(pid, 0, 1 << 30);
            p.ppid = Some(ppid);
            p.torch = Some(std::sync::Arc::new(TorchInfo {
                rank: Some(0),
                world_size: world,
                ..Default::default()
            }));
            p
        };
        let processes: Vec<GpuProcess> = (0..10)
            .map(|k| alone(100 + k, 1, Some(1)))
            .chain((0..2).map(|k| alone(200 + k, 1, None)))
            .chain((0..2).map(|k| alone(300 + k, 77, Some(1))))
            .collect();
        let jobs = group_jobs(&processes);
        assert!(jobs.is_empty(), "{jobs:#?}");
    }

    #[test]
    fn agent_hellos_group_by_parent_when_the_environment_is_unreadable() {
        let hello = |pid: u32, rank: u32, ppid: u32| {
            let mut p = process(pid, rank, 1 << 30);
            p.ppid = Some(ppid);
            p.torch = Some(std::sync::Arc::new(TorchInfo {
                rank: Some(rank),
                world_size: Some(2),
                ..Default::default()
            }));
            p
        };
        let processes = vec![hello(31, 1, 30), hello(32, 0, 30), hello(41, 0, 40)];
        let jobs = group_jobs(&processes);
        assert_eq!(jobs.len(), 1, "a lone rank is not a job: {jobs:#?}");
        assert_eq!(jobs[0].id, "job under pid 30");
        assert_eq!(
            jobs[0].ranks.iter().map(|r| r.pid).collect::<Vec<_>>(),
            [32, 31]
        );
    }

    #[test]
    fn srun_tasks_group_by_slurm_job_with_their_task_ranks() {
        let task = |pid: u32, procid: u32| {
            let mut p = process(pid, procid, 1 << 30);
            p.slurm = Some(std::sync::Arc::new(crate::model::SlurmTask {
                job_id: "4242".into(),
                proc_id: Some(procid),
                local_id: Some(procid),
                ntasks: Some(2),
                ..Default::default()
            }));
            p
        };
        let jobs = group_jobs(&[task(51, 1), task(50, 0)]);
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].id, "slurm job 4242");
        let ranks: Vec<(u32, Option<u32>)> =
            jobs[0].ranks.iter().map(|r| (r.pid, r.rank)).collect();
        assert_eq!(ranks, [(50, Some(0)), (51, Some(1))]);
        assert_eq!(jobs[0].ranks[0].world_size, Some(2));
    }

    #[test]
    fn a_key_compares_with_a_text_as_its_own_text_would() {
        let p = ranked(10, 0, torchrun(0, "abc", "29500"));
        let key = job_key_of(&p).unwrap();
        let text = "torchelastic run abc";
        assert_eq!(job_key(&p).as_deref(), Some(text));
        for other in [
            text,
            "torchelastic run ab",
            "torchelastic run abcd",
            "torchelastic run abd",
            "torchelastic run abb",
            "torchelastic",
            "torchelastic ",
            "torchelastic runs",
            "",
            "job 127.0.0.1:29500",
            "zz",
            "torchelastic run \u{e9}",
        ] {
            assert_eq!(key.cmp_text(other), text.cmp(other), "{other:?}");
        }
    }

    /// A user who sets another user's rendezvous address and a rank in their own process's
    /// environment joined that user's job (its rank list, rules and exporter series).
    #[test]
    fn another_users_process_with_the_same_rendezvous_is_another_job() {
        let of = |pid, rank, user: &str| {
            let mut p = ranked(pid, rank, torchrun(rank, "", "29500"));
            p.env = Some(
                LaunchEnv {
                    master_addr: Some("10.0.0.5".into()),
                    torchelastic_run_id: None,
                    ..LaunchEnv::clone(p.env.as_ref().unwrap())
                }
                .into(),
            );
            p.user = Some(user.into());
            p
        };
        let jobs = group_jobs(&[of(10, 0, "alice"), of(11, 1, "alice"), of(12, 1, "mallory")]);
        assert_eq!(jobs.len(), 1, "{jobs:#?}");
        assert_eq!(jobs[0].id, "job 10.0.0.5:29500 (alice)");
        let pids: Vec<u32> = jobs[0].ranks.iter().map(|r| r.pid).collect();
        assert_eq!(pids, [10, 11]);
        assert_eq!(
            job_key(&of(12, 1, "mallory")).as_deref(),
            Some("job 10.0.0.5:29500 (mallory)")
        );
    }

    /// SLURM_JOB_ID is as easy to set as MASTER_ADDR: read from the environment alone, it names
    /// its user; named by the cgroup slurmd made, it is the job's own and names no one.
    #[test]
    fn a_slurm_job_id_only_the_environment_gives_names_its_user() {
        let task = |pid: u32, procid: u32, user: &str, in_cgroup: bool| {
            let mut p = process(pid, procid, 1 << 30);
            p.user = Some(user.into());
            p.slurm = Some(std::sync::Arc::new(crate::model::SlurmTask {
                job_id: "4242".into(),
                proc_id: Some(procid),
                ntasks: Some(2),
                ..Default::default()
            }));
            if in_cgroup {
                p.cgroup = Some(std::sync::Arc::new(crate::model::Cgroup {
                    slurm_job: Some("4242".into()),
                    ..Default::default()
                }));
            }
            p
        };
        let from_slurmd = group_jobs(&[task(50, 0, "alice", true), task(51, 1, "alice", true)]);
        assert_eq!(from_slurmd[0].id, "slurm job 4242");
        // mallory's process outside any Slurm cgroup claims alice's job and rank 1.
        let jobs = group_jobs(&[
            task(50, 0, "alice", false),
            task(51, 1, "alice", false),
            task(52, 1, "mallory", false),
        ]);
        assert_eq!(jobs.len(), 1, "{jobs:#?}");
        assert_eq!(jobs[0].id, "slurm job 4242 (alice)");
        let pids: Vec<u32> = jobs[0].ranks.iter().map(|r| r.pid).collect();
        assert_eq!(pids, [50, 51]);
    }

    #[test]
    fn jobs_are_regrouped_in_the_room_of_the_last_ones() {
        let processes = vec![
            ranked(10, 0, torchrun(0, "abc", "29500")),
            ranked(11, 1, torchrun(1, "abc", "29500")),
        ];
        let mut jobs = Vec::new();
        group_jobs_into(&processes, &mut jobs);
        let (id, ranks) = (jobs[0].id.as_ptr(), jobs[0].ranks.as_ptr());
        group_jobs_into(&processes, &mut jobs);
        assert_eq!(jobs, group_jobs(&processes));
        assert_eq!((jobs[0].id.as_ptr(), jobs[0].ranks.as_ptr()), (id, ranks));
        group_jobs_into(&processes[..1], &mut jobs);
        assert!(jobs.is_empty(), "a lone rank made a job: {jobs:#?}");
    }

    #[test]
    fn plain_processes_and_single_process_jobs_are_not_jobs() {
        let single = LaunchEnv {
            world_size: Some(1),
            master_port: Some("29500".into()),
            ..Default::default()
        };
        let processes = vec![
            process(1, 0, 1 << 30),
            process(2, 1, 1 << 30),
            ranked(3, 2, single.clone()),
            ranked(4, 3, single),
            // One process on two GPUs is one rank, not two.
            ranked(5, 4, torchrun(0, "solo", "1")),
            ranked(5, 5, torchrun(0, "solo", "1")),
        ];
        assert!(group_jobs(&processes).is_empty());
    }
}
