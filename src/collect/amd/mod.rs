//! AMD GPUs through the amdgpu kernel driver, with no library required: card figures from
//! sysfs ([`sysfs`]), per-process VRAM and engine time from `/proc/PID/fdinfo` ([`fdinfo`]),
//! and, where `libamd_smi.so` is installed ([`smi`]), what those lack: ECC counts, energy, and
//! the processes whose fdinfo cannot be read. sysfs and fdinfo come first; amd-smi only fills
//! what they leave `None` ([`merge`]).
//!
//! Everything is read under a root path (`/` in production, a fixture tree in tests), so the
//! same code runs against the files a real MI300 node has. Reads may block on a hung GPU like
//! NVML calls, so the sampler runs each card's reader on its GPU workers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::collect::gpu::{DeviceError, DeviceReader, DeviceReading};
use crate::model::{GpuProcess, Implausible, ProcessKind};

pub(crate) mod fdinfo;
mod merge;
pub(crate) mod smi;
pub(crate) mod sysfs;

use fdinfo::{ClientScanner, EngineClock, ProcessUse};
use sysfs::AmdCard;

/// One fdinfo scan serves every card read within this time.
const SCAN_FRESH_FOR: Duration = Duration::from_millis(250);
/// Engine shares are measured over at least this long; the first reading after start waits
/// for it, so that `--once` has shares too.
const MIN_ENGINE_WINDOW: Duration = Duration::from_millis(100);

type UsageByCard = Arc<BTreeMap<String, Vec<ProcessUse>>>;

/// The amdgpu cards of the machine and the shared fdinfo scan.
pub(crate) struct AmdSource {
    cards: Vec<AmdCard>,
    clients: Arc<ClientCache>,
    /// The libamd_smi probe's outcome, for the driver line.
    pub(crate) smi: Option<Arc<str>>,
    /// The library, when it is there and usable.
    library: Option<Arc<smi::AmdSmi>>,
}

impl AmdSource {
    /// Finds the amdgpu cards under `<root>/sys` and primes the fdinfo scan under
    /// `<root>/proc` (`root` is `/` outside tests).
    pub(crate) fn load(root: &Path) -> Self {
        let cards = sysfs::find_cards(root);
        let clients = Arc::new(ClientCache::new(root.join("proc")));
        let (smi, library) = if cards.is_empty() {
            (None, None)
        } else {
            clients.prime();
            let probe = smi::probe();
            (Some(probe.note.into()), probe.smi.map(Arc::new))
        };
        AmdSource {
            cards,
            clients,
            smi,
            library,
        }
    }

    pub(crate) fn count(&self) -> u32 {
        u32::try_from(self.cards.len()).unwrap_or(u32::MAX)
    }

    /// A reader for the card at `vendor_index` (PCI order), published as GPU `index`.
    pub(crate) fn open(&self, vendor_index: u32, index: u32) -> Box<dyn DeviceReader> {
        Box::new(AmdDevice {
            card: self.cards.get(vendor_index as usize).cloned(),
            vendor_index,
            index,
            fixed: None,
            clients: self.clients.clone(),
            implausible: Implausible::default(),
            library: self.library.clone(),
            smi_state: merge::SmiState::default(),
        })
    }
}

struct AmdDevice {
    card: Option<AmdCard>,
    vendor_index: u32,
    index: u32,
    fixed: Option<sysfs::FixedFields>,
    clients: Arc<ClientCache>,
    /// Out-of-range values dropped since this card was first read.
    implausible: Implausible,
    library: Option<Arc<smi::AmdSmi>>,
    /// amd-smi's process buffer and engine counters, kept between readings.
    smi_state: merge::SmiState,
}

impl DeviceReader for AmdDevice {
    fn read(&mut self) -> Result<DeviceReading, DeviceError> {
        let Some(card) = &self.card else {
            return Err(DeviceError::Failed(format!(
                "AMD GPU {} is no longer in sysfs; restart torchtop to count the GPUs again",
                self.vendor_index
            )));
        };
        if !card.device_dir.exists() {
            return Err(DeviceError::Lost(format!(
                "{} has disappeared from sysfs",
                card.device_dir.display()
            )));
        }
        let fixed = self.fixed.get_or_insert_with(|| sysfs::read_fixed(card));
        let mut sample = sysfs::read_sample(card, fixed);
        sample.index = self.index;
        sample.vendor_index = Some(self.vendor_index);
        let usage = self.clients.usage(Instant::now());
        let mut processes: Vec<GpuProcess> = usage
            .get(&card.pdev)
            .map(|rows| rows.iter().map(|u| process_row(u, self.index)).collect())
            .unwrap_or_default();
        if let Some(library) = &self.library {
            let reading = library.read(&card.pdev, &mut self.smi_state.buffer);
            self.smi_state
                .merge(reading, &mut sample, &mut processes, Instant::now());
        }
        self.implausible.record(&sample.drop_implausible());
        sample.implausible = self.implausible.clone();
        Ok(DeviceReading { sample, processes })
    }
}

fn process_row(usage: &ProcessUse, gpu: u32) -> GpuProcess {
    let mut row = GpuProcess::new(usage.pid, gpu, ProcessKind::Compute);
    row.gpu_memory_bytes = usage.vram_bytes;
    row.sm_percent = usage.engine_percent;
    row
}

/// The fdinfo scan, shared by the cards: at most one runs at a time, and readers that find
/// one running use the latest result instead of waiting behind it.
struct ClientCache {
    /// The scanner and the engine clock, held together for the length of a scan.
    clock: Mutex<(ClientScanner, EngineClock)>,
    /// When the latest result was taken (`None` until a reading-worthy scan), and the result.
    latest: Mutex<(Option<Instant>, UsageByCard)>,
    primed_at: Mutex<Option<Instant>>,
}

impl ClientCache {
    fn new(proc_root: PathBuf) -> Self {
        ClientCache {
            clock: Mutex::new((ClientScanner::new(proc_root), EngineClock::default())),
            latest: Mutex::new((None, Arc::default())),
            primed_at: Mutex::new(None),
        }
    }

    /// A first scan, so that the first reading can give engine shares.
    fn prime(&self) {
        let now = Instant::now();
        let mut guard = lock(&self.clock);
        let (scanner, clock) = &mut *guard;
        let usage = clock.usage(&scanner.scan(now), now);
        *lock(&self.latest) = (None, Arc::new(usage));
        *lock(&self.primed_at) = Some(now);
    }

    fn usage(&self, now: Instant) -> UsageByCard {
        {
            let latest = lock(&self.latest);
            if latest
                .0
                .is_some_and(|at| now.saturating_duration_since(at) < SCAN_FRESH_FOR)
            {
                return latest.1.clone();
            }
        }
        let Ok(mut guard) = self.clock.try_lock() else {
            return lock(&self.latest).1.clone();
        };
        let (scanner, clock) = &mut *guard;
        if let Some(primed) = lock(&self.primed_at).take() {
            std::thread::sleep(MIN_ENGINE_WINDOW.saturating_sub(primed.elapsed()));
        }
        let now = Instant::now();
        let usage = Arc::new(clock.usage(&scanner.scan(now), now));
        *lock(&self.latest) = (Some(now), usage.clone());
        usage
    }
}

/// A poisoned lock only means a reader panicked mid-update; the data is still usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
