//! Critical Xid errors of one GPU. NVML gives them only as events: an event set registered
//! for `CRITICAL_XID_ERROR` queues each one, and [`XidWatch::poll`] drains that queue without
//! waiting on every reading, so a GPU's worker never blocks here longer than its other calls.

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::{Device, EventSet, Nvml};

/// At most this many queued events are taken per reading; the rest wait for the next one.
const DRAIN_AT_MOST: usize = 64;

/// Whether the GPU's Xid events are being watched.
enum Watch {
    NotTried,
    Watching(EventSet<'static>),
    /// The driver or the GPU gives no Xid events; not asked again.
    Unsupported,
}

pub(crate) struct XidWatch {
    watch: Watch,
    last: u64,
    count: u64,
}

impl XidWatch {
    pub(crate) fn new() -> Self {
        XidWatch {
            watch: Watch::NotTried,
            last: 0,
            count: 0,
        }
    }

    /// (the last Xid code, 0 while none; how many since watching began), or `None` where the
    /// GPU gives no Xid events. The first call registers for them.
    pub(crate) fn poll(
        &mut self,
        nvml: &'static Nvml,
        device: &Device<'static>,
    ) -> Option<(u64, u64)> {
        if let Watch::NotTried = self.watch {
            self.watch = register(nvml, device);
        }
        let Watch::Watching(set) = &self.watch else {
            return None;
        };
        for _ in 0..DRAIN_AT_MOST {
            match set.wait(0) {
                Ok(event) => {
                    if !event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                        continue;
                    }
                    self.count += 1;
                    if let Some(XidError::Value(code)) = event.event_data {
                        self.last = code;
                    }
                }
                // A timeout is the usual end: the queue is empty. Any other error ends it too.
                Err(_) => break,
            }
        }
        Some((self.last, self.count))
    }
}

fn register(nvml: &'static Nvml, device: &Device<'static>) -> Watch {
    let supported = device
        .supported_event_types()
        .is_ok_and(|types| types.contains(EventTypes::CRITICAL_XID_ERROR));
    if !supported {
        return Watch::Unsupported;
    }
    let Ok(set) = nvml.create_event_set() else {
        return Watch::Unsupported;
    };
    match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
        Ok(set) => Watch::Watching(set),
        Err(_) => Watch::Unsupported,
    }
}
