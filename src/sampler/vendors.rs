//! Both vendors in one GPU source: the NVIDIA GPUs first (NVML's indices), then the amdgpu
//! cards in PCI order, so that a machine with both shows both and NVIDIA numbering is what
//! nvidia-smi says. The GPU pool sees one source and gives AMD cards the same workers, stall
//! handling and staleness as NVIDIA ones.
//!
//! The AMD cards are counted once, at load: amdgpu cards do not come and go while the driver
//! runs. If NVML's count changes, AMD indices move with it, as NVML's own indices would.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::collect::amd::AmdSource;
use crate::collect::{DeviceReader, GpuLoader, GpuSource};
use crate::model::DriverInfo;

/// Where the AMD collector reads `sys/` and `proc/`: `/`, or `TORCHTOP_AMD_ROOT` for tests.
///
/// The variable only chooses which files are read (a few small, bounded, read-only sysfs and
/// fdinfo files, parsed as numbers and short strings and escaped before display); it opens no
/// file for writing and runs nothing. `sudo` does not pass it on by default, and a user who can
/// set root's environment already controls root, so it gives a hostile user nothing.
pub(crate) fn amd_root_from_env() -> PathBuf {
    std::env::var_os("TORCHTOP_AMD_ROOT").map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

/// Wraps `nvidia` so that the amdgpu cards under `amd_root` follow its GPUs.
pub(crate) fn with_amd(nvidia: GpuLoader, amd_root: PathBuf) -> GpuLoader {
    Box::new(move || {
        let amd = AmdSource::load(&amd_root);
        let nvidia = nvidia();
        if amd.count() == 0 {
            return nvidia;
        }
        Arc::new(Vendors {
            nvidia,
            amd,
            nvidia_count: AtomicU32::new(0),
        }) as Arc<dyn GpuSource>
    })
}

struct Vendors {
    nvidia: Arc<dyn GpuSource>,
    amd: AmdSource,
    /// NVML's count at the last [`GpuSource::device_count`]: where AMD indices begin.
    nvidia_count: AtomicU32,
}

impl GpuSource for Vendors {
    fn driver_info(&self) -> DriverInfo {
        let mut info = self.nvidia.driver_info();
        info.amd_gpu_count = Some(self.amd.count());
        info.amd_smi.clone_from(&self.amd.smi);
        info
    }

    fn device_count(&self) -> Result<u32, String> {
        let nvidia = self.nvidia.device_count()?;
        self.nvidia_count.store(nvidia, Ordering::Relaxed);
        Ok(nvidia.saturating_add(self.amd.count()))
    }

    fn open_device(&self, index: u32) -> Box<dyn DeviceReader> {
        let nvidia = self.nvidia_count.load(Ordering::Relaxed);
        match index.checked_sub(nvidia) {
            Some(amd_index) => self.amd.open(amd_index, index),
            None => self.nvidia.open_device(index),
        }
    }
}
