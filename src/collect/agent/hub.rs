//! [`AgentHub`]: all agent connections, as the sampler sees them, of the monitor's socket
//! directory and, for root, of other users' (`dirs`, `defaults`). Each [`AgentHub::poll`] reaps
//! ended connections, collects answers to commands and times out the unanswered ones, checks
//! each directory (owner, mode, not a symlink: every poll), connects to new sockets (at most
//! [`Limits::max_connections`] open, the one idle longest of the user who holds the most dropped
//! to make room; a directory is
//! listed only when [`scan`] says it may have changed, and once when two paths lead to it), and
//! returns the latest figures per pid, shared with the hub and rebuilt only when an agent says
//! something new.
//! Reading happens on the one reader thread; nothing here waits on an agent.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::connection::SocketName;
use super::parse::{AgentEvent, AgentReply};
use super::reader::Reader;
use super::state::{
    lock, AgentNews, Awaiting, ConnId, ConnState, Heard, Shared, Silent, EVENT_CAPACITY,
};
use super::{COMMAND_TIMEOUT, MAX_CONNECTIONS, PENDING_BYTES_BUDGET};
use crate::model::TorchInfo;
use crate::protocol::sockets::check_socket_dir;
use crate::protocol::AgentCommand;

mod defaults;
mod dirs;
mod discovery;
mod evict;
mod scan;

use crate::format::path::named;
use dirs::{DirId, Watched};

const RETRY_AFTER_END: Duration = Duration::from_secs(1);
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
const RETRY_AFTER_BAD_INPUT: Duration = Duration::from_secs(30);

/// The hub's bounds; [`Limits::default`] holds the documented ones.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limits {
    pub(crate) max_connections: usize,
    /// Bytes of unfinished lines held across all connections.
    pub(crate) pending_budget: usize,
    pub(crate) command_timeout: Duration,
    /// New connections opened per poll, so one poll stays short whatever the directory holds.
    pub(crate) max_new_per_poll: usize,
    /// Commands awaiting an answer on one connection.
    pub(crate) max_awaiting: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: MAX_CONNECTIONS,
            pending_budget: PENDING_BYTES_BUDGET,
            command_timeout: COMMAND_TIMEOUT,
            max_new_per_poll: 64,
            max_awaiting: 16,
        }
    }
}

/// What became of a command sent with [`AgentHub::request`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CommandOutcome {
    Replied {
        pid: u32,
        command: AgentCommand,
        reply: AgentReply,
    },
    TimedOut {
        pid: u32,
        command: AgentCommand,
        after: Duration,
    },
    /// The connection ended first.
    Unanswered {
        pid: u32,
        command: AgentCommand,
        reason: String,
    },
}

/// The hub's side of one connection: what it needs to send commands and to reconnect.
struct HubConn {
    dir: DirId,
    /// The uid that serves it (the directory's owner).
    owner: u32,
    /// The socket's name: the pid it names (its agent's, in that agent's PID namespace) and
    /// the namespace it names, if any.
    file: SocketName,
    pid: u32,
    stream: Arc<UnixStream>,
}

/// All agent connections: those of the monitor's socket directory, and for root those of other
/// users' directories.
pub struct AgentHub {
    /// The monitor's own directory first (id 0), then other users' (root only).
    dirs: Vec<Watched>,
    next_dir: DirId,
    /// Root reads the directories other users' processes name ([`AgentHub::watch_users`]).
    reads_other_users: bool,
    own_uid: u32,
    /// Our mount namespace: a process in another sees another filesystem.
    own_mount_ns: Option<u64>,
    /// The uids already told of directories left unread.
    warned_uids: Vec<u32>,
    /// Whether the own directory was named on purpose rather than worked out by default
    /// ([`AgentHub::at_default_dir`]): only then may it be another user's.
    own_dir_chosen: bool,
    /// Where users' default agent directories are, looked at every 10 s (root only).
    census: defaults::Census,
    limits: Limits,
    shared: Arc<Mutex<Shared>>,
    /// Started with the first connection.
    reader: Option<Reader>,
    conns: HashMap<ConnId, HubConn>,
    next_conn: ConnId,
    next_command: u64,
    /// Sockets not to try again before the time: (directory, socket name).
    retry_at: HashMap<(DirId, SocketName), Instant>,
    outcomes: Vec<CommandOutcome>,
    events: VecDeque<AgentNews>,
    /// The socket names of the open connections, refilled at each listing.
    connected: HashSet<SocketName>,
    /// The agents that have said nothing since their socket accepted our connection, as of
    /// the last poll.
    silent: Vec<Silent>,
}

