//! Joins what the agents said onto the processes NVML lists: which physical GPU each torch
//! device is (by the UUID the agent reports, else through `CUDA_VISIBLE_DEVICES`, else by its
//! ordinal where NVML's process list does not contradict that), the memory
//! outside PyTorch and the headroom on that GPU, and the allocation churn between an agent's two
//! latest reports. Processes with an agent and no NVML entry come back as agent-only rows. The
//! joined figures are kept per pid and refilled in place once no snapshot holds them: a tick
//! with agents connected allocates nothing here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::collect::agent::{Heard, Silent};
use crate::model::rocm_visible::rocm_ordinal;
use crate::model::{
    DeviceAllocatorStats, GpuProcess, GpuSample, GpuState, GpuVendor, LaunchEnv, TorchInfo,
};

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
    fn retain(&mut self, heard: &HashMap<u32, Heard>) {
        self.last.retain(|(pid, _), _| heard.contains_key(pid));
        self.rates.retain(|(pid, _), _| heard.contains_key(pid));
    }
}

/// Joined figures kept per pid beyond this many (each held by a snapshot still on screen or
/// in the recycler) are not kept: the next tick makes a new one.
const KEPT_PER_PID: usize = 4;

/// What the join keeps between ticks: the churn, and per pid the joined figures handed out
/// lately, refilled in place once no snapshot holds them, so a tick allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct TorchJoin {
    churn: Churn,
    kept: HashMap<u32, Vec<Arc<TorchInfo>>>,
    /// This tick's joined figures, by pid, sorted, with the agent process's start time.
    joined: Vec<(u32, Option<u64>, Arc<TorchInfo>)>,
}

/// Puts each agent's figures on its process's rows, and adds to `agent_only` a row for each
/// agent whose process NVML does not list (CPU-only, or before its first CUDA call), by pid.
pub(crate) fn join_torch(
    processes: &mut [GpuProcess],
    heard: &HashMap<u32, Heard>,
    gpus: &[GpuSample],
    join: &mut TorchJoin,
    agent_only: &mut Vec<GpuProcess>,
) {
    join.churn.retain(heard);
    join.kept.retain(|pid, _| heard.contains_key(pid));
    // Without agents there is nothing to join; the rows come from NVML with no torch figures.
    if heard.is_empty() {
        return;
    }
    let now = Instant::now();
    join.joined.clear();
    for (&pid, figures) in heard {
        let kept = join.kept.entry(pid).or_default();
        let slot = free_slot(kept);
        // A slot is free only when nothing else holds it.
        let Some(info) = Arc::get_mut(&mut kept[slot]) else {
            continue;
        };
        info.refill_from(&figures.info);
        info.age_seconds = figures.age_seconds(now);
        join_devices(pid, info, processes, gpus);
        join.churn.apply(pid, info);
        join.joined
            .push((pid, figures.start_ticks, Arc::clone(&kept[slot])));
    }
    join.joined.sort_unstable_by_key(|(pid, ..)| *pid);
    for process in processes.iter_mut() {
        let found = join
            .joined
            .binary_search_by_key(&process.pid, |(pid, ..)| *pid);
        // A process that started after the agent's is another one given the same pid.
        let same =
            |_: &usize| (heard.get(&process.pid)).is_some_and(|h| h.is_of(process.start_ticks));
        process.torch = found
            .ok()
            .filter(same)
            .map(|i| Arc::clone(&join.joined[i].2));
    }
    for (pid, start_ticks, info) in &join.joined {
        if !processes.iter().any(|p| p.pid == *pid) {
            let mut row = GpuProcess::agent_only(*pid, Arc::clone(info));
            row.start_ticks = *start_ticks;
            agent_only.push(row);
        }
    }
    // Dropped now, so that only the snapshot holds them and the next tick may refill them.
    join.joined.clear();
}

/// Marks the rows of processes whose agent accepted the connection and has said nothing since
/// (a process that froze before the monitor started): without it such a row read as a process
/// with no agent at all. Rows with figures, and later processes given an agent's pid, are left
/// alone.
pub(crate) fn mark_silent(processes: &mut [GpuProcess], silent: &[Silent]) {
    for process in processes.iter_mut() {
        let of = |s: &&Silent| {
            s.pid == process.pid
                && match (s.start_ticks, process.start_ticks) {
                    (Some(ours), Some(theirs)) => ours == theirs,
                    _ => true,
                }
        };
        process.agent_silent_seconds = match process.torch {
            Some(_) => None,
            None => silent.iter().find(of).map(|s| s.seconds),
        };
    }
}

