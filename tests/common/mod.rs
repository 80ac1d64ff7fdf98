//! Shared helpers for the integration tests.
#![allow(dead_code)]

pub mod ci;
pub mod fake_nvml;
pub mod forked_agent;
pub mod prometheus;
pub mod pty;
pub mod synthetic;

use std::path::PathBuf;

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use ci::{
    assert_no_fatal_signal_on_its_way, in_ci, output_within_patience, process_state,
    require_program, skip_or_fail, wait_until, PATIENCE,
};

/// The torchtop binary that cargo built for these tests.
pub fn torchtop_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_torchtop"))
}
