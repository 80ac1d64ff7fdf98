//! The optional `libamd_smi.so` (ROCm's AMD SMI), loaded at run time with dlopen the way NVML
//! is, for what sysfs and fdinfo lack: the RAS error counts (ECC), the energy counter, and the
//! GPU processes whose `/proc/PID/fdinfo` torchtop may not read (another user's, when not
//! root: amd-smi reads them from the KFD's world-readable `/sys/class/kfd/kfd/proc`).
//!
//! It is never required. Structure layouts changed between amd-smi versions (the version
//! struct lost its `year`, process names grew from 32 to 256 bytes), so after `amdsmi_init`
//! the library's version is read and the library is used only when it is one whose layouts
//! torchtop was written against ([`KNOWN_MAJOR`]); anything else leaves the sysfs figures
//! alone and says why on the driver line.
//!
//! Where the library is looked for: `TORCHTOP_AMDSMI_LIB` when set (tests point it at the
//! fake under `tests/fake-amdsmi`), else the loader path, else `/opt/rocm/lib`. Like
//! `--nvml-lib`, whoever sets root's environment already controls root.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use libloading::Library;

/// Where ROCm installs the library when the loader path does not name it.
const CANDIDATES: [&str; 2] = ["libamd_smi.so", "/opt/rocm/lib/libamd_smi.so"];
/// The environment variable that names the one library to try.
const LIB_ENV: &str = "TORCHTOP_AMDSMI_LIB";

/// The amd-smi library major version whose structures this file mirrors (ROCm 7's amd-smi
/// 26.x, whose `amdsmi_version_t` is `{major, minor, release, build}`). Older libraries put a
/// `year` first, which never reached 26, so a year-era library cannot pass for this one.
const KNOWN_MAJOR: u32 = 26;

type Status = u32;
const SUCCESS: Status = 0;
/// The list was filled, and more processes exist than it holds.
const OUT_OF_RESOURCES: Status = 15;
/// `AMDSMI_INIT_AMD_GPUS`: only GPUs, no CPU (HSMP) probing.
const INIT_AMD_GPUS: u64 = 1 << 1;

/// Sockets and GPUs asked for: more than any node holds.
const MAX_HANDLES: usize = 64;
/// GPU processes read per card and reading.
pub(crate) const MAX_PROCESSES: usize = 512;

type Handle = *mut c_void;
type InitFn = unsafe extern "C" fn(u64) -> Status;
type ShutDownFn = unsafe extern "C" fn() -> Status;
type VersionFn = unsafe extern "C" fn(*mut Version) -> Status;
type SocketsFn = unsafe extern "C" fn(*mut u32, *mut Handle) -> Status;
type ProcessorsFn = unsafe extern "C" fn(Handle, *mut u32, *mut Handle) -> Status;
type BdfFn = unsafe extern "C" fn(Handle, *mut u64) -> Status;
type EccFn = unsafe extern "C" fn(Handle, *mut ErrorCount) -> Status;
type EnergyFn = unsafe extern "C" fn(Handle, *mut u64, *mut f32, *mut u64) -> Status;
type ProcessListFn = unsafe extern "C" fn(Handle, *mut u32, *mut ProcInfo) -> Status;

/// `amdsmi_version_t` of amd-smi 26, with room to spare for any older, larger layout.
#[repr(C)]
#[derive(Default)]
struct Version {
    major: u32,
    minor: u32,
    release: u32,
    _pad: u32,
    _build: usize,
    _spare: [u64; 4],
}

/// `amdsmi_error_count_t`.
#[repr(C)]
#[derive(Default)]
struct ErrorCount {
    correctable: u64,
    uncorrectable: u64,
    deferred: u64,
    _reserved: [u64; 5],
}

/// `amdsmi_proc_info_t` of amd-smi 26, its two nested structs laid out flat (same offsets:
/// each nested struct is 64 bytes, 8-aligned).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ProcInfo {
    _name: [u8; 256],
    pid: u32,
    _mem: u64,
    /// `engine_usage.gfx`: ns on the graphics/compute engine since the process opened the GPU.
    gfx_ns: u64,
    _enc_ns: u64,
    _engine_reserved: [u32; 12],
    _gtt_bytes: u64,
    _cpu_bytes: u64,
    vram_bytes: u64,
    _memory_reserved: [u32; 10],
    _container_name: [u8; 256],
    _cu_occupancy: u32,
    _evicted_time: u32,
    _reserved: [u32; 10],
}

