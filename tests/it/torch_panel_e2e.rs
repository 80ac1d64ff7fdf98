//! The PyTorch panel end to end: the real binary against the fake NVML, with stand-in agents
//! (the stand-in torch under `torchtop run`). A process on two GPUs shows both of its devices
//! mapped to their physical GPUs; moving the selection between torch rows changes no panel's
//! height, and on a non-torch row the PyTorch panel is one line and the table has its rows;
//! `--once --json` lists a process whose agent spoke but which holds no GPU.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use common::{output_within_patience, wait_until, PATIENCE};
use serde_json::Value;
use tempfile::TempDir;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn agent_dir() -> (TempDir, PathBuf) {
    let scratch = tempfile::Builder::new()
        .prefix("torchtop-panel-")
        .tempdir()
        .expect("a scratch directory");
    let agents = scratch.path().join("agents");
    (scratch, agents)
}

/// A "training script" under `torchtop run` with the stand-in torch: it initializes CUDA on
/// `devices` (a Python tuple; `None` stays on the CPU) and idles while its agent reports.
fn script(agents: &Path, devices: Option<&str>, visible: Option<&str>) -> KillOnDrop {
    script_with_env(agents, devices, visible, &[])
}

/// [`script`] with more environment (a rank's launcher variables, say).
fn script_with_env(
    agents: &Path,
    devices: Option<&str>,
    visible: Option<&str>,
    env: &[(&str, &str)],
) -> KillOnDrop {
    let init = devices.map_or(String::new(), |d| format!("torch.cuda._fake_init({d})\n"));
    let code = format!(
        "import time, torch, torchtop_agent\n{init}while True:\n    torchtop_agent.step()\n    time.sleep(0.05)\n"
    );
    let mut command = Command::new(common::torchtop_binary());
    command
        .args(["run", "--", "python3", "-c", &code])
        .env("PYTHONPATH", repo().join("tests/python/fake_torch"))
        .env("TORCHTOP_AGENT_DIR", agents)
        .env("TORCHTOP_AGENT_INTERVAL_MS", "100")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    if let Some(list) = visible {
        command.env("CUDA_VISIBLE_DEVICES", list);
    }
    let child = command.spawn().expect("torchtop run");
    let socket = agents.join(format!("{}.sock", child.id()));
    let child = KillOnDrop(child);
    wait_until(&format!("the agent socket {}", socket.display()), || {
        socket.exists()
    });
    child
}

/// Where the panels start: the rows of the table header, the PyTorch panel's title, the
/// history's title and the status line (the last row).
fn panel_rows(screen: &str) -> Option<[usize; 4]> {
    let lines: Vec<&str> = screen.lines().collect();
    let row = |needle: &str| lines.iter().position(|l| l.contains(needle));
    Some([
        row("PID USER")?,
        row(" PYTORCH")?,
        row("HIST")?,
        row("q quit")?,
    ])
}

#[test]
fn the_pytorch_panel_keeps_its_height_on_torch_rows_and_is_one_line_on_a_plain_row() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let trainer = script(&agents, Some("(0, 1)"), Some("1,2"));
    let plain = Sleepers::spawn(1);
    let (t, p) = (trainer.0.id(), plain.pid(0));
    let scenario = ScenarioFile::new(&format!(
        "[[gpu]]\nname = \"GPU zero\"\nmemory_total_mib = 81920\nmemory_used_mib = 20000\n\
         [[gpu.process]]\npid = {p}\nused_memory_mib = 1024\n\
         [[gpu]]\nname = \"GPU one\"\nmemory_total_mib = 81920\nmemory_used_mib = 30000\n\
         [[gpu.process]]\npid = {t}\nused_memory_mib = 4096\n\
         [[gpu]]\nname = \"GPU two\"\nmemory_total_mib = 81920\nmemory_used_mib = 40000\n\
         [[gpu.process]]\npid = {t}\nused_memory_mib = 3072\n"
    ));
    let mut env = scenario.env();
    env.push((
        "TORCHTOP_AGENT_DIR".to_string(),
        agents.display().to_string(),
    ));
    let mut session = PtySession::spawn(&common::torchtop_binary(), &[], &env_refs(&env), 120, 40);
    let torch_title = format!("PYTORCH pid {t}");
    let mapped = |s: &str| {
        s.contains(&torch_title) && s.contains("cuda:0 = GPU 1") && s.contains("cuda:1 = GPU 2")
    };
    assert!(
        session.wait_for(PATIENCE, mapped),
        "both devices of {t} mapped to GPUs 1 and 2:\n{}",
        session.screen()
    );
    let screen = session.screen();
    let first = panel_rows(&screen).unwrap_or_else(|| panic!("panels missing:\n{screen}"));
    let headroom = screen
        .lines()
        .find(|l| l.contains("cuda:0 = GPU 1"))
        .unwrap_or_default();
    // GPU 1: 81920 - 30000 MiB free of 81920 MiB.
    assert!(
        headroom.contains("total 80.0GiB") && headroom.contains("headroom 50.7GiB (63%)"),
        "{headroom}"
    );
    let plain_row = "no torchtop agent in this process";
    // Down to the trainer's second row, to the plain process, then back up twice.
    let (down, up): (&[u8], &[u8]) = (b"\x1b[B", b"\x1b[A");
    let steps = [
        (down, torch_title.as_str()),
        (down, plain_row),
        (up, torch_title.as_str()),
        (up, torch_title.as_str()),
    ];
    for (i, (key, shows)) in steps.iter().enumerate() {
        session.send(key);
        assert!(
            session.wait_for(PATIENCE, |s| s.contains(shows) && panel_rows(s).is_some()),
            "step {i}:\n{}",
            session.screen()
        );
        let screen = session.screen();
        let rows = panel_rows(&screen).unwrap();
        if *shows == plain_row {
            // The table grows down to the panel's one line, right above the status line.
            let [table, pytorch, history, status] = rows;
            assert_eq!(
                [table, history, status],
                [first[0], first[2], first[3]],
                "{screen}"
            );
            assert_eq!(pytorch + 1, status, "one line at step {i}:\n{screen}");
        } else {
            assert_eq!(rows, first, "a panel moved at step {i}:\n{screen}");
        }
    }
    session.send(b"q");
    session.wait_exit(PATIENCE).expect("q quits");
}

