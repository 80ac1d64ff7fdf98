//! One GPU as seen at one sample, and the driver it was read through.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Whether a GPU's figures are current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum GpuState {
    /// The last reading is recent.
    #[default]
    Ok,
    /// The driver has not answered for this GPU lately; the figures shown are the last ones read.
    Stale,
    /// The driver reported the GPU as lost (fallen off the bus).
    Lost,
}

/// The NVML library and driver, or why they could not be used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct DriverInfo {
    pub nvml_loaded: bool,
    /// Why NVML is not usable, as a sentence; `None` when it is.
    pub error: Option<String>,
    /// The library file that was tried (shared with the sampler's copy, like the versions).
    pub library: Arc<str>,
    /// The versions are shared (`Arc`) with the collector's copy: the snapshot of each tick
    /// copies no text of them.
    pub driver_version: Option<Arc<str>>,
    pub cuda_version: Option<Arc<str>>,
    pub nvml_version: Option<Arc<str>>,
    pub gpu_count: Option<u32>,
    /// How many amdgpu cards the sysfs collector found; `None` where it found none.
    #[serde(default)]
    pub amd_gpu_count: Option<u32>,
    /// The libamd_smi library that was loaded, or why none was (it is optional).
    #[serde(default)]
    pub amd_smi: Option<Arc<str>>,
}

/// Who made the GPU, and so which driver it was read through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum GpuVendor {
    /// Read through NVML.
    #[default]
    Nvidia,
    /// Read from the amdgpu driver's sysfs files (and libamd_smi where present).
    Amd,
}

impl GpuVendor {
    /// The short label the GPU panel and the exporter use.
    pub fn label(self) -> &'static str {
        match self {
            GpuVendor::Nvidia => "nvidia",
            GpuVendor::Amd => "amd",
        }
    }
}

/// One MIG device (a compute instance inside a GPU instance) of a GPU in MIG mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MigDevice {
    /// Its position among the GPU's MIG devices (nvmlDeviceGetMigDeviceHandleByIndex).
    pub index: u32,
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    /// The processes running on this MIG device, as its own process list names them.
    pub pids: Vec<u32>,
}

/// Every figure of one GPU at one sample. Fields the device does not report are `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GpuSample {
    pub index: u32,
    /// Name, UUID and bus id never change: read once and shared by every sample (Arc), not
    /// copied into each.
    pub name: Option<Arc<str>>,
    pub uuid: Option<Arc<str>>,
    pub bus_id: Option<Arc<str>>,
    pub state: GpuState,
    /// Seconds since the last successful reading, when the state is not `ok`.
    pub stale_seconds: Option<f64>,
    /// What went wrong with the last reading, if anything.
    pub error: Option<String>,
    pub utilization_percent: Option<u32>,
    pub memory_utilization_percent: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    /// Free as NVML reports it: total minus used minus what the driver reserves.
    pub memory_free_bytes: Option<u64>,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub fan_percent: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    pub pcie_rx_kib_s: Option<u32>,
    pub pcie_tx_kib_s: Option<u32>,
    pub encoder_percent: Option<u32>,
    pub decoder_percent: Option<u32>,
    /// Performance state, 0 (P0, fastest) to 15.
    pub performance_state: Option<u32>,
    /// Raw clock-throttle-reason mask as NVML reports it.
    pub throttle_mask: Option<u64>,
    /// Names of the active throttle reasons (e.g. "sw_power_cap", "hw_thermal_slowdown");
    /// shared with the collector's cache of the last mask, so a tick does not copy them.
    pub throttle_reasons: Option<Arc<[String]>>,
    pub ecc_enabled: Option<bool>,
    pub ecc_volatile_corrected: Option<u64>,
    pub ecc_volatile_uncorrected: Option<u64>,
    /// Energy used since the driver was loaded, in millijoules (Volta and later).
    pub energy_millijoules: Option<u64>,
    /// Rows of memory remapped after correctable / uncorrectable errors (Ampere and later).
    pub remapped_rows_correctable: Option<u64>,
    pub remapped_rows_uncorrectable: Option<u64>,
    /// Whether a row remapping has failed (the GPU needs service).
    pub remapped_rows_failed: Option<bool>,
    /// The code of the last critical Xid error since torchtop began watching this GPU, 0 while
    /// there has been none (as dcgm-exporter reports it); `None` where the driver gives no Xid
    /// events.
    pub xid_last: Option<u64>,
    /// Critical Xid errors since torchtop began watching this GPU.
    pub xid_count: Option<u64>,
    /// Whether a row remapping waits for the next GPU reset (Ampere and later).
    #[serde(default)]
    pub remapped_rows_pending: Option<bool>,
    /// Whether retired pages wait for the next driver reload (before Ampere).
    #[serde(default)]
    pub retired_pages_pending: Option<bool>,
    /// Values the driver reported out of physical range, shown as null instead.
    #[serde(default)]
    pub implausible: Implausible,
    /// Which driver the figures came from.
    #[serde(default)]
    pub vendor: GpuVendor,
    /// AMD: the card's position among the AMD GPUs (by PCI address), which ROCm's
    /// HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES number; `None` for NVIDIA GPUs.
    #[serde(default)]
    pub vendor_index: Option<u32>,
    /// AMD: system memory mapped into the GPU's address space (GTT).
    #[serde(default)]
    pub gtt_used_bytes: Option<u64>,
    #[serde(default)]
    pub gtt_total_bytes: Option<u64>,
    /// NVIDIA: whether MIG mode is on (`None` where the GPU has no MIG).
    #[serde(default)]
    pub mig_enabled: Option<bool>,
    /// NVIDIA, MIG mode on: the GPU's MIG devices.
    #[serde(default)]
    pub mig_devices: Vec<MigDevice>,
}

