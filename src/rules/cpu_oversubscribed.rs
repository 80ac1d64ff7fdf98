//! `cpu-oversubscribed`: the training processes of one cgroup run more DataLoader workers and
//! OpenMP threads than the CPUs its cpu.max quota or cpuset allows, so they queue for CPU time
//! (throttled by the quota, or time-sliced on the cpuset).
//!
//! Each training process counts its workers (its children) plus its intra-op threads:
//! OMP_NUM_THREADS where its environment says, else what torch picks without it, the CPUs of
//! the cpuset (OpenMP honours affinity) or else of the host (a quota is invisible to it).

use serde::{Deserialize, Serialize};

use crate::config::NonNegative;
use std::fmt;

use crate::model::{Cgroup, GpuProcess, ProcessKind, Severity};

use super::cgroup_memory::{is_job_process, named};
use super::order::Rows;
use super::slots::{Na, Slots, SubjectRef};
use super::Inputs;

/// `cpu-oversubscribed`: more worker and OpenMP threads than the cgroup's CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CpuOversubscribedConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Warn when the threads exceed the allowed CPUs times this. Default 1.0.
    pub(crate) max_ratio: NonNegative,
}

impl Default for CpuOversubscribedConfig {
    fn default() -> Self {
        CpuOversubscribedConfig {
            enabled: true,
            max_ratio: NonNegative::new(1.0),
        }
    }
}

pub(crate) const ID: &str = "cpu-oversubscribed";

const REMEDY: &str = "Fit the threads to the CPUs the cgroup allows: set num_workers per rank to \
about half to all of the CPUs left per rank, and OMP_NUM_THREADS (or torch.set_num_threads) so \
that ranks x (threads + workers) stays within them (torch counts the host's cores, not a quota); \
or ask for more CPUs (docker run --cpus/--cpuset-cpus, Kubernetes resources.limits.cpu, Slurm \
--cpus-per-task).";

/// Adds a warning for each cgroup whose training processes oversubscribe it, written in place
/// (see [`Slots`]): the cgroups in path order, grouped in kept room ([`Rows`]), so a tick whose
/// warning reads as the last one's allocates nothing.
pub(crate) fn check(
    inputs: &Inputs,
    config: &CpuOversubscribedConfig,
    found: &mut Slots,
    rows: &mut Rows,
) {
    let processes = &inputs.snapshot.processes;
    let path = |i: usize| processes[i].cgroup.as_ref().map(|c| c.path.as_str());
    // Each pid counted once, in its first row's cgroup, as
    // [`job_processes_by_cgroup`](super::cgroup_memory::job_processes_by_cgroup) has them.
    let counted = |p: &GpuProcess| p.cgroup.is_some() && wanted(p);
    let ours = found.found().len();
    for group in rows.group(processes, counted, true, path) {
        let members = || group.iter().map(|&i| &processes[i]);
        let subject = subject_of_members(inputs, members());
        // Of warnings about one subject the engine keeps the first; later ones need no words.
        // Only a job can be the subject of two cgroups (a process is counted in one).
        let job = matches!(subject, SubjectRef::Job(_));
        if !(job && found.holds_after(ours, ID, subject)) {
            oversubscribed(inputs, members, subject, config, found);
        }
    }
}

fn wanted(process: &GpuProcess) -> bool {
    process.visible && process.kind != ProcessKind::Graphics && is_job_process(process)
}

/// [`subject_of`](super::cgroup_memory::subject_of) over an iterator: the job all members are
/// ranks of, else the lowest pid.
fn subject_of_members<'a>(
    inputs: &Inputs<'a>,
    members: impl Iterator<Item = &'a GpuProcess> + Clone,
) -> SubjectRef<'a> {
    let job_of = |pid: u32| inputs.job_of(pid);
    let first_job = members.clone().next().and_then(|p| job_of(p.pid));
    if let Some(job) = first_job {
        if members.clone().all(|p| job_of(p.pid) == Some(job)) {
            return SubjectRef::Job(&job.id);
        }
    }
    let pid = members.map(|p| p.pid).min().unwrap_or_default();
    SubjectRef::Process(pid)
}

