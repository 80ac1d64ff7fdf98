//! One GPU as the sampler sees it ([`Slot`]): its latest reading, when it last answered, and
//! how that becomes the published sample (ok, stale or lost) and process rows.

use std::sync::Arc;
use std::time::Instant;

use super::super::gpu_worker::GpuCell;
use super::GpuPool;
use crate::collect::{DeviceError, DeviceReading};
use crate::model::{GpuProcess, GpuSample, GpuState};

/// The sampler's view of one GPU.
pub(super) struct Slot {
    pub(super) cell: Arc<GpuCell>,
    created: Instant,
    last_reading: Option<DeviceReading>,
    last_ok: Option<Instant>,
    lost: Option<String>,
    last_error: Option<String>,
}

impl GpuPool {
    /// Every GPU as of `now`, into `into` (cleared first, its room kept).
    pub(crate) fn gpu_samples_into(&self, now: Instant, into: &mut Vec<GpuSample>) {
        into.clear();
        into.extend((self.slots.iter()).map(|(index, slot)| self.gpu_sample(*index, slot, now)));
    }

    fn gpu_sample(&self, index: u32, worker: &Slot, now: Instant) -> GpuSample {
        let last = worker.last_reading.as_ref().map(|r| &r.sample);
        let since_ok = now.duration_since(worker.last_ok.unwrap_or(worker.created));
        if let Some(why) = &worker.lost {
            // Which GPU it was, and no figure: a lost GPU's last readings are not its state.
            return GpuSample {
                index,
                name: last.and_then(|s| s.name.clone()),
                uuid: last.and_then(|s| s.uuid.clone()),
                bus_id: last.and_then(|s| s.bus_id.clone()),
                state: GpuState::Lost,
                error: Some(why.clone()),
                ..GpuSample::default()
            };
        }
        let mut sample = last.cloned().unwrap_or_default();
        sample.index = index;
        if worker.last_ok.is_none() || since_ok > self.stale_after {
            sample.state = GpuState::Stale;
            sample.stale_seconds = Some(round_tenths(since_ok.as_secs_f64()));
            sample.error = worker
                .last_error
                .clone()
                .or_else(|| Some("the driver has not answered for this GPU".into()));
        } else {
            sample.state = GpuState::Ok;
            sample.error.clone_from(&worker.last_error);
        }
        sample
    }

    /// The processes of every GPU that is not lost, from each GPU's latest reading.
    pub(crate) fn gpu_processes(&self) -> Vec<GpuProcess> {
        let mut processes = Vec::new();
        self.gpu_processes_into(&mut processes);
        processes
    }

    /// As [`GpuPool::gpu_processes`], into `into` (cleared first, its room kept).
    pub(crate) fn gpu_processes_into(&self, into: &mut Vec<GpuProcess>) {
        let readings = || {
            (self.slots.values())
                .filter(|w| w.lost.is_none())
                .filter_map(|w| w.last_reading.as_ref())
        };
        into.clear();
        // Sized first: extending from the chained lists would grow the vector step by step.
        into.reserve(readings().map(|r| r.processes.len()).sum());
        into.extend(readings().flat_map(|r| r.processes.iter().cloned()));
    }
}

impl Slot {
    pub(super) fn new(cell: Arc<GpuCell>) -> Self {
        Slot {
            cell,
            created: Instant::now(),
            last_reading: None,
            last_ok: None,
            lost: None,
            last_error: None,
        }
    }

    pub(super) fn is_lost(&self) -> bool {
        self.lost.is_some()
    }

    /// Why the GPU was lost and its last reading, taken out of a lost slot about to be opened
    /// again; `None` if it is not lost.
    pub(super) fn take_lost(&mut self) -> Option<(String, Option<DeviceReading>)> {
        let why = self.lost.take()?;
        Some((why, self.last_reading.take()))
    }

    /// A slot opened again for a GPU that was lost: it stays lost, with its identity, until
    /// its new reader answers.
    pub(super) fn still_lost(&mut self, (why, last_reading): (String, Option<DeviceReading>)) {
        self.lost = Some(why);
        self.last_reading = last_reading;
    }

    /// Takes a reading taken at `at`.
    pub(super) fn apply(&mut self, reading: Result<DeviceReading, DeviceError>, at: Instant) {
        match reading {
            Ok(reading) => {
                if let Some(previous) = self.last_reading.replace(reading) {
                    self.cell.recycle(previous);
                }
                self.last_ok = Some(at);
                self.last_error = None;
                self.lost = None;
            }
            Err(DeviceError::Lost(why)) => {
                self.lost = Some(why);
                self.cell.disown();
            }
            Err(DeviceError::Failed(why)) => self.last_error = Some(why),
        }
    }
}

fn round_tenths(seconds: f64) -> f64 {
    (seconds * 10.0).round() / 10.0
}
