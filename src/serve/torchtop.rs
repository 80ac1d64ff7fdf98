//! The families only torchtop has, under the `torchtop_` prefix: GPU processes with their
//! rank and job, the host's memory and vm settings, the active warnings, and the exporter's own
//! figures; the PyTorch allocator and steps of processes with an agent are in [`super::agent`].
//!
//! Series are bounded by what the machine holds: one per GPU process or process with an agent
//! (never per host process), per allocator device of those processes, per warning. Command lines and environments can
//! hold secrets (tokens in argv, keys in environ), so they are exported only when asked for.

use std::collections::BTreeSet;

use crate::model::{GpuProcess, GpuState, Severity, Snapshot, Subject, Warning};
use crate::rules::jobs::{job_key, job_rank};

use super::exposition::{Family, Labels, Value};

/// Longest label value taken from a process (a command line), in bytes.
const MAX_LABEL_BYTES: usize = 512;

/// The label that names a process's distributed job. Not `job`: Prometheus gives every series
/// a `job` label of its own (the scrape job) and would rename ours to `exported_job`.
pub(crate) const JOB_LABEL: &str = "training_job";

/// What the exporter adds about itself at scrape time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OwnFigures {
    /// Seconds from the scrape's arrival to the encoding of these figures.
    pub(crate) scrape_seconds: Option<f64>,
    /// Seconds since the snapshot being served was taken.
    pub(crate) sample_age_seconds: Option<f64>,
}

impl OwnFigures {
    /// The figures of a scrape happening now; the duration is filled in while encoding.
    pub(crate) fn at_scrape(snapshot: &Snapshot) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        OwnFigures {
            scrape_seconds: None,
            sample_age_seconds: Some((now - snapshot.unix_seconds).max(0.0)),
        }
    }
}

fn truncated(text: &str) -> String {
    crate::format::within_bytes(text, MAX_LABEL_BYTES).to_string()
}

/// Host, pid and job labels of a process; `gpu` is added where a row is about one GPU.
pub(crate) fn process_labels(process: &GpuProcess, hostname: &str) -> Labels {
    let identity = job_rank(process);
    let mut labels: Labels = vec![
        ("Hostname", hostname.to_string()),
        ("pid", process.pid.to_string()),
    ];
    if let Some(user) = &process.user {
        labels.push(("user", truncated(user)));
    }
    if let Some(rank) = identity.rank {
        labels.push(("rank", rank.to_string()));
    }
    if let Some(local_rank) = identity.local_rank {
        labels.push(("local_rank", local_rank.to_string()));
    }
    // So that `torchtop cluster` can count the ranks of a node gone for good.
    if let Some(world_size) = identity.world_size {
        labels.push(("world_size", world_size.to_string()));
    }
    if let Some(job) = job_key(process) {
        labels.push((JOB_LABEL, truncated(&job)));
    }
    labels
}

pub(super) fn with(mut labels: Labels, key: &'static str, value: String) -> Labels {
    labels.push((key, value));
    labels
}

/// Every `torchtop_` family of `snapshot`.
pub(crate) fn families(
    snapshot: &Snapshot,
    hostname: &str,
    expose_commands: bool,
    own: OwnFigures,
) -> Vec<Family> {
    let mut out = process_families(snapshot, hostname);
    out.extend(super::mig::families(snapshot, hostname));
    if expose_commands {
        out.push(command_family(snapshot, hostname));
    }
    out.extend(super::agent::families(snapshot, hostname));
    out.extend(host_families(snapshot, hostname));
    out.push(warning_family(&snapshot.warnings, hostname));
    out.push(nvml_family(snapshot, hostname));
    out.extend(own_families(hostname, own));
    out
}

/// GPU processes on GPUs whose figures are current, each (pid, GPU) once.
pub(super) fn current_rows(snapshot: &Snapshot) -> Vec<&GpuProcess> {
    let mut seen = BTreeSet::new();
    snapshot
        .processes
        .iter()
        .filter(|p| snapshot.gpu(p.gpu).is_some_and(|g| g.state == GpuState::Ok))
        .filter(|p| seen.insert((p.pid, p.gpu)))
        .collect()
}

fn process_families(snapshot: &Snapshot, hostname: &str) -> Vec<Family> {
    let mut memory = Family::gauge(
        "torchtop_process_gpu_memory_bytes",
        "GPU memory a process holds on one GPU, as NVML reports it.",
    );
    let mut sm = Family::gauge(
        "torchtop_process_sm_utilization_percent",
        "Share of the GPU's SMs a process kept busy over NVML's last sample (in %).",
    );
    for process in current_rows(snapshot) {
        let labels = with(
            process_labels(process, hostname),
            "gpu",
            process.gpu.to_string(),
        );
        memory.push(labels.clone(), process.gpu_memory_bytes.map(Value::Int));
        sm.push(labels, process.sm_percent.map(|v| Value::Int(u64::from(v))));
    }
    vec![memory, sm]
}

