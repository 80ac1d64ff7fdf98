//! Apptainer and enroot containers on a Slurm node, end to end: the built binary's
//! `--once --json` under `TORCHTOP_FS_ROOT`, pointed at a fixture tree in the kernel's formats,
//! with the fake NVML listing three GPU processes of Slurm job 4242. Neither runtime makes a
//! cgroup of its own, so all three share the job's cgroup:
//! - one in an Apptainer container (APPTAINER_* in its environment);
//! - one in an enroot container started by pyxis (`/.lock` at its root, its own mount
//!   namespace, its root directory `/var/lib/enroot/data/pyxis_4242_train` in mountinfo);
//! - one in neither, beside them in the job;
//! - one on the host carrying APPTAINER_* (Slurm's `--export=ALL` from an `apptainer shell`),
//!   and one in a private mount namespace over the host's root, which holds a `/.lock`
//!   (`unshare -m`): neither is in a container.
//!
//! And torchtop itself inside each (`host.container`).

use crate::common;

use std::path::Path;

use common::fake_nvml::ScenarioFile;
use serde_json::{json, Value};

const APPTAINER: u32 = 3100;
const ENROOT: u32 = 3200;
const PLAIN: u32 = 3300;
const EXPORTED: u32 = 3400;
const PRIVATE: u32 = 3500;
const JOB_CGROUP: &str = "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0";

