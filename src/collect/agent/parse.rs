//! Parses one line of agent protocol v1 (assets/agent-protocol.md) into what the hub keeps,
//! with memory bounded whatever the agent sends: the JSON is read straight into typed fields,
//! every field the hub does not use is skipped without being built, at most
//! [`MAX_DEVICES_PER_AGENT`] devices are read, and text is cut at [`MAX_TEXT_BYTES`].
//! A line that breaks a rule of the protocol comes back as `Err(sentence)`: the caller drops the
//! connection for it.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{MAX_DEVICES_PER_AGENT, PROTOCOL_VERSION};
use crate::model::DeviceAllocatorStats;

/// The longest text kept from an agent (a snapshot path, an error); the rest is cut.
pub(crate) const MAX_TEXT_BYTES: usize = 4096;
/// The longest version or allocator setting kept from a hello, which every snapshot repeats.
const MAX_HELLO_TEXT_BYTES: usize = 256;

/// An agent's hello: who the process is.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Hello {
    pub python: Option<String>,
    pub torch: Option<String>,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub alloc_conf: Option<String>,
}

/// An agent's stats message: allocator figures as sent, before the cudaMallocAsync rule.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Stats {
    pub step: Option<u64>,
    pub step_time_seconds: Option<f64>,
    /// The first [`MAX_DEVICES_PER_AGENT`] entries with a valid index, sorted, one per index.
    pub devices: Vec<DeviceAllocatorStats>,
    /// How many entries `devices` had in the message, read or not.
    pub listed: usize,
}

/// An agent's answer to a command.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentReply {
    pub id: u64,
    pub ok: bool,
    /// The command's name as echoed by the agent.
    pub cmd: Option<String>,
    /// Where a snapshot went.
    pub path: Option<String>,
    /// Why a command failed.
    pub error: Option<String>,
}

/// Something an agent reported between stats, such as an OOM.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEvent {
    pub kind: String,
    pub device: Option<u32>,
}

/// Visitor methods that answer every JSON scalar (number, bool, string, null) with `$value`.
macro_rules! scalars_are {
    ($value:expr) => {
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    Hello(Hello),
    Stats(Stats),
    Reply(AgentReply),
    Event(AgentEvent),
    Ignored,
}

/// Parses one line (newline excluded). An `Err` is a reason to drop the connection.
pub(crate) fn parse_line(line: &[u8]) -> Result<Incoming, String> {
    let text = std::str::from_utf8(line).map_err(|_| "a line is not UTF-8".to_string())?;
    let top: Top = serde_json::from_str(text).map_err(|e| format!("a line is not JSON ({e})"))?;
    let Top::Object(fields) = top else {
        return Err("a line is not a JSON object".to_string());
    };
    match &fields.v {
        Some(Scalar::U64(PROTOCOL_VERSION)) => {}
        other => {
            let v = other.as_ref().map_or("none".to_string(), Scalar::describe);
            return Err(format!("protocol version {v}, expected {PROTOCOL_VERSION}"));
        }
    }
    Ok(match fields.kind.as_ref().and_then(Scalar::text) {
        Some("hello") => Incoming::Hello(fields.hello()),
        Some("stats") => Incoming::Stats(fields.stats()),
        Some("reply") => match fields.reply() {
            Some(reply) => Incoming::Reply(reply),
            None => return Err("a reply without an integer id or a boolean ok".to_string()),
        },
        Some("event") => Incoming::Event(AgentEvent {
            kind: fields
                .event_kind
                .as_ref()
                .and_then(Scalar::text)
                .unwrap_or("unknown")
                .to_string(),
            device: fields.device.as_ref().and_then(Scalar::as_u32),
        }),
        _ => Incoming::Ignored,
    })
}

/// A JSON value the hub reads as one field; arrays and objects are skipped, text is cut.
#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Str(String),
    Other,
}

impl Scalar {
    /// A non-negative integer, also from a float with no fraction (Python sends `1e9` so).
    fn as_u64(&self) -> Option<u64> {
        match *self {
            Scalar::U64(v) => Some(v),
            Scalar::F64(f)
                if f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64 =>
            {
                Some(f as u64)
            }
            _ => None,
        }
    }

    fn as_u32(&self) -> Option<u32> {
        self.as_u64().and_then(|v| u32::try_from(v).ok())
    }

    fn as_f64(&self) -> Option<f64> {
        match *self {
            Scalar::U64(v) => Some(v as f64),
            Scalar::I64(v) => Some(v as f64),
            Scalar::F64(v) => Some(v),
            _ => None,
        }
    }

