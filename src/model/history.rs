//! Recent values per GPU and per agent, for the sparklines. Fed one snapshot at a time; a GPU
//! or a (process, device) pair that is not in a snapshot loses its history, so a long run with
//! processes and devices that come and go holds only the series of those still there.

use std::collections::{BTreeMap, VecDeque};

use super::Snapshot;

/// How much history the sparklines keep, in wall time.
pub(crate) const HISTORY_SPAN_SECONDS: f64 = 300.0;

/// A bounded series of samples; `None` is a gap (the value was N/A at that sample).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Series {
    values: VecDeque<Option<f64>>,
    capacity: usize,
}

impl Series {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Series {
            values: VecDeque::with_capacity(capacity.min(4096)),
            capacity: capacity.max(1),
        }
    }

    pub(crate) fn push(&mut self, value: Option<f64>) {
        if self.values.len() == self.capacity {
            self.values.pop_front();
        }
        self.values.push_back(value);
    }

    /// Keeps at most `capacity` samples from now on, dropping the oldest beyond it.
    fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
        while self.values.len() > self.capacity {
            self.values.pop_front();
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    pub(crate) fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = Option<f64>> + ExactSizeIterator + '_ {
        self.values.iter().copied()
    }

    /// The samples, oldest first, as the two slices of the ring they are kept in.
    pub(crate) fn as_slices(&self) -> (&[Option<f64>], &[Option<f64>]) {
        self.values.as_slices()
    }

    #[cfg(test)]
    pub(crate) fn latest(&self) -> Option<f64> {
        self.values.back().copied().flatten()
    }
}

/// The history of one GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GpuHistory {
    pub(crate) utilization_percent: Series,
    pub(crate) memory_used_bytes: Series,
    pub(crate) power_w: Series,
    /// The figures the setup screen (F2) can add to the history panel.
    pub(crate) temperature_c: Series,
    pub(crate) sm_clock_mhz: Series,
    pub(crate) memory_clock_mhz: Series,
    pub(crate) pcie_rx_kib_s: Series,
    pub(crate) pcie_tx_kib_s: Series,
    pub(crate) encoder_percent: Series,
    pub(crate) decoder_percent: Series,
    /// The GPU these samples are of: a GPU at the same index with another UUID starts afresh.
    uuid: Option<std::sync::Arc<str>>,
    /// The last memory total and power limit the GPU reported: the top of its memory and
    /// power sparklines. A lost GPU reports neither, and its past samples must keep the scale
    /// they were drawn on, not be stretched to their own max.
    pub(crate) memory_total_bytes: Option<u64>,
    pub(crate) power_limit_w: Option<f64>,
}

impl GpuHistory {
    fn with_capacity(capacity: usize) -> Self {
        let new_series = || Series::with_capacity(capacity);
        GpuHistory {
            utilization_percent: new_series(),
            memory_used_bytes: new_series(),
            power_w: new_series(),
            temperature_c: new_series(),
            sm_clock_mhz: new_series(),
            memory_clock_mhz: new_series(),
            pcie_rx_kib_s: new_series(),
            pcie_tx_kib_s: new_series(),
            encoder_percent: new_series(),
            decoder_percent: new_series(),
            uuid: None,
            memory_total_bytes: None,
            power_limit_w: None,
        }
    }

    fn series_mut(&mut self) -> [&mut Series; 10] {
        [
            &mut self.utilization_percent,
            &mut self.memory_used_bytes,
            &mut self.power_w,
            &mut self.temperature_c,
            &mut self.sm_clock_mhz,
            &mut self.memory_clock_mhz,
            &mut self.pcie_rx_kib_s,
            &mut self.pcie_tx_kib_s,
            &mut self.encoder_percent,
            &mut self.decoder_percent,
        ]
    }

