//! A GPU's compute and graphics process lists, read from NVML into buffers the GPU's reader
//! keeps: `nvml_wrapper`'s calls allocate two vectors per list per reading (the C structures,
//! then the converted ones), which for every GPU every tick were most of the GPU worker's
//! allocations. Where the library's table of functions cannot be had, the wrapper's calls
//! are used as before.

use std::os::raw::c_uint;
use std::path::Path;

use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlProcessInfo_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_SUCCESS, nvmlReturn_t, NvmlLib,
};

/// `nvmlDevice{Compute,Graphics}RunningProcesses_v3`.
type ListFn =
    unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;

/// Room for this many processes from the start, and this many more than NVML last asked for
/// (processes start between its answer and the next call).
const HEADROOM: usize = 8;

/// More processes than any GPU runs (the fake library's scenarios stop far below): a driver
/// that asks for room beyond this gets its "too small" error back instead of the memory.
const MOST_LISTED: usize = 1 << 16;

/// The library's two list functions, where it has them.
#[derive(Clone, Copy)]
pub(super) struct ListFns {
    compute: ListFn,
    graphics: ListFn,
}

impl ListFns {
    /// Loads the library's function table again (the already loaded library: no second
    /// initialization) and keeps it for the life of the process, as the NVML handle is.
    pub(super) fn load(library: &Path) -> Option<Self> {
        // SAFETY: the library is the one `Nvml` loaded and initialized from this path; loading
        // it again only adds a reference to it and looks its symbols up.
        let lib: &'static NvmlLib = Box::leak(Box::new(unsafe { NvmlLib::new(library) }.ok()?));
        Some(ListFns {
            compute: *lib.nvmlDeviceGetComputeRunningProcesses_v3.as_ref().ok()?,
            graphics: *lib.nvmlDeviceGetGraphicsRunningProcesses_v3.as_ref().ok()?,
        })
    }
}

/// One GPU's lists and the buffers they are read into.
#[derive(Default)]
pub(super) struct ProcessLists {
    raw: Vec<nvmlProcessInfo_t>,
    pub(super) compute: Vec<ProcessInfo>,
    pub(super) graphics: Vec<ProcessInfo>,
}

impl ProcessLists {
    /// Reads both lists of `device` with `fns`; on an error, the list that failed is empty.
    pub(super) fn read(
        &mut self,
        fns: ListFns,
        device: &Device,
    ) -> (Result<(), NvmlError>, Result<(), NvmlError>) {
        // SAFETY: the handle is the device's own, valid while its `Nvml` lives (forever here).
        let handle = unsafe { device.handle() };
        let compute = read_list(fns.compute, handle, &mut self.raw, &mut self.compute);
        let graphics = read_list(fns.graphics, handle, &mut self.raw, &mut self.graphics);
        (compute, graphics)
    }
}

/// One list into `out` (cleared first), through `raw`, grown only when NVML says it is short.
fn read_list(
    list: ListFn,
    handle: nvmlDevice_t,
    raw: &mut Vec<nvmlProcessInfo_t>,
    out: &mut Vec<ProcessInfo>,
) -> Result<(), NvmlError> {
    out.clear();
    raw.clear();
    raw.reserve(HEADROOM);
    loop {
        let room = raw.capacity();
        let mut count = c_uint::try_from(room).unwrap_or(c_uint::MAX);
        // SAFETY: `raw` has room for `count` entries; NVML writes at most that many and sets
        // `count` to how many it wrote, or to how many it needs when they do not fit.
        let code = unsafe { list(handle, &raw mut count, raw.as_mut_ptr()) };
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        if code == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE && count > room {
            if count > MOST_LISTED {
                return nvml_try(code);
            }
            raw.reserve(count + HEADROOM);
            continue;
        }
        nvml_try(code)?;
        if code == nvmlReturn_enum_NVML_SUCCESS {
            // SAFETY: NVML wrote `count` entries (never more than the room it was given).
            unsafe { raw.set_len(count.min(room)) };
        }
        out.extend(raw.drain(..).map(ProcessInfo::from));
        return Ok(());
    }
}
