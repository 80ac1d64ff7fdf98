//! The library's process-wide state: whether NVML is initialized, the scenario in force (and
//! its live reload), the clock t, per-GPU list-call counters, and the sentences
//! `nvmlErrorString` gives after a failed init. Every exported call goes through [`device_call`]
//! or [`with_runtime`], which take the lock briefly and never hold it while a call blocks.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::abi::{self, nvmlDevice_t, nvmlReturn_t};
use crate::scenario::{Field, GpuSpec, Scenario, TimeOrigin, MAX_GPUS};

/// Names the scenario file; read again by every init call.
pub const SCENARIO_ENV: &str = "TORCHTOP_FAKE_NVML_SCENARIO";
/// Names a file that, when set, holds how many device calls of each query family were made so
/// far (one `Field count` line each), so that a test can tell how often torchtop asks for
/// something. It is replaced whole (written beside, then renamed) at most every
/// [`CALL_COUNTS_EVERY`]: a write at every call slowed a loaded machine's readings enough to
/// leave GPUs stale.
pub const CALL_COUNTS_ENV: &str = "TORCHTOP_FAKE_NVML_CALL_COUNTS";
/// Least time between two rewrites of the call counts' file.
const CALL_COUNTS_EVERY: Duration = Duration::from_millis(50);
/// Least time between two checks of the scenario file's modification stamp.
const RELOAD_CHECK_INTERVAL: Duration = Duration::from_millis(100);

struct Runtime {
    refcount: u32,
    started: Instant,
    started_wall_us: u64,
    scenario: Arc<Scenario>,
    source: Option<WatchedFile>,
    /// Process-list calls so far, per (GPU slot, graphics list?).
    list_calls: HashMap<(usize, bool), u64>,
    /// Device calls so far per query family, kept only while [`CALL_COUNTS_ENV`] names a file.
    call_counts: Option<CallCounts>,
}

/// See [`CALL_COUNTS_ENV`].
struct CallCounts {
    path: PathBuf,
    counts: HashMap<Field, u64>,
    /// When the file was last replaced.
    written: Option<Instant>,
}

struct WatchedFile {
    path: PathBuf,
    stamp: Option<FileStamp>,
    last_check: Instant,
}

static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);
/// The code and sentence of the last failed init, until the next init call.
static INIT_ERROR: Mutex<Option<(nvmlReturn_t, &'static CStr)>> = Mutex::new(None);
/// Sentences handed out by `nvmlErrorString`; kept for the life of the process because callers
/// hold the pointers. Deduplicated, so repeated failures do not grow it.
static INTERNED: Mutex<Vec<&'static CStr>> = Mutex::new(Vec::new());
/// Handles are addresses inside this array: one byte per possible GPU slot.
static HANDLE_SPACE: [u8; MAX_GPUS] = [0; MAX_GPUS];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn intern(text: &str) -> &'static CStr {
    let clean: String = text.chars().filter(|c| *c != '\0').collect();
    let mut interned = lock(&INTERNED);
    if let Some(found) = interned.iter().find(|s| s.to_bytes() == clean.as_bytes()) {
        return found;
    }
    let leaked: &'static CStr =
        Box::leak(CString::new(clean).unwrap_or_default().into_boxed_c_str());
    interned.push(leaked);
    leaked
}

fn wall_clock_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// What tells an edited scenario file apart: modification time, size, and inode (an editor or
/// a test that writes aside and renames gives a new inode).
type FileStamp = (SystemTime, u64, u64);

fn file_stamp(path: &PathBuf) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

