//! `torchtop --once` (text and JSON) as a script would run it: the built binary, no TTY, the fake
//! `libnvidia-ml.so.1` chosen by `--nvml-lib`/`TORCHTOP_NVML_LIB`, and real child processes as the
//! GPU processes.

use crate::common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::fake_nvml::{fake_nvml_library, ScenarioFile, Sleepers};
use common::{json_stream_until, output_within_patience};
use serde_json::Value;

/// Runs `torchtop --once` to its end (failing after [`PATIENCE`]); returns its output and how
/// long it ran, for lower bounds only.
fn run_once(scenario: &ScenarioFile, extra_args: &[&str]) -> (Output, Duration) {
    let env = scenario.env();
    let started = Instant::now();
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .arg("--once")
            .args(extra_args)
            .envs(env)
            .env_remove("NO_COLOR"),
    );
    (output, started.elapsed())
}

fn once_json(scenario: &ScenarioFile, extra_args: &[&str]) -> (Value, Duration) {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra_args);
    let (output, took) = run_once(scenario, &args);
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let doc = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    (doc, took)
}

fn gpu_block(name: &str, extra: &str) -> String {
    format!(
        "[[gpu]]\nname = \"{name}\"\nmemory_total_mib = 81920\nmemory_used_mib = 1024\nutilization_gpu = 10\n{extra}\n"
    )
}

