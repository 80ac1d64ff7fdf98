//! Client side of agent protocol v1 (assets/agent-protocol.md): finding the agents' sockets,
//! reading their hello/stats lines, sending commands, and turning what they said into
//! [`TorchInfo`](crate::model::TorchInfo).
//!
//! The parts, and why they are apart:
//! - `sockets`: where sockets live and who may use them (shared with the tch agent server);
//! - `hub`: [`AgentHub`], which the sampler polls: finds sockets, connects, caps connections,
//!   sends commands and times them out. It never blocks on an agent;
//! - `reader`: the one thread that reads every connection, with epoll (mio), under a budget of
//!   bytes pending across all connections;
//! - `lines` and `parse`: a linear line splitter and a parser that keeps only what the hub uses;
//! - `state`: what the reader has learned of each connection, shared with the hub.
//!
//! Every input an agent controls has a bound ([`MAX_LINE_BYTES`], [`MAX_CONNECTIONS`],
//! [`MAX_DEVICES_PER_AGENT`], [`PENDING_BYTES_BUDGET`]): a hostile local user can open
//! connections and send bytes, and costs root's monitor a log line, not its memory.

use std::time::Duration;

use serde_json::json;

mod connection;
mod devices;
mod hub;
mod json;
mod lines;
mod parse;
mod reader;
mod sockets;
mod state;

pub use hub::AgentHub;
pub(crate) use hub::CommandOutcome;
pub use parse::{AgentEvent, AgentReply};
pub use sockets::{
    default_socket_dir, ensure_own_socket_dir, ensure_socket_dir, inspect_socket_dir,
    socket_dir_from,
};
pub(crate) use sockets::{effective_uid, peer_credentials};

/// The protocol version this client speaks; lines with another `v` drop the connection.
pub const PROTOCOL_VERSION: u64 = 1;
/// Longest line accepted from an agent, newline excluded.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Most agent connections open at once; past it the one idle longest is dropped.
pub const MAX_CONNECTIONS: usize = 256;
/// Most devices read from one stats message; the rest are ignored.
pub const MAX_DEVICES_PER_AGENT: usize = 64;
/// Most bytes of unfinished lines held across all connections; past it the connection holding
/// the most is dropped.
pub const PENDING_BYTES_BUDGET: usize = 8 << 20;
/// How long a command waits for its reply before the user is told it went unanswered.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// A command torchtop can send to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentCommand {
    /// Send stats every `ms` milliseconds (the agent accepts 10 to 3,600,000).
    SetInterval { ms: u64 },
    /// `torch.cuda.reset_peak_memory_stats` on the devices the process uses.
    ResetPeak,
    /// Dump `torch.cuda.memory._snapshot()` to a 0600 file beside the socket.
    Snapshot,
}

impl AgentCommand {
    /// The command's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            AgentCommand::SetInterval { .. } => "set_interval",
            AgentCommand::ResetPeak => "reset_peak",
            AgentCommand::Snapshot => "snapshot",
        }
    }

    /// The request in words, for sentences such as "did not answer the snapshot request".
    pub fn request_words(self) -> &'static str {
        match self {
            AgentCommand::SetInterval { .. } => "interval change request",
            AgentCommand::ResetPeak => "peak reset request",
            AgentCommand::Snapshot => "snapshot request",
        }
    }

    fn to_line(self, id: u64) -> String {
        let mut msg = json!({"v": PROTOCOL_VERSION, "type": "cmd", "id": id, "cmd": self.name()});
        if let AgentCommand::SetInterval { ms } = self {
            msg["ms"] = json!(ms);
        }
        format!("{msg}\n")
    }
}

#[cfg(test)]
pub(crate) mod tests;
