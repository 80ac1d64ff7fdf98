//! `torchtop demo` (feature `torch`, real libtorch): a tch program with the agent started shows
//! up on its socket with hello and stats, marks steps, and removes its socket when it ends.
//! These are the tests that need libtorch: the agent's server is unit-tested without it (with a
//! stand-in source, in the default `cargo test`), so CI builds the monitor with the feature only
//! for the binary these tests run, not for a second unit-test harness.

#![cfg(all(feature = "torch", not(feature = "torch-doc-only")))]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Demo {
    child: Child,
    /// The agent's socket directory (0700), removed on drop.
    dir: tempfile::TempDir,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_demo() -> Demo {
    let dir = tempfile::Builder::new()
        .prefix("tt-demo-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_torchtop"))
        .args(["demo", "--steps", "1000000"])
        .env("TORCHTOP_AGENT_DIR", dir.path())
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    Demo { child, dir }
}

fn wait_for(path: &Path, present: bool) -> bool {
    let deadline = Instant::now() + common::PATIENCE;
    while Instant::now() < deadline {
        if path.exists() == present {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn the_demo_publishes_hello_and_stats_and_cleans_up() {
    let mut demo = start_demo();
    let socket = demo.dir.path().join(format!("{}.sock", demo.child.id()));
    assert!(wait_for(&socket, true), "no socket at {}", socket.display());

    let stream = UnixStream::connect(&socket).unwrap();
    // Only there so that a broken agent fails the test instead of hanging it.
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    let mut commands = stream.try_clone().unwrap();
    let mut lines = BufReader::new(stream).lines();
    let mut next = || -> Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };

    let hello = next();
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["pid"], demo.child.id());
    assert_eq!(hello["torch"], "2.11.0");
    assert_eq!(hello["python"], Value::Null);
    assert_eq!(
        (&hello["rank"], &hello["world_size"]),
        (&0.into(), &1.into())
    );

    let first = next();
    assert_eq!(first["type"], "stats");
    // The first step may take a while on a loaded machine: read until one is marked.
    let second = loop {
        let message = next();
        if message["type"] == "stats" && message["step"].as_u64().is_some_and(|s| s >= 1) {
            break message;
        }
    };
    assert!(second["seq"].as_u64() > first["seq"].as_u64());
    // The C++ shim reads the linked libtorch's CUDA caching allocator: without CUDA it reports
    // no device and refuses to reset a peak; with CUDA, the demo's device 0 and its bytes.
    let devices = second["devices"].as_array().expect("devices");
    commands
        .write_all(b"{\"v\":1,\"type\":\"cmd\",\"id\":7,\"cmd\":\"reset_peak\"}\n")
        .unwrap();
    let reply = loop {
        let message = next();
        if message["type"] == "reply" {
            break message;
        }
    };
    assert_eq!(
        (&reply["id"], &reply["cmd"]),
        (&7.into(), &"reset_peak".into())
    );
    if tch::Cuda::is_available() {
        assert_eq!(devices[0]["index"], 0, "{second}");
        let allocated = devices[0]["stats"]["allocated_bytes.all.current"]
            .as_u64()
            .unwrap();
        assert!(allocated >= 1 << 20, "{second}");
        assert_eq!(reply["devices"], serde_json::json!([0]), "{reply}");
    } else {
        assert!(devices.is_empty(), "no CUDA, no devices: {second}");
        assert_eq!(reply["ok"], false, "{reply}");
        assert!(
            reply["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{reply}"
        );
    }

    // Ctrl-C ends the loop cleanly: exit status 0 and no socket left behind.
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(demo.child.id() as libc::pid_t, libc::SIGINT) };
    let status = demo.child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the socket is removed at exit");
}

/// The demo leaves SIGTERM alone, as most programs do: its default disposition ends a process
/// without running `atexit`, so the agent's own handler removes the socket (it was left behind).
#[test]
fn sigterm_ends_the_demo_and_its_agent_removes_the_socket() {
    use std::os::unix::process::ExitStatusExt;
    let mut demo = start_demo();
    let socket = demo.dir.path().join(format!("{}.sock", demo.child.id()));
    assert!(wait_for(&socket, true), "no socket at {}", socket.display());
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(demo.child.id() as libc::pid_t, libc::SIGTERM) };
    let status = demo.child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status}");
    assert!(!socket.exists(), "the socket is removed");
}

mod common;

/// The tch program shows up in torchtop itself: `--once --json` against the fake NVML, which
/// lists the demo's pid as a GPU process, carries the demo agent's figures on that row.
#[test]
fn the_demo_shows_up_in_torchtop_with_its_allocator_figures() {
    let demo = start_demo();
    let socket = demo.dir.path().join(format!("{}.sock", demo.child.id()));
    assert!(wait_for(&socket, true), "no socket at {}", socket.display());
    let scenario = common::fake_nvml::ScenarioFile::new(&format!(
        "[[gpu]]\nname = \"GPU for the tch demo\"\nmemory_total_mib = 81920\nmemory_used_mib = 2048\n\
         [[gpu.process]]\npid = {}\nused_memory_mib = 600\n",
        demo.child.id()
    ));
    let once = || -> Value {
        let output = common::output_within_patience(
            Command::new(env!("CARGO_BIN_EXE_torchtop"))
                .args(["--once", "--json"])
                .envs(scenario.env())
                .env("TORCHTOP_AGENT_DIR", demo.dir.path()),
        );
        assert!(output.status.success());
        serde_json::from_slice(&output.stdout).unwrap()
    };
    // The first step may take a while on a loaded machine: look until one is marked.
    let mut doc = Value::Null;
    common::wait_until("the demo's first step in torchtop", || {
        doc = once();
        doc["processes"][0]["torch"]["step"].as_u64().is_some()
    });
    let torch = &doc["processes"][0]["torch"];
    assert_eq!(doc["processes"][0]["pid"], demo.child.id());
    assert_eq!(torch["torch"], "2.11.0", "{doc}");
    assert_eq!(torch["rank"], 0);
    assert!(torch["step"].as_u64().is_some(), "{torch}");
    // On the CPU the agent reports no CUDA device; on a GPU each device it used.
    assert!(torch["devices"].is_array());
}
