//! A stand-in for the NVIDIA driver's `libnvidia-ml.so.1`, driven by a TOML scenario, so that
//! torchtop (through nvml-wrapper's run-time loading), nvtop and nvitop can be tested on
//! machines without a GPU.
//!
//! - [`abi`]: return codes, enum values and `#[repr(C)]` structs of NVML's public header.
//! - [`scenario`]: the scenario file format, validation with line numbers, metric functions.
//! - [`state`]: init/shutdown, the clock, live reload of the scenario, hangs and faults.
//! - [`events`]: event sets and the scenario's Xid errors.
//! - [`exports`]: the `extern "C"` NVML symbols.
//! - [`mig`]: MIG devices: their handles, ids, memory and process lists.
//!
//! The scenario file is named by `TORCHTOP_FAKE_NVML_SCENARIO`; without it the library acts as
//! a machine with one idle GPU. See README.md for the format.

pub mod abi;
pub mod events;
pub mod exports;
pub mod mig;
pub mod scenario;
pub mod state;
