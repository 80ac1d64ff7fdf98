//! Which process a row names: its pid plus its start time, so that a recycled pid is never
//! taken for the process the user saw. The actions check it before they act
//! ([`crate::actions`]); the tags and the tree key their rows by it.

use serde::{Deserialize, Serialize};

use super::{GpuProcess, HostProcess};

/// A process as the user saw it. Two processes never share both fields, so an identity whose
/// start time no longer matches its pid names a process that has exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// Clock ticks after boot at which the process started.
    pub start_ticks: u64,
}

impl ProcessIdentity {
    pub fn new(pid: u32, start_ticks: u64) -> Self {
        ProcessIdentity { pid, start_ticks }
    }

    /// `None` where /proc was not joined in (the process is invisible or already gone): such a
    /// row cannot be acted on safely.
    pub fn of_gpu_process(p: &GpuProcess) -> Option<Self> {
        p.start_ticks
            .map(|start| ProcessIdentity::new(p.pid, start))
    }

    pub fn of_host_process(p: &HostProcess) -> Self {
        ProcessIdentity::new(p.pid, p.start_ticks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_of_a_row_needs_its_start_time() {
        let mut row = GpuProcess::new(5, 0, crate::model::ProcessKind::Compute);
        assert_eq!(ProcessIdentity::of_gpu_process(&row), None);
        row.start_ticks = Some(77);
        assert_eq!(
            ProcessIdentity::of_gpu_process(&row),
            Some(ProcessIdentity::new(5, 77))
        );
    }
}
