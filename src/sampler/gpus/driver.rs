//! The driver thread: loads the GPU library (nvmlInit can take seconds) and answers GPU-count
//! requests, so that neither blocks the sampler; and how the pool takes its answers.

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, Sender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use super::{GpuCell, GpuPool, Slot};
use crate::collect::{GpuLoader, GpuSource};

/// Messages from the driver thread.
pub(super) enum DriverEvent {
    Loaded {
        source: Arc<dyn GpuSource>,
        count: Result<u32, String>,
    },
    Count(Result<u32, String>),
}

impl GpuPool {
    /// Waits until the GPU library is loaded or `deadline` passes.
    pub(crate) fn wait_for_driver(&mut self, deadline: Instant) {
        while self.driver_loaded_at.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.driver_events.recv_timeout(left) {
                Ok(event) => self.apply_driver_event(event),
                Err(_) => return,
            }
        }
    }

    pub(crate) fn drain_driver_events(&mut self) {
        while let Ok(event) = self.driver_events.try_recv() {
            self.apply_driver_event(event);
        }
    }

    fn apply_driver_event(&mut self, event: DriverEvent) {
        match event {
            DriverEvent::Loaded { source, count } => {
                self.driver = source.driver_info();
                self.driver_loaded_at = Some(Instant::now());
                self.source = Some(source);
                self.apply_count(count);
            }
            DriverEvent::Count(count) => self.apply_count(count),
        }
    }

    fn apply_count(&mut self, count: Result<u32, String>) {
        // An AMD-only machine has GPUs to count without NVML.
        if !self.driver.nvml_loaded && self.driver.amd_gpu_count.is_none() {
            return;
        }
        let count = match count {
            Ok(count) => count,
            Err(why) => {
                self.driver.error = Some(format!("the GPU count could not be read: {why}"));
                return;
            }
        };
        self.driver.error = None;
        // An index is a position among the GPUs present: when the count changes, any index
        // may now name another GPU, so every GPU is opened afresh. A lost GPU is opened again
        // at each count: the GPU now at its index (after a GPU left and another came within
        // one count, say) is read, or the GPU is found lost again.
        let count_changed = self.driver.gpu_count.is_some_and(|before| before != count);
        self.driver.gpu_count = Some(count);
        let mut lost_before = BTreeMap::new();
        self.slots.retain(|index, slot| {
            let keep = *index < count && !count_changed && !slot.is_lost();
            if !keep {
                slot.cell.disown();
                if !count_changed {
                    if let Some(lost) = slot.take_lost() {
                        lost_before.insert(*index, lost);
                    }
                }
            }
            keep
        });
        let Some(source) = self.source.clone() else {
            return;
        };
        for index in 0..count {
            if self.slots.contains_key(&index) {
                continue;
            }
            // Opening only builds the reader; its first driver call is on the worker.
            let cell = GpuCell::new(index, source.open_device(index));
            if let Some(home) = self.home() {
                self.hand_over(&cell, home);
            }
            // Shown lost until the new reader's first answer says otherwise.
            let mut slot = Slot::new(cell);
            if let Some(lost) = lost_before.remove(&index) {
                slot.still_lost(lost);
            }
            self.slots.insert(index, slot);
        }
    }

    pub(crate) fn request_count_if_due(&mut self, now: Instant) {
        if self.source.is_none() || now.duration_since(self.last_count_request) < self.recount_every
        {
            return;
        }
        self.last_count_request = now;
        if let Some(requests) = &self.count_requests {
            if let Err(TrySendError::Disconnected(())) = requests.try_send(()) {
                self.count_requests = None;
            }
        }
    }
}

pub(super) fn run_driver_thread(
    loader: GpuLoader,
    events: Sender<DriverEvent>,
    counts: Receiver<()>,
) {
    let source = loader();
    let count = source.device_count();
    if events
        .send(DriverEvent::Loaded {
            source: source.clone(),
            count,
        })
        .is_err()
    {
        return;
    }
    while counts.recv().is_ok() {
        if events
            .send(DriverEvent::Count(source.device_count()))
            .is_err()
        {
            return;
        }
    }
}