/// `nvmlInit*`: reads the scenario named by the environment, resets t to 0 and counts one more
/// user, or fails with the scenario's init fault or a scenario error.
pub fn init() -> nvmlReturn_t {
    *lock(&INIT_ERROR) = None;
    let (scenario, source) = match std::env::var_os(SCENARIO_ENV) {
        None => (Scenario::default_machine(), None),
        Some(path) => {
            let path = PathBuf::from(path);
            let stamp = file_stamp(&path);
            match Scenario::load(&path) {
                Ok(s) => (
                    s,
                    Some(WatchedFile {
                        path,
                        stamp,
                        last_check: Instant::now(),
                    }),
                ),
                Err(e) => return fail_init(abi::NVML_ERROR_UNKNOWN, &e.0),
            }
        }
    };
    if scenario.init.delay_s > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(scenario.init.delay_s.min(3600.0)));
    }
    if let Some(code) = scenario.init.fail {
        let sentence = scenario.init.message.clone().unwrap_or_else(|| {
            abi::standard_error_string(code.0)
                .to_string_lossy()
                .into_owned()
        });
        return fail_init(code.0, &sentence);
    }
    let mut runtime = lock(&RUNTIME);
    let refcount = runtime.as_ref().map_or(0, |r| r.refcount) + 1;
    *runtime = Some(Runtime {
        refcount,
        started: Instant::now(),
        started_wall_us: wall_clock_us(),
        scenario: Arc::new(scenario),
        source,
        list_calls: HashMap::new(),
        call_counts: std::env::var_os(CALL_COUNTS_ENV).map(|path| CallCounts {
            path: path.into(),
            counts: HashMap::new(),
            written: None,
        }),
    });
    abi::NVML_SUCCESS
}

fn fail_init(code: nvmlReturn_t, sentence: &str) -> nvmlReturn_t {
    let code = if code == abi::NVML_SUCCESS {
        abi::NVML_ERROR_UNKNOWN
    } else {
        code
    };
    *lock(&INIT_ERROR) = Some((code, intern(sentence)));
    code
}

/// `nvmlShutdown`: one user fewer; the state goes when the last one leaves.
pub fn shutdown() -> nvmlReturn_t {
    let mut runtime = lock(&RUNTIME);
    match runtime.as_mut() {
        None => abi::NVML_ERROR_UNINITIALIZED,
        Some(r) if r.refcount > 1 => {
            r.refcount -= 1;
            abi::NVML_SUCCESS
        }
        Some(_) => {
            *runtime = None;
            abi::NVML_SUCCESS
        }
    }
}

/// `nvmlErrorString`: the failed init's own sentence for its code, else the standard one.
pub fn error_string(code: nvmlReturn_t) -> &'static CStr {
    match *lock(&INIT_ERROR) {
        Some((c, sentence)) if c == code => sentence,
        _ => abi::standard_error_string(code),
    }
}

impl Runtime {
    fn t(&self) -> f64 {
        match self.scenario.system.time_origin {
            TimeOrigin::Init => self.started.elapsed().as_secs_f64(),
            TimeOrigin::Wall => wall_clock_us() as f64 / 1e6,
        }
    }

    /// Re-reads the scenario file when its stamp changed. A file that does not parse leaves the
    /// last good scenario in force and is tried again at the next check.
    fn refresh(&mut self) {
        let Some(file) = self.source.as_mut() else {
            return;
        };
        if file.last_check.elapsed() < RELOAD_CHECK_INTERVAL {
            return;
        }
        file.last_check = Instant::now();
        let stamp = file_stamp(&file.path);
        if stamp.is_none() || stamp == file.stamp {
            return;
        }
        match Scenario::load(&file.path) {
            Ok(s) => {
                file.stamp = stamp;
                self.scenario = Arc::new(s);
            }
            Err(e) => {
                if std::env::var_os("TORCHTOP_FAKE_NVML_DEBUG").is_some() {
                    eprintln!("{e} (keeping the last good scenario)");
                }
            }
        }
    }

    /// Counts a device call and rewrites the counts' file (see [`CALL_COUNTS_ENV`]).
    fn count_call(&mut self, field: Field) {
        let Some(calls) = self.call_counts.as_mut() else {
            return;
        };
        *calls.counts.entry(field).or_insert(0) += 1;
        if calls
            .written
            .is_some_and(|at| at.elapsed() < CALL_COUNTS_EVERY)
        {
            return;
        }
        calls.written = Some(Instant::now());
        let mut lines: Vec<String> = (calls.counts.iter())
            .map(|(f, n)| format!("{f:?} {n}\n"))
            .collect();
        lines.sort();
        // A failed write only loses this count: the next one writes them all.
        let beside = calls.path.with_extension("writing");
        if std::fs::write(&beside, lines.concat()).is_ok() {
            let _ = std::fs::rename(&beside, &calls.path);
        }
    }

    /// Slots of the GPUs present at t, in index order.
    fn present_slots(&self, t: f64) -> Vec<usize> {
        (self.scenario.gpus.iter().enumerate())
            .filter(|(_, g)| g.present_at(t))
            .map(|(i, _)| i)
            .collect()
    }
}

