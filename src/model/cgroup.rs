//! Where a process runs below the host: its control group and the limits it sets, the container
//! or Kubernetes pod it belongs to (named by the cgroup, or, for the HPC runtimes that make no
//! cgroup of their own, by the process), its Slurm job, its `/dev/shm`, and the OOM kills seen
//! in its group. The collectors in `crate::collect` fill these in; the rules read them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A cgroup limit: a number, or `max` (no limit). JSON: the number, or the string `"max"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "LimitRepr", into = "LimitRepr")]
pub enum Limit {
    Max,
    Value(u64),
}

impl Limit {
    /// The number, `None` for `max`.
    pub fn value(self) -> Option<u64> {
        match self {
            Limit::Max => None,
            Limit::Value(v) => Some(v),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum LimitRepr {
    Value(u64),
    Text(String),
}

impl From<LimitRepr> for Limit {
    fn from(repr: LimitRepr) -> Self {
        match repr {
            LimitRepr::Value(v) => Limit::Value(v),
            LimitRepr::Text(_) => Limit::Max,
        }
    }
}

impl From<Limit> for LimitRepr {
    fn from(limit: Limit) -> Self {
        match limit {
            Limit::Max => LimitRepr::Text("max".to_string()),
            Limit::Value(v) => LimitRepr::Value(v),
        }
    }
}

/// `cpu.max` (v2) or `cpu.cfs_quota_us` / `cpu.cfs_period_us` (v1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuMax {
    /// Microseconds of CPU time per period; `None` for `max` (no quota).
    pub quota_us: Option<u64>,
    pub period_us: u64,
}

impl CpuMax {
    /// The CPUs the quota allows (quota / period); `None` without a quota.
    pub fn cpus(&self) -> Option<f64> {
        let quota = self.quota_us?;
        (self.period_us > 0).then(|| quota as f64 / self.period_us as f64)
    }
}

/// A container runtime's scope, named from the cgroup path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRef {
    /// `docker`, `containerd`, `cri-o`, `podman` or `libpod`.
    pub runtime: String,
    /// The container id (64 hex digits for Docker and containerd).
    pub id: String,
}

/// The container of one process that its cgroup does not name: Apptainer (Singularity) and
/// enroot run a Slurm job's tasks in the job's own cgroup, which processes outside the
/// container share, so this belongs to the process, not to its [`Cgroup`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessContainer {
    /// `apptainer`, `singularity` or `enroot`.
    pub runtime: String,
    /// The image's file name (Apptainer) or the container's (enroot: its root directory's
    /// name, `pyxis_42_train`); `None` where neither is known.
    pub name: Option<String>,
    /// The image path (Apptainer), or the root directory as the process's mount table gives
    /// it (enroot): within the file system that holds it, which is the host's path only where
    /// that file system is mounted at the host's `/` (a rootfs under a `/dev/shm` or `/raid`
    /// mount reads without that prefix).
    pub path: Option<String>,
}

/// A Kubernetes pod, from the kubelet's cgroup path and, where readable, the environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    pub uid: String,
    /// `guaranteed`, `burstable` or `besteffort`.
    pub qos: Option<String>,
    /// POD_NAME, else HOSTNAME (which Kubernetes sets to the pod name), where environ is readable.
    pub name: Option<String>,
}

/// One process of a cgroup, for naming the biggest members of a cgroup near its limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupMember {
    pub pid: u32,
    /// The short name from /proc/PID/stat.
    pub comm: String,
    pub ppid: u32,
    pub rss_bytes: u64,
}