    fn push(&mut self, gpu: &super::GpuSample) {
        if gpu.uuid.is_some() && gpu.uuid != self.uuid {
            if self.uuid.is_some() {
                for series in self.series_mut() {
                    series.values.clear();
                }
                (self.memory_total_bytes, self.power_limit_w) = (None, None);
            }
            self.uuid.clone_from(&gpu.uuid);
        }
        // Kept while the GPU reports none (lost, or a stale reading without them).
        self.memory_total_bytes = gpu.memory_total_bytes.or(self.memory_total_bytes);
        self.power_limit_w = gpu.power_limit_w.or(self.power_limit_w);
        // A stale or lost GPU's figures are its last reading again: a gap, not a flat line.
        if gpu.state != super::GpuState::Ok {
            for series in self.series_mut() {
                series.push(None);
            }
            return;
        }
        let float = |v: Option<u32>| v.map(f64::from);
        self.utilization_percent
            .push(float(gpu.utilization_percent));
        self.memory_used_bytes
            .push(gpu.memory_used_bytes.map(|b| b as f64));
        self.power_w.push(gpu.power_w);
        self.temperature_c.push(float(gpu.temperature_c));
        self.sm_clock_mhz.push(float(gpu.sm_clock_mhz));
        self.memory_clock_mhz.push(float(gpu.memory_clock_mhz));
        self.pcie_rx_kib_s.push(float(gpu.pcie_rx_kib_s));
        self.pcie_tx_kib_s.push(float(gpu.pcie_tx_kib_s));
        self.encoder_percent.push(float(gpu.encoder_percent));
        self.decoder_percent.push(float(gpu.decoder_percent));
    }
}

/// The history of one process's allocator on one device.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AllocatorHistory {
    pub(crate) allocated_bytes: Series,
    pub(crate) reserved_bytes: Series,
}

/// The history of one process, summed over its GPUs, for the detail view.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProcessHistory {
    /// The process's start time: a reused pid starts a new history.
    start_ticks: Option<u64>,
    pub(crate) gpu_memory_bytes: Series,
    pub(crate) sm_percent: Series,
    pub(crate) cpu_percent: Series,
    pub(crate) rss_bytes: Series,
}

/// Per-process series keep at most this many samples, whatever the interval.
pub(crate) const MAX_PROCESS_SAMPLES: usize = 600;
/// At most this many processes have a history (the first by pid); the rest have none.
pub(crate) const MAX_PROCESS_HISTORIES: usize = 256;