#[test]
fn json_reports_the_scenario_values_and_joins_real_processes() {
    let sleepers = Sleepers::spawn(2);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &pids);
    let (doc, _) = once_json(&scenario, &[]);

    assert_eq!(doc["schema"], 1);
    assert!(doc["time"].as_str().unwrap().ends_with('Z'));
    let driver = &doc["driver"];
    assert_eq!(driver["nvml_loaded"], true);
    assert!(driver["error"].is_null());
    assert_eq!(driver["driver_version"], "550.54.15");
    assert_eq!(driver["cuda_version"], "12.4");
    assert_eq!(driver["library"], fake_nvml_library().display().to_string());

    let gpu = &doc["gpus"][0];
    assert_eq!(doc["gpus"].as_array().unwrap().len(), 1);
    assert_eq!(gpu["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(gpu["uuid"], "GPU-4d3f1c2a-6b7e-4f10-9a2b-0c1d2e3f4a5b");
    assert_eq!(gpu["bus_id"], "00000000:18:00.0");
    assert_eq!(gpu["state"], "ok");
    assert_eq!(gpu["utilization_percent"], 87);
    assert_eq!(gpu["memory_utilization_percent"], 45);
    assert_eq!(gpu["memory_used_bytes"], 40960u64 * 1024 * 1024);
    assert_eq!(gpu["temperature_c"], 64);
    assert_eq!(gpu["power_w"], 412.5);
    assert_eq!(gpu["power_limit_w"], 700.0);
    assert_eq!(gpu["fan_percent"], 40);
    assert_eq!(gpu["sm_clock_mhz"], 1755);
    assert_eq!(gpu["memory_clock_mhz"], 2619);
    assert_eq!(gpu["pcie_rx_kib_s"], 120000);
    assert_eq!(gpu["decoder_percent"], 3);
    assert_eq!(gpu["performance_state"], 0);
    assert_eq!(gpu["throttle_reasons"], serde_json::json!(["sw_power_cap"]));
    assert_eq!(gpu["ecc_volatile_corrected"], 2);

    let processes = doc["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2);
    let first = processes
        .iter()
        .find(|p| p["pid"] == pids[0])
        .expect("first pid listed");
    assert_eq!(first["gpu"], 0);
    assert_eq!(first["kind"], "compute");
    assert_eq!(first["gpu_memory_bytes"], 30720u64 * 1024 * 1024);
    assert_eq!(first["sm_percent"], 70);
    // The other shares of the same NVML process-utilization sample.
    assert_eq!(first["memory_bandwidth_percent"], 35);
    assert_eq!(first["encoder_percent"], 12);
    assert_eq!(first["decoder_percent"], 0);
    assert_eq!(first["visible"], true);
    assert_eq!(first["command"], "sleep 600");
    assert_eq!(first["ppid"], std::process::id());
    assert!(first["user"].is_string());
    assert!(first["rss_bytes"].as_u64().unwrap() > 0);
    assert!(first["torch"].is_null());

    let host = &doc["host"];
    assert!(host["memory"]["total_bytes"].as_u64().unwrap() > 0);
    assert!(host["memory"]["available_bytes"].as_u64().is_some());
    assert!(host["swap"]["total_bytes"].as_u64().is_some());
    assert!(host["vm"]["swappiness"].as_u64().is_some());
    assert!(host["vm"]["overcommit_memory"].as_u64().is_some());
    assert!(host["load"].is_object());
    assert!(doc["warnings"].is_array());
}

#[test]
fn a_moving_value_is_within_its_range() {
    let text = format!(
        "[system]\ntime_origin = \"wall\"\n{}",
        gpu_block(
            "Sine GPU",
            "utilization_memory = { fn = \"sine\", mean = 50, amplitude = 20, period_s = 10 }\npower_w = { fn = \"ramp\", from = 100, to = 300, duration_s = 60, repeat = true }"
        )
    );
    let scenario = ScenarioFile::new(&text);
    let (doc, _) = once_json(&scenario, &[]);
    let memory_util = doc["gpus"][0]["memory_utilization_percent"]
        .as_u64()
        .unwrap();
    assert!((30..=70).contains(&memory_util), "{memory_util}");
    let power = doc["gpus"][0]["power_w"].as_f64().unwrap();
    assert!((100.0..=300.0).contains(&power), "{power}");
}

#[test]
fn unsupported_fields_are_null_never_zero() {
    let sleepers = Sleepers::spawn(1);
    let scenario = ScenarioFile::from_fixture("na_fields.toml", &sleepers.pids());
    let (doc, _) = once_json(&scenario, &[]);
    let gpu = &doc["gpus"][0];
    let nulls: Vec<&str> = [
        "fan_percent",
        "power_w",
        "temperature_c",
        "ecc_volatile_corrected",
        "encoder_percent",
    ]
    .into_iter()
    .filter(|k| gpu[*k].is_null())
    .collect();
    assert!(
        nulls.len() >= 3,
        "expected unsupported fields to be null: {gpu}"
    );
    for key in nulls {
        assert!(!gpu[key].is_number(), "{key} must be null");
    }
}

#[test]
fn text_summary_works_without_a_tty() {
    let sleepers = Sleepers::spawn(2);
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &sleepers.pids());
    let (output, _) = run_once(&scenario, &[]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("[0] NVIDIA H100 80GB HBM3"), "{text}");
    assert!(text.contains("87%"), "{text}");
    assert!(text.contains(&sleepers.pids()[0].to_string()), "{text}");
    assert!(text.contains("host: CPU"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no escape codes in a pipe: {text:?}"
    );
}

#[test]
fn init_failure_is_a_clear_message_and_the_host_still_reports() {
    let scenario = ScenarioFile::new(&common::fake_nvml::fixture_text("init_failure.toml"));
    let (doc, _) = once_json(&scenario, &[]);
    assert_eq!(doc["driver"]["nvml_loaded"], false);
    let error = doc["driver"]["error"].as_str().unwrap();
    assert!(error.contains("driver is not running"), "{error}");
    assert!(doc["gpus"].as_array().unwrap().is_empty());
    assert!(doc["host"]["memory"]["total_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn a_missing_library_names_the_file_tried() {
    let output = output_within_patience(
        Command::new(common::torchtop_binary())
            .args(["--once", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])
            .env_remove("TORCHTOP_NVML_LIB"),
    );
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("NVML could not be loaded from /nonexistent/libnvidia-ml.so.1"),
        "{text}"
    );
    assert!(text.contains("host: CPU"), "{text}");
}

#[test]
fn a_bad_scenario_error_names_the_line() {
    let scenario = ScenarioFile::new(&common::fake_nvml::fixture_text("bad_scenario.toml"));
    let (doc, _) = once_json(&scenario, &[]);
    let error = doc["driver"]["error"].as_str().unwrap();
    assert!(error.contains("line 7"), "{error}");
}

#[test]
fn a_driver_with_zero_gpus_says_so() {
    let scenario = ScenarioFile::new("[system]\ndriver_version = \"550.54.15\"\n");
    let (doc, _) = once_json(&scenario, &[]);
    assert_eq!(doc["driver"]["nvml_loaded"], true);
    assert_eq!(doc["driver"]["gpu_count"], 0);
    assert!(doc["gpus"].as_array().unwrap().is_empty());
    let (output, _) = run_once(&scenario, &[]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("found no GPUs"), "{text}");
}

/// GPU 1's calls block for an hour: `--once` ending at all (within [`PATIENCE`]) proves it gave
/// up on them. It waited the timeout first (a lower bound, which load cannot break), and a longer
/// `--timeout` lets a GPU that is slow, not hung, answer.
#[test]
fn a_hung_gpu_is_given_up_on_after_the_timeout_and_reported_stale() {
    let scenario = ScenarioFile::new(&common::fake_nvml::fixture_text("hung_gpu.toml"));
    let (doc, took) = once_json(&scenario, &[]);
    assert!(
        took >= Duration::from_secs(2),
        "default wait is 2 s, took {took:?}"
    );
    assert_eq!(doc["gpus"][0]["state"], "ok");
    assert_eq!(doc["gpus"][1]["state"], "stale");

    let (doc, took) = once_json(&scenario, &["--timeout", "0.5"]);
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert_eq!(doc["gpus"][1]["state"], "stale");

    // One call of GPU 1 takes 4 s: past the default wait, well within a minute's.
    let slow = format!(
        "{}{}",
        gpu_block("Quick", ""),
        gpu_block(
            "Slow",
            "hang = { after_s = 0, block_s = 4, fields = [\"utilization\"] }"
        )
    );
    let scenario = ScenarioFile::new(&slow);
    let (doc, took) = once_json(&scenario, &["--timeout", "60"]);
    assert!(took >= Duration::from_secs(4), "{took:?}");
    assert_eq!(doc["gpus"][1]["state"], "ok", "{}", doc["gpus"][1]);
    assert_eq!(doc["gpus"][1]["utilization_percent"], 10);
}

#[test]
fn a_lost_gpu_is_reported_lost_and_the_rest_keeps_working() {
    let text = format!(
        "{}{}",
        gpu_block("Healthy", ""),
        gpu_block("Fallen", "lost_after_s = 0")
    );
    let scenario = ScenarioFile::new(&text);
    // A lost GPU is critical (exit 4, see warnings_e2e); here only the figures matter.
    let (doc, _) = once_json(&scenario, &["--fail-on", "never"]);
    assert_eq!(doc["gpus"][0]["state"], "ok");
    assert_eq!(doc["gpus"][0]["utilization_percent"], 10);
    assert_eq!(doc["gpus"][1]["state"], "lost");
}

/// The fixture's second GPU leaves at 4 s and a third came at 2 s, so the count reads 2 at
/// the start and at the next count (every 10 s) alike, while index 1 names another GPU. Before,
/// index 1 stayed "lost" with the departed GPU's last figures for good, and the GPU there was
/// never read. A lost GPU is now opened again at each count.
#[test]
fn the_gpu_that_takes_a_lost_gpus_index_is_read_and_a_lost_gpu_shows_no_figures() {
    let scenario = ScenarioFile::from_fixture("count_change.toml", &[]);
    let uuid_at = |doc: &Value, i: usize| doc["gpus"][i]["uuid"].as_str().map(str::to_string);
    let docs = json_stream_until(
        Command::new(common::torchtop_binary())
            .args(["--json", "-d", "0.5"])
            .envs(scenario.env()),
        |docs| {
            docs.last().is_some_and(|d| {
                uuid_at(d, 1).as_deref() == Some("GPU-22222222-2222-4222-8222-222222222222")
                    && d["gpus"][1]["state"] == "ok"
            })
        },
    );
    let lost: Vec<&Value> = docs
        .iter()
        .map(|d| &d["gpus"][1])
        .filter(|g| g["state"] == "lost")
        .collect();
    assert!(!lost.is_empty(), "GPU 1 was never seen lost");
    for gpu in lost {
        assert_eq!(
            gpu["uuid"], "GPU-11111111-1111-4111-8111-111111111111",
            "the lost GPU is named: {gpu}"
        );
        for figure in ["utilization_percent", "memory_used_bytes", "temperature_c"] {
            assert!(gpu[figure].is_null(), "a lost GPU's {figure}: {gpu}");
        }
    }
    let last = docs.last().unwrap();
    assert_eq!(last["gpus"][1]["utilization_percent"], 30, "{last}");
    assert_eq!(last["gpus"].as_array().unwrap().len(), 2, "{last}");
}

/// `--once` measures CPU% over its 40 ms window; the collector gave none for windows under
/// 50 ms, so every process's `cpu_percent` was null.
#[test]
fn once_gives_a_cpu_percentage_for_a_busy_process() {
    let mut busy = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .expect("sh");
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &[busy.id(), busy.id()]);
    let (doc, _) = once_json(&scenario, &[]);
    let _ = busy.kill();
    let _ = busy.wait();
    let row = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == busy.id())
        .expect("the busy process is listed")
        .clone();
    assert!(row["cpu_percent"].is_number(), "{row}");
}

#[test]
fn a_process_that_vanished_stays_listed_as_not_visible() {
    let mut sleepers = Sleepers::spawn(2);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &pids);
    sleepers.kill(1);
    let (doc, _) = once_json(&scenario, &[]);
    let processes = doc["processes"].as_array().unwrap();
    let gone = processes
        .iter()
        .find(|p| p["pid"] == pids[1])
        .expect("row kept");
    assert_eq!(gone["visible"], false);
    assert!(gone["command"].is_null());
    assert_eq!(gone["gpu_memory_bytes"], 10240u64 * 1024 * 1024);
    let alive = processes.iter().find(|p| p["pid"] == pids[0]).unwrap();
    assert_eq!(alive["visible"], true);
}

