//! `wrong-gpu`: a process holds memory on a GPU its own CUDA_VISIBLE_DEVICES does not list.
//!
//! Usually a library that ignores the variable, a process that picks `cuda:N` from a global
//! rank instead of the local one, or a child started with another environment: it takes memory
//! (and often compute) from whoever owns that GPU. The variable is read as the process was
//! launched (/proc/PID/environ), so a script that changes it in `os.environ` before importing
//! torch is judged on the launch value. Left alone: an unset, empty or `-1` variable, and lists
//! with MIG instances or anything else that is neither an index nor a `GPU-` UUID.
//!
//! An index entry is CUDA's number, and CUDA numbers devices fastest first unless
//! CUDA_DEVICE_ORDER=PCI_BUS_ID, while NVML numbers them by PCI bus: the two agree only when
//! every GPU is the same model. So index entries are judged only on a machine of one model
//! (every GPU with the same name); `GPU-` UUID entries always.

use serde::{Deserialize, Serialize};

use crate::config::NonNegative;
use crate::model::{GpuProcess, GpuSample, Severity, Subject, Warning};

use super::{fmt_bytes, warning, Inputs, BYTES_PER_MIB};

/// `wrong-gpu`: a process holds memory on a GPU its CUDA_VISIBLE_DEVICES does not list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct WrongGpuConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The least memory that counts, in MiB. Default 64.
    pub(crate) min_memory_mib: NonNegative,
}

impl Default for WrongGpuConfig {
    fn default() -> Self {
        WrongGpuConfig {
            enabled: true,
            min_memory_mib: NonNegative::new(64.0),
        }
    }
}

pub(crate) const ID: &str = "wrong-gpu";

const REMEDY: &str = "Make the process use only the GPUs it was given: take the device from \
LOCAL_RANK (torch.cuda.set_device(int(os.environ['LOCAL_RANK']))), not from the global RANK; use \
cuda:0 .. cuda:N-1 as numbered inside CUDA_VISIBLE_DEVICES; and check that libraries and child \
processes it starts inherit the variable. Until then it takes memory from that GPU's owner.";

pub(crate) fn check(inputs: &Inputs, config: &WrongGpuConfig) -> Vec<Warning> {
    let gpus = &inputs.snapshot.gpus;
    inputs
        .snapshot
        .processes
        .iter()
        .filter_map(|p| outside(p, gpus, config))
        .collect()
}

fn outside(process: &GpuProcess, gpus: &[GpuSample], config: &WrongGpuConfig) -> Option<Warning> {
    let memory = process.gpu_memory_bytes?;
    if !process.visible || (memory as f64) < config.min_memory_mib.get() * BYTES_PER_MIB {
        return None;
    }
    // AMD GPUs are numbered by ROCm's own variables (see model::rocm_visible), not NVML's.
    if (gpus.iter()).any(|g| g.index == process.gpu && g.vendor == crate::model::GpuVendor::Amd) {
        return None;
    }
    let list = process.env.as_ref()?.cuda_visible_devices.as_deref()?;
    let entries: Vec<&str> = list.split(',').map(str::trim).collect();
    let judgeable = entries
        .iter()
        .all(|e| e.parse::<u32>().is_ok() || (e.starts_with("GPU-") && e.len() >= 5));
    if list.trim().is_empty() || !judgeable {
        return None;
    }
    let uuid = gpus
        .iter()
        .find(|g| g.index == process.gpu)
        .and_then(|g| g.uuid.as_deref());
    // Without the GPU's UUID a UUID entry cannot be ruled out.
    if uuid.is_none() && entries.iter().any(|e| e.starts_with("GPU-")) {
        return None;
    }
    // Nor can an index entry where CUDA's order may differ from NVML's.
    if !orders_agree(gpus) && entries.iter().any(|e| e.parse::<u32>().is_ok()) {
        return None;
    }
    let listed = entries.iter().any(|e| {
        e.parse::<u32>().ok() == Some(process.gpu) || uuid.is_some_and(|u| u.starts_with(e))
    });
    if listed {
        return None;
    }
    let shown = crate::format::escape(list);
    Some(warning(
        ID,
        Severity::Warn,
        Subject::Process { pid: process.pid },
        format!(
            "pid {} holds {} on GPU {} but its CUDA_VISIBLE_DEVICES is {shown}",
            process.pid,
            fmt_bytes(memory as f64),
            process.gpu
        ),
        vec![
            ("gpu", process.gpu.to_string()),
            ("gpu memory", fmt_bytes(memory as f64)),
            ("CUDA_VISIBLE_DEVICES", shown.into_owned()),
        ],
        REMEDY,
    ))
}