fn command_family(snapshot: &Snapshot, hostname: &str) -> Family {
    let mut info = Family::gauge(
        "torchtop_process_info",
        "A GPU process's command line and launcher variables (only with --expose-commands).",
    );
    let mut seen = BTreeSet::new();
    for process in snapshot.processes.iter().filter(|p| seen.insert(p.pid)) {
        let mut labels = process_labels(process, hostname);
        if let Some(command) = &process.command {
            labels.push(("command", truncated(command)));
        }
        if let Some(env) = &process.env {
            let vars = [
                ("cuda_visible_devices", &env.cuda_visible_devices),
                ("pytorch_cuda_alloc_conf", &env.pytorch_cuda_alloc_conf),
                ("master_addr", &env.master_addr),
                ("master_port", &env.master_port),
                ("torchelastic_run_id", &env.torchelastic_run_id),
            ];
            for (key, value) in vars {
                if let Some(value) = value {
                    labels.push((key, truncated(value)));
                }
            }
        }
        info.push(labels, Some(Value::Int(1)));
    }
    info
}

fn host_families(snapshot: &Snapshot, hostname: &str) -> Vec<Family> {
    let host = &snapshot.host;
    let int = |v: Option<u64>| v.map(Value::Int);
    let small = |v: Option<u32>| v.map(|v| Value::Int(u64::from(v)));
    let rows: [(&'static str, &'static str, Option<Value>); 7] = [
        (
            "torchtop_host_memory_total_bytes",
            "The host's memory (MemTotal).",
            int(host.memory.total_bytes),
        ),
        (
            "torchtop_host_memory_available_bytes",
            "Memory available to new work without swapping (MemAvailable).",
            int(host.memory.available_bytes),
        ),
        (
            "torchtop_host_memory_used_bytes",
            "Total minus available memory, as free(1) reports used.",
            int(host.memory.used_bytes),
        ),
        (
            "torchtop_host_swap_total_bytes",
            "The host's swap space.",
            int(host.swap.total_bytes),
        ),
        (
            "torchtop_host_swap_used_bytes",
            "Swap space in use.",
            int(host.swap.used_bytes),
        ),
        (
            "torchtop_host_vm_swappiness",
            "The vm.swappiness sysctl.",
            small(host.vm.swappiness),
        ),
        (
            "torchtop_host_vm_overcommit_memory",
            "The vm.overcommit_memory sysctl (0 heuristic, 1 always, 2 never).",
            small(host.vm.overcommit_memory),
        ),
    ];
    rows.into_iter()
        .map(|(name, help, value)| {
            let mut family = Family::gauge(name, help);
            family.push(vec![("Hostname", hostname.to_string())], value);
            family
        })
        .collect()
}

/// The subject of a warning as a label value: "gpu 0", "pid 1234", the job's id, "host".
pub(crate) fn subject_label(subject: &Subject) -> String {
    match subject {
        Subject::Gpu { index } => format!("gpu {index}"),
        Subject::Process { pid } => format!("pid {pid}"),
        Subject::Job { id } => truncated(id),
        Subject::Host => "host".to_string(),
    }
}

fn severity_label(severity: Severity) -> &'static str {
    match severity {
        Severity::Info => "info",
        Severity::Warn => "warn",
        Severity::Critical => "critical",
    }
}

fn warning_family(warnings: &[Warning], hostname: &str) -> Family {
    let mut family = Family::gauge(
        "torchtop_warning",
        "An active torchtop warning: 1 while it holds (see torchtop's `w` key for evidence).",
    );
    let mut seen = BTreeSet::new();
    for warning in warnings {
        let subject = subject_label(&warning.subject);
        if !seen.insert((warning.id.clone(), subject.clone())) {
            continue;
        }
        let labels = vec![
            ("Hostname", hostname.to_string()),
            ("id", truncated(&warning.id)),
            ("severity", severity_label(warning.severity).to_string()),
            ("subject", subject),
        ];
        family.push(labels, Some(Value::Int(1)));
    }
    family
}

/// Whether NVML answers: with no GPU series, a scrape alone could not tell a machine without
/// NVIDIA GPUs from one whose driver failed (node exporter's `*_scrape_collector_success`).
fn nvml_family(snapshot: &Snapshot, hostname: &str) -> Family {
    let mut family = Family::gauge(
        "torchtop_nvml_up",
        "1 while NVIDIA's NVML library is loaded and answers; 0 when it is not (no NVIDIA driver, \
         or a broken one: torchtop says why on stderr and in --once).",
    );
    let driver = &snapshot.driver;
    let up = driver.nvml_loaded && driver.error.is_none();
    family.push(
        vec![("Hostname", hostname.to_string())],
        Some(Value::Int(u64::from(up))),
    );
    family
}

fn own_families(hostname: &str, own: OwnFigures) -> Vec<Family> {
    let labels = || vec![("Hostname", hostname.to_string())];
    let mut duration = Family::gauge(
        "torchtop_scrape_duration_seconds",
        "Seconds this scrape took up to the encoding of this figure.",
    );
    duration.push(labels(), own.scrape_seconds.map(Value::Float));
    let mut age = Family::gauge(
        "torchtop_sample_age_seconds",
        "Seconds since the served snapshot was taken: it grows when the sampler stops.",
    );
    age.push(labels(), own.sample_age_seconds.map(Value::Float));
    vec![duration, age]
}
