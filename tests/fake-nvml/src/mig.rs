//! MIG: a GPU with `mig_mode = true` and `[[gpu.mig]]` tables is split into MIG devices, each
//! with its own handle, GPU/compute instance ids, memory and process list.
//!
//! MIG handles live in a handle space of their own, so that a MIG handle is never taken for a
//! GPU. The calls torchtop and nvidia-smi make on a MIG handle (name, UUID, memory, running
//! processes) check for one first and answer from here; every other call on a MIG handle is
//! INVALID_ARGUMENT, as for any unknown handle.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_uint};
use std::panic::{catch_unwind, AssertUnwindSafe};

use serde::Deserialize;

use crate::abi::*;
use crate::scenario::{Field, GpuSpec, Metric, ProcessSpec, MAX_GPUS};
use crate::state::{self, SystemView};

/// An A100 or H100 splits into at most seven MIG devices.
pub const MAX_MIG_DEVICES: usize = 7;

static MIG_HANDLE_SPACE: [u8; MAX_GPUS * MAX_MIG_DEVICES] = [0; MAX_GPUS * MAX_MIG_DEVICES];

const MIB: u64 = 1024 * 1024;

/// One MIG device of a GPU (`[[gpu.mig]]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    pub gpu_instance_id: u32,
    #[serde(default)]
    pub compute_instance_id: u32,
    /// The profile, as in "NVIDIA A100-SXM4-80GB MIG 3g.40gb".
    #[serde(default = "default_profile")]
    pub profile: String,
    /// Default: derived from the GPU's slot and the MIG device's position.
    pub uuid: Option<String>,
    pub memory_total_mib: u64,
    #[serde(default = "zero")]
    pub memory_used_mib: Metric,
    /// Processes on this MIG device (its own list; the parent GPU's list is `[[gpu.process]]`).
    #[serde(default, rename = "process")]
    pub processes: Vec<ProcessSpec>,
}

fn default_profile() -> String {
    "1g.10gb".to_string()
}

fn zero() -> Metric {
    Metric::Const(0.0)
}

/// Checks the MIG tables of one GPU; the message names the GPU.
pub fn validate(gpu_index: usize, gpu: &GpuSpec) -> Result<(), String> {
    if gpu.mig.len() > MAX_MIG_DEVICES {
        return Err(format!(
            "GPU {gpu_index} declares {} MIG devices, at most {MAX_MIG_DEVICES} are supported",
            gpu.mig.len()
        ));
    }
    if !gpu.mig.is_empty() && gpu.mig_mode != Some(true) {
        return Err(format!(
            "GPU {gpu_index} declares MIG devices but not mig_mode = true"
        ));
    }
    Ok(())
}

fn handle_of(slot: usize, index: usize) -> nvmlDevice_t {
    MIG_HANDLE_SPACE[slot * MAX_MIG_DEVICES + index..]
        .as_ptr()
        .cast_mut()
        .cast()
}

/// (GPU slot, MIG position) of a MIG handle; `None` for any other pointer.
fn mig_of(handle: nvmlDevice_t) -> Option<(usize, usize)> {
    let base = MIG_HANDLE_SPACE.as_ptr() as usize;
    let offset = (handle as usize).checked_sub(base)?;
    (offset < MIG_HANDLE_SPACE.len())
        .then_some((offset / MAX_MIG_DEVICES, offset % MAX_MIG_DEVICES))
}

/// Whether `handle` is a MIG device handle of this library.
pub fn is_mig_handle(handle: nvmlDevice_t) -> bool {
    mig_of(handle).is_some()
}

/// Runs `f` on the MIG device behind `handle`, or INVALID_ARGUMENT / GPU_IS_LOST.
fn mig_call(
    handle: nvmlDevice_t,
    f: impl FnOnce(&SystemView, usize, &GpuSpec, &MigSpec) -> nvmlReturn_t,
) -> nvmlReturn_t {
    let Some((slot, index)) = mig_of(handle) else {
        return NVML_ERROR_INVALID_ARGUMENT;
    };
    state::with_runtime(|v| {
        if !v.present.contains(&slot) {
            return NVML_ERROR_GPU_IS_LOST;
        }
        let gpu = &v.scenario.gpus[slot];
        if gpu.lost_at(v.t) {
            return NVML_ERROR_GPU_IS_LOST;
        }
        match gpu.mig.get(index) {
            Some(mig) if gpu.mig_mode == Some(true) => f(v, slot, gpu, mig),
            _ => NVML_ERROR_INVALID_ARGUMENT,
        }
    })
}

