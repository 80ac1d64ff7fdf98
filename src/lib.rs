//! torchtop: a terminal monitor for machines that train PyTorch models.
//!
//! The engine and the screen are kept apart, in layers (lowest first; `layering.rs` checks that
//! nothing imports a layer above it):
//! `main → event → ui → app → {sampler → collect, rules}, actions, launch`, all resting on the
//! base `model`, `format`, `protocol`, `sys`, `config` and `terminal`.
//! - [`model`]: plain data (snapshot, GPU, process, host, allocator stats, history).
//! - [`collect`]: the data sources (NVML, /proc, agent sockets), each behind a trait.
//! - [`sampler`]: runs the sources off the UI task and publishes immutable snapshots.
//! - [`rules`]: warnings as pure functions of the snapshot history.
//! - [`actions`]: signals and renice, with typed errors and identity checks.
//! - [`ui`]: one pure render function per panel; drawing only reads.
//! - [`app`]: the state machine that turns keys and snapshots into view state; no I/O.
//! - [`event`]: the select loop over input, snapshots and signals.
//! - [`report`]: `--once` text and JSON.
//! - [`launch`]: `torchtop run` and `torchtop attach`, which put an agent into Python programs.
//! - [`memsnap`]: `torchtop snapshot`, the reader and viewer of PyTorch memory snapshots.
//! - [`serve`]: `torchtop serve`, a Prometheus exporter with dcgm-exporter's GPU names.
//! - [`cluster`]: `torchtop cluster`, a view of many machines read from Prometheus.
//! - [`record`]: recordings (`torchtop record`, `R`); [`replay`]: `torchtop replay`.
//!
//! ## Threads and what flows between them
//!
//! ```text
//!  terminal ──keys, mouse, resize──▶ torchtop-input ───Input (bounded)───┐
//!  hang-up  ─────────────────────── torchtop-hangup ──Control──────────┐ │
//!  SIGTERM, SIGTSTP, SIGCONT ─────── torchtop-signals ─Control─────────┤ │
//!                                    torchtop-watchdog: ends a stuck   │ │
//!                                    loop on SIGTERM, restores the tty │ │
//!                                                                      ▼ ▼
//!  ┌────────────────────────── event loop (tokio, the UI task) ──────────────────────────┐
//!  │ app (state, no I/O) ── ui::draw reads the newest snapshot and the history only      │
//!  └──┬─────────────▲─────────────────┬───────────────────▲──────────────┬──────────────┘
//!     │ SamplerRequest (tree on/off,  │ the newest Arc<    │ Action       │ Snapshot per
//!     │ agent commands, snapshots)    │ Snapshot>, 1 wake  │ Request ▼    │ tick (R on)
//!     ▼                               │                    │ spawn_blocking│         ▼
//!  torchtop-sampler: one tick per -d ─┘   actions::perform ─ActionReport─┘  torchtop-record:
//!   │ collects, runs the rules,           (pidfd signals, renice;           zstd blocks to
//!   │ publishes an immutable snapshot      identity checked first)          the .ttrec file
//!   │ keeps the clock: sleeps until the tick, then reads every healthy GPU itself, one
//!   │ after another (Xid events polled with each), with an alarm armed around those calls
//!   ├─▶ torchtop-driver: loads NVML and recounts the GPUs every 10 s (calls that may block)
//!   ├─▶ torchtop-alarm: asleep until a GPU call overruns the deadline; then the stuck
//!   │     thread goes on as that GPU's worker and a new torchtop-sampler takes over
//!   ├─▶ torchtop-gpus: a GPU of its own only while its calls overrun the deadline; its
//!   │     "round over" comes through the same channel as the UI's requests
//!   ├─▶ torchtop-agents: the agents' Unix sockets (poll); stats lines back, commands out
//!   └─  /proc is read on the sampler thread itself (GPU rows off screen every 5 s)
//!   (the sampler and the threads it starts run as SCHED_BATCH: waking one another preempts
//!   nobody; the UI thread is SCHED_BATCH too while it follows the sampler's core, and a normal
//!   thread again whenever a key is handed to it)
//! ```
//!
//! A hung driver call stalls at most the thread inside it: the sampler publishes what it has, and the
//! event loop never waits on anything but its channels, so a key is handled at once.

/// `eprintln!` that never panics: a closed stderr (a pipe whose reader went away, a lost
/// journald stream) turned `torchtop record`'s clean stop on SIGTERM into a panic, exit
/// status 101, which no table of exit statuses names. What cannot be said is dropped.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!` that never panics: `torchtop replay --summary | true` closed the pipe before the
/// summary was written, and `println!` panicked (exit status 101). A reader that has gone
/// wants nothing more.
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub mod actions;
pub mod app;
pub mod cli;
pub mod cluster;
pub mod collect;
pub mod config;
pub mod event;
pub mod format;
pub mod launch;
pub mod memsnap;
pub mod model;
pub(crate) mod protocol;
pub mod record;
pub mod replay;
pub mod report;
pub(crate) mod rules;
pub mod sampler;
pub mod serve;
pub mod settings;
pub(crate) mod sys;
// Built with the `torch` feature (and for its tests, which need no libtorch).
#[cfg(any(feature = "torch", test))]
// Its `pub` items are the public `torchtop::agent`, which exists with the feature only.
#[cfg_attr(not(feature = "torch"), allow(unreachable_pub))]
pub(crate) mod tch_agent;
pub(crate) mod terminal;
pub(crate) mod ui;
/// The event loop's drawing, off screen, for `cargo bench --bench frame`; not an interface.
#[doc(hidden)]
pub use ui::bench as frame_bench;

/// The agent for Rust training programs on tch/libtorch: `torchtop::agent::start()` once (feature
/// `torch`), `torchtop::agent::step()` every training step. This is the public face of
/// `tch_agent`, which holds the server and the libtorch source.
#[cfg(feature = "torch")]
pub mod agent {
    pub use crate::tch_agent::{demo, start, start_with, step, stop};
}

#[cfg(test)]
mod layering;

/// What the tests promise a CI machine (they never skip there, and poll against one generous
/// deadline), shared with the integration tests.
#[cfg(test)]
#[path = "../tests/common/ci.rs"]
pub(crate) mod test_ci;
