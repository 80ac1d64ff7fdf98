//! The agent for Rust training programs (tch/libtorch): it publishes the program's CUDA
//! caching-allocator figures over protocol v1 (assets/agent-protocol.md), exactly as the Python
//! agent does, so torchtop shows a tch program like a PyTorch one.
//!
//! This module owns:
//! - the process-wide agent ([`start`], [`start_with`], [`step`]); the socket directory rules
//!   and checks are the protocol's ([`crate::protocol::default_socket_dir`],
//!   [`crate::protocol::ensure_own_socket_dir`]), shared with the client, so both ends agree;
//! - the server ([`Agent`]), which is plain Rust and tested with a fake [`AllocatorStatsSource`];
//! - with the `torch` feature, the libtorch source (through the C++ shim in `shim.cpp`) and the
//!   `torchtop demo` workload.
//!
//! The agent never fails its host program: problems go to stderr once and the program goes on.

// Without the `torch` feature this module is built for its tests only: what only a libtorch
// program calls (start, step, the torch version) is unused there.
#![cfg_attr(not(feature = "torch"), allow(dead_code))]

mod on_sigterm;
mod server;
mod socket;
pub(crate) mod stats;

#[cfg(feature = "torch")]
pub mod demo;
#[cfg(feature = "torch")]
pub(crate) mod libtorch;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Map, Value};

pub(crate) use server::Agent;

/// Where a process's allocator figures come from.
pub(crate) trait AllocatorStatsSource: Send {
    /// `(device index, the torch.cuda.memory_stats keys torchtop reads)` for each device in use
    /// ([`crate::protocol::STAT_KEYS`]; other keys are allowed and ignored by torchtop); empty before
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
pub(crate) struct HelloFacts {
    pub(crate) pid: u32,
    pub(crate) argv: Vec<String>,
    pub(crate) torch: Option<String>,
    pub(crate) rank: Option<i64>,
    pub(crate) local_rank: Option<i64>,
    pub(crate) world_size: Option<i64>,
    pub(crate) alloc_conf: Option<String>,
    pub(crate) cuda_visible_devices: Option<String>,
}

impl HelloFacts {
    /// The facts of this process, reading variables through `var` (the environment in practice).
    pub(crate) fn gather(
        var: impl Fn(&str) -> Option<String>,
        torch: Option<String>,
    ) -> HelloFacts {
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
            cuda_visible_devices: var("CUDA_VISIBLE_DEVICES"),
        }
    }
}

/// Training steps marked by the program, and the mean time between the last ones.
#[derive(Debug, Default)]
pub(crate) struct StepCounter {
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
    pub(crate) fn mark(&self) {
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
    pub(crate) fn read(&self) -> (Option<u64>, Option<f64>) {
        let Ok(steps) = self.inner.lock() else {
            return (None, None);
        };
        let mean = (!steps.recent.is_empty())
            .then(|| steps.recent.iter().sum::<f64>() / steps.recent.len() as f64);
        (steps.count, mean)
    }
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

    use super::libtorch::LibtorchSource;
    use super::AllocatorStatsSource;
    use super::{global_steps, Agent, HelloFacts};
    use crate::protocol::sockets::{agent_socket_names, own_pid_namespace};
    use crate::protocol::{default_socket_dir, ensure_own_socket_dir};

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
    /// returns the running agent's socket. The socket is removed when the program exits, and
    /// when SIGTERM ends it unless the program handles SIGTERM itself.
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
                super::on_sigterm::disarm();
                say!("torchtop agent: not started: {why}");
                None
            }
        }
    }

    /// Stops the process-wide agent and removes its socket.
    pub fn stop() {
        super::on_sigterm::disarm();
        let running = slot().lock().ok().and_then(|mut slot| slot.take());
        drop(running);
    }

    fn launch(interval: Duration, dir: Option<PathBuf>) -> Result<Agent, String> {
        let dir = dir.unwrap_or_else(default_socket_dir);
        ensure_own_socket_dir(&dir)?;
        let names = agent_socket_names(&dir, std::process::id(), own_pid_namespace());
        let source = LibtorchSource::new();
        let var = |name: &str| std::env::var(name).ok();
        let facts = HelloFacts::gather(var, source.torch_version());
        Agent::serve(
            &names,
            interval,
            facts,
            Box::new(source),
            global_steps().clone(),
            // Armed before the socket can be found: a launcher's SIGTERM may follow at once.
            super::on_sigterm::arm,
        )
        .map_err(|e| format!("cannot serve {}: {e}", names.names[0].display()))
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
            let agent = &running.agent;
            super::socket::remove_socket(agent.socket_path(), agent.socket_file());
        }
    }
}

#[cfg(test)]
mod tests;