fn guard(f: impl FnOnce() -> nvmlReturn_t) -> nvmlReturn_t {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(NVML_ERROR_UNKNOWN)
}

/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> nvmlReturn_t {
    if out.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, and the caller vouches for validity.
    unsafe { out.write(value) };
    NVML_SUCCESS
}

/// The MIG device's name, "<GPU name> MIG <profile>".
///
/// # Safety
/// The pointers must be null or valid as NVML's header describes them.
pub unsafe fn name(handle: nvmlDevice_t, buf: *mut c_char, length: c_uint) -> nvmlReturn_t {
    mig_call(handle, |_, _, gpu, mig| {
        // SAFETY: the buffer comes from the exported caller, which vouches for its length.
        unsafe { write_c_string(buf, length, &format!("{} MIG {}", gpu.name, mig.profile)) }
    })
}

///
/// # Safety
/// The pointers must be null or valid as NVML's header describes them.
pub unsafe fn uuid(handle: nvmlDevice_t, buf: *mut c_char, length: c_uint) -> nvmlReturn_t {
    mig_call(handle, |_, slot, _, mig| {
        let (_, index) = mig_of(handle).unwrap_or_default();
        let uuid = mig
            .uuid
            .clone()
            .unwrap_or_else(|| format!("MIG-{slot:08x}-7f1e-4c2a-9b3d-{index:012x}"));
        // SAFETY: the buffer comes from the exported caller, which vouches for its length.
        unsafe { write_c_string(buf, length, &uuid) }
    })
}

fn memory_figures(v: &SystemView, mig: &MigSpec) -> (u64, u64) {
    let total = mig.memory_total_mib.saturating_mul(MIB);
    let used = (mig.memory_used_mib.uint_at(v.t, u64::MAX / MIB) * MIB).min(total);
    (total, used)
}

/// v1 memory of a MIG device.
///
/// # Safety
/// The pointers must be null or valid as NVML's header describes them.
pub unsafe fn memory_v1(handle: nvmlDevice_t, out: *mut nvmlMemory_t) -> nvmlReturn_t {
    mig_call(handle, |v, _, _, mig| {
        let (total, used) = memory_figures(v, mig);
        // SAFETY: `out` comes from the exported caller, null-checked by `put`.
        unsafe {
            put(
                out,
                nvmlMemory_t {
                    total,
                    free: total - used,
                    used,
                },
            )
        }
    })
}

/// v2 memory of a MIG device; the caller checked the struct version.
///
/// # Safety
/// The pointers must be null or valid as NVML's header describes them.
pub unsafe fn memory_v2(handle: nvmlDevice_t, out: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    mig_call(handle, |v, _, _, mig| {
        let (total, used) = memory_figures(v, mig);
        let memory = nvmlMemory_v2_t {
            version: NVML_MEMORY_V2_VERSION,
            total,
            reserved: 0,
            free: total - used,
            used,
        };
        // SAFETY: `out` comes from the exported caller, null-checked by `put`.
        unsafe { put(out, memory) }
    })
}