#[test]
fn the_env_var_chooses_the_library_and_the_flag_wins_over_it() {
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &[1, 1]);
    let (doc, _) = once_json(&scenario, &["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"]);
    assert_eq!(doc["driver"]["nvml_loaded"], false);
    assert_eq!(doc["driver"]["library"], "/nonexistent/libnvidia-ml.so.1");
}

#[test]
fn a_process_list_that_changes_between_calls_never_breaks_the_stream() {
    let sleepers = Sleepers::spawn(4);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("flapping_processes.toml", &pids);
    let listed = |doc: &Value, pid: u32| {
        doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == pid)
    };
    let with_gpus = |docs: &[Value]| -> Vec<Value> {
        let has_gpus = |d: &Value| !d["gpus"].as_array().unwrap().is_empty();
        docs.iter().filter(|d| has_gpus(d)).cloned().collect()
    };
    // pid 2 leaves at t = 3 s and pid 3 comes at t = 2 s: read until the stream has shown
    // both, however late the samples come on a loaded machine.
    let mut torchtop = Command::new(common::torchtop_binary());
    torchtop.args(["--json", "-d", "0.5"]).envs(scenario.env());
    let docs = json_stream_until(&mut torchtop, |docs| {
        let seen = with_gpus(docs);
        seen.iter().any(|d| listed(d, pids[2]))
            && seen.iter().any(|d| !listed(d, pids[2]))
            && seen.iter().any(|d| listed(d, pids[3]))
    });
    // Once the driver is loaded, every snapshot has the GPU and the steady process.
    let loaded: Vec<&Value> = docs
        .iter()
        .skip_while(|d| d["gpus"].as_array().unwrap().is_empty())
        .collect();
    assert!(loaded
        .iter()
        .all(|d| d["gpus"].as_array().unwrap().len() == 1));
    assert!(loaded.iter().all(|d| listed(d, pids[0])));
}

