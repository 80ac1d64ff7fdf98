//! `cgroup-memory`: a training process's cgroup (its container, pod or Slurm job) uses most of
//! its memory limit. Past memory.max the kernel's OOM killer picks a process in the cgroup,
//! most often a DataLoader worker ("DataLoader worker (pid X) is killed by signal: Killed").
//!
//! The limit is the one that binds ([`Cgroup::memory_limit`]): the cgroup's own, or an
//! ancestor's (a Slurm job's above its tasks' cgroups, a pod's above its containers'), against
//! the use of the cgroup that sets it.
//!
//! The GPU processes are grouped by the cgroup that sets the limit, so a container of eight
//! ranks, or a Slurm job of eight tasks each in a cgroup of its own, gets one warning: about its
//! job when all its ranks are one job's, else its lowest pid. The message names the biggest
//! members (the collector lists them from this share of the limit on), marking the children of
//! GPU processes as DataLoader workers.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::config::Fraction;
use crate::model::{Cgroup, GpuProcess, ProcessKind, Severity, Snapshot, Subject, Warning};

use super::training::is_training;
use super::{fmt_bytes, fmt_opt, fmt_opt_bytes, fmt_percent, warning, Inputs};

/// `cgroup-memory`: a training process's cgroup near its memory limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CgroupMemoryConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Share of memory.max that memory.current must reach. Default 0.9.
    pub(crate) memory_fraction: Fraction,
}

impl Default for CgroupMemoryConfig {
    fn default() -> Self {
        CgroupMemoryConfig {
            enabled: true,
            memory_fraction: Fraction::new(0.9),
        }
    }
}

pub(crate) const ID: &str = "cgroup-memory";

const REMEDY: &str = "Give the job more memory or use less: raise the limit (docker run \
--memory, Kubernetes resources.limits.memory, Slurm --mem, systemd MemoryMax=), or use fewer or \
lighter DataLoader workers (each holds its own copy of the dataset object), a smaller \
prefetch_factor, and data loaded lazily or memory-mapped instead of held in lists. At the limit \
the kernel kills a process in the group, usually a DataLoader worker.";

pub(crate) fn check(inputs: &Inputs, config: &CgroupMemoryConfig) -> Vec<Warning> {
    // The lower bar, that of a warning already held: [`near_limit`] picks each group's.
    let threshold = config.memory_fraction.get() - super::seen::CLEAR_MARGIN;
    let near = |process: &GpuProcess| {
        let fraction = process.cgroup.as_ref().and_then(|c| c.memory_fraction());
        fraction.is_some_and(|f| f >= threshold)
    };
    // Most refreshes no cgroup is near its limit: the grouping (a map and lists, each
    // refresh) is left out then.
    if !inputs.snapshot.processes.iter().any(near) {
        return Vec::new();
    }
    by_limit(job_processes_by_cgroup(inputs.snapshot))
        .into_values()
        .filter_map(|members| near_limit(inputs, &members, config))
        .collect()
}

/// The groups of processes by cgroup, merged where their cgroups share the limit that binds
/// (an ancestor's): one warning per limit.
fn by_limit<'a>(
    groups: BTreeMap<&'a str, Vec<&'a GpuProcess>>,
) -> BTreeMap<&'a str, Vec<&'a GpuProcess>> {
    let mut merged: BTreeMap<&str, Vec<&GpuProcess>> = BTreeMap::new();
    for (path, members) in groups {
        let limit = members
            .first()
            .and_then(|p| p.cgroup.as_deref())
            .and_then(Cgroup::memory_limit)
            .map_or(path, |limit| limit.path);
        merged.entry(limit).or_default().extend(members);
    }
    merged
}

/// The visible job processes of the snapshot, by cgroup path, each once (a process on two GPUs
/// has two rows).
pub(super) fn job_processes_by_cgroup(snapshot: &Snapshot) -> BTreeMap<&str, Vec<&GpuProcess>> {
    let mut groups: BTreeMap<&str, Vec<&GpuProcess>> = BTreeMap::new();
    let mut seen = Vec::new();
    for process in &snapshot.processes {
        let Some(cgroup) = process.cgroup.as_ref() else {
            continue;
        };
        let wanted =
            process.visible && process.kind != ProcessKind::Graphics && is_job_process(process);
        if wanted && !seen.contains(&process.pid) {
            seen.push(process.pid);
            groups
                .entry(cgroup.path.as_str())
                .or_default()
                .push(process);
        }
    }
    groups
}

/// Training processes, and any GPU process with children (DataLoader workers).
pub(super) fn is_job_process(process: &GpuProcess) -> bool {
    is_training(process) || process.children_count.is_some_and(|n| n > 0)
}