impl AgentHub {
    /// A hub for the sockets in `dir` (usually [`crate::protocol::default_socket_dir`]). Connects nothing
    /// yet.
    pub fn new(dir: PathBuf) -> Self {
        Self::with_limits(dir, Limits::default())
    }

    /// [`AgentHub::new`] for the directory worked out by default (no `TORCHTOP_AGENT_DIR`):
    /// read only while it is ours. Root's `/tmp/torchtop-0` can be another user's, made
    /// before root first ran.
    pub(crate) fn at_default_dir(mut self, default: bool) -> Self {
        self.own_dir_chosen = !default;
        self
    }

    pub(crate) fn with_limits(dir: PathBuf, limits: Limits) -> Self {
        let own_uid = crate::sys::effective_uid();
        AgentHub {
            dirs: vec![Watched::own(dir, Instant::now())],
            next_dir: 0,
            reads_other_users: own_uid == 0,
            own_uid,
            own_mount_ns: crate::sys::proc::own_mount_namespace(),
            warned_uids: Vec::new(),
            own_dir_chosen: true,
            census: defaults::Census::default(),
            limits,
            shared: Arc::default(),
            reader: None,
            conns: HashMap::new(),
            next_conn: 0,
            next_command: 1,
            retry_at: HashMap::new(),
            outcomes: Vec::new(),
            events: VecDeque::new(),
            connected: HashSet::new(),
            silent: Vec::new(),
        }
    }

    /// Connects to new agents, drops ended connections, and returns the latest figures per pid
    /// (the pid of the agent's process as this machine sees it). Never blocks on an agent.
    pub fn poll(&mut self) -> HashMap<u32, TorchInfo> {
        let mut heard = HashMap::new();
        self.poll_into(&mut heard);
        let now = Instant::now();
        (heard.into_iter())
            .map(|(pid, heard)| {
                let mut info = TorchInfo::clone(&heard.info);
                info.age_seconds = heard.age_seconds(now);
                (pid, info)
            })
            .collect()
    }

    /// [`AgentHub::poll`] into `heard` (cleared first; it keeps its room), the figures shared
    /// with the hub: a poll with no new hello or stats allocates nothing.
    pub(crate) fn poll_into(&mut self, heard: &mut HashMap<u32, Heard>) {
        // Dropped first, so each connection's figures can be refilled in place.
        heard.clear();
        let now = Instant::now();
        self.reap(now);
        for i in 0..self.dirs.len() {
            self.check_dir(i);
        }
        self.pair_twins();
        for i in 0..self.dirs.len() {
            self.list_if_due(i, now);
        }
        self.silent.clear();
        for state in lock(&self.shared).conns.values_mut() {
            if let Some(figures) = state.heard() {
                heard.insert(state.pid, figures);
            } else if let Some(silent) = state.silent_for(now) {
                self.silent.push(Silent {
                    pid: state.pid,
                    start_ticks: state.start_ticks,
                    seconds: silent.as_secs_f64(),
                });
            }
        }
        // A pid whose other connection has spoken is heard (a second one waits on its turn).
        self.silent.retain(|s| !heard.contains_key(&s.pid));
    }

    /// The agents that have said nothing since their socket accepted the connection, as of the
    /// last [`AgentHub::poll_into`]: each is in a process that is stopped or whose interpreter
    /// is held (a process that froze before the monitor started never says hello).
    pub(crate) fn silent(&self) -> &[Silent] {
        &self.silent
    }

    /// Checks directory `i` (owner, mode, not a symlink) and logs a problem once it is new.
    fn check_dir(&mut self, i: usize) {
        let dir = &mut self.dirs[i];
        let (own_uid, chosen) = (self.own_uid, self.own_dir_chosen);
        let checked = check_socket_dir(&dir.path).and_then(|checked| match (checked, dir.user) {
            (Some(checked), Some(user)) if checked.owner != user => Err(format!(
                "{} belongs to uid {}, but uid {user}'s processes name it as their agents' \
                 directory",
                named(&dir.path),
                checked.owner
            )),
            // Root's own, by default: another user can make `/tmp/torchtop-0` before root
            // does, to have their agents read with the own directory's bounds and keep root's
            // from serving. One named on purpose (`TORCHTOP_AGENT_DIR`) is read as it is.
            (Some(checked), None) if checked.owner != own_uid && !chosen => Err(format!(
                "{} belongs to uid {}, not to us (uid {own_uid}); a user's agents are read \
                 through their processes",
                named(&dir.path),
                checked.owner
            )),
            (checked, _) => Ok(checked),
        });
        dir.checked = None;
        match checked {
            Ok(Some(checked)) => {
                dir.problem = None;
                dir.checked = Some(checked);
            }
            Ok(None) => dir.scan.forget(),
            Err(problem) => {
                dir.scan.forget();
                if dir.problem.as_deref() != Some(problem.as_str()) {
                    dir.problem = Some(problem.clone());
                    self.push_log(format!("not reading agents: {problem}"));
                }
            }
        }
    }

