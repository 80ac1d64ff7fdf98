//! The agent for Rust training programs (tch/libtorch): it publishes the program's CUDA
//! caching-allocator figures over protocol v1 (assets/agent-protocol.md), exactly as the Python
//! agent does, so torchtop shows a tch program like a PyTorch one.
//!
//! This module owns:
//! - the socket directory rules and the process-wide agent ([`start`], [`start_with`], [`step`]);
//! - the server ([`Agent`]), which is plain Rust and tested with a fake [`AllocatorStatsSource`];
//! - with the `torch` feature, the libtorch source (through the C++ shim in `shim.cpp`) and the
//!   `torchtop demo` workload.
//!
//! The agent never fails its host program: problems go to stderr once and the program goes on.

mod server;
pub mod stats;

#[cfg(feature = "torch")]
pub mod demo;
#[cfg(feature = "torch")]
pub mod libtorch;

use std::collections::VecDeque;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Map, Value};

pub use server::{Agent, MAX_INTERVAL_MS, MAX_LINE_BYTES, MIN_INTERVAL_MS, PROTOCOL_VERSION};

/// Where a process's allocator figures come from.
pub trait AllocatorStatsSource: Send {
    /// `(device index, flat torch.cuda.memory_stats keys)` for each device in use; empty before
    /// the program has initialized CUDA. Must never initialize CUDA itself.
    fn device_stats(&self) -> Vec<(u32, Map<String, Value>)>;

    /// The torch (libtorch) version, for hello.
    fn torch_version(&self) -> Option<String> {
        None
    }

    /// Resets the peak counters; returns the devices it reset.
    fn reset_peak(&self) -> Result<Vec<u32>, String> {
        Err("reset_peak is not supported by this agent".into())
    }

    /// Writes a memory snapshot beside the socket, in `dir`; returns its path and size.
    fn snapshot(&self, _dir: &Path) -> Result<(PathBuf, u64), String> {
        Err("snapshot is not supported by this agent".into())
    }
}

/// What hello says about the process, besides the interval.
#[derive(Debug, Clone, PartialEq)]
pub struct HelloFacts {
    pub pid: u32,
    pub argv: Vec<String>,
    pub torch: Option<String>,
    pub rank: Option<i64>,
    pub local_rank: Option<i64>,
    pub world_size: Option<i64>,
    pub alloc_conf: Option<String>,
}

impl HelloFacts {
    /// The facts of this process, reading variables through `var` (the environment in practice).
    pub fn gather(var: impl Fn(&str) -> Option<String>, torch: Option<String>) -> HelloFacts {
        let number = |name: &str| var(name).and_then(|v| v.trim().parse().ok());
        HelloFacts {
            pid: std::process::id(),
            argv: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            torch,
            rank: number("RANK"),
            local_rank: number("LOCAL_RANK"),
            world_size: number("WORLD_SIZE"),
            alloc_conf: var("PYTORCH_CUDA_ALLOC_CONF").or_else(|| var("PYTORCH_ALLOC_CONF")),
        }
    }
}

/// Training steps marked by the program, and the mean time between the last ones.
#[derive(Debug, Default)]
pub struct StepCounter {
    inner: Mutex<Steps>,
}

#[derive(Debug, Default)]
struct Steps {
    count: Option<u64>,
    last: Option<Instant>,
    recent: VecDeque<f64>,
}

const STEP_WINDOW: usize = 50;

impl StepCounter {
    /// Marks one finished step.
    pub fn mark(&self) {
        let Ok(mut steps) = self.inner.lock() else {
            return;
        };
        let now = Instant::now();
        if let Some(last) = steps.last.replace(now) {
            if steps.recent.len() == STEP_WINDOW {
                steps.recent.pop_front();
            }
            steps
                .recent
                .push_back(now.duration_since(last).as_secs_f64());
        }
        steps.count = Some(steps.count.map_or(1, |c| c + 1));
    }

    /// Steps so far (None before the first mark) and the mean step time in seconds.
    pub fn read(&self) -> (Option<u64>, Option<f64>) {
        let Ok(steps) = self.inner.lock() else {
            return (None, None);
        };
        let mean = (!steps.recent.is_empty())
            .then(|| steps.recent.iter().sum::<f64>() / steps.recent.len() as f64);
        (steps.count, mean)
    }
}

/// The socket directory: `$TORCHTOP_AGENT_DIR`, else `$XDG_RUNTIME_DIR/torchtop`, else
/// `/tmp/torchtop-<uid>`. `var` reads the environment.
pub fn socket_dir(var: impl Fn(&str) -> Option<String>, uid: u32) -> PathBuf {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(dir) = set("TORCHTOP_AGENT_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(runtime) = set("XDG_RUNTIME_DIR") {
        return Path::new(&runtime).join("torchtop");
    }
    PathBuf::from(format!("/tmp/torchtop-{uid}"))
}

