//! Batch schedulers: a process's Slurm task (from SLURM_* in its environment, else its cgroup
//! path) and its Kubernetes pod's name (from POD_NAME or HOSTNAME).
//!
//! Slurm's cgroup plugin puts a step's tasks in `/slurm/uid_U/job_J/step_S/...` (cgroup v1;
//! `/slurm_NODE/...` with several slurmd) or `/system.slice/slurmstepd.scope/job_J/step_S/...`
//! (cgroup v2). Only the environment gives the task's ranks; the cgroup path gives the job to
//! users who may not read another user's environment.

use std::sync::Arc;

use crate::model::{Cgroup, LaunchEnv, SlurmTask};

/// The Slurm job and step a cgroup path names.
pub(crate) fn slurm_from_path(path: &str) -> Option<(String, Option<String>)> {
    let mut components = path.split('/').filter(|c| !c.is_empty());
    // Only where slurmd makes them: a user's delegated subtree (user@1000.service/...) may
    // hold a directory named slurm/job_4242 of its own making.
    let slurm_root = match components.next()? {
        "slurm" => true,
        first if first.starts_with("slurm_") => true,
        "system.slice" => components
            .next()
            .is_some_and(|c| c.ends_with("slurmstepd.scope")),
        _ => false,
    };
    if !slurm_root {
        return None;
    }
    let mut job = None;
    let mut step = None;
    // The first of each, as slurmd names them: below a step, the tree may be the job's user's
    // to shape, and a `job_4243` there must not make its tasks another user's job.
    for component in components {
        if let Some(id) = component.strip_prefix("job_") {
            job = job.or(Some(id));
        } else if let Some(id) = component.strip_prefix("step_") {
            step = step.or(Some(id));
        }
    }
    let plain =
        |s: &&str| !s.is_empty() && s.len() <= 32 && s.chars().all(|c| c.is_ascii_alphanumeric());
    let job = job.filter(plain)?.to_string();
    Some((job, step.filter(plain).map(str::to_string)))
}

/// The process's Slurm task: the environment's, else the job its cgroup names.
#[cfg(test)]
pub(crate) fn slurm_task(env: Option<&LaunchEnv>, cgroup: Option<&Cgroup>) -> Option<SlurmTask> {
    TaskView::of(env, cgroup).map(|view| view.to_task())
}

/// The process's Slurm task (the environment's, else the job its cgroup names), shared: `kept`
/// (the process's task as last joined) again when the environment and the cgroup still give
/// the same task, so that an unchanged task is not copied each refresh.
pub(crate) fn shared_slurm_task(
    env: Option<&LaunchEnv>,
    cgroup: Option<&Cgroup>,
    kept: Option<&Arc<SlurmTask>>,
) -> Option<Arc<SlurmTask>> {
    let view = TaskView::of(env, cgroup)?;
    match kept {
        Some(task) if view.is(task) => Some(Arc::clone(task)),
        _ => Some(Arc::new(view.to_task())),
    }
}

/// A Slurm task borrowed from where it is read.
struct TaskView<'a> {
    job_id: &'a str,
    step: Option<&'a str>,
    proc_id: Option<u32>,
    local_id: Option<u32>,
    ntasks: Option<u32>,
    user: Option<&'a str>,
}

impl<'a> TaskView<'a> {
    fn of(env: Option<&'a LaunchEnv>, cgroup: Option<&'a Cgroup>) -> Option<Self> {
        let cgroup_step = || cgroup.and_then(|c| c.slurm_step.as_deref());
        let cgroup_job = cgroup.and_then(|c| c.slurm_job.as_deref());
        // slurmd makes the cgroup; the environment is the process's own (or left over from a
        // job that ended): where both name a job and differ, the cgroup's is the job.
        let env = env.filter(|e| {
            e.slurm_job_id.is_some()
                && cgroup_job.is_none_or(|job| e.slurm_job_id.as_deref() == Some(job))
        });
        if let Some(env) = env {
            return Some(TaskView {
                job_id: env.slurm_job_id.as_deref()?,
                step: env.slurm_step_id.as_deref().or_else(cgroup_step),
                proc_id: env.slurm_procid,
                local_id: env.slurm_localid,
                ntasks: env.slurm_ntasks,
                // SLURM_JOB_USER names a user; only slurmd's cgroup of the same job vouches
                // for it, else it is the process's own word about someone else.
                user: env
                    .slurm_job_user
                    .as_deref()
                    .filter(|_| cgroup_job.is_some()),
            });
        }
        Some(TaskView {
            job_id: cgroup?.slurm_job.as_deref()?,
            step: cgroup_step(),
            proc_id: None,
            local_id: None,
            ntasks: None,
            user: None,
        })
    }

    fn is(&self, task: &SlurmTask) -> bool {
        self.job_id == task.job_id
            && self.step == task.step.as_deref()
            && (self.proc_id, self.local_id, self.ntasks)
                == (task.proc_id, task.local_id, task.ntasks)
            && self.user == task.user.as_deref()
    }

    fn to_task(&self) -> SlurmTask {
        SlurmTask {
            job_id: self.job_id.to_string(),
            step: self.step.map(str::to_string),
            proc_id: self.proc_id,
            local_id: self.local_id,
            ntasks: self.ntasks,
            user: self.user.map(str::to_string),
        }
    }
}

