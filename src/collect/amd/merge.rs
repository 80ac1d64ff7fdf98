//! amd-smi's figures joined onto one card's sysfs reading: sysfs and fdinfo come first, and
//! amd-smi only fills what they left `None`. A process amd-smi lists that no readable fdinfo
//! showed (another user's, when torchtop is not root) gets a row of its own.

use std::collections::HashMap;
use std::time::Instant;

use crate::model::{GpuProcess, GpuSample, ProcessKind};

use super::smi::{ProcInfo, SmiProcess, SmiReading};

/// Per card: the buffer amd-smi fills, and each process's last engine counter for shares.
#[derive(Default)]
pub(super) struct SmiState {
    pub(super) buffer: Vec<ProcInfo>,
    /// pid → (when, gfx engine ns) at the previous reading.
    engine: HashMap<u32, (Instant, u64)>,
}

impl SmiState {
    /// Fills `sample` and `processes` (the fdinfo rows of this card) from `reading`.
    pub(super) fn merge(
        &mut self,
        reading: SmiReading,
        sample: &mut GpuSample,
        processes: &mut Vec<GpuProcess>,
        now: Instant,
    ) {
        if let Some((corrected, uncorrected)) = reading.ecc {
            sample.ecc_volatile_corrected.get_or_insert(corrected);
            sample.ecc_volatile_uncorrected.get_or_insert(uncorrected);
        }
        if let Some(energy) = reading.energy_millijoules {
            sample.energy_millijoules.get_or_insert(energy);
        }
        let Some(listed) = reading.processes else {
            return;
        };
        let mut engine = HashMap::with_capacity(listed.len());
        for process in &listed {
            let share = self.engine_share(process, now);
            engine.insert(process.pid, (now, process.gfx_ns));
            fill_row(processes, process, share, sample.index);
        }
        // Only the processes still listed keep a counter: the map stays as small as the list.
        self.engine = engine;
    }

    /// The share of the interval since the last reading that `process` spent on the engine.
    fn engine_share(&self, process: &SmiProcess, now: Instant) -> Option<u32> {
        let &(at, before) = self.engine.get(&process.pid)?;
        let wall = now.saturating_duration_since(at).as_nanos();
        let busy = u128::from(process.gfx_ns.checked_sub(before)?);
        (wall > 0).then(|| (busy * 100 / wall).min(100) as u32)
    }
}

/// Fills the fdinfo row of `process`'s pid where it lacks a figure, or adds a row.
fn fill_row(rows: &mut Vec<GpuProcess>, process: &SmiProcess, share: Option<u32>, gpu: u32) {
    let i = rows
        .iter()
        .position(|r| r.pid == process.pid)
        .unwrap_or_else(|| {
            rows.push(GpuProcess::from_driver(
                process.pid,
                gpu,
                ProcessKind::Compute,
            ));
            rows.len() - 1
        });
    let row = &mut rows[i];
    row.gpu_memory_bytes.get_or_insert(process.vram_bytes);
    if let Some(share) = share {
        row.sm_percent.get_or_insert(share);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn listed(pid: u32, vram: u64, gfx_ns: u64) -> SmiProcess {
        SmiProcess {
            pid,
            vram_bytes: vram,
            gfx_ns,
        }
    }

    #[test]
    fn sysfs_figures_win_and_gaps_are_filled() {
        let mut state = SmiState::default();
        let mut sample = GpuSample {
            index: 2,
            ecc_volatile_corrected: None,
            energy_millijoules: Some(5),
            ..Default::default()
        };
        let mut from_fdinfo = GpuProcess::new(10, 2, ProcessKind::Compute);
        from_fdinfo.gpu_memory_bytes = Some(100);
        let mut rows = vec![from_fdinfo];
        let reading = SmiReading {
            ecc: Some((3, 1)),
            energy_millijoules: Some(999),
            processes: Some(vec![listed(10, 7, 0), listed(11, 4096, 0)]),
        };
        state.merge(reading, &mut sample, &mut rows, Instant::now());
        assert_eq!(sample.ecc_volatile_corrected, Some(3));
        assert_eq!(sample.ecc_volatile_uncorrected, Some(1));
        assert_eq!(sample.energy_millijoules, Some(5), "sysfs's figure is kept");
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0].gpu_memory_bytes,
            Some(100),
            "fdinfo's figure is kept"
        );
        assert_eq!((rows[1].pid, rows[1].gpu), (11, 2));
        assert_eq!(rows[1].gpu_memory_bytes, Some(4096));
        assert_eq!(rows[1].sm_percent, None, "no share before a second reading");
    }

    #[test]
    fn engine_counters_become_a_share_between_readings() {
        let mut state = SmiState::default();
        let t0 = Instant::now();
        let read = |state: &mut SmiState, at: Instant, ns: u64| {
            let mut rows = Vec::new();
            let reading = SmiReading {
                processes: Some(vec![listed(11, 1, ns)]),
                ..Default::default()
            };
            state.merge(reading, &mut GpuSample::default(), &mut rows, at);
            rows[0].sm_percent
        };
        assert_eq!(read(&mut state, t0, 1_000), None);
        let t1 = t0 + Duration::from_millis(200);
        assert_eq!(read(&mut state, t1, 1_000 + 50_000_000), Some(25));
        // A counter that went backwards (a new process on a reused pid) gives no share.
        assert_eq!(read(&mut state, t1 + Duration::from_millis(100), 0), None);
    }
}
