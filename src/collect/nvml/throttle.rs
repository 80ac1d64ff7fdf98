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

/// Masks whose names are kept: a GPU whose throttling comes and goes flips between a few
/// masks (idle, power cap, thermal), each named once.
const KEPT_MASKS: usize = 4;

/// The names of the last few masks read, shared again while a mask recurs.
#[derive(Debug, Default)]
pub(crate) struct ThrottleNames(Vec<(u64, Arc<[String]>)>);

impl ThrottleNames {
    pub(crate) fn of(&mut self, mask: u64) -> Arc<[String]> {
        if let Some((_, names)) = self.0.iter().find(|(kept, _)| *kept == mask) {
            return Arc::clone(names);
        }
        let names: Arc<[String]> = throttle_reason_names(mask).into();
        if self.0.len() == KEPT_MASKS {
            self.0.remove(0);
        }
        self.0.push((mask, Arc::clone(&names)));
        names
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