/// The index in `kept` of figures nothing else holds, made (allocated) when none is free.
fn free_slot(kept: &mut Vec<Arc<TorchInfo>>) -> usize {
    if let Some(free) = kept.iter_mut().position(|a| Arc::get_mut(a).is_some()) {
        return free;
    }
    if kept.len() == KEPT_PER_PID {
        kept.remove(0);
    }
    kept.push(Arc::default());
    kept.len() - 1
}

/// Each device's physical GPU, its memory outside PyTorch and its GPU's headroom.
fn join_devices(pid: u32, info: &mut TorchInfo, processes: &[GpuProcess], gpus: &[GpuSample]) {
    let env = (processes.iter())
        .find(|p| p.pid == pid)
        .and_then(|p| p.env.as_deref());
    let env_list = env.and_then(|e| e.cuda_visible_devices.as_deref());
    let TorchInfo {
        devices,
        cuda_visible_devices,
        ..
    } = info;
    let list = cuda_visible_devices.as_deref().or(env_list);
    let amd = on_amd(pid, processes, gpus);
    let guessing =
        |d: &DeviceAllocatorStats| !amd && list.is_none() && gpu_of_uuid(d, gpus).is_none();
    let contradicted =
        (devices.iter()).any(|d| guessing(d) && contradicts(d.index, pid, processes, gpus));
    let only_device = devices.len() == 1;
    for device in devices.iter_mut() {
        device.gpu = if let Some(gpu) = gpu_of_uuid(device, gpus) {
            Some(gpu)
        } else if amd {
            amd_gpu(device.index, env, gpus)
        } else if list.is_none() {
            checked_guess(device.index, pid, processes, contradicted, only_device)
        } else {
            physical_gpu(device, list, gpus)
        };
        // The last row of the process on that GPU that has a figure, as NVML listed them.
        let nvml = |gpu: u32| {
            (processes.iter().rev())
                .find(|p| p.pid == pid && p.gpu == gpu && p.gpu_memory_bytes.is_some())
                .and_then(|p| p.gpu_memory_bytes)
        };
        fill_memory(device, nvml, gpus);
    }
}

/// Whether the process's torch devices are ROCm's: it is listed on an AMD GPU, or, listed on
/// none, every GPU here is AMD.
fn on_amd(pid: u32, processes: &[GpuProcess], gpus: &[GpuSample]) -> bool {
    let is_amd = |index: u32| (gpus.iter()).any(|g| g.index == index && g.vendor == GpuVendor::Amd);
    let mut rows = processes.iter().filter(|p| p.pid == pid).peekable();
    if rows.peek().is_none() {
        return !gpus.is_empty() && gpus.iter().all(|g| g.vendor == GpuVendor::Amd);
    }
    rows.any(|p| is_amd(p.gpu))
}

/// The AMD GPU behind a ROCm process's `cuda:N`, numbered as ROCr and HIP number what they
/// leave visible ([`rocm_ordinal`]); `None` where no AMD GPU has that ordinal. Reads two short
/// lists per AMD GPU: only AMD machines pay for it.
fn amd_gpu(index: u32, env: Option<&LaunchEnv>, gpus: &[GpuSample]) -> Option<u32> {
    let none = LaunchEnv::default();
    let env = env.unwrap_or(&none);
    (gpus.iter())
        .filter(|g| g.vendor == GpuVendor::Amd)
        .find(|g| rocm_ordinal(env, g, gpus) == Some(index))
        .map(|g| g.index)
}

/// Whether NVML disproves `cuda:N` = GPU N for this process: it lists the process, not on GPU
/// N, and GPU N is not stale or lost (whose processes NVML cannot list).
fn contradicts(index: u32, pid: u32, processes: &[GpuProcess], gpus: &[GpuSample]) -> bool {
    let mut on = processes.iter().filter(|p| p.pid == pid).map(|p| p.gpu);
    let listed = on.clone().next().is_some();
    let unreadable = (gpus.iter()).any(|g| g.index == index && g.state != GpuState::Ok);
    listed && !unreadable && !on.any(|gpu| gpu == index)
}

