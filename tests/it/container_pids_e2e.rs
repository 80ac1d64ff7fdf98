//! torchtop inside a container, end to end, with the fake NVML listing two GPU processes:
//! - the container's own procfs (its own pid namespace): a pid NVML gives that this /proc
//!   lacks (a host pid: another container's process, or this one's when the driver does not
//!   translate) is a row without host details, never someone else's details, and the header
//!   says why;
//! - a procfs of the host's pid namespace (`--pid=host`, `hostPID: true`): the process of a
//!   container is found under its host pid, with its details, and `NSpid` gives its pid inside
//!   its container (`ns_pids`).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::fake_nvml::{env_refs, ScenarioFile};
use common::pty::PtySession;
use common::{output_within_patience, PATIENCE};
use serde_json::Value;

/// The trainer's pid on the host, as NVML reports it.
const HOST_PID: u32 = 48213;
/// Its pid inside its container.
const INNER_PID: u32 = 7;
/// Another container's GPU process, on the host.
const OTHER_HOST_PID: u32 = 51007;
const DOCKER: &str =
    "/system.slice/docker-3f2a1b9c0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope";

fn write(root: &Path, path: &str, text: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A process under `pid` in the fixture's /proc, with `nspid` as its NSpid line.
fn process(root: &Path, pid: u32, nspid: &[u32]) {
    write(
        root,
        &format!("proc/{pid}/stat"),
        &format!(
            "{pid} (python3) S 1 {pid} 1 0 -1 4194304 0 0 0 0 500 100 0 0 20 0 4 0 50000 \
             2000000000 262144 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
        ),
    );
    let nspid: Vec<String> = nspid.iter().map(u32::to_string).collect();
    write(
        root,
        &format!("proc/{pid}/status"),
        &format!(
            "Name:\tpython3\nState:\tS (sleeping)\nPid:\t{pid}\nPPid:\t1\nUid:\t0\t0\t0\t0\nNSpid:\t{}\n",
            nspid.join("\t")
        ),
    );
    write(root, &format!("proc/{pid}/cmdline"), "python3\0train.py\0");
    write(root, &format!("proc/{pid}/environ"), "RANK=0\0");
    write(
        root,
        &format!("proc/{pid}/cgroup"),
        &format!("0::{DOCKER}\n"),
    );
}

/// torchtop's container: `.dockerenv`, and a /proc in which the trainer is `pid` with `nspid`.
fn container(pid: u32, nspid: &[u32]) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("torchtop-nspid-")
        .tempdir()
        .unwrap();
    let root = dir.path();
    write(root, ".dockerenv", "");
    write(root, "proc/uptime", "1000.00 3000.00\n");
    write(
        root,
        "proc/stat",
        "cpu  4000 0 1000 14000 0 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\n",
    );
    write(
        root,
        "proc/meminfo",
        "MemTotal:       65536000 kB\nMemAvailable:   40000000 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n",
    );
    write(root, "proc/loadavg", "1.00 1.00 1.00 2/300 4000\n");
    write(root, "proc/vmstat", "oom_kill 0\n");
    write(
        root,
        "sys/fs/cgroup/cgroup.controllers",
        "cpuset cpu io memory pids\n",
    );
    write(root, &format!("sys/fs/cgroup{DOCKER}/memory.max"), "max\n");
    process(root, pid, nspid);
    dir
}

/// `proc/self/ns/pid` of the fixture: the link the kernel gives torchtop's PID namespace.
fn pid_namespace(root: &Path, link: &str) {
    let path = root.join("proc/self/ns/pid");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(link, path).unwrap();
}

fn scenario() -> ScenarioFile {
    let mut text = String::from(
        "[system]\ndriver_version = \"550.54.15\"\n\n[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\n\
         memory_total_mib = 81559\nmemory_used_mib = 40960\nutilization_gpu = 90\n\n",
    );
    for pid in [HOST_PID, OTHER_HOST_PID] {
        text.push_str(&format!(
            "[[gpu.process]]\npid = {pid}\ntype = \"compute\"\nused_memory_mib = 8192\n\n"
        ));
    }
    ScenarioFile::new(&text)
}

fn assert_without_host_details(row: &Value) {
    assert_eq!(row["visible"], false, "{row:#}");
    assert_eq!(
        row["gpu_memory_bytes"],
        8192u64 << 20,
        "NVML's figure stays"
    );
    for field in ["command", "user", "cgroup", "ns_pids", "rss_bytes"] {
        assert_eq!(row[field], Value::Null, "{field}: {row:#}");
    }
}