fn oversubscribed<'a, I: Iterator<Item = &'a GpuProcess> + Clone>(
    inputs: &Inputs,
    members: impl Fn() -> I,
    subject: SubjectRef,
    config: &CpuOversubscribedConfig,
    found: &mut Slots,
) -> Option<()> {
    let cgroup = members().next()?.cgroup.as_ref()?;
    let host_cpus = inputs.snapshot.host.cpu_count;
    let allowed = limit_of(cgroup, host_cpus)?;
    let default_threads = cgroup.cpuset_count.or(host_cpus)?;
    let mut workers = 0u64;
    let mut threads = 0u64;
    let mut assumed = false;
    let mut count = 0usize;
    for process in members() {
        count += 1;
        workers += u64::from(process.children_count.unwrap_or(0));
        if let Some(n) = process.env.as_ref().and_then(|e| e.omp_num_threads) {
            threads += u64::from(n);
        } else {
            assumed = true;
            threads += u64::from(default_threads);
        }
    }
    let demand = workers + threads;
    if demand as f64 <= allowed * config.max_ratio.get() {
        return None;
    }
    let threads_said = if assumed {
        " (torch's default where OMP_NUM_THREADS is unset)"
    } else {
        ""
    };
    let mut warning = found.write(ID, Severity::Warn, subject, REMEDY);
    warning.message(format_args!(
        "{} allows {} CPUs, but its {count} training process{} run {workers} DataLoader \
         workers and {threads} OpenMP threads{threads_said}",
        named(cgroup),
        Cpus(allowed),
        if count == 1 { "" } else { "es" },
    ));
    warning.row("cgroup", format_args!("{}", cgroup.path));
    match cgroup.cpu_max.map(|c| c.cpus()) {
        None => warning.row("cpu.max", format_args!("N/A")),
        Some(None) => warning.row("cpu.max", format_args!("max")),
        Some(Some(cpus)) => warning.row("cpu.max", format_args!("{}", Cpus(cpus))),
    }
    warning.row(
        "cpuset",
        format_args!("{}", Na(cgroup.cpuset_cpus.as_deref())),
    );
    warning.row("allowed cpus", format_args!("{}", Cpus(allowed)));
    warning.row("workers", format_args!("{workers}"));
    warning.row("openmp threads", format_args!("{threads}"));
    warning.row("host cpus", format_args!("{}", Na(host_cpus)));
    Some(())
}

/// The CPUs the cgroup holds its processes to, where that is fewer than the host has: a cpuset
/// of every CPU (the root cpuset, which cgroup v1 machines put every process in) limits
/// nothing, and such a cgroup without a quota was warned about as if it did ("allows 2 CPUs"
/// on a 2-CPU host).
fn limit_of(cgroup: &Cgroup, host_cpus: Option<u32>) -> Option<f64> {
    let quota = cgroup.cpu_max.and_then(|c| c.cpus());
    let cpuset = (cgroup.cpuset_count).filter(|&n| host_cpus.is_none_or(|host| n < host));
    match (quota, cpuset.map(f64::from)) {
        (Some(q), Some(c)) => Some(q.min(c)),
        (q, c) => q.or(c),
    }
}

/// "4", "1.5".
struct Cpus(f64);

