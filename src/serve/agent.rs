//! The families an agent's figures make: PyTorch's caching allocator per torch device
//! (`torchtop_allocator_*`, `torchtop_alloc_retries_total`, `torchtop_ooms_total`) and the step
//! figures once per process (`torchtop_step`, `torchtop_step_time_seconds`,
//! `torchtop_agent_age_seconds`).
//!
//! Every process with an agent that the snapshot lists has them, also one NVML does not list as
//! a GPU process (a CPU/gloo rank, a rank before its first CUDA call, every rank while NVML is
//! broken): the figures come from the agent, not from NVML. Each device an agent reports is
//! exported once per process, labelled `cuda_device` and, on a process NVML lists, `gpu` with
//! the GPU the sampler mapped the device to (by its UUID, `CUDA_VISIBLE_DEVICES`, or its
//! ordinal where NVML's list does not contradict it); a device whose GPU is unknown has no `gpu`
//! label. A process NVML does not list has no `gpu` label at all, since which physical GPU is
//! behind its devices would be a guess without NVML's list (CUDA and NVML may number GPUs
//! differently). The labels of one device stay the same while its GPU's own figures are stale
//! or lost.

use std::collections::BTreeSet;

use crate::model::{DeviceAllocatorStats, GpuProcess, Snapshot, TorchInfo};

use super::exposition::{Family, Labels, Value};
use super::torchtop::{process_labels, with};

type AllocGetter = fn(&DeviceAllocatorStats) -> Option<u64>;

const ALLOCATOR: [(&str, &str, AllocGetter); 5] = [
    (
        "torchtop_allocator_allocated_bytes",
        "Bytes of tensors PyTorch's caching allocator has handed out on a device.",
        |d| d.allocated_bytes,
    ),
    (
        "torchtop_allocator_reserved_bytes",
        "Bytes PyTorch's caching allocator holds from CUDA on a device.",
        |d| d.reserved_bytes,
    ),
    (
        "torchtop_allocator_active_bytes",
        "Bytes in active blocks of PyTorch's caching allocator.",
        |d| d.active_bytes,
    ),
    (
        "torchtop_allocator_inactive_split_bytes",
        "Bytes in inactive, split blocks (fragmentation) of PyTorch's caching allocator.",
        |d| d.inactive_split_bytes,
    ),
    (
        "torchtop_allocator_peak_allocated_bytes",
        "Peak of allocated bytes since the process started or its peak was reset.",
        |d| d.peak_allocated_bytes,
    ),
];

/// The families being filled, and the pids whose step figures are in already.
struct AgentFamilies {
    bytes: Vec<Family>,
    retries: Family,
    ooms: Family,
    step: Family,
    step_time: Family,
    age: Family,
    stepped: BTreeSet<u32>,
}

impl AgentFamilies {
    fn new() -> Self {
        AgentFamilies {
            bytes: (ALLOCATOR.iter())
                .map(|(name, help, _)| Family::gauge(name, help))
                .collect(),
            retries: Family::counter(
                "torchtop_alloc_retries",
                "Times the allocator freed its cache and retried a cudaMalloc that failed.",
            ),
            ooms: Family::counter(
                "torchtop_ooms",
                "CUDA out-of-memory errors the allocator raised.",
            ),
            step: Family::gauge(
                "torchtop_step",
                "Training steps the process has marked with torchtop_agent.step().",
            ),
            step_time: Family::gauge(
                "torchtop_step_time_seconds",
                "Mean seconds between the process's recent training steps.",
            ),
            age: Family::gauge(
                "torchtop_agent_age_seconds",
                "Seconds since the process's agent last sent figures.",
            ),
            stepped: BTreeSet::new(),
        }
    }

    /// The step figures of a process.
    fn push_process(&mut self, labels: &Labels, torch: &TorchInfo) {
        self.step.push(labels.clone(), torch.step.map(Value::Int));
        let step_time = torch.step_time_seconds.map(Value::Float);
        self.step_time.push(labels.clone(), step_time);
        self.age
            .push(labels.clone(), torch.age_seconds.map(Value::Float));
    }

    /// One device's allocator figures under `labels` (which name the device).
    fn push_device(&mut self, labels: &Labels, device: &DeviceAllocatorStats) {
        for (family, (_, _, get)) in self.bytes.iter_mut().zip(ALLOCATOR.iter()) {
            family.push(labels.clone(), get(device).map(Value::Int));
        }
        let retries = device.alloc_retries.map(Value::Int);
        self.retries.push(labels.clone(), retries);
        self.ooms.push(labels.clone(), device.ooms.map(Value::Int));
    }

    fn into_families(self) -> Vec<Family> {
        let mut out = self.bytes;
        out.extend([self.retries, self.ooms, self.step, self.step_time, self.age]);
        out
    }
}

