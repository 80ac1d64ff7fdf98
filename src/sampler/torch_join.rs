//! Joins what the agents said onto the processes NVML lists: which physical GPU each torch
//! device is (by the UUID the agent reports, else through `CUDA_VISIBLE_DEVICES`), the memory
//! outside PyTorch and the headroom on that GPU, and the allocation churn between an agent's two
//! latest reports. Processes with an agent and no NVML entry come back as agent-only rows.

use std::collections::HashMap;

use crate::model::{DeviceAllocatorStats, GpuProcess, GpuSample, TorchInfo};

/// An allocation counter pair as last reported, with the agent's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Counted {
    at: f64,
    allocations: u64,
    frees: u64,
}

/// The churn each (pid, torch device) showed between its agent's two latest reports.
#[derive(Debug, Default)]
pub(crate) struct Churn {
    last: HashMap<(u32, u32), Counted>,
    rates: HashMap<(u32, u32), (f64, f64)>,
}

impl Churn {
    /// Updates the rates from `info`'s devices and writes them onto those devices.
    fn apply(&mut self, pid: u32, info: &mut TorchInfo) {
        let Some(at) = info.stats_unix_seconds else {
            return;
        };
        for device in &mut info.devices {
            let key = (pid, device.index);
            if let (Some(allocations), Some(frees)) = (device.allocations_total, device.frees_total)
            {
                let now = Counted {
                    at,
                    allocations,
                    frees,
                };
                match self.last.get(&key).copied() {
                    Some(before) if now.at > before.at => {
                        let elapsed = now.at - before.at;
                        // A reset of the counters (reset_peak does not, but a restart might)
                        // gives no rate rather than a negative one.
                        if now.allocations >= before.allocations && now.frees >= before.frees {
                            let rate = |a: u64, b: u64| (a - b) as f64 / elapsed;
                            self.rates.insert(
                                key,
                                (
                                    rate(now.allocations, before.allocations),
                                    rate(now.frees, before.frees),
                                ),
                            );
                        } else {
                            self.rates.remove(&key);
                        }
                        self.last.insert(key, now);
                    }
                    Some(_) => {}
                    None => {
                        self.last.insert(key, now);
                    }
                }
            }
            if let Some((allocs, frees)) = self.rates.get(&key) {
                device.allocations_per_second = Some(*allocs);
                device.frees_per_second = Some(*frees);
            }
        }
    }

    /// Forgets processes whose agents are gone, so the maps stay bounded.
    fn retain(&mut self, torch: &HashMap<u32, TorchInfo>) {
        self.last.retain(|(pid, _), _| torch.contains_key(pid));
        self.rates.retain(|(pid, _), _| torch.contains_key(pid));
    }
}

/// Puts each agent's figures on its process's rows, and returns a row for each agent whose
/// process NVML does not list (CPU-only, or before its first CUDA call).
pub(crate) fn join_torch(
    processes: &mut [GpuProcess],
    torch: &HashMap<u32, TorchInfo>,
    gpus: &[GpuSample],
    churn: &mut Churn,
) -> Vec<GpuProcess> {
    churn.retain(torch);
    // Without agents there is nothing to join; the rows come from NVML with no torch figures.
    if torch.is_empty() {
        return Vec::new();
    }
    let mut used: HashMap<u32, HashMap<u32, u64>> = HashMap::new();
    // Only the processes with an agent: a map for every GPU process would be built each tick.
    for p in processes.iter().filter(|p| torch.contains_key(&p.pid)) {
        if let Some(bytes) = p.gpu_memory_bytes {
            used.entry(p.pid).or_default().insert(p.gpu, bytes);
        }
    }
    let mut joined: HashMap<u32, TorchInfo> = HashMap::new();
    let mut pids: Vec<&u32> = torch.keys().collect();
    pids.sort();
    for &pid in pids {
        let mut info = torch[&pid].clone();
        let env_list = processes
            .iter()
            .find(|p| p.pid == pid)
            .and_then(|p| p.env.as_ref())
            .and_then(|e| e.cuda_visible_devices.clone());
        let list = info.cuda_visible_devices.clone().or(env_list);
        let empty = HashMap::new();
        let nvml = used.get(&pid).unwrap_or(&empty);
        for device in &mut info.devices {
            device.gpu = physical_gpu(device, list.as_deref(), gpus);
            fill_memory(device, nvml, gpus);
        }
        churn.apply(pid, &mut info);
        joined.insert(pid, info);
    }
    for process in processes.iter_mut() {
        process.torch = joined.get(&process.pid).cloned();
    }
    let mut agent_only: Vec<GpuProcess> = joined
        .into_iter()
        .filter(|(pid, _)| !processes.iter().any(|p| p.pid == *pid))
        .map(|(pid, info)| GpuProcess::agent_only(pid, info))
        .collect();
    agent_only.sort_by_key(|p| p.pid);
    agent_only
}