fn write(root: &Path, path: &str, bytes: &[u8]) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn mount_namespace(root: &Path, pid: &str, link: &str) {
    let path = root.join(format!("proc/{pid}/ns/mnt"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(link, path).unwrap();
}

/// A task of job 4242: stat, status, cmdline, environ, cgroup, and a root directory.
fn task(root: &Path, pid: u32, environ: &[u8], mount_ns: &str) {
    write(
        root,
        &format!("proc/{pid}/stat"),
        format!(
            "{pid} (python3) S 1 {pid} 1 0 -1 4194304 0 0 0 0 500 100 0 0 20 0 4 0 50000 \
             2000000000 262144 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
        )
        .as_bytes(),
    );
    write(
        root,
        &format!("proc/{pid}/status"),
        format!(
            "Name:\tpython3\nState:\tS (sleeping)\nPid:\t{pid}\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t{pid}\n"
        )
        .as_bytes(),
    );
    write(root, &format!("proc/{pid}/cmdline"), b"python3\0train.py\0");
    write(root, &format!("proc/{pid}/environ"), environ);
    write(
        root,
        &format!("proc/{pid}/cgroup"),
        format!("0::{JOB_CGROUP}\n").as_bytes(),
    );
    std::fs::create_dir_all(root.join(format!("proc/{pid}/root"))).unwrap();
    mount_namespace(root, &pid.to_string(), mount_ns);
}

/// Makes `proc/PID/root` a link to pid 1's: a process whose root is the host's.
fn host_root(root: &Path, pid: u32) {
    let path = root.join(format!("proc/{pid}/root"));
    std::fs::remove_dir(&path).unwrap();
    std::os::unix::fs::symlink(root.join("proc/1/root"), path).unwrap();
}

/// The node: pid 1 in the host's mount namespace and root, the tasks, the job's cgroup.
fn node() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("torchtop-hpc-")
        .tempdir()
        .unwrap();
    let root = dir.path();
    write(root, "proc/uptime", b"1000.00 3000.00\n");
    write(
        root,
        "proc/stat",
        b"cpu  4000 0 1000 14000 0 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\n",
    );
    write(
        root,
        "proc/meminfo",
        b"MemTotal:       65536000 kB\nMemAvailable:   40000000 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n",
    );
    write(root, "proc/loadavg", b"1.00 1.00 1.00 2/300 4000\n");
    write(root, "proc/vmstat", b"oom_kill 0\n");
    write(
        root,
        "sys/fs/cgroup/cgroup.controllers",
        b"cpuset cpu io memory pids\n",
    );
    write(
        root,
        &format!("sys/fs/cgroup{JOB_CGROUP}/memory.max"),
        b"max\n",
    );
    mount_namespace(root, "1", "mnt:[4026531841]");
    write(root, "proc/1/root/.lock", b"");
    mount_namespace(root, "self", "mnt:[4026531841]");
    let slurm = "SLURM_JOB_ID=4242\0SLURM_STEP_ID=0\0SLURM_PROCID=0\0";
    let apptainer_env = format!(
        "PATH=/usr/bin\0{slurm}APPTAINER_CONTAINER=/scratch/img/pytorch-24.05.sif\0\
         APPTAINER_NAME=pytorch-24.05.sif\0"
    );
    task(
        root,
        APPTAINER,
        apptainer_env.as_bytes(),
        "mnt:[4026532101]",
    );
    task(
        root,
        ENROOT,
        format!("PATH=/usr/bin\0{slurm}").as_bytes(),
        "mnt:[4026532201]",
    );
    write(root, &format!("proc/{ENROOT}/root/.lock"), b"");
    write(
        root,
        &format!("proc/{ENROOT}/mountinfo"),
        b"2104 1985 259:2 /var/lib/enroot/data/pyxis_4242_train / rw,nosuid,relatime - ext4 /dev/nvme0n1p2 rw\n\
          2105 2104 0:5 / /dev rw,nosuid - devtmpfs udev rw,size=4096k\n",
    );
    task(
        root,
        PLAIN,
        format!("PATH=/usr/bin\0{slurm}").as_bytes(),
        "mnt:[4026531841]",
    );
    task(root, EXPORTED, apptainer_env.as_bytes(), "mnt:[4026531841]");
    host_root(root, EXPORTED);
    task(
        root,
        PRIVATE,
        format!("PATH=/usr/bin\0{slurm}").as_bytes(),
        "mnt:[4026532301]",
    );
    host_root(root, PRIVATE);
    dir
}

fn scenario() -> ScenarioFile {
    let mut text = String::from(
        "[system]\ndriver_version = \"550.54.15\"\n\n[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\n\
         memory_total_mib = 81559\nmemory_used_mib = 40960\nutilization_gpu = 90\n\n",
    );
    for pid in [APPTAINER, ENROOT, PLAIN, EXPORTED, PRIVATE] {
        text.push_str(&format!(
            "[[gpu.process]]\npid = {pid}\ntype = \"compute\"\nused_memory_mib = 8192\n\n"
        ));
    }
    ScenarioFile::new(&text)
}

fn once(root: &Path) -> Value {
    common::once_json_in(root, &scenario())
}

#[test]
fn apptainer_and_enroot_tasks_name_their_container_beside_the_slurm_job() {
    let root = node();
    let doc = once(root.path());
    let apptainer = common::process_row(&doc, APPTAINER);
    assert_eq!(
        apptainer["container"],
        json!({
            "runtime": "apptainer",
            "name": "pytorch-24.05.sif",
            "path": "/scratch/img/pytorch-24.05.sif",
        }),
        "{apptainer:#}"
    );
    let enroot = common::process_row(&doc, ENROOT);
    assert_eq!(
        enroot["container"],
        json!({
            "runtime": "enroot",
            "name": "pyxis_4242_train",
            "path": "/var/lib/enroot/data/pyxis_4242_train",
        }),
        "{enroot:#}"
    );
    let plain = common::process_row(&doc, PLAIN);
    assert_eq!(plain["container"], Value::Null, "{plain:#}");
    let exported = common::process_row(&doc, EXPORTED);
    assert_eq!(exported["container"], Value::Null, "{exported:#}");
    let private = common::process_row(&doc, PRIVATE);
    assert_eq!(private["container"], Value::Null, "{private:#}");
    for row in [apptainer, enroot, plain, exported, private] {
        // The cgroup stays the job's, naming no container, and the task keeps its job.
        assert_eq!(row["cgroup"]["path"], JOB_CGROUP, "{row:#}");
        assert_eq!(row["cgroup"]["container"], Value::Null, "{row:#}");
        assert_eq!(row["cgroup"]["slurm_job"], "4242", "{row:#}");
        assert_eq!(row["slurm"]["job_id"], "4242", "{row:#}");
    }
    assert_eq!(doc["host"]["container"], Value::Null, "{:#}", doc["host"]);
}

#[test]
fn torchtop_inside_apptainer_or_enroot_names_the_runtime() {
    let root = node();
    write(root.path(), ".singularity.d/env/90-environment.sh", b"");
    assert_eq!(once(root.path())["host"]["container"], "apptainer");

    let root = node();
    write(root.path(), ".lock", b"");
    assert_eq!(
        once(root.path())["host"]["container"],
        Value::Null,
        "a /.lock in the host's own mount namespace"
    );
    std::fs::remove_file(root.path().join("proc/self/ns/mnt")).unwrap();
    mount_namespace(root.path(), "self", "mnt:[4026532201]");
    let host = root.path().join("proc/1/root");
    std::fs::rename(&host, root.path().join("host-root")).unwrap();
    std::os::unix::fs::symlink(root.path(), &host).unwrap();
    assert_eq!(
        once(root.path())["host"]["container"],
        Value::Null,
        "a mount namespace of its own over the host's root (PrivateTmp=)"
    );
    std::fs::remove_file(&host).unwrap();
    std::fs::rename(root.path().join("host-root"), &host).unwrap();
    let doc = once(root.path());
    assert_eq!(doc["host"]["container"], "enroot");
    // No PID namespace: the driver's pids are this /proc's, found with their details.
    assert_eq!(
        doc["host"]["pids_foreign"],
        Value::Null,
        "{:#}",
        doc["host"]
    );
    assert_eq!(common::process_row(&doc, ENROOT)["visible"], true);
}
