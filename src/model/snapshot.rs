//! One immutable picture of the machine, published by the sampler once per refresh.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{
    DriverInfo, GpuProcess, GpuSample, HostProcess, HostSnapshot, Job, MemsnapReady, OomReport,
    ProcessDetail, Warning,
};

/// The version of the `--once --json` document; bump on incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Snapshot {
    pub schema: u32,
    /// RFC 3339, UTC.
    pub time: String,
    /// The same moment as seconds since the Unix epoch.
    pub unix_seconds: f64,
    pub driver: DriverInfo,
    pub host: HostSnapshot,
    pub gpus: Vec<GpuSample>,
    /// NVML's processes, one row per (process, GPU), then the processes with an agent and no
    /// GPU ([`GpuProcess::no_gpu`], `"gpu": null` in JSON).
    #[serde(with = "super::process::rows_serde")]
    pub processes: Vec<GpuProcess>,
    /// The distributed jobs among the processes (two or more ranks each).
    pub jobs: Vec<Job>,
    pub warnings: Vec<Warning>,
    /// Outcomes of agent commands and other one-off news since the previous snapshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// The `/dev/nvidia*` device nodes found, listed only when the GPU library finished
    /// loading and failed: a driver that is installed but broken (the `driver-missing` rule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvidia_devices: Vec<String>,
    /// The tree view's host processes (the GPU processes, their ancestors and descendants),
    /// only while it asks for them; rows off screen carry their last figures, marked `stale`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_processes: Vec<HostProcess>,
    /// Out-of-memory errors agents reported in this monitor's lifetime, oldest first (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ooms: Vec<OomReport>,
    /// The snapshot file of the latest `S` request, once written: the event loop opens it.
    #[serde(skip)]
    pub memsnap_ready: Option<MemsnapReady>,
    /// What the open detail view asked the sampler to read about one process.
    #[serde(skip)]
    pub detail: Option<ProcessDetail>,
}

impl Snapshot {
    /// How many GPU processes the driver listed that this /proc does not show, inside a
    /// container below the host's PID namespace (host pids); `None` outside one (on the host,
    /// or in a container with `--pid=host`, such a row is a process that has ended), or when
    /// every one is found.
    pub fn hidden_host_pids(&self) -> Option<usize> {
        if !self.host.pids_foreign {
            return None;
        }
        let mut hidden: Vec<u32> = (self.processes.iter())
            .filter(|p| !p.visible && !p.no_gpu)
            .map(|p| p.pid)
            .collect();
        hidden.sort_unstable();
        hidden.dedup();
        Some(hidden.len()).filter(|&n| n > 0)
    }

    /// Replaces each GPU figure no GPU reports, and each process's GPU memory beyond its GPU's,
    /// by `None`, as the collectors do with what a driver says: for a snapshot read back from
    /// a file, which anyone can write (a replayed power of 1e308 W printed 309 digits).
    pub fn drop_implausible(&mut self) {
        for gpu in &mut self.gpus {
            gpu.drop_implausible();
        }
        let gpus = &self.gpus;
        for row in &mut self.processes {
            let Some(gpu) = gpus.iter().find(|g| g.index == row.gpu) else {
                continue;
            };
            if (row.gpu_memory_bytes).is_some_and(|b| !gpu.plausible_process_memory(b)) {
                row.gpu_memory_bytes = None;
            }
        }
    }

    pub fn at(time: std::time::SystemTime) -> Self {
        let mut snapshot = Snapshot::default();
        snapshot.reuse_at(time);
        snapshot
    }

    /// Makes this snapshot what [`Snapshot::at`] makes, keeping the room of its time text and
    /// of its GPU and process vectors, which the sampler fills again each tick.
    pub fn reuse_at(&mut self, time: std::time::SystemTime) {
        let mut text = std::mem::take(&mut self.time);
        let mut gpus = std::mem::take(&mut self.gpus);
        let mut processes = std::mem::take(&mut self.processes);
        // Refilled in place by the rules: their room kept.
        let warnings = std::mem::take(&mut self.warnings);
        let jobs = std::mem::take(&mut self.jobs);
        text.clear();
        gpus.clear();
        processes.clear();
        // Writing into a String cannot fail.
        let _ = write!(text, "{}", humantime::format_rfc3339_seconds(time));
        *self = Snapshot {
            schema: SCHEMA_VERSION,
            time: text,
            unix_seconds: time
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            gpus,
            processes,
            warnings,
            jobs,
            ..Default::default()
        };
    }

    pub fn gpu(&self, index: u32) -> Option<&GpuSample> {
        self.gpus.iter().find(|g| g.index == index)
    }
}
