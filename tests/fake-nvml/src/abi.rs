//! The C side of NVML's public header that this library speaks: return codes, enum values and
//! the `#[repr(C)]` structs, laid out exactly as in `nvml.h` (cross-checked against the
//! bindgen output of nvml-wrapper-sys). Nothing here has behaviour beyond plain conversions.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_uint, c_ulonglong, c_void, CStr};

/// `nvmlReturn_t`.
pub type nvmlReturn_t = c_uint;
/// `nvmlDevice_t`: an opaque pointer to the caller.
pub type nvmlDevice_t = *mut c_void;

pub const NVML_SUCCESS: nvmlReturn_t = 0;
pub const NVML_ERROR_UNINITIALIZED: nvmlReturn_t = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: nvmlReturn_t = 2;
pub const NVML_ERROR_NOT_SUPPORTED: nvmlReturn_t = 3;
pub const NVML_ERROR_NOT_FOUND: nvmlReturn_t = 6;
pub const NVML_ERROR_TIMEOUT: nvmlReturn_t = 10;
pub const NVML_ERROR_INSUFFICIENT_SIZE: nvmlReturn_t = 7;
pub const NVML_ERROR_GPU_IS_LOST: nvmlReturn_t = 15;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: nvmlReturn_t = 25;
pub const NVML_ERROR_UNKNOWN: nvmlReturn_t = 999;

/// Every return code with its header name (without the `NVML_ERROR_` prefix) and the sentence
/// `nvmlErrorString` gives for it. Scenario files name init failures by these names.
pub const RETURN_CODES: &[(nvmlReturn_t, &str, &CStr)] = &[
    (0, "SUCCESS", c"Success"),
    (1, "UNINITIALIZED", c"Uninitialized"),
    (2, "INVALID_ARGUMENT", c"Invalid Argument"),
    (3, "NOT_SUPPORTED", c"Not Supported"),
    (4, "NO_PERMISSION", c"Insufficient Permissions"),
    (5, "ALREADY_INITIALIZED", c"Already Initialized"),
    (6, "NOT_FOUND", c"Not Found"),
    (7, "INSUFFICIENT_SIZE", c"Insufficient Size"),
    (8, "INSUFFICIENT_POWER", c"Insufficient External Power"),
    (9, "DRIVER_NOT_LOADED", c"Driver Not Loaded"),
    (10, "TIMEOUT", c"Timeout"),
    (11, "IRQ_ISSUE", c"Interrupt request issue"),
    (12, "LIBRARY_NOT_FOUND", c"NVML Shared Library Not Found"),
    (13, "FUNCTION_NOT_FOUND", c"Function Not Found"),
    (14, "CORRUPTED_INFOROM", c"Corrupted infoROM"),
    (15, "GPU_IS_LOST", c"GPU is lost"),
    (16, "RESET_REQUIRED", c"GPU requires restart"),
    (
        17,
        "OPERATING_SYSTEM",
        c"The operating system has blocked the request",
    ),
    (
        18,
        "LIB_RM_VERSION_MISMATCH",
        c"RM has detected an NVML/RM version mismatch",
    ),
    (19, "IN_USE", c"In use by another client"),
    (20, "MEMORY", c"Insufficient Memory"),
    (21, "NO_DATA", c"No data"),
    (
        22,
        "VGPU_ECC_NOT_SUPPORTED",
        c"ECC is not supported on vGPU",
    ),
    (23, "INSUFFICIENT_RESOURCES", c"Insufficient resources"),
    (24, "FREQ_NOT_SUPPORTED", c"Frequency not supported"),
    (
        25,
        "ARGUMENT_VERSION_MISMATCH",
        c"Argument version mismatch",
    ),
    (26, "DEPRECATED", c"Deprecated"),
    (27, "NOT_READY", c"Not ready"),
    (28, "GPU_NOT_FOUND", c"GPU not found"),
    (29, "INVALID_STATE", c"Invalid state"),
    (30, "RESET_TYPE_NOT_SUPPORTED", c"Reset type not supported"),
    (999, "UNKNOWN", c"Unknown Error"),
];

/// The sentence for a return code, as `nvmlErrorString` gives it.
pub fn standard_error_string(code: nvmlReturn_t) -> &'static CStr {
    RETURN_CODES
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or(c"Unknown Error", |(_, _, s)| s)
}

/// The return code named `name` (`DRIVER_NOT_LOADED` or `NVML_ERROR_DRIVER_NOT_LOADED`).
pub fn return_code_by_name(name: &str) -> Option<nvmlReturn_t> {
    let short = name.strip_prefix("NVML_ERROR_").unwrap_or(name);
    let short = short.strip_prefix("NVML_").unwrap_or(short);
    RETURN_CODES
        .iter()
        .find(|(_, n, _)| n.eq_ignore_ascii_case(short))
        .map(|(c, _, _)| *c)
}

/// `NVML_VALUE_NOT_AVAILABLE` as an unsigned long long (used memory of a process).
pub const VALUE_NOT_AVAILABLE_U64: c_ulonglong = c_ulonglong::MAX;
/// GPU/compute instance id of a process outside any MIG instance.
pub const NO_INSTANCE_ID: c_uint = 0xFFFF_FFFF;

