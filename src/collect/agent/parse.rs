//! Parses one line of agent protocol v1 (assets/agent-protocol.md) into what the hub keeps,
//! with memory bounded whatever the agent sends: the JSON is read straight into typed fields,
//! every field the hub does not use is skipped without being built, at most
//! [`MAX_DEVICES_PER_AGENT`](super::MAX_DEVICES_PER_AGENT) devices are read, and text is cut at
//! [`MAX_TEXT_BYTES`](super::json::MAX_TEXT_BYTES).
//! A line that breaks a rule of the protocol comes back as `Err(sentence)`: the caller drops the
//! connection for it.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::devices::DevicesInto;
use super::json::{
    cut, drain_map, drain_seq, scalars_are, scalars_but_text_are, seed_is_visitor, visit_fields,
    Scalar,
};
use super::PROTOCOL_VERSION;
use crate::model::DeviceAllocatorStats;
use crate::protocol::{MAX_STEP_TIME_S, MAX_WORLD_SIZE};

/// The longest version or allocator setting kept from a hello, which every snapshot repeats.
const MAX_HELLO_TEXT_BYTES: usize = 256;

/// An agent's hello: who the process is.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Hello {
    pub(crate) python: Option<String>,
    pub(crate) torch: Option<String>,
    pub(crate) rank: Option<u32>,
    pub(crate) local_rank: Option<u32>,
    pub(crate) world_size: Option<u32>,
    pub(crate) alloc_conf: Option<String>,
    /// `CUDA_VISIBLE_DEVICES` in the agent's process; `None` when unset or not reported.
    pub(crate) cuda_visible_devices: Option<String>,
}

/// An agent's stats message: allocator figures as sent, before the cudaMallocAsync rule.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Stats {
    pub(crate) step: Option<u64>,
    pub(crate) step_time_seconds: Option<f64>,
    /// The agent's clock when it took the stats, seconds since the epoch.
    pub(crate) ts: Option<f64>,
    /// The first [`MAX_DEVICES_PER_AGENT`](super::MAX_DEVICES_PER_AGENT) entries with a valid
    /// index, sorted, one per index.
    pub(crate) devices: Vec<DeviceAllocatorStats>,
    /// How many entries `devices` had in the message, read or not.
    pub(crate) listed: usize,
}

/// An agent's answer to a command.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AgentReply {
    pub(crate) id: u64,
    pub(crate) ok: bool,
    /// The command's name as echoed by the agent.
    pub(crate) cmd: Option<String>,
    /// Where a snapshot went.
    pub(crate) path: Option<String>,
    /// Why a command failed.
    pub(crate) error: Option<String>,
}

/// Something an agent reported between stats, such as an OOM. The byte counts, the path and
/// the error are those of an `oom` event; any of them may be missing.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct AgentEvent {
    pub(crate) kind: String,
    pub(crate) device: Option<u32>,
    /// The agent's clock, seconds since the epoch: with the pid and device, the event's identity.
    pub(crate) ts: Option<f64>,
    pub(crate) requested_bytes: Option<u64>,
    pub(crate) device_allocated: Option<u64>,
    pub(crate) device_free: Option<u64>,
    /// The snapshot the agent wrote for it.
    pub(crate) path: Option<String>,
    /// Why no snapshot was written.
    pub(crate) error: Option<String>,
    /// The program's `step()` count when it happened: a count that moves on after it says the
    /// program caught the error.
    pub(crate) step: Option<u64>,
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
#[cfg(test)]
pub(crate) fn parse_line(line: &[u8]) -> Result<Incoming, String> {
    parse_line_into(line, &mut Vec::new())
}

