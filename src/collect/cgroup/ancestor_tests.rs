//! Limits set above a process's cgroup, on fixture trees in the kernel's formats: a Slurm
//! job's above its step and task (v2 and v1), a Kubernetes pod's above its container, and which
//! of several limits binds.

use std::path::Path;
use std::time::Instant;

use super::{CgroupReader, SETTINGS_EVERY};

const GIB: u64 = 1 << 30;
const JOB: &str = "/slurm/uid_1000/job_42";
const TASK: &str = "/slurm/uid_1000/job_42/step_0/task_0";

fn write(root: &Path, path: &str, text: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn reader(root: &Path) -> CgroupReader {
    CgroupReader::new(root.join("proc"), root.join("sys/fs/cgroup"), 4096)
}

/// Process 9 in a Slurm task's cgroup (v2) whose only limit is the job's: 8 GiB, 7.6 GiB of it
/// in use by the job's steps, 1 GiB of it by the task.
fn slurm_v2() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "sys/fs/cgroup/cgroup.controllers",
        "cpu memory pids\n",
    );
    let cgroup = |path: &str, max: &str, current: u64| {
        write(root, &format!("sys/fs/cgroup{path}/memory.max"), max);
        write(
            root,
            &format!("sys/fs/cgroup{path}/memory.current"),
            &format!("{current}\n"),
        );
    };
    cgroup("/slurm", "max\n", 20 * GIB);
    cgroup("/slurm/uid_1000", "max\n", 20 * GIB);
    cgroup(JOB, &format!("{}\n", 8 * GIB), 76 * GIB / 10);
    cgroup("/slurm/uid_1000/job_42/step_0", "max\n", 3 * GIB);
    cgroup(TASK, "max\n", GIB);
    write(root, &format!("sys/fs/cgroup{TASK}/cgroup.procs"), "9\n");
    write(root, "proc/9/cgroup", &format!("0::{TASK}\n"));
    write(
        root,
        "proc/9/stat",
        "9 (python3) S 1 9 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 1000 262144 \
         18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0\n",
    );
    dir
}

/// The share that decides `cgroup-memory` and the member listing is the job's use over the
/// job's limit. Before, the task's cgroup read "max" and no share at all: no warning, ever,
/// however close the job came to its limit.
#[test]
fn a_slurm_task_without_a_limit_is_held_by_its_job_s() {
    let dir = slurm_v2();
    let (cgroup, _) = reader(dir.path()).of_process(9).unwrap();
    let share = cgroup.memory_fraction();
    assert!(
        share.is_some_and(|s| (s - 0.95).abs() < 1e-9),
        "{share:?}: {cgroup:#?}"
    );
    // Near the job's limit, the task's own members are named.
    assert_eq!(cgroup.member_count, Some(1));
}

#[test]
fn the_binding_limit_names_its_cgroup_and_the_use_it_applies_to() {
    let dir = slurm_v2();
    let (cgroup, _) = reader(dir.path()).of_process(9).unwrap();
    assert_eq!(cgroup.memory_max, Some(crate::model::Limit::Max), "its own");
    assert_eq!(cgroup.memory_current_bytes, Some(GIB), "its own");
    assert_eq!(cgroup.memory_limit_bytes, Some(8 * GIB));
    assert_eq!(cgroup.memory_limit_used_bytes, Some(76 * GIB / 10));
    assert_eq!(cgroup.memory_limit_path.as_deref(), Some(JOB));
    let limit = cgroup.memory_limit().unwrap();
    assert!(limit.inherited);
}

/// cgroup v1: the job's memory.limit_in_bytes and usage_in_bytes, the task's "unlimited"
/// (the largest page-aligned i64).
#[test]
fn v1_ancestors_bind_as_v2_ones_do() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let memory = |path: &str, limit: &str, usage: u64| {
        let base = format!("sys/fs/cgroup/memory{path}");
        write(root, &format!("{base}/memory.limit_in_bytes"), limit);
        write(
            root,
            &format!("{base}/memory.usage_in_bytes"),
            &format!("{usage}\n"),
        );
    };
    let unlimited = "9223372036854771712\n";
    memory("/slurm", unlimited, 20 * GIB);
    memory("/slurm/uid_1000", unlimited, 20 * GIB);
    memory(JOB, &format!("{}\n", 8 * GIB), 76 * GIB / 10);
    memory("/slurm/uid_1000/job_42/step_0", unlimited, 3 * GIB);
    memory(TASK, unlimited, GIB);
    write(root, "proc/9/cgroup", &format!("4:memory:{TASK}\n"));
    let (cgroup, _) = reader(root).of_process(9).unwrap();
    assert_eq!(cgroup.version, 1);
    assert_eq!(cgroup.memory_limit_bytes, Some(8 * GIB));
    assert_eq!(cgroup.memory_limit_used_bytes, Some(76 * GIB / 10));
    assert_eq!(cgroup.memory_limit_path.as_deref(), Some(JOB));
}

