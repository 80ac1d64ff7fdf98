//! MIG instances as series: each MIG device's memory, and each process's memory on the MIG
//! device it runs on, labelled with the parent GPU and the GPU and compute instance ids.
//!
//! The instance labels take dcgm-exporter's names (`GPU_I_ID`, `GPU_I_PROFILE`), so that a
//! query written for DCGM's MIG series can be pointed at these. The families are torchtop's
//! own: a GPU's `DCGM_FI_DEV_FB_USED` stays the whole GPU's, and nothing is counted twice in
//! a sum over the GPU's series. Only GPUs whose figures are current are exported.

use crate::model::{GpuSample, GpuState, MigDevice, Snapshot};

use super::exposition::{Family, Labels, Value};
use super::torchtop::process_labels;

/// The profile in a MIG device's name ("NVIDIA A100-SXM4-80GB MIG 3g.40gb" → "3g.40gb").
fn profile(name: &str) -> Option<&str> {
    name.rsplit_once(" MIG ")
        .map(|(_, profile)| profile.trim())
        .filter(|p| !p.is_empty() && p.len() <= 32)
}

/// The labels of one MIG device: its parent GPU, then its instance ids and profile.
fn mig_labels(gpu: &GpuSample, mig: &MigDevice) -> Labels {
    let mut labels: Labels = vec![("gpu", gpu.index.to_string())];
    if let Some(uuid) = &gpu.uuid {
        labels.push(("UUID", uuid.to_string()));
    }
    labels.push(("mig_index", mig.index.to_string()));
    if let Some(id) = mig.gpu_instance_id {
        labels.push(("GPU_I_ID", id.to_string()));
    }
    if let Some(id) = mig.compute_instance_id {
        labels.push(("compute_instance_id", id.to_string()));
    }
    if let Some(profile) = mig.name.as_deref().and_then(profile) {
        labels.push(("GPU_I_PROFILE", profile.to_string()));
    }
    if let Some(uuid) = &mig.uuid {
        labels.push(("mig_uuid", uuid.clone()));
    }
    labels
}

/// The MIG families of `snapshot`.
pub(crate) fn families(snapshot: &Snapshot, hostname: &str) -> Vec<Family> {
    let mut used = Family::gauge(
        "torchtop_mig_memory_used_bytes",
        "Memory used on one MIG device, as NVML reports it for the device.",
    );
    let mut total = Family::gauge(
        "torchtop_mig_memory_total_bytes",
        "Memory of one MIG device, as NVML reports it for the device.",
    );
    let mut process_memory = Family::gauge(
        "torchtop_mig_process_gpu_memory_bytes",
        "GPU memory a process holds on the MIG device it runs on.",
    );
    let current = snapshot
        .gpus
        .iter()
        .filter(|g| g.state == GpuState::Ok && g.mig_enabled == Some(true));
    for gpu in current {
        for mig in &gpu.mig_devices {
            let mut labels = mig_labels(gpu, mig);
            labels.push(("Hostname", hostname.to_string()));
            used.push(labels.clone(), mig.memory_used_bytes.map(Value::Int));
            total.push(labels, mig.memory_total_bytes.map(Value::Int));
            for &pid in &mig.pids {
                // The row holds the process's memory on the whole GPU: on one MIG device that
                // is its memory there; split over several, the share of each is not known.
                let devices = gpu.mig_devices.iter().filter(|m| m.pids.contains(&pid));
                if devices.count() > 1 {
                    continue;
                }
                let Some(row) = snapshot
                    .processes
                    .iter()
                    .find(|p| p.pid == pid && p.gpu == gpu.index)
                else {
                    continue;
                };
                let mut labels = process_labels(row, hostname);
                labels.extend(mig_labels(gpu, mig));
                process_memory.push(labels, row.gpu_memory_bytes.map(Value::Int));
            }
        }
    }
    vec![used, total, process_memory]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuProcess, ProcessKind};

    fn snapshot(state: GpuState) -> Snapshot {
        let mig = |index: u32, gi: u32, profile: &str, used: u64, pid: u32| MigDevice {
            index,
            gpu_instance_id: Some(gi),
            compute_instance_id: Some(0),
            name: Some(format!("NVIDIA A100-SXM4-80GB MIG {profile}")),
            uuid: Some(format!("MIG-{gi}")),
            memory_used_bytes: Some(used),
            memory_total_bytes: Some(used * 2),
            pids: vec![pid],
        };
        let gpu = GpuSample {
            index: 0,
            uuid: Some("GPU-a100".into()),
            state,
            mig_enabled: Some(true),
            mig_devices: vec![
                mig(0, 1, "3g.40gb", 2048, 10),
                mig(1, 5, "2g.20gb", 1024, 11),
            ],
            ..Default::default()
        };
        let mut row = GpuProcess::new(10, 0, ProcessKind::Compute);
        row.gpu_memory_bytes = Some(1000);
        Snapshot {
            gpus: vec![gpu],
            processes: vec![row],
            ..Default::default()
        }
    }

    fn text(families: Vec<Family>) -> String {
        super::super::exposition::encode(families, super::super::exposition::Format::Prometheus)
    }

    #[test]
    fn each_mig_device_and_its_processes_are_series_with_instance_labels() {
        let out = text(families(&snapshot(GpuState::Ok), "node1"));
        assert!(
            out.contains(
                "torchtop_mig_memory_used_bytes{gpu=\"0\",UUID=\"GPU-a100\",mig_index=\"0\",\
             GPU_I_ID=\"1\",compute_instance_id=\"0\",GPU_I_PROFILE=\"3g.40gb\",\
             mig_uuid=\"MIG-1\",Hostname=\"node1\"} 2048\n"
            ),
            "{out}"
        );
        assert!(out.contains("GPU_I_ID=\"5\",compute_instance_id=\"0\",GPU_I_PROFILE=\"2g.20gb\""));
        assert!(out.contains("torchtop_mig_memory_total_bytes{"));
        // pid 10 has a row; pid 11 has none (not visible in this refresh): no series is made up.
        assert!(
            out.contains(
                "torchtop_mig_process_gpu_memory_bytes{Hostname=\"node1\",pid=\"10\",gpu=\"0\","
            ),
            "{out}"
        );
        assert!(!out.contains("pid=\"11\""), "{out}");
    }

    /// A process on two MIG devices of one GPU: its row's figure (the whole GPU) was exported
    /// as its memory on each, more than one instance holds.
    #[test]
    fn a_process_on_two_mig_devices_gets_no_made_up_share() {
        let mut both = snapshot(GpuState::Ok);
        both.gpus[0].mig_devices[1].pids = vec![10];
        let out = text(families(&both, "node1"));
        assert!(
            !out.contains("torchtop_mig_process_gpu_memory_bytes{"),
            "{out}"
        );
        assert!(out.contains("torchtop_mig_memory_used_bytes{"), "{out}");
    }

    #[test]
    fn a_stale_gpu_exports_no_mig_series() {
        let out = text(families(&snapshot(GpuState::Stale), "node1"));
        assert!(!out.contains("GPU_I_ID"), "{out}");
    }
}