/// The NVML index of the GPU behind `cuda:N`: the GPU whose UUID the agent reported; else the
/// N-th entry of `CUDA_VISIBLE_DEVICES` (an index, or a `GPU-` UUID prefix); without that
/// variable, GPU N. A MIG entry or an entry that names no GPU gives `None`.
pub(crate) fn physical_gpu(
    device: &DeviceAllocatorStats,
    visible: Option<&str>,
    gpus: &[GpuSample],
) -> Option<u32> {
    if let Some(gpu) = gpu_of_uuid(device, gpus) {
        return Some(gpu);
    }
    let Some(list) = visible.map(str::trim) else {
        return Some(device.index);
    };
    let entry = list.split(',').map(str::trim).nth(device.index as usize)?;
    if let Ok(index) = entry.parse::<u32>() {
        return Some(index);
    }
    let prefix = entry.strip_prefix("GPU-")?;
    if prefix.is_empty() {
        return None;
    }
    let mut matching = gpus.iter().filter(|g| {
        (g.uuid.as_deref()).is_some_and(|u| starts_with_ignoring_case(bare_uuid(u), prefix))
    });
    // CUDA takes a unique prefix only.
    match (matching.next(), matching.next()) {
        (Some(gpu), None) => Some(gpu.index),
        _ => None,
    }
}

/// The NVML index of the GPU whose UUID the agent reported for `device`.
fn gpu_of_uuid(device: &DeviceAllocatorStats, gpus: &[GpuSample]) -> Option<u32> {
    let wanted = bare_uuid(device.uuid.as_deref()?);
    let gpu = gpus
        .iter()
        .find(|g| (g.uuid.as_deref()).is_some_and(|u| bare_uuid(u).eq_ignore_ascii_case(wanted)))?;
    Some(gpu.index)
}

/// `cuda:N` where neither a UUID nor `CUDA_VISIBLE_DEVICES` names its GPU: taken to be GPU N,
/// which is wrong wherever CUDA orders GPUs otherwise than NVML (CUDA's default order is fastest
/// first, NVML's the PCI bus). Where NVML disproves it for any device of the process
/// ([`contradicts`]), the order is wrong for all of them: the one device of a process NVML
/// lists on one GPU is on that GPU, and each device of a process with several is unknown.
/// Left as it was, the process's rows and its allocator panel named different GPUs, and `serve`
/// dropped the device.
fn checked_guess(
    index: u32,
    pid: u32,
    processes: &[GpuProcess],
    contradicted: bool,
    only_device: bool,
) -> Option<u32> {
    if !contradicted {
        return Some(index);
    }
    let mut on = processes.iter().filter(|p| p.pid == pid).map(|p| p.gpu);
    let first = on.next()?;
    (only_device && on.all(|gpu| gpu == first)).then_some(first)
}

/// A UUID without NVML's `GPU-` prefix: torch reports it bare. Compared ignoring case.
fn bare_uuid(uuid: &str) -> &str {
    let uuid = uuid.trim();
    uuid.strip_prefix("GPU-").unwrap_or(uuid)
}