/// A command line that carries terminal escapes (OSC 52 clipboard write, OSC 0 title, CSI 2J
/// clear screen) and a newline followed by a forged row.
const HOSTILE_ARGV0: &str =
    "evil\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x1b[2J\n      1 root       80.0GiB  FORGED";

#[test]
fn text_escapes_control_characters_from_command_lines() {
    let sleepers = Sleepers::named(&[HOSTILE_ARGV0]);
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &sleepers.pids());
    let (output, _) = run_once(&scenario, &[]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let controls: Vec<char> = text
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(
        controls.is_empty(),
        "control characters {controls:?} in:\n{text}"
    );
    assert!(
        !text.lines().any(|line| line.starts_with("      1 root")),
        "a newline in argv forged a line:\n{text}"
    );
    assert!(
        text.contains(r"evil\e]52;c;cm0gLXJmIH4=\x07\e]0;pwned\x07\e[2J\n      1 root"),
        "the command is shown, escaped:\n{text}"
    );
    // JSON keeps the exact bytes, escaped the JSON way.
    let (doc, _) = once_json(&scenario, &[]);
    let row = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == sleepers.pid(0))
        .expect("the hostile process is listed");
    assert_eq!(row["command"], format!("{HOSTILE_ARGV0} 600"));
}

/// serde_json escapes only C0 controls, and the exposition format only `\\`, `"` and line
/// breaks: another user's C1 CSI (U+009B, which xterm obeys), bidirectional override or, in
/// a label value, ESC and BEL went out raw to whoever ran `--once --json` or
/// `--once --format prometheus` in a terminal.
#[test]
fn json_and_prometheus_output_carry_no_terminal_controls() {
    use std::os::unix::process::CommandExt;
    let hostile = "evil\u{9b}31m\u{202e}txt.exe\u{1b}]0;pwned\u{7}";
    let mut child = Command::new("sleep")
        .arg0(hostile)
        .arg("600")
        .env("SLURM_JOB_ID", hostile)
        .env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .spawn()
        .expect("sleep");
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &[child.id()]);
    let raw = |c: char| c != '\n' && (c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c));
    for args in [&["--json"][..], &["--format", "prometheus"][..]] {
        let (output, _) = run_once(&scenario, args);
        assert!(output.status.success(), "{args:?}: {output:?}");
        let text = String::from_utf8(output.stdout).unwrap();
        assert!(
            text.contains("evil"),
            "{args:?}: the process is missing:\n{text}"
        );
        let found: Vec<char> = text.chars().filter(|c| raw(*c)).collect();
        assert!(
            found.is_empty(),
            "{args:?}: {found:?} went out raw:\n{text}"
        );
    }
    // JSON's escapes keep the exact text.
    let (doc, _) = once_json(&scenario, &[]);
    let row = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == child.id())
        .expect("the hostile process is listed");
    assert_eq!(row["command"], format!("{hostile} 600"));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn implausible_driver_values_are_null_and_counted() {
    let sleepers = Sleepers::spawn(2);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("implausible_values.toml", &pids);
    let (doc, _) = once_json(&scenario, &[]);
    let gpu = &doc["gpus"][0];
    for field in [
        "temperature_c",
        "sm_clock_mhz",
        "utilization_percent",
        "memory_used_bytes",
    ] {
        assert!(gpu[field].is_null(), "{field} must be null: {gpu}");
    }
    // The sane figures of the same GPU stay.
    assert_eq!(gpu["memory_clock_mhz"], 1593);
    assert_eq!(gpu["memory_utilization_percent"], 40);
    assert_eq!(gpu["memory_total_bytes"], 1000u64 * 1024 * 1024);
    let implausible = &gpu["implausible"];
    let fields: Vec<&str> = implausible["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("no implausible.fields: {gpu}"))
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for field in [
        "memory_used",
        "process_memory",
        "sm_clock",
        "temperature",
        "utilization",
    ] {
        assert!(fields.contains(&field), "{field} not in {fields:?}");
    }
    assert!(implausible["count"].as_u64().unwrap() >= 5, "{implausible}");

    let processes = doc["processes"].as_array().unwrap();
    let row = |pid: u32| processes.iter().find(|p| p["pid"] == pid).unwrap();
    assert!(
        row(pids[0])["gpu_memory_bytes"].is_null(),
        "4.8 TiB on a 1000 MiB GPU"
    );
    assert_eq!(row(pids[1])["gpu_memory_bytes"], 300u64 * 1024 * 1024);

    let (output, _) = run_once(&scenario, &[]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        !text.contains("4294967"),
        "a raw value reached the text:\n{text}"
    );
    assert!(
        text.contains("implausible"),
        "the text does not say so:\n{text}"
    );
}

#[test]
fn sane_values_count_no_implausible_ones() {
    let sleepers = Sleepers::spawn(2);
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &sleepers.pids());
    let (doc, _) = once_json(&scenario, &[]);
    assert_eq!(
        doc["gpus"][0]["implausible"],
        serde_json::json!({"count": 0, "fields": []})
    );
}