const _: () = assert!(std::mem::size_of::<ProcInfo>() == 704);
const _: () = assert!(std::mem::size_of::<ErrorCount>() == 64);

impl ProcInfo {
    fn zeroed() -> Self {
        // SAFETY: every field is an integer or an array of integers, for which all-zero bytes
        // are a valid value.
        unsafe { std::mem::zeroed() }
    }
}

/// One GPU process as amd-smi reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SmiProcess {
    pub(crate) pid: u32,
    pub(crate) vram_bytes: u64,
    pub(crate) gfx_ns: u64,
}

/// What amd-smi adds for one card in one reading; each figure `None` where the call failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SmiReading {
    /// Correctable and uncorrectable RAS errors since the driver loaded.
    pub(crate) ecc: Option<(u64, u64)>,
    pub(crate) energy_millijoules: Option<u64>,
    pub(crate) processes: Option<Vec<SmiProcess>>,
}

/// The library, initialised, with its GPUs by PCI address.
pub(crate) struct AmdSmi {
    shut_down: ShutDownFn,
    ecc: Option<EccFn>,
    energy: Option<EnergyFn>,
    process_list: Option<ProcessListFn>,
    /// GPU handles by PCI address ("0000:0c:00.0"), as usize: they are opaque tokens.
    gpus: HashMap<String, usize>,
    /// amd-smi is documented thread-safe, but one call at a time costs nothing here and
    /// spares torchtop from relying on it.
    calls: Mutex<()>,
    _library: Library,
}

/// The outcome of looking for the library: the library when usable, and a sentence for the
/// driver line either way.
pub(crate) struct Probe {
    pub(crate) smi: Option<AmdSmi>,
    pub(crate) note: String,
}

/// Looks for the library where [`LIB_ENV`] or the defaults say.
pub(crate) fn probe() -> Probe {
    match std::env::var(LIB_ENV) {
        Ok(path) if !path.is_empty() => probe_paths(&[path.as_str()]),
        _ => probe_paths(&CANDIDATES),
    }
}

pub(crate) fn probe_paths(candidates: &[&str]) -> Probe {
    for path in candidates {
        // SAFETY: loading runs the library's initializers, exactly as loading NVML does.
        let Ok(library) = (unsafe { Library::new(path) }) else {
            continue;
        };
        return match open(library) {
            Ok(smi) => {
                let note = format!(
                    "{path} {}: ECC counts, energy, and the GPU processes fdinfo cannot show",
                    smi.1
                );
                Probe {
                    smi: Some(smi.0),
                    note,
                }
            }
            Err(why) => Probe {
                smi: None,
                note: format!("{path} found but not used: {why}; sysfs figures are shown"),
            },
        };
    }
    Probe {
        smi: None,
        note: "libamd_smi.so not found (optional: without it there are no AMD ECC counts, \
               energy, or processes whose fdinfo is unreadable)"
            .to_string(),
    }
}

/// Looks up a required symbol, copying the function pointer out.
fn symbol<T: Copy>(library: &Library, name: &str) -> Result<T, String> {
    let mut bytes = name.as_bytes().to_vec();
    bytes.push(0);
    // SAFETY: each caller names `T` as the function type amdsmi.h declares for `name`.
    unsafe { library.get::<T>(&bytes) }
        .map(|s| *s)
        .map_err(|_| format!("it has no {name}"))
}

