//! Kubernetes end to end: a PyTorchJob of two pods on one node, as the kubelet lays them out
//! (cgroup v2, systemd driver: `kubepods.slice/kubepods-burstable.slice/...-podUID.slice/
//! cri-containerd-ID.scope`), each pod's trainer a GPU process of the fake NVML. One pod sets
//! POD_NAME through the Downward API, the other only has the HOSTNAME Kubernetes gives every
//! pod. Both ranks share MASTER_ADDR:MASTER_PORT, so torchtop groups them as one job across the
//! two pods, in `--once --json` and in the TUI.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::fake_nvml::{env_refs, ScenarioFile};
use common::pty::PtySession;
use common::{output_within_patience, PATIENCE};
use serde_json::Value;

const MASTER: u32 = 3100;
const WORKER: u32 = 3200;
const MASTER_UID: &str = "7c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f";
const WORKER_UID: &str = "9d2f3e4a-5b6c-7d8e-9f0a-1b2c3d4e5f60";
const JOB: &str = "job pj-master-0.pj:23456";

fn write(root: &Path, path: &str, text: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The kubelet's cgroup path of a burstable pod's container.
fn pod_cgroup(uid: &str, container: char) -> String {
    format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/\
         cri-containerd-{}.scope",
        uid.replace('-', "_"),
        container.to_string().repeat(64)
    )
}

/// A trainer process of one pod: stat, status, cmdline, environ and cgroup, in the kernel's
/// formats, and its cgroup directory with a memory limit.
fn trainer(root: &Path, pid: u32, env: &str, cgroup: &str) {
    write(
        root,
        &format!("proc/{pid}/stat"),
        &format!(
            "{pid} (python3) S 1 {pid} 1 0 -1 4194304 0 0 0 0 500 100 0 0 20 0 4 0 50000 \
             2000000000 262144 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
        ),
    );
    write(
        root,
        &format!("proc/{pid}/status"),
        &format!("Name:\tpython3\nState:\tS (sleeping)\nPid:\t{pid}\nPPid:\t1\nUid:\t0\t0\t0\t0\nNSpid:\t{pid}\t1\n"),
    );
    write(root, &format!("proc/{pid}/cmdline"), "python3\0train.py\0");
    write(root, &format!("proc/{pid}/environ"), env);
    write(
        root,
        &format!("proc/{pid}/cgroup"),
        &format!("0::{cgroup}\n"),
    );
    let dir = format!("sys/fs/cgroup{cgroup}");
    write(root, &format!("{dir}/memory.max"), "34359738368\n");
    write(root, &format!("{dir}/memory.current"), "4294967296\n");
    write(root, &format!("{dir}/cgroup.procs"), &format!("{pid}\n"));
}

/// The node: /proc basics, the two pods' trainers and their cgroups.
fn node() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("torchtop-k8s-")
        .tempdir()
        .unwrap();
    let root = dir.path();
    write(root, "proc/uptime", "1000.00 3000.00\n");
    write(
        root,
        "proc/stat",
        "cpu  4000 0 1000 14000 0 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\n",
    );
    write(
        root,
        "proc/meminfo",
        "MemTotal:       65536000 kB\nMemAvailable:   40000000 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n",
    );
    write(root, "proc/loadavg", "1.00 1.00 1.00 2/300 4000\n");
    write(root, "proc/vmstat", "nr_free_pages 100\noom_kill 0\n");
    write(
        root,
        "sys/fs/cgroup/cgroup.controllers",
        "cpuset cpu io memory pids\n",
    );
    let job = "MASTER_ADDR=pj-master-0.pj\0MASTER_PORT=23456\0WORLD_SIZE=2\0";
    trainer(
        root,
        MASTER,
        &format!("{job}RANK=0\0POD_NAME=pj-master-0\0HOSTNAME=ignored-when-pod-name-is-set\0"),
        &pod_cgroup(MASTER_UID, 'a'),
    );
    trainer(
        root,
        WORKER,
        &format!("{job}RANK=1\0HOSTNAME=pj-worker-0\0"),
        &pod_cgroup(WORKER_UID, 'b'),
    );
    dir
}

fn scenario() -> ScenarioFile {
    let mut text = String::from(
        "[system]\ndriver_version = \"550.54.15\"\n\n[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\n\
         memory_total_mib = 81559\nmemory_used_mib = 40960\nutilization_gpu = 90\n\n",
    );
    for pid in [MASTER, WORKER] {
        text.push_str(&format!(
            "[[gpu.process]]\npid = {pid}\ntype = \"compute\"\nused_memory_mib = 16384\nsm_percent = 50\n\n"
        ));
    }
    ScenarioFile::new(&text)
}

#[test]
fn once_json_names_both_pods_and_groups_their_ranks_as_one_job() {
    let node = node();
    let scenario = scenario();
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["--once", "--json"])
            .envs(scenario.env())
            .env("TORCHTOP_FS_ROOT", node.path()),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    let expected = [
        (MASTER, MASTER_UID, "pj-master-0", 'a'),
        (WORKER, WORKER_UID, "pj-worker-0", 'b'),
    ];
    for (pid, uid, name, container) in expected {
        let cgroup = &common::process_row(&doc, pid)["cgroup"];
        assert_eq!(cgroup["pod"]["uid"], uid, "{cgroup:#}");
        assert_eq!(cgroup["pod"]["qos"], "burstable");
        assert_eq!(cgroup["pod"]["name"], name, "POD_NAME first, else HOSTNAME");
        assert_eq!(cgroup["container"]["runtime"], "containerd");
        assert_eq!(cgroup["container"]["id"], container.to_string().repeat(64));
        assert_eq!(cgroup["memory_max"], 32u64 << 30);
    }
    let job = doc["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == common::job_of_mine(JOB))
        .unwrap_or_else(|| panic!("no {JOB:?} in {:#}", doc["jobs"]));
    let ranks: Vec<(u64, u64)> = job["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["pid"].as_u64().unwrap(), r["rank"].as_u64().unwrap()))
        .collect();
    assert_eq!(ranks, [(u64::from(MASTER), 0), (u64::from(WORKER), 1)]);
}

#[test]
fn the_tui_shows_each_pod_and_the_job_across_them() {
    let node = node();
    let scenario = scenario();
    // The CONTAINER column is hidden for new users; this user shows every column.
    let config = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::fs::write(config.path(), "[ui]\nhidden_columns = []\n").unwrap();
    let mut env = scenario.env();
    env.push((
        "TORCHTOP_FS_ROOT".to_string(),
        node.path().display().to_string(),
    ));
    let args = ["--config", config.path().to_str().unwrap()];
    let session = PtySession::spawn(&common::torchtop_binary(), &args, &env_refs(&env), 240, 50);
    let shown = |screen: &str| {
        let row_of = |pid: u32, pod: &str| {
            screen
                .lines()
                .any(|l| l.contains(&pid.to_string()) && l.contains(&format!("pod {pod}")))
        };
        row_of(MASTER, "pj-master-0")
            && row_of(WORKER, "pj-worker-0")
            && screen.lines().any(|l| {
                l.starts_with(&format!("JOB {} ", common::job_of_mine(JOB)))
                    && l.contains("r0")
                    && l.contains("r1")
            })
    };
    assert!(
        session.wait_for(PATIENCE, shown),
        "no pod names or job line:\n{}",
        session.screen()
    );
}