/// A process's cgroup (v2 unified, or the v1 memory, cpu, cpuset and pids hierarchies) and its
/// limits. Every figure is `None` where its file is missing or unreadable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Cgroup {
    /// The path as /proc/PID/cgroup gives it (relative to the reader's cgroup namespace).
    pub path: String,
    /// 2 for the unified hierarchy, 1 for the legacy one (the memory controller's path).
    pub version: u8,
    pub memory_max: Option<Limit>,
    pub memory_current_bytes: Option<u64>,
    /// The memory limit that binds the cgroup's processes: of the cgroup's own memory.max and
    /// its ancestors' (a Slurm job's above its step, a pod's above its container), the one with
    /// the least room left. `None` where none of them sets a limit (or none is readable).
    pub memory_limit_bytes: Option<u64>,
    /// The memory.current of the cgroup that sets that limit: the use it applies to, that of the
    /// cgroup's whole subtree (its other children included), not this cgroup's own.
    pub memory_limit_used_bytes: Option<u64>,
    /// The path of the cgroup that sets that limit: [`Cgroup::path`] itself, or an ancestor's.
    pub memory_limit_path: Option<String>,
    pub memory_swap_max: Option<Limit>,
    /// `oom_kill` of memory.events (v2) or memory.oom_control (v1, kernel 4.13+).
    pub oom_kills: Option<u64>,
    /// `max` of memory.events: how often usage hit memory.max (v1: memory.failcnt).
    pub memory_max_hits: Option<u64>,
    pub cpu_max: Option<CpuMax>,
    /// cpuset.cpus.effective (v1: cpuset.effective_cpus), as the kernel lists it: "0-7,16".
    pub cpuset_cpus: Option<String>,
    /// How many CPUs that list names.
    pub cpuset_count: Option<u32>,
    pub pids_max: Option<Limit>,
    pub container: Option<ContainerRef>,
    pub pod: Option<PodRef>,
    /// The Slurm job whose cgroup this is (`/slurm/uid_U/job_J/step_S`).
    pub slurm_job: Option<String>,
    pub slurm_step: Option<String>,
    /// How many processes cgroup.procs lists; read only while memory is near its limit.
    pub member_count: Option<u32>,
    /// The biggest members by RSS, largest first (at most a few); read with `member_count`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub biggest_members: Vec<CgroupMember>,
}

/// The memory limit that binds a cgroup's processes ([`Cgroup::memory_limit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimit<'a> {
    pub max_bytes: u64,
    /// The use it applies to: the memory.current of the cgroup that sets it.
    pub used_bytes: Option<u64>,
    /// The cgroup that sets it.
    pub path: &'a str,
    /// Set by an ancestor, not by the cgroup itself.
    pub inherited: bool,
}

impl Cgroup {
    /// The use over the limit that binds ([`Cgroup::memory_limit`]), when both are known.
    pub fn memory_fraction(&self) -> Option<f64> {
        let limit = self.memory_limit()?;
        Some(limit.used_bytes? as f64 / limit.max_bytes as f64)
    }

    /// The memory limit that binds: [`Cgroup::memory_limit_bytes`], the use it applies to and
    /// the cgroup that sets it. A snapshot without these (recorded before torchtop read the
    /// ancestors' limits, or built by a test) gives the cgroup's own memory.max and
    /// memory.current. `None` without a limit, or with a limit of 0 bytes.
    pub fn memory_limit(&self) -> Option<MemoryLimit<'_>> {
        let limit = match self.memory_limit_bytes {
            Some(max_bytes) => {
                let path = self.memory_limit_path.as_deref().unwrap_or(&self.path);
                MemoryLimit {
                    max_bytes,
                    used_bytes: self.memory_limit_used_bytes,
                    path,
                    inherited: path != self.path,
                }
            }
            None => MemoryLimit {
                max_bytes: self.memory_max?.value()?,
                used_bytes: self.memory_current_bytes,
                path: &self.path,
                inherited: false,
            },
        };
        (limit.max_bytes > 0).then_some(limit)
    }

    /// The CPUs the cgroup lets its processes use: the smaller of the quota and the cpuset.
    pub fn allowed_cpus(&self) -> Option<f64> {
        let quota = self.cpu_max.and_then(|c| c.cpus());
        let cpuset = self.cpuset_count.map(f64::from);
        match (quota, cpuset) {
            (Some(q), Some(c)) => Some(q.min(c)),
            (q, c) => q.or(c),
        }
    }

    /// What the cgroup is, shortly: "docker 3f2a1b9c0d4e", "pod 7c1e... (burstable)",
    /// "slurm job 4242", else the path's last component. Written where it is shown, without
    /// a String of its own (a warning that holds rewrites it every tick).
    pub fn label(&self) -> CgroupLabel<'_> {
        CgroupLabel(self)
    }
}

