//! `cpu-oversubscribed`: the training processes of one cgroup run more DataLoader workers and
//! OpenMP threads than the CPUs its cpu.max quota or cpuset allows, so they queue for CPU time
//! (throttled by the quota, or time-sliced on the cpuset).
//!
//! Each training process counts its workers (its children) plus its intra-op threads:
//! OMP_NUM_THREADS where its environment says, else what torch picks without it, the CPUs of
//! the cpuset (OpenMP honours affinity) or else of the host (a quota is invisible to it).

use serde::{Deserialize, Serialize};

use crate::config::NonNegative;
use crate::model::{GpuProcess, Severity, Warning};

use super::cgroup_memory::{job_processes_by_cgroup, kind_of, subject_of};
use super::{fmt_opt, warning, Inputs};

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

pub(crate) fn check(inputs: &Inputs, config: &CpuOversubscribedConfig) -> Vec<Warning> {
    job_processes_by_cgroup(inputs.snapshot)
        .into_values()
        .filter_map(|members| oversubscribed(inputs, &members, config))
        .collect()
}

fn oversubscribed(
    inputs: &Inputs,
    processes: &[&GpuProcess],
    config: &CpuOversubscribedConfig,
) -> Option<Warning> {
    let cgroup = processes.first()?.cgroup.as_ref()?;
    let allowed = cgroup.allowed_cpus()?;
    let host_cpus = inputs.snapshot.host.cpu_count;
    let default_threads = cgroup.cpuset_count.or(host_cpus)?;
    let mut workers = 0u64;
    let mut threads = 0u64;
    let mut assumed = false;
    for process in processes {
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
        format!("{threads} OpenMP threads (torch's default where OMP_NUM_THREADS is unset)")
    } else {
        format!("{threads} OpenMP threads")
    };
    let message = format!(
        "The {} of {} allows {} CPUs, but its {} training process{} run {workers} DataLoader \
         workers and {threads_said}",
        kind_of(cgroup),
        cgroup.label(),
        fmt_cpus(allowed),
        processes.len(),
        if processes.len() == 1 { "" } else { "es" },
    );
    let evidence = vec![
        ("cgroup", cgroup.path.clone()),
        (
            "cpu.max",
            cgroup.cpu_max.map_or("N/A".to_string(), |c| {
                c.cpus().map_or("max".to_string(), fmt_cpus)
            }),
        ),
        ("cpuset", fmt_opt(cgroup.cpuset_cpus.clone())),
        ("allowed cpus", fmt_cpus(allowed)),
        ("workers", workers.to_string()),
        ("openmp threads", threads.to_string()),
        ("host cpus", fmt_opt(host_cpus)),
    ];
    Some(warning(
        ID,
        Severity::Warn,
        subject_of(inputs, processes),
        message,
        evidence,
        REMEDY,
    ))
}

/// "4", "1.5".
fn fmt_cpus(cpus: f64) -> String {
    if cpus.fract() == 0.0 {
        format!("{cpus:.0}")
    } else {
        format!("{cpus:.1}")
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
    fn threads_within_the_quota_are_quiet() {
        let ok = replay_default(0, limited(Some(1), 2));
        assert!(with_id(&ok, "cpu-oversubscribed").is_empty(), "{ok:#?}");
    }
}
