//! What the reader thread has learned of each connection, and the hub's log: the state the two
//! threads share behind one mutex. Everything here is bounded: the latest hello and stats, the
//! replies to commands this hub sent (at most one per command), a short queue of events, and a
//! ring of log lines.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::parse::{AgentEvent, AgentReply, Hello, Stats};
use crate::model::torch::{refill_devices, refill_text};
use crate::model::{DeviceAllocatorStats, TorchInfo};
use crate::protocol::AgentCommand;

/// Lines the log keeps; older ones are dropped.
const LOG_CAPACITY: usize = 64;
/// The longest log line kept, in bytes (a status line is far shorter).
const MAX_LOG_LINE: usize = 400;
/// Events one connection keeps until the hub takes them; older ones are dropped.
pub(crate) const EVENT_CAPACITY: usize = 64;

/// A connection's number, unique for the hub's lifetime (also its epoll token).
pub(crate) type ConnId = usize;

/// A command sent on a connection and not answered yet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Awaiting {
    pub(crate) command: AgentCommand,
    pub(crate) sent_at: Instant,
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ending {
    pub(crate) reason: String,
    /// The agent broke the protocol or a bound: it is not reconnected for a while.
    pub(crate) bad_input: bool,
}

/// One connection as the reader has seen it.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// The pid of the agent's process, from `SO_PEERCRED` (else the socket's name).
    pub(crate) pid: u32,
    /// When that process started, as read when the connection opened; `None` where unknown.
    pub(crate) start_ticks: Option<u64>,
    pub(crate) hello: Option<Hello>,
    pub(crate) stats: Option<Stats>,
    pub(crate) stats_at: Option<Instant>,
    /// When the agent last completed a line (or when the connection opened): the idle clock.
    pub(crate) last_line_at: Instant,
    /// When the connection opened.
    opened_at: Instant,
    /// Commands this hub sent on this connection, by id, until answered or timed out.
    pub(crate) awaiting: HashMap<u64, Awaiting>,
    /// Answers to commands in `awaiting`, with the command they answer.
    pub(crate) replies: Vec<(Awaiting, AgentReply)>,
    pub(crate) events: VecDeque<AgentEvent>,
    pub(crate) ended: Option<Ending>,
    /// Whether the log already said that this agent lists too many devices.
    pub(crate) warned_devices: bool,
    /// Whether the log already said that this agent sent a reply nobody asked for.
    pub(crate) warned_unsolicited: bool,
    /// A hello or stats came since `info` was built: the reader sets it, the hub's poll clears it.
    pub(crate) fresh: bool,
    /// What the agent has said, as of its latest hello and stats; built by the hub's poll.
    info: Option<Arc<TorchInfo>>,
}

/// One agent's latest figures, as a poll hands them to the sampler.
#[derive(Debug, Clone)]
pub(crate) struct Heard {
    /// Built again only when a hello or stats arrives; `age_seconds` is `None` (the age is
    /// the join's, from `stats_at`).
    pub(crate) info: Arc<TorchInfo>,
    /// When the latest stats arrived; `None` before the first.
    pub(crate) stats_at: Option<Instant>,
    /// When the agent's process started: the figures belong to no other process of that pid.
    pub(crate) start_ticks: Option<u64>,
}

/// An agent whose socket accepted the hub's connection and which has said nothing since.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Silent {
    pub(crate) pid: u32,
    /// When its process started, as read when the connection opened.
    pub(crate) start_ticks: Option<u64>,
    pub(crate) seconds: f64,
}

impl Heard {
    /// Whether these figures may go on a process that started at `start_ticks`.
    pub(crate) fn is_of(&self, start_ticks: Option<u64>) -> bool {
        match (self.start_ticks, start_ticks) {
            (Some(ours), Some(theirs)) => ours == theirs,
            _ => true,
        }
    }

    /// Seconds since the stats arrived, as of `now`.
    pub(crate) fn age_seconds(&self, now: Instant) -> Option<f64> {
        (self.stats_at).map(|at| now.saturating_duration_since(at).as_secs_f64())
    }
}

impl ConnState {
    pub(crate) fn new(pid: u32, start_ticks: Option<u64>, now: Instant) -> Self {
        ConnState {
            pid,
            start_ticks,
            hello: None,
            stats: None,
            stats_at: None,
            last_line_at: now,
            opened_at: now,
            awaiting: HashMap::new(),
            replies: Vec::new(),
            events: VecDeque::new(),
            ended: None,
            warned_devices: false,
            warned_unsolicited: false,
            fresh: false,
            info: None,
        }
    }

    /// How long the agent has said nothing since its socket accepted the connection, as of
    /// `now`: an agent sends its hello at once, and one that does not is in a process that is
    /// stopped or whose interpreter is held. `None` once the hello came, or the connection ended.
    pub(crate) fn silent_for(&self, now: Instant) -> Option<Duration> {
        if self.hello.is_some() || self.ended.is_some() {
            return None;
        }
        Some(now.saturating_duration_since(self.opened_at))
    }

    /// What this agent has said; `None` before its hello. The figures are built again only
    /// after a hello or stats came, into the same allocation when no one else holds it (the
    /// caller drops what the previous poll handed out first).
    pub(crate) fn heard(&mut self) -> Option<Heard> {
        let hello = self.hello.as_ref()?;
        match &mut self.info {
            Some(_) if !self.fresh => {}
            Some(info) => match Arc::get_mut(info) {
                Some(kept) => refill_torch_info(kept, hello, self.stats.as_ref()),
                None => *info = Arc::new(torch_info(hello, self.stats.as_ref())),
            },
            None => self.info = Some(Arc::new(torch_info(hello, self.stats.as_ref()))),
        }
        self.fresh = false;
        Some(Heard {
            info: Arc::clone(self.info.as_ref()?),
            stats_at: self.stats_at,
            start_ticks: self.start_ticks,
        })
    }
}

