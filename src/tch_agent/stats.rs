//! The allocator counters as the C++ shim hands them over, and their flattening into the keys of
//! `torch.cuda.memory_stats()`, so a Rust program's agent speaks exactly like the Python one.

use serde_json::{Map, Value};

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
    /// The same flat keys and values as `torch.cuda.memory_stats(device)`.
    pub(crate) fn flatten(&self) -> Map<String, Value> {
        let mut out = Map::new();
        let families: [(&str, &[i64; 12]); 9] = [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ];
        for (family, values) in families {
            for (pool_index, pool) in POOLS.iter().enumerate() {
                for (counter_index, counter) in COUNTERS.iter().enumerate() {
                    let value = values[pool_index * 4 + counter_index];
                    out.insert(format!("{family}.{pool}.{counter}"), value.into());
                }
            }
        }
        for (family, values) in [
            ("oversize_allocations", &self.oversize_allocations),
            ("oversize_segments", &self.oversize_segments),
        ] {
            for (counter, value) in COUNTERS.iter().zip(values) {
                out.insert(format!("{family}.{counter}"), (*value).into());
            }
        }
        for (key, value) in [
            ("num_alloc_retries", self.num_alloc_retries),
            ("num_ooms", self.num_ooms),
            ("num_sync_all_streams", self.num_sync_all_streams),
            ("num_device_alloc", self.num_device_alloc),
            ("num_device_free", self.num_device_free),
            ("max_split_size", self.max_split_size),
        ] {
            out.insert(key.to_string(), value.into());
        }
        out
    }
}

/// Whether a device's allocator was ever used by this process. A job on one GPU of eight should
/// show one device, as the Python agent does: untouched devices report all zeros.
pub(crate) fn ever_used(stats: &Map<String, Value>) -> bool {
    [
        "reserved_bytes.all.current",
        "reserved_bytes.all.peak",
        "segment.all.allocated",
        "allocation.all.allocated",
        "allocated_bytes.all.peak",
        "num_device_alloc",
    ]
    .iter()
    .any(|key| stats.get(*key).and_then(Value::as_i64).unwrap_or(0) > 0)
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

    #[test]
    fn flat_keys_match_memory_stats() {
        let flat = sample().flatten();
        assert_eq!(flat.len(), 9 * 12 + 2 * 4 + 6);
        assert_eq!(flat["allocated_bytes.all.current"], 100);
        assert_eq!(flat["allocated_bytes.all.peak"], 200);
        assert_eq!(flat["allocated_bytes.all.allocated"], 300);
        assert_eq!(flat["allocated_bytes.all.freed"], 400);
        assert_eq!(flat["allocated_bytes.small_pool.peak"], 2);
        assert_eq!(flat["allocated_bytes.large_pool.freed"], 396);
        assert_eq!(flat["reserved_bytes.all.current"], 2 << 20);
        assert_eq!(flat["oversize_segments.allocated"], 7);
        assert_eq!(flat["num_alloc_retries"], 3);
        assert_eq!(flat["num_ooms"], 1);
        assert_eq!(flat["max_split_size"], -1);
        assert!(flat.contains_key("inactive_split_bytes.all.current"));
        assert!(flat.contains_key("requested_bytes.large_pool.current"));
        // torch's key is "allocation", not the documented "allocated".
        assert!(flat.contains_key("allocation.all.current"));
        assert!(!flat.keys().any(|k| k.starts_with("allocated.")));
    }

    #[test]
    fn untouched_devices_are_not_used() {
        assert!(!ever_used(&ShimDeviceStats::default().flatten()));
        assert!(ever_used(&sample().flatten()));
        let freed_everything = ShimDeviceStats {
            num_device_alloc: 1,
            ..ShimDeviceStats::default()
        };
        assert!(ever_used(&freed_everything.flatten()));
    }
}