/// Creates the socket directory 0700, or checks an existing one: a real directory (not a
/// symlink), owned by us, closed to everyone else. Returns why it is unusable.
pub fn prepare_dir(dir: &Path) -> Result<(), String> {
    let created = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    if let Err(error) = created {
        if !dir.exists() {
            return Err(format!("cannot create {}: {error}", dir.display()));
        }
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("cannot inspect {}: {e}", dir.display()))?;
    if meta.file_type().is_symlink() {
        return Err(format!(
            "{} is a symlink; refusing to use it",
            dir.display()
        ));
    }
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    if meta.uid() != me {
        return Err(format!(
            "{} is owned by uid {}, not by us (uid {me})",
            dir.display(),
            meta.uid()
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} has mode {mode:o}; it must be open to its owner only (0700)",
            dir.display()
        ));
    }
    Ok(())
}

/// The steps of the process-wide agent; [`step`] marks them.
fn global_steps() -> &'static Arc<StepCounter> {
    static STEPS: std::sync::OnceLock<Arc<StepCounter>> = std::sync::OnceLock::new();
    STEPS.get_or_init(Arc::default)
}

/// Marks one training step, for step time and steps/s in torchtop. Cheap; call it every step.
pub fn step() {
    global_steps().mark();
}

#[cfg(feature = "torch")]
pub use global::{start, start_with, stop};

#[cfg(feature = "torch")]
mod global {
    use std::path::PathBuf;
    use std::sync::{Mutex, OnceLock};
    use std::time::Duration;

    use super::{global_steps, prepare_dir, socket_dir, Agent, HelloFacts};
    use crate::agent::libtorch::LibtorchSource;
    use crate::agent::AllocatorStatsSource;

    struct Running {
        agent: Agent,
        pid: u32,
    }

    fn slot() -> &'static Mutex<Option<Running>> {
        static SLOT: OnceLock<Mutex<Option<Running>>> = OnceLock::new();
        SLOT.get_or_init(|| Mutex::new(None))
    }

    /// Starts the process-wide agent with a 1 s interval in the default directory. Returns the
    /// socket path, or None when it could not start (the reason went to stderr).
    pub fn start() -> Option<PathBuf> {
        start_with(Duration::from_secs(1), None)
    }

    /// Starts the process-wide agent; `dir` overrides the socket directory rules. A second call
    /// returns the running agent's socket. The socket is removed when the program exits.
    pub fn start_with(interval: Duration, dir: Option<PathBuf>) -> Option<PathBuf> {
        let mut slot = slot().lock().ok()?;
        if let Some(running) = slot.as_ref().filter(|r| r.pid == std::process::id()) {
            return Some(running.agent.socket_path().to_path_buf());
        }
        match launch(interval, dir) {
            Ok(agent) => {
                let path = agent.socket_path().to_path_buf();
                *slot = Some(Running {
                    agent,
                    pid: std::process::id(),
                });
                register_exit_hook();
                Some(path)
            }
            Err(why) => {
                eprintln!("torchtop agent: not started: {why}");
                None
            }
        }
    }

    /// Stops the process-wide agent and removes its socket.
    pub fn stop() {
        let running = slot().lock().ok().and_then(|mut slot| slot.take());
        drop(running);
    }

    fn launch(interval: Duration, dir: Option<PathBuf>) -> Result<Agent, String> {
        let var = |name: &str| std::env::var(name).ok();
        // SAFETY: getuid has no preconditions.
        let dir = dir.unwrap_or_else(|| socket_dir(var, unsafe { libc::getuid() }));
        prepare_dir(&dir)?;
        let path = dir.join(format!("{}.sock", std::process::id()));
        let source = LibtorchSource::new();
        let facts = HelloFacts::gather(var, source.torch_version());
        Agent::serve(
            &path,
            interval,
            facts,
            Box::new(source),
            global_steps().clone(),
        )
        .map_err(|e| format!("cannot serve {}: {e}", path.display()))
    }

    fn register_exit_hook() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: `remove_at_exit` is an extern "C" fn that never unwinds.
            unsafe { libc::atexit(remove_at_exit) };
        });
    }

    /// Removes the socket at exit without joining the thread: it may be stuck in libtorch, and
    /// exit must not wait on it. A forked child leaves the parent's socket alone.
    extern "C" fn remove_at_exit() {
        let Ok(slot) = slot().try_lock() else {
            return;
        };
        if let Some(running) = slot.as_ref().filter(|r| r.pid == std::process::id()) {
            super::server::remove_socket(running.agent.socket_path());
        }
    }
}

#[cfg(test)]
mod tests;
