//! `gpu-lost`, `gpu-unresponsive` and `driver-missing`: the GPUs and the driver themselves,
//! all critical, all from the current snapshot alone (so `--once` sees them).
//!
//! - `gpu-lost`: the driver reported the GPU as lost (fallen off the bus).
//! - `gpu-unresponsive`: the driver has not answered for the GPU for longer than
//!   `unresponsive_seconds` (its figures are the last ones read, or none). A GPU stale for less
//!   stays quiet: one slow reading is not a failure.
//! - `driver-missing`: `/dev/nvidia*` device nodes exist, so a driver was installed, but the
//!   GPU library could not be loaded. A machine without the nodes has no NVIDIA GPU to miss.

use serde::{Deserialize, Serialize};

use crate::config::Seconds;
use crate::model::{GpuSample, GpuState, GpuVendor, Severity, Snapshot, Subject, Warning};

use super::{fmt_opt, fmt_seconds, warning, Inputs};

/// `gpu-lost`, `gpu-unresponsive` and `driver-missing`: the GPUs and the driver themselves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct HealthConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// A GPU the driver has not answered for this long is unresponsive. Default 10.
    pub(crate) unresponsive_seconds: Seconds,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            enabled: true,
            unresponsive_seconds: Seconds::new(10.0),
        }
    }
}

pub(crate) const LOST: &str = "gpu-lost";
pub(crate) const UNRESPONSIVE: &str = "gpu-unresponsive";
pub(crate) const DRIVER_MISSING: &str = "driver-missing";

const LOST_REMEDY: &str = "The GPU fell off the bus (Xid 79 or 74 in the kernel log: dmesg | grep \
-i xid). Jobs on it cannot recover: stop them, then reset the GPU (nvidia-smi -r -i N) or reboot. \
If it happens again, check power, cooling and the PCIe seating, and have the GPU replaced.";

const UNRESPONSIVE_REMEDY: &str = "The driver has stopped answering for this GPU, which usually \
means a hung GPU or driver. Look in the kernel log (dmesg | grep -i -e xid -e nvrm); try \
nvidia-smi -q -i N (if it hangs too, the driver is stuck); stop the jobs on the GPU, reset it \
(nvidia-smi -r -i N) or reboot.";

/// [`LOST_REMEDY`] and [`UNRESPONSIVE_REMEDY`] for an AMD GPU, with ROCm's tools.
const LOST_REMEDY_AMD: &str = "The GPU fell off the bus (the kernel log says why: dmesg | grep -i \
amdgpu). Jobs on it cannot recover: stop them, then reset the GPU (amd-smi reset --gpureset -g N) \
or reboot. If it happens again, check power, cooling and the PCIe seating, and have the GPU \
replaced.";

const UNRESPONSIVE_REMEDY_AMD: &str = "The driver has stopped answering for this GPU, which \
usually means a hung GPU or driver (a ring timeout or a GPU reset in the kernel log: dmesg | grep \
-i amdgpu); try amd-smi metric -g N (if it hangs too, the driver is stuck); stop the jobs on the \
GPU, reset it (amd-smi reset --gpureset -g N) or reboot.";

const DRIVER_REMEDY: &str = "The NVIDIA device nodes exist but the driver library cannot be \
used: check that the kernel module is loaded (lsmod | grep nvidia, dmesg | grep -i nvrm), that \
libnvidia-ml.so.1 matches the kernel module's version (a driver upgrade without a reboot breaks \
this), and that nvidia-smi works; reinstall the driver or reboot.";

pub(crate) fn check(inputs: &Inputs, config: &HealthConfig) -> Vec<Warning> {
    let snapshot = inputs.snapshot;
    let mut found: Vec<Warning> = snapshot
        .gpus
        .iter()
        .filter_map(|gpu| gpu_health(gpu, config))
        .collect();
    found.extend(driver_missing(snapshot));
    found
}

fn gpu_health(gpu: &GpuSample, config: &HealthConfig) -> Option<Warning> {
    if gpu.state == GpuState::Ok {
        // Nothing worded for a healthy GPU: a tick of healthy GPUs allocates nothing here.
        return None;
    }
    let reason = fmt_opt(gpu.error.as_deref());
    let named = named(gpu);
    match gpu.state {
        GpuState::Ok => None,
        GpuState::Lost => Some(warning(
            LOST,
            Severity::Critical,
            Subject::Gpu { index: gpu.index },
            format!("{named} is lost: the driver reports it fell off the bus"),
            vec![
                ("gpu", gpu.index.to_string()),
                ("bus id", fmt_opt(gpu.bus_id.as_deref())),
                ("driver says", reason),
            ],
            by_vendor(gpu, LOST_REMEDY, LOST_REMEDY_AMD),
        )),
        GpuState::Stale => {
            let stale = gpu.stale_seconds?;
            if stale < config.unresponsive_seconds.get() {
                return None;
            }
            Some(warning(
                UNRESPONSIVE,
                Severity::Critical,
                Subject::Gpu { index: gpu.index },
                format!(
                    "{named} has had no answer from the driver in {}; {}",
                    fmt_seconds(stale),
                    if gpu.name.is_some() || gpu.memory_total_bytes.is_some() {
                        "its figures on screen are the last ones read"
                    } else {
                        "no figure of it has been read yet"
                    }
                ),
                vec![
                    ("gpu", gpu.index.to_string()),
                    ("stale", fmt_seconds(stale)),
                    ("threshold", fmt_seconds(config.unresponsive_seconds.get())),
                    ("driver says", reason),
                ],
                by_vendor(gpu, UNRESPONSIVE_REMEDY, UNRESPONSIVE_REMEDY_AMD),
            ))
        }
    }
}