/// The MIG device's compute processes (24-byte records), or none for the graphics list, under
/// the usual size protocol.
///
/// # Safety
/// The pointers must be null or valid as NVML's header describes them.
pub unsafe fn processes(
    handle: nvmlDevice_t,
    graphics: bool,
    count: *mut c_uint,
    out: *mut nvmlProcessInfo_v2_t,
) -> nvmlReturn_t {
    mig_call(handle, |v, _, _, mig| {
        let records: Vec<nvmlProcessInfo_v2_t> = (mig.processes.iter())
            .filter(|p| !graphics && p.present_at(v.t))
            .map(|p| nvmlProcessInfo_v2_t {
                pid: p.pid,
                usedGpuMemory: p
                    .used_memory_mib
                    .as_ref()
                    .map_or(VALUE_NOT_AVAILABLE_U64, |m| {
                        m.uint_at(v.t, u64::MAX / MIB) * MIB
                    }),
                gpuInstanceId: mig.gpu_instance_id,
                computeInstanceId: mig.compute_instance_id,
            })
            .collect();
        if count.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null, caller-vouched.
        let capacity = unsafe { *count } as usize;
        // SAFETY: as above.
        unsafe { *count = records.len() as c_uint };
        if records.is_empty() {
            return NVML_SUCCESS;
        }
        if out.is_null() || capacity < records.len() {
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (i, record) in records.into_iter().enumerate() {
            // SAFETY: i < records.len() <= capacity records, per the caller.
            unsafe { out.add(i).write(record) };
        }
        NVML_SUCCESS
    })
}

/// How many MIG devices a GPU in MIG mode can hold.
///
/// # Safety
/// `count` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        state::device_call(device, Field::MigMode, |v| match v.gpu().mig_mode {
            None => NVML_ERROR_NOT_SUPPORTED,
            // SAFETY: `count` comes from the caller, null-checked by `put`.
            Some(_) => unsafe { put(count, MAX_MIG_DEVICES as c_uint) },
        })
    })
}

/// The handle of the `index`-th MIG device; NOT_FOUND past the last one.
///
/// # Safety
/// `mig` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| {
        state::device_call(device, Field::MigMode, |v| {
            let gpu = v.gpu();
            if gpu.mig_mode != Some(true) {
                return NVML_ERROR_INVALID_ARGUMENT;
            }
            if index as usize >= gpu.mig.len() {
                return NVML_ERROR_NOT_FOUND;
            }
            // SAFETY: `mig` comes from the caller, null-checked by `put`.
            unsafe { put(mig, handle_of(v.slot, index as usize)) }
        })
    })
}

/// The parent GPU of a MIG device.
///
/// # Safety
/// `parent` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig: nvmlDevice_t,
    parent: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| {
        mig_call(mig, |v, slot, _, _| {
            // SAFETY: `parent` comes from the caller, null-checked by `put`.
            unsafe { put(parent, v.handle_of(slot)) }
        })
    })
}

/// Whether `device` is a MIG device handle.
///
/// # Safety
/// `is_mig` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    is_mig: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: `is_mig` comes from the caller, null-checked by `put`.
    guard(|| unsafe { put(is_mig, c_uint::from(is_mig_handle(device))) })
}

/// The GPU instance id of a MIG device.
///
/// # Safety
/// `id` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: `id` comes from the caller, null-checked by `put`.
    guard(|| {
        mig_call(device, |_, _, _, mig| unsafe {
            put(id, mig.gpu_instance_id)
        })
    })
}

/// The compute instance id of a MIG device.
///
/// # Safety
/// `id` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: `id` comes from the caller, null-checked by `put`.
    guard(|| {
        mig_call(device, |_, _, _, mig| unsafe {
            put(id, mig.compute_instance_id)
        })
    })
}

#[cfg(test)]
mod tests {
    use crate::scenario::Scenario;

    #[test]
    fn mig_tables_parse_and_are_checked() {
        let ok = Scenario::parse(
            "[[gpu]]\nmig_mode = true\n[[gpu.mig]]\ngpu_instance_id = 3\nmemory_total_mib = 10\n\
             [[gpu.mig.process]]\npid = 9\nused_memory_mib = 4\n",
        )
        .unwrap();
        let mig = &ok.gpus[0].mig[0];
        assert_eq!((mig.gpu_instance_id, mig.compute_instance_id), (3, 0));
        assert_eq!(mig.processes[0].pid, 9);
        let off =
            Scenario::parse("[[gpu]]\n[[gpu.mig]]\ngpu_instance_id = 1\nmemory_total_mib = 1\n");
        assert!(off.unwrap_err().contains("mig_mode = true"));
        let eight = "[[gpu.mig]]\ngpu_instance_id = 1\nmemory_total_mib = 1\n".repeat(8);
        let many = Scenario::parse(&format!("[[gpu]]\nmig_mode = true\n{eight}"));
        assert!(many.unwrap_err().contains("at most 7"));
    }
}
