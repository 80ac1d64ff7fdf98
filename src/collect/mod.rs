//! Data sources and the sampler.
//!
//! Every source that can block (the NVIDIA driver above all) runs on a thread of its own; the
//! sampler gathers what arrived by each tick's deadline and publishes one immutable
//! [`Snapshot`](crate::model::Snapshot). Nothing in here is ever called from the UI task.

pub mod agent;
pub mod gpu;
pub mod host;
pub mod nvml;
pub mod procfs;
pub mod sampler;

pub use gpu::{DeviceError, DeviceReader, DeviceReading, GpuSource};

use std::path::PathBuf;
use std::sync::Arc;

/// The production GPU loader: NVML from `library`.
pub fn nvml_loader(library: PathBuf) -> sampler::GpuLoader {
    Box::new(move || Arc::new(nvml::NvmlSource::load(&library)) as Arc<dyn GpuSource>)
}