/// Values from the driver that cannot be physical (a temperature of 4294967256 °C, a clock of
/// 4294967291 MHz, more memory used than the card has): each is replaced by null and counted
/// here, for one GPU, since torchtop started reading it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Implausible {
    /// How many values were dropped.
    pub count: u64,
    /// The fields they came in, each once, sorted.
    pub fields: Vec<String>,
}

impl Implausible {
    /// Counts the fields dropped in one reading.
    pub fn record(&mut self, fields: &[&str]) {
        self.count += fields.len() as u64;
        for field in fields {
            if let Err(at) = self.fields.binary_search_by(|f| f.as_str().cmp(field)) {
                self.fields.insert(at, (*field).to_string());
            }
        }
    }
}

/// The physical ranges beyond which a driver's value is taken as garbage. Generous: they are
/// there to catch wrapped integers and broken sensors, not to judge real hardware.
pub mod limits {
    /// GPUs shut down near 90-105 °C.
    pub const TEMPERATURE_C: u32 = 150;
    /// Memory clocks of GDDR6X cards read about 10,500 MHz; SM clocks stay near 3,000.
    pub const CLOCK_MHZ: u32 = 50_000;
    /// The largest GPU modules draw about 1.5 kW.
    pub const POWER_W: f64 = 10_000.0;
    /// PCIe 6.0 x16 carries about 128 GB/s each way; this is 1 TiB/s in KiB/s.
    pub const PCIE_KIB_S: u32 = 1 << 30;
    /// 16 TiB: far above any GPU's memory.
    pub const MEMORY_BYTES: u64 = 16 << 40;
}

/// Sets `value` to `None` when `plausible` says no, and adds the field's name to `dropped`.
fn keep_if<T>(
    value: &mut Option<T>,
    plausible: impl Fn(&T) -> bool,
    name: &'static str,
    dropped: &mut Vec<&'static str>,
) {
    if value.as_ref().is_some_and(|v| !plausible(v)) {
        *value = None;
        dropped.push(name);
    }
}

impl GpuSample {
    /// Replaces every out-of-range figure by `None`; returns the names of the fields dropped.
    pub fn drop_implausible(&mut self) -> Vec<&'static str> {
        use limits::{CLOCK_MHZ, MEMORY_BYTES, PCIE_KIB_S, POWER_W, TEMPERATURE_C};
        let mut dropped = Vec::new();
        let check = &mut dropped;
        let percent = |v: &u32| *v <= 100;
        keep_if(&mut self.utilization_percent, percent, "utilization", check);
        keep_if(
            &mut self.memory_utilization_percent,
            percent,
            "memory_utilization",
            check,
        );
        keep_if(&mut self.fan_percent, percent, "fan", check);
        keep_if(&mut self.encoder_percent, percent, "encoder", check);
        keep_if(&mut self.decoder_percent, percent, "decoder", check);
        keep_if(
            &mut self.temperature_c,
            |t| *t <= TEMPERATURE_C,
            "temperature",
            check,
        );
        keep_if(
            &mut self.sm_clock_mhz,
            |c| *c <= CLOCK_MHZ,
            "sm_clock",
            check,
        );
        keep_if(
            &mut self.memory_clock_mhz,
            |c| *c <= CLOCK_MHZ,
            "memory_clock",
            check,
        );
        let watts = |w: &f64| w.is_finite() && (0.0..=POWER_W).contains(w);
        keep_if(&mut self.power_w, watts, "power", check);
        keep_if(&mut self.power_limit_w, watts, "power_limit", check);
        keep_if(
            &mut self.pcie_rx_kib_s,
            |r| *r <= PCIE_KIB_S,
            "pcie_rx",
            check,
        );
        keep_if(
            &mut self.pcie_tx_kib_s,
            |r| *r <= PCIE_KIB_S,
            "pcie_tx",
            check,
        );
        let bytes = |b: &u64| *b <= MEMORY_BYTES;
        keep_if(&mut self.memory_total_bytes, bytes, "memory_total", check);
        let total = self.memory_total_bytes.unwrap_or(MEMORY_BYTES);
        keep_if(
            &mut self.memory_used_bytes,
            |b| *b <= total,
            "memory_used",
            check,
        );
        dropped
    }

    /// What a program can still allocate on this GPU: the driver's free figure, which leaves
    /// out what it reserves for itself (NVML's total is used + free + reserved). Total minus
    /// used only where the GPU reports no free figure (it overstates by that reserve).
    pub fn memory_headroom_bytes(&self) -> Option<u64> {
        self.memory_free_bytes.or_else(|| {
            let (total, used) = (self.memory_total_bytes?, self.memory_used_bytes?);
            Some(total.saturating_sub(used))
        })
    }

    /// Whether a process's GPU memory can be real on this GPU: no more than the GPU has.
    pub fn plausible_process_memory(&self, bytes: u64) -> bool {
        bytes <= self.memory_total_bytes.unwrap_or(limits::MEMORY_BYTES)
    }

    /// Memory used as a fraction of total, when both are known.
    pub fn memory_fraction(&self) -> Option<f64> {
        match (self.memory_used_bytes, self.memory_total_bytes) {
            (Some(used), Some(total)) if total > 0 => Some(used as f64 / total as f64),
            _ => None,
        }
    }

    /// The MIG device `pid` runs on, when it runs on exactly one of this GPU's (on several, no
    /// one of them is its place).
    pub fn mig_device_of(&self, pid: u32) -> Option<&MigDevice> {
        let mut on = self.mig_devices.iter().filter(|m| m.pids.contains(&pid));
        let first = on.next()?;
        on.next().is_none().then_some(first)
    }

    /// The memory a process's share is measured against: its MIG device's when it runs on one,
    /// as nvidia-smi and nvitop measure it, else the whole GPU's.
    pub fn memory_total_for(&self, pid: u32) -> Option<u64> {
        match self.mig_device_of(pid) {
            Some(mig) => mig.memory_total_bytes,
            None => self.memory_total_bytes,
        }
    }

    /// Power draw as a fraction of the limit, when both are known.
    pub fn power_fraction(&self) -> Option<f64> {
        match (self.power_w, self.power_limit_w) {
            (Some(p), Some(l)) if l > 0.0 => Some(p / l),
            _ => None,
        }
    }
}

