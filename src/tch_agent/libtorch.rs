//! The allocator figures of this process's libtorch, read through the C++ shim (shim.cpp).
//!
//! In tch's doc-only mode (`torch-doc-only`: no libtorch, no shim) the source compiles but reports
//! no devices and refuses commands, saying why.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value};

use super::stats::ShimDeviceStats;
use super::AllocatorStatsSource;

#[cfg(torchtop_shim)]
mod ffi {
    use super::ShimDeviceStats;

    extern "C" {
        pub(crate) fn torchtop_torch_version() -> *const std::os::raw::c_char;
        pub(crate) fn torchtop_cuda_device_count() -> i32;
        pub(crate) fn torchtop_cuda_device_stats(device: i32, out: *mut ShimDeviceStats) -> i32;
        pub(crate) fn torchtop_cuda_reset_peak(device: i32) -> i32;
    }
}

/// Reads libtorch's CUDA caching allocator. Never initializes CUDA: before the program does,
/// it reports no devices.
#[derive(Debug, Default)]
pub(crate) struct LibtorchSource {
    /// Devices seen in use once stay listed, even after they free everything.
    used: Mutex<BTreeSet<u32>>,
}

impl LibtorchSource {
    pub(crate) fn new() -> LibtorchSource {
        LibtorchSource::default()
    }

    /// The raw counters of one device, or None when CUDA is not initialized or there is no
    /// such device.
    pub(crate) fn raw_device_stats(device: u32) -> Option<ShimDeviceStats> {
        read_device(device)
    }
}

impl AllocatorStatsSource for LibtorchSource {
    fn device_stats(&self) -> Vec<(u32, Map<String, Value>)> {
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut devices = Vec::new();
        for device in 0..device_count() {
            let Some(raw) = read_device(device) else {
                continue;
            };
            if used.contains(&device) || raw.ever_used() {
                used.insert(device);
                devices.push((device, raw.sent()));
            }
        }
        devices
    }

    fn torch_version(&self) -> Option<String> {
        torch_version()
    }

    fn reset_peak(&self) -> Result<Vec<u32>, String> {
        let count = device_count();
        if count == 0 {
            return Err(not_initialized());
        }
        let used: Vec<u32> = self
            .used
            .lock()
            .map(|used| used.iter().copied().filter(|d| *d < count).collect())
            .unwrap_or_default();
        used.iter()
            .map(|device| reset_peak(*device).map(|()| *device))
            .collect()
    }

    fn snapshot(&self, _dir: &Path) -> Result<(PathBuf, u64), String> {
        Err("snapshot is not supported from libtorch (tch) programs yet".into())
    }
}

#[cfg(torchtop_shim)]
fn not_initialized() -> String {
    "CUDA is not initialized in this process".into()
}

#[cfg(torchtop_shim)]
fn torch_version() -> Option<String> {
    // SAFETY: the shim returns a pointer to a static NUL-terminated string literal.
    let text = unsafe { std::ffi::CStr::from_ptr(ffi::torchtop_torch_version()) };
    text.to_str().ok().map(str::to_owned)
}

#[cfg(torchtop_shim)]
fn device_count() -> u32 {
    // SAFETY: no arguments; the shim catches every C++ exception.
    let count = unsafe { ffi::torchtop_cuda_device_count() };
    u32::try_from(count).unwrap_or(0)
}

#[cfg(torchtop_shim)]
fn read_device(device: u32) -> Option<ShimDeviceStats> {
    let device = i32::try_from(device).ok()?;
    let mut out = ShimDeviceStats::default();
    // SAFETY: `out` is a valid, writable ShimDeviceStats, laid out as the shim's struct.
    let rc = unsafe { ffi::torchtop_cuda_device_stats(device, &raw mut out) };
    (rc == 0).then_some(out)
}

#[cfg(torchtop_shim)]
fn reset_peak(device: u32) -> Result<(), String> {
    let index = i32::try_from(device).map_err(|_| format!("no device {device}"))?;
    // SAFETY: plain integer argument; the shim catches every C++ exception.
    match unsafe { ffi::torchtop_cuda_reset_peak(index) } {
        0 => Ok(()),
        _ => Err(format!(
            "libtorch refused to reset the peaks of device {device}"
        )),
    }
}

#[cfg(not(torchtop_shim))]
const NO_SHIM: &str = "this build has no libtorch (tch doc-only mode)";

#[cfg(not(torchtop_shim))]
fn not_initialized() -> String {
    NO_SHIM.into()
}

#[cfg(not(torchtop_shim))]
fn torch_version() -> Option<String> {
    None
}

#[cfg(not(torchtop_shim))]
fn device_count() -> u32 {
    0
}

#[cfg(not(torchtop_shim))]
fn read_device(_device: u32) -> Option<ShimDeviceStats> {
    None
}

#[cfg(not(torchtop_shim))]
fn reset_peak(_device: u32) -> Result<(), String> {
    Err(NO_SHIM.into())
}