/// The agent families of every process with an agent: those NVML lists, and those listed for
/// their agent alone.
pub(crate) fn families(snapshot: &Snapshot, hostname: &str) -> Vec<Family> {
    let mut out = AgentFamilies::new();
    let devices = devices_on_this_node(snapshot);
    for process in &snapshot.processes {
        push_agent(&mut out, process, hostname, devices);
    }
    out.into_families()
}

/// How many CUDA devices a process here can have: the GPUs NVML knows, or while it knows none
/// (broken), as many as the largest nodes carry.
const DEVICES_WITHOUT_NVML: u32 = 16;

/// The bound on the torch device indices exported for a process. CUDA numbers a process's
/// devices from 0, never past the GPUs it can see; an agent that claims more (any local user
/// can run one, 64 devices over each of 256 connections) would only swell every scrape with
/// series of devices that are not there.
fn devices_on_this_node(snapshot: &Snapshot) -> u32 {
    match u32::try_from(snapshot.gpus.len()) {
        Ok(0) | Err(_) => DEVICES_WITHOUT_NVML,
        Ok(n) => n,
    }
}

/// A process's step figures and every device its agent reports, up to the devices this node
/// can have, once however many rows (GPUs) NVML lists it with: a device was exported only
/// where it mapped to a row's GPU, so a rank whose `cuda:0` CUDA and NVML place differently
/// had none. A device is labelled with the GPU its own mapping gives, on a process NVML lists.
fn push_agent(out: &mut AgentFamilies, row: &GpuProcess, host: &str, devices: u32) {
    let Some(torch) = &row.torch else {
        return;
    };
    if !out.stepped.insert(row.pid) {
        return;
    }
    let labels = process_labels(row, host);
    out.push_process(&labels, torch);
    let mut exported = BTreeSet::new();
    let reported = (torch.devices.iter()).filter(|d| d.index < devices && exported.insert(d.index));
    for device in reported {
        let mut labels = labels.clone();
        if let (false, Some(gpu)) = (row.no_gpu, device.gpu) {
            labels = with(labels, "gpu", gpu.to_string());
        }
        out.push_device(
            &with(labels, "cuda_device", device.index.to_string()),
            device,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{GpuSample, GpuState, ProcessKind};

    fn torch(step: u64, devices: Vec<DeviceAllocatorStats>) -> Arc<TorchInfo> {
        Arc::new(TorchInfo {
            step: Some(step),
            step_time_seconds: Some(0.5),
            age_seconds: Some(1.0),
            devices,
            ..Default::default()
        })
    }

    fn device(index: u32, allocated: u64) -> DeviceAllocatorStats {
        DeviceAllocatorStats {
            index,
            allocated_bytes: Some(allocated),
            ..Default::default()
        }
    }

    /// GPUs 0 and 1, pid 10 on GPU 0 (an agent on cuda:0, mapped to GPU 0), pid 20 an agent on the CPU and
    /// pid 30 an agent with cuda:0 and cuda:1 that NVML does not list.
    fn snapshot() -> Snapshot {
        let mut on_gpu = GpuProcess::new(10, 0, ProcessKind::Compute);
        let mapped = DeviceAllocatorStats {
            gpu: Some(0),
            ..device(0, 100)
        };
        on_gpu.torch = Some(torch(5, vec![mapped]));
        let cpu_rank = GpuProcess::agent_only(20, torch(7, Vec::new()));
        let unlisted = GpuProcess::agent_only(30, torch(9, vec![device(0, 300), device(1, 310)]));
        Snapshot {
            gpus: (0..2)
                .map(|index| GpuSample {
                    index,
                    state: GpuState::Ok,
                    ..Default::default()
                })
                .collect(),
            processes: vec![on_gpu, cpu_rank, unlisted],
            ..Default::default()
        }
    }

    fn text(snapshot: &Snapshot) -> String {
        let families = families(snapshot, "node1");
        super::super::exposition::encode(families, super::super::exposition::Format::Prometheus)
    }

    #[test]
    fn a_process_nvml_lists_keeps_its_gpu_and_cuda_device_labels() {
        let out = text(&snapshot());
        assert!(
            out.contains(
                "torchtop_allocator_allocated_bytes{Hostname=\"node1\",pid=\"10\",gpu=\"0\",\
                 cuda_device=\"0\"} 100\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("torchtop_step{Hostname=\"node1\",pid=\"10\"} 5\n"),
            "{out}"
        );
    }

    /// A review: two ranks on `cuda:0` that NVML lists on GPU 0 and GPU 1; the second's
    /// allocator series were dropped, since its device did not map to its row's GPU. A process
    /// NVML lists on two GPUs has each device once, under the GPU its own mapping names, or
    /// without `gpu` where that is unknown.
    #[test]
    fn every_device_of_a_process_nvml_lists_is_exported_once_under_its_own_gpu() {
        let mut snapshot = snapshot();
        let on = |gpu: Option<u32>, index: u32| DeviceAllocatorStats {
            gpu,
            ..device(index, 400 + u64::from(index))
        };
        let torch = torch(3, vec![on(Some(0), 0), on(None, 1), on(Some(0), 0)]);
        for gpu in [1, 0] {
            let mut row = GpuProcess::new(40, gpu, ProcessKind::Compute);
            row.torch = Some(torch.clone());
            snapshot.processes.push(row);
        }
        let out = text(&snapshot);
        let of_40 =
            |l: &&str| l.starts_with("torchtop_allocator_allocated") && l.contains("\"40\"");
        let shown: Vec<&str> = out.lines().filter(of_40).collect();
        assert_eq!(
            shown,
            [
                "torchtop_allocator_allocated_bytes{Hostname=\"node1\",pid=\"40\",gpu=\"0\",\
                 cuda_device=\"0\"} 400",
                "torchtop_allocator_allocated_bytes{Hostname=\"node1\",pid=\"40\",\
                 cuda_device=\"1\"} 401",
            ],
            "{out}"
        );
        let steps = out.lines().filter(|l| l.starts_with("torchtop_step{"));
        assert_eq!(steps.filter(|l| l.contains("\"40\"")).count(), 1, "{out}");
    }

    /// A review: an agent NVML does not list could claim 64 devices on each of 256
    /// connections, about 115,000 series a scrape from one local user.
    #[test]
    fn devices_past_the_nodes_gpus_are_not_exported() {
        let mut snapshot = snapshot();
        let claims = (0..64).map(|i| device(i, 1)).collect();
        snapshot.processes[2] = GpuProcess::agent_only(30, torch(9, claims));
        let out = text(&snapshot);
        let of_30 =
            |l: &&str| l.starts_with("torchtop_allocator_allocated") && l.contains("\"30\"");
        let shown: Vec<&str> = out.lines().filter(of_30).collect();
        assert_eq!(shown.len(), 2, "two GPUs here: {shown:?}");
        assert!(shown[1].contains("cuda_device=\"1\""), "{shown:?}");
        snapshot.gpus.clear();
        let out = text(&snapshot);
        let shown = out.lines().filter(of_30).count();
        assert_eq!(shown, DEVICES_WITHOUT_NVML as usize, "NVML knows no GPU");
    }

    /// A review: the agent series of a process on a hung (stale) GPU were dropped with the
    /// GPU's own figures, though the agent's are current.
    #[test]
    fn a_process_on_a_stale_or_lost_gpu_keeps_its_agent_series() {
        for state in [GpuState::Stale, GpuState::Lost] {
            let mut snapshot = snapshot();
            snapshot.gpus[0].state = state;
            let out = text(&snapshot);
            assert!(
                out.contains("torchtop_step{Hostname=\"node1\",pid=\"10\"} 5\n"),
                "{state:?}: {out}"
            );
        }
    }

    /// A review: the agent series of processes NVML does not list (a CPU rank, a rank before its
    /// first CUDA call, every rank while NVML is broken) were left out of the exposition.
    #[test]
    fn processes_nvml_does_not_list_have_their_agent_series_without_a_gpu_label() {
        let out = text(&snapshot());
        for wanted in [
            "torchtop_step{Hostname=\"node1\",pid=\"20\"} 7\n",
            "torchtop_step_time_seconds{Hostname=\"node1\",pid=\"20\"} 0.5\n",
            "torchtop_agent_age_seconds{Hostname=\"node1\",pid=\"20\"} 1.0\n",
            "torchtop_step{Hostname=\"node1\",pid=\"30\"} 9\n",
            "torchtop_allocator_allocated_bytes{Hostname=\"node1\",pid=\"30\",cuda_device=\"0\"} 300\n",
            "torchtop_allocator_allocated_bytes{Hostname=\"node1\",pid=\"30\",cuda_device=\"1\"} 310\n",
        ] {
            assert!(out.contains(wanted), "no {wanted:?} in:\n{out}");
        }
        // The CPU rank reports no device: no allocator series is made up for it.
        let allocator_of_20 =
            (out.lines()).any(|l| l.starts_with("torchtop_allocator_") && l.contains("pid=\"20\""));
        assert!(!allocator_of_20, "{out}");
        // Missing figures stay missing: the stand-in devices report no reserved bytes.
        assert!(!out.contains("torchtop_allocator_reserved_bytes{"), "{out}");
    }
}