/// Runs `f` on the initialized runtime (after a scenario refresh), or returns UNINITIALIZED.
pub fn with_runtime(f: impl FnOnce(&SystemView) -> nvmlReturn_t) -> nvmlReturn_t {
    let view = {
        let mut guard = lock(&RUNTIME);
        let Some(rt) = guard.as_mut() else {
            return abi::NVML_ERROR_UNINITIALIZED;
        };
        rt.refresh();
        let t = rt.t();
        SystemView {
            scenario: rt.scenario.clone(),
            present: rt.present_slots(t),
            t,
        }
    };
    f(&view)
}

/// What system-level calls see: the scenario and which GPU slots are present now.
pub struct SystemView {
    pub scenario: Arc<Scenario>,
    pub present: Vec<usize>,
    pub t: f64,
}

impl SystemView {
    pub fn handle_of(&self, slot: usize) -> nvmlDevice_t {
        HANDLE_SPACE[slot..].as_ptr().cast_mut().cast()
    }

    /// The handle of the GPU at `index`, or the error a real driver would give.
    pub fn handle_by_index(&self, index: u32) -> Result<nvmlDevice_t, nvmlReturn_t> {
        let slot = *self
            .present
            .get(index as usize)
            .ok_or(abi::NVML_ERROR_INVALID_ARGUMENT)?;
        if self.scenario.gpus[slot].lost_at(self.t) {
            return Err(abi::NVML_ERROR_GPU_IS_LOST);
        }
        Ok(self.handle_of(slot))
    }
}

fn slot_of(handle: nvmlDevice_t) -> Option<usize> {
    let base = HANDLE_SPACE.as_ptr() as usize;
    let offset = (handle as usize).checked_sub(base)?;
    (offset < MAX_GPUS).then_some(offset)
}

/// What a device call sees once it is past the blocking, lost and unsupported checks.
pub struct DeviceView {
    pub scenario: Arc<Scenario>,
    pub slot: usize,
    /// Position among the GPUs present now.
    pub index: u32,
    pub t: f64,
    pub started_wall_us: u64,
    /// For process-list calls: how many such calls this GPU had before this one.
    pub list_call: u64,
}

impl DeviceView {
    pub fn gpu(&self) -> &GpuSpec {
        &self.scenario.gpus[self.slot]
    }
}

/// Runs a device query: checks init and the handle, blocks if the GPU hangs for `field`
/// (without holding the lock), then answers GPU_IS_LOST / NOT_SUPPORTED as the scenario says,
/// or runs `f`.
pub fn device_call(
    handle: nvmlDevice_t,
    field: Field,
    f: impl FnOnce(&DeviceView) -> nvmlReturn_t,
) -> nvmlReturn_t {
    let view = {
        let mut guard = lock(&RUNTIME);
        let Some(rt) = guard.as_mut() else {
            return abi::NVML_ERROR_UNINITIALIZED;
        };
        rt.refresh();
        let Some(slot) = slot_of(handle) else {
            return abi::NVML_ERROR_INVALID_ARGUMENT;
        };
        rt.count_call(field);
        let t = rt.t();
        let present = rt.present_slots(t);
        let Some(index) = present.iter().position(|s| *s == slot) else {
            // Its GPU left the scenario or the bus since the handle was taken.
            return abi::NVML_ERROR_GPU_IS_LOST;
        };
        let list_call = match field {
            Field::ComputeProcesses | Field::GraphicsProcesses => {
                let key = (slot, field == Field::GraphicsProcesses);
                let counter = rt.list_calls.entry(key).or_insert(0);
                *counter += 1;
                *counter - 1
            }
            _ => 0,
        };
        DeviceView {
            scenario: rt.scenario.clone(),
            slot,
            index: index as u32,
            t,
            started_wall_us: rt.started_wall_us,
            list_call,
        }
    };
    let gpu = view.gpu();
    if let Some(seconds) = gpu.block_for(field, view.t) {
        std::thread::sleep(Duration::from_secs_f64(seconds.min(1e9)));
    }
    if gpu.lost_at(view.t) {
        return abi::NVML_ERROR_GPU_IS_LOST;
    }
    if !gpu.supports(field) {
        return abi::NVML_ERROR_NOT_SUPPORTED;
    }
    f(&view)
}
