//! The exported NVML entry points. Each symbol keeps its own C ABI (the unversioned
//! running-process calls take the 16-byte v1 struct, `_v2`/`_v3` the 24-byte one; the
//! unversioned PCI call the 52-byte legacy struct). Every body runs under `catch_unwind`, so no
//! panic crosses the FFI boundary, and null output pointers give INVALID_ARGUMENT.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::*;
use crate::events;
use crate::scenario::{Field, ProcessSpec, TimeOrigin};
use crate::state::{self, DeviceView};

fn guard(f: impl FnOnce() -> nvmlReturn_t) -> nvmlReturn_t {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(NVML_ERROR_UNKNOWN)
}

/// Writes `value` through `out`, or INVALID_ARGUMENT when `out` is null.
///
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

/// Defines exported functions returning `nvmlReturn_t`, each body under [`guard`].
macro_rules! export {
    ($( $(#[$meta:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block )*) => {
        $(
            $(#[$meta])*
            ///
            /// # Safety
            /// Pointer arguments must be null or valid as NVML's header describes them.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> nvmlReturn_t {
                guard(move || {
                    #[allow(unused_unsafe)]
                    unsafe { $body }
                })
            }
        )*
    };
}

/// `nvmlErrorString`: a sentence for a return code. After a failed init, its code gives the
/// init's own sentence (for a bad scenario: the file, line and problem).
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    catch_unwind(|| state::error_string(result))
        .unwrap_or(c"Unknown Error")
        .as_ptr()
}

export! {
    /// A new, empty event set.
    fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) {
        events::create(set)
    }
    fn nvmlEventSetFree(set: nvmlEventSet_t) {
        events::free(set)
    }
    /// Critical Xid errors are the one event type this library raises.
    fn nvmlDeviceGetSupportedEventTypes(device: nvmlDevice_t, eventTypes: *mut c_ulonglong) {
        events::supported(device, eventTypes)
    }
    fn nvmlDeviceRegisterEvents(device: nvmlDevice_t, eventTypes: c_ulonglong, set: nvmlEventSet_t) {
        events::register(device, eventTypes, set)
    }
    fn nvmlEventSetWait(set: nvmlEventSet_t, data: *mut nvmlEventData_t, timeoutms: c_uint) {
        events::wait(set, data, timeoutms)
    }
    fn nvmlEventSetWait_v2(set: nvmlEventSet_t, data: *mut nvmlEventData_t, timeoutms: c_uint) {
        events::wait(set, data, timeoutms)
    }
    /// Initializes: reads the scenario, resets t to 0.
    fn nvmlInit_v2() { state::init() }
    /// Same as `nvmlInit_v2`.
    fn nvmlInit() { state::init() }
    /// Same as `nvmlInit_v2`; flags are accepted and ignored.
    fn nvmlInitWithFlags(_flags: c_uint) { state::init() }
    /// Drops one user of the library.
    fn nvmlShutdown() { state::shutdown() }

    /// The scenario's driver version.
    fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) {
        state::with_runtime(|v| write_c_string(version, length, &v.scenario.system.driver_version))
    }
    /// The scenario's NVML version.
    fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) {
        state::with_runtime(|v| write_c_string(version, length, &v.scenario.system.nvml_version))
    }
    /// The scenario's CUDA driver version.
    fn nvmlSystemGetCudaDriverVersion(cudaDriverVersion: *mut c_int) {
        state::with_runtime(|v| put(cudaDriverVersion, v.scenario.system.cuda_driver_version))
    }
    /// The scenario's CUDA driver version.
    fn nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion: *mut c_int) {
        state::with_runtime(|v| put(cudaDriverVersion, v.scenario.system.cuda_driver_version))
    }

    /// Number of GPUs present now.
    fn nvmlDeviceGetCount_v2(deviceCount: *mut c_uint) {
        state::with_runtime(|v| put(deviceCount, v.present.len() as c_uint))
    }
    /// Number of GPUs present now.
    fn nvmlDeviceGetCount(deviceCount: *mut c_uint) {
        state::with_runtime(|v| put(deviceCount, v.present.len() as c_uint))
    }
    /// Handle of the GPU at `index` among those present now.
    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) {
        handle_by_index(index, device)
    }
    /// Handle of the GPU at `index` among those present now.
    fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut nvmlDevice_t) {
        handle_by_index(index, device)
    }
    /// Handle of the present GPU with this UUID.
    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut nvmlDevice_t) {
        handle_by_text(uuid, device, |v, slot, text| v.scenario.gpus[slot].uuid_at(slot) == text)
    }
    /// Handle of the present GPU at this PCI bus id.
    fn nvmlDeviceGetHandleByPciBusId_v2(pciBusId: *const c_char, device: *mut nvmlDevice_t) {
        handle_by_text(pciBusId, device, same_bus)
    }
    /// Handle of the present GPU at this PCI bus id.
    fn nvmlDeviceGetHandleByPciBusId(pciBusId: *const c_char, device: *mut nvmlDevice_t) {
        handle_by_text(pciBusId, device, same_bus)
    }

    /// Position of the GPU among those present now.
    fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) {
        state::device_call(device, Field::Index, |v| put(index, v.index))
    }
    /// The scenario's minor number, else the GPU's position in the scenario.
    fn nvmlDeviceGetMinorNumber(device: nvmlDevice_t, minorNumber: *mut c_uint) {
        state::device_call(device, Field::MinorNumber, |v| {
            put(minorNumber, v.gpu().minor_number.unwrap_or(v.slot as c_uint))
        })
    }
    /// The GPU's name.
    fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) {
        if crate::mig::is_mig_handle(device) { return crate::mig::name(device, name, length); }
        state::device_call(device, Field::Name, |v| write_c_string(name, length, &v.gpu().name))
    }
    /// The GPU's UUID.
    fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) {
        if crate::mig::is_mig_handle(device) { return crate::mig::uuid(device, uuid, length); }
        state::device_call(device, Field::Uuid, |v| {
            write_c_string(uuid, length, &v.gpu().uuid_at(v.slot))
        })
    }
    /// PCI info in the current 68-byte layout.
    fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) {
        state::device_call(device, Field::PciInfo, |v| put(pci, pci_info(v)))
    }
    /// PCI info in the current 68-byte layout.
    fn nvmlDeviceGetPciInfo_v2(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) {
        state::device_call(device, Field::PciInfo, |v| put(pci, pci_info(v)))
    }
    /// PCI info in the legacy 52-byte layout.
    fn nvmlDeviceGetPciInfo(device: nvmlDevice_t, pci: *mut nvmlPciInfo_v1_t) {
        state::device_call(device, Field::PciInfo, |v| put(pci, pci_info_v1(v)))
    }

    /// GPU and memory-controller utilization in percent.
    fn nvmlDeviceGetUtilizationRates(device: nvmlDevice_t, utilization: *mut nvmlUtilization_t) {
        state::device_call(device, Field::Utilization, |v| {
            let g = v.gpu();
            put(utilization, nvmlUtilization_t {
                gpu: g.utilization_gpu.uint_at(v.t, g.limit(100)) as c_uint,
                memory: g.utilization_memory.uint_at(v.t, g.limit(100)) as c_uint,
            })
        })
    }
    /// Memory in the v1 layout: `used` includes the reserved memory.
    fn nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, memory: *mut nvmlMemory_t) {
        if crate::mig::is_mig_handle(device) { return crate::mig::memory_v1(device, memory); }
        state::device_call(device, Field::Memory, |v| {
            let m = memory_figures(v);
            let used = m.used.saturating_add(m.reserved);
            put(memory, nvmlMemory_t { total: m.total, free: m.total.saturating_sub(used), used })
        })
    }
    /// Memory in the v2 layout; the caller's `version` must be `NVML_STRUCT_VERSION(Memory, 2)`.
    fn nvmlDeviceGetMemoryInfo_v2(device: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) {
        if memory.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        if (*memory).version != NVML_MEMORY_V2_VERSION {
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        if crate::mig::is_mig_handle(device) { return crate::mig::memory_v2(device, memory); }
        state::device_call(device, Field::Memory, |v| {
            let m = memory_figures(v);
            put(memory, nvmlMemory_v2_t {
                version: NVML_MEMORY_V2_VERSION,
                total: m.total,
                reserved: m.reserved,
                free: m.total.saturating_sub(m.reserved).saturating_sub(m.used),
                used: m.used,
            })
        })
    }

    /// GPU temperature in °C (only the GPU sensor exists).
    fn nvmlDeviceGetTemperature(device: nvmlDevice_t, sensorType: c_uint, temp: *mut c_uint) {
        if sensorType != NVML_TEMPERATURE_GPU {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        state::device_call(device, Field::Temperature, |v| {
            let g = v.gpu();
            put(temp, g.temperature_c.uint_at(v.t, g.limit(200)) as c_uint)
        })
    }
    /// Temperature thresholds in °C.
    fn nvmlDeviceGetTemperatureThreshold(device: nvmlDevice_t, thresholdType: c_uint, temp: *mut c_uint) {
        state::device_call(device, Field::TemperatureThreshold, |v| {
            let g = v.gpu();
            let value = match thresholdType {
                NVML_TEMPERATURE_THRESHOLD_SHUTDOWN => g.temperature_shutdown_c,
                NVML_TEMPERATURE_THRESHOLD_SLOWDOWN => g.temperature_slowdown_c,
                NVML_TEMPERATURE_THRESHOLD_MEM_MAX => g.temperature_mem_max_c,
                NVML_TEMPERATURE_THRESHOLD_GPU_MAX => g.temperature_gpu_max_c,
                _ => return NVML_ERROR_NOT_SUPPORTED,
            };
            put(temp, value)
        })
    }
    /// Power draw in mW.
    fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, power: *mut c_uint) {
        state::device_call(device, Field::Power, |v| {
            put(power, watts_to_mw(v.gpu().power_w.at(v.t)))
        })
    }
    /// Enforced power limit in mW.
    fn nvmlDeviceGetEnforcedPowerLimit(device: nvmlDevice_t, limit: *mut c_uint) {
        state::device_call(device, Field::EnforcedPowerLimit, |v| {
            put(limit, watts_to_mw(v.gpu().enforced_power_limit()))
        })
    }
    /// Power management limit in mW.
    fn nvmlDeviceGetPowerManagementLimit(device: nvmlDevice_t, limit: *mut c_uint) {
        state::device_call(device, Field::PowerLimit, |v| {
            put(limit, watts_to_mw(v.gpu().power_limit_w))
        })
    }
    /// Energy since the driver loaded, in mJ.
    fn nvmlDeviceGetTotalEnergyConsumption(device: nvmlDevice_t, energy: *mut c_ulonglong) {
        state::device_call(device, Field::Energy, |v| match &v.gpu().energy_mj {
            Some(metric) => put(energy, metric.uint_at(v.t, u64::MAX)),
            None => NVML_ERROR_NOT_SUPPORTED,
        })
    }
    /// Rows remapped after memory errors.
    fn nvmlDeviceGetRemappedRows(device: nvmlDevice_t, corrRows: *mut c_uint, uncRows: *mut c_uint, isPending: *mut c_uint, failureOccurred: *mut c_uint) {
        if corrRows.is_null() || uncRows.is_null() || isPending.is_null() || failureOccurred.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        state::device_call(device, Field::RemappedRows, |v| match v.gpu().remapped_rows {
            Some(rows) => {
                put(corrRows, rows.correctable);
                put(uncRows, rows.uncorrectable);
                put(isPending, c_uint::from(rows.pending));
                put(failureOccurred, c_uint::from(rows.failed))
            }
            None => NVML_ERROR_NOT_SUPPORTED,
        })
    }
    /// Whether a page retirement waits for the next driver reload.
    fn nvmlDeviceGetRetiredPagesPendingStatus(device: nvmlDevice_t, isPending: *mut c_uint) {
        state::device_call(device, Field::RetiredPages, |v| match v.gpu().retired_pages {
            Some(pages) => put(isPending, c_uint::from(pages.pending)),
            None => NVML_ERROR_NOT_SUPPORTED,
        })
    }
    /// The addresses of the pages retired for `cause` (0: multiple single-bit, 1: double-bit).
    fn nvmlDeviceGetRetiredPages(device: nvmlDevice_t, cause: c_uint, pageCount: *mut c_uint, addresses: *mut c_ulonglong) {
        state::device_call(device, Field::RetiredPages, |v| retired_pages(v, cause, pageCount, addresses, std::ptr::null_mut()))
    }
    /// As `nvmlDeviceGetRetiredPages`, with the time of each retirement (µs since the epoch).
    fn nvmlDeviceGetRetiredPages_v2(device: nvmlDevice_t, cause: c_uint, pageCount: *mut c_uint, addresses: *mut c_ulonglong, timestamps: *mut c_ulonglong) {
        state::device_call(device, Field::RetiredPages, |v| retired_pages(v, cause, pageCount, addresses, timestamps))
    }
    /// Number of fans.
    fn nvmlDeviceGetNumFans(device: nvmlDevice_t, numFans: *mut c_uint) {
        state::device_call(device, Field::NumFans, |v| put(numFans, v.gpu().num_fans))
    }
    /// Speed of the first fan in percent.
    fn nvmlDeviceGetFanSpeed(device: nvmlDevice_t, speed: *mut c_uint) {
        state::device_call(device, Field::Fan, |v| fan_speed(v, 0, speed))
    }
    /// Speed of fan `fan` in percent.
    fn nvmlDeviceGetFanSpeed_v2(device: nvmlDevice_t, fan: c_uint, speed: *mut c_uint) {
        state::device_call(device, Field::Fan, |v| fan_speed(v, fan, speed))
    }

    /// Current clock in MHz.
    fn nvmlDeviceGetClockInfo(device: nvmlDevice_t, clockType: c_uint, clock: *mut c_uint) {
        state::device_call(device, Field::Clocks, |v| {
            let g = v.gpu();
            let metric = match clockType {
                NVML_CLOCK_GRAPHICS => &g.clock_graphics_mhz,
                NVML_CLOCK_SM => &g.clock_sm_mhz,
                NVML_CLOCK_MEM => &g.clock_memory_mhz,
                NVML_CLOCK_VIDEO => &g.clock_video_mhz,
                _ => return NVML_ERROR_INVALID_ARGUMENT,
            };
            put(clock, metric.uint_at(v.t, u64::from(u32::MAX)) as c_uint)
        })
    }
    /// Maximum clock in MHz.
    fn nvmlDeviceGetMaxClockInfo(device: nvmlDevice_t, clockType: c_uint, clock: *mut c_uint) {
        state::device_call(device, Field::MaxClocks, |v| {
            let g = v.gpu();
            let value = match clockType {
                NVML_CLOCK_GRAPHICS => g.max_clock_graphics_mhz,
                NVML_CLOCK_SM => g.max_clock_sm_mhz,
                NVML_CLOCK_MEM => g.max_clock_memory_mhz,
                NVML_CLOCK_VIDEO => g.max_clock_video_mhz,
                _ => return NVML_ERROR_INVALID_ARGUMENT,
            };
            put(clock, value)
        })
    }

    /// PCIe throughput in KB/s.
    fn nvmlDeviceGetPcieThroughput(device: nvmlDevice_t, counter: c_uint, value: *mut c_uint) {
        state::device_call(device, Field::PcieThroughput, |v| {
            let g = v.gpu();
            let metric = match counter {
                NVML_PCIE_UTIL_TX_BYTES => &g.pcie_tx_kbs,
                NVML_PCIE_UTIL_RX_BYTES => &g.pcie_rx_kbs,
                _ => return NVML_ERROR_INVALID_ARGUMENT,
            };
            put(value, metric.uint_at(v.t, u64::from(u32::MAX)) as c_uint)
        })
    }
    /// Current PCIe generation.
    fn nvmlDeviceGetCurrPcieLinkGeneration(device: nvmlDevice_t, currLinkGen: *mut c_uint) {
        state::device_call(device, Field::PcieLink, |v| {
            let g = v.gpu();
            put(currLinkGen, g.pcie_gen.unwrap_or(g.pcie_gen_max))
        })
    }
    /// Current PCIe link width.
    fn nvmlDeviceGetCurrPcieLinkWidth(device: nvmlDevice_t, currLinkWidth: *mut c_uint) {
        state::device_call(device, Field::PcieLink, |v| {
            let g = v.gpu();
            put(currLinkWidth, g.pcie_width.unwrap_or(g.pcie_width_max))
        })
    }
    /// Maximum PCIe generation.
    fn nvmlDeviceGetMaxPcieLinkGeneration(device: nvmlDevice_t, maxLinkGen: *mut c_uint) {
        state::device_call(device, Field::PcieLink, |v| put(maxLinkGen, v.gpu().pcie_gen_max))
    }
    /// Maximum PCIe link width.
    fn nvmlDeviceGetMaxPcieLinkWidth(device: nvmlDevice_t, maxLinkWidth: *mut c_uint) {
        state::device_call(device, Field::PcieLink, |v| put(maxLinkWidth, v.gpu().pcie_width_max))
    }

    /// Encoder utilization in percent and its sampling period in µs.
    fn nvmlDeviceGetEncoderUtilization(device: nvmlDevice_t, utilization: *mut c_uint, samplingPeriodUs: *mut c_uint) {
        state::device_call(device, Field::Encoder, |v| {
            let g = v.gpu();
            codec_utilization(g.encoder_percent.uint_at(v.t, g.limit(100)), utilization, samplingPeriodUs)
        })
    }
    /// Decoder utilization in percent and its sampling period in µs.
    fn nvmlDeviceGetDecoderUtilization(device: nvmlDevice_t, utilization: *mut c_uint, samplingPeriodUs: *mut c_uint) {
        state::device_call(device, Field::Decoder, |v| {
            let g = v.gpu();
            codec_utilization(g.decoder_percent.uint_at(v.t, g.limit(100)), utilization, samplingPeriodUs)
        })
    }
    /// Performance state P0..P15.
    fn nvmlDeviceGetPerformanceState(device: nvmlDevice_t, pState: *mut c_uint) {
        state::device_call(device, Field::Pstate, |v| {
            put(pState, v.gpu().pstate.uint_at(v.t, 15) as c_uint)
        })
    }
    /// Clock throttle reasons bit mask.
    fn nvmlDeviceGetCurrentClocksThrottleReasons(device: nvmlDevice_t, reasons: *mut c_ulonglong) {
        state::device_call(device, Field::ThrottleReasons, |v| {
            put(reasons, v.gpu().throttle_reasons.uint_at(v.t, u64::MAX))
        })
    }
    /// Clock event reasons bit mask (the newer name of the throttle reasons).
    fn nvmlDeviceGetCurrentClocksEventReasons(device: nvmlDevice_t, reasons: *mut c_ulonglong) {
        state::device_call(device, Field::ThrottleReasons, |v| {
            put(reasons, v.gpu().throttle_reasons.uint_at(v.t, u64::MAX))
        })
    }
    /// ECC mode, current and pending.
    fn nvmlDeviceGetEccMode(device: nvmlDevice_t, current: *mut c_uint, pending: *mut c_uint) {
        if current.is_null() || pending.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        state::device_call(device, Field::EccMode, |v| {
            let on = c_uint::from(v.gpu().ecc_enabled);
            put(current, on);
            put(pending, on)
        })
    }
    /// ECC error totals; volatile and aggregate counters give the same figures.
    fn nvmlDeviceGetTotalEccErrors(device: nvmlDevice_t, errorType: c_uint, counterType: c_uint, eccCounts: *mut c_ulonglong) {
        if counterType != NVML_VOLATILE_ECC && counterType != NVML_AGGREGATE_ECC {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        state::device_call(device, Field::EccErrors, |v| {
            let g = v.gpu();
            if !g.ecc_enabled {
                return NVML_ERROR_NOT_SUPPORTED;
            }
            let metric = match errorType {
                NVML_MEMORY_ERROR_TYPE_CORRECTED => &g.ecc_corrected,
                NVML_MEMORY_ERROR_TYPE_UNCORRECTED => &g.ecc_uncorrected,
                _ => return NVML_ERROR_INVALID_ARGUMENT,
            };
            put(eccCounts, metric.uint_at(v.t, u64::MAX))
        })
    }

    /// Compute processes, v1 16-byte records.
    fn nvmlDeviceGetComputeRunningProcesses(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_v1_t) {
        state::device_call(device, Field::ComputeProcesses, |v| {
            list_processes(v, false, infoCount, infos, process_v1)
        })
    }
    /// Compute processes, 24-byte records.
    fn nvmlDeviceGetComputeRunningProcesses_v2(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_v2_t) {
        if crate::mig::is_mig_handle(device) { return crate::mig::processes(device, false, infoCount, infos); }
        state::device_call(device, Field::ComputeProcesses, |v| {
            list_processes(v, false, infoCount, infos, process_v2)
        })
    }
    /// Compute processes, 24-byte records.
    fn nvmlDeviceGetComputeRunningProcesses_v3(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_v2_t) {
        if crate::mig::is_mig_handle(device) { return crate::mig::processes(device, false, infoCount, infos); }
        state::device_call(device, Field::ComputeProcesses, |v| {
            list_processes(v, false, infoCount, infos, process_v2)
        })
    }
    /// Graphics processes, v1 16-byte records.
    fn nvmlDeviceGetGraphicsRunningProcesses(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_v1_t) {
        state::device_call(device, Field::GraphicsProcesses, |v| {
            list_processes(v, true, infoCount, infos, process_v1)
        })
    }
    /// Graphics processes, 24-byte records.
    fn nvmlDeviceGetGraphicsRunningProcesses_v2(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_v2_t) {
        if crate::mig::is_mig_handle(device) { return crate::mig::processes(device, true, infoCount, infos); }
        state::device_call(device, Field::GraphicsProcesses, |v| {
            list_processes(v, true, infoCount, infos, process_v2)
        })
    }
    /// Graphics processes, 24-byte records.
    fn nvmlDeviceGetGraphicsRunningProcesses_v3(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_v2_t) {
        if crate::mig::is_mig_handle(device) { return crate::mig::processes(device, true, infoCount, infos); }
        state::device_call(device, Field::GraphicsProcesses, |v| {
            list_processes(v, true, infoCount, infos, process_v2)
        })
    }
    /// Per-process utilization: the newest sample of each process with `sm_percent`, when it is
    /// newer than `lastSeenTimeStamp`; NOT_FOUND when there is none.
    fn nvmlDeviceGetProcessUtilization(device: nvmlDevice_t, utilization: *mut nvmlProcessUtilizationSample_t, processSamplesCount: *mut c_uint, lastSeenTimeStamp: c_ulonglong) {
        if processSamplesCount.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        state::device_call(device, Field::ProcessUtilization, |v| {
            process_samples(v, utilization, processSamplesCount, lastSeenTimeStamp)
        })
    }

    /// Persistence mode.
    fn nvmlDeviceGetPersistenceMode(device: nvmlDevice_t, mode: *mut c_uint) {
        state::device_call(device, Field::PersistenceMode, |v| {
            put(mode, c_uint::from(v.gpu().persistence_mode))
        })
    }
    /// Compute mode.
    fn nvmlDeviceGetComputeMode(device: nvmlDevice_t, mode: *mut c_uint) {
        state::device_call(device, Field::ComputeMode, |v| put(mode, v.gpu().compute_mode))
    }
    /// MIG mode, current and pending; NOT_SUPPORTED unless the scenario sets `mig_mode`.
    fn nvmlDeviceGetMigMode(device: nvmlDevice_t, currentMode: *mut c_uint, pendingMode: *mut c_uint) {
        if currentMode.is_null() || pendingMode.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        state::device_call(device, Field::MigMode, |v| match v.gpu().mig_mode {
            None => NVML_ERROR_NOT_SUPPORTED,
            Some(on) => {
                put(currentMode, c_uint::from(on));
                put(pendingMode, c_uint::from(on))
            }
        })
    }
    /// Windows driver model (WDDM/TCC): not supported on Linux, as the real library answers.
    fn nvmlDeviceGetDriverModel(device: nvmlDevice_t, current: *mut c_uint, pending: *mut c_uint) {
        driver_model(device, current, pending)
    }
    /// Windows driver model (WDDM/TCC): not supported on Linux, as the real library answers.
    fn nvmlDeviceGetDriverModel_v2(device: nvmlDevice_t, current: *mut c_uint, pending: *mut c_uint) {
        driver_model(device, current, pending)
    }
    /// Whether a display is active on the GPU.
    fn nvmlDeviceGetDisplayActive(device: nvmlDevice_t, isActive: *mut c_uint) {
        state::device_call(device, Field::Display, |v| {
            put(isActive, c_uint::from(v.gpu().display_active))
        })
    }
    /// Whether a display is connected to the GPU.
    fn nvmlDeviceGetDisplayMode(device: nvmlDevice_t, display: *mut c_uint) {
        state::device_call(device, Field::Display, |v| {
            put(display, c_uint::from(v.gpu().display_active))
        })
    }
}

fn driver_model(device: nvmlDevice_t, current: *mut c_uint, pending: *mut c_uint) -> nvmlReturn_t {
    if current.is_null() || pending.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    state::device_call(device, Field::Display, |_| NVML_ERROR_NOT_SUPPORTED)
}

fn handle_by_index(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    if device.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    state::with_runtime(|v| match v.handle_by_index(index) {
        // SAFETY: checked non-null; the caller vouches for the pointer.
        Ok(handle) => unsafe { put(device, handle) },
        Err(code) => code,
    })
}

/// Finds the present GPU whose text attribute (UUID, bus id) matches `text`.
///
/// # Safety
/// `text` must be null or a NUL-terminated string; `device` null or writable.
unsafe fn handle_by_text(
    text: *const c_char,
    device: *mut nvmlDevice_t,
    matches: impl Fn(&state::SystemView, usize, &str) -> bool,
) -> nvmlReturn_t {
    if text.is_null() || device.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null and NUL-terminated per the caller.
    let Ok(text) = unsafe { CStr::from_ptr(text) }.to_str() else {
        return NVML_ERROR_INVALID_ARGUMENT;
    };
    state::with_runtime(|v| {
        let found = v
            .present
            .iter()
            .copied()
            .find(|slot| matches(v, *slot, text));
        match found {
            None => NVML_ERROR_NOT_FOUND,
            Some(slot) if v.scenario.gpus[slot].lost_at(v.t) => NVML_ERROR_GPU_IS_LOST,
            // SAFETY: checked non-null above.
            Some(slot) => unsafe { put(device, v.handle_of(slot)) },
        }
    })
}

fn same_bus(v: &state::SystemView, slot: usize, text: &str) -> bool {
    let (domain, bus, device, _) = v.scenario.gpus[slot].pci_address(slot);
    crate::scenario::parse_bus_id(text) == Some((domain, bus, device))
}

fn pci_info(v: &DeviceView) -> nvmlPciInfo_t {
    let (domain, bus, device, long) = v.gpu().pci_address(v.slot);
    let legacy = format!("{:04X}:{bus:02X}:{device:02X}.0", domain & 0xffff);
    let mut info = nvmlPciInfo_t {
        busIdLegacy: [0; 16],
        domain,
        bus,
        device,
        pciDeviceId: v.gpu().pci_device_id,
        pciSubSystemId: 0x16c1_10de,
        busId: [0; 32],
    };
    fill_char_array(&mut info.busIdLegacy, &legacy);
    fill_char_array(&mut info.busId, &long);
    info
}

fn pci_info_v1(v: &DeviceView) -> nvmlPciInfo_v1_t {
    let full = pci_info(v);
    nvmlPciInfo_v1_t {
        busId: full.busIdLegacy,
        domain: full.domain,
        bus: full.bus,
        device: full.device,
        pciDeviceId: full.pciDeviceId,
        pciSubSystemId: full.pciSubSystemId,
        reserved: [0; 4],
    }
}

struct MemoryFigures {
    total: u64,
    reserved: u64,
    used: u64,
}

const MIB: u64 = 1024 * 1024;

/// Total, reserved and used bytes, with used capped so free never goes negative.
fn memory_figures(v: &DeviceView) -> MemoryFigures {
    let g = v.gpu();
    let total = g.memory_total_mib * MIB;
    let reserved = (g.memory_reserved_mib * MIB).min(total);
    let used = g.memory_used_mib.uint_at(v.t, u64::MAX / MIB) * MIB;
    let used = if g.unclamped {
        used
    } else {
        used.min(total - reserved)
    };
    MemoryFigures {
        total,
        reserved,
        used,
    }
}

fn watts_to_mw(watts: f64) -> c_uint {
    (watts.max(0.0) * 1000.0).round().min(f64::from(u32::MAX)) as c_uint
}

fn fan_speed(v: &DeviceView, fan: c_uint, speed: *mut c_uint) -> nvmlReturn_t {
    let g = v.gpu();
    if g.num_fans == 0 {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if fan >= g.num_fans {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: `speed` comes from the exported caller, null-checked by `put`.
    unsafe { put(speed, g.fan_percent.uint_at(v.t, g.limit(100)) as c_uint) }
}

fn codec_utilization(percent: u64, utilization: *mut c_uint, period: *mut c_uint) -> nvmlReturn_t {
    if utilization.is_null() || period.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: both checked non-null; the exported caller vouches for validity.
    unsafe {
        put(utilization, percent as c_uint);
        put(period, 167_000)
    }
}

fn used_memory_bytes(p: &ProcessSpec, t: f64) -> c_ulonglong {
    p.used_memory_mib
        .as_ref()
        .map_or(VALUE_NOT_AVAILABLE_U64, |m| {
            m.uint_at(t, u64::MAX / MIB) * MIB
        })
}

fn process_v1(p: &ProcessSpec, t: f64) -> nvmlProcessInfo_v1_t {
    nvmlProcessInfo_v1_t {
        pid: p.pid,
        usedGpuMemory: used_memory_bytes(p, t),
    }
}

fn process_v2(p: &ProcessSpec, t: f64) -> nvmlProcessInfo_v2_t {
    nvmlProcessInfo_v2_t {
        pid: p.pid,
        usedGpuMemory: used_memory_bytes(p, t),
        gpuInstanceId: p.gpu_instance_id.unwrap_or(NO_INSTANCE_ID),
        computeInstanceId: p.compute_instance_id.unwrap_or(NO_INSTANCE_ID),
    }
}

/// The retired pages of one cause under the size protocol; made-up addresses 4 KiB apart and
/// timestamps one second apart from the Unix epoch's first day.
fn retired_pages(
    v: &DeviceView,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> nvmlReturn_t {
    let Some(pages) = v.gpu().retired_pages else {
        return NVML_ERROR_NOT_SUPPORTED;
    };
    let n = match cause {
        0 => pages.single_bit,
        1 => pages.double_bit,
        _ => return NVML_ERROR_INVALID_ARGUMENT,
    };
    let base = u64::from(cause) << 32;
    let addresses_of: Vec<c_ulonglong> = (0..u64::from(n)).map(|i| base + i * 4096).collect();
    if !timestamps.is_null() && !count.is_null() {
        // SAFETY: count is non-null and caller-vouched; timestamps holds as many records.
        let capacity = unsafe { *count };
        if capacity >= n {
            for i in 0..n as usize {
                // SAFETY: i < n <= capacity records, per the caller.
                unsafe {
                    timestamps
                        .add(i)
                        .write(86_400_000_000 + i as u64 * 1_000_000)
                };
            }
        }
    }
    // SAFETY: count null or writable, addresses null or valid for *count records (caller).
    unsafe { write_list(addresses_of, count, addresses) }
}

/// The size protocol of NVML's list calls: a null or short buffer gets INSUFFICIENT_SIZE and
/// the needed count; an empty list is SUCCESS with count 0.
///
/// # Safety
/// `count` null or writable; `out` null or valid for `*count` records.
unsafe fn write_list<T>(records: Vec<T>, count: *mut c_uint, out: *mut T) -> nvmlReturn_t {
    if count.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, caller-vouched.
    let capacity = unsafe { *count } as usize;
    let needed = records.len() as c_uint;
    // SAFETY: as above.
    unsafe { *count = needed };
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
}

fn list_processes<T>(
    v: &DeviceView,
    graphics: bool,
    count: *mut c_uint,
    out: *mut T,
    record: fn(&ProcessSpec, f64) -> T,
) -> nvmlReturn_t {
    let records: Vec<T> = (v.gpu().processes.iter())
        .filter(|p| p.in_list(graphics) && p.present_at(v.t) && p.visible_on_call(v.list_call))
        .map(|p| record(p, v.t))
        .collect();
    // SAFETY: pointers come straight from the exported caller.
    unsafe { write_list(records, count, out) }
}

fn process_samples(
    v: &DeviceView,
    out: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> nvmlReturn_t {
    let g = v.gpu();
    let tick = (v.t / g.sample_interval_s).floor();
    let sample_t = tick * g.sample_interval_s;
    let origin_us = match v.scenario.system.time_origin {
        TimeOrigin::Init => v.started_wall_us,
        TimeOrigin::Wall => 0,
    };
    let timestamp = origin_us + (sample_t * 1e6) as u64;
    if timestamp <= last_seen {
        // SAFETY: count was checked non-null by the exported caller.
        unsafe { *count = 0 };
        return NVML_ERROR_NOT_FOUND;
    }
    let samples: Vec<nvmlProcessUtilizationSample_t> = (g.processes.iter())
        .filter(|p| p.present_at(v.t))
        .filter_map(|p| {
            let sm = p.sm_percent.as_ref()?;
            Some(nvmlProcessUtilizationSample_t {
                pid: p.pid,
                timeStamp: timestamp,
                smUtil: sm.uint_at(sample_t, 100) as c_uint,
                memUtil: p.mem_percent.uint_at(sample_t, 100) as c_uint,
                encUtil: p.enc_percent.uint_at(sample_t, 100) as c_uint,
                decUtil: p.dec_percent.uint_at(sample_t, 100) as c_uint,
            })
        })
        .collect();
    if samples.is_empty() {
        // SAFETY: as above.
        unsafe { *count = 0 };
        return NVML_ERROR_NOT_FOUND;
    }
    // SAFETY: pointers come straight from the exported caller.
    unsafe { write_list(samples, count, out) }
}
