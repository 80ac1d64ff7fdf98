//! Agent protocol v1 (assets/agent-protocol.md): what both ends share. The version, the bound on
//! a line, the bounds on an agent's interval, the commands torchtop sends and the messages the
//! tch agent ([`crate::tch_agent`]) writes, as typed serde structs; and where sockets live and
//! who may use them ([`sockets`]).
//!
//! The client (the hub in [`crate::collect::agent`]) does not read agents' lines through these
//! types: a hostile agent controls those bytes, so the hub reads them with a bounded parser of
//! its own that skips what it does not use without building it.

pub(crate) mod sockets;

use serde::Serialize;
use serde_json::{Map, Value};

pub use sockets::{default_socket_dir, ensure_own_socket_dir, ensure_socket_dir, socket_dir_from};

/// The protocol version both ends speak; a line with another `v` drops the connection.
pub const PROTOCOL_VERSION: u64 = 1;
/// The longest line either side may send, newline excluded.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// The shortest stats interval an agent accepts, in milliseconds.
pub const MIN_INTERVAL_MS: u64 = 10;
/// The longest stats interval an agent accepts, in milliseconds.
pub const MAX_INTERVAL_MS: u64 = 3_600_000;

/// A command torchtop can send to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentCommand {
    /// Send stats every `ms` milliseconds ([`MIN_INTERVAL_MS`] to [`MAX_INTERVAL_MS`]).
    SetInterval { ms: u64 },
    /// `torch.cuda.reset_peak_memory_stats` on the devices the process uses.
    ResetPeak,
    /// Dump `torch.cuda.memory._snapshot()` to a 0600 file beside the socket.
    Snapshot,
}

impl AgentCommand {
    /// The command's name on the wire.
    pub(crate) fn name(self) -> &'static str {
        match self {
            AgentCommand::SetInterval { .. } => "set_interval",
            AgentCommand::ResetPeak => "reset_peak",
            AgentCommand::Snapshot => "snapshot",
        }
    }

    /// The request in words, for sentences such as "did not answer the snapshot request".
    pub(crate) fn request_words(self) -> &'static str {
        match self {
            AgentCommand::SetInterval { .. } => "interval change request",
            AgentCommand::ResetPeak => "peak reset request",
            AgentCommand::Snapshot => "snapshot request",
        }
    }

    /// The command as one line of the protocol, newline included.
    pub(crate) fn to_line(self, id: u64) -> String {
        let ms = match self {
            AgentCommand::SetInterval { ms } => Some(ms),
            _ => None,
        };
        let message = CommandMessage {
            v: PROTOCOL_VERSION,
            kind: "cmd",
            id,
            cmd: self.name(),
            ms,
        };
        line(&message)
    }
}

/// `{"type": "cmd"}`: what torchtop asks of an agent.
#[derive(Debug, Serialize)]
struct CommandMessage {
    v: u64,
    #[serde(rename = "type")]
    kind: &'static str,
    id: u64,
    cmd: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ms: Option<u64>,
}

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

fn line<T: Serialize>(message: &T) -> String {
    // Serializing these plain structs cannot fail: every key is a string and every number
    // finite or null.
    let mut text = serde_json::to_string(message).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_has_the_version_its_id_and_only_the_fields_it_needs() {
        let line: Value =
            serde_json::from_str(&AgentCommand::SetInterval { ms: 500 }.to_line(3)).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"v": 1, "type": "cmd", "id": 3, "cmd": "set_interval", "ms": 500})
        );
        let line: Value = serde_json::from_str(&AgentCommand::Snapshot.to_line(4)).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"v": 1, "type": "cmd", "id": 4, "cmd": "snapshot"})
        );
    }

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
