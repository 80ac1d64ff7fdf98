//! MIG: a GPU in MIG mode is split into MIG devices (a compute instance inside a GPU
//! instance), each with its own memory and processes. This reads them through the MIG device
//! handles (nvmlDeviceGetMigDeviceHandleByIndex), and the instance ids through nvml-wrapper's
//! sys bindings, which the wrapper does not wrap.
//!
//! A GPU without MIG, or a library without the symbols, reads as `mig_enabled: None` and no
//! MIG devices.

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::{nvmlReturn_enum_NVML_SUCCESS, NvmlLib};

use crate::model::{GpuProcess, MigDevice, ProcessKind};

/// NVML_DEVICE_MIG_ENABLE.
const MIG_ENABLE: u32 = 1;
/// An A100/H100 has at most 7 MIG devices; a larger count from the driver is cut here.
const MAX_MIG_DEVICES: u32 = 64;

/// What the MIG devices of one GPU say at one reading.
#[derive(Debug, Default)]
pub(super) struct MigReading {
    pub(super) enabled: Option<bool>,
    pub(super) devices: Vec<MigDevice>,
    /// (pid, bytes) from each MIG device's own process list, for rows the parent lacks.
    pub(super) processes: Vec<(u32, Option<u64>)>,
}

/// Whether MIG is on: `None` where the GPU or the library has no MIG. A GPU lost on the way is
/// reported through `lost`. On an H200 the call took 153 µs of CPU, and the mode changes only
/// with a GPU reset, so the reader asks with its slow fields.
pub(super) fn read_mode(device: &Device, lost: &mut bool) -> Option<bool> {
    match device.mig_mode() {
        Ok(mode) => Some(mode.current == MIG_ENABLE),
        Err(NvmlError::GpuLost) => {
            *lost = true;
            None
        }
        Err(_) => None,
    }
}

/// Every MIG device, when MIG is on (`enabled`, as [`read_mode`] last said).
pub(super) fn read_mig(device: &Device, enabled: Option<bool>) -> MigReading {
    let mut reading = MigReading {
        enabled,
        ..MigReading::default()
    };
    if enabled != Some(true) {
        return reading;
    }
    let max = device.mig_device_count().unwrap_or(0).min(MAX_MIG_DEVICES);
    for index in 0..max {
        // Empty slots answer NOT_FOUND: the GPU is not split that many ways.
        let Ok(mig) = device.mig_device_by_index(index) else {
            continue;
        };
        let (row, pids) = read_one(device.nvml().lib(), &mig, index);
        reading.processes.extend(pids);
        reading.devices.push(row);
    }
    reading
}

fn read_one(lib: &NvmlLib, mig: &Device, index: u32) -> (MigDevice, Vec<(u32, Option<u64>)>) {
    let memory = mig.memory_info().ok();
    let processes: Vec<(u32, Option<u64>)> = mig
        .running_compute_processes()
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let bytes = match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            };
            (p.pid, bytes)
        })
        .collect();
    let mut pids: Vec<u32> = processes.iter().map(|(pid, _)| *pid).collect();
    pids.sort_unstable();
    pids.dedup();
    let row = MigDevice {
        index,
        gpu_instance_id: instance_id(lib, mig, Instance::Gpu),
        compute_instance_id: instance_id(lib, mig, Instance::Compute),
        name: mig.name().ok(),
        uuid: mig.uuid().ok(),
        memory_used_bytes: memory.as_ref().map(|m| m.used),
        memory_total_bytes: memory.as_ref().map(|m| m.total),
        pids,
    };
    (row, processes)
}

enum Instance {
    Gpu,
    Compute,
}

/// nvmlDeviceGetGpuInstanceId / nvmlDeviceGetComputeInstanceId of a MIG device handle.
fn instance_id(lib: &NvmlLib, mig: &Device, which: Instance) -> Option<u32> {
    let function = match which {
        Instance::Gpu => lib.nvmlDeviceGetGpuInstanceId.as_ref().ok()?,
        Instance::Compute => lib.nvmlDeviceGetComputeInstanceId.as_ref().ok()?,
    };
    let mut id = 0;
    // SAFETY: the symbol was resolved from the loaded library with this signature, the handle
    // comes from the live MIG `Device` of the same library, and `id` outlives the call.
    let status = unsafe { function(mig.handle(), &raw mut id) };
    (status == nvmlReturn_enum_NVML_SUCCESS).then_some(id)
}

/// Adds a row for each pid a MIG device lists that the parent's lists lack (the parent's
/// memory figure per process may be unavailable in MIG mode: the MIG device's is used then).
pub(super) fn merge_mig_processes(
    gpu: u32,
    rows: &mut Vec<GpuProcess>,
    mig: &[(u32, Option<u64>)],
) {
    for (pid, bytes) in mig {
        if let Some(row) = rows.iter_mut().find(|r| r.pid == *pid) {
            row.gpu_memory_bytes = row.gpu_memory_bytes.or(*bytes);
        } else {
            let mut row = GpuProcess::from_driver(*pid, gpu, ProcessKind::Compute);
            row.gpu_memory_bytes = *bytes;
            rows.push(row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_processes_fill_in_what_the_parent_lacks() {
        let mut parent = GpuProcess::new(10, 0, ProcessKind::Compute);
        parent.gpu_memory_bytes = None;
        let mut rows = vec![parent];
        merge_mig_processes(0, &mut rows, &[(10, Some(5)), (11, Some(7)), (11, Some(7))]);
        let got: Vec<(u32, Option<u64>)> =
            rows.iter().map(|r| (r.pid, r.gpu_memory_bytes)).collect();
        assert_eq!(got, [(10, Some(5)), (11, Some(7))]);
    }
}
