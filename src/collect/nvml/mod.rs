//! The real GPU source: NVIDIA's NVML, loaded at run time through nvml-wrapper.
//!
//! Loading and every device call may block (a GPU off the bus, a stuck driver), so callers run
//! them on worker threads, one per GPU. A field the device does not report, or whose symbol the
//! library lacks, is `None`, and so is a value out of physical range (counted in the sample's
//! `implausible`). What never changes (name, UUID, bus id, ECC mode) is read once.

use std::ffi::CStr;
use std::path::Path;
use std::sync::Arc;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::gpu::{DeviceReader, GpuSource};
use crate::model::DriverInfo;

mod device;
mod mig;
mod process_lists;
mod processes;
mod throttle;
mod util_samples;

use device::NvmlDevice;
#[cfg(test)]
pub(crate) use throttle::throttle_reason_names;
pub(crate) use throttle::ThrottleNames;

pub(crate) struct NvmlSource {
    /// Leaked on purpose: worker threads borrow it for the life of the process, and a thread
    /// stuck in the driver must never be joined or have the library unloaded under it.
    nvml: Option<&'static Nvml>,
    info: DriverInfo,
    /// NVML's process-list functions, called with kept buffers ([`process_lists`]).
    list_fns: Option<process_lists::ListFns>,
}

impl NvmlSource {
    /// Loads and initializes NVML from `library`. Blocks for as long as `nvmlInit` does.
    pub(crate) fn load(library: &Path) -> Self {
        let mut info = DriverInfo {
            library: library.display().to_string().into(),
            ..Default::default()
        };
        match Nvml::builder().lib_path(library.as_os_str()).init() {
            Ok(nvml) => {
                let nvml: &'static Nvml = Box::leak(Box::new(nvml));
                info.nvml_loaded = true;
                info.driver_version = nvml.sys_driver_version().ok().map(Arc::from);
                info.nvml_version = nvml.sys_nvml_version().ok().map(Arc::from);
                let cuda = nvml.sys_cuda_driver_version().ok();
                info.cuda_version = cuda.map(|v| format_cuda_version(v).into());
                info.gpu_count = nvml.device_count().ok();
                NvmlSource {
                    nvml: Some(nvml),
                    info,
                    list_fns: process_lists::ListFns::load(library),
                }
            }
            Err(error) => {
                info.error = Some(describe_init_error(library, error));
                NvmlSource {
                    nvml: None,
                    info,
                    list_fns: None,
                }
            }
        }
    }
}

impl GpuSource for NvmlSource {
    fn driver_info(&self) -> DriverInfo {
        self.info.clone()
    }

    fn device_count(&self) -> Result<u32, String> {
        match self.nvml {
            Some(nvml) => nvml.device_count().map_err(|e| e.to_string()),
            None => Ok(0),
        }
    }

    fn open_device(&self, index: u32) -> Box<dyn DeviceReader> {
        Box::new(NvmlDevice::new(self.nvml, index, self.list_fns))
    }
}

/// "12040" -> "12.4", as nvidia-smi shows the CUDA driver version.
fn format_cuda_version(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

fn describe_init_error(library: &Path, error: NvmlError) -> String {
    match error {
        NvmlError::LibloadingError(e) => {
            // dlerror's text starts with the path again: say it once.
            let shown = library.display().to_string();
            let reason = e.to_string();
            let reason = reason
                .strip_prefix(&format!("{shown}: "))
                .unwrap_or(&reason)
                .to_string();
            format!("NVML could not be loaded from {shown}: {reason}")
        }
        NvmlError::DriverNotLoaded => format!(
            "NVML was loaded from {}, but the NVIDIA driver is not running",
            library.display()
        ),
        other => {
            let headline = other.to_string();
            let code: u32 = other.into();
            match library_error_string(library, code) {
                Some(detail) if !detail.is_empty() && detail != headline => {
                    format!(
                        "NVML from {} failed to start: {headline} ({detail})",
                        library.display()
                    )
                }
                _ => format!(
                    "NVML from {} failed to start: {headline}",
                    library.display()
                ),
            }
        }
    }
}

/// The library's own sentence for an error code, which can say more than the code's name.
fn library_error_string(library: &Path, code: u32) -> Option<String> {
    // SAFETY: loading runs the library's initializers, which the failed init already ran; the
    // symbol is checked before the call and the returned pointer is a static C string.
    unsafe {
        let lib = nvml_wrapper_sys::bindings::NvmlLib::new(library).ok()?;
        let function = lib.nvmlErrorString.as_ref().ok()?;
        let text = function(code);
        if text.is_null() {
            return None;
        }
        Some(CStr::from_ptr(text).to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests;
