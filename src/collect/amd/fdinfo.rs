//! The amdgpu clients of every process, from `/proc/PID/fdinfo/FD` in the kernel's DRM
//! usage-stats format (Documentation/gpu/drm-usage-stats.rst), turned into one row per
//! (process, card): VRAM, GTT and the share of the gfx and compute engines between two scans.
//!
//! Only descriptors whose `/proc/PID/fd/FD` link points into `/dev/dri/` are read. One DRM
//! client (one open file description) can be reached through several descriptors and, after a
//! fork, several processes: clients are counted once per (`drm-pdev`, `drm-client-id`), for the
//! lowest pid that holds them. Reading another user's `fd`/`fdinfo` needs the same rights as
//! ptrace (root, or the same user); processes that cannot be read are skipped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// fdinfo of a DRM file is well under 2 KiB; anything longer is cut here.
const MAX_FDINFO_BYTES: u64 = 16 * 1024;
/// Descriptors looked at per process: bounds the cost of a process with a huge fd table.
const MAX_FDS_PER_PROCESS: usize = 65_536;

/// What one fdinfo file says. A key that is absent or malformed is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DrmClientInfo {
    pub(crate) driver: Option<String>,
    pub(crate) pdev: Option<String>,
    pub(crate) client_id: Option<u64>,
    pub(crate) vram_bytes: Option<u64>,
    pub(crate) gtt_bytes: Option<u64>,
    pub(crate) gfx_ns: Option<u64>,
    pub(crate) compute_ns: Option<u64>,
    /// `drm-engine-capacity-gfx` / `-compute`: how many engines the time is summed over.
    pub(crate) gfx_capacity: Option<u64>,
    pub(crate) compute_capacity: Option<u64>,
}

/// Parses one fdinfo text. Lines that are not `drm-` keys are ignored; a value that does not
/// parse leaves its field `None`.
pub(crate) fn parse_fdinfo(text: &str) -> DrmClientInfo {
    let mut info = DrmClientInfo::default();
    // Newer kernels add drm-total-/drm-resident-; drm-memory- is kept as the preferred name.
    let (mut resident_vram, mut resident_gtt) = (None, None);
    let (mut vram_seen, mut gtt_seen) = (false, false);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "drm-driver" => info.driver = keystr(value),
            "drm-pdev" => info.pdev = keystr(value),
            "drm-client-id" => info.client_id = value.parse().ok(),
            "drm-memory-vram" => (info.vram_bytes, vram_seen) = (memory_bytes(value), true),
            "drm-memory-gtt" => (info.gtt_bytes, gtt_seen) = (memory_bytes(value), true),
            "drm-resident-vram" => resident_vram = Some(memory_bytes(value)),
            "drm-resident-gtt" => resident_gtt = Some(memory_bytes(value)),
            "drm-engine-gfx" => info.gfx_ns = nanoseconds(value),
            "drm-engine-compute" => info.compute_ns = nanoseconds(value),
            "drm-engine-capacity-gfx" => info.gfx_capacity = value.parse().ok(),
            "drm-engine-capacity-compute" => info.compute_capacity = value.parse().ok(),
            _ => {}
        }
    }
    if !vram_seen {
        info.vram_bytes = resident_vram.flatten();
    }
    if !gtt_seen {
        info.gtt_bytes = resident_gtt.flatten();
    }
    info
}

fn keystr(value: &str) -> Option<String> {
    (!value.is_empty() && value.len() <= 64 && !value.contains(char::is_whitespace))
        .then(|| value.to_string())
}

/// `<uint> [KiB|MiB|GiB]`, no unit meaning bytes.
fn memory_bytes(value: &str) -> Option<u64> {
    let mut words = value.split_whitespace();
    let number: u64 = words.next()?.parse().ok()?;
    let scale: u64 = match words.next() {
        None => 1,
        Some("KiB") => 1 << 10,
        Some("MiB") => 1 << 20,
        Some("GiB") => 1 << 30,
        Some(_) => return None,
    };
    if words.next().is_some() {
        return None;
    }
    number.checked_mul(scale)
}

/// `<uint> ns`.
fn nanoseconds(value: &str) -> Option<u64> {
    value.strip_suffix("ns")?.trim().parse().ok()
}

/// One amdgpu client as a scan found it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DrmClient {
    pub(crate) pid: u32,
    pub(crate) info: DrmClientInfo,
}

/// One process's use of one card, summed over its clients.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProcessUse {
    pub(crate) pid: u32,
    pub(crate) vram_bytes: Option<u64>,
    pub(crate) gtt_bytes: Option<u64>,
    /// Time on the gfx and compute engines since the previous scan, in % of the interval.
    pub(crate) engine_percent: Option<u32>,
}

/// How often every process's `fd` directory is listed again to find new DRM descriptors; in
/// between, only the fdinfo of the descriptors already found is read, so a tick costs one small
/// read per GPU client instead of a readlink per descriptor of every process.
const FULL_RESCAN: Duration = Duration::from_secs(5);

/// The amdgpu clients under `<proc_root>`, deduplicated, in pid order (one full scan).
#[cfg(test)]
pub(crate) fn scan_clients(proc_root: &Path) -> Vec<DrmClient> {
    read_clients(proc_root, &mut find_drm_fds(proc_root))
}

/// Finds DRM descriptors with a full scan every [`FULL_RESCAN`], and reads their fdinfo.
#[derive(Debug)]
pub(crate) struct ClientScanner {
    proc_root: PathBuf,
    /// (pid, fd) of the DRM descriptors the last full scan found, still open at the last read.
    drm_fds: Vec<(u32, OsString)>,
    full_at: Option<Instant>,
}

