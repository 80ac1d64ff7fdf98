//! End to end with the built binary, the fake NVML and real processes: a Python "training
//! script" under `torchtop run` (with the stand-in torch) shows its allocator figures in the JSON
//! and in the TUI, and the warning rules fire on an imbalanced 8-GPU job and on a leaking process
//! when the config's windows allow it, and stay quiet with the defaults.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use common::{json_stream_until, output_within_patience, wait_until, PATIENCE};
use serde_json::Value;
use tempfile::{NamedTempFile, TempDir};

const MIB: u64 = 1 << 20;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A private agent socket directory for one test, not made yet (`torchtop run` makes it), in a
/// scratch directory removed when the returned guard drops.
fn agent_dir() -> (TempDir, PathBuf) {
    let scratch = tempfile::Builder::new()
        .prefix("torchtop-e2e-")
        .tempdir()
        .expect("a scratch directory");
    let agents = scratch.path().join("agents");
    (scratch, agents)
}

/// A Python process that imports the stand-in torch, "uses" GPU 0 and idles: the agent comes
/// from `torchtop run`'s sitecustomize, not from the script.
struct TrainingScript {
    child: Child,
}

impl TrainingScript {
    fn start(agent_dir: &Path) -> Self {
        let script =
            "import time, torch\ntorch.cuda._fake_init((0,))\nwhile True:\n    time.sleep(0.05)\n";
        Self::run(agent_dir, script, &[("RANK", "0"), ("WORLD_SIZE", "1")])
    }