/// The NVML index of the GPU behind `cuda:N`: the GPU whose UUID the agent reported; else the
/// N-th entry of `CUDA_VISIBLE_DEVICES` (an index, or a `GPU-` UUID prefix); without that
/// variable, GPU N. A MIG entry or an entry that names no GPU gives `None`.
pub(crate) fn physical_gpu(
    device: &DeviceAllocatorStats,
    visible: Option<&str>,
    gpus: &[GpuSample],
) -> Option<u32> {
    if let Some(uuid) = device.uuid.as_deref() {
        let wanted = bare_uuid(uuid);
        if let Some(gpu) = gpus
            .iter()
            .find(|g| g.uuid.as_deref().is_some_and(|u| bare_uuid(u) == wanted))
        {
            return Some(gpu.index);
        }
    }
    let Some(list) = visible.map(str::trim) else {
        return Some(device.index);
    };
    let entry = list.split(',').map(str::trim).nth(device.index as usize)?;
    if let Ok(index) = entry.parse::<u32>() {
        return Some(index);
    }
    let prefix = entry.strip_prefix("GPU-")?.to_ascii_lowercase();
    if prefix.is_empty() {
        return None;
    }
    let mut matching = gpus.iter().filter(|g| {
        g.uuid
            .as_deref()
            .is_some_and(|u| bare_uuid(u).starts_with(&prefix))
    });
    // CUDA takes a unique prefix only.
    match (matching.next(), matching.next()) {
        (Some(gpu), None) => Some(gpu.index),
        _ => None,
    }
}

/// A UUID without NVML's `GPU-` prefix, lower case: torch reports it bare.
fn bare_uuid(uuid: &str) -> String {
    let uuid = uuid.trim();
    uuid.strip_prefix("GPU-")
        .unwrap_or(uuid)
        .to_ascii_lowercase()
}

