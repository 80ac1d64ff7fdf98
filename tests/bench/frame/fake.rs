//! Snapshots for the frame benchmark: the sampler, in this process, against the fake NVML
//! built with optimizations, with sleeping processes as the GPU processes.

use std::path::Path;
use std::time::{Duration, Instant};

use torchtop::model::Snapshot;
use torchtop::sampler::{Sampler, SamplerConfig};

use crate::common::fake_nvml::{
    fill_pids, fixture_text, many_gpus_scenario, ScenarioFile, Sleepers,
};

/// `count` snapshots of `gpus` GPUs and `processes` GPU processes, 100 ms apart: 8 GPUs is
/// the overhead benchmark's fixture, 16 its generated scenario.
pub(crate) fn snapshots(
    library: &Path,
    gpus: usize,
    processes: usize,
    count: usize,
) -> Vec<Snapshot> {
    let sleepers = Sleepers::spawn(processes);
    let template = if gpus == 8 {
        fixture_text("eight_gpus.toml")
    } else {
        many_gpus_scenario(gpus, processes)
    };
    let file = ScenarioFile::new(&fill_pids(&template, &sleepers.pids()));
    std::env::set_var("TORCHTOP_FAKE_NVML_SCENARIO", file.path());
    let config = SamplerConfig::for_interval(Duration::from_secs(1), "fake".into());
    let mut sampler = Sampler::start(config, torchtop::collect::nvml_loader(library.into()));
    let deadline = Instant::now() + Duration::from_secs(30);
    let full = |s: &Snapshot| s.gpus.len() == gpus && s.processes.len() >= processes;
    while !full(&sampler.tick()) {
        assert!(
            Instant::now() < deadline,
            "the fake NVML never showed {gpus} GPUs"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (0..count)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            sampler.tick()
        })
        .collect()
}
