//! The integration tests that can share one process, as modules of one test binary: one link
//! instead of twelve after each change to the library (about 30 s less per rebuild here).
//!
//! Run one file's tests with `cargo test --test it memsnap::`. Tests that need a process of their
//! own stay separate binaries in `tests/`: `actions` and `root_attacks` re-execute their own
//! binary as helpers (and `root_attacks` adds an `.init_array` hook), `agent_attach` and
//! `fake_nvml_library` set environment variables that every child would inherit,
//! `agent_hub_limits` counts this process's threads, `tch_demo` needs the `torch` feature, and
//! `make_demo` is not a test but the generator of `assets/demo.ttrec` (ignored by `cargo test`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../launch_support/mod.rs"]
mod launch_support;

use common::ci;

mod agent_and_rules_e2e;
mod agent_python;
mod agents_in_pid_namespaces;
mod amd_node;
mod amd_smi;
mod attach_injector;
mod cluster_dcgm_beside;
mod cluster_prometheus;
mod container_pids_e2e;
mod containers_e2e;
mod grafana_dashboard;
mod hpc_containers_e2e;
mod json_contract;
mod kubernetes_e2e;
mod memsnap;
mod mig_fake_nvml;
mod nvml_call_counts;
mod once_fake_nvml;
mod once_filters;
mod oom_memsnap;
mod record_full_disk;
mod record_replay;
mod record_replay_times;
mod record_signals;
mod root_reads_users_agents;
mod run_launch;
mod serve_agents;
mod serve_exporter;
mod serve_mig;
mod setup_screen;
mod torch_panel_e2e;
mod tui_actions;
mod tui_fake_nvml;
mod tui_screen;
mod tui_terminal;
mod tui_warnings;
mod usage_errors;
mod warnings_e2e;
