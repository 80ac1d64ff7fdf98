//! Batch schedulers: a process's Slurm task (from SLURM_* in its environment, else its cgroup
//! path) and its Kubernetes pod's name (from POD_NAME or HOSTNAME).
//!
//! Slurm's cgroup plugin puts a step's tasks in `/slurm/uid_U/job_J/step_S/...` (cgroup v1;
//! `/slurm_NODE/...` with several slurmd) or `/system.slice/slurmstepd.scope/job_J/step_S/...`
//! (cgroup v2). Only the environment gives the task's ranks; the cgroup path gives the job to
//! users who may not read another user's environment.

use crate::model::{Cgroup, LaunchEnv, SlurmTask};

/// The Slurm job and step a cgroup path names.
pub(crate) fn slurm_from_path(path: &str) -> Option<(String, Option<String>)> {
    let mut components = path.split('/').filter(|c| !c.is_empty());
    components.find(|c| c.starts_with("slurm"))?;
    let mut job = None;
    let mut step = None;
    for component in components {
        if let Some(id) = component.strip_prefix("job_") {
            job = Some(id);
        } else if let Some(id) = component.strip_prefix("step_") {
            step = Some(id);
        }
    }
    let plain =
        |s: &&str| !s.is_empty() && s.len() <= 32 && s.chars().all(|c| c.is_ascii_alphanumeric());
    let job = job.filter(plain)?.to_string();
    Some((job, step.filter(plain).map(str::to_string)))
}

/// The process's Slurm task: the environment's, else the job its cgroup names.
pub(crate) fn slurm_task(env: Option<&LaunchEnv>, cgroup: Option<&Cgroup>) -> Option<SlurmTask> {
    if let Some(env) = env.filter(|e| e.slurm_job_id.is_some()) {
        return Some(SlurmTask {
            job_id: env.slurm_job_id.clone()?,
            step: env
                .slurm_step_id
                .clone()
                .or_else(|| cgroup.and_then(|c| c.slurm_step.clone())),
            proc_id: env.slurm_procid,
            local_id: env.slurm_localid,
            ntasks: env.slurm_ntasks,
            user: env.slurm_job_user.clone(),
        });
    }
    let cgroup = cgroup?;
    Some(SlurmTask {
        job_id: cgroup.slurm_job.clone()?,
        step: cgroup.slurm_step.clone(),
        ..Default::default()
    })
}

/// Names the pod of `cgroup` from the environment: POD_NAME, else HOSTNAME.
pub(crate) fn name_pod(cgroup: &mut Cgroup, env: Option<&LaunchEnv>) {
    let (Some(pod), Some(env)) = (cgroup.pod.as_mut(), env) else {
        return;
    };
    pod.name = env.pod_name.clone().or_else(|| env.hostname.clone());
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
        assert_eq!(slurm_from_path("/slurm/uid_0/job_a b"), None);
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
}