impl fmt::Display for Cpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.fract() == 0.0 {
            write!(f, "{:.0}", self.0)
        } else {
            write!(f, "{:.1}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{Cgroup, CpuMax, LaunchEnv, Snapshot, Subject};
    use crate::rules::testkit::*;

    fn limited(omp: Option<u32>, workers: u32) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            snap.host.cpu_count = Some(64);
            let mut p = process(60, 0, GIB);
            p.children_count = Some(workers);
            p.env = Some(
                LaunchEnv {
                    omp_num_threads: omp,
                    rank: Some(0),
                    ..Default::default()
                }
                .into(),
            );
            p.cgroup = Some(std::sync::Arc::new(Cgroup {
                path: "/kubepods/x".into(),
                cpu_max: Some(CpuMax {
                    quota_us: Some(400_000),
                    period_us: 100_000,
                }),
                ..Default::default()
            }));
            snap.processes = vec![p];
            snap
        }
    }

    #[test]
    fn workers_and_default_threads_over_a_quota_fire() {
        let warnings = replay_default(0, limited(None, 8));
        let w = find(
            &warnings,
            "cpu-oversubscribed",
            &Subject::Process { pid: 60 },
        );
        assert!(
            w.message.contains("allows 4 CPUs, but its 1 training process run 8 DataLoader workers and 64 OpenMP threads (torch's default"),
            "{}",
            w.message
        );
        assert!(w.remedy.contains("num_workers"));
    }

    #[test]
    fn a_warning_that_goes_on_holding_is_rewritten_in_its_own_room() {
        let mut engine = crate::rules::Engine::new(crate::rules::RulesConfig::default());
        let mut warnings = Vec::new();
        engine.evaluate_into(&limited(None, 8)(0), &mut warnings);
        let first = warnings.clone();
        let (message, row) = (
            warnings[0].message.as_ptr(),
            warnings[0].evidence[0].1.as_ptr(),
        );
        engine.evaluate_into(&limited(None, 8)(1), &mut warnings);
        assert_eq!(warnings, first, "the warning changed while it held");
        assert_eq!(warnings[0].message.as_ptr(), message, "a new message");
        assert_eq!(
            warnings[0].evidence[0].1.as_ptr(),
            row,
            "a new evidence row"
        );
        let rows: Vec<(&str, &str)> = (warnings[0].evidence.iter())
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("cgroup", "/kubepods/x"),
                ("cpu.max", "4"),
                ("cpuset", "N/A"),
                ("allowed cpus", "4"),
                ("workers", "8"),
                ("openmp threads", "64"),
                ("host cpus", "64"),
                ("gpu", "0"),
            ]
        );
    }

    #[test]
    fn of_two_cgroups_warning_of_one_job_the_first_by_path_speaks() {
        let two = |step| {
            let mut snap = limited(Some(8), 8)(step);
            let mut other = snap.processes[0].clone();
            other.pid = 61;
            other.gpu = 1;
            let mut cgroup = Cgroup::clone(other.cgroup.as_ref().unwrap());
            cgroup.path = "/kubepods/a".into();
            other.cgroup = Some(std::sync::Arc::new(cgroup));
            for (p, rank) in snap.processes.iter_mut().chain([&mut other]).zip(0..) {
                let env = LaunchEnv {
                    omp_num_threads: Some(8),
                    rank: Some(rank),
                    world_size: Some(2),
                    master_port: Some("29500".into()),
                    ..Default::default()
                };
                p.env = Some(env.into());
            }
            snap.processes.push(other);
            snap
        };
        let warnings = replay_default(0, two);
        let found = with_id(&warnings, "cpu-oversubscribed");
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(
            found[0].subject,
            Subject::Job {
                id: "job :29500".into()
            }
        );
        assert_eq!(evidence(found[0], "cgroup"), "/kubepods/a");
    }

    /// A cgroup v1 machine puts every process in the root cpuset, of all the host's CPUs: it
    /// limits nothing, yet "The cgroup of ... allows 2 CPUs" was raised on a 2-CPU host.
    #[test]
    fn a_cpuset_of_every_cpu_is_no_limit_and_a_smaller_one_is() {
        let cpuset = |count: u32| {
            move |step| {
                let mut snap = limited(None, 8)(step);
                let p = &mut snap.processes[0];
                let mut cgroup = Cgroup::clone(p.cgroup.as_ref().unwrap());
                cgroup.cpu_max = None;
                cgroup.cpuset_count = Some(count);
                p.cgroup = Some(std::sync::Arc::new(cgroup));
                snap
            }
        };
        let host = replay_default(0, cpuset(64));
        assert!(with_id(&host, "cpu-oversubscribed").is_empty(), "{host:#?}");
        let smaller = replay_default(0, cpuset(16));
        let w = find(
            &smaller,
            "cpu-oversubscribed",
            &Subject::Process { pid: 60 },
        );
        assert!(w.message.contains("allows 16 CPUs"), "{}", w.message);
    }

    #[test]
    fn threads_within_the_quota_are_quiet() {
        let ok = replay_default(0, limited(Some(1), 2));
        assert!(with_id(&ok, "cpu-oversubscribed").is_empty(), "{ok:#?}");
    }
}