/// [`Cgroup::label`]'s words.
#[derive(Debug, Clone, Copy)]
pub struct CgroupLabel<'a>(&'a Cgroup);

impl fmt::Display for CgroupLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cgroup = self.0;
        if let Some(pod) = &cgroup.pod {
            match &pod.name {
                Some(name) => write!(f, "pod {name}")?,
                None => write!(f, "pod {}", ShortId(&pod.uid))?,
            }
            return match &pod.qos {
                Some(qos) => write!(f, " ({qos})"),
                None => Ok(()),
            };
        }
        if let Some(container) = &cgroup.container {
            return write!(f, "{} {}", container.runtime, ShortId(&container.id));
        }
        if let Some(job) = &cgroup.slurm_job {
            return write!(f, "slurm job {job}");
        }
        let last = cgroup.path.rsplit('/').find(|c| !c.is_empty());
        f.write_str(last.unwrap_or("/"))
    }
}

/// Where one process runs, for the CONTAINER column: its cgroup's label, but where the cgroup
/// names no container or pod and the process is in one of its own (Apptainer, enroot), that
/// container, after its Slurm job when it is a task of one: "job 4242 pytorch.sif".
#[derive(Debug, Clone, Copy)]
pub struct PlacementLabel<'a> {
    pub cgroup: Option<&'a Cgroup>,
    pub container: Option<&'a ProcessContainer>,
    pub slurm: Option<&'a SlurmTask>,
}

impl PlacementLabel<'_> {
    /// Whether there is anything to write.
    pub fn is_known(&self) -> bool {
        self.cgroup.is_some() || self.container.is_some()
    }

    /// Whether it names a container, a pod or a Slurm job, rather than only the host's cgroup
    /// (`session-3.scope`): what a one-line summary has room for.
    pub fn names_a_place(&self) -> bool {
        self.container.is_some()
            || self.slurm.is_some()
            || self
                .cgroup
                .is_some_and(|c| c.pod.is_some() || c.container.is_some() || c.slurm_job.is_some())
    }
}

impl fmt::Display for PlacementLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let named_by_cgroup = self
            .cgroup
            .is_some_and(|c| c.pod.is_some() || c.container.is_some());
        let (Some(container), false) = (self.container, named_by_cgroup) else {
            return self.cgroup.map_or(Ok(()), |c| c.label().fmt(f));
        };
        // The job first: the column is narrow, and on a cluster the job is what is looked for.
        let job = (self.cgroup.and_then(|c| c.slurm_job.as_deref()))
            .or_else(|| self.slurm.map(|task| task.job_id.as_str()));
        match job {
            Some(job) => write!(f, "job {job} ")?,
            None if container.name.is_some() => write!(f, "{} ", container.runtime)?,
            None => {}
        }
        f.write_str(container.name.as_deref().unwrap_or(&container.runtime))
    }
}

/// The first 12 characters of an id, as `docker ps` shows it.
struct ShortId<'a>(&'a str);

impl fmt::Display for ShortId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = (self.0.char_indices().nth(12)).map_or(self.0.len(), |(at, _)| at);
        f.write_str(&self.0[..end])
    }
}

/// The process's `/dev/shm`, as seen through /proc/PID/root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmInfo {
    pub size_bytes: Option<u64>,
    /// `None` where only the mount options were readable (no statfs of the mount itself).
    pub used_bytes: Option<u64>,
}

/// A Slurm job step's task, from SLURM_* in the environment or the cgroup path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SlurmTask {
    pub job_id: String,
    pub step: Option<String>,
    /// SLURM_PROCID: the task's rank in the step.
    pub proc_id: Option<u32>,
    /// SLURM_LOCALID: its rank on this node.
    pub local_id: Option<u32>,
    /// SLURM_NTASKS: the tasks of the step.
    pub ntasks: Option<u32>,
    pub user: Option<String>,
}

