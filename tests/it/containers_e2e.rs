//! Containers, cgroups and Slurm end to end: the built binary under `TORCHTOP_FS_ROOT`, pointed
//! at a fixture tree written here in the kernel's formats (/proc, /sys/fs/cgroup v2,
//! /.dockerenv), with the fake NVML listing the fixture's pids as GPU processes.
//!
//! The tree: a Docker container (cgroup v2, 8 GiB limit, 7.6 GiB used, cpuset 0-3, 64 MiB
//! /dev/shm) holding a training process with 8 DataLoader workers; and a Slurm job 4242 of two
//! srun tasks known only from their SLURM_* environment.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::fake_nvml::ScenarioFile;
use common::json_stream_until;
use serde_json::Value;

const DOCKER_ID: &str = "3f2a1b9c0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
const GIB: u64 = 1 << 30;
const TRAINER: u32 = 1000;
const WORKERS: std::ops::RangeInclusive<u32> = 1001..=1008;
const SLURM_TASKS: [u32; 2] = [2000, 2001];

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, path: &str, text: &str) {
        let path = self.root().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn docker_cgroup(&self) -> PathBuf {
        self.root().join(format!(
            "sys/fs/cgroup/system.slice/docker-{DOCKER_ID}.scope"
        ))
    }

    /// A process: stat, status, cmdline, environ and cgroup, in the kernel's formats.
    fn process(&self, pid: u32, ppid: u32, comm: &str, rss_pages: u64, env: &str, cgroup: &str) {
        self.write(
            &format!("proc/{pid}/stat"),
            &format!(
                "{pid} ({comm}) S {ppid} {pid} {ppid} 0 -1 4194304 0 0 0 0 500 100 0 0 20 0 4 0 \
                 50000 2000000000 {rss_pages} 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 \
                 0 0 0 0 0\n"
            ),
        );
        self.write(
            &format!("proc/{pid}/status"),
            &format!("Name:\t{comm}\nState:\tS (sleeping)\nPid:\t{pid}\nPPid:\t{ppid}\nUid:\t0\t0\t0\t0\nNSpid:\t{pid}\t{}\n", pid - 999),
        );
        self.write(
            &format!("proc/{pid}/cmdline"),
            &format!("{comm}\0train.py\0"),
        );
        self.write(&format!("proc/{pid}/environ"), env);
        self.write(&format!("proc/{pid}/cgroup"), &format!("0::{cgroup}\n"));
    }

    fn new() -> Self {
        let fixture = Fixture {
            dir: tempfile::Builder::new()
                .prefix("torchtop-containers-")
                .tempdir()
                .unwrap(),
        };
        fixture.write(".dockerenv", "");
        fixture.write("proc/uptime", "1000.00 3000.00\n");
        fixture.write(
            "proc/stat",
            "cpu  4000 0 1000 14000 0 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\n\
             cpu2 1 0 1 1 0 0 0 0 0 0\ncpu3 1 0 1 1 0 0 0 0 0 0\ncpu4 1 0 1 1 0 0 0 0 0 0\n\
             cpu5 1 0 1 1 0 0 0 0 0 0\ncpu6 1 0 1 1 0 0 0 0 0 0\ncpu7 1 0 1 1 0 0 0 0 0 0\n",
        );
        fixture.write(
            "proc/meminfo",
            "MemTotal:       65536000 kB\nMemAvailable:   40000000 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n",
        );
        fixture.write("proc/loadavg", "1.00 1.00 1.00 2/300 4000\n");
        fixture.write("proc/vmstat", "nr_free_pages 100\noom_kill 3\n");

        let docker = format!("/system.slice/docker-{DOCKER_ID}.scope");
        fixture.process(
            TRAINER,
            1,
            "python3",
            786_432,
            "RANK=0\0WORLD_SIZE=1\0",
            &docker,
        );
        let workers: Vec<String> = WORKERS.map(|w| w.to_string()).collect();
        fixture.write(
            &format!("proc/{TRAINER}/task/{TRAINER}/children"),
            &(workers.join(" ") + " "),
        );
        fixture.write(
            &format!("proc/{TRAINER}/mountinfo"),
            "771 770 0:47 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755\n\
             775 771 0:51 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k\n",
        );
        std::fs::create_dir_all(fixture.root().join(format!("proc/{TRAINER}/root/dev/shm")))
            .unwrap();
        for worker in WORKERS {
            // 1 GiB each for the biggest, so the message names a worker.
            let pages = if worker == 1001 { 262_144 } else { 65_536 };
            fixture.process(worker, TRAINER, "pt_data_worker", pages, "", &docker);
        }
        let cgroup = fixture.docker_cgroup();
        std::fs::create_dir_all(&cgroup).unwrap();
        fixture.write(
            "sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory pids\n",
        );
        let files = [
            ("memory.max", "8589934592\n".to_string()),
            ("memory.current", format!("{}\n", 76 * GIB / 10)),
            ("memory.swap.max", "0\n".to_string()),
            (
                "memory.events",
                "low 0\nhigh 0\nmax 12\noom 0\noom_kill 0\noom_group_kill 0\n".to_string(),
            ),
            ("cpu.max", "max 100000\n".to_string()),
            ("cpuset.cpus.effective", "0-3\n".to_string()),
            ("pids.max", "4096\n".to_string()),
            (
                "cgroup.procs",
                std::iter::once(TRAINER)
                    .chain(WORKERS)
                    .map(|p| format!("{p}\n"))
                    .collect(),
            ),
        ];
        for (name, text) in files {
            std::fs::write(cgroup.join(name), text).unwrap();
        }

        let slurm = "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0";
        for (procid, pid) in SLURM_TASKS.into_iter().enumerate() {
            let env = format!(
                "SLURM_JOB_ID=4242\0SLURM_STEP_ID=0\0SLURM_PROCID={procid}\0SLURM_LOCALID={procid}\0\
                 SLURM_NTASKS=2\0SLURM_JOB_USER=alice\0OMP_NUM_THREADS=1\0"
            );
            fixture.process(pid, 1, "python3", 1000, &env, slurm);
        }
        fixture
    }
}

