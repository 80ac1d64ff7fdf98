//! One GPU as seen at one sample, and the driver it was read through.

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
    /// The library file that was tried.
    pub library: String,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub nvml_version: Option<String>,
    pub gpu_count: Option<u32>,
}

/// Every figure of one GPU at one sample. Fields the device does not report are `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GpuSample {
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub bus_id: Option<String>,
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
    /// Names of the active throttle reasons (e.g. "sw_power_cap", "hw_thermal_slowdown").
    pub throttle_reasons: Option<Vec<String>>,
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
}

impl GpuSample {
    /// Memory used as a fraction of total, when both are known.
    pub fn memory_fraction(&self) -> Option<f64> {
        match (self.memory_used_bytes, self.memory_total_bytes) {
            (Some(used), Some(total)) if total > 0 => Some(used as f64 / total as f64),
            _ => None,
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