/// Samples in `HISTORY_SPAN_SECONDS` at one per `interval_seconds`, and one more.
fn capacity_for(interval_seconds: f64) -> usize {
    let samples = (HISTORY_SPAN_SECONDS / interval_seconds.max(0.05)).ceil() as usize + 1;
    samples.clamp(2, 6001)
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct History {
    capacity: usize,
    pub(crate) gpus: BTreeMap<u32, GpuHistory>,
    /// Keyed by (pid, device index).
    pub(crate) allocators: BTreeMap<(u32, u32), AllocatorHistory>,
    /// Keyed by pid; bounded by [`MAX_PROCESS_HISTORIES`] and [`MAX_PROCESS_SAMPLES`].
    pub(crate) processes: BTreeMap<u32, ProcessHistory>,
    scratch: Scratch,
}

/// The vectors recording the processes needs each snapshot, kept so that it allocates nothing
/// once they have grown. Working space, not history: any two are equal, and a copy of the
/// history starts with none.
#[derive(Debug, Default)]
struct Scratch {
    /// Row positions by pid, a pid's rows in snapshot order.
    order: Vec<usize>,
    /// The pids recorded this snapshot, ascending.
    kept: Vec<u32>,
}

impl PartialEq for Scratch {
    fn eq(&self, _: &Scratch) -> bool {
        true
    }
}

impl Clone for Scratch {
    fn clone(&self) -> Scratch {
        Scratch::default()
    }
}

impl History {
    /// A history long enough to hold `HISTORY_SPAN_SECONDS` at one sample per `interval_seconds`.
    pub(crate) fn for_interval(interval_seconds: f64) -> Self {
        History {
            capacity: capacity_for(interval_seconds),
            ..Default::default()
        }
    }

    /// The refresh rate changed (setup screen): keep `HISTORY_SPAN_SECONDS` at the new rate,
    /// keeping the newest samples already there.
    pub(crate) fn set_interval(&mut self, interval_seconds: f64) {
        let capacity = capacity_for(interval_seconds);
        self.capacity = capacity;
        for gpu in self.gpus.values_mut() {
            for series in gpu.series_mut() {
                series.set_capacity(capacity);
            }
        }
        for allocator in self.allocators.values_mut() {
            allocator.allocated_bytes.set_capacity(capacity);
            allocator.reserved_bytes.set_capacity(capacity);
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn record(&mut self, snapshot: &Snapshot) {
        let capacity = self.capacity;
        let new_series = || Series::with_capacity(capacity);
        for gpu in &snapshot.gpus {
            self.gpus
                .entry(gpu.index)
                .or_insert_with(|| GpuHistory::with_capacity(capacity))
                .push(gpu);
        }
        self.gpus
            .retain(|index, _| snapshot.gpus.iter().any(|g| g.index == *index));
        let mut seen = Vec::new();
        for process in &snapshot.processes {
            let Some(torch) = &process.torch else {
                continue;
            };
            for device in &torch.devices {
                let key = (process.pid, device.index);
                if seen.contains(&key) {
                    continue;
                }
                seen.push(key);
                let entry = self
                    .allocators
                    .entry(key)
                    .or_insert_with(|| AllocatorHistory {
                        allocated_bytes: new_series(),
                        reserved_bytes: new_series(),
                    });
                entry
                    .allocated_bytes
                    .push(device.allocated_bytes.map(|b| b as f64));
                entry
                    .reserved_bytes
                    .push(device.reserved_bytes.map(|b| b as f64));
            }
        }
        self.allocators.retain(|key, _| seen.contains(key));
        self.record_processes(snapshot);
    }

    fn record_processes(&mut self, snapshot: &Snapshot) {
        let rows = &snapshot.processes;
        // Row positions by pid, a pid's rows in snapshot order: two kept Vecs, not a map of
        // one Vec per process.
        let Scratch { order, kept } = &mut self.scratch;
        order.clear();
        order.extend(0..rows.len());
        order.sort_unstable_by_key(|&i| (rows[i].pid, i));
        let capacity = self.capacity.min(MAX_PROCESS_SAMPLES);
        kept.clear();
        let mut rest = order.as_slice();
        while let Some(&first) = rest.first() {
            if kept.len() == MAX_PROCESS_HISTORIES {
                break;
            }
            let pid = rows[first].pid;
            let same = rest.partition_point(|&i| rows[i].pid == pid);
            let (group, after) = rest.split_at(same);
            rest = after;
            kept.push(pid);
            let entry = self.processes.entry(pid).or_default();
            let start_ticks = rows[first].start_ticks;
            if entry.gpu_memory_bytes.capacity == 0 || entry.start_ticks != start_ticks {
                *entry = ProcessHistory {
                    start_ticks,
                    gpu_memory_bytes: Series::with_capacity(capacity),
                    sm_percent: Series::with_capacity(capacity),
                    cpu_percent: Series::with_capacity(capacity),
                    rss_bytes: Series::with_capacity(capacity),
                };
            }
            let sum = |value: fn(&crate::model::GpuProcess) -> Option<f64>| {
                group
                    .iter()
                    .filter_map(|&i| value(&rows[i]))
                    .reduce(|a, b| a + b)
            };
            entry
                .gpu_memory_bytes
                .push(sum(|r| r.gpu_memory_bytes.map(|b| b as f64)));
            entry.sm_percent.push(sum(|r| r.sm_percent.map(f64::from)));
            entry.cpu_percent.push(rows[first].cpu_percent);
            entry
                .rss_bytes
                .push(rows[first].rss_bytes.map(|b| b as f64));
        }
        // `kept` is sorted: pids came in ascending order.
        self.processes
            .retain(|pid, _| kept.binary_search(pid).is_ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GpuSample;

    #[test]
    fn keeps_five_minutes_at_one_hertz_and_drops_the_oldest() {
        let mut history = History::for_interval(1.0);
        assert!(history.capacity() >= 300);
        for i in 0..400u32 {
            let mut snap = Snapshot::default();
            snap.gpus.push(GpuSample {
                index: 0,
                utilization_percent: Some(i % 101),
                ..Default::default()
            });
            history.record(&snap);
        }
        let util = &history.gpus[&0].utilization_percent;
        assert_eq!(util.len(), history.capacity());
        assert_eq!(util.latest(), Some(f64::from(399 % 101)));
    }

    #[test]
    fn a_new_refresh_rate_resizes_every_series_and_keeps_it_bounded() {
        let mut history = History::for_interval(1.0);
        let sample = |i: u32| {
            let mut snap = Snapshot::default();
            snap.gpus.push(GpuSample {
                index: 0,
                utilization_percent: Some(i % 101),
                temperature_c: Some(50),
                ..Default::default()
            });
            snap
        };
        for i in 0..400 {
            history.record(&sample(i));
        }
        history.set_interval(5.0);
        assert_eq!(history.capacity(), 61);
        for i in 400..500 {
            history.record(&sample(i));
        }
        let gpu = &history.gpus[&0];
        assert_eq!(gpu.utilization_percent.len(), 61);
        assert_eq!(gpu.temperature_c.len(), 61);
        assert_eq!(gpu.utilization_percent.latest(), Some(f64::from(499 % 101)));
    }

    #[test]
    fn gpus_and_processes_that_have_gone_lose_their_history() {
        use crate::model::{DeviceAllocatorStats, GpuProcess, ProcessKind, TorchInfo};
        let mut history = History::for_interval(0.1);
        for tick in 0..2000u32 {
            // Two GPUs at a time out of an ever-changing set, and a new process every 10 ticks
            // with two devices of its own.
            let mut snap = Snapshot::default();
            for index in [tick / 50, tick / 50 + 1] {
                snap.gpus.push(GpuSample {
                    index,
                    utilization_percent: Some(tick % 100),
                    ..Default::default()
                });
            }
            for pid in [1, 1000 + tick / 10] {
                let mut process = GpuProcess::new(pid, 0, ProcessKind::Compute);
                let device = |index| DeviceAllocatorStats {
                    index,
                    allocated_bytes: Some(u64::from(tick)),
                    ..Default::default()
                };
                process.torch = Some(std::sync::Arc::new(TorchInfo {
                    devices: vec![device(0), device(1 + tick / 10)],
                    ..Default::default()
                }));
                snap.processes.push(process);
            }
            history.record(&snap);
            assert_eq!(history.gpus.len(), 2, "tick {tick}");
            assert_eq!(history.allocators.len(), 4, "tick {tick}");
        }
        let series = history.gpus.values().next().unwrap();
        assert!(
            series.utilization_percent.len() <= 100,
            "a GPU keeps only its own span"
        );
        assert_eq!(history.allocators[&(1, 0)].allocated_bytes.len(), 2000);
    }

    #[test]
    fn process_histories_are_bounded_in_count_and_length() {
        let mut history = History::for_interval(0.05);
        for tick in 0..1000u32 {
            let mut snap = Snapshot::default();
            for pid in 0..(MAX_PROCESS_HISTORIES as u32 + 50) {
                let mut p =
                    crate::model::GpuProcess::new(pid, 0, crate::model::ProcessKind::Compute);
                p.gpu_memory_bytes = Some(u64::from(tick));
                p.start_ticks = Some(1);
                snap.processes.push(p.clone());
                p.gpu = 1;
                snap.processes.push(p);
            }
            history.record(&snap);
        }
        assert_eq!(history.processes.len(), MAX_PROCESS_HISTORIES);
        let first = &history.processes[&0];
        assert_eq!(first.gpu_memory_bytes.len(), MAX_PROCESS_SAMPLES);
        assert_eq!(
            first.gpu_memory_bytes.latest(),
            Some(2.0 * 999.0),
            "summed over GPUs"
        );
        assert_eq!(first.cpu_percent.latest(), None, "a gap, not 0");
        // A reused pid starts afresh.
        let mut snap = Snapshot::default();
        let mut p = crate::model::GpuProcess::new(0, 0, crate::model::ProcessKind::Compute);
        p.start_ticks = Some(2);
        snap.processes.push(p);
        history.record(&snap);
        assert_eq!(history.processes[&0].gpu_memory_bytes.len(), 1);
        assert_eq!(history.processes.len(), 1);
    }

    #[test]
    fn missing_values_are_gaps_not_zero() {
        let mut history = History::for_interval(1.0);
        let mut snap = Snapshot::default();
        snap.gpus.push(GpuSample {
            index: 3,
            ..Default::default()
        });
        history.record(&snap);
        assert_eq!(history.gpus[&3].power_w.iter().next(), Some(None));
    }

    #[test]
    fn a_lost_gpu_keeps_its_last_memory_total_and_power_limit() {
        let mut history = History::for_interval(1.0);
        let alive = GpuSample {
            index: 3,
            memory_total_bytes: Some(80 << 30),
            power_limit_w: Some(700.0),
            ..Default::default()
        };
        let lost = GpuSample {
            index: 3,
            state: crate::model::GpuState::Lost,
            ..Default::default()
        };
        for gpu in [alive, lost] {
            let mut snap = Snapshot::default();
            snap.gpus.push(gpu);
            history.record(&snap);
        }
        let gpu = &history.gpus[&3];
        assert_eq!(gpu.memory_total_bytes, Some(80 << 30));
        assert_eq!(gpu.power_limit_w, Some(700.0));
    }
}
