//! When a recording asks the sampler for the host process table, which the replay's tree view
//! needs (the GPU processes' parents and DataLoader workers). A full /proc scan costs more than
//! recording a frame, so it is taken only when the tree may have changed: at the start, when a
//! GPU process comes or goes or its number of children changes, and otherwise every few
//! minutes.

use std::time::{Duration, Instant};

use crate::model::Snapshot;

/// The table is taken at least this often.
pub(crate) const TABLE_EVERY: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
pub(crate) struct TableSchedule {
    /// Each GPU process's pid and number of children when the table was last taken.
    signature: Vec<(u32, Option<u32>)>,
    taken: Option<Instant>,
}

fn signature(snapshot: &Snapshot) -> Vec<(u32, Option<u32>)> {
    let mut out: Vec<(u32, Option<u32>)> = snapshot
        .processes
        .iter()
        .map(|p| (p.pid, p.children_count))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

impl TableSchedule {
    /// Whether the next snapshot should carry the table, given this one.
    pub(crate) fn want(&mut self, snapshot: &Snapshot) -> bool {
        if !snapshot.host_processes.is_empty() {
            self.taken = Some(Instant::now());
            self.signature = signature(snapshot);
            return false;
        }
        self.taken.is_none_or(|at| at.elapsed() >= TABLE_EVERY)
            || signature(snapshot) != self.signature
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuProcess, HostProcess, ProcessKind};

    #[test]
    fn the_table_is_asked_for_at_first_and_again_when_the_family_changes() {
        let mut schedule = TableSchedule::default();
        let mut snapshot = Snapshot::default();
        let mut trainer = GpuProcess::new(10, 0, ProcessKind::Compute);
        trainer.children_count = Some(4);
        snapshot.processes.push(trainer);
        assert!(schedule.want(&snapshot));
        let mut with_table = snapshot.clone();
        with_table.host_processes.push(HostProcess::default());
        assert!(!schedule.want(&with_table));
        assert!(!schedule.want(&snapshot));
        snapshot.processes[0].children_count = Some(5);
        assert!(schedule.want(&snapshot), "a worker was respawned");
    }
}
