//! The `devices` list of a stats message, read with bounded memory: the first
//! [`MAX_DEVICES_PER_AGENT`] entries, each reduced to the `memory_stats` keys the hub shows; the
//! rest of the list is only counted. The entries are read into the room of the last line's
//! devices, so a steady agent's stats cost the reader no allocation.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::json::{
    drain_map, drain_seq, scalars_are, seed_is_visitor, visit_fields, Scalar, TextInto,
};
use super::MAX_DEVICES_PER_AGENT;
use crate::model::DeviceAllocatorStats;
use crate::protocol::STAT_KEYS;

/// The `devices` list read into `kept`, the room of the devices the last stats line left (a
/// device's UUID rewritten in its String's room): the first [`MAX_DEVICES_PER_AGENT`] entries
/// read, the rest only counted. Its value is how many entries the list had, `None` when the
/// value is no list (which `kept` is left to the caller to empty).
pub(crate) struct DevicesInto<'a>(pub(crate) &'a mut Vec<DeviceAllocatorStats>);

seed_is_visitor!(DevicesInto);

impl<'de> Visitor<'de> for DevicesInto<'_> {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of devices")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let kept = self.0;
        let (mut used, mut listed) = (0, 0);
        loop {
            if listed < MAX_DEVICES_PER_AGENT {
                if used == kept.len() {
                    kept.push(DeviceAllocatorStats::default());
                }
                match seq.next_element_seed(DeviceEntry(&mut kept[used]))? {
                    Some(true) => used += 1,
                    Some(false) => {}
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            listed += 1;
        }
        kept.truncate(used);
        Ok(Some(listed))
    }
    // Anything else is no list: no devices.
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map).map(|()| None)
    }
    scalars_are!(None);
}

/// One entry of `devices`, read into a device's room; `false` when it is not an object with a
/// valid `index` (the room is then written again by the next entry, or cut off).
struct DeviceEntry<'a>(&'a mut DeviceAllocatorStats);

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

seed_is_visitor!(DeviceEntry);

impl<'de> Visitor<'de> for DeviceEntry<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a device object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        let room = self.0;
        // The last UUID's String, to be written over.
        let mut uuid = room.uuid.take().unwrap_or_default();
        let mut has_uuid = false;
        let mut index = None;
        let mut device = DeviceAllocatorStats::default();
        visit_fields(map, &["index", "stats", "uuid"], |key, map| {
            match key {
                0 => index = map.next_value::<Scalar>()?.as_u32(),
                1 => device = map.next_value::<StatsMap>()?.0,
                _ => has_uuid = map.next_value_seed(TextInto(&mut uuid, MAX_UUID_BYTES))?,
            }
            Ok(())
        })?;
        let Some(index) = index else {
            room.uuid = Some(uuid);
            return Ok(false);
        };
        *room = DeviceAllocatorStats {
            index,
            uuid: has_uuid.then_some(uuid),
            ..device
        };
        Ok(true)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        drain_seq(seq).map(|()| false)
    }
    scalars_are!(false);
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

#[cfg(test)]
mod tests {
    use super::super::parse::{parse_line, parse_line_into, Incoming, Stats};
    use crate::model::DeviceAllocatorStats;

    fn stats_into(line: &str, room: &mut Vec<DeviceAllocatorStats>) -> Stats {
        match parse_line_into(line.as_bytes(), room) {
            Ok(Incoming::Stats(stats)) => stats,
            other => panic!("not stats: {:?}", other.err()),
        }
    }

    const TWO: &str = r#"{"v":1,"type":"stats","devices":[{"index":1,"uuid":"GPU-bbbb","stats":{"allocated_bytes.all.current":7}},{"uuid":"GPU-none"},{"index":0,"uuid":"GPU-aaaa","stats":{"reserved_bytes.all.current":9}}]}"#;

    #[test]
    fn devices_read_into_room_are_those_read_afresh_and_keep_the_uuids_buffers() {
        let Ok(Incoming::Stats(fresh)) = parse_line(TWO.as_bytes()) else {
            panic!("not stats");
        };
        let mut room = Vec::new();
        let first = stats_into(TWO, &mut room);
        assert_eq!(first.devices, fresh.devices);
        assert_eq!(first.listed, 3);
        let uuids: Vec<&str> = (first.devices.iter())
            .filter_map(|d| d.uuid.as_deref())
            .collect();
        assert_eq!(uuids, ["GPU-aaaa", "GPU-bbbb"]);
        // The hub gives the devices back as room: the next line writes into the same Strings.
        let buffers: Vec<*const u8> = (first.devices.iter())
            .map(|d| d.uuid.as_ref().unwrap().as_ptr())
            .collect();
        room = first.devices;
        let second = stats_into(TWO, &mut room);
        assert_eq!(second.devices, fresh.devices);
        let again: Vec<*const u8> = (second.devices.iter())
            .map(|d| d.uuid.as_ref().unwrap().as_ptr())
            .collect();
        let mut sorted = (buffers.clone(), again.clone());
        sorted.0.sort();
        sorted.1.sort();
        assert_eq!(
            sorted.0, sorted.1,
            "the UUIDs were not written in their room"
        );
    }

    #[test]
    fn a_hostile_agents_long_uuids_cost_the_room_no_more_than_the_cut() {
        let long = "G".repeat(1 << 20);
        let line = format!(
            r#"{{"v":1,"type":"stats","devices":[{{"index":0,"uuid":"{long}"}},{{"index":1,"uuid":"é{long}"}}]}}"#
        );
        let mut room = Vec::new();
        for _ in 0..3 {
            let stats = stats_into(&line, &mut room);
            for device in &stats.devices {
                let uuid = device.uuid.as_ref().unwrap();
                assert!(
                    uuid.len() <= super::MAX_UUID_BYTES + '…'.len_utf8(),
                    "{}",
                    uuid.len()
                );
                assert!(
                    uuid.capacity() <= 2 * (super::MAX_UUID_BYTES + 3),
                    "{}",
                    uuid.capacity()
                );
                assert!(uuid.ends_with('…'));
            }
            room = stats.devices;
        }
    }

    #[test]
    fn room_left_by_an_earlier_line_never_shows_in_a_later_one() {
        let mut room = Vec::new();
        room = stats_into(TWO, &mut room).devices;
        let none = stats_into(r#"{"v":1,"type":"stats","step":3}"#, &mut room);
        assert!(none.devices.is_empty() && none.listed == 0, "{none:?}");
        room = stats_into(TWO, &mut room).devices;
        let not_a_list = stats_into(r#"{"v":1,"type":"stats","devices":{"a":1}}"#, &mut room);
        assert!(not_a_list.devices.is_empty(), "{not_a_list:?}");
        room = stats_into(TWO, &mut room).devices;
        let one = stats_into(
            r#"{"v":1,"type":"stats","devices":[{"index":2,"stats":{}}]}"#,
            &mut room,
        );
        let indices: Vec<(u32, Option<&str>)> = (one.devices.iter())
            .map(|d| (d.index, d.uuid.as_deref()))
            .collect();
        assert_eq!(indices, [(2, None)]);
        assert_eq!(one.devices[0].allocated_bytes, None);
        // A hello that names devices leaves them as room only.
        room = stats_into(TWO, &mut room).devices;
        let hello = r#"{"v":1,"type":"hello","devices":[{"index":5}]}"#;
        assert!(matches!(
            parse_line_into(hello.as_bytes(), &mut room),
            Ok(Incoming::Hello(_))
        ));
        let after = stats_into(r#"{"v":1,"type":"stats"}"#, &mut room);
        assert!(after.devices.is_empty(), "{after:?}");
    }
}