/// The name the environment gives the pod of `cgroup`: POD_NAME, else HOSTNAME. `None` where
/// the cgroup is no pod's or the environment is unreadable: the cgroup then stays as read.
pub(crate) fn pod_name<'a>(cgroup: &Cgroup, env: Option<&'a LaunchEnv>) -> Option<Option<&'a str>> {
    let (Some(_), Some(env)) = (cgroup.pod.as_ref(), env) else {
        return None;
    };
    Some(env.pod_name.as_deref().or(env.hostname.as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_paths_v1_and_v2() {
        assert_eq!(
            slurm_from_path("/slurm/uid_1000/job_4242/step_0/task_1"),
            Some(("4242".to_string(), Some("0".to_string())))
        );
        assert_eq!(
            slurm_from_path("/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0"),
            Some(("77".to_string(), Some("batch".to_string())))
        );
        assert_eq!(slurm_from_path("/user.slice/job_5"), None);
        assert_eq!(
            slurm_from_path("/slurm_node7/uid_0/job_8/step_0"),
            Some(("8".to_string(), Some("0".to_string())))
        );
        // A user's own subtree with a directory named like Slurm's is no Slurm job.
        assert_eq!(
            slurm_from_path(
                "/user.slice/user-1000.slice/user@1000.service/app.slice/slurm/job_4242/step_0"
            ),
            None
        );
        assert_eq!(slurm_from_path("/slurm/uid_0/job_a b"), None);
        // Below the step, a directory the job's user made names no other job.
        assert_eq!(
            slurm_from_path("/system.slice/slurmstepd.scope/job_77/step_0/user/job_78/step_9"),
            Some(("77".to_string(), Some("0".to_string())))
        );
    }

    #[test]
    fn environment_first_then_cgroup() {
        let env = LaunchEnv {
            slurm_job_id: Some("9".into()),
            slurm_procid: Some(3),
            slurm_ntasks: Some(8),
            ..Default::default()
        };
        let cgroup = Cgroup {
            slurm_job: Some("9".into()),
            slurm_step: Some("0".into()),
            ..Default::default()
        };
        let task = slurm_task(Some(&env), Some(&cgroup)).unwrap();
        assert_eq!((task.proc_id, task.ntasks), (Some(3), Some(8)));
        assert_eq!(task.step.as_deref(), Some("0"));
        let from_path = slurm_task(None, Some(&cgroup)).unwrap();
        assert_eq!(from_path.job_id, "9");
        assert_eq!(from_path.proc_id, None);
        assert_eq!(slurm_task(Some(&LaunchEnv::default()), None), None);
    }

    /// SLURM_JOB_ID=999 in a process that slurmd put in job 4242's cgroup: the environment
    /// was the process's own word, and won.
    #[test]
    fn the_cgroup_slurmd_made_names_the_job_over_the_environment() {
        let env = LaunchEnv {
            slurm_job_id: Some("999".into()),
            slurm_procid: Some(3),
            slurm_job_user: Some("mallory".into()),
            ..Default::default()
        };
        let cgroup = Cgroup {
            slurm_job: Some("4242".into()),
            slurm_step: Some("0".into()),
            ..Default::default()
        };
        let task = slurm_task(Some(&env), Some(&cgroup)).unwrap();
        assert_eq!(task.job_id, "4242");
        assert_eq!((task.proc_id, task.user.as_deref()), (None, None));
    }

    /// The admin review: a process of `nobody` outside any Slurm cgroup, its environment
    /// saying SLURM_JOB_USER=cloudsdk, was listed as cloudsdk's task in the JSON.
    #[test]
    fn the_job_s_user_is_named_only_where_slurmd_s_cgroup_vouches_for_the_job() {
        let env = LaunchEnv {
            slurm_job_id: Some("42".into()),
            slurm_job_user: Some("cloudsdk".into()),
            ..Default::default()
        };
        let alone = slurm_task(Some(&env), None).unwrap();
        assert_eq!(alone.user.as_deref(), None);
        let cgroup = Cgroup {
            slurm_job: Some("42".into()),
            ..Default::default()
        };
        let vouched = slurm_task(Some(&env), Some(&cgroup)).unwrap();
        assert_eq!(vouched.user.as_deref(), Some("cloudsdk"));
    }

    #[test]
    fn an_unchanged_task_is_shared_again() {
        let mut env = LaunchEnv {
            slurm_job_id: Some("9".into()),
            slurm_procid: Some(3),
            ..Default::default()
        };
        let first = shared_slurm_task(Some(&env), None, None).unwrap();
        let again = shared_slurm_task(Some(&env), None, Some(&first)).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        env.slurm_procid = Some(4);
        let moved = shared_slurm_task(Some(&env), None, Some(&first)).unwrap();
        assert_eq!((moved.job_id.as_str(), moved.proc_id), ("9", Some(4)));
        assert_eq!(shared_slurm_task(None, None, Some(&first)), None);
    }

    #[test]
    fn a_pod_is_named_from_pod_name_else_hostname() {
        let pod = Cgroup {
            pod: Some(crate::model::PodRef {
                uid: "u".into(),
                qos: None,
                name: None,
            }),
            ..Default::default()
        };
        let env = LaunchEnv {
            hostname: Some("h".into()),
            ..Default::default()
        };
        assert_eq!(pod_name(&pod, Some(&env)), Some(Some("h")));
        assert_eq!(pod_name(&pod, None), None);
        assert_eq!(pod_name(&Cgroup::default(), Some(&env)), None);
    }
}
