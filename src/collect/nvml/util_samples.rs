//! A GPU's per-process utilization samples (nvmlDeviceGetProcessUtilization), read into a
//! buffer the GPU's reader keeps: `nvml_wrapper`'s call allocates two vectors per reading that
//! has samples (the C structures, then the converted ones). The calls are the wrapper's own:
//! one to count the samples, one to read them.

use std::os::raw::c_uint;

use nvml_wrapper::error::{nvml_try, nvml_try_count, NvmlError};
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::nvmlProcessUtilizationSample_t;

/// More samples than any GPU has processes: a driver that counts beyond this gets its
/// "too small" error back instead of the memory.
const MOST_SAMPLES: c_uint = 1 << 16;

/// The buffer one GPU's samples are read into, kept from reading to reading.
#[derive(Default)]
pub(super) struct UtilSamples {
    raw: Vec<nvmlProcessUtilizationSample_t>,
}

impl UtilSamples {
    /// The samples newer than `last_seen` (microseconds, NVML's clock); NVML answers
    /// `NotFound` when there are none.
    pub(super) fn read(
        &mut self,
        device: &Device,
        last_seen: u64,
    ) -> Result<&[nvmlProcessUtilizationSample_t], NvmlError> {
        let function = (device.nvml().lib())
            .nvmlDeviceGetProcessUtilization
            .as_ref()
            .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
        // SAFETY: the handle is the device's own, valid while its `Nvml` lives (forever here).
        let handle = unsafe { device.handle() };
        let mut count: c_uint = 0;
        // SAFETY: the symbol was resolved from the loaded library with this signature; a null
        // buffer asks only for the count, written to the local.
        let code = unsafe { function(handle, std::ptr::null_mut(), &raw mut count, last_seen) };
        nvml_try_count(code)?;
        self.raw.clear();
        if count == 0 {
            return Ok(&self.raw);
        }
        if count > MOST_SAMPLES {
            return Err(NvmlError::InsufficientSize(Some(count as usize)));
        }
        // SAFETY: the sample is a C structure of integers, for which all zeroes is a value.
        let zero: nvmlProcessUtilizationSample_t = unsafe { std::mem::zeroed() };
        self.raw.resize(count as usize, zero);
        // SAFETY: as above; the buffer holds `count` samples, and NVML writes at most that many
        // and sets `count` to how many it wrote.
        let code = unsafe { function(handle, self.raw.as_mut_ptr(), &raw mut count, last_seen) };
        nvml_try(code)?;
        self.raw.truncate(count as usize);
        Ok(&self.raw)
    }
}
