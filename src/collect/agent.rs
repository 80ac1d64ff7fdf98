//! Client side of agent protocol v1 (assets/agent-protocol.md): finding the agents' sockets,
//! reading their hello/stats lines, sending commands, and turning what they said into
//! [`TorchInfo`](crate::model::TorchInfo). What both ends share (the version, the line bound,
//! the commands, where sockets live) is [`crate::protocol`]'s.
//!
//! The parts, and why they are apart:
//! - `hub`: [`AgentHub`], which the sampler polls: finds sockets, connects, caps connections,
//!   sends commands and times them out. It never blocks on an agent, and lists the directory
//!   only when it may have changed (`hub/scan`);
//! - `reader`: the one thread that reads every connection, with epoll (mio), under a budget of
//!   bytes pending across all connections;
//! - `lines` and `parse`: a linear line splitter and a parser that keeps only what the hub uses;
//! - `state`: what the reader has learned of each connection, shared with the hub, and each
//!   agent's figures as [`Heard`], built again only when it says something new.
//!
//! Every input an agent controls has a bound ([`MAX_LINE_BYTES`], [`MAX_CONNECTIONS`],
//! [`MAX_DEVICES_PER_AGENT`], [`PENDING_BYTES_BUDGET`]): a hostile local user can open
//! connections and send bytes, and costs root's monitor a log line, not its memory.

use std::time::Duration;

mod connection;
mod devices;
mod hub;
mod json;
mod lines;
mod parse;
mod reader;
mod state;

/// The socket directory check the hub applies, for tests that make their own directory.
pub use crate::protocol::sockets::ensure_socket_dir;
use crate::protocol::{MAX_LINE_BYTES, PROTOCOL_VERSION};
pub use hub::AgentHub;
pub(crate) use hub::CommandOutcome;
pub(crate) use parse::AgentEvent;
/// For tests that build a [`CommandOutcome::Replied`] by hand.
#[cfg(test)]
pub(crate) use parse::AgentReply;
pub(crate) use state::{AgentNews, Heard, Silent};

/// Most agent connections open at once; past it the one idle longest is dropped.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// Most devices read from one stats message; the rest are ignored.
pub(crate) const MAX_DEVICES_PER_AGENT: usize = 64;
/// Most bytes of unfinished lines held across all connections; past it the connection holding
/// the most is dropped.
pub(crate) const PENDING_BYTES_BUDGET: usize = 8 << 20;
/// How long a command waits for its reply before the user is told it went unanswered.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
pub(crate) mod tests;
