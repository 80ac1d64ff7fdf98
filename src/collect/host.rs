//! placeholder until the host collector lands: same API, no data.
use std::path::PathBuf;

use crate::model::{GpuProcess, HostProcess, HostSnapshot};

pub struct HostCollector {
    _root: PathBuf,
}

impl HostCollector {
    pub fn new(proc_root: PathBuf) -> Self {
        HostCollector { _root: proc_root }
    }
    pub fn sample_host(&mut self) -> HostSnapshot {
        HostSnapshot::default()
    }
    pub fn join_processes(&mut self, _processes: &mut [GpuProcess]) {}
    pub fn process_table(&mut self) -> Vec<HostProcess> {
        Vec::new()
    }
}