fn near_limit(
    inputs: &Inputs,
    processes: &[&GpuProcess],
    config: &CgroupMemoryConfig,
) -> Option<Warning> {
    let cgroup = processes.first()?.cgroup.as_ref()?;
    let share = cgroup.memory_fraction()?;
    let subject = subject_of(inputs, processes);
    // Once warned, a group stays warned until its use falls clearly below the bar.
    let bar = (inputs.held).bar(ID, &subject, config.memory_fraction.get());
    if share < bar {
        return None;
    }
    let limit = cgroup.memory_limit()?;
    let mut message = format!(
        "{} uses {} of its {} memory limit ({})",
        named(cgroup),
        fmt_opt_bytes(limit.used_bytes),
        fmt_opt_bytes(Some(limit.max_bytes)),
        fmt_percent(share * 100.0),
    );
    if limit.inherited {
        // The use is the ancestor's, siblings included: say whose limit and use these are.
        message.push_str(&format!(", set on {}", limit.path));
    }
    let biggest = biggest_members(processes);
    if !biggest.is_empty() {
        message.push_str(&format!("; biggest: {biggest}"));
    }
    let evidence = vec![
        ("cgroup", cgroup.path.clone()),
        ("limit set on", limit.path.to_string()),
        ("memory.current", fmt_opt_bytes(limit.used_bytes)),
        ("memory.max", fmt_opt_bytes(Some(limit.max_bytes))),
        ("share", fmt_percent(share * 100.0)),
        (
            "memory.swap.max",
            match cgroup.memory_swap_max {
                Some(crate::model::Limit::Max) => "max".to_string(),
                other => fmt_opt_bytes(other.and_then(super::super::model::cgroup::Limit::value)),
            },
        ),
        ("limit hits", fmt_opt(cgroup.memory_max_hits)),
        ("oom kills", fmt_opt(cgroup.oom_kills)),
        ("processes", fmt_opt(cgroup.member_count)),
    ];
    Some(warning(
        ID,
        Severity::Warn,
        subject,
        message,
        evidence,
        REMEDY,
    ))
}

/// What a message calls the cgroup: its label, which names a pod, a container or a Slurm job
/// as such ("slurm job 42"), else "cgroup" and its path. "The Slurm job of slurm job 42" said
/// the kind twice.
pub(super) fn named(cgroup: &Cgroup) -> String {
    let label = cgroup.label();
    if cgroup.pod.is_some() || cgroup.container.is_some() || cgroup.slurm_job.is_some() {
        label.to_string()
    } else {
        format!("cgroup {label}")
    }
}

/// The job all `processes` are ranks of, else the lowest pid.
pub(super) fn subject_of(inputs: &Inputs, processes: &[&GpuProcess]) -> Subject {
    let jobs = &inputs.snapshot.jobs;
    let job_of = |pid: u32| jobs.iter().find(|j| j.ranks.iter().any(|r| r.pid == pid));
    let first_job = processes.first().and_then(|p| job_of(p.pid));
    if let Some(job) = first_job {
        if processes.iter().all(|p| job_of(p.pid) == Some(job)) {
            return Subject::Job { id: job.id.clone() };
        }
    }
    let pid = processes.iter().map(|p| p.pid).min().unwrap_or_default();
    Subject::Process { pid }
}

/// Members named in a message: as many as the collector keeps for one cgroup.
const NAMED_MEMBERS: usize = 5;

/// "pid 1000 python3 3.0GiB, pid 1004 pt_data_worker 1.2GiB (DataLoader worker of 1000)": the
/// biggest members of every cgroup `processes` are in, since under a limit set on an ancestor
/// (a Slurm job's tasks, a pod's containers) the biggest may sit in any of them.
fn biggest_members(processes: &[&GpuProcess]) -> String {
    let mut members: Vec<&crate::model::CgroupMember> = Vec::new();
    for process in processes {
        for member in process.cgroup.iter().flat_map(|c| &c.biggest_members) {
            if !members.iter().any(|m| m.pid == member.pid) {
                members.push(member);
            }
        }
    }
    members.sort_by(|a, b| b.rss_bytes.cmp(&a.rss_bytes).then(a.pid.cmp(&b.pid)));
    let words: Vec<String> = members
        .iter()
        .take(NAMED_MEMBERS)
        .map(|m| {
            let mut text = format!("pid {} {} {}", m.pid, m.comm, fmt_bytes(m.rss_bytes as f64));
            let parent_holds_gpu = processes.iter().any(|p| p.pid == m.ppid);
            if parent_holds_gpu {
                text.push_str(&format!(" (DataLoader worker of {})", m.ppid));
            }
            text
        })
        .collect();
    words.join(", ")
}

#[cfg(test)]
mod tests {
    use crate::model::{Cgroup, CgroupMember, ContainerRef, Limit, Snapshot, Subject};
    use crate::rules::testkit::*;

    pub(crate) fn container(current: u64, max: u64) -> Cgroup {
        Cgroup {
            path: "/system.slice/docker-3f2a1b9c0d4e.scope".into(),
            version: 2,
            memory_max: Some(Limit::Value(max)),
            memory_current_bytes: Some(current),
            container: Some(ContainerRef {
                runtime: "docker".into(),
                id: "3f2a1b9c0d4e5f60".into(),
            }),
            biggest_members: vec![
                CgroupMember {
                    pid: 40,
                    comm: "python3".into(),
                    ppid: 1,
                    rss_bytes: 3 * GIB,
                },
                CgroupMember {
                    pid: 41,
                    comm: "pt_data_worker".into(),
                    ppid: 40,
                    rss_bytes: GIB,
                },
            ],
            member_count: Some(9),
            ..Default::default()
        }
    }