fn scenario() -> ScenarioFile {
    let process = |pid: u32, mib: u32| {
        format!("[[gpu.process]]\npid = {pid}\ntype = \"compute\"\nused_memory_mib = {mib}\nsm_percent = 50\n\n")
    };
    let mut text = String::from(
        "[system]\ndriver_version = \"550.54.15\"\n\n[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\n\
         memory_total_mib = 81559\nmemory_used_mib = 40960\nutilization_gpu = 90\n\n",
    );
    text.push_str(&process(TRAINER, 20480));
    for pid in SLURM_TASKS {
        text.push_str(&process(pid, 8192));
    }
    ScenarioFile::new(&text)
}

fn torchtop(fixture: &Fixture, scenario: &ScenarioFile, args: &[&str]) -> Command {
    let mut command = Command::new(common::torchtop_binary());
    command
        .args(args)
        .envs(scenario.env())
        .env("TORCHTOP_FS_ROOT", fixture.root());
    command
}

fn warning<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
    doc["warnings"].as_array()?.iter().find(|w| w["id"] == id)
}

#[test]
fn once_json_shows_the_container_its_limits_and_the_slurm_job() {
    let fixture = Fixture::new();
    let scenario = scenario();
    let doc = common::once_json_in(fixture.root(), &scenario);

    assert_eq!(doc["host"]["container"], "docker");
    assert_eq!(doc["host"]["oom_kill_count"], 3);
    let trainer = common::process_row(&doc, TRAINER);
    let cgroup = &trainer["cgroup"];
    assert_eq!(cgroup["version"], 2);
    assert_eq!(cgroup["memory_max"], 8 * GIB);
    assert_eq!(cgroup["memory_current_bytes"], 76 * GIB / 10);
    assert_eq!(cgroup["memory_swap_max"], 0);
    assert_eq!(cgroup["memory_max_hits"], 12);
    assert_eq!(cgroup["oom_kills"], 0);
    assert_eq!(
        cgroup["cpu_max"]["quota_us"],
        Value::Null,
        "cpu.max is \"max\""
    );
    assert_eq!(cgroup["cpuset_count"], 4);
    assert_eq!(cgroup["pids_max"], 4096);
    assert_eq!(cgroup["container"]["runtime"], "docker");
    assert_eq!(cgroup["container"]["id"], DOCKER_ID);
    assert_eq!(cgroup["member_count"], 9);
    assert_eq!(trainer["shm"]["size_bytes"], 64u64 << 20);
    assert_eq!(trainer["children_count"], 8);
    assert_eq!(trainer["ns_pids"], serde_json::json!([TRAINER, 1]));

    // cgroup-memory: 95% of the limit, naming the biggest members, a worker among them.
    let memory = warning(&doc, "cgroup-memory").unwrap_or_else(|| panic!("{doc:#}"));
    let message = memory["message"].as_str().unwrap();
    assert!(
        message.contains("docker 3f2a1b9c0d4e uses 7.6GiB of its 8.0GiB memory limit (95%)"),
        "{message}"
    );
    assert!(
        message.contains("pid 1001 pt_data_worker 1.0GiB (DataLoader worker of 1000)"),
        "{message}"
    );
    // shm-small: 64 MiB for 8 workers.
    let shm = warning(&doc, "shm-small").unwrap_or_else(|| panic!("{doc:#}"));
    assert!(shm["message"]
        .as_str()
        .unwrap()
        .contains("64.0MiB for 8 DataLoader workers"));
    assert!(shm["remedy"].as_str().unwrap().contains("--shm-size"));
    // cpu-oversubscribed: 8 workers + 4 OpenMP threads on a 4-CPU cpuset.
    let cpu = warning(&doc, "cpu-oversubscribed").unwrap_or_else(|| panic!("{doc:#}"));
    let message = cpu["message"].as_str().unwrap();
    assert!(message.contains("allows 4 CPUs"), "{message}");
    assert!(
        message.contains("8 DataLoader workers and 4 OpenMP threads"),
        "{message}"
    );
    // Nothing was killed yet.
    assert!(warning(&doc, "oom-killed").is_none(), "{doc:#}");

    // The Slurm job, grouped from the environment, with its task ranks.
    let slurm = common::process_row(&doc, SLURM_TASKS[1]);
    assert_eq!(slurm["slurm"]["job_id"], "4242");
    assert_eq!(slurm["slurm"]["proc_id"], 1);
    assert_eq!(slurm["slurm"]["user"], "alice");
    let job = doc["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == "slurm job 4242")
        .unwrap_or_else(|| panic!("{:#}", doc["jobs"]));
    let ranks: Vec<(u64, u64)> = job["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["pid"].as_u64().unwrap(), r["rank"].as_u64().unwrap()))
        .collect();
    assert_eq!(ranks, [(2000, 0), (2001, 1)]);
}

#[test]
fn a_rising_oom_kill_names_the_worker_that_vanished() {
    let fixture = Fixture::new();
    let scenario = scenario();
    let mut command = torchtop(&fixture, &scenario, &["--json", "-d", "0.5"]);
    let killed = fixture.root().join("proc/1008");
    let events = fixture.docker_cgroup().join("memory.events");
    let vmstat = fixture.root().join("proc/vmstat");
    let docs = json_stream_until(&mut command, |docs| {
        // Once torchtop has seen the worker, the kernel kills it.
        let seen = docs
            .iter()
            .any(|d| d["processes"].as_array().is_some_and(|p| !p.is_empty()));
        if seen && killed.exists() {
            std::fs::remove_dir_all(&killed).unwrap();
            std::fs::write(
                &events,
                "low 0\nhigh 0\nmax 13\noom 1\noom_kill 1\noom_group_kill 0\n",
            )
            .unwrap();
            std::fs::write(&vmstat, "nr_free_pages 100\noom_kill 4\n").unwrap();
        }
        docs.last().and_then(|d| warning(d, "oom-killed")).is_some()
    });
    let last = docs.last().unwrap();
    let killed = warning(last, "oom-killed").unwrap();
    assert_eq!(killed["severity"], "critical");
    assert_eq!(killed["subject"]["pid"], TRAINER, "{killed:#}");
    let message = killed["message"].as_str().unwrap();
    assert!(
        message.contains("killed 1 process in docker 3f2a1b9c0d4e"),
        "{message}"
    );
    assert!(
        message.contains("gone since: pid 1008 pt_data_worker (256.0MiB)"),
        "{message}"
    );
    // The cgroup's kill is the host's too: no second warning about the host.
    let all: Vec<&Value> = last["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["id"] == "oom-killed")
        .collect();
    assert_eq!(all.len(), 1, "{all:#?}");
}

/// A Slurm job's memory limit set on the job's cgroup, above its tasks' (slurmstepd's layout),
/// whose own memory.max is "max": the tasks' rows carry the job's limit and the job's use, and
/// `cgroup-memory` warns about the job, saying where the limit is set. Before, the tasks'
/// cgroup had no limit as far as torchtop could tell, and nothing warned however near the job
/// came to its limit.
#[test]
fn a_slurm_job_s_limit_above_its_tasks_binds_them() {
    let fixture = Fixture::new();
    let job = "/system.slice/slurmstepd.scope/job_4242";
    let task = format!("{job}/step_0/user/task_0");
    let levels = [
        ("/system.slice".to_string(), "max\n".to_string(), 40 * GIB),
        (
            "/system.slice/slurmstepd.scope".to_string(),
            "max\n".to_string(),
            31 * GIB / 2,
        ),
        (job.to_string(), format!("{}\n", 16 * GIB), 31 * GIB / 2),
        (format!("{job}/step_0"), "max\n".to_string(), 15 * GIB),
        (format!("{job}/step_0/user"), "max\n".to_string(), 2 * GIB),
        (task.clone(), "max\n".to_string(), 2 * GIB),
    ];
    for (path, max, current) in levels {
        fixture.write(&format!("sys/fs/cgroup{path}/memory.max"), &max);
        fixture.write(
            &format!("sys/fs/cgroup{path}/memory.current"),
            &format!("{current}\n"),
        );
    }
    let scenario = scenario();
    let doc = common::once_json_in(fixture.root(), &scenario);

    let about_the_job = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| {
            w["id"] == "cgroup-memory"
                && w["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("slurm job 4242"))
        })
        .unwrap_or_else(|| panic!("no cgroup-memory warning about the job: {doc:#}"));
    let message = about_the_job["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "uses 15.5GiB of its 16.0GiB memory limit (97%), set on {job}"
        )),
        "{message}"
    );

    let cgroup = &common::process_row(&doc, SLURM_TASKS[0])["cgroup"];
    assert_eq!(cgroup["path"], task.as_str());
    assert_eq!(cgroup["memory_max"], "max", "the task's own");
    assert_eq!(cgroup["memory_current_bytes"], 2 * GIB, "the task's own");
    assert_eq!(cgroup["memory_limit_bytes"], 16 * GIB);
    assert_eq!(cgroup["memory_limit_used_bytes"], 31 * GIB / 2);
    assert_eq!(cgroup["memory_limit_path"], job);
    // The container's limit is its own.
    let docker = &common::process_row(&doc, TRAINER)["cgroup"];
    assert_eq!(docker["memory_limit_bytes"], 8 * GIB);
    assert_eq!(docker["memory_limit_path"], docker["path"]);
}
