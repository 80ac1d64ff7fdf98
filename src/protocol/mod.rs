//! Agent protocol v1 (assets/agent-protocol.md): what both ends share. The version, the bound on
//! a line, the commands torchtop sends and the messages the tch agent (`crate::tch_agent`)
//! writes, as typed serde structs; and where sockets live and who may use them ([`sockets`]).
//!
//! The client (the hub in [`crate::collect::agent`]) does not read agents' lines through these
//! types: a hostile agent controls those bytes, so the hub reads them with a bounded parser of
//! its own that skips what it does not use without building it.

// The messages an agent writes are needed by the tch agent only, which is built with the
// `torch` feature (and for its tests).
#[cfg(any(feature = "torch", test))]
mod messages;
pub(crate) mod sockets;

use serde::Serialize;

#[cfg(any(feature = "torch", test))]
pub(crate) use messages::*;

#[cfg(feature = "torch")]
pub(crate) use sockets::ensure_own_socket_dir;
pub(crate) use sockets::{default_socket_dir, socket_dir_from};

/// The protocol version both ends speak; a line with another `v` drops the connection.
pub(crate) const PROTOCOL_VERSION: u64 = 1;
/// The longest line either side may send, newline excluded.
pub(crate) const MAX_LINE_BYTES: usize = 1 << 20;
/// The largest `world_size` believed (and every rank is below it): about ten times the largest
/// training jobs run so far. A hello's larger world size, or a rank not below its world size,
/// is unknown; so is such a label in `torchtop cluster`.
pub(crate) const MAX_WORLD_SIZE: u32 = 1 << 20;
/// The longest `step_time_s` believed, in seconds: a day. A longer one is unknown, in an
/// agent's stats and in `torchtop cluster` alike.
pub(crate) const MAX_STEP_TIME_S: f64 = 86_400.0;

/// The `memory_stats` keys torchtop reads from a device's `stats`, in the order of
/// [`crate::model::DeviceAllocatorStats`]' fields (the hub's parser relies on it). Agents send
/// only these (the Python agent's `SENT_STATS` is the same list); the hub ignores any other key,
/// so an older agent that sends the whole `memory_stats()` dict gives the same figures.
pub(crate) const STAT_KEYS: &[&str] = &[
    "allocated_bytes.all.current",
    "reserved_bytes.all.current",
    "active_bytes.all.current",
    "inactive_split_bytes.all.current",
    "requested_bytes.all.current",
    "allocated_bytes.all.peak",
    "segment.all.current",
    "num_alloc_retries",
    "num_ooms",
    "reserved_bytes.all.peak",
    "reserved_bytes.large_pool.current",
    "reserved_bytes.small_pool.current",
    "allocation.all.allocated",
    "allocation.all.freed",
    "oversize_allocations.current",
    "oversize_segments.current",
    "max_split_size",
];

/// A command torchtop can send to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgentCommand {
    /// `torch.cuda.reset_peak_memory_stats` on the devices the process uses.
    ResetPeak,
    /// Dump `torch.cuda.memory._snapshot()` to a 0600 file beside the socket.
    Snapshot,
    /// Record memory history (stack traces of allocations) with [`HISTORY`]'s settings until
    /// the next snapshot is written, unless it is on already (then nothing changes).
    RecordHistory,
}

/// What `record_history` asks for: every event, a bounded trace (recent torch versions keep an
/// unbounded one by default), Python stacks only (C++ unwinding costs far more), and only until
/// the next snapshot: left on, every allocation of the program pays for its stack capture.
#[derive(Debug, Serialize)]
pub(crate) struct HistorySettings {
    enabled: &'static str,
    max_entries: u64,
    stacks: &'static str,
    context: &'static str,
    until_snapshot: bool,
}

/// The settings torchtop's `S` key records with.
pub(crate) const HISTORY: HistorySettings = HistorySettings {
    enabled: "all",
    max_entries: 100_000,
    stacks: "python",
    context: "all",
    until_snapshot: true,
};

impl AgentCommand {
    /// The command's name on the wire.
    pub(crate) fn name(self) -> &'static str {
        match self {
            AgentCommand::ResetPeak => "reset_peak",
            AgentCommand::Snapshot => "snapshot",
            AgentCommand::RecordHistory => "record_history",
        }
    }

    /// The request in words, for sentences such as "did not answer the snapshot request".
    pub(crate) fn request_words(self) -> &'static str {
        match self {
            AgentCommand::ResetPeak => "peak reset request",
            AgentCommand::Snapshot => "snapshot request",
            AgentCommand::RecordHistory => "request to record memory history",
        }
    }

    /// The command as one line of the protocol, newline included.
    pub(crate) fn to_line(self, id: u64) -> String {
        let message = CommandMessage {
            v: PROTOCOL_VERSION,
            kind: "cmd",
            id,
            cmd: self.name(),
            history: (self == AgentCommand::RecordHistory).then_some(&HISTORY),
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
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    history: Option<&'static HistorySettings>,
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
    use serde_json::Value;

    #[test]
    fn a_command_line_has_the_version_its_id_and_only_the_fields_it_needs() {
        let line: Value = serde_json::from_str(&AgentCommand::Snapshot.to_line(4)).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"v": 1, "type": "cmd", "id": 4, "cmd": "snapshot"})
        );
    }

    #[test]
    fn record_history_carries_its_settings() {
        let line: Value = serde_json::from_str(&AgentCommand::RecordHistory.to_line(5)).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"v": 1, "type": "cmd", "id": 5, "cmd": "record_history",
                               "enabled": "all", "max_entries": 100000, "stacks": "python",
                               "context": "all", "until_snapshot": true})
        );
    }
}