/// What a program without a screen (`torchtop record`, `torchtop serve`) says on stderr when
/// NVML's state changes: why it cannot be used, or that it answers again; `None` while it stays
/// as `told` last had it. Without it, a recording or an exporter left running under systemd
/// held no GPU and never said so.
pub fn driver_news(told: &mut Option<String>, driver: &DriverInfo) -> Option<String> {
    if told.as_deref() == driver.error.as_deref() {
        return None;
    }
    let was_down = told.is_some();
    told.clone_from(&driver.error);
    match &driver.error {
        Some(error) => Some(format!("no GPU figures: {error}")),
        None if was_down => Some("NVML answers again; GPU figures resume".to_string()),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_news_is_told_once_a_change() {
        let mut told = None;
        let mut driver = DriverInfo::default();
        assert_eq!(
            driver_news(&mut told, &driver),
            None,
            "a driver that answers is no news"
        );
        driver.error = Some("cannot load libnvidia-ml.so.1".into());
        assert_eq!(
            driver_news(&mut told, &driver).as_deref(),
            Some("no GPU figures: cannot load libnvidia-ml.so.1")
        );
        assert_eq!(driver_news(&mut told, &driver), None, "told once");
        driver.error = None;
        assert_eq!(
            driver_news(&mut told, &driver).as_deref(),
            Some("NVML answers again; GPU figures resume")
        );
    }

    #[test]
    fn wrapped_integers_become_none_and_are_named() {
        let mut gpu = GpuSample {
            temperature_c: Some(4_294_967_256),
            sm_clock_mhz: Some(4_294_967_291),
            memory_clock_mhz: Some(10_501),
            utilization_percent: Some(87),
            memory_total_bytes: Some(1000 << 20),
            memory_used_bytes: Some(5 << 40),
            power_w: Some(412.5),
            ..Default::default()
        };
        let dropped = gpu.drop_implausible();
        assert_eq!(dropped, ["temperature", "sm_clock", "memory_used"]);
        assert_eq!(gpu.temperature_c, None);
        assert_eq!(gpu.sm_clock_mhz, None);
        assert_eq!(gpu.memory_used_bytes, None);
        assert_eq!(gpu.memory_clock_mhz, Some(10_501));
        assert_eq!(gpu.utilization_percent, Some(87));
        assert_eq!(gpu.power_w, Some(412.5));
        assert!(!gpu.plausible_process_memory(4 << 40));
        assert!(gpu.plausible_process_memory(300 << 20));
    }

    #[test]
    fn the_count_adds_up_and_names_each_field_once() {
        let mut implausible = Implausible::default();
        implausible.record(&["temperature", "sm_clock"]);
        implausible.record(&["temperature"]);
        assert_eq!(implausible.count, 3);
        assert_eq!(implausible.fields, ["sm_clock", "temperature"]);
    }
}