/// A Kubernetes pod's limit above a container that sets none (the kubelet's systemd layout).
#[test]
fn a_pod_s_limit_binds_its_container() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "sys/fs/cgroup/cgroup.controllers", "memory\n");
    let pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c1e2d3f_4a5b_6c7d_8e9f_0a1b2c3d4e5f.slice";
    let container = format!("{pod}/cri-containerd-3f2a1b9c0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope");
    for (path, max, current) in [
        ("/kubepods.slice", "max\n".to_string(), 30 * GIB),
        (
            "/kubepods.slice/kubepods-burstable.slice",
            "max\n".to_string(),
            30 * GIB,
        ),
        (pod, format!("{}\n", 4 * GIB), 39 * GIB / 10),
        (&container, "max\n".to_string(), 35 * GIB / 10),
    ] {
        write(root, &format!("sys/fs/cgroup{path}/memory.max"), &max);
        write(
            root,
            &format!("sys/fs/cgroup{path}/memory.current"),
            &format!("{current}\n"),
        );
    }
    write(root, "proc/9/cgroup", &format!("0::{container}\n"));
    let (cgroup, _) = reader(root).of_process(9).unwrap();
    assert!(cgroup.pod.is_some());
    assert_eq!(cgroup.memory_limit_bytes, Some(4 * GIB));
    assert_eq!(cgroup.memory_limit_used_bytes, Some(39 * GIB / 10));
    assert_eq!(cgroup.memory_limit_path.as_deref(), Some(pod));
}

/// Of several limits, the one with the least room left binds, each against its own cgroup's
/// use: a task's own 16 GiB with 2 GiB used leaves more room than its job's 10 GiB with
/// 9.5 GiB used by all its tasks. A change of limit is seen when the settings are read again.
#[test]
fn the_limit_with_the_least_room_left_binds() {
    let dir = slurm_v2();
    let root = dir.path();
    write(
        root,
        &format!("sys/fs/cgroup{TASK}/memory.max"),
        &format!("{}\n", 16 * GIB),
    );
    write(
        root,
        &format!("sys/fs/cgroup{TASK}/memory.current"),
        &format!("{}\n", 2 * GIB),
    );
    write(
        root,
        &format!("sys/fs/cgroup{JOB}/memory.max"),
        &format!("{}\n", 10 * GIB),
    );
    write(
        root,
        &format!("sys/fs/cgroup{JOB}/memory.current"),
        &format!("{}\n", 19 * GIB / 2),
    );
    let mut reader = reader(root);
    let t0 = Instant::now();
    let mut read = |at| {
        reader.new_refresh();
        let found = reader.of_known_process(9, 100, at, |_| None).unwrap();
        let c = found.cgroup;
        (
            c.memory_limit_bytes,
            c.memory_limit_used_bytes,
            c.memory_limit_path.clone(),
        )
    };
    assert_eq!(
        read(t0),
        (Some(10 * GIB), Some(19 * GIB / 2), Some(JOB.to_string()))
    );
    // The job's use moves: read each refresh.
    write(
        root,
        &format!("sys/fs/cgroup{JOB}/memory.current"),
        &format!("{}\n", 9 * GIB),
    );
    assert_eq!(
        read(t0),
        (Some(10 * GIB), Some(9 * GIB), Some(JOB.to_string()))
    );
    // The job's limit is raised: the task's own binds once the settings are read again.
    write(
        root,
        &format!("sys/fs/cgroup{JOB}/memory.max"),
        &format!("{}\n", 100 * GIB),
    );
    assert_eq!(
        read(t0).0,
        Some(10 * GIB),
        "settings are read every SETTINGS_EVERY"
    );
    assert_eq!(
        read(t0 + SETTINGS_EVERY),
        (Some(16 * GIB), Some(2 * GIB), Some(TASK.to_string()))
    );
    // No limit anywhere: none, not 0.
    write(root, &format!("sys/fs/cgroup{TASK}/memory.max"), "max\n");
    write(root, &format!("sys/fs/cgroup{JOB}/memory.max"), "max\n");
    assert_eq!(read(t0 + 2 * SETTINGS_EVERY), (None, None, None));
}
