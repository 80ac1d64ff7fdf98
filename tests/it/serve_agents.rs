//! The agent series of processes NVML does not list, with real Python processes (the agent and
//! the stand-in torch) marking steps: a CPU rank (gloo, no CUDA) and a rank on cuda:0 that the
//! fake NVML leaves out of its process list. `--once --json` lists both; the exposition of
//! `--once --format prometheus` and of `serve` (with NVML broken, `--nvml-lib /nonexistent`)
//! must carry their `torchtop_step`, `torchtop_step_time_seconds`, `torchtop_agent_age_seconds`
//! and, for the CUDA rank, `torchtop_allocator_*` series, without a `gpu` label. Two ranks on
//! `cuda:0` that NVML lists on two GPUs each keep their allocator series, on their own GPU.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::fake_nvml::ScenarioFile;
use common::prometheus::Serve;
use common::{output_within_patience, wait_until, PATIENCE};
use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One rank of a job of two: a Python process with the agent, marking a step every 50 ms;
/// killed on drop.
struct Rank(Child);

impl Rank {
    /// `devices` is the Python tuple of CUDA devices it initializes; `None` keeps it on the CPU.
    fn start(agents: &Path, rank: u32, devices: Option<&str>) -> Rank {
        let init = devices.map_or(String::new(), |d| format!("torch.cuda._fake_init({d})\n"));
        let script = format!(
            "import time, torch, torchtop_agent\n{init}torchtop_agent.start(interval_ms=100)\n\
             while True:\n    torchtop_agent.step()\n    time.sleep(0.05)\n"
        );
        let pythonpath = format!(
            "{}:{}",
            repo().join("assets/python").display(),
            repo().join("tests/python/fake_torch").display()
        );
        let child = Command::new("python3")
            .args(["-c", &script])
            .env("PYTHONPATH", pythonpath)
            .env("TORCHTOP_AGENT_DIR", agents)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", "29517")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 for a rank");
        let started = Rank(child);
        let socket = agents.join(format!("{}.sock", started.0.id()));
        wait_until(&format!("the agent socket {}", socket.display()), || {
            socket.exists()
        });
        started
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn torchtop(scenario: &ScenarioFile, agents: &Path, args: &[&str]) -> String {
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(args)
            .envs(scenario.env())
            .env("TORCHTOP_AGENT_DIR", agents)
            .stdin(Stdio::null()),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Whether `--once --json` lists `pid` without a GPU, with a step time from its agent.
fn listed_without_gpu(doc: &Value, pid: u32) -> bool {
    (doc["processes"].as_array().unwrap().iter())
        .any(|p| p["pid"] == pid && p["gpu"].is_null() && p["torch"]["step_time_seconds"].is_f64())
}

/// The exposition's line of `family` for `pid` (and `cuda_device`, when given).
fn series<'a>(text: &'a str, family: &str, pid: u32, cuda_device: Option<u32>) -> Option<&'a str> {
    let pid = format!("pid=\"{pid}\"");
    let device = cuda_device.map(|d| format!("cuda_device=\"{d}\""));
    text.lines().find(|line| {
        line.starts_with(&format!("{family}{{"))
            && line.contains(&pid)
            && device.as_ref().is_none_or(|d| line.contains(d))
    })
}

/// The series a review found missing, present for both ranks and without a `gpu` label.
fn assert_agent_series(text: &str, cpu_rank: u32, cuda_rank: u32) {
    let wanted = [
        ("torchtop_step", cpu_rank, None),
        ("torchtop_step_time_seconds", cpu_rank, None),
        ("torchtop_agent_age_seconds", cpu_rank, None),
        ("torchtop_step", cuda_rank, None),
        ("torchtop_step_time_seconds", cuda_rank, None),
        ("torchtop_agent_age_seconds", cuda_rank, None),
        ("torchtop_allocator_allocated_bytes", cuda_rank, Some(0)),
        ("torchtop_allocator_reserved_bytes", cuda_rank, Some(0)),
        ("torchtop_ooms_total", cuda_rank, Some(0)),
    ];
    for (family, pid, device) in wanted {
        let line = series(text, family, pid, device)
            .unwrap_or_else(|| panic!("no {family} for pid {pid} in:\n{text}"));
        assert!(!line.contains("gpu="), "a gpu label on {line}");
        assert!(line.contains("rank=\""), "no rank label on {line}");
    }
    // The CPU rank reports no CUDA device: no allocator series is made up for it.
    let cpu_allocator = series(text, "torchtop_allocator_allocated_bytes", cpu_rank, None);
    assert!(cpu_allocator.is_none(), "{text}");
}

/// A scratch directory (dropped with the test) and the agents' socket directory inside it.
fn agent_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let scratch = tempfile::Builder::new()
        .prefix("torchtop-serve-agents-")
        .tempdir()
        .expect("a scratch directory");
    let agents = scratch.path().join("agents");
    (scratch, agents)
}

