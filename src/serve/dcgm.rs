//! The GPU families under dcgm-exporter's names, units and labels (its
//! `etc/default-counters.csv`), so DCGM dashboards work unchanged, and `torchtop_gpu_state`.
//!
//! Only GPUs whose figures are current are exported under DCGM names: a stale or lost GPU
//! exports its state alone, so Prometheus sees its series end instead of old figures as new.
//! dcgm-exporter declares some of these as counters whose names lack `_total`; they are
//! written here as gauges, because the text encoders append `_total` to every counter and the
//! names are what dashboards query.

use crate::model::{GpuSample, GpuState, GpuVendor, Snapshot};

use super::exposition::{Family, Labels, Value};

const MIB: u64 = 1 << 20;

/// The labels dcgm-exporter puts on every GPU series.
pub(crate) fn gpu_labels(gpu: &GpuSample, hostname: &str, driver: Option<&str>) -> Labels {
    let mut labels: Labels = vec![("gpu", gpu.index.to_string())];
    if let Some(uuid) = &gpu.uuid {
        labels.push(("UUID", uuid.to_string()));
    }
    if let Some(bus) = &gpu.bus_id {
        labels.push(("pci_bus_id", bus.to_string()));
    }
    match gpu.vendor {
        GpuVendor::Nvidia => labels.push(("device", format!("nvidia{}", gpu.index))),
        // AMD cards: numbered as ROCm numbers them, and marked, since DCGM has no such GPUs.
        GpuVendor::Amd => {
            let rocm = gpu.vendor_index.unwrap_or(gpu.index);
            labels.push(("device", format!("amd{rocm}")));
            labels.push(("vendor", "amd".to_string()));
        }
    }
    if let Some(name) = &gpu.name {
        labels.push(("modelName", name.to_string()));
    }
    labels.push(("Hostname", hostname.to_string()));
    // The version is NVIDIA's driver: an AMD card's series would claim it wrongly.
    if let Some(version) = driver.filter(|_| gpu.vendor == GpuVendor::Nvidia) {
        labels.push(("DCGM_FI_DRIVER_VERSION", version.to_string()));
    }
    labels
}

type Getter = fn(&GpuSample) -> Option<Value>;

fn int(value: Option<u32>) -> Option<Value> {
    value.map(|v| Value::Int(u64::from(v)))
}

fn mib(bytes: Option<u64>) -> Option<Value> {
    bytes.map(|b| Value::Int(b / MIB))
}

/// Name, help, and how to read it from a sample.
const FIELDS: [(&str, &str, Getter); 19] = [
    (
        "DCGM_FI_DEV_SM_CLOCK",
        "SM clock frequency (in MHz).",
        |g| int(g.sm_clock_mhz),
    ),
    (
        "DCGM_FI_DEV_MEM_CLOCK",
        "Memory clock frequency (in MHz).",
        |g| int(g.memory_clock_mhz),
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |g| {
        int(g.temperature_c)
    }),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |g| {
        g.power_w.map(Value::Float)
    }),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        |g| g.energy_millijoules.map(Value::Int),
    ),
    (
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "PCIe TX throughput (in KB/s) over NVML's last sampling window.",
        |g| int(g.pcie_tx_kib_s),
    ),
    (
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "PCIe RX throughput (in KB/s) over NVML's last sampling window.",
        |g| int(g.pcie_rx_kib_s),
    ),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |g| {
        int(g.utilization_percent)
    }),
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        |g| int(g.memory_utilization_percent),
    ),
    ("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", |g| {
        int(g.encoder_percent)
    }),
    ("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", |g| {
        int(g.decoder_percent)
    }),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        |g| mib(g.memory_free_bytes),
    ),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        |g| mib(g.memory_used_bytes),
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
        |g| g.ecc_volatile_corrected.map(Value::Int),
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        |g| g.ecc_volatile_uncorrected.map(Value::Int),
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors.",
        |g| g.remapped_rows_correctable.map(Value::Int),
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors.",
        |g| g.remapped_rows_uncorrectable.map(Value::Int),
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed.",
        |g| g.remapped_rows_failed.map(|f| Value::Int(u64::from(f))),
    ),
    (
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered.",
        |g| g.xid_last.map(Value::Int),
    ),
];

/// Every DCGM family and `torchtop_gpu_state`, for the GPUs of `snapshot`.
pub(crate) fn families(snapshot: &Snapshot, hostname: &str) -> Vec<Family> {
    let driver = snapshot.driver.driver_version.as_deref();
    let labelled: Vec<(&GpuSample, Labels)> = snapshot
        .gpus
        .iter()
        .map(|g| (g, gpu_labels(g, hostname, driver)))
        .collect();
    let mut out: Vec<Family> = FIELDS
        .iter()
        .map(|(name, help, get)| {
            let mut family = Family::gauge(name, help);
            for (gpu, labels) in labelled.iter().filter(|(g, _)| g.state == GpuState::Ok) {
                family.push(labels.clone(), get(gpu));
            }
            family
        })
        .collect();
    out.push(state_family(&labelled));
    out
}

/// One series per GPU and state, 1 for the GPU's state and 0 for the others.
fn state_family(labelled: &[(&GpuSample, Labels)]) -> Family {
    let mut family = Family::gauge(
        "torchtop_gpu_state",
        "Whether the GPU's figures are current (ok), late because the driver has not answered \
         (stale), or gone because the driver reports the GPU lost (lost); 1 for its state.",
    );
    for (gpu, labels) in labelled {
        for (state, name) in [
            (GpuState::Ok, "ok"),
            (GpuState::Stale, "stale"),
            (GpuState::Lost, "lost"),
        ] {
            let mut with_state = labels.clone();
            with_state.push(("state", name.to_string()));
            family.push(with_state, Some(Value::Int(u64::from(gpu.state == state))));
        }
    }
    family
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amd_cards_are_labelled_as_such_and_nvidia_ones_as_before() {
        let nvidia = GpuSample {
            index: 0,
            ..Default::default()
        };
        let amd = GpuSample {
            index: 1,
            vendor: GpuVendor::Amd,
            vendor_index: Some(0),
            ..Default::default()
        };
        let labels = |g| gpu_labels(g, "node", Some("550.54.15"));
        assert!(labels(&nvidia).contains(&("device", "nvidia0".to_string())));
        assert!(!labels(&nvidia).iter().any(|(k, _)| *k == "vendor"));
        assert!(labels(&amd).contains(&("device", "amd0".to_string())));
        assert!(labels(&amd).contains(&("vendor", "amd".to_string())));
        assert!(labels(&amd).contains(&("gpu", "1".to_string())));
        assert!(!labels(&amd)
            .iter()
            .any(|(k, _)| *k == "DCGM_FI_DRIVER_VERSION"));
        assert!(labels(&nvidia)
            .iter()
            .any(|(k, _)| *k == "DCGM_FI_DRIVER_VERSION"));
    }
}