/// On a real H200 a reading takes 48 ms, 42 of them in the two PCIe counters (each samples over
/// 20 ms), and the shared worker reads the GPUs in turn: 16 of them took longer than the
/// 0.5 s a tick waits at `-d 1`, and the stream's first document called the last five
/// "stale". Here 6 GPUs take about 0.15 s to read, more than the 0.1 s a tick waits at
/// `-d 0.2` and a seventh of the first snapshot's 1 s, so that a loaded machine fails the old
/// behaviour the more surely and the new one not.
#[test]
fn the_first_json_document_waits_for_gpus_that_are_slow_to_read() {
    let gpu = "[[gpu]]\nname = \"H200\"\nmemory_total_mib = 143771\n\
               hang = { after_s = 0, block_s = 0.012, fields = [\"pcie_throughput\"] }\n";
    let scenario = ScenarioFile::new(&gpu.repeat(6));
    let docs = json_stream_until(
        Command::new(common::torchtop_binary())
            .args(["--json", "-d", "0.2", "--samples", "1"])
            .envs(scenario.env()),
        |docs| !docs.is_empty(),
    );
    let states: Vec<&str> = (docs[0]["gpus"].as_array().expect("gpus").iter())
        .map(|g| g["state"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(states, ["ok"; 6], "{}", docs[0]);
}

/// NVML samples only processes that ran work since the last reading. While the driver answers
/// for a GPU, a process it has no sample for ran none: its shares are 0, as nvitop shows them.
/// Where the driver cannot sample at all, or the GPU is in MIG mode, they are N/A.
#[test]
fn a_process_without_a_utilization_sample_is_idle_unless_the_driver_cannot_sample() {
    let sleepers = Sleepers::spawn(5);
    let [busy, idle, unsampled, mig_busy, mig_idle] = [0, 1, 2, 3, 4].map(|i| sleepers.pid(i));
    let text = format!(
        "{}[[gpu.process]]\npid = {busy}\nused_memory_mib = 1000\nsm_percent = 60\n\
         [[gpu.process]]\npid = {idle}\nused_memory_mib = 500\n\
         {}[[gpu.process]]\npid = {unsampled}\nused_memory_mib = 500\n\
         {}[[gpu.process]]\npid = {mig_busy}\nused_memory_mib = 500\nsm_percent = 30\n\
         [[gpu.process]]\npid = {mig_idle}\nused_memory_mib = 500\n",
        gpu_block("A", ""),
        gpu_block("B", "unsupported = [\"process_utilization\"]"),
        gpu_block("C", "mig_mode = true"),
    );
    let scenario = ScenarioFile::new(&text);
    let (doc, _) = once_json(&scenario, &[]);
    let row = |pid: u32| {
        (doc["processes"].as_array().expect("processes").iter())
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("pid {pid} not listed: {doc}"))
            .clone()
    };
    assert_eq!(row(busy)["sm_percent"], 60, "{doc}");
    let idle = row(idle);
    assert_eq!(
        [
            &idle["sm_percent"],
            &idle["memory_bandwidth_percent"],
            &idle["encoder_percent"]
        ],
        [0, 0, 0],
        "{idle}"
    );
    for pid in [unsampled, mig_idle] {
        let row = row(pid);
        assert!(
            row["sm_percent"].is_null() && row["encoder_percent"].is_null(),
            "{row}"
        );
    }
    assert_eq!(row(mig_busy)["sm_percent"], 30, "{doc}");
}