#[test]
fn ranks_nvml_does_not_list_have_their_agent_series_in_once_and_serve() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let cpu_rank = Rank::start(&agents, 0, None);
    let cuda_rank = Rank::start(&agents, 1, Some("(0,)"));
    // One GPU whose process list names neither rank.
    let scenario = ScenarioFile::new(
        "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nmemory_total_mib = 81920\nmemory_used_mib = 512\n",
    );
    wait_until("--once --json to list both ranks without a GPU", || {
        let doc: Value =
            serde_json::from_str(&torchtop(&scenario, &agents, &["--once", "--json"])).unwrap();
        listed_without_gpu(&doc, cpu_rank.pid()) && listed_without_gpu(&doc, cuda_rank.pid())
    });
    let once = torchtop(&scenario, &agents, &["--once", "--format", "prometheus"]);
    assert_agent_series(&once, cpu_rank.pid(), cuda_rank.pid());

    // NVML broken: no process is a GPU process, and the agents still report.
    let mut env = scenario.env();
    env.push(("TORCHTOP_AGENT_DIR".into(), agents.display().to_string()));
    let serve = Serve::start(
        &["--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "-d", "0.2"],
        &[],
        &env,
    );
    let body = serve.wait_for_metrics(PATIENCE, |m| {
        [cpu_rank.pid(), cuda_rank.pid()]
            .iter()
            .all(|&pid| series(m, "torchtop_step_time_seconds", pid, None).is_some())
    });
    let nvml_down = (body.lines()).any(|l| l.starts_with("torchtop_nvml_up{") && l.ends_with(" 0"));
    assert!(nvml_down, "NVML should be down:\n{body}");
    assert_agent_series(&body, cpu_rank.pid(), cuda_rank.pid());
}

/// A review: two ranks on `cuda:0` each (no `CUDA_VISIBLE_DEVICES`, no UUID) that NVML lists on
/// GPU 0 and GPU 1, as where CUDA orders GPUs otherwise than NVML. The second rank's allocator
/// series were left out of `serve`, and `--once` text printed no allocator line for it. Now its
/// device is on the GPU NVML lists it on, in every output, and exported once.
#[test]
fn a_rank_whose_cuda_device_nvml_places_elsewhere_keeps_its_allocator_series() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let ranks = [
        Rank::start(&agents, 0, Some("(0,)")),
        Rank::start(&agents, 1, Some("(0,)")),
    ];
    let gpu = |pid: u32| {
        format!(
            "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nmemory_total_mib = 81920\n\
             memory_used_mib = 4096\n[[gpu.process]]\npid = {pid}\nused_memory_mib = 2048\n"
        )
    };
    let scenario = ScenarioFile::new(&(gpu(ranks[0].pid()) + &gpu(ranks[1].pid())));
    let mut env = scenario.env();
    env.push(("TORCHTOP_AGENT_DIR".into(), agents.display().to_string()));
    let serve = Serve::start(&["-d", "0.2"], &[], &env);
    let body = serve.wait_for_metrics(PATIENCE, |m| {
        (ranks.iter()).all(|r| series(m, "torchtop_step_time_seconds", r.pid(), None).is_some())
    });
    for (gpu, rank) in ranks.iter().enumerate() {
        for family in [
            "torchtop_allocator_allocated_bytes",
            "torchtop_alloc_retries_total",
            "torchtop_ooms_total",
        ] {
            let pid = format!("pid=\"{}\"", rank.pid());
            let lines: Vec<&str> = (body.lines())
                .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(&pid))
                .collect();
            assert_eq!(lines.len(), 1, "one {family} for rank {gpu}:\n{body}");
            let labels = format!("gpu=\"{gpu}\",cuda_device=\"0\"");
            assert!(lines[0].contains(&labels), "{labels} wanted: {}", lines[0]);
        }
    }

    let rank_1 = || {
        let doc: Value =
            serde_json::from_str(&torchtop(&scenario, &agents, &["--once", "--json"])).unwrap();
        (doc["processes"].as_array().unwrap().iter())
            .find(|p| p["pid"] == ranks[1].pid() && p["torch"]["devices"][0].is_object())
            .cloned()
    };
    let mut found = None;
    wait_until("--once --json to list rank 1's device", || {
        found = rank_1();
        found.is_some()
    });
    let rank_1 = found.unwrap();
    assert_eq!(rank_1["gpu"], 1, "{rank_1}");
    assert_eq!(rank_1["torch"]["devices"][0]["gpu"], 1, "{rank_1}");
    let text = torchtop(&scenario, &agents, &["--once"]);
    let allocator_lines = (text.lines())
        .filter(|l| l.contains("PyTorch") && l.contains("cuda:0 allocated"))
        .count();
    assert_eq!(
        allocator_lines, 2,
        "an allocator line for each rank:\n{text}"
    );
}