#[test]
fn once_json_lists_a_process_whose_agent_spoke_but_which_holds_no_gpu() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let cpu_only = script(&agents, None, None);
    let pid = cpu_only.0.id();
    let scenario = ScenarioFile::new(
        "[[gpu]]\nname = \"Idle GPU\"\nmemory_total_mib = 81920\nmemory_used_mib = 512\n",
    );
    let mut found: Option<Value> = None;
    // The agent reports a moment after its socket appears: ask again until it has.
    wait_until(&format!("--once --json to list pid {pid}"), || {
        let output = output_within_patience(
            Command::new(common::torchtop_binary())
                .args(["--once", "--json"])
                .envs(scenario.env())
                .env("TORCHTOP_AGENT_DIR", &agents),
        );
        let doc: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        found = doc["processes"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["pid"] == pid).cloned());
        found.as_ref().is_some_and(|r| !r["torch"].is_null())
    });
    let row = found.expect("listed");
    assert!(row["gpu"].is_null(), "no GPU: {row}");
    assert!(row["gpu_memory_bytes"].is_null(), "no GPU memory: {row}");
    assert_eq!(row["torch"]["devices"], serde_json::json!([]), "{row}");
    assert!(
        row["command"]
            .as_str()
            .is_some_and(|c| c.contains("python3")),
        "{row}"
    );
}

/// Two ranks of one job that hold no GPU (CPU ranks with gloo, or ranks before their first
/// CUDA call) are listed for their agents; before, the grouping into jobs saw only the
/// processes NVML lists, so `jobs` stayed empty and the JOB line and rank table never came.
#[test]
fn ranks_that_hold_no_gpu_yet_form_their_job() {
    if !common::require_program("python3") {
        return;
    }
    let (_scratch, agents) = agent_dir();
    let ranks: Vec<KillOnDrop> = (0..2)
        .map(|rank| {
            let rank = rank.to_string();
            script_with_env(
                &agents,
                None,
                None,
                &[
                    ("RANK", &rank),
                    ("LOCAL_RANK", &rank),
                    ("WORLD_SIZE", "2"),
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", "29533"),
                ],
            )
        })
        .collect();
    let pids: Vec<u32> = ranks.iter().map(|r| r.0.id()).collect();
    let scenario = ScenarioFile::new(
        "[[gpu]]\nname = \"Idle GPU\"\nmemory_total_mib = 81920\nmemory_used_mib = 512\n",
    );
    let mut job: Option<Value> = None;
    wait_until(
        "--once --json to group the two CPU ranks into a job",
        || {
            let output = output_within_patience(
                Command::new(common::torchtop_binary())
                    .args(["--once", "--json"])
                    .envs(scenario.env())
                    .env("TORCHTOP_AGENT_DIR", &agents),
            );
            let doc: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
            job = doc["jobs"].as_array().and_then(|jobs| {
                jobs.iter()
                    .find(|j| j["id"].as_str().is_some_and(|id| id.contains("29533")))
                    .cloned()
            });
            job.is_some()
        },
    );
    let job = job.expect("found");
    let ranks = job["ranks"].as_array().expect("ranks");
    let listed: Vec<u64> = ranks.iter().filter_map(|r| r["pid"].as_u64()).collect();
    assert_eq!(
        listed,
        pids.iter().map(|p| u64::from(*p)).collect::<Vec<_>>(),
        "{job}"
    );
    for rank in ranks {
        assert!(rank["gpu"].is_null(), "a rank without a GPU: {rank}");
    }
}