    /// `script` under `torchtop run`, with `env` besides.
    fn run(agent_dir: &Path, script: &str, env: &[(&str, &str)]) -> Self {
        let child = Command::new(common::torchtop_binary())
            .args(["run", "--", "python3", "-c", script])
            .env("PYTHONPATH", repo().join("tests/python/fake_torch"))
            .env("TORCHTOP_AGENT_DIR", agent_dir)
            .env("TORCHTOP_AGENT_INTERVAL_MS", "100")
            .env("LOCAL_RANK", "0")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .spawn()
            .expect("torchtop run");
        let started = TrainingScript { child };
        let socket = agent_dir.join(format!("{}.sock", started.pid()));
        wait_until(&format!("the agent socket {}", socket.display()), || {
            socket.exists()
        });
        started
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for TrainingScript {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn one_gpu_with(pid: u32, used_mib: u64) -> String {
    format!(
        "[[gpu]]\nname = \"Agent GPU\"\nmemory_total_mib = 81920\nmemory_used_mib = 8192\n\
         [[gpu.process]]\npid = {pid}\nused_memory_mib = {used_mib}\nsm_percent = 80\n"
    )
}

/// Runs torchtop to its end; fails if it runs past [`PATIENCE`].
fn torchtop(scenario: &ScenarioFile, agents: &Path, args: &[&str]) -> Vec<Value> {
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(args)
            .envs(scenario.env())
            .env("TORCHTOP_AGENT_DIR", agents),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // One pretty document with --once, one per line when streaming: read them all in turn.
    serde_json::Deserializer::from_slice(&output.stdout)
        .into_iter::<Value>()
        .map(|doc| doc.expect("valid JSON"))
        .collect()
}

/// A config file holding `text`, removed when the returned guard drops.
fn config_file(text: &str) -> NamedTempFile {
    let mut file = tempfile::Builder::new()
        .prefix("torchtop-e2e-")
        .suffix(".toml")
        .tempfile()
        .expect("a config file");
    file.write_all(text.as_bytes()).unwrap();
    file
}

/// The environment of rank `rank` of a two-rank job whose rendezvous is on `port`.
fn two_rank_env(port: &'static str, rank: &'static str) -> [(&'static str, &'static str); 4] {
    [
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", port),
        ("RANK", rank),
    ]
}

/// Streams `torchtop --json` until a snapshot carries the warning `id`, however slowly the
/// samples come; returns the snapshots up to that one.
fn warned(scenario: &ScenarioFile, agents: &Path, args: &[&str], id: &str) -> Vec<Value> {
    let mut command = Command::new(common::torchtop_binary());
    command
        .arg("--json")
        .args(args)
        .envs(scenario.env())
        .env("TORCHTOP_AGENT_DIR", agents);
    json_stream_until(&mut command, |docs| {
        docs.last()
            .is_some_and(|doc| warning_ids(doc).iter().any(|w| w == id))
    })
}

fn warning_ids(doc: &Value) -> Vec<String> {
    doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_script_under_torchtop_run_shows_its_allocator_in_the_json() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let script = TrainingScript::start(&agents);
    let scenario = ScenarioFile::new(&one_gpu_with(script.pid(), 2048));
    let docs = torchtop(&scenario, &agents, &["--once", "--json"]);
    let process = &docs[0]["processes"][0];
    assert_eq!(process["pid"], script.pid());
    let torch = &process["torch"];
    assert!(torch.is_object(), "no torch figures: {process}");
    assert_eq!(torch["rank"], 0);
    assert_eq!(torch["world_size"], 1);
    let device = &torch["devices"][0];
    assert_eq!(device["index"], 0);
    let allocated = device["allocated_bytes"].as_u64().unwrap();
    let reserved = device["reserved_bytes"].as_u64().unwrap();
    // The stand-in's figures: 100 MiB plus 1 MiB per read.
    assert!(
        allocated > 100 * MIB && allocated < 400 * MIB,
        "{allocated}"
    );
    assert!(device["peak_allocated_bytes"].as_u64().unwrap() > allocated);
    assert_eq!(device["ooms"], 0);
    let non_pytorch = device["non_pytorch_bytes"].as_u64().unwrap();
    assert_eq!(
        non_pytorch,
        2048 * MIB - reserved,
        "NVML's memory minus reserved"
    );

    // The stats change from one look to the next, once the agent has read them again.
    wait_until("the allocated bytes to grow", || {
        let later = torchtop(&scenario, &agents, &["--once", "--json"]);
        later[0]["processes"][0]["torch"]["devices"][0]["allocated_bytes"]
            .as_u64()
            .is_some_and(|later| later > allocated)
    });
}

/// Found by trying it beside a running job: the stream's first snapshot came before the agent's
/// figures, so a GPU filled by a training process's cache warned oom-risk (judged on NVML alone)
/// and cleared a tick later, leaving "the ones shown have cleared" in the TUI. The monitor's
/// first snapshot now waits for the agents it found, as `--once` does.
#[test]
fn the_first_snapshot_of_a_stream_has_the_agents_figures_and_no_passing_warning() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let script = TrainingScript::start(&agents);
    // 78 of 80 GiB in use, all of it the script's: NVML alone says the GPU is nearly full.
    let scenario = ScenarioFile::new(&format!(
        "[[gpu]]\nname = \"Agent GPU\"\nmemory_total_mib = 81920\nmemory_used_mib = 79872\n\
         [[gpu.process]]\npid = {}\nused_memory_mib = 79000\nsm_percent = 80\n",
        script.pid()
    ));
    let docs = torchtop(
        &scenario,
        &agents,
        &["--json", "-d", "0.5", "--samples", "3"],
    );
    assert_eq!(docs.len(), 3);
    for (i, doc) in docs.iter().enumerate() {
        let process = &doc["processes"][0];
        assert!(process["torch"].is_object(), "sample {i}: {process}");
        assert_eq!(warning_ids(doc), Vec::<String>::new(), "sample {i}: {doc}");
    }
}

/// Found trying the monitor as a user: started after a rank had been stopped (SIGSTOP), the
/// monitor listed the process as one with no agent. The agent's socket accepts the connection
/// (the kernel does) and the agent says nothing: the row now says so, and how long.
#[test]
fn a_process_stopped_before_the_monitor_started_has_a_silent_agent() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let script = TrainingScript::start(&agents);
    let scenario = ScenarioFile::new(&one_gpu_with(script.pid(), 2048));
    let pid = i32::try_from(script.pid()).unwrap();
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let stopped = &torchtop(&scenario, &agents, &["--once", "--json"])[0]["processes"][0];
    assert_eq!(stopped["state"], "T", "{stopped}");
    assert_eq!(stopped["torch"], Value::Null, "{stopped}");
    assert!(
        stopped["agent_silent_seconds"]
            .as_f64()
            .is_some_and(|s| s > 0.0),
        "{stopped}"
    );
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let resumed = &torchtop(&scenario, &agents, &["--once", "--json"])[0]["processes"][0];
    assert!(resumed["torch"].is_object(), "{resumed}");
    assert_eq!(resumed["agent_silent_seconds"], Value::Null, "{resumed}");
}

/// Tried as a user: one rank of a two-rank job killed while the other waited for it; nothing
/// said so before training-stalled's five minutes, and then not why. Rank 0 here steps while
/// rank 1 lives, as a rank stuck in its next collective would stop.
#[test]
fn a_rank_killed_while_the_other_waits_for_it_is_named() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let job = |rank| two_rank_env("29561", rank);
    let stepping = "import os, time, torch, torchtop_agent\ntorch.cuda._fake_init((0,))\n\
                    while True:\n    time.sleep(0.1)\n    torchtop_agent.step()\n";
    let rank1 = TrainingScript::run(&agents, stepping, &job("1"));
    let peer = rank1.pid().to_string();
    let waiting = "import os, time, torch, torchtop_agent\ntorch.cuda._fake_init((0,))\n\
                   peer = int(os.environ['PEER'])\nwhile True:\n    time.sleep(0.1)\n    \
                   try:\n        os.kill(peer, 0)\n    except ProcessLookupError:\n        \
                   continue\n    torchtop_agent.step()\n";
    let mut env = job("0").to_vec();
    env.push(("PEER", &peer));
    let rank0 = TrainingScript::run(&agents, waiting, &env);
    let scenario = ScenarioFile::new(&format!(
        "[[gpu]]\nname = \"A\"\nmemory_total_mib = 81920\nmemory_used_mib = 8192\n\
         [[gpu.process]]\npid = {}\nused_memory_mib = 4096\n\
         [[gpu]]\nname = \"B\"\nmemory_total_mib = 81920\nmemory_used_mib = 8192\n\
         [[gpu.process]]\npid = {}\nused_memory_mib = 4096\n",
        rank0.pid(),
        rank1.pid()
    ));
    let config = config_file("[rules.rank_gone]\nseconds = 2.0\n");
    let rank1_pid = rank1.pid();
    // The monitor sees the job whole and both ranks' steps move; then rank 1 is killed (and
    // reaped).
    let rank1 = std::cell::RefCell::new(Some(rank1));
    // The steps of both ranks, once both have one.
    let steps = |doc: &Value| -> Option<Vec<u64>> {
        let processes = doc["processes"].as_array().unwrap();
        (processes.iter())
            .map(|p| p["torch"]["step"].as_u64())
            .collect()
    };
    let stepped = |docs: &[Value]| match (docs.iter().find_map(steps), docs.last().and_then(steps))
    {
        (Some(first), Some(last)) => first.iter().zip(&last).all(|(a, b)| b > a),
        _ => false,
    };
    let mut command = Command::new(common::torchtop_binary());
    command
        .args(["--json", "-d", "0.5", "--config"])
        .arg(config.path())
        .envs(scenario.env())
        .env("TORCHTOP_AGENT_DIR", &agents);
    let docs = json_stream_until(&mut command, |docs| {
        let Some(last) = docs.last() else {
            return false;
        };
        if rank1.borrow().is_some() {
            if last["jobs"].as_array().is_some_and(|j| j.len() == 1) && stepped(docs) {
                drop(rank1.borrow_mut().take());
            }
            return false;
        }
        warning_ids(last).iter().any(|id| id == "rank-gone")
    });
    let last = docs.last().unwrap();
    let gone = (last["warnings"].as_array().unwrap().iter())
        .find(|w| w["id"] == "rank-gone")
        .unwrap();
    assert_eq!(gone["subject"]["kind"], "job");
    let message = gone["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("rank 1 (pid {rank1_pid}) of job 127.0.0.1:29561")),
        "{message}"
    );
    assert!(
        message.contains(&format!("rank 0 (pid {}) has not stepped for", rank0.pid())),
        "{message}"
    );
    // The job, down to rank 0, is still listed, with the rank that left.
    let jobs = last["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["ranks"].as_array().unwrap().len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["ranks"][0]["pid"], rank0.pid(), "{jobs:?}");
    let gone = &jobs[0]["gone"];
    assert_eq!(gone.as_array().map(Vec::len), Some(1), "{jobs:?}");
    assert_eq!(gone[0]["pid"], rank1_pid);
    assert_eq!(gone[0]["rank"], 1);
    assert!(
        gone[0]["gone_seconds"].as_f64().is_some_and(|s| s >= 2.0),
        "{gone}"
    );
}

/// Tried as a user: a rank whose agent runs before its first CUDA call (no GPU row, so the
/// sampler adds its row after the rules ran) was taken for a rank that had left, and once
/// rank 0 stood still for the bar (a collective waiting on it), rank-gone said "rank 1 left".
#[test]
fn a_rank_without_a_gpu_yet_is_not_taken_for_one_that_left() {
    if !common::require_program("python3") {
        return;
    }
    let (scratch, agents) = agent_dir();
    let job = |rank| two_rank_env("29562", rank);
    let no_cuda = "import time, torchtop_agent\nwhile True:\n    time.sleep(0.1)\n    \
                   torchtop_agent.step()\n";
    let rank1 = TrainingScript::run(&agents, no_cuda, &job("1"));
    // Rank 0 steps until the marker exists, then waits as in a collective.
    let marker = scratch.path().join("stop-stepping");
    let waiting = "import os, time, torch, torchtop_agent\ntorch.cuda._fake_init((0,))\n\
                   while True:\n    time.sleep(0.1)\n    \
                   if not os.path.exists(os.environ['MARKER']):\n        torchtop_agent.step()\n";
    let marker_text = marker.display().to_string();
    let mut env = job("0").to_vec();
    env.push(("MARKER", &marker_text));
    let rank0 = TrainingScript::run(&agents, waiting, &env);
    let scenario = ScenarioFile::new(&one_gpu_with(rank0.pid(), 4096));
    let config = config_file("[rules.rank_gone]\nseconds = 2.0\n");
    let step0 = |doc: &Value| {
        (doc["processes"].as_array().unwrap().iter())
            .find(|p| p["pid"] == rank0.pid())
            .and_then(|p| p["torch"]["step"].as_u64())
    };
    let whole = |doc: &Value| {
        doc["jobs"].as_array().is_some_and(|jobs| {
            jobs.len() == 1 && jobs[0]["ranks"].as_array().is_some_and(|r| r.len() == 2)
        })
    };
    // The index of the snapshot after which rank 0 was told to stop stepping.
    let stopped_at = std::cell::Cell::new(None);
    let mut command = Command::new(common::torchtop_binary());
    command
        .args(["--json", "-d", "0.5", "--config"])
        .arg(config.path())
        .envs(scenario.env())
        .env("TORCHTOP_AGENT_DIR", &agents);
    let docs = json_stream_until(&mut command, |docs| {
        let Some(last) = docs.last() else {
            return false;
        };
        match stopped_at.get() {
            None => {
                let first = docs.iter().find_map(step0);
                if whole(last) && first.is_some_and(|f| step0(last).is_some_and(|l| l > f)) {
                    std::fs::write(&marker, b"").unwrap();
                    stopped_at.set(Some(docs.len()));
                }
                false
            }
            // Rank 0 still for over twice the bar, its last steps' lag included.
            Some(at) => docs.len() >= at + 12,
        }
    });
    let tail = &docs[docs.len() - 4..];
    let steps: Vec<_> = tail.iter().map(step0).collect();
    assert!(
        steps.windows(2).all(|w| w[0].is_some() && w[0] == w[1]),
        "rank 0 stood still: {steps:?}"
    );
    assert!(whole(&tail[3]), "{}", tail[3]["jobs"]);
    for doc in &docs {
        let ids = warning_ids(doc);
        assert!(
            !ids.iter().any(|id| id == "rank-gone"),
            "{}",
            doc["warnings"]
        );
    }
    assert!(
        (tail[3]["processes"].as_array().unwrap().iter())
            .any(|p| p["pid"] == rank1.pid() && p["gpu"].is_null()),
        "rank 1 is listed without a GPU"
    );
}

#[test]
fn a_script_under_torchtop_run_shows_its_allocator_in_the_tui() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let script = TrainingScript::start(&agents);
    let scenario = ScenarioFile::new(&one_gpu_with(script.pid(), 2048));
    let mut env = scenario.env();
    env.push(("TORCHTOP_AGENT_DIR".into(), agents.display().to_string()));
    let session = PtySession::spawn(&common::torchtop_binary(), &[], &env_refs(&env), 200, 50);
    let panel = |s: &str| {
        s.contains(&script.pid().to_string())
            && [
                "allocated",
                "reserved",
                "inactive-split",
                "non-PyTorch",
                "retries",
            ]
            .iter()
            .all(|label| s.contains(label))
    };
    assert!(
        session.wait_for(PATIENCE, panel),
        "no allocator panel:\n{}",
        session.screen()
    );
}

