//! The optional `libamd_smi.so` (ROCm's AMD SMI), looked for at run time with dlopen, the way
//! NVML is loaded. It is never required: every figure torchtop shows for AMD GPUs comes from
//! sysfs and fdinfo. The probe says whether the library is there and exports its entry point,
//! so that the driver line can name it.

/// Where ROCm installs the library when the loader path does not name it.
const CANDIDATES: [&str; 2] = ["libamd_smi.so", "/opt/rocm/lib/libamd_smi.so"];

/// A sentence for the driver line: which library was found, or that none was.
pub(crate) fn probe() -> String {
    probe_paths(&CANDIDATES)
}

pub(crate) fn probe_paths(candidates: &[&str]) -> String {
    for path in candidates {
        // SAFETY: loading runs the library's initializers, exactly as loading NVML does; the
        // library stays loaded only for the symbol lookup and no function in it is called.
        let Ok(library) = (unsafe { libloading::Library::new(path) }) else {
            continue;
        };
        // SAFETY: the symbol is only looked up, never called, so its type does not matter.
        let has_init =
            unsafe { library.get::<unsafe extern "C" fn(u64) -> u32>(b"amdsmi_init\0") }.is_ok();
        return if has_init {
            format!("{path} found (not needed: sysfs gives every figure shown)")
        } else {
            format!("{path} found but has no amdsmi_init; it is not used")
        };
    }
    "libamd_smi.so not found (optional; sysfs gives every figure shown)".to_string()
}
