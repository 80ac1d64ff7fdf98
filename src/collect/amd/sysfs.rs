//! One amdgpu card's figures from sysfs: `/sys/class/drm/cardN/device` and its `hwmon/`.
//!
//! Every file is read with a size bound; a file that is missing, unreadable or malformed gives
//! `None` for its field, never a 0.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::model::{GpuSample, GpuVendor};

/// sysfs attributes are one page at most; `pp_dpm_*` tables are a few hundred bytes.
const MAX_SYSFS_BYTES: u64 = 4096;
/// At most this many `cardN` entries are looked at (a machine has a few dozen at most).
const MAX_CARDS: usize = 256;

/// An amdgpu card found under `<root>/sys/class/drm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AmdCard {
    /// `<root>/sys/class/drm/cardN/device`.
    pub(crate) device_dir: PathBuf,
    /// The PCI address ("0000:0c:00.0"), which fdinfo's `drm-pdev` names too.
    pub(crate) pdev: String,
}

/// Reads a small text file, at most [`MAX_SYSFS_BYTES`]; `None` when absent or not text.
pub(crate) fn read_small(path: &Path) -> Option<String> {
    let mut text = String::new();
    File::open(path)
        .ok()?
        .take(MAX_SYSFS_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

fn read_u64(path: &Path) -> Option<u64> {
    read_small(path)?.trim().parse().ok()
}

fn read_u32(path: &Path) -> Option<u32> {
    read_small(path)?.trim().parse().ok()
}

/// The amdgpu cards under `<root>/sys/class/drm`, sorted by PCI address (the order ROCm
/// numbers them in by default), each once even where a card has several DRM nodes.
pub(crate) fn find_cards(root: &Path) -> Vec<AmdCard> {
    let drm = root.join("sys/class/drm");
    let Ok(entries) = std::fs::read_dir(&drm) else {
        return Vec::new();
    };
    let mut cards: Vec<AmdCard> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| is_card_name(name))
        .take(MAX_CARDS)
        .filter_map(|name| amd_card(&drm.join(name).join("device")))
        .collect();
    cards.sort_by(|a, b| a.pdev.cmp(&b.pdev));
    cards.dedup_by(|a, b| a.pdev == b.pdev);
    cards
}

/// `card0`, `card12`; not the connectors (`card0-DP-1`) nor render nodes.
fn is_card_name(name: &str) -> bool {
    name.strip_prefix("card")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The card behind `device_dir` if its driver is amdgpu.
fn amd_card(device_dir: &Path) -> Option<AmdCard> {
    let driver = std::fs::read_link(device_dir.join("driver")).ok()?;
    if driver.file_name()? != "amdgpu" {
        return None;
    }
    Some(AmdCard {
        pdev: pci_address(device_dir)?,
        device_dir: device_dir.to_path_buf(),
    })
}

/// The PCI address: the name the `device` link points at, else `PCI_SLOT_NAME` in `uevent`.
fn pci_address(device_dir: &Path) -> Option<String> {
    if let Ok(target) = std::fs::read_link(device_dir) {
        if let Some(name) = target.file_name().and_then(|n| n.to_str()) {
            return Some(name.to_string());
        }
    }
    let uevent = read_small(&device_dir.join("uevent"))?;
    uevent
        .lines()
        .find_map(|line| line.strip_prefix("PCI_SLOT_NAME="))
        .map(|slot| slot.trim().to_string())
}

/// What never changes for a card: name, unique id, totals.
#[derive(Debug, Clone, Default)]
pub(crate) struct FixedFields {
    pub(crate) name: Option<Arc<str>>,
    pub(crate) uuid: Option<Arc<str>>,
}

pub(crate) fn read_fixed(card: &AmdCard) -> FixedFields {
    let dir = &card.device_dir;
    let product = read_small(&dir.join("product_name"))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    // Consumer cards have no product_name: their PCI device id is still a real name.
    let name = product
        .or_else(|| read_small(&dir.join("device")).map(|id| format!("AMD GPU {}", id.trim())));
    // ROCR_VISIBLE_DEVICES accepts "GPU-<unique_id>", as rocminfo shows it.
    let uuid = read_small(&dir.join("unique_id"))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|id| format!("GPU-{id}"));
    FixedFields {
        name: name.map(Into::into),
        uuid: uuid.map(Into::into),
    }
}

/// Every figure sysfs gives for `card` now.
pub(crate) fn read_sample(card: &AmdCard, fixed: &FixedFields) -> GpuSample {
    let dir = &card.device_dir;
    let vram_total = read_u64(&dir.join("mem_info_vram_total"));
    let vram_used = read_u64(&dir.join("mem_info_vram_used"));
    let mut sample = GpuSample {
        vendor: GpuVendor::Amd,
        name: fixed.name.clone(),
        uuid: fixed.uuid.clone(),
        bus_id: Some(card.pdev.clone().into()),
        utilization_percent: read_u32(&dir.join("gpu_busy_percent")),
        memory_utilization_percent: read_u32(&dir.join("mem_busy_percent")),
        memory_total_bytes: vram_total,
        memory_used_bytes: vram_used,
        memory_free_bytes: vram_total.zip(vram_used).map(|(t, u)| t.saturating_sub(u)),
        gtt_total_bytes: read_u64(&dir.join("mem_info_gtt_total")),
        gtt_used_bytes: read_u64(&dir.join("mem_info_gtt_used")),
        sm_clock_mhz: read_small(&dir.join("pp_dpm_sclk")).and_then(|t| current_dpm_mhz(&t)),
        memory_clock_mhz: read_small(&dir.join("pp_dpm_mclk")).and_then(|t| current_dpm_mhz(&t)),
        ..Default::default()
    };
    if let Some(hwmon) = hwmon_dir(dir) {
        read_hwmon(&hwmon, &mut sample);
    }
    sample
}

/// The clock of the line marked `*` in a `pp_dpm_sclk`-style table ("1: 1200Mhz *").
pub(crate) fn current_dpm_mhz(table: &str) -> Option<u32> {
    let line = table.lines().find(|l| l.trim_end().ends_with('*'))?;
    let (_, rest) = line.split_once(':')?;
    let value = rest.trim().trim_end_matches('*').trim();
    let digits = value
        .strip_suffix("Mhz")
        .or_else(|| value.strip_suffix("MHz"))?;
    digits.trim().parse().ok()
}

/// The card's first `hwmon/hwmonN` directory.
fn hwmon_dir(device_dir: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(device_dir.join("hwmon")).ok()?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("hwmon"))
        .take(16)
        .collect();
    names.sort();
    names.first().map(|n| device_dir.join("hwmon").join(n))
}

fn read_hwmon(hwmon: &Path, sample: &mut GpuSample) {
    // temp1 is the edge sensor; MI200/MI300 have none and report the junction as temp2.
    let millidegrees =
        read_u64(&hwmon.join("temp1_input")).or_else(|| read_u64(&hwmon.join("temp2_input")));
    sample.temperature_c = millidegrees.and_then(|m| u32::try_from(m / 1000).ok());
    let microwatts =
        read_u64(&hwmon.join("power1_average")).or_else(|| read_u64(&hwmon.join("power1_input")));
    sample.power_w = microwatts.map(|uw| uw as f64 / 1e6);
    sample.power_limit_w = read_u64(&hwmon.join("power1_cap")).map(|uw| uw as f64 / 1e6);
    sample.fan_percent = read_u64(&hwmon.join("pwm1")).and_then(|pwm| {
        let max = read_u64(&hwmon.join("pwm1_max")).unwrap_or(255);
        (max > 0 && pwm <= max).then(|| ((pwm * 100 + max / 2) / max) as u32)
    });
}
