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