// nvmlTemperatureSensors_t
pub const NVML_TEMPERATURE_GPU: c_uint = 0;
// nvmlTemperatureThresholds_t
pub const NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: c_uint = 0;
pub const NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: c_uint = 1;
pub const NVML_TEMPERATURE_THRESHOLD_MEM_MAX: c_uint = 2;
pub const NVML_TEMPERATURE_THRESHOLD_GPU_MAX: c_uint = 3;
// nvmlClockType_t
pub const NVML_CLOCK_GRAPHICS: c_uint = 0;
pub const NVML_CLOCK_SM: c_uint = 1;
pub const NVML_CLOCK_MEM: c_uint = 2;
pub const NVML_CLOCK_VIDEO: c_uint = 3;
// nvmlPcieUtilCounter_t
pub const NVML_PCIE_UTIL_TX_BYTES: c_uint = 0;
pub const NVML_PCIE_UTIL_RX_BYTES: c_uint = 1;
// nvmlMemoryErrorType_t
pub const NVML_MEMORY_ERROR_TYPE_CORRECTED: c_uint = 0;
pub const NVML_MEMORY_ERROR_TYPE_UNCORRECTED: c_uint = 1;
// nvmlEccCounterType_t
pub const NVML_VOLATILE_ECC: c_uint = 0;
pub const NVML_AGGREGATE_ECC: c_uint = 1;

/// `NVML_STRUCT_VERSION(Memory, 2)`: the struct size with the version in the top byte.
pub const NVML_MEMORY_V2_VERSION: c_uint =
    (std::mem::size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);

/// `nvmlPciInfo_t` as taken by `nvmlDeviceGetPciInfo_v2` and `_v3` (68 bytes).
#[repr(C)]
pub struct nvmlPciInfo_t {
    pub busIdLegacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub busId: [c_char; 32],
}

/// The pre-v2 `nvmlPciInfo_t` taken by the unversioned `nvmlDeviceGetPciInfo` (52 bytes):
/// a 16-byte bus id and four reserved words where v2 has the long bus id.
#[repr(C)]
pub struct nvmlPciInfo_v1_t {
    pub busId: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub reserved: [c_uint; 4],
}

/// `nvmlUtilization_t`.
#[repr(C)]
pub struct nvmlUtilization_t {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlMemory_t` (v1: `used` includes the driver-reserved memory).
#[repr(C)]
pub struct nvmlMemory_t {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t` (reserved memory reported apart from `used`).
#[repr(C)]
pub struct nvmlMemory_v2_t {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlProcessInfo_v1_t` (16 bytes), for the unversioned running-process calls.
#[repr(C)]
pub struct nvmlProcessInfo_v1_t {
    pub pid: c_uint,
    pub usedGpuMemory: c_ulonglong,
}

/// `nvmlProcessInfo_v2_t` (24 bytes), for the `_v2` and `_v3` running-process calls.
#[repr(C)]
pub struct nvmlProcessInfo_v2_t {
    pub pid: c_uint,
    pub usedGpuMemory: c_ulonglong,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
pub struct nvmlProcessUtilizationSample_t {
    pub pid: c_uint,
    pub timeStamp: c_ulonglong,
    pub smUtil: c_uint,
    pub memUtil: c_uint,
    pub encUtil: c_uint,
    pub decUtil: c_uint,
}

/// Copies `text` into a C buffer of `len` bytes with its terminating NUL, or returns the
/// NVML error for a null or too-small buffer.
///
/// # Safety
/// `buf` must be null or valid for `len` bytes of writes.
pub unsafe fn write_c_string(buf: *mut c_char, len: c_uint, text: &str) -> nvmlReturn_t {
    if buf.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    let bytes = text.as_bytes();
    if (len as usize) < bytes.len() + 1 {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller guarantees `len` writable bytes and we write bytes.len() + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    NVML_SUCCESS
}

/// Fills a fixed C char array with `text`, truncated to leave room for the NUL.
pub fn fill_char_array(dest: &mut [c_char], text: &str) {
    dest.fill(0);
    let room = dest.len().saturating_sub(1);
    for (d, b) in dest.iter_mut().zip(text.bytes().take(room)) {
        *d = b as c_char;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_match_the_header() {
        assert_eq!(std::mem::size_of::<nvmlPciInfo_t>(), 68);
        assert_eq!(std::mem::size_of::<nvmlPciInfo_v1_t>(), 52);
        assert_eq!(std::mem::size_of::<nvmlMemory_v2_t>(), 40);
        assert_eq!(std::mem::size_of::<nvmlProcessInfo_v1_t>(), 16);
        assert_eq!(std::mem::size_of::<nvmlProcessInfo_v2_t>(), 24);
        assert_eq!(std::mem::size_of::<nvmlProcessUtilizationSample_t>(), 32);
        assert_eq!(NVML_MEMORY_V2_VERSION, 0x0200_0028);
    }

    #[test]
    fn return_codes_resolve_by_either_name() {
        assert_eq!(return_code_by_name("DRIVER_NOT_LOADED"), Some(9));
        assert_eq!(return_code_by_name("NVML_ERROR_GPU_IS_LOST"), Some(15));
        assert_eq!(return_code_by_name("no_permission"), Some(4));
        assert_eq!(return_code_by_name("BOGUS"), None);
    }
}

/// `nvmlEventSet_t`: an opaque pointer to the caller.
pub type nvmlEventSet_t = *mut c_void;
/// `nvmlEventTypeXidCriticalError`.
pub const NVML_EVENT_TYPE_XID_CRITICAL_ERROR: c_ulonglong = 0x8;

/// `nvmlEventData_t`.
#[repr(C)]
pub struct nvmlEventData_t {
    pub device: nvmlDevice_t,
    pub eventType: c_ulonglong,
    pub eventData: c_ulonglong,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}
