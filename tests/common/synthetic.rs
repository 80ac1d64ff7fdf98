//! Synthetic snapshots for the scrape benchmark: a node of `gpus` GPUs with `per_gpu` processes
//! on each, the first `agents` of them with allocator figures, ranks of one job.

use torchtop::model::{
    DeviceAllocatorStats, DriverInfo, GpuProcess, GpuSample, LaunchEnv, ProcessKind, Severity,
    Snapshot, Subject, TorchInfo, Warning,
};

pub struct NodeShape {
    pub gpus: u32,
    pub per_gpu: u32,
    pub agents: u32,
    /// The rank of this node's first agent, and the job's world size.
    pub first_rank: u32,
    pub world_size: u32,
    /// Step time of this node's ranks, and of the one rank that is slow (if any).
    pub step_time: f64,
    pub slow_rank: Option<u32>,
}

pub fn node_snapshot(hostname: &str, shape: &NodeShape) -> Snapshot {
    let mut snapshot = Snapshot::at(std::time::SystemTime::now());
    snapshot.driver = DriverInfo {
        nvml_loaded: true,
        driver_version: Some("550.54.15".into()),
        ..Default::default()
    };
    snapshot.host.hostname = Some(hostname.into());
    snapshot.host.memory.total_bytes = Some(2 << 40);
    snapshot.host.memory.available_bytes = Some(1 << 40);
    snapshot.host.memory.used_bytes = Some(1 << 40);
    snapshot.host.vm.swappiness = Some(60);
    for index in 0..shape.gpus {
        snapshot.gpus.push(GpuSample {
            index,
            name: Some("NVIDIA H100 80GB HBM3".into()),
            uuid: Some(format!("GPU-{hostname}-{index}").into()),
            bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index).into()),
            utilization_percent: Some(60 + index * 4),
            memory_utilization_percent: Some(30),
            memory_used_bytes: Some((40 + u64::from(index)) << 30),
            memory_total_bytes: Some(80 << 30),
            memory_free_bytes: Some((39 - u64::from(index)) << 30),
            temperature_c: Some(55 + index),
            power_w: Some(400.0 + f64::from(index)),
            sm_clock_mhz: Some(1755),
            memory_clock_mhz: Some(2619),
            pcie_rx_kib_s: Some(1000),
            pcie_tx_kib_s: Some(1000),
            encoder_percent: Some(0),
            decoder_percent: Some(0),
            ecc_volatile_corrected: Some(0),
            ecc_volatile_uncorrected: Some(0),
            energy_millijoules: Some(1_000_000),
            ..Default::default()
        });
    }
    let mut agents = 0;
    for gpu in 0..shape.gpus {
        for k in 0..shape.per_gpu {
            let pid = 10_000 + gpu * 100 + k;
            let mut process = GpuProcess::new(pid, gpu, ProcessKind::Compute);
            process.gpu_memory_bytes = Some(4 << 30);
            process.sm_percent = Some(10);
            process.user = Some("alice".into());
            process.visible = true;
            if k == 0 && agents < shape.agents {
                let rank = shape.first_rank + agents;
                agents += 1;
                process.env = Some(
                    LaunchEnv {
                        rank: Some(rank),
                        local_rank: Some(gpu),
                        world_size: Some(shape.world_size),
                        master_addr: Some("10.0.0.1".into()),
                        master_port: Some("29500".into()),
                        cuda_visible_devices: Some(gpu.to_string()),
                        ..Default::default()
                    }
                    .into(),
                );
                let step = if shape.slow_rank == Some(rank) {
                    shape.step_time * 2.0
                } else {
                    shape.step_time
                };
                process.torch = Some(std::sync::Arc::new(TorchInfo {
                    rank: Some(rank),
                    local_rank: Some(gpu),
                    world_size: Some(shape.world_size),
                    step: Some(1000),
                    step_time_seconds: Some(step),
                    age_seconds: Some(0.2),
                    devices: vec![DeviceAllocatorStats {
                        index: 0,
                        allocated_bytes: Some(30 << 30),
                        reserved_bytes: Some(34 << 30),
                        active_bytes: Some(30 << 30),
                        inactive_split_bytes: Some(1 << 30),
                        peak_allocated_bytes: Some(33 << 30),
                        alloc_retries: Some(0),
                        ooms: Some(0),
                        ..Default::default()
                    }],
                    ..Default::default()
                }));
            }
            snapshot.processes.push(process);
        }
    }
    snapshot.warnings.push(Warning {
        id: "throttle".into(),
        severity: Severity::Warn,
        subject: Subject::Gpu { index: 0 },
        message: "m".into(),
        evidence: vec![],
        remedy: "r".into(),
        since: snapshot.time.clone(),
    });
    snapshot
}