/// A process that was there at the previous sample and is gone, named in `oom-killed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VanishedProcess {
    pub pid: u32,
    pub comm: String,
    pub rss_bytes: Option<u64>,
}

/// The kernel's OOM killer ran: `oom_kill` rose in a cgroup of a GPU process, or in
/// /proc/vmstat for the whole host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomKillEvent {
    /// When torchtop saw the counter rise, seconds since the epoch.
    pub unix_seconds: f64,
    /// The cgroup's path, or `None` for the host's counter.
    pub cgroup: Option<String>,
    /// The cgroup's label ([`Cgroup::label`]), or `None` for the host.
    pub label: Option<String>,
    /// How many kills since the previous sample.
    pub kills: u64,
    /// The GPU processes and their children that vanished at that sample, biggest first.
    pub vanished: Vec<VanishedProcess>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_names_the_pod_the_container_the_job_or_the_last_component() {
        let at = |path: &str| Cgroup {
            path: path.into(),
            ..Default::default()
        };
        let pod = |name: Option<&str>, qos: Option<&str>| Cgroup {
            pod: Some(PodRef {
                uid: "7c1e2d3f-4a5b-6c7d-8e9f".into(),
                qos: qos.map(Into::into),
                name: name.map(Into::into),
            }),
            ..at("/kubepods/x")
        };
        let container = Cgroup {
            container: Some(ContainerRef {
                runtime: "docker".into(),
                id: "3f2a1b9c0d4e5f60718293a4b5c6d7e8".into(),
            }),
            ..at("/system.slice/docker-3f.scope")
        };
        let job = Cgroup {
            slurm_job: Some("4242".into()),
            ..at("/slurm/uid_1/job_4242")
        };
        let labels = [
            pod(Some("trainer-0"), Some("burstable")),
            pod(None, None),
            container,
            job,
            at("/user.slice/x.scope/"),
            at("/"),
        ]
        .map(|c| c.label().to_string());
        assert_eq!(
            labels,
            [
                "pod trainer-0 (burstable)",
                "pod 7c1e2d3f-4a5",
                "docker 3f2a1b9c0d4e",
                "slurm job 4242",
                "x.scope",
                "/",
            ]
        );
    }

    #[test]
    fn a_placement_label_keeps_the_job_and_the_cgroups_own_container_first() {
        let job = Cgroup {
            slurm_job: Some("4242".into()),
            ..Default::default()
        };
        let docker = Cgroup {
            container: Some(ContainerRef {
                runtime: "docker".into(),
                id: "3f2a1b9c0d4e5f60718293a4b5c6d7e8".into(),
            }),
            ..Default::default()
        };
        let sif = ProcessContainer {
            runtime: "apptainer".into(),
            name: Some("pytorch.sif".into()),
            path: None,
        };
        let enroot = ProcessContainer {
            runtime: "enroot".into(),
            name: None,
            path: None,
        };
        let task = SlurmTask {
            job_id: "77".into(),
            ..Default::default()
        };
        let label = |cgroup, container, slurm| {
            PlacementLabel {
                cgroup,
                container,
                slurm,
            }
            .to_string()
        };
        assert_eq!(label(Some(&job), Some(&sif), None), "job 4242 pytorch.sif");
        assert_eq!(label(Some(&job), Some(&enroot), None), "job 4242 enroot");
        assert_eq!(label(None, Some(&sif), Some(&task)), "job 77 pytorch.sif");
        assert_eq!(label(None, Some(&sif), None), "apptainer pytorch.sif");
        assert_eq!(label(None, Some(&enroot), None), "enroot");
        assert_eq!(
            label(Some(&docker), Some(&sif), None),
            "docker 3f2a1b9c0d4e"
        );
        assert_eq!(label(Some(&job), None, Some(&task)), "slurm job 4242");
        assert!(!PlacementLabel {
            cgroup: None,
            container: None,
            slurm: Some(&task)
        }
        .is_known());
    }
}
