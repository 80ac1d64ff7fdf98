//! Throttle-reason bits as the names torchtop reports.

use std::sync::Arc;

/// Throttle-reason bits from NVML's header, with the names torchtop reports.
const THROTTLE_NAMES: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the last mask read, shared again while the mask stays the same.
#[derive(Debug, Default)]
pub(crate) struct ThrottleNames(Option<(u64, Arc<[String]>)>);

impl ThrottleNames {
    pub(crate) fn of(&mut self, mask: u64) -> Arc<[String]> {
        match &self.0 {
            Some((kept, names)) if *kept == mask => Arc::clone(names),
            _ => {
                let names: Arc<[String]> = throttle_reason_names(mask).into();
                self.0 = Some((mask, Arc::clone(&names)));
                names
            }
        }
    }
}

/// Names of the set throttle-reason bits; unknown bits are reported by number.
pub(crate) fn throttle_reason_names(mask: u64) -> Vec<String> {
    let mut names: Vec<String> = THROTTLE_NAMES
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, name)| (*name).to_string())
        .collect();
    let known: u64 = THROTTLE_NAMES.iter().map(|(bit, _)| bit).sum();
    let unknown = mask & !known;
    if unknown != 0 {
        names.push(format!("unknown_0x{unknown:x}"));
    }
    names
}
