//! An AMD MI300X node end to end: the fixture tree of `common::amd_fixture` (sysfs and
//! fdinfo in the kernel's formats) under `TORCHTOP_AMD_ROOT`, real child processes as the
//! GPU processes, and the fake NVML's H100 next to it, so a machine with both vendors shows
//! both: NVIDIA first, then the AMD cards in PCI order.

use crate::common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::amd_fixture::{write_drm_fd, write_mi300_node, write_mi300_processes, MI300_PDEVS};
use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use common::{json_stream_until, output_within_patience, PATIENCE};
use serde_json::Value;

const GIB: u64 = 1 << 30;

/// The node with the three processes on `pids[..3]` and, on `pids[3]`, a client whose
/// fdinfo lines are all malformed.
fn node(pids: &[u32]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_mi300_node(dir.path());
    write_mi300_processes(dir.path(), [pids[0], pids[1], pids[2]], 0);
    let malformed = format!(
        "drm-driver:\tamdgpu\ndrm-pdev:\t{}\ndrm-client-id:\tx1\ndrm-memory-vram:\tlots KiB\n\
         drm-engine-gfx:\t-4 ns\n\u{1b}]0;owned\u{7}: 12\n",
        MI300_PDEVS[1]
    );
    write_drm_fd(dir.path(), pids[3], 9, &malformed);
    dir
}

fn env(scenario: &ScenarioFile, root: &std::path::Path) -> Vec<(String, String)> {
    let mut env = scenario.env();
    env.push(("TORCHTOP_AMD_ROOT".into(), root.display().to_string()));
    env
}

fn row(doc: &Value, pid: u32, gpu: u64) -> &Value {
    doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid && p["gpu"] == gpu)
        .unwrap_or_else(|| panic!("no row for pid {pid} on GPU {gpu}: {:#}", doc["processes"]))
}

#[test]
fn once_json_shows_both_vendors_and_the_amd_processes() {
    let sleepers = Sleepers::spawn(4);
    let pids = sleepers.pids();
    let dir = node(&pids);
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &pids[..2]);
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["--once", "--json"])
            .envs(env(&scenario, dir.path())),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    let gpus = doc["gpus"].as_array().unwrap();
    let vendors: Vec<&str> = gpus.iter().map(|g| g["vendor"].as_str().unwrap()).collect();
    assert_eq!(vendors, ["nvidia", "amd", "amd"]);
    assert_eq!(doc["driver"]["amd_gpu_count"], 2);
    assert!(doc["driver"]["amd_smi"]
        .as_str()
        .unwrap()
        .contains("libamd_smi.so"));

    let mi300 = &gpus[1];
    assert_eq!(mi300["index"], 1);
    assert_eq!(mi300["vendor_index"], 0);
    assert_eq!(mi300["name"], "AMD Instinct MI300X");
    assert_eq!(mi300["bus_id"], MI300_PDEVS[0]);
    assert_eq!(mi300["uuid"], "GPU-5f4a9c12d3b7e801");
    assert_eq!(mi300["state"], "ok");
    assert_eq!(mi300["utilization_percent"], 93);
    assert_eq!(mi300["memory_used_bytes"], 150 * GIB);
    assert_eq!(mi300["memory_total_bytes"], 192 * GIB);
    assert_eq!(mi300["temperature_c"], 67);
    assert_eq!(mi300["power_w"], 612.0);
    assert_eq!(mi300["fan_percent"], Value::Null);
    assert_eq!(gpus[2]["utilization_percent"], 41);
    assert_eq!(gpus[2]["temperature_c"], 52);

    // Per-process VRAM, joined with /proc like any GPU process; pids[2] is on both cards.
    assert_eq!(row(&doc, pids[0], 1)["gpu_memory_bytes"], 48 * GIB);
    assert_eq!(row(&doc, pids[0], 1)["visible"], true);
    assert!(row(&doc, pids[0], 1)["command"]
        .as_str()
        .unwrap()
        .contains("sleep"));
    assert_eq!(row(&doc, pids[1], 2)["gpu_memory_bytes"], 16 * GIB);
    assert_eq!(row(&doc, pids[2], 1)["gpu_memory_bytes"], 4 * GIB);
    assert_eq!(row(&doc, pids[2], 2)["gpu_memory_bytes"], 4 * GIB);
    // Static counters over the first window: the engines did nothing, a real 0.
    assert_eq!(row(&doc, pids[0], 1)["sm_percent"], 0);
    // Malformed fdinfo: the row is there, its figures are null.
    let bad = row(&doc, pids[3], 2);
    assert_eq!(
        (&bad["gpu_memory_bytes"], &bad["sm_percent"]),
        (&Value::Null, &Value::Null)
    );
    // The NVIDIA GPU and its processes are as before.
    assert_eq!(gpus[0]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(row(&doc, pids[0], 0)["gpu_memory_bytes"], 30720u64 << 20);
}

/// Rewrites the fixture's engine counters as a real GPU would advance them, until dropped.
struct Engines {
    stop: Arc<AtomicBool>,
}

impl Engines {
    fn run(root: std::path::PathBuf, pids: [u32; 3]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                let elapsed = started.elapsed().as_nanos() as u64;
                write_mi300_processes(&root, pids, elapsed);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        Engines { stop }
    }
}

impl Drop for Engines {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn engine_time_becomes_a_share_in_the_json_stream() {
    let sleepers = Sleepers::spawn(4);
    let pids = sleepers.pids();
    let dir = node(&pids);
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &pids[..2]);
    let _engines = Engines::run(dir.path().to_path_buf(), [pids[0], pids[1], pids[2]]);
    let busy = |doc: &Value, pid: u32, gpu: u64| {
        doc["processes"].as_array().is_some_and(|rows| {
            rows.iter().any(|p| {
                p["pid"] == pid
                    && p["gpu"] == gpu
                    && p["sm_percent"].as_u64().is_some_and(|s| s > 0)
            })
        })
    };
    let docs = json_stream_until(
        Command::new(common::torchtop_binary())
            .args(["--json", "--delay", "0.5"])
            .envs(env(&scenario, dir.path())),
        |docs| {
            docs.last()
                .is_some_and(|d| busy(d, pids[0], 1) && busy(d, pids[1], 2))
        },
    );
    let last = docs.last().unwrap();
    for rowv in last["processes"].as_array().unwrap() {
        if let Some(share) = rowv["sm_percent"].as_u64() {
            assert!(share <= 100, "{rowv}");
        }
    }
}

#[test]
fn the_tui_shows_the_amd_cards_and_their_processes() {
    let sleepers = Sleepers::spawn(4);
    let pids = sleepers.pids();
    let dir = node(&pids);
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &pids[..2]);
    let env = env(&scenario, dir.path());
    let mut session = PtySession::spawn(&common::torchtop_binary(), &[], &env_refs(&env), 200, 50);
    let shown = |s: &str| {
        s.lines()
            .filter(|l| l.contains("AMD Instinct MI300X"))
            .count()
            == 2
            && s.contains("H100")
            && s.contains("ROCm #1")
            && s.contains(&pids[1].to_string())
    };
    assert!(
        session.wait_for(PATIENCE, shown),
        "no AMD node:\n{}",
        session.screen()
    );
    let screen = session.screen();
    let first = screen
        .lines()
        .find(|l| l.contains("AMD Instinct MI300X"))
        .unwrap();
    assert!(first.trim_start().starts_with('1'), "{first}");
    assert!(first.contains("93%") && first.contains("67"), "{first}");
    assert!(
        !screen.contains("owned"),
        "fdinfo text never reaches the screen"
    );
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).expect("q quits").success());
}
