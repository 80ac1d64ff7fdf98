//! The messages an agent writes (hello, stats, event, reply), as the tch agent sends them, and
//! the interval bounds it accepts for `set_interval`.

use serde::Serialize;
use serde_json::{Map, Value};

use super::{line, PROTOCOL_VERSION};

/// The shortest stats interval an agent accepts, in milliseconds.
pub(crate) const MIN_INTERVAL_MS: u64 = 10;
/// The longest stats interval an agent accepts, in milliseconds.
pub(crate) const MAX_INTERVAL_MS: u64 = 3_600_000;

/// `{"type": "hello"}`: who the process is, sent first on every connection.
#[derive(Debug, Serialize)]
pub(crate) struct Hello<'a> {
    pub(crate) pid: u32,
    pub(crate) argv: &'a [String],
    /// The Python version; `None` from a Rust agent.
    pub(crate) python: Option<&'a str>,
    pub(crate) torch: Option<&'a str>,
    pub(crate) rank: Option<i64>,
    pub(crate) local_rank: Option<i64>,
    pub(crate) world_size: Option<i64>,
    pub(crate) alloc_conf: Option<&'a str>,
    /// `CUDA_VISIBLE_DEVICES` in the process, which maps `cuda:N` to a physical GPU (optional
    /// in v1: left out when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cuda_visible_devices: Option<&'a str>,
    pub(crate) interval_ms: u64,
    /// The agent's name and version.
    pub(crate) agent: &'a str,
}

/// `{"type": "stats"}`: the allocator figures of each device in use.
#[derive(Debug, Serialize)]
pub(crate) struct Stats {
    pub(crate) seq: u64,
    /// Seconds since the Unix epoch.
    pub(crate) ts: f64,
    pub(crate) step: Option<u64>,
    pub(crate) step_time_s: Option<f64>,
    pub(crate) interval_ms: u64,
    pub(crate) devices: Vec<DeviceStats>,
}

/// One device of a stats message: its index and the flat `torch.cuda.memory_stats()` keys.
#[derive(Debug, Serialize)]
pub(crate) struct DeviceStats {
    pub(crate) index: u32,
    pub(crate) stats: Map<String, Value>,
}

/// `{"type": "event"}`: something seen between stats; the tch agent reports `kind: "oom"`.
#[derive(Debug, Serialize)]
pub(crate) struct Event {
    pub(crate) kind: &'static str,
    pub(crate) ts: f64,
    pub(crate) device: u32,
    pub(crate) num_ooms: i64,
    /// How the agent noticed: `num_ooms` rising between two readings.
    pub(crate) source: &'static str,
    /// The program's step count when it was noticed: a later, larger count says it went on.
    pub(crate) step: Option<u64>,
}

/// `{"type": "reply"}`: the answer to one command, echoing its id and name.
#[derive(Debug, Serialize)]
pub(crate) struct Reply {
    /// The command's id as sent (any JSON integer).
    pub(crate) id: Value,
    /// The command's name as sent, whatever JSON it was.
    pub(crate) cmd: Value,
    pub(crate) ok: bool,
    /// Why the command failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// What the command reports on success (`devices`, `path` and `bytes`, `interval_ms`).
    #[serde(flatten)]
    pub(crate) fields: Map<String, Value>,
}

/// A message with its `v` and `type`, as one line.
#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    v: u64,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    body: &'a T,
}

/// `message` as a line of type `kind`, newline included.
pub(crate) fn message_line<T: Serialize>(kind: &'static str, body: &T) -> String {
    line(&Envelope {
        v: PROTOCOL_VERSION,
        kind,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_flattens_its_fields_beside_the_envelope() {
        let mut fields = Map::new();
        fields.insert("path".into(), "/tmp/x.pickle".into());
        let reply = Reply {
            id: 7.into(),
            cmd: "snapshot".into(),
            ok: true,
            error: None,
            fields,
        };
        let line: Value = serde_json::from_str(&message_line("reply", &reply)).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"v": 1, "type": "reply", "id": 7, "cmd": "snapshot", "ok": true,
                               "path": "/tmp/x.pickle"})
        );
    }
}