/// Parses one line (newline excluded), a stats line's devices read into the room of `devices`
/// (the devices of an earlier line, given back by the hub), which a stats message then takes;
/// other messages leave it as room. An `Err` is a reason to drop the connection.
pub(crate) fn parse_line_into(
    line: &[u8],
    devices: &mut Vec<DeviceAllocatorStats>,
) -> Result<Incoming, String> {
    let text = std::str::from_utf8(line).map_err(|_| "a line is not UTF-8".to_string())?;
    let mut json = serde_json::Deserializer::from_str(text);
    let top = (TopSeed(devices).deserialize(&mut json))
        .and_then(|top| json.end().map(|()| top))
        .map_err(|e| format!("a line is not JSON ({e})"))?;
    let Top(Some(fields)) = top else {
        return Err("a line is not a JSON object".to_string());
    };
    match &fields.v {
        Some(Scalar::U64(PROTOCOL_VERSION)) => {}
        other => {
            let v = other.as_ref().map_or("none".to_string(), Scalar::describe);
            return Err(format!("protocol version {v}, expected {PROTOCOL_VERSION}"));
        }
    }
    Ok(match fields.kind {
        Some(Kind::Hello) => Incoming::Hello(fields.hello()),
        Some(Kind::Stats) => Incoming::Stats(fields.stats(devices)),
        Some(Kind::Reply) => match fields.reply() {
            Some(reply) => Incoming::Reply(reply),
            None => return Err("a reply without an integer id or a boolean ok".to_string()),
        },
        Some(Kind::Event) => Incoming::Event(fields.event()),
        Some(Kind::Other) | None => Incoming::Ignored,
    })
}

/// The whole line: an object's fields, or `None` for anything else. Not boxed: a line is
/// parsed with no allocation of its own beyond what it carries.
struct Top(Option<Fields>);

/// A message's `type`, read without keeping its text.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Hello,
    Stats,
    Reply,
    Event,
    /// Another string, or not a string: the line is ignored.
    Other,
}

impl<'de> de::Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KindVisitor;
        impl<'de> Visitor<'de> for KindVisitor {
            type Value = Kind;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message type")
            }
            fn visit_str<E>(self, v: &str) -> Result<Kind, E> {
                Ok(match v {
                    "hello" => Kind::Hello,
                    "stats" => Kind::Stats,
                    "reply" => Kind::Reply,
                    "event" => Kind::Event,
                    _ => Kind::Other,
                })
            }
            scalars_but_text_are!(Kind::Other);
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Kind, A::Error> {
                drain_seq(seq).map(|()| Kind::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Kind, A::Error> {
                drain_map(map).map(|()| Kind::Other)
            }
        }
        deserializer.deserialize_any(KindVisitor)
    }
}

/// Every top-level field the hub reads, whatever the message type (the type may come last).
#[derive(Default)]
struct Fields {
    v: Option<Scalar>,
    kind: Option<Kind>,
    python: Option<Scalar>,
    torch: Option<Scalar>,
    rank: Option<Scalar>,
    local_rank: Option<Scalar>,
    world_size: Option<Scalar>,
    alloc_conf: Option<Scalar>,
    cuda_visible_devices: Option<Scalar>,
    step: Option<Scalar>,
    step_time_s: Option<Scalar>,
    /// How many entries the `devices` list had; `None` without a list.
    listed: Option<usize>,
    id: Option<Scalar>,
    ok: Option<Scalar>,
    cmd: Option<Scalar>,
    path: Option<Scalar>,
    error: Option<Scalar>,
    event_kind: Option<Scalar>,
    device: Option<Scalar>,
    ts: Option<Scalar>,
    requested_bytes: Option<Scalar>,
    device_allocated: Option<Scalar>,
    device_free: Option<Scalar>,
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
    "cuda_visible_devices",
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
    "ts",
    "requested_bytes",
    "device_allocated",
    "device_free",
];

