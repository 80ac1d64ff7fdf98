//! The allocator counters as the C++ shim hands them over, and the `torch.cuda.memory_stats()`
//! keys torchtop reads picked out of them, so a Rust program's agent speaks exactly like the
//! Python one.

use serde_json::{Map, Value};

use crate::protocol::STAT_KEYS;

/// One device's `DeviceStats`, field for field as `torchtop_device_stats` in shim.cpp.
///
/// Each 12-slot array is three pools (all, small_pool, large_pool) of four counters (current,
/// peak, allocated, freed); each 4-slot array is one such counter set.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ShimDeviceStats {
    pub(crate) allocation: [i64; 12],
    pub(crate) segment: [i64; 12],
    pub(crate) active: [i64; 12],
    pub(crate) inactive_split: [i64; 12],
    pub(crate) allocated_bytes: [i64; 12],
    pub(crate) reserved_bytes: [i64; 12],
    pub(crate) active_bytes: [i64; 12],
    pub(crate) inactive_split_bytes: [i64; 12],
    pub(crate) requested_bytes: [i64; 12],
    pub(crate) oversize_allocations: [i64; 4],
    pub(crate) oversize_segments: [i64; 4],
    pub(crate) num_alloc_retries: i64,
    pub(crate) num_ooms: i64,
    pub(crate) num_sync_all_streams: i64,
    pub(crate) num_device_alloc: i64,
    pub(crate) num_device_free: i64,
    pub(crate) max_split_size: i64,
}

const POOLS: [&str; 3] = ["all", "small_pool", "large_pool"];
const COUNTERS: [&str; 4] = ["current", "peak", "allocated", "freed"];

impl ShimDeviceStats {
    /// The keys torchtop reads ([`STAT_KEYS`]) with their values, as the Python agent sends
    /// them. The other 105 keys of `memory_stats()` are never built: each would be a string, a
    /// map entry and JSON every interval in the training process, for a monitor that skips it.
    pub(crate) fn sent(&self) -> Map<String, Value> {
        STAT_KEYS
            .iter()
            .filter_map(|key| Some(((*key).to_string(), self.get(key)?.into())))
            .collect()
    }

    /// The value `torch.cuda.memory_stats(device)[key]` would have; None for a key it lacks.
    pub(crate) fn get(&self, key: &str) -> Option<i64> {
        let mut parts = key.split('.');
        let family = parts.next()?;
        match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => self.scalar(family),
            (Some(counter), None, _) => Some(self.counter_set(family)?[counter_index(counter)?]),
            (Some(pool), Some(counter), None) => {
                let pool = POOLS.iter().position(|p| *p == pool)?;
                Some(self.pools(family)?[pool * 4 + counter_index(counter)?])
            }
            _ => None,
        }
    }

    fn pools(&self, family: &str) -> Option<&[i64; 12]> {
        Some(match family {
            "allocation" => &self.allocation,
            "segment" => &self.segment,
            "active" => &self.active,
            "inactive_split" => &self.inactive_split,
            "allocated_bytes" => &self.allocated_bytes,
            "reserved_bytes" => &self.reserved_bytes,
            "active_bytes" => &self.active_bytes,
            "inactive_split_bytes" => &self.inactive_split_bytes,
            "requested_bytes" => &self.requested_bytes,
            _ => return None,
        })
    }

    fn counter_set(&self, family: &str) -> Option<&[i64; 4]> {
        match family {
            "oversize_allocations" => Some(&self.oversize_allocations),
            "oversize_segments" => Some(&self.oversize_segments),
            _ => None,
        }
    }

    fn scalar(&self, key: &str) -> Option<i64> {
        Some(match key {
            "num_alloc_retries" => self.num_alloc_retries,
            "num_ooms" => self.num_ooms,
            "num_sync_all_streams" => self.num_sync_all_streams,
            "num_device_alloc" => self.num_device_alloc,
            "num_device_free" => self.num_device_free,
            "max_split_size" => self.max_split_size,
            _ => return None,
        })
    }

    /// Whether the device's allocator was ever used by this process. A job on one GPU of eight
    /// should show one device, as the Python agent does: untouched devices report all zeros.
    pub(crate) fn ever_used(&self) -> bool {
        // all.current and all.peak are slots 0 and 1, all.allocated slot 2.
        [
            self.reserved_bytes[0],
            self.reserved_bytes[1],
            self.segment[2],
            self.allocation[2],
            self.allocated_bytes[1],
            self.num_device_alloc,
        ]
        .iter()
        .any(|value| *value > 0)
    }
}