    /// Lists directory `i` when this poll's check passed, no earlier directory is the same one,
    /// and it may have changed.
    fn list_if_due(&mut self, i: usize, now: Instant) {
        let dir = &self.dirs[i];
        let Some(checked) = dir.checked.filter(|_| dir.twin_of.is_none()) else {
            return;
        };
        let id = dir.id;
        let retry_due = (self.retry_at.iter()).any(|(&(d, _), at)| d == id && *at <= now);
        let dir = &mut self.dirs[i];
        if dir.scan.due(&dir.path, now, retry_due) {
            let complete = self.discover(i, checked, now);
            self.dirs[i].scan.done(now, complete);
        }
    }

    /// Sends `cmd` to the agent of `pid`; returns the command id its reply will carry. The
    /// outcome comes from [`AgentHub::take_outcomes`]: the reply, or a timeout.
    pub(crate) fn request(&mut self, pid: u32, cmd: AgentCommand) -> Result<u64, String> {
        let (id, stream) = self
            .conns
            .iter()
            .find(|(_, conn)| conn.pid == pid)
            .map(|(&id, conn)| (id, Arc::clone(&conn.stream)))
            .ok_or_else(|| format!("no agent is connected for pid {pid}"))?;
        let command_id = self.next_command;
        {
            let mut shared = lock(&self.shared);
            let Some(state) = shared.conns.get_mut(&id).filter(|s| s.ended.is_none()) else {
                return Err(format!("the agent of pid {pid} has disconnected"));
            };
            if state.awaiting.len() >= self.limits.max_awaiting {
                return Err(format!(
                    "the agent of pid {pid} has not answered {} earlier commands yet; wait for \
                     them before sending more",
                    state.awaiting.len()
                ));
            }
            // Recorded before the line goes out, so even an instant reply finds it.
            let awaiting = Awaiting {
                command: cmd,
                sent_at: Instant::now(),
            };
            state.awaiting.insert(command_id, awaiting);
        }
        self.next_command += 1;
        let line = cmd.to_line(command_id);
        let written = write_once(&stream, line.as_bytes());
        if matches!(written, Ok(n) if n == line.len()) {
            return Ok(command_id);
        }
        // Not sent: nothing will answer it, and the caller hears why from the error.
        if let Some(state) = lock(&self.shared).conns.get_mut(&id) {
            state.awaiting.remove(&command_id);
        }
        let why = match written {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(format!(
                    "the agent of pid {pid} is not reading its commands (its socket is full); \
                     try again later"
                ));
            }
            Err(e) => e.to_string(),
            Ok(_) => "only part of it fit in the socket".to_string(),
        };
        // Part of the line may have gone out: the stream is no longer well framed.
        self.close(
            id,
            &format!("sending a command failed: {why}"),
            RETRY_AFTER_END,
        );
        Err(format!(
            "could not send a command to the agent of pid {pid}: {why}"
        ))
    }

    /// Replies to this hub's commands, timeouts and commands lost with their connection, since
    /// the last call.
    pub(crate) fn take_outcomes(&mut self) -> Vec<CommandOutcome> {
        std::mem::take(&mut self.outcomes)
    }

    /// Events (such as `oom`) received since the last call, with the pid of the agent and the
    /// user it serves. Takes those the reader has parsed since the last poll too, so an event an
    /// agent sent before the stats a poll returned is never left for later.
    pub(crate) fn take_events(&mut self) -> Vec<AgentNews> {
        let shared = Arc::clone(&self.shared);
        for (id, state) in &mut lock(&shared).conns {
            let uid = self.conns.get(id).map(|c| c.owner);
            for event in state.events.drain(..) {
                self.push_event(state.pid, uid, event);
            }
        }
        self.events.drain(..).collect()
    }

    fn push_event(&mut self, pid: u32, uid: Option<u32>, event: AgentEvent) {
        if self.events.len() == EVENT_CAPACITY {
            self.events.pop_front();
        }
        self.events.push_back(AgentNews { pid, uid, event });
    }

    /// Recent reasons for refused or dropped connections and removed stale sockets, oldest first.
    pub fn log(&self) -> Vec<String> {
        lock(&self.shared).log.lines()
    }

    /// The lines logged after the first `seen` ever logged (those still in the ring), and the
    /// count to pass next time.
    pub(crate) fn log_since(&self, seen: usize) -> (Vec<String>, usize) {
        let shared = lock(&self.shared);
        (shared.log.since(seen), shared.log.total())
    }

    /// Whether every open connection has sent stats: what `--once` waits for, up to its
    /// deadline, so that an agent connected a moment ago is not left out.
    pub(crate) fn all_heard(&self) -> bool {
        lock(&self.shared)
            .conns
            .values()
            .all(|s| s.stats_at.is_some())
    }

    /// How many connections are open.
    #[cfg(test)]
    pub(crate) fn connections(&self) -> usize {
        self.conns.len()
    }

    fn push_log(&self, line: String) {
        lock(&self.shared).log.push(line);
    }

    /// Collects replies, events and timeouts, and removes the connections the reader ended.
    fn reap(&mut self, now: Instant) {
        let shared = Arc::clone(&self.shared);
        let mut shared = lock(&shared);
        let mut ended = Vec::new();
        for (&id, state) in &mut shared.conns {
            let uid = self.conns.get(&id).map(|c| c.owner);
            self.collect(state, uid, now);
            if state.ended.is_some() {
                ended.push(id);
            }
        }
        for id in ended {
            let Some(mut state) = shared.conns.remove(&id) else {
                continue;
            };
            let Some(ending) = state.ended.take() else {
                continue;
            };
            self.lose_awaiting(&state, &ending.reason);
            let conn = self.conns.remove(&id);
            // Another user's process ending is their business: its connection ends unlogged.
            let named = (conn.as_ref()).is_some_and(|c| self.is_named_by_a_process(c.dir));
            if ending.bad_input || !named {
                let verb = if ending.bad_input {
                    "dropped the connection"
                } else {
                    "connection ended"
                };
                shared
                    .log
                    .push(format!("pid {}: {verb}: {}", state.pid, ending.reason));
            }
            if let Some(conn) = conn {
                let wait = if ending.bad_input {
                    RETRY_AFTER_BAD_INPUT
                } else {
                    RETRY_AFTER_END
                };
                self.retry_at.insert((conn.dir, conn.file), now + wait);
            }
        }
    }

    fn collect(&mut self, state: &mut ConnState, uid: Option<u32>, now: Instant) {
        let pid = state.pid;
        for (awaiting, reply) in state.replies.drain(..) {
            let command = awaiting.command;
            self.outcomes.push(CommandOutcome::Replied {
                pid,
                command,
                reply,
            });
        }
        let timeout = self.limits.command_timeout;
        let outcomes = &mut self.outcomes;
        state.awaiting.retain(|_, awaiting| {
            let late = now.saturating_duration_since(awaiting.sent_at) >= timeout;
            if late {
                outcomes.push(CommandOutcome::TimedOut {
                    pid,
                    command: awaiting.command,
                    after: timeout,
                });
            }
            !late
        });
        for event in state.events.drain(..) {
            self.push_event(pid, uid, event);
        }
    }

    fn lose_awaiting(&mut self, state: &ConnState, reason: &str) {
        for awaiting in state.awaiting.values() {
            self.outcomes.push(CommandOutcome::Unanswered {
                pid: state.pid,
                command: awaiting.command,
                reason: reason.to_string(),
            });
        }
    }

    /// Closes a connection from this side, with a log line; its socket is retried after `wait`.
    fn close(&mut self, id: ConnId, reason: &str, wait: Duration) {
        let state = lock(&self.shared).conns.remove(&id);
        let Some(conn) = self.conns.remove(&id) else {
            return;
        };
        if let Some(state) = &state {
            self.lose_awaiting(state, reason);
        }
        if let Some(reader) = &self.reader {
            reader.remove(id);
        }
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        (self.retry_at).insert((conn.dir, conn.file), Instant::now() + wait);
        self.push_log(format!("pid {}: closed the connection: {reason}", conn.pid));
    }
}

impl Drop for AgentHub {
    fn drop(&mut self) {
        for conn in self.conns.values() {
            let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// One `write` of a whole command line, retried only when a signal interrupted it.
fn write_once(stream: &UnixStream, line: &[u8]) -> io::Result<usize> {
    loop {
        match (&*stream).write(line) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}
