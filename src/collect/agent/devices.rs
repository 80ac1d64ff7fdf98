//! The `devices` list of a stats message, read with bounded memory: the first
//! [`MAX_DEVICES_PER_AGENT`] entries, each reduced to the `memory_stats` keys the hub shows; the
//! rest of the list is only counted.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::json::{cut, drain_map, drain_seq, scalars_are, visit_fields, Scalar};
use super::MAX_DEVICES_PER_AGENT;
use crate::model::DeviceAllocatorStats;
use crate::protocol::STAT_KEYS;

/// The `devices` list: the first [`MAX_DEVICES_PER_AGENT`] entries read, the rest only counted.
#[derive(Default)]
pub(crate) struct Devices {
    pub(crate) kept: Vec<DeviceAllocatorStats>,
    pub(crate) listed: usize,
}

impl<'de> de::Deserialize<'de> for Devices {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DevicesVisitor;
        impl<'de> Visitor<'de> for DevicesVisitor {
            type Value = Devices;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of devices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Devices, A::Error> {
                let mut devices = Devices::default();
                loop {
                    if devices.listed < MAX_DEVICES_PER_AGENT {
                        match seq.next_element::<DeviceEntry>()? {
                            Some(DeviceEntry(Some(device))) => devices.kept.push(device),
                            Some(DeviceEntry(None)) => {}
                            None => break,
                        }
                    } else if seq.next_element::<IgnoredAny>()?.is_none() {
                        break;
                    }
                    devices.listed += 1;
                }
                Ok(devices)
            }
            // Anything else is no list: no devices.
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Devices, A::Error> {
                drain_map(map).map(|()| Devices::default())
            }
            scalars_are!(Devices::default());
        }
        deserializer.deserialize_any(DevicesVisitor)
    }
}

/// One entry of `devices`; `None` when it is not an object with a valid `index`.
struct DeviceEntry(Option<DeviceAllocatorStats>);

/// Above this a `max_split_size` is PyTorch's "no limit" (SIZE_MAX).
const UNLIMITED_SPLIT: u64 = 1 << 60;
/// The longest device UUID kept.
const MAX_UUID_BYTES: usize = 64;

fn stat_slot(device: &mut DeviceAllocatorStats, index: usize) -> &mut Option<u64> {
    match index {
        0 => &mut device.allocated_bytes,
        1 => &mut device.reserved_bytes,
        2 => &mut device.active_bytes,
        3 => &mut device.inactive_split_bytes,
        4 => &mut device.requested_bytes,
        5 => &mut device.peak_allocated_bytes,
        6 => &mut device.segments,
        7 => &mut device.alloc_retries,
        8 => &mut device.ooms,
        9 => &mut device.peak_reserved_bytes,
        10 => &mut device.large_pool_reserved_bytes,
        11 => &mut device.small_pool_reserved_bytes,
        12 => &mut device.allocations_total,
        13 => &mut device.frees_total,
        14 => &mut device.oversize_allocations,
        15 => &mut device.oversize_segments,
        _ => &mut device.max_split_size_bytes,
    }
}

impl<'de> de::Deserialize<'de> for DeviceEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let scalar_or_stats = deserializer.deserialize_any(DeviceVisitor)?;
        Ok(DeviceEntry(scalar_or_stats))
    }
}

struct DeviceVisitor;

impl<'de> Visitor<'de> for DeviceVisitor {
    type Value = Option<DeviceAllocatorStats>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a device object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut index = None;
        let mut uuid = None;
        let mut device = DeviceAllocatorStats::default();
        visit_fields(map, &["index", "stats", "uuid"], |key, map| {
            match key {
                0 => index = map.next_value::<Scalar>()?.as_u32(),
                1 => device = map.next_value::<StatsMap>()?.0,
                _ => {
                    // The text read is kept: no second copy for the cut.
                    uuid = match map.next_value::<Scalar>()? {
                        Scalar::Str(text) if text.len() <= MAX_UUID_BYTES => Some(text),
                        Scalar::Str(text) => Some(cut(&text, MAX_UUID_BYTES)),
                        _ => None,
                    };
                }
            }
            Ok(())
        })?;
        Ok(index.map(|index| DeviceAllocatorStats {
            index,
            uuid,
            ..device
        }))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| None)
    }
    scalars_are!(None);
}

/// A device's `stats` object, reduced to the keys in [`STAT_KEYS`]; anything else is empty.
struct StatsMap(DeviceAllocatorStats);

impl<'de> de::Deserialize<'de> for StatsMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let scalar = deserializer.deserialize_any(StatsVisitor)?;
        Ok(StatsMap(scalar))
    }
}

struct StatsVisitor;

impl<'de> Visitor<'de> for StatsVisitor {
    type Value = DeviceAllocatorStats;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a memory_stats object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut device = DeviceAllocatorStats::default();
        visit_fields(map, STAT_KEYS, |key, map| {
            *stat_slot(&mut device, key) = map.next_value::<Scalar>()?.as_u64();
            Ok(())
        })?;
        device.max_split_size_bytes = device
            .max_split_size_bytes
            .filter(|bytes| *bytes < UNLIMITED_SPLIT);
        Ok(device)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| DeviceAllocatorStats::default())
    }
    scalars_are!(DeviceAllocatorStats::default());
}
