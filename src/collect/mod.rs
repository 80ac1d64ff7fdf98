//! The data sources: the GPU driver (NVML, behind [`GpuSource`]), the host's /proc
//! ([`host`]) and the agents inside training processes ([`agent`]).
//!
//! Every source that can block (the NVIDIA driver above all) is run on a thread of its own by
//! the sampler ([`crate::sampler`]), which gathers what arrived by each tick's deadline. Nothing
//! in here is ever called from the UI task.

pub mod agent;
pub(crate) mod amd;
mod cgroup;
mod container;
pub(crate) mod gpu;
pub(crate) mod host;
mod launcher;
pub(crate) mod nvml;
mod oom_watch;
mod placement;
mod proc_path;
mod scheduler;
mod xid;

pub use gpu::{DeviceError, DeviceReader, DeviceReading, GpuLoader, GpuSource};
/// Public for the procfs benchmark, which times it against sysinfo.
pub use host::HostCollector;

use std::path::PathBuf;
use std::sync::Arc;

/// The production GPU loader: NVML from `library`.
pub fn nvml_loader(library: PathBuf) -> GpuLoader {
    Box::new(move || Arc::new(nvml::NvmlSource::load(&library)) as Arc<dyn GpuSource>)
}