impl ClientScanner {
    pub(crate) fn new(proc_root: PathBuf) -> Self {
        ClientScanner {
            proc_root,
            drm_fds: Vec::new(),
            full_at: None,
        }
    }

    pub(crate) fn scan(&mut self, now: Instant) -> Vec<DrmClient> {
        let due = self
            .full_at
            .is_none_or(|at| now.saturating_duration_since(at) >= FULL_RESCAN);
        if due {
            self.drm_fds = find_drm_fds(&self.proc_root);
            self.full_at = Some(now);
        }
        read_clients(&self.proc_root, &mut self.drm_fds)
    }
}

/// Every (pid, fd) under `proc_root` whose link points into `/dev/dri/`, in pid order.
fn find_drm_fds(proc_root: &Path) -> Vec<(u32, OsString)> {
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let mut found = Vec::new();
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")) else {
            continue;
        };
        let drm = (fds
            .take(MAX_FDS_PER_PROCESS)
            .filter_map(std::result::Result::ok))
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with("/dev/dri/")))
        .map(|e| (pid, e.file_name()));
        found.extend(drm);
    }
    found
}

/// Reads the fdinfo of `fds`, dropping those that are gone, and keeps each amdgpu client once
/// (for the lowest pid that holds it).
fn read_clients(proc_root: &Path, fds: &mut Vec<(u32, OsString)>) -> Vec<DrmClient> {
    let mut seen = HashSet::new();
    let mut clients = Vec::new();
    fds.retain(|(pid, fd)| {
        let path = proc_root.join(pid.to_string()).join("fdinfo").join(fd);
        let Some(text) = read_fdinfo(&path) else {
            return false;
        };
        let info = parse_fdinfo(&text);
        let key = info.client_id.map(|id| (info.pdev.clone(), id));
        let duplicate = key.is_some_and(|key| !seen.insert(key));
        if info.driver.as_deref() == Some("amdgpu") && !duplicate {
            clients.push(DrmClient { pid: *pid, info });
        }
        true
    });
    clients
}

fn read_fdinfo(path: &Path) -> Option<String> {
    let mut bytes = Vec::new();
    File::open(path)
        .ok()?
        .take(MAX_FDINFO_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Engine time of each client at the previous scan, to turn counters into shares.
#[derive(Debug, Default)]
pub(crate) struct EngineClock {
    previous: HashMap<(String, u64), (u64, Instant)>,
}

impl EngineClock {
    /// Rows per (card, pid) for `clients` scanned at `now`; engine shares need a previous scan.
    pub(crate) fn usage(
        &mut self,
        clients: &[DrmClient],
        now: Instant,
    ) -> BTreeMap<String, Vec<ProcessUse>> {
        let mut current = HashMap::new();
        let mut rows: BTreeMap<(String, u32), Vec<ClientShare>> = BTreeMap::new();
        for client in clients {
            let Some(pdev) = client.info.pdev.clone() else {
                continue;
            };
            let share = self.share(&client.info, &pdev, now, &mut current);
            rows.entry((pdev, client.pid)).or_default().push(share);
        }
        self.previous = current;
        let mut by_card: BTreeMap<String, Vec<ProcessUse>> = BTreeMap::new();
        for ((pdev, pid), shares) in rows {
            by_card
                .entry(pdev)
                .or_default()
                .push(sum_shares(pid, &shares));
        }
        by_card
    }

    fn share(
        &self,
        info: &DrmClientInfo,
        pdev: &str,
        now: Instant,
        current: &mut HashMap<(String, u64), (u64, Instant)>,
    ) -> ClientShare {
        let busy = engine_ns(info);
        let mut percent = None;
        if let (Some(id), Some(busy)) = (info.client_id, busy) {
            let key = (pdev.to_string(), id);
            if let Some((before, at)) = self.previous.get(&key) {
                let wall = now.saturating_duration_since(*at).as_nanos();
                // A counter that went back is a new client under a reused id: no share yet.
                if wall > 0 && busy >= *before {
                    let share = u128::from(busy - before) * 100 / wall;
                    percent = Some(share.min(100) as u32);
                }
            }
            current.insert(key, (busy, now));
        }
        ClientShare {
            vram: info.vram_bytes,
            gtt: info.gtt_bytes,
            percent,
        }
    }
}

struct ClientShare {
    vram: Option<u64>,
    gtt: Option<u64>,
    percent: Option<u32>,
}

/// gfx + compute busy time, each divided by its engine count; `None` when neither parses.
fn engine_ns(info: &DrmClientInfo) -> Option<u64> {
    let per_engine =
        |ns: Option<u64>, capacity: Option<u64>| ns.map(|ns| ns / capacity.unwrap_or(1).max(1));
    match (info.gfx_ns, info.compute_ns) {
        (None, None) => None,
        (gfx, compute) => Some(
            per_engine(gfx, info.gfx_capacity).unwrap_or(0)
                + per_engine(compute, info.compute_capacity).unwrap_or(0),
        ),
    }
}

/// A process's row: sums over its clients, `None` where any client's value is unknown (a
/// partial sum would be too low without saying so).
fn sum_shares(pid: u32, shares: &[ClientShare]) -> ProcessUse {
    let sum = |f: fn(&ClientShare) -> Option<u64>| {
        shares
            .iter()
            .try_fold(0u64, |acc, s| Some(acc.saturating_add(f(s)?)))
    };
    ProcessUse {
        pid,
        vram_bytes: sum(|s| s.vram),
        gtt_bytes: sum(|s| s.gtt),
        engine_percent: sum(|s| s.percent.map(u64::from)).map(|p| p.min(100) as u32),
    }
}