impl Fields {
    fn slot(&mut self, index: usize) -> Option<&mut Option<Scalar>> {
        Some(match TOP_FIELDS[index] {
            "v" => &mut self.v,
            "python" => &mut self.python,
            "torch" => &mut self.torch,
            "rank" => &mut self.rank,
            "local_rank" => &mut self.local_rank,
            "world_size" => &mut self.world_size,
            "alloc_conf" => &mut self.alloc_conf,
            "cuda_visible_devices" => &mut self.cuda_visible_devices,
            "step" => &mut self.step,
            "step_time_s" => &mut self.step_time_s,
            "id" => &mut self.id,
            "ok" => &mut self.ok,
            "cmd" => &mut self.cmd,
            "path" => &mut self.path,
            "error" => &mut self.error,
            "kind" => &mut self.event_kind,
            "device" => &mut self.device,
            "ts" => &mut self.ts,
            "requested_bytes" => &mut self.requested_bytes,
            "device_allocated" => &mut self.device_allocated,
            "device_free" => &mut self.device_free,
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
        // A rank is below the world size: with a world size of 0 or past the bound, no rank
        // is believed either.
        let world_size = number(&self.world_size);
        let ranks = world_size.map_or(MAX_WORLD_SIZE, |w| w.min(MAX_WORLD_SIZE));
        let rank = |s: &Option<Scalar>| number(s).filter(|&r| r < ranks);
        Hello {
            python: text(&self.python),
            torch: text(&self.torch),
            rank: rank(&self.rank),
            local_rank: rank(&self.local_rank),
            world_size: world_size.filter(|w| (1..=MAX_WORLD_SIZE).contains(w)),
            alloc_conf: text(&self.alloc_conf),
            cuda_visible_devices: text(&self.cuda_visible_devices),
        }
    }

    fn stats(self, devices: &mut Vec<DeviceAllocatorStats>) -> Stats {
        if self.listed.is_none() {
            devices.clear();
        }
        let listed = self.listed.unwrap_or(0);
        let mut kept = std::mem::take(devices);
        kept.sort_by_key(|d| d.index);
        kept.dedup_by_key(|d| d.index);
        Stats {
            step: self.step.as_ref().and_then(Scalar::as_u64),
            step_time_seconds: self
                .step_time_s
                .as_ref()
                .and_then(Scalar::as_f64)
                .filter(|t| (0.0..=MAX_STEP_TIME_S).contains(t)),
            ts: self
                .ts
                .as_ref()
                .and_then(Scalar::as_f64)
                .filter(|t| t.is_finite() && *t >= 0.0),
            devices: kept,
            listed,
        }
    }

    fn event(&self) -> AgentEvent {
        let text = |s: &Option<Scalar>| s.as_ref().and_then(Scalar::text).map(str::to_string);
        let bytes = |s: &Option<Scalar>| s.as_ref().and_then(Scalar::as_u64);
        AgentEvent {
            kind: text(&self.event_kind).unwrap_or_else(|| "unknown".to_string()),
            device: self.device.as_ref().and_then(Scalar::as_u32),
            ts: self
                .ts
                .as_ref()
                .and_then(Scalar::as_f64)
                .filter(|t| t.is_finite() && *t >= 0.0),
            requested_bytes: bytes(&self.requested_bytes),
            device_allocated: bytes(&self.device_allocated),
            device_free: bytes(&self.device_free),
            step: bytes(&self.step),
            path: text(&self.path),
            error: text(&self.error),
        }
    }

    fn reply(&self) -> Option<AgentReply> {
        let text = |s: &Option<Scalar>| s.as_ref().and_then(Scalar::text).map(str::to_string);
        let Some(Scalar::U64(id)) = self.id else {
            return None;
        };
        let Some(Scalar::Bool(ok)) = self.ok else {
            return None;
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

/// Reads a [`Top`], a `devices` list into the room given.
struct TopSeed<'a>(&'a mut Vec<DeviceAllocatorStats>);

seed_is_visitor!(TopSeed);

impl<'de> Visitor<'de> for TopSeed<'_> {
    type Value = Top;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Top, A::Error> {
        let devices = self.0;
        let mut fields = Fields::default();
        visit_fields(map, TOP_FIELDS, |index, map| {
            match fields.slot(index) {
                Some(slot) => *slot = Some(map.next_value()?),
                None if TOP_FIELDS[index] == "type" => {
                    fields.kind = Some(map.next_value()?);
                }
                None => fields.listed = map.next_value_seed(DevicesInto(&mut *devices))?,
            }
            Ok(())
        })?;
        Ok(Top(Some(fields)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Top, A::Error> {
        drain_seq(seq).map(|()| Top(None))
    }
    scalars_are!(Top(None));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oom_event_keeps_its_sizes_path_and_time() {
        let line = br#"{"v":1,"type":"event","kind":"oom","ts":1767225601.5,"device":1,"source":"observer","requested_bytes":2147483648,"device_allocated":81000000000,"device_free":12345,"path":"/run/t/42-oom-20260101-120001.pickle","bytes":9,"step":17,"extra":{"a":[1]}}"#;
        let Ok(Incoming::Event(event)) = parse_line(line) else {
            panic!("not an event");
        };
        assert_eq!(
            event,
            AgentEvent {
                kind: "oom".into(),
                device: Some(1),
                ts: Some(1767225601.5),
                requested_bytes: Some(2 << 30),
                device_allocated: Some(81_000_000_000),
                device_free: Some(12345),
                path: Some("/run/t/42-oom-20260101-120001.pickle".into()),
                error: None,
                step: Some(17),
            }
        );
    }

    fn hello(rank: &str, world_size: &str) -> Hello {
        let line = format!(
            r#"{{"v":1,"type":"hello","rank":{rank},"local_rank":{rank},"world_size":{world_size}}}"#
        );
        let Ok(Incoming::Hello(hello)) = parse_line(line.as_bytes()) else {
            panic!("not a hello: {line}");
        };
        hello
    }

    #[test]
    fn a_rank_not_below_its_world_size_is_unknown() {
        let ranks = |h: Hello| (h.rank, h.local_rank, h.world_size);
        assert_eq!(ranks(hello("3", "8")), (Some(3), Some(3), Some(8)));
        assert_eq!(ranks(hello("8", "8")), (None, None, Some(8)));
        assert_eq!(ranks(hello("4294967295", "0")), (None, None, None));
        assert_eq!(ranks(hello("0", "0")), (None, None, None));
        assert_eq!(ranks(hello("4294967295", "null")), (None, None, None));
        assert_eq!(ranks(hello("5", "4294967295")), (Some(5), Some(5), None));
        let most = MAX_WORLD_SIZE.to_string();
        assert_eq!(
            ranks(hello("0", &most)),
            (Some(0), Some(0), Some(MAX_WORLD_SIZE))
        );
    }

    #[test]
    fn a_step_time_over_a_day_is_unknown() {
        let step_time = |t: &str| {
            let line = format!(r#"{{"v":1,"type":"stats","step":1,"step_time_s":{t}}}"#);
            let Ok(Incoming::Stats(stats)) = parse_line(line.as_bytes()) else {
                panic!("not stats: {line}");
            };
            stats.step_time_seconds
        };
        assert_eq!(step_time("0.41"), Some(0.41));
        assert_eq!(step_time("86400"), Some(86_400.0));
        for absurd in ["86401", "1e308", "-1", "\"slow\""] {
            assert_eq!(step_time(absurd), None, "{absurd}");
        }
    }

    #[test]
    fn an_oom_event_with_odd_fields_keeps_what_is_sound() {
        let line = br#"{"v":1,"type":"event","kind":"oom","ts":-3,"requested_bytes":-1,"device_free":"lots","path":null,"error":"disk full"}"#;
        let Ok(Incoming::Event(event)) = parse_line(line) else {
            panic!("not an event");
        };
        assert_eq!(event.ts, None);
        assert_eq!((event.requested_bytes, event.device_free), (None, None));
        assert_eq!(event.path, None);
        assert_eq!(event.error.as_deref(), Some("disk full"));
    }
}
