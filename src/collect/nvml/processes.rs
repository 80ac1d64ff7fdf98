//! NVML's compute and graphics process lists merged into one row per pid.

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

use crate::model::{GpuProcess, ProcessKind};

/// One row per pid, into `rows` (cleared first, its room kept); a pid listed as both compute
/// and graphics becomes one `Both` row.
pub(super) fn merge_process_lists(
    gpu: u32,
    compute: &[ProcessInfo],
    graphics: &[ProcessInfo],
    rows: &mut Vec<GpuProcess>,
) {
    rows.clear();
    rows.reserve(compute.len() + graphics.len());
    for (list, kind) in [
        (compute, ProcessKind::Compute),
        (graphics, ProcessKind::Graphics),
    ] {
        for info in list {
            let memory = match info.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            };
            if let Some(row) = rows.iter_mut().find(|r| r.pid == info.pid) {
                if row.kind != kind {
                    row.kind = ProcessKind::Both;
                }
                row.gpu_memory_bytes = row.gpu_memory_bytes.max(memory);
                continue;
            }
            let mut row = GpuProcess::from_driver(info.pid, gpu, kind);
            row.gpu_memory_bytes = memory;
            rows.push(row);
        }
    }
}