/// Initialises the library, checks its version, and finds its GPUs: the library and its
/// version text, or why it is not used (after shutting it down again).
fn open(library: Library) -> Result<(AmdSmi, String), String> {
    let init: InitFn = symbol(&library, "amdsmi_init")?;
    let shut_down: ShutDownFn = symbol(&library, "amdsmi_shut_down")?;
    let version_fn: VersionFn = symbol(&library, "amdsmi_get_lib_version")?;
    // SAFETY: `amdsmi_status_t amdsmi_init(uint64_t init_flags)`.
    let status = unsafe { init(INIT_AMD_GPUS) };
    if status != SUCCESS {
        return Err(format!("amdsmi_init failed with status {status}"));
    }
    let checked = (|| {
        let mut version = Version::default();
        // SAFETY: `version` is larger than every `amdsmi_version_t` layout amd-smi has had.
        let status = unsafe { version_fn(&raw mut version) };
        if status != SUCCESS {
            return Err(format!(
                "amdsmi_get_lib_version failed with status {status}"
            ));
        }
        let text = format!("{}.{}.{}", version.major, version.minor, version.release);
        if version.major != KNOWN_MAJOR {
            return Err(format!(
                "its version {text} is not amd-smi {KNOWN_MAJOR}.x (ROCm 7), whose structures \
                 torchtop reads"
            ));
        }
        let gpus = gpu_handles(&library)?;
        Ok((gpus, text))
    })();
    match checked {
        Ok((gpus, text)) => Ok((
            AmdSmi {
                shut_down,
                ecc: symbol(&library, "amdsmi_get_gpu_total_ecc_count").ok(),
                energy: symbol(&library, "amdsmi_get_energy_count").ok(),
                process_list: symbol(&library, "amdsmi_get_gpu_process_list").ok(),
                gpus,
                calls: Mutex::new(()),
                _library: library,
            },
            text,
        )),
        Err(why) => {
            // SAFETY: `amdsmi_status_t amdsmi_shut_down(void)`, after a successful init.
            unsafe { shut_down() };
            Err(why)
        }
    }
}

/// Every GPU of every socket, by the PCI address its BDF gives.
fn gpu_handles(library: &Library) -> Result<HashMap<String, usize>, String> {
    let sockets_fn: SocketsFn = symbol(library, "amdsmi_get_socket_handles")?;
    let processors_fn: ProcessorsFn = symbol(library, "amdsmi_get_processor_handles")?;
    let bdf_fn: BdfFn = symbol(library, "amdsmi_get_gpu_device_bdf")?;
    let mut sockets = [std::ptr::null_mut(); MAX_HANDLES];
    let mut count = MAX_HANDLES as u32;
    // SAFETY: `amdsmi_get_socket_handles(uint32_t *count, amdsmi_socket_handle *handles)`,
    // with `count` the length of `sockets`.
    let status = unsafe { sockets_fn(&raw mut count, sockets.as_mut_ptr()) };
    if status != SUCCESS {
        return Err(format!(
            "amdsmi_get_socket_handles failed with status {status}"
        ));
    }
    let mut gpus = HashMap::new();
    for &socket in &sockets[..(count as usize).min(MAX_HANDLES)] {
        let mut processors = [std::ptr::null_mut(); MAX_HANDLES];
        let mut count = MAX_HANDLES as u32;
        // SAFETY: `amdsmi_get_processor_handles(amdsmi_socket_handle, uint32_t *count,
        // amdsmi_processor_handle *handles)`, with `count` the length of `processors`.
        let status = unsafe { processors_fn(socket, &raw mut count, processors.as_mut_ptr()) };
        if status != SUCCESS {
            continue;
        }
        for &gpu in &processors[..(count as usize).min(MAX_HANDLES)] {
            let mut bdf = 0u64;
            // SAFETY: `amdsmi_get_gpu_device_bdf(handle, amdsmi_bdf_t *)`; `amdsmi_bdf_t` is a
            // union whose `as_uint` member is one uint64_t.
            if unsafe { bdf_fn(gpu, &raw mut bdf) } == SUCCESS {
                gpus.insert(bdf_text(bdf), gpu as usize);
            }
        }
    }
    Ok(gpus)
}

/// `amdsmi_bdf_t.as_uint` as Linux names the device: function bits 0-2, device 3-7, bus 8-15,
/// domain 16-63.
pub(crate) fn bdf_text(bdf: u64) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        bdf >> 16,
        (bdf >> 8) & 0xff,
        (bdf >> 3) & 0x1f,
        bdf & 0x7
    )
}