/// "GPU 1 (NVIDIA H100 ...)", or "GPU 1" while its name is not known: no "(N/A)" in a sentence.
fn named(gpu: &GpuSample) -> String {
    match gpu.name.as_deref() {
        Some(name) => format!("GPU {} ({name})", gpu.index),
        None => format!("GPU {}", gpu.index),
    }
}

/// The remedy that names the GPU's own vendor's tools.
fn by_vendor(gpu: &GpuSample, nvidia: &'static str, amd: &'static str) -> &'static str {
    match gpu.vendor {
        GpuVendor::Nvidia => nvidia,
        GpuVendor::Amd => amd,
    }
}

fn driver_missing(snapshot: &Snapshot) -> Option<Warning> {
    let driver = &snapshot.driver;
    if driver.nvml_loaded || snapshot.nvidia_devices.is_empty() {
        return None;
    }
    let why = fmt_opt(driver.error.as_deref());
    Some(warning(
        DRIVER_MISSING,
        Severity::Critical,
        Subject::Host,
        format!(
            "NVIDIA device nodes exist ({}) but the GPU library {} could not be used: {why}",
            snapshot.nvidia_devices.join(", "),
            driver.library
        ),
        vec![
            ("device nodes", snapshot.nvidia_devices.join(", ")),
            ("library", driver.library.to_string()),
            ("error", why),
        ],
        DRIVER_REMEDY,
    ))
}

#[cfg(test)]
mod tests {
    use crate::model::{GpuState, GpuVendor, Severity, Subject};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    #[test]
    fn a_lost_gpu_is_critical_at_once() {
        let warnings = replay_default(0, |step| {
            let mut snap = at(step);
            let mut g = gpu(1, 0, 80 * GIB, 0);
            g.state = GpuState::Lost;
            g.error = Some("GPU is lost".into());
            snap.gpus = vec![gpu(0, GIB, 80 * GIB, 50), g];
            snap
        });
        let w = find(&warnings, "gpu-lost", &Subject::Gpu { index: 1 });
        assert_eq!(w.severity, Severity::Critical);
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
    }

    #[test]
    fn a_lost_or_hung_amd_gpu_gets_rocm_s_tools_in_its_remedy() {
        let warnings = replay_default(0, |step| {
            let mut snap = at(step);
            let mut lost = gpu(0, 0, 80 * GIB, 0);
            lost.state = GpuState::Lost;
            let mut hung = gpu(1, GIB, 80 * GIB, 50);
            hung.state = GpuState::Stale;
            hung.stale_seconds = Some(30.0);
            let mut nvidia_lost = gpu(2, 0, 80 * GIB, 0);
            nvidia_lost.state = GpuState::Lost;
            lost.vendor = GpuVendor::Amd;
            hung.vendor = GpuVendor::Amd;
            snap.gpus = vec![lost, hung, nvidia_lost];
            snap
        });
        for (id, index) in [("gpu-lost", 0), ("gpu-unresponsive", 1)] {
            let remedy = &find(&warnings, id, &Subject::Gpu { index }).remedy;
            assert!(remedy.contains("amd-smi reset --gpureset"), "{remedy}");
            assert!(!remedy.contains("nvidia"), "{remedy}");
        }
        let remedy = &find(&warnings, "gpu-lost", &Subject::Gpu { index: 2 }).remedy;
        assert!(remedy.contains("nvidia-smi -r"), "{remedy}");
    }

    #[test]
    fn a_gpu_stale_past_the_threshold_is_unresponsive_and_not_before() {
        let stale = |seconds: f64| {
            move |step: u32| {
                let mut snap = at(step);
                let mut g = gpu(0, GIB, 80 * GIB, 50);
                g.state = GpuState::Stale;
                g.stale_seconds = Some(seconds);
                snap.gpus = vec![g];
                snap
            }
        };
        assert!(replay_default(0, stale(3.0)).is_empty());
        let warnings = replay_default(0, stale(12.0));
        let w = find(&warnings, "gpu-unresponsive", &Subject::Gpu { index: 0 });
        assert_eq!(w.severity, Severity::Critical);
        assert_eq!(
            w.message,
            "GPU 0 (Test GPU) has had no answer from the driver in 12 s; its figures on screen are \
             the last ones read"
        );
        let never_read = replay_default(0, |step| {
            let mut snap = stale(12.0)(step);
            snap.gpus[0].name = None;
            snap.gpus[0].memory_total_bytes = None;
            snap
        });
        let w = find(&never_read, "gpu-unresponsive", &Subject::Gpu { index: 0 });
        assert_eq!(
            w.message,
            "GPU 0 has had no answer from the driver in 12 s; no figure of it has been read yet"
        );
        let mut config = RulesConfig::default();
        config.health.unresponsive_seconds = crate::config::Seconds::new(2.0);
        assert_eq!(replay(config, 0, stale(3.0)).len(), 1);
    }

    #[test]
    fn device_nodes_without_a_library_mean_a_missing_driver() {
        let broken = |nodes: Vec<String>| {
            move |step: u32| {
                let mut snap = at(step);
                snap.driver.nvml_loaded = false;
                snap.driver.library = "libnvidia-ml.so.1".into();
                snap.driver.error = Some("cannot open shared object file".into());
                snap.nvidia_devices = nodes.clone();
                snap
            }
        };
        assert!(replay_default(0, broken(vec![])).is_empty());
        let warnings = replay_default(0, broken(vec!["nvidia0".into(), "nvidiactl".into()]));
        let w = find(&warnings, "driver-missing", &Subject::Host);
        assert!(w.message.contains("nvidia0, nvidiactl"), "{}", w.message);
        assert_eq!(w.severity, Severity::Critical);
    }
}