/// A ring of recent log lines, with a count of every line ever logged so a reader can tell
/// which lines are new after old ones fell off.
#[derive(Debug, Default)]
pub(crate) struct Log {
    lines: VecDeque<String>,
    total: usize,
}

impl Log {
    /// Adds a line, cut to [`MAX_LOG_LINE`] bytes: a line can carry a path a user chose.
    pub(crate) fn push(&mut self, mut line: String) {
        if line.len() > MAX_LOG_LINE {
            let end = crate::format::within_bytes(&line, MAX_LOG_LINE).len();
            line.truncate(end);
            line.push('…');
        }
        self.total += 1;
        if self.lines.len() == LOG_CAPACITY {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.iter().cloned().collect()
    }

    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// The lines after the first `seen` ever logged, as far as the ring still holds them.
    pub(crate) fn since(&self, seen: usize) -> Vec<String> {
        let fresh = self.total.saturating_sub(seen).min(self.lines.len());
        self.lines
            .range(self.lines.len() - fresh..)
            .cloned()
            .collect()
    }
}

/// The state both threads see.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) conns: HashMap<ConnId, ConnState>,
    pub(crate) log: Log,
}

/// Locks the shared state. Neither thread panics while holding it, but a poisoned lock must not
/// take the monitor down with it.
pub(crate) fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// With the cudaMallocAsync backend PyTorch fills only allocated, active and reserved bytes;
/// the other counters read 0 without meaning it.
fn uses_cuda_malloc_async(alloc_conf: Option<&str>) -> bool {
    alloc_conf.is_some_and(|conf| conf.contains("cudaMallocAsync"))
}

/// [`torch_info`] into `info`, reusing its text and device buffers.
fn refill_torch_info(info: &mut TorchInfo, hello: &Hello, stats: Option<&Stats>) {
    refill_text(&mut info.python, hello.python.as_deref());
    refill_text(&mut info.torch, hello.torch.as_deref());
    refill_text(&mut info.alloc_conf, hello.alloc_conf.as_deref());
    let visible = hello.cuda_visible_devices.as_deref();
    refill_text(&mut info.cuda_visible_devices, visible);
    info.rank = hello.rank;
    info.local_rank = hello.local_rank;
    info.world_size = hello.world_size;
    info.step = stats.and_then(|s| s.step);
    info.step_time_seconds = stats.and_then(|s| s.step_time_seconds);
    info.stats_unix_seconds = stats.and_then(|s| s.ts);
    info.age_seconds = None;
    refill_devices(&mut info.devices, stats.map_or(&[], |s| &s.devices[..]));
    if uses_cuda_malloc_async(hello.alloc_conf.as_deref()) {
        info.devices.iter_mut().for_each(forget_unfilled);
    }
}

/// The counters cudaMallocAsync leaves at 0 without meaning it, made `None`.
fn forget_unfilled(device: &mut DeviceAllocatorStats) {
    device.inactive_split_bytes = None;
    device.requested_bytes = None;
    device.segments = None;
    device.alloc_retries = None;
    device.ooms = None;
}

/// Builds a [`TorchInfo`] from an agent's latest hello and stats (`None`: not received yet).
/// Pure: `age_seconds` and `non_pytorch_bytes` stay `None`.
pub(crate) fn torch_info(hello: &Hello, stats: Option<&Stats>) -> TorchInfo {
    let malloc_async = uses_cuda_malloc_async(hello.alloc_conf.as_deref());
    let devices = stats
        .map(|s| s.devices.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|mut device| {
            if malloc_async {
                forget_unfilled(&mut device);
            }
            device
        })
        .collect();
    TorchInfo {
        python: hello.python.clone(),
        torch: hello.torch.clone(),
        rank: hello.rank,
        local_rank: hello.local_rank,
        world_size: hello.world_size,
        alloc_conf: hello.alloc_conf.clone(),
        step: stats.and_then(|s| s.step),
        step_time_seconds: stats.and_then(|s| s.step_time_seconds),
        devices,
        age_seconds: None,
        cuda_visible_devices: hello.cuda_visible_devices.clone(),
        stats_unix_seconds: stats.and_then(|s| s.ts),
    }
}

/// An event an agent sent: the pid it serves and the user whose directory its socket is in
/// (who the hub checked serves it; `None` only for a connection the hub no longer holds).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AgentNews {
    pub(crate) pid: u32,
    pub(crate) uid: Option<u32>,
    pub(crate) event: AgentEvent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_says_what_is_new_even_after_its_ring_wrapped() {
        let mut log = Log::default();
        log.push("a".into());
        assert_eq!(log.since(0), ["a"]);
        assert!(log.since(1).is_empty());
        for i in 0..100 {
            log.push(format!("{i}"));
        }
        assert_eq!(log.total(), 101);
        assert_eq!(log.since(99), ["98", "99"]);
        assert_eq!(
            log.since(1).len(),
            LOG_CAPACITY,
            "older lines fell off the ring"
        );
    }

    /// A user's environment can name a path of 100 KB, which a line about it carries.
    #[test]
    fn a_line_is_cut_to_the_bound_on_a_character_boundary() {
        let mut log = Log::default();
        log.push(format!(
            "not reading agents: cannot inspect /tmp/{}",
            "é".repeat(50_000)
        ));
        let line = &log.lines()[0];
        assert!(
            line.len() <= MAX_LOG_LINE + '…'.len_utf8(),
            "{}",
            line.len()
        );
        assert!(line.ends_with('…'));
    }
}