    fn job(current: u64) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            let mut p = process(40, 0, 10 * GIB);
            p.children_count = Some(8);
            p.cgroup = Some(container(current, 8 * GIB).into());
            snap.processes = vec![p];
            snap
        }
    }

    #[test]
    fn a_container_near_its_limit_names_its_biggest_members() {
        let warnings = replay_default(0, job(15 * GIB / 2));
        let w = find(&warnings, "cgroup-memory", &Subject::Process { pid: 40 });
        assert!(
            w.message
                .starts_with("docker 3f2a1b9c0d4e uses 7.5GiB of its 8.0GiB"),
            "{}",
            w.message
        );
        assert!(w.message.contains("(94%)"), "{}", w.message);
        assert!(
            w.message
                .contains("pid 41 pt_data_worker 1.0GiB (DataLoader worker of 40)"),
            "{}",
            w.message
        );
        assert_eq!(evidence(w, "processes"), "9");
        assert!(w.remedy.contains("--memory"));
    }

    /// Two Slurm tasks, each in a cgroup of its own without a limit, under their job's 8 GiB,
    /// of which the job's cgroup uses 7.6 GiB: one warning, on the job's limit and use.
    #[test]
    fn a_limit_set_above_the_cgroups_warns_once_naming_where_it_is_set() {
        const JOB: &str = "/slurm/uid_1000/job_42";
        let task = |pid: u32| {
            let mut p = process(pid, 0, 10 * GIB);
            p.children_count = Some(2);
            p.cgroup = Some(
                Cgroup {
                    path: format!("{JOB}/step_0/task_{}", pid - 40),
                    version: 2,
                    memory_max: Some(Limit::Max),
                    memory_current_bytes: Some(3 * GIB),
                    memory_limit_bytes: Some(8 * GIB),
                    memory_limit_used_bytes: Some(76 * GIB / 10),
                    memory_limit_path: Some(JOB.into()),
                    slurm_job: Some("42".into()),
                    // Each task's cgroup lists its own members; the second task's worker is
                    // the biggest of the job.
                    biggest_members: vec![
                        CgroupMember {
                            pid: pid + 100,
                            comm: "pt_data_worker".into(),
                            ppid: pid,
                            rss_bytes: u64::from(pid - 39) * GIB,
                        },
                        CgroupMember {
                            pid,
                            comm: "python3".into(),
                            ppid: 1,
                            rss_bytes: GIB / 2,
                        },
                    ],
                    ..Default::default()
                }
                .into(),
            );
            p
        };
        let snapshot = |step| {
            let mut snap = at(step);
            snap.processes = vec![task(40), task(41)];
            snap
        };
        let all = replay_default(0, snapshot);
        let warnings = with_id(&all, "cgroup-memory");
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        let w = warnings[0];
        assert!(
            w.message.contains(
                "slurm job 42 uses 7.6GiB of its 8.0GiB memory limit (95%), set on \
                 /slurm/uid_1000/job_42"
            ),
            "{}",
            w.message
        );
        assert_eq!(evidence(w, "limit set on"), JOB);
        assert_eq!(evidence(w, "memory.current"), "7.6GiB");
        assert_eq!(evidence(w, "cgroup"), format!("{JOB}/step_0/task_0"));
        assert!(
            w.message.contains(
                "biggest: pid 141 pt_data_worker 2.0GiB (DataLoader worker of 41), pid 140 \
                 pt_data_worker 1.0GiB (DataLoader worker of 40), pid 40 python3 512.0MiB, pid \
                 41 python3 512.0MiB"
            ),
            "{}",
            w.message
        );
    }

    /// As oom-risk's: a container wavering at 90 % of its limit raised and cleared the warning
    /// every tick.
    #[test]
    fn a_cgroup_wavering_at_the_bar_keeps_one_warning_until_it_falls_clearly_below() {
        let mut engine = crate::rules::Engine::new(crate::rules::RulesConfig::default());
        let held: Vec<bool> = [91, 89, 91, 88, 86, 89]
            .into_iter()
            .enumerate()
            .map(|(step, percent)| {
                let snap = job(8 * GIB * percent / 100)(u32::try_from(step).unwrap());
                !with_id(&engine.evaluate(&snap), "cgroup-memory").is_empty()
            })
            .collect();
        assert_eq!(held, [true, true, true, true, false, false]);
    }

    #[test]
    fn below_the_share_or_without_a_limit_is_quiet() {
        assert!(with_id(&replay_default(0, job(6 * GIB)), "cgroup-memory").is_empty());
        let unlimited = |step| {
            let mut snap = job(7 * GIB)(step);
            std::sync::Arc::make_mut(snap.processes[0].cgroup.as_mut().unwrap()).memory_max =
                Some(Limit::Max);
            snap
        };
        assert!(with_id(&replay_default(0, unlimited), "cgroup-memory").is_empty());
    }
}