impl AmdSmi {
    /// What amd-smi adds for the card at `pdev`; `buffer` is the caller's, reused.
    pub(crate) fn read(&self, pdev: &str, buffer: &mut Vec<ProcInfo>) -> SmiReading {
        let Some(&gpu) = self.gpus.get(pdev) else {
            return SmiReading::default();
        };
        let gpu = gpu as Handle;
        let _one = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        SmiReading {
            ecc: self.ecc.and_then(|f| {
                let mut counts = ErrorCount::default();
                // SAFETY: `amdsmi_get_gpu_total_ecc_count(handle, amdsmi_error_count_t *)`.
                (unsafe { f(gpu, &raw mut counts) } == SUCCESS)
                    .then_some((counts.correctable, counts.uncorrectable))
            }),
            energy_millijoules: self.energy.and_then(|f| energy(f, gpu)),
            processes: self.process_list.and_then(|f| processes(f, gpu, buffer)),
        }
    }
}

/// The energy counter times its resolution (µJ per count), in millijoules.
fn energy(f: EnergyFn, gpu: Handle) -> Option<u64> {
    let (mut counter, mut resolution, mut timestamp) = (0u64, 0f32, 0u64);
    // SAFETY: `amdsmi_get_energy_count(handle, uint64_t *power, float *counter_resolution,
    // uint64_t *timestamp)`.
    let status = unsafe {
        f(
            gpu,
            &raw mut counter,
            &raw mut resolution,
            &raw mut timestamp,
        )
    };
    let microjoules = counter as f64 * f64::from(resolution);
    (status == SUCCESS && resolution.is_finite() && resolution > 0.0 && microjoules < 1e20)
        .then(|| (microjoules / 1000.0) as u64)
}

fn processes(f: ProcessListFn, gpu: Handle, buffer: &mut Vec<ProcInfo>) -> Option<Vec<SmiProcess>> {
    buffer.resize(MAX_PROCESSES, ProcInfo::zeroed());
    let mut count = MAX_PROCESSES as u32;
    // SAFETY: `amdsmi_get_gpu_process_list(handle, uint32_t *max_processes,
    // amdsmi_proc_info_t *list)`: `count` is the length of `buffer`, which the library fills
    // up to that many entries.
    let status = unsafe { f(gpu, &raw mut count, buffer.as_mut_ptr()) };
    if status != SUCCESS && status != OUT_OF_RESOURCES {
        return None;
    }
    let filled = (count as usize).min(MAX_PROCESSES);
    Some(
        buffer[..filled]
            .iter()
            .filter(|p| p.pid != 0)
            .map(|p| SmiProcess {
                pid: p.pid,
                vram_bytes: p.vram_bytes,
                gfx_ns: p.gfx_ns,
            })
            .collect(),
    )
}

impl Drop for AmdSmi {
    fn drop(&mut self) {
        let _one = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // SAFETY: `amdsmi_status_t amdsmi_shut_down(void)`, once, after the successful init.
        unsafe { (self.shut_down)() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bdf_reads_as_linux_names_the_device() {
        // Domain 0, bus 0x0c, device 0, function 0; and a domain above 16 bits.
        assert_eq!(bdf_text(0x0c << 8), "0000:0c:00.0");
        assert_eq!(
            bdf_text((0x1_0002 << 16) | (0xc1 << 8) | (0x1f << 3) | 7),
            "10002:c1:1f.7"
        );
    }

    #[test]
    fn no_library_is_a_sentence_and_no_library() {
        let probe = probe_paths(&["/nonexistent/torchtop/libamd_smi.so"]);
        assert!(probe.smi.is_none());
        assert!(probe.note.contains("not found"), "{}", probe.note);
    }

    #[test]
    fn a_library_without_amd_smi_is_not_used() {
        // libc loads, but has no amdsmi_init.
        let probe = probe_paths(&["libc.so.6"]);
        assert!(probe.smi.is_none());
        assert!(
            probe.note.contains("not used: it has no amdsmi_init"),
            "{}",
            probe.note
        );
    }
}