/// Whether CUDA's default order (fastest first) is NVML's (PCI bus): so when every GPU is the
/// same model, named alike.
fn orders_agree(gpus: &[GpuSample]) -> bool {
    let first = gpus.first().and_then(|g| g.name.as_deref());
    first.is_some() && gpus.iter().all(|g| g.name.as_deref() == first)
}

#[cfg(test)]
mod tests {
    use crate::model::{LaunchEnv, Snapshot, Subject};
    use crate::rules::testkit::*;

    fn on_gpu(gpu_index: u32, visible: Option<&'static str>) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            for i in 0..4 {
                let mut g = gpu(i, GIB, 80 * GIB, 50);
                g.uuid = Some(format!("GPU-0000000{i}-aaaa").into());
                snap.gpus.push(g);
            }
            let mut p = process(9, gpu_index, 2 * GIB);
            p.env = Some(
                LaunchEnv {
                    cuda_visible_devices: visible.map(str::to_string),
                    ..Default::default()
                }
                .into(),
            );
            snap.processes = vec![p];
            snap
        }
    }

    #[test]
    fn memory_on_a_gpu_outside_the_list_warns() {
        let warnings = replay_default(0, on_gpu(3, Some("0,1")));
        let w = find(&warnings, "wrong-gpu", &Subject::Process { pid: 9 });
        assert!(w.message.contains("GPU 3"), "{}", w.message);
        assert!(w.remedy.contains("LOCAL_RANK"));
        let by_uuid = replay_default(0, on_gpu(3, Some("GPU-00000001")));
        assert_eq!(with_id(&by_uuid, "wrong-gpu").len(), 1);
    }

    #[test]
    fn listed_unset_empty_and_mig_lists_stay_quiet() {
        for visible in [
            Some("2,3"),
            Some("GPU-00000003"),
            None,
            Some(""),
            Some("-1"),
            Some("MIG-1234abcd"),
        ] {
            let warnings = replay_default(0, on_gpu(3, visible));
            assert!(
                with_id(&warnings, "wrong-gpu").is_empty(),
                "{visible:?}: {warnings:#?}"
            );
        }
    }

    /// A review: CUDA numbers devices fastest first by default, NVML by PCI bus. With an RTX
    /// A2000 as NVML's GPU 0 and an RTX 6000 Ada as GPU 1, CUDA_VISIBLE_DEVICES=0 is the Ada,
    /// and a process there was warned of being on a GPU it was not given.
    #[test]
    fn index_entries_are_not_judged_on_a_machine_of_mixed_models() {
        let mixed = |visible: &'static str| {
            move |step| {
                let mut snap = on_gpu(1, Some(visible))(step);
                snap.gpus.truncate(2);
                snap.gpus[0].name = Some("NVIDIA RTX A2000".into());
                snap.gpus[1].name = Some("NVIDIA RTX 6000 Ada Generation".into());
                snap
            }
        };
        let by_index = replay_default(0, mixed("0"));
        assert!(with_id(&by_index, "wrong-gpu").is_empty(), "{by_index:#?}");
        let by_uuid = replay_default(0, mixed("GPU-00000000"));
        find(&by_uuid, "wrong-gpu", &Subject::Process { pid: 9 });
    }
}