#[test]
fn own_procfs_host_pids_show_without_host_details() {
    // The container's own procfs: the trainer is pid 7 here, with no outer pid to see.
    let root = container(INNER_PID, &[INNER_PID]);
    pid_namespace(root.path(), "pid:[4026532871]");
    let scenario = scenario();
    let doc = common::once_json_in(root.path(), &scenario);
    assert_eq!(doc["host"]["container"], "docker");
    assert_eq!(doc["host"]["pids_foreign"], true);
    assert_without_host_details(common::process_row(&doc, HOST_PID));
    assert_without_host_details(common::process_row(&doc, OTHER_HOST_PID));
    // Pid 7 is not taken for either GPU process.
    assert!(doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["pid"] != INNER_PID));

    let env = {
        let mut env = scenario.env();
        env.push((
            "TORCHTOP_FS_ROOT".to_string(),
            root.path().display().to_string(),
        ));
        env
    };
    let session = PtySession::spawn(&common::torchtop_binary(), &[], &env_refs(&env), 220, 40);
    assert!(
        session.wait_for(PATIENCE, |s| s.contains(
            "inside a container: no details for 2 GPU processes (host pids; --pid=host shows them)"
        )),
        "no container note:\n{}",
        session.screen()
    );
}

#[test]
fn host_procfs_finds_the_process_and_its_pid_inside_the_container() {
    // The host's procfs: the trainer is listed under its host pid, NSpid down to 7.
    let root = container(HOST_PID, &[HOST_PID, INNER_PID]);
    pid_namespace(root.path(), "pid:[4026531836]");
    let doc = common::once_json_in(root.path(), &scenario());
    // A review: in a container with `--pid=host`, a GPU process this /proc lacks (one that
    // has ended) was counted as a host pid the container could not see.
    assert_eq!(doc["host"]["container"], "docker");
    assert_eq!(
        doc["host"]["pids_foreign"],
        Value::Null,
        "{:#}",
        doc["host"]
    );
    let text = String::from_utf8_lossy(
        &output_within_patience(
            Command::new(common::torchtop_binary())
                .arg("--once")
                .envs(scenario().env())
                .env("TORCHTOP_FS_ROOT", root.path()),
        )
        .stdout,
    )
    .into_owned();
    assert!(!text.contains("inside a container"), "{text}");
    let trainer = common::process_row(&doc, HOST_PID);
    assert_eq!(trainer["visible"], true, "{trainer:#}");
    assert!(trainer["command"].as_str().unwrap().contains("train.py"));
    assert_eq!(trainer["ns_pids"], serde_json::json!([HOST_PID, INNER_PID]));
    assert_eq!(trainer["cgroup"]["container"]["runtime"], "docker");
    assert_without_host_details(common::process_row(&doc, OTHER_HOST_PID));
}

/// Inside a container with its own PID namespace, NVML's host pid can be the pid of an
/// unrelated process of the container (the same number, another namespace). That process's
/// details went on the GPU row, and `K` killed it. In a nested PID namespace no driver pid is
/// looked up in /proc.
#[test]
fn a_host_pid_is_never_taken_for_the_containers_process_of_that_number() {
    let root = container(HOST_PID, &[HOST_PID]);
    let doc_host = {
        pid_namespace(root.path(), "pid:[4026531836]");
        common::once_json_in(root.path(), &scenario())
    };
    assert_eq!(
        common::process_row(&doc_host, HOST_PID)["visible"],
        true,
        "the host's namespace: the pid is this /proc's"
    );
    std::fs::remove_file(root.path().join("proc/self/ns/pid")).unwrap();
    pid_namespace(root.path(), "pid:[4026532871]");
    let doc = common::once_json_in(root.path(), &scenario());
    assert_without_host_details(common::process_row(&doc, HOST_PID));
    assert_without_host_details(common::process_row(&doc, OTHER_HOST_PID));
}

/// A PID namespace of its own with no container runtime's mark (`unshare --pid`) still says
/// why the GPU processes have no details.
#[test]
fn a_pid_namespace_without_a_runtimes_mark_counts_as_a_container() {
    let root = container(INNER_PID, &[INNER_PID]);
    std::fs::remove_file(root.path().join(".dockerenv")).unwrap();
    pid_namespace(root.path(), "pid:[4026532871]");
    let doc = common::once_json_in(root.path(), &scenario());
    assert_eq!(doc["host"]["container"], "unknown", "{:#}", doc["host"]);
}

/// `--once` text said nothing of why two GPU processes had no details.
#[test]
fn once_text_says_why_host_pids_have_no_details() {
    let root = container(INNER_PID, &[INNER_PID]);
    pid_namespace(root.path(), "pid:[4026532871]");
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .arg("--once")
            .envs(scenario().env())
            .env("TORCHTOP_FS_ROOT", root.path()),
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("inside a container: no details for 2 GPU processes (host pids"),
        "{text}"
    );
}
