//! A GPU's per-process utilization samples (nvmlDeviceGetProcessUtilization), read into a
//! buffer the GPU's reader keeps: `nvml_wrapper`'s call allocates two vectors per reading that
//! has samples (the C structures, then the converted ones), and asks twice, once for the count
//! and once for the samples. On an H200 one call took 2.8 ms of CPU (the median of 50, GPU
//! idle), so this one asks once, into a buffer sized for the GPU's processes, and a second
//! time only when the driver says it holds more samples than that.

use std::os::raw::c_uint;

use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::{
    nvmlProcessUtilizationSample_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
};

/// More samples than any GPU has processes: a driver that counts beyond this gets its
/// "too small" error back instead of the memory.
const MOST_SAMPLES: c_uint = 1 << 16;

/// The least room asked for: a GPU with a few processes gets its samples in the first call.
const FIRST_ROOM: usize = 32;

/// The buffer one GPU's samples are read into, kept from reading to reading.
#[derive(Default)]
pub(super) struct UtilSamples {
    raw: Vec<nvmlProcessUtilizationSample_t>,
}

impl UtilSamples {
    /// The samples newer than `last_seen` (microseconds, NVML's clock), room made for at least
    /// `expected` of them; NVML answers `NotFound` when there are none.
    pub(super) fn read(
        &mut self,
        device: &Device,
        last_seen: u64,
        expected: usize,
    ) -> Result<&[nvmlProcessUtilizationSample_t], NvmlError> {
        let function = (device.nvml().lib())
            .nvmlDeviceGetProcessUtilization
            .as_ref()
            .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
        // SAFETY: the handle is the device's own, valid while its `Nvml` lives (forever here).
        let handle = unsafe { device.handle() };
        let mut room = expected
            .saturating_mul(2)
            .clamp(FIRST_ROOM, MOST_SAMPLES as usize);
        loop {
            // SAFETY: the sample is a C structure of integers, for which all zeroes is a value.
            let zero: nvmlProcessUtilizationSample_t = unsafe { std::mem::zeroed() };
            self.raw.resize(room, zero);
            let mut count = room as c_uint;
            // SAFETY: the symbol was resolved from the loaded library with this signature; the
            // buffer holds `count` samples, and NVML writes at most that many and sets `count`
            // to how many it wrote, or to how many it holds when they do not fit.
            let code =
                unsafe { function(handle, self.raw.as_mut_ptr(), &raw mut count, last_seen) };
            if code == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE && count as usize > room {
                if count > MOST_SAMPLES {
                    return Err(NvmlError::InsufficientSize(Some(count as usize)));
                }
                room = count as usize;
                continue;
            }
            nvml_try(code)?;
            self.raw.truncate(count as usize);
            return Ok(&self.raw);
        }
    }
}