/// Non-PyTorch memory from this process's NVML figure on the device's GPU, and the device's
/// total and headroom from the GPU's own figures.
fn fill_memory(device: &mut DeviceAllocatorStats, nvml: &HashMap<u32, u64>, gpus: &[GpuSample]) {
    let Some(index) = device.gpu else {
        return;
    };
    device.non_pytorch_bytes = match (nvml.get(&index), device.reserved_bytes) {
        (Some(used), Some(reserved)) => Some(used.saturating_sub(reserved)),
        _ => None,
    };
    let gpu = gpus.iter().find(|g| g.index == index);
    let total = gpu.and_then(|g| g.memory_total_bytes);
    device.device_total_bytes = total;
    device.headroom_bytes = match (total, gpu.and_then(|g| g.memory_used_bytes)) {
        (Some(total), Some(used)) => Some(total.saturating_sub(used)),
        _ => None,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessKind;

    const GIB: u64 = 1 << 30;

    fn gpu(index: u32) -> GpuSample {
        GpuSample {
            index,
            uuid: Some(format!("GPU-{index}a{index}b-0000-1111-2222-333344445555").into()),
            memory_total_bytes: Some(80 * GIB),
            memory_used_bytes: Some(50 * GIB + u64::from(index) * GIB),
            ..Default::default()
        }
    }

    fn device(index: u32, reserved: u64) -> DeviceAllocatorStats {
        DeviceAllocatorStats {
            index,
            allocated_bytes: Some(reserved - GIB),
            reserved_bytes: Some(reserved),
            ..Default::default()
        }
    }

    #[test]
    fn visible_devices_map_each_torch_ordinal_to_its_gpu() {
        let gpus: Vec<GpuSample> = (0..4).map(gpu).collect();
        let d1 = device(1, 10 * GIB);
        assert_eq!(physical_gpu(&d1, Some("2,3"), &gpus), Some(3));
        assert_eq!(physical_gpu(&d1, None, &gpus), Some(1));
        assert_eq!(physical_gpu(&d1, Some("GPU-0a0b,GPU-3a3b"), &gpus), Some(3));
        assert_eq!(physical_gpu(&d1, Some("0"), &gpus), None, "no 2nd entry");
        assert_eq!(physical_gpu(&d1, Some("0,MIG-abc"), &gpus), None);
        let by_uuid = DeviceAllocatorStats {
            uuid: Some("2a2b-0000-1111-2222-333344445555".into()),
            ..d1
        };
        assert_eq!(
            physical_gpu(&by_uuid, Some("0,1"), &gpus),
            Some(2),
            "the UUID wins over the variable"
        );
    }

    #[test]
    fn both_rows_of_a_two_gpu_process_carry_both_devices_with_their_own_figures() {
        let gpus: Vec<GpuSample> = (0..4).map(gpu).collect();
        let mut rows = vec![
            GpuProcess::new(7, 2, ProcessKind::Compute),
            GpuProcess::new(7, 3, ProcessKind::Compute),
        ];
        rows[0].gpu_memory_bytes = Some(12 * GIB);
        rows[1].gpu_memory_bytes = Some(21 * GIB);
        let info = TorchInfo {
            cuda_visible_devices: Some("2,3".into()),
            devices: vec![device(0, 10 * GIB), device(1, 20 * GIB)],
            ..Default::default()
        };
        let torch = HashMap::from([(7, info)]);
        let extra = join_torch(&mut rows, &torch, &gpus, &mut Churn::default());
        assert!(extra.is_empty());
        for row in &rows {
            let devices = &row.torch.as_ref().unwrap().devices;
            assert_eq!(devices[0].gpu, Some(2));
            assert_eq!(devices[1].gpu, Some(3));
            assert_eq!(devices[0].non_pytorch_bytes, Some(2 * GIB));
            assert_eq!(devices[1].non_pytorch_bytes, Some(GIB));
            assert_eq!(devices[1].headroom_bytes, Some(27 * GIB));
            assert_eq!(devices[1].device_total_bytes, Some(80 * GIB));
            assert_eq!(devices[1].cached_bytes(), Some(GIB));
        }
    }

    #[test]
    fn an_agent_without_an_nvml_entry_becomes_an_agent_only_row() {
        let torch = HashMap::from([(9, TorchInfo::default())]);
        let extra = join_torch(&mut [], &torch, &[], &mut Churn::default());
        assert_eq!(extra.len(), 1);
        assert!(extra[0].no_gpu && extra[0].torch.is_some());
        assert_eq!(extra[0].gpu_memory_bytes, None);
    }

    #[test]
    fn churn_is_the_counter_change_over_the_agents_clock() {
        let mut churn = Churn::default();
        let report = |at: f64, allocs: u64, frees: u64| TorchInfo {
            stats_unix_seconds: Some(at),
            devices: vec![DeviceAllocatorStats {
                allocations_total: Some(allocs),
                frees_total: Some(frees),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut first = report(100.0, 1000, 900);
        churn.apply(1, &mut first);
        assert_eq!(first.devices[0].allocations_per_second, None, "one report");
        let mut second = report(102.0, 1400, 1300);
        churn.apply(1, &mut second);
        assert_eq!(second.devices[0].allocations_per_second, Some(200.0));
        assert_eq!(second.devices[0].frees_per_second, Some(200.0));
        let mut same = report(102.0, 1400, 1300);
        churn.apply(1, &mut same);
        assert_eq!(
            same.devices[0].allocations_per_second,
            Some(200.0),
            "the same report again keeps the rate"
        );
    }
}