#[test]
fn a_leaking_process_is_warned_about_when_the_window_allows() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let script = TrainingScript::start(&agents);
    let scenario = ScenarioFile::new(&one_gpu_with(script.pid(), 2048));
    let config =
        config_file("[rules.leak]\nwindow_seconds = 2.0\nmin_samples = 4\nmin_rise_mib = 4.0\n");
    let docs = warned(
        &scenario,
        &agents,
        &["-d", "0.4", "--config", config.path().to_str().unwrap()],
        "leak",
    );
    let last = docs.last().unwrap();
    let leak = last["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == "leak")
        .unwrap();
    assert_eq!(leak["subject"]["kind"], "process");
    assert_eq!(leak["subject"]["pid"], script.pid());
    assert!(leak["remedy"].as_str().unwrap().contains("snapshot"));

    // The same run with the default two-minute window stays quiet.
    let quiet = torchtop(
        &scenario,
        &agents,
        &["--json", "--samples", "4", "-d", "0.4"],
    );
    assert!(!warning_ids(quiet.last().unwrap()).contains(&"leak".to_string()));
}

/// Eight ranks of one job (RANK/WORLD_SIZE/MASTER_PORT in their environment), one per GPU,
/// with rank 5 holding far more memory than the others.
fn imbalanced_job() -> (Vec<Child>, ScenarioFile) {
    let ranks: Vec<Child> = (0..8)
        .map(|rank| {
            Command::new("sleep")
                .arg("600")
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("WORLD_SIZE", "8")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", "29555")
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut text = String::new();
    for (gpu, child) in ranks.iter().enumerate() {
        let used = if gpu == 5 { 60_000 } else { 20_000 };
        text.push_str(&format!(
            "[[gpu]]\nname = \"H100 #{gpu}\"\nmemory_total_mib = 81920\nmemory_used_mib = {}\nutilization_gpu = 90\n\
             [[gpu.process]]\npid = {}\nused_memory_mib = {used}\nsm_percent = 85\n",
            used + 500,
            child.id()
        ));
    }
    (ranks, ScenarioFile::new(&text))
}

#[test]
fn an_imbalanced_eight_gpu_job_is_warned_about_in_json_and_tui() {
    let (mut ranks, scenario) = imbalanced_job();
    let (_scratch, agents) = agent_dir();
    let config = config_file("[rules.imbalance]\nwindow_seconds = 1.0\n");
    let docs = warned(
        &scenario,
        &agents,
        &["-d", "0.4", "--config", config.path().to_str().unwrap()],
        "imbalance",
    );
    let last = docs.last().unwrap();
    let warning = last["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == "imbalance")
        .unwrap();
    assert_eq!(warning["subject"]["kind"], "job");
    assert_eq!(
        last["jobs"][0]["id"],
        common::job_of_mine("job 127.0.0.1:29555")
    );
    assert_eq!(last["jobs"][0]["ranks"].as_array().unwrap().len(), 8);
    assert!(
        warning["message"].as_str().unwrap().contains('5'),
        "{}",
        warning["message"]
    );

    let quiet = torchtop(
        &scenario,
        &agents,
        &["--json", "--samples", "4", "-d", "0.4"],
    );
    assert!(
        !warning_ids(quiet.last().unwrap()).contains(&"imbalance".to_string()),
        "default window is 30 s"
    );

    let mut env = scenario.env();
    env.push(("TORCHTOP_AGENT_DIR".into(), agents.display().to_string()));
    let args = ["--config", config.path().to_str().unwrap()];
    let session = PtySession::spawn(&common::torchtop_binary(), &args, &env_refs(&env), 200, 50);
    let job_line = format!("JOB {}", common::job_of_mine("job 127.0.0.1:29555"));
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("imbalance")
            && s.contains(&job_line)),
        "no imbalance in the warnings panel:\n{}",
        session.screen()
    );
    for rank in &mut ranks {
        let _ = rank.kill();
        let _ = rank.wait();
    }
}

/// GPU 1's calls block for an hour: that the four samples come out at all (within the
/// [`PATIENCE`] that `torchtop` allows) proves the stream does not wait for it.
#[test]
fn a_hung_gpu_raises_no_warning_from_its_stale_figures_and_the_stream_goes_on() {
    let sleepers = Sleepers::spawn(1);
    let text = format!(
        "[[gpu]]\nname = \"Healthy\"\nmemory_total_mib = 81920\nmemory_used_mib = 1024\nutilization_gpu = 90\n\
         [[gpu]]\nname = \"Stuck\"\nmemory_total_mib = 81920\nmemory_used_mib = 80000\nutilization_gpu = 0\n\
         hang = {{ after_s = 0, block_s = 3600 }}\n[[gpu.process]]\npid = {}\nused_memory_mib = 79000\n",
        sleepers.pids()[0]
    );
    let scenario = ScenarioFile::new(&text);
    let (_scratch, agents) = agent_dir();
    let docs = torchtop(
        &scenario,
        &agents,
        &["--json", "--samples", "4", "-d", "0.5"],
    );
    assert_eq!(docs.len(), 4);
    let last = docs.last().unwrap();
    assert_eq!(last["gpus"][0]["state"], "ok");
    assert_eq!(last["gpus"][1]["state"], "stale");
    let about_gpu1 = last["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["subject"]["kind"] == "gpu" && w["subject"]["index"] == 1)
        .count();
    assert_eq!(
        about_gpu1, 0,
        "warnings from a GPU never read: {}",
        last["warnings"]
    );
}
