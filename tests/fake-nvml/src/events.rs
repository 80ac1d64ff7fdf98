//! Event sets: `nvmlEventSetCreate`, `nvmlDeviceRegisterEvents`, `nvmlEventSetWait(_v2)` and
//! `nvmlEventSetFree`, for the scenario's Xid errors. As with the real driver, a set receives
//! only the errors that happen after its device was registered, each once, oldest first.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::abi::{self, nvmlDevice_t, nvmlEventData_t, nvmlEventSet_t, nvmlReturn_t};
use crate::scenario::{Field, GpuSpec};
use crate::state;

/// At most this many sets live at once; a leak in the caller then fails instead of growing.
const MAX_SETS: usize = 1024;

/// A registered GPU slot and how many of its Xid errors the set has seen or skipped.
struct Registration {
    slot: usize,
    delivered: usize,
}

/// Sets by handle - 1; `None` once freed.
static SETS: Mutex<Vec<Option<Vec<Registration>>>> = Mutex::new(Vec::new());

fn sets() -> MutexGuard<'static, Vec<Option<Vec<Registration>>>> {
    SETS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn index_of(set: nvmlEventSet_t) -> Option<usize> {
    (set as usize).checked_sub(1)
}

/// The Xid errors of `gpu` that have happened by `t`, oldest first.
fn happened(gpu: &GpuSpec, t: f64) -> Vec<u64> {
    let mut xids: Vec<_> = gpu.xid.iter().filter(|x| x.at_s <= t).collect();
    xids.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    xids.into_iter().map(|x| x.code).collect()
}

pub fn create(out: *mut nvmlEventSet_t) -> nvmlReturn_t {
    if out.is_null() {
        return abi::NVML_ERROR_INVALID_ARGUMENT;
    }
    state::with_runtime(|_| {
        let mut sets = sets();
        let index = match sets.iter().position(Option::is_none) {
            Some(free) => free,
            None if sets.len() < MAX_SETS => {
                sets.push(None);
                sets.len() - 1
            }
            None => return abi::NVML_ERROR_UNKNOWN,
        };
        sets[index] = Some(Vec::new());
        // SAFETY: checked non-null above; the caller passes a valid out pointer.
        unsafe { out.write((index + 1) as nvmlEventSet_t) };
        abi::NVML_SUCCESS
    })
}

pub fn free(set: nvmlEventSet_t) -> nvmlReturn_t {
    let mut sets = sets();
    match index_of(set).and_then(|i| sets.get_mut(i)) {
        Some(slot @ Some(_)) => {
            *slot = None;
            abi::NVML_SUCCESS
        }
        _ => abi::NVML_ERROR_INVALID_ARGUMENT,
    }
}

pub fn supported(device: nvmlDevice_t, out: *mut u64) -> nvmlReturn_t {
    if out.is_null() {
        return abi::NVML_ERROR_INVALID_ARGUMENT;
    }
    state::device_call(device, Field::Events, |_| {
        // SAFETY: checked non-null above.
        unsafe { out.write(abi::NVML_EVENT_TYPE_XID_CRITICAL_ERROR) };
        abi::NVML_SUCCESS
    })
}

pub fn register(device: nvmlDevice_t, types: u64, set: nvmlEventSet_t) -> nvmlReturn_t {
    if types & !abi::NVML_EVENT_TYPE_XID_CRITICAL_ERROR != 0 {
        return abi::NVML_ERROR_NOT_SUPPORTED;
    }
    state::device_call(device, Field::Events, |view| {
        let mut sets = sets();
        let Some(Some(registrations)) = index_of(set).and_then(|i| sets.get_mut(i)) else {
            return abi::NVML_ERROR_INVALID_ARGUMENT;
        };
        let delivered = happened(view.gpu(), view.t).len();
        registrations.retain(|r| r.slot != view.slot);
        registrations.push(Registration {
            slot: view.slot,
            delivered,
        });
        abi::NVML_SUCCESS
    })
}

/// Delivers the oldest undelivered Xid error of the set's GPUs, waiting up to `timeout_ms`.
pub fn wait(set: nvmlEventSet_t, data: *mut nvmlEventData_t, timeout_ms: u32) -> nvmlReturn_t {
    if data.is_null() {
        return abi::NVML_ERROR_INVALID_ARGUMENT;
    }
    let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
    loop {
        let code = state::with_runtime(|system| {
            let mut sets = sets();
            let Some(Some(registrations)) = index_of(set).and_then(|i| sets.get_mut(i)) else {
                return abi::NVML_ERROR_INVALID_ARGUMENT;
            };
            for r in registrations.iter_mut() {
                let Some(gpu) = system.scenario.gpus.get(r.slot) else {
                    continue;
                };
                if let Some(code) = happened(gpu, system.t).get(r.delivered) {
                    r.delivered += 1;
                    let event = nvmlEventData_t {
                        device: system.handle_of(r.slot),
                        eventType: abi::NVML_EVENT_TYPE_XID_CRITICAL_ERROR,
                        eventData: *code,
                        gpuInstanceId: u32::MAX,
                        computeInstanceId: u32::MAX,
                    };
                    // SAFETY: checked non-null above; the caller passes a valid out pointer.
                    unsafe { data.write(event) };
                    return abi::NVML_SUCCESS;
                }
            }
            abi::NVML_ERROR_TIMEOUT
        });
        if code != abi::NVML_ERROR_TIMEOUT || Instant::now() >= deadline {
            return code;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