fn starts_with_ignoring_case(text: &str, prefix: &str) -> bool {
    (text.as_bytes().get(..prefix.len()))
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// Non-PyTorch memory from this process's NVML figure on the device's GPU, and the device's
/// total and headroom from the GPU's own figures.
///
/// Headroom is the GPU's free memory as the driver reports it: NVML's total is used + free +
/// what the driver reserves for itself, which no program can allocate, so total minus used
/// overstated what is left by that reserve (512 MiB on an 80 GiB card). Only where the GPU
/// reports no free figure is it total minus used, the best left to go on.
fn fill_memory(
    device: &mut DeviceAllocatorStats,
    nvml: impl Fn(u32) -> Option<u64>,
    gpus: &[GpuSample],
) {
    let Some(index) = device.gpu else {
        return;
    };
    device.non_pytorch_bytes = match (nvml(index), device.reserved_bytes) {
        (Some(used), Some(reserved)) => Some(used.saturating_sub(reserved)),
        _ => None,
    };
    let gpu = gpus.iter().find(|g| g.index == index);
    let total = gpu.and_then(|g| g.memory_total_bytes);
    device.device_total_bytes = total;
    device.headroom_bytes = gpu.and_then(GpuSample::memory_headroom_bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessKind;

    const GIB: u64 = 1 << 30;

    fn heard(info: TorchInfo) -> Heard {
        Heard {
            info: Arc::new(info),
            stats_at: None,
            start_ticks: None,
        }
    }

    /// The agent's process started at tick 100; the rows' processes at tick 100 and 200.
    #[test]
    fn figures_go_only_on_the_process_that_started_when_the_agents_did() {
        let gpus = vec![gpu(0)];
        let info = TorchInfo {
            devices: vec![device(0, 10 * GIB)],
            ..Default::default()
        };
        let agent = Heard {
            start_ticks: Some(100),
            ..heard(info)
        };
        let heard = HashMap::from([(7, agent.clone()), (8, agent)]);
        let mut rows = vec![
            GpuProcess::new(7, 0, ProcessKind::Compute),
            GpuProcess::new(8, 0, ProcessKind::Compute),
        ];
        rows[0].start_ticks = Some(100);
        rows[1].start_ticks = Some(200);
        let agent_only = join(&mut rows, &heard, &gpus, &mut TorchJoin::default());
        assert!(rows[0].torch.is_some());
        assert!(rows[1].torch.is_none(), "a later process of pid 8");
        assert!(agent_only.is_empty(), "pid 8's row is another process's");
    }

    /// [`join_torch`], returning the agent-only rows.
    fn join(
        rows: &mut [GpuProcess],
        heard: &HashMap<u32, Heard>,
        gpus: &[GpuSample],
        state: &mut TorchJoin,
    ) -> Vec<GpuProcess> {
        let mut agent_only = Vec::new();
        join_torch(rows, heard, gpus, state, &mut agent_only);
        agent_only
    }

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
        assert_eq!(physical_gpu(&d1, Some("GPU-0A0B,GPU-3A3B"), &gpus), Some(3));
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

    /// A review: two ranks on `cuda:0` each, without `CUDA_VISIBLE_DEVICES` or a UUID, that NVML
    /// lists on GPU 0 and GPU 1; rank 1's device was put on GPU 0 (its ordinal), so its rows said
    /// GPU 1 and its allocator panel GPU 0, and `serve` dropped its allocator series.
    #[test]
    fn an_ordinal_that_nvml_contradicts_is_not_taken_for_the_gpu() {
        let gpus: Vec<GpuSample> = (0..4).map(gpu).collect();
        let on = |pid: u32, gpu: u32| GpuProcess::new(pid, gpu, ProcessKind::Compute);
        let mut rows = vec![on(7, 0), on(8, 1), on(9, 2), on(9, 3)];
        let info = |devices: Vec<u32>| TorchInfo {
            devices: devices.into_iter().map(|i| device(i, 10 * GIB)).collect(),
            ..Default::default()
        };
        let torch = HashMap::from([
            (7, heard(info(vec![0]))),
            (8, heard(info(vec![0]))),
            (9, heard(info(vec![0, 3]))),
            (10, heard(info(vec![1]))),
        ]);
        let unlisted = join(&mut rows, &torch, &gpus, &mut TorchJoin::default());
        let gpu_of = |row: &GpuProcess| -> Vec<Option<u32>> {
            let devices = &row.torch.as_ref().unwrap().devices;
            devices.iter().map(|d| d.gpu).collect()
        };
        assert_eq!(gpu_of(&rows[0]), [Some(0)], "the ordinal, as NVML agrees");
        assert_eq!(
            gpu_of(&rows[1]),
            [Some(1)],
            "its only GPU holds its only device"
        );
        // cuda:0 is not GPU 0, so the order is not NVML's: cuda:3 may be GPU 2 as well.
        assert_eq!(
            gpu_of(&rows[2]),
            [None, None],
            "cuda:0 and cuda:3 on 2 and 3"
        );
        assert_eq!(
            gpu_of(&unlisted[0]),
            [Some(1)],
            "nothing contradicts the ordinal"
        );
        let device = &rows[1].torch.as_ref().unwrap().devices[0];
        assert_eq!(device.headroom_bytes, Some(29 * GIB), "GPU 1's headroom");
    }

    /// A review: a rank on cuda:1 with a stray context on GPU 0 (NVML's order and CUDA's the
    /// same) was put on GPU 0 once GPU 1 fell off the bus: a lost GPU's processes are not
    /// listed, which disproves nothing.
    #[test]
    fn a_lost_gpu_does_not_disprove_the_ordinal() {
        let mut gpus: Vec<GpuSample> = (0..2).map(gpu).collect();
        gpus[1].state = GpuState::Lost;
        let mut rows = vec![GpuProcess::new(7, 0, ProcessKind::Compute)];
        let info = TorchInfo {
            devices: vec![device(1, 10 * GIB)],
            ..Default::default()
        };
        let torch = HashMap::from([(7, heard(info))]);
        join(&mut rows, &torch, &gpus, &mut TorchJoin::default());
        let devices = &rows[0].torch.as_ref().unwrap().devices;
        assert_eq!(devices[0].gpu, Some(1));
    }

    /// A review: a ROCm rank with ROCR_VISIBLE_DEVICES=2,3 (as Slurm's GRES sets it) sees
    /// cards 2 and 3 as cuda:0 and cuda:1; the ordinal guess put them on no GPU.
    #[test]
    fn a_rocm_process_s_devices_are_numbered_as_rocr_numbers_them() {
        let gpus: Vec<GpuSample> = (0..4)
            .map(|i| GpuSample {
                vendor: GpuVendor::Amd,
                vendor_index: Some(i),
                uuid: None,
                ..gpu(i)
            })
            .collect();
        let mut rows = vec![
            GpuProcess::new(7, 2, ProcessKind::Compute),
            GpuProcess::new(7, 3, ProcessKind::Compute),
        ];
        let env = LaunchEnv {
            rocr_visible_devices: Some("2,3".into()),
            ..Default::default()
        };
        for row in &mut rows {
            row.env = Some(Arc::new(env.clone()));
        }
        let info = TorchInfo {
            devices: vec![device(0, 10 * GIB), device(1, 10 * GIB)],
            ..Default::default()
        };
        let torch = HashMap::from([(7, heard(info))]);
        join(&mut rows, &torch, &gpus, &mut TorchJoin::default());
        let devices = &rows[0].torch.as_ref().unwrap().devices;
        let mapped: Vec<Option<u32>> = devices.iter().map(|d| d.gpu).collect();
        assert_eq!(mapped, [Some(2), Some(3)]);
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
        let torch = HashMap::from([(7, heard(info))]);
        let extra = join(&mut rows, &torch, &gpus, &mut TorchJoin::default());
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

    /// A review: with 512 MiB reserved by the driver, `headroom_bytes` read 40599 MiB while
    /// NVML said 40087 MiB were free. NVML's total is used + free + reserved.
    #[test]
    fn headroom_is_the_drivers_free_memory_not_total_minus_used() {
        let mut gpus = vec![gpu(0)];
        gpus[0].memory_free_bytes = Some(30 * GIB - 512 * (1 << 20));
        let mut rows = vec![GpuProcess::new(7, 0, ProcessKind::Compute)];
        rows[0].gpu_memory_bytes = Some(12 * GIB);
        let info = TorchInfo {
            devices: vec![device(0, 10 * GIB)],
            ..Default::default()
        };
        let torch = HashMap::from([(7, heard(info))]);
        join(&mut rows, &torch, &gpus, &mut TorchJoin::default());
        let devices = &rows[0].torch.as_ref().unwrap().devices;
        assert_eq!(devices[0].headroom_bytes, gpus[0].memory_free_bytes);
        assert_eq!(devices[0].device_total_bytes, Some(80 * GIB));
    }

    #[test]
    fn an_agent_without_an_nvml_entry_becomes_an_agent_only_row() {
        let torch = HashMap::from([(9, heard(TorchInfo::default()))]);
        let extra = join(&mut [], &torch, &[], &mut TorchJoin::default());
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

    #[test]
    fn joined_figures_are_refilled_in_place_once_no_snapshot_holds_them() {
        let mut gpus: Vec<GpuSample> = (0..2).map(gpu).collect();
        let info = TorchInfo {
            devices: vec![device(1, 10 * GIB)],
            ..Default::default()
        };
        let mut figures = heard(info);
        figures.stats_at = Some(Instant::now());
        let torch = HashMap::from([(7, figures)]);
        let mut state = TorchJoin::default();
        let mut tick = |gpus: &[GpuSample]| {
            let mut rows = vec![GpuProcess::new(7, 1, crate::model::ProcessKind::Compute)];
            rows[0].gpu_memory_bytes = Some(11 * GIB);
            assert!(join(&mut rows, &torch, gpus, &mut state).is_empty());
            rows[0].torch.take().unwrap()
        };
        let first = tick(&gpus);
        assert_eq!(first.devices[0].headroom_bytes, Some(29 * GIB));
        assert_eq!(first.devices[0].non_pytorch_bytes, Some(GIB));
        let first_age = first.age_seconds.unwrap();
        let at = Arc::as_ptr(&first);
        drop(first);
        gpus[1].memory_used_bytes = Some(60 * GIB);
        let second = tick(&gpus);
        assert_eq!(Arc::as_ptr(&second), at, "refilled in place");
        assert_eq!(second.devices[0].headroom_bytes, Some(20 * GIB), "fresh");
        assert!(second.age_seconds.unwrap() >= first_age);
        let third = tick(&gpus);
        assert!(!Arc::ptr_eq(&second, &third), "the held one is left alone");
        assert_eq!(
            second.devices[0].headroom_bytes,
            third.devices[0].headroom_bytes
        );
        let held: Vec<_> = (0..KEPT_PER_PID * 2).map(|_| tick(&gpus)).collect();
        assert!(held.iter().all(|t| t.devices[0].gpu == Some(1)));
        assert!(state.kept[&7].len() <= KEPT_PER_PID, "bounded");
    }
}