fn counter_index(counter: &str) -> Option<usize> {
    COUNTERS.iter().position(|c| *c == counter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ShimDeviceStats {
        let mut reserved_bytes = [0; 12];
        reserved_bytes[0] = 2 << 20;
        ShimDeviceStats {
            // all.current, all.peak, all.allocated, all.freed, small_pool.current, ...
            allocated_bytes: [100, 200, 300, 400, 1, 2, 3, 4, 99, 198, 297, 396],
            reserved_bytes,
            oversize_segments: [5, 6, 7, 8],
            num_alloc_retries: 3,
            num_ooms: 1,
            max_split_size: -1,
            ..ShimDeviceStats::default()
        }
    }

    /// Every key of `torch.cuda.memory_stats()`: 9 families x 3 pools x 4 counters, the two
    /// `oversize_*` counter sets and 6 scalars.
    fn torch_keys() -> Vec<String> {
        let families = [
            "allocation",
            "segment",
            "active",
            "inactive_split",
            "allocated_bytes",
            "reserved_bytes",
            "active_bytes",
            "inactive_split_bytes",
            "requested_bytes",
        ];
        let mut keys = Vec::new();
        for family in families {
            for pool in POOLS {
                keys.extend(COUNTERS.iter().map(|c| format!("{family}.{pool}.{c}")));
            }
        }
        for family in ["oversize_allocations", "oversize_segments"] {
            keys.extend(COUNTERS.iter().map(|c| format!("{family}.{c}")));
        }
        keys.extend(
            [
                "num_alloc_retries",
                "num_ooms",
                "num_sync_all_streams",
                "num_device_alloc",
                "num_device_free",
                "max_split_size",
            ]
            .map(String::from),
        );
        keys
    }

    #[test]
    fn every_memory_stats_key_has_its_value() {
        let stats = sample();
        let keys = torch_keys();
        assert_eq!(keys.len(), 122);
        assert!(keys.iter().all(|key| stats.get(key).is_some()), "{keys:?}");
        assert_eq!(stats.get("allocated_bytes.all.current"), Some(100));
        assert_eq!(stats.get("allocated_bytes.all.peak"), Some(200));
        assert_eq!(stats.get("allocated_bytes.all.allocated"), Some(300));
        assert_eq!(stats.get("allocated_bytes.all.freed"), Some(400));
        assert_eq!(stats.get("allocated_bytes.small_pool.peak"), Some(2));
        assert_eq!(stats.get("allocated_bytes.large_pool.freed"), Some(396));
        assert_eq!(stats.get("reserved_bytes.all.current"), Some(2 << 20));
        assert_eq!(stats.get("oversize_segments.allocated"), Some(7));
        assert_eq!(stats.get("num_alloc_retries"), Some(3));
        assert_eq!(stats.get("num_ooms"), Some(1));
        assert_eq!(stats.get("max_split_size"), Some(-1));
        // torch's key is "allocation", not the documented "allocated".
        assert_eq!(stats.get("allocated.all.current"), None);
        for odd in [
            "",
            "num_ooms.current",
            "segment.all",
            "segment.all.current.x",
            "oversize_segments.all.current",
        ] {
            assert_eq!(stats.get(odd), None, "{odd}");
        }
    }

    #[test]
    fn sends_exactly_the_keys_torchtop_reads() {
        let sent = sample().sent();
        let keys: Vec<&str> = sent.keys().map(String::as_str).collect();
        let mut expected = STAT_KEYS.to_vec();
        expected.sort_unstable();
        assert_eq!(keys, expected);
        assert_eq!(sent["allocated_bytes.all.peak"], 200);
        assert_eq!(sent["oversize_segments.current"], 5);
        assert_eq!(sent["max_split_size"], -1);
    }

    #[test]
    fn untouched_devices_are_not_used() {
        assert!(!ShimDeviceStats::default().ever_used());
        assert!(sample().ever_used());
        let freed_everything = ShimDeviceStats {
            num_device_alloc: 1,
            ..ShimDeviceStats::default()
        };
        assert!(freed_everything.ever_used());
        let mut only_segments = ShimDeviceStats::default();
        only_segments.segment[2] = 1;
        assert!(only_segments.ever_used());
    }
}
