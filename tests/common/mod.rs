//! Shared helpers for the integration tests.
#![allow(dead_code)]

pub mod fake_nvml;
pub mod forked_agent;
pub mod prometheus;
pub mod pty;
pub mod synthetic;

use std::path::PathBuf;

/// The torchtop binary that cargo built for these tests.
pub fn torchtop_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_torchtop"))
}
