//! `--user` and `--gpus` outside the monitor: `--once` (text, JSON, Prometheus) and the `--json`
//! stream show only the processes they name, as the monitor's table does; an index the machine
//! does not have is a sentence and exit status 2, not an empty list; and `--once` into a pipe
//! that closes early (`| head`) ends quietly, with the exit status of its warnings.

use crate::common;

use std::io::Read;
use std::process::{Command, Stdio};

use common::fake_nvml::{ScenarioFile, Sleepers};
use common::{json_stream_until, output_within_patience};
use serde_json::Value;

fn torchtop(scenario: &ScenarioFile, args: &[&str]) -> Command {
    let mut command = Command::new(common::torchtop_binary());
    command.args(args).envs(scenario.env());
    command
}

/// The GPUs of the document's process rows. A row without a GPU is an agent's that holds
/// none: on a machine running other tests as root, another test's agent may be listed.
fn gpus_of(doc: &Value) -> Vec<u64> {
    let mut gpus: Vec<u64> = (doc["processes"].as_array().unwrap().iter())
        .filter_map(|p| p["gpu"].as_u64())
        .collect();
    gpus.dedup();
    gpus
}

#[test]
fn once_and_the_json_stream_show_only_the_chosen_gpus_and_user() {
    let sleepers = Sleepers::spawn(64);
    let scenario = ScenarioFile::from_fixture("eight_gpus.toml", &sleepers.pids());
    let output = output_within_patience(&mut torchtop(&scenario, &["--once", "--json"]));
    let all: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(gpus_of(&all), [0, 1, 2, 3, 4, 5, 6, 7]);
    let me = all["processes"][0]["user"].as_str().unwrap().to_string();

    let output = output_within_patience(&mut torchtop(
        &scenario,
        &["--once", "--json", "--gpus", "1,3", "--user", &me],
    ));
    assert!(output.status.success(), "{output:?}");
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(gpus_of(&doc), [1, 3]);
    assert_eq!(
        doc["gpus"].as_array().unwrap().len(),
        8,
        "the GPUs stay whole"
    );

    // A uid without processes here: a number is taken as one, as a container's users show.
    let output = output_within_patience(&mut torchtop(&scenario, &["--once", "--user", "4242"]));
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    // Whole words: on a fresh machine a pid such as 450 is also in "450W" (CI, 2026-12-04).
    assert!(
        sleepers
            .pids()
            .iter()
            .all(|pid| !text.split_whitespace().any(|word| word == pid.to_string())),
        "{text}"
    );
    // The GPUs' memory holds processes the list leaves out: the text says why.
    assert!(
        text.trim_end()
            .ends_with("showing only the processes of user 4242 (--user, --gpus); the GPUs, the host and the warnings are the whole machine's"),
        "{text}"
    );

    let lines = json_stream_until(
        torchtop(&scenario, &["--json", "-d", "0.2", "--gpus", "7"]).stdin(Stdio::null()),
        |lines| lines.len() >= 2,
    );
    assert!(lines.iter().all(|doc| gpus_of(doc) == [7]), "{lines:?}");
}

/// As htop's `-u`: a name the passwd database does not know is a mistake, not an empty list.
#[test]
fn a_user_the_machine_does_not_know_is_a_sentence() {
    let scenario = ScenarioFile::new("[[gpu]]\nname = \"One\"\n");
    let output = output_within_patience(&mut torchtop(&scenario, &["--once", "--user", "nosuch"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no user is named nosuch on this machine"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn a_gpu_index_the_machine_does_not_have_is_a_sentence() {
    let sleepers = Sleepers::spawn(64);
    let scenario = ScenarioFile::from_fixture("eight_gpus.toml", &sleepers.pids());
    let output = output_within_patience(&mut torchtop(&scenario, &["--once", "--gpus", "2,9"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("--gpus names GPU 9 that this machine does not have (it has 8 GPUs, 0 to 7)"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

/// A review: the `--json` stream said the sentence, then went on with documents without a
/// process in them and exited 0; the README makes it an error there too, exit status 2.
#[test]
fn the_json_stream_refuses_a_gpu_index_the_machine_does_not_have() {
    let scenario = ScenarioFile::new("[[gpu]]\nname = \"One\"\n");
    let output = output_within_patience(
        torchtop(
            &scenario,
            &["--json", "-d", "0.2", "--samples", "2", "--gpus", "3"],
        )
        .stdin(Stdio::null()),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--gpus names GPU 3 that this machine does not have (it has one GPU, 0)"),
        "{stderr}"
    );
    assert!(
        output.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// While NVML is still loading (a driver without persistence mode takes seconds) no GPU is
/// listed yet: `--gpus 0` was refused with "it has no GPU", exit 2, on a machine with one.
#[test]
fn a_gpu_the_driver_has_not_counted_yet_is_not_missing() {
    let scenario = ScenarioFile::new("[init]\ndelay_s = 3\n[[gpu]]\nname = \"One\"\n");
    let output = output_within_patience(
        torchtop(&scenario, &["--once", "--gpus", "0"]).stdin(Stdio::null()),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_ne!(output.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("does not have"), "{stderr}");
    // The stream goes on, and lists the GPU once the driver has loaded.
    let output = output_within_patience(
        torchtop(&scenario, &["--json", "--samples", "6", "--gpus", "0"]).stdin(Stdio::null()),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let last = String::from_utf8_lossy(&output.stdout);
    let last: Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    assert_eq!(last["gpus"].as_array().unwrap().len(), 1, "{last}");
}

/// The 8-GPU document is far larger than a pipe holds, so torchtop is still writing when the
/// reader goes away.
#[test]
fn once_into_a_pipe_closed_early_ends_quietly() {
    let sleepers = Sleepers::spawn(64);
    let scenario = ScenarioFile::from_fixture("eight_gpus.toml", &sleepers.pids());
    for format in [&["--json"][..], &["--format", "prometheus"]] {
        let mut child = torchtop(&scenario, &[&["--once"][..], format].concat())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut head = [0u8; 100];
        child.stdout.take().unwrap().read_exact(&mut head).unwrap();
        // The read end is closed here, as `head -c 100` closes it.
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{format:?}: {stderr}");
        assert!(stderr.is_empty(), "{format:?}: {stderr}");
        assert_ne!(output.status.code(), Some(101), "{format:?}");
    }
}
