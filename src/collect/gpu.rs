//! The GPU source trait. The real implementation is [`super::nvml::NvmlSource`]; unit tests use
//! small fakes, end-to-end tests the fake `libnvidia-ml.so.1` under `tests/fake-nvml`.

use std::sync::Arc;

use crate::model::{DriverInfo, GpuProcess, GpuSample};

/// Builds the GPU source; runs on the sampler's driver thread because loading may block.
pub type GpuLoader = Box<dyn FnOnce() -> Arc<dyn GpuSource> + Send>;

/// One reading of one GPU: its figures and the processes on it (GPU-side fields only).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceReading {
    pub sample: GpuSample,
    pub processes: Vec<GpuProcess>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The driver says the GPU is gone (NVML_ERROR_GPU_IS_LOST).
    #[error("GPU lost: {0}")]
    Lost(String),
    /// Any other failure to read the device as a whole.
    #[error("{0}")]
    Failed(String),
}

/// A GPU driver. Calls may block for a long time; callers run them on worker threads.
pub trait GpuSource: Send + Sync {
    /// Library and versions, or why the driver could not be used.
    fn driver_info(&self) -> DriverInfo;
    /// How many GPUs the driver sees now.
    fn device_count(&self) -> Result<u32, String>;
    /// A reader for one GPU. Readers cache what does not change and keep per-device state
    /// (such as the last process-utilization timestamp).
    fn open_device(&self, index: u32) -> Box<dyn DeviceReader>;
}

pub trait DeviceReader: Send {
    fn read(&mut self) -> Result<DeviceReading, DeviceError>;

    /// As [`DeviceReader::read`], into `reading` (a previous reading, whose vectors keep their
    /// room), so that a reading allocates nothing once the buffers have grown. On an error,
    /// `reading` holds nothing of worth.
    fn read_into(&mut self, reading: &mut DeviceReading) -> Result<(), DeviceError> {
        *reading = self.read()?;
        Ok(())
    }
}