    fn text(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Scalar::U64(v) => v.to_string(),
            Scalar::I64(v) => v.to_string(),
            Scalar::F64(v) => v.to_string(),
            Scalar::Bool(v) => v.to_string(),
            Scalar::Str(s) => format!("{:?}", s.chars().take(32).collect::<String>()),
            Scalar::Other => "that is not a number".to_string(),
        }
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl<'de> de::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::U64(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(u64::try_from(v).map_or(Scalar::I64(v), Scalar::U64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::F64(v))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(cut(v, MAX_TEXT_BYTES)))
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar, A::Error> {
                drain_seq(seq).map(|()| Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar, A::Error> {
                drain_map(map).map(|()| Scalar::Other)
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Reads an object key as its position in `names`, `None` for a key not in the list, without
/// allocating.
struct KeyIn(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyIn {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIn {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|name| *name == v))
    }
}

/// Calls `field` with the position in `names` of each known key, and skips the others. Later
/// duplicates of a key win, as in any JSON reader that keeps the last one.
fn visit_fields<'de, A: MapAccess<'de>>(
    mut map: A,
    names: &'static [&'static str],
    mut field: impl FnMut(usize, &mut A) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    while let Some(key) = map.next_key_seed(KeyIn(names))? {
        match key {
            Some(index) => field(index, &mut map)?,
            None => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    Ok(())
}

/// The whole line: an object's fields, or anything else.
enum Top {
    Object(Box<Fields>),
    NotObject,
}

/// Every top-level field the hub reads, whatever the message type (the type may come last).
#[derive(Default)]
struct Fields {
    v: Option<Scalar>,
    kind: Option<Scalar>,
    python: Option<Scalar>,
    torch: Option<Scalar>,
    rank: Option<Scalar>,
    local_rank: Option<Scalar>,
    world_size: Option<Scalar>,
    alloc_conf: Option<Scalar>,
    step: Option<Scalar>,
    step_time_s: Option<Scalar>,
    devices: Option<Devices>,
    id: Option<Scalar>,
    ok: Option<Scalar>,
    cmd: Option<Scalar>,
    path: Option<Scalar>,
    error: Option<Scalar>,
    event_kind: Option<Scalar>,
    device: Option<Scalar>,
}

const TOP_FIELDS: &[&str] = &[
    "v",
    "type",
    "python",
    "torch",
    "rank",
    "local_rank",
    "world_size",
    "alloc_conf",
    "step",
    "step_time_s",
    "devices",
    "id",
    "ok",
    "cmd",
    "path",
    "error",
    "kind",
    "device",
];

impl Fields {
    fn slot(&mut self, index: usize) -> Option<&mut Option<Scalar>> {
        Some(match TOP_FIELDS[index] {
            "v" => &mut self.v,
            "type" => &mut self.kind,
            "python" => &mut self.python,
            "torch" => &mut self.torch,
            "rank" => &mut self.rank,
            "local_rank" => &mut self.local_rank,
            "world_size" => &mut self.world_size,
            "alloc_conf" => &mut self.alloc_conf,
            "step" => &mut self.step,
            "step_time_s" => &mut self.step_time_s,
            "id" => &mut self.id,
            "ok" => &mut self.ok,
            "cmd" => &mut self.cmd,
            "path" => &mut self.path,
            "error" => &mut self.error,
            "kind" => &mut self.event_kind,
            "device" => &mut self.device,
            _ => return None,
        })
    }

    fn hello(&self) -> Hello {
        let text = |s: &Option<Scalar>| {
            s.as_ref()
                .and_then(Scalar::text)
                .map(|t| cut(t, MAX_HELLO_TEXT_BYTES))
        };
        let number = |s: &Option<Scalar>| s.as_ref().and_then(Scalar::as_u32);
        Hello {
            python: text(&self.python),
            torch: text(&self.torch),
            rank: number(&self.rank),
            local_rank: number(&self.local_rank),
            world_size: number(&self.world_size),
            alloc_conf: text(&self.alloc_conf),
        }
    }

    fn stats(self) -> Stats {
        let Devices { mut kept, listed } = self.devices.unwrap_or_default();
        kept.sort_by_key(|d| d.index);
        kept.dedup_by_key(|d| d.index);
        Stats {
            step: self.step.as_ref().and_then(Scalar::as_u64),
            step_time_seconds: self
                .step_time_s
                .as_ref()
                .and_then(Scalar::as_f64)
                .filter(|t| t.is_finite() && *t >= 0.0),
            devices: kept,
            listed,
        }
    }

    fn reply(&self) -> Option<AgentReply> {
        let text = |s: &Option<Scalar>| s.as_ref().and_then(Scalar::text).map(str::to_string);
        let id = match self.id {
            Some(Scalar::U64(id)) => id,
            _ => return None,
        };
        let ok = match self.ok {
            Some(Scalar::Bool(ok)) => ok,
            _ => return None,
        };
        Some(AgentReply {
            id,
            ok,
            cmd: text(&self.cmd),
            path: text(&self.path),
            error: text(&self.error),
        })
    }
}

impl<'de> de::Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = Top;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Top, A::Error> {
                let mut fields = Box::<Fields>::default();
                visit_fields(map, TOP_FIELDS, |index, map| {
                    match fields.slot(index) {
                        Some(slot) => *slot = Some(map.next_value()?),
                        None => fields.devices = Some(map.next_value()?),
                    }
                    Ok(())
                })?;
                Ok(Top::Object(fields))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Top, A::Error> {
                drain_seq(seq).map(|()| Top::NotObject)
            }
            scalars_are!(Top::NotObject);
        }
        deserializer.deserialize_any(TopVisitor)
    }
}

/// The `devices` list: the first [`MAX_DEVICES_PER_AGENT`] entries read, the rest only counted.
#[derive(Default)]
struct Devices {
    kept: Vec<DeviceAllocatorStats>,
    listed: usize,
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

/// The `memory_stats` keys the hub reads, in the order of [`DeviceAllocatorStats`]' fields.
const STAT_KEYS: &[&str] = &[
    "allocated_bytes.all.current",
    "reserved_bytes.all.current",
    "active_bytes.all.current",
    "inactive_split_bytes.all.current",
    "requested_bytes.all.current",
    "allocated_bytes.all.peak",
    "segment.all.current",
    "num_alloc_retries",
    "num_ooms",
];

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
        _ => &mut device.ooms,
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
        let mut device = DeviceAllocatorStats::default();
        visit_fields(map, &["index", "stats"], |key, map| {
            if key == 0 {
                index = map.next_value::<Scalar>()?.as_u32();
            } else {
                device = map.next_value::<StatsMap>()?.0;
            }
            Ok(())
        })?;
        Ok(index.map(|index| DeviceAllocatorStats { index, ..device }))
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
        Ok(device)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| DeviceAllocatorStats::default())
    }
    scalars_are!(DeviceAllocatorStats::default());
}
