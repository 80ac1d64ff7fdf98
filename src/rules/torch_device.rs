//! Which of a process's torch devices is the NVML GPU of its row: torch numbers devices after
//! `CUDA_VISIBLE_DEVICES` (or `HIP_VISIBLE_DEVICES` on AMD), NVML by the driver's order.

use crate::model::{DeviceAllocatorStats, GpuProcess, GpuSample, GpuVendor};

/// The allocator stats of `process` that belong to the NVML GPU its row is for.
///
/// Torch numbers devices after `CUDA_VISIBLE_DEVICES` (indices or `GPU-` UUIDs, possibly
/// abbreviated); without that variable torch ordinal N is taken to be NVML GPU N. Where the
/// environment is unreadable and the process uses one device, that device is the one.
pub(crate) fn torch_device_on<'a>(
    process: &'a GpuProcess,
    gpus: &[GpuSample],
) -> Option<&'a DeviceAllocatorStats> {
    let devices = &process.torch.as_ref()?.devices;
    // The sampler has mapped each device to its GPU where it could (UUID or the agent's list).
    if let Some(device) = devices.iter().find(|d| d.gpu == Some(process.gpu)) {
        return Some(device);
    }
    if let Some(amd) = (gpus.iter()).find(|g| g.index == process.gpu && g.vendor == GpuVendor::Amd)
    {
        let ordinal = match &process.env {
            Some(env) => crate::model::rocm_visible::rocm_ordinal(env, amd, gpus)?,
            None if devices.len() == 1 => return devices.first(),
            None => amd.vendor_index?,
        };
        return devices.iter().find(|d| d.index == ordinal);
    }
    let ordinal = match &process.env {
        Some(env) => match &env.cuda_visible_devices {
            Some(list) => visible_position(list, process.gpu, gpus)?,
            None => process.gpu,
        },
        None if devices.len() == 1 => return devices.first(),
        None => process.gpu,
    };
    devices.iter().find(|d| d.index == ordinal)
}

fn visible_position(list: &str, gpu_index: u32, gpus: &[GpuSample]) -> Option<u32> {
    let uuid = gpus
        .iter()
        .find(|g| g.index == gpu_index)
        .and_then(|g| g.uuid.as_deref());
    let position = list.split(',').map(str::trim).position(|entry| {
        entry.parse::<u32>().ok() == Some(gpu_index)
            || uuid.is_some_and(|u| {
                entry.len() >= 5 && entry.starts_with("GPU-") && u.starts_with(entry)
            })
    })?;
    u32::try_from(position).ok()
}
