//! Client side of agent protocol v1 (assets/agent-protocol.md): finding the agents' sockets,
//! reading their hello/stats lines, sending commands, and turning what they said into
//! [`TorchInfo`].
//!
//! The module owns stale socket clean-up and one reader thread per connection; the socket
//! directory rules ([`default_socket_dir`]) and security checks (owner, mode, no symlink, peer
//! uid by `SO_PEERCRED`) live in `sockets`, shared with the tch agent server. [`AgentHub::poll`] never blocks on an agent: connects are
//! non-blocking and reads happen on the reader threads, so a hung or hostile agent costs one
//! thread and a log line, never a stalled monitor.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::model::{DeviceAllocatorStats, TorchInfo};

mod sockets;

pub use sockets::{
    default_socket_dir, ensure_own_socket_dir, ensure_socket_dir, inspect_socket_dir,
    socket_dir_from,
};
pub(crate) use sockets::{effective_uid, peer_credentials};

/// The protocol version this client speaks; lines with another `v` drop the connection.
pub const PROTOCOL_VERSION: u64 = 1;
/// Longest line accepted from an agent, newline excluded.
pub const MAX_LINE_BYTES: usize = 1 << 20;

const READ_TIMEOUT: Duration = Duration::from_millis(250);
const WRITE_TIMEOUT: Duration = Duration::from_millis(200);
const RETRY_AFTER_END: Duration = Duration::from_secs(1);
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
const RETRY_AFTER_BAD_INPUT: Duration = Duration::from_secs(30);
const LOG_CAPACITY: usize = 64;
const QUEUE_CAPACITY: usize = 256;

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
    fn to_line(self, id: u64) -> String {
        let mut msg = json!({"v": PROTOCOL_VERSION, "type": "cmd", "id": id});
        let cmd = match self {
            AgentCommand::SetInterval { ms } => {
                msg["ms"] = json!(ms);
                "set_interval"
            }
            AgentCommand::ResetPeak => "reset_peak",
            AgentCommand::Snapshot => "snapshot",
        };
        msg["cmd"] = json!(cmd);
        format!("{msg}\n")
    }
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
    /// The whole message, for fields this client does not know.
    pub raw: Value,
}

/// Something an agent reported between stats, such as an OOM.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEvent {
    pub kind: String,
    pub device: Option<u32>,
    pub raw: Value,
}

/// One parsed line from an agent.
#[derive(Debug, Clone, PartialEq)]
enum Incoming {
    Hello(Value),
    Stats(Value),
    Reply(AgentReply),
    Event(AgentEvent),
    Ignored,
}

/// Parses one line (newline excluded). An `Err` is a reason to drop the connection.
fn parse_line(line: &[u8]) -> Result<Incoming, String> {
    let text = std::str::from_utf8(line).map_err(|_| "a line is not UTF-8".to_string())?;
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("a line is not JSON ({e})"))?;
    let Value::Object(map) = &value else {
        return Err("a line is not a JSON object".to_string());
    };
    match map.get("v").and_then(Value::as_u64) {
        Some(PROTOCOL_VERSION) => {}
        _ => {
            let v = map.get("v").map_or("none".to_string(), Value::to_string);
            return Err(format!("protocol version {v}, expected {PROTOCOL_VERSION}"));
        }
    }
    Ok(match map.get("type").and_then(Value::as_str) {
        Some("hello") => Incoming::Hello(value),
        Some("stats") => Incoming::Stats(value),
        Some("reply") => match reply_from(map) {
            Some(reply) => Incoming::Reply(reply),
            None => return Err("a reply without an integer id or a boolean ok".to_string()),
        },
        Some("event") => Incoming::Event(AgentEvent {
            kind: map
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_string(),
            device: map
                .get("device")
                .and_then(Value::as_u64)
                .and_then(|d| u32::try_from(d).ok()),
            raw: value.clone(),
        }),
        _ => Incoming::Ignored,
    })
}

fn reply_from(map: &Map<String, Value>) -> Option<AgentReply> {
    let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_string);
    Some(AgentReply {
        id: map.get("id")?.as_u64()?,
        ok: map.get("ok")?.as_bool()?,
        cmd: text("cmd"),
        path: text("path"),
        error: text("error"),
        raw: Value::Object(map.clone()),
    })
}

/// Splits a byte stream into lines, refusing any line longer than [`MAX_LINE_BYTES`].
#[derive(Default)]
struct LineSplitter {
    pending: Vec<u8>,
}

impl LineSplitter {
    fn push(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        self.pending.extend_from_slice(data);
        let mut lines = Vec::new();
        while let Some(newline) = self.pending.iter().position(|&b| b == b'\n') {
            if newline > MAX_LINE_BYTES {
                return Err(format!("a line is longer than {MAX_LINE_BYTES} bytes"));
            }
            let mut line: Vec<u8> = self.pending.drain(..=newline).collect();
            line.pop();
            if line.iter().any(|b| !b.is_ascii_whitespace()) {
                lines.push(line);
            }
        }
        if self.pending.len() > MAX_LINE_BYTES {
            return Err(format!("a line is longer than {MAX_LINE_BYTES} bytes"));
        }
        Ok(lines)
    }

    fn pending_bytes(&self) -> usize {
        self.pending.len()
    }
}

fn as_u64_lenient(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        let f = value.as_f64()?;
        (f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64).then_some(f as u64)
    })
}

fn as_u32(value: Option<&Value>) -> Option<u32> {
    value
        .and_then(as_u64_lenient)
        .and_then(|v| u32::try_from(v).ok())
}

fn as_string(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_string)
}

/// With the cudaMallocAsync backend PyTorch fills only allocated, active and reserved bytes;
/// the other counters read 0 without meaning it.
fn uses_cuda_malloc_async(alloc_conf: Option<&str>) -> bool {
    alloc_conf.is_some_and(|conf| conf.contains("cudaMallocAsync"))
}

fn device_from(entry: &Value, malloc_async: bool) -> Option<DeviceAllocatorStats> {
    let index = as_u32(entry.get("index"))?;
    let empty = Map::new();
    let stats = entry
        .get("stats")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let get = |key: &str| stats.get(key).and_then(as_u64_lenient);
    let native_only = |key: &str| if malloc_async { None } else { get(key) };
    Some(DeviceAllocatorStats {
        index,
        allocated_bytes: get("allocated_bytes.all.current"),
        reserved_bytes: get("reserved_bytes.all.current"),
        active_bytes: get("active_bytes.all.current"),
        inactive_split_bytes: native_only("inactive_split_bytes.all.current"),
        requested_bytes: native_only("requested_bytes.all.current"),
        peak_allocated_bytes: get("allocated_bytes.all.peak"),
        segments: native_only("segment.all.current"),
        alloc_retries: native_only("num_alloc_retries"),
        ooms: native_only("num_ooms"),
        non_pytorch_bytes: None,
    })
}

/// Builds a [`TorchInfo`] from an agent's latest hello and stats messages. Either may be
/// `Value::Null` (not received yet). Pure: `age_seconds` and `non_pytorch_bytes` stay `None`.
pub fn torch_info_from(hello: &Value, stats: &Value) -> TorchInfo {
    let alloc_conf = as_string(hello.get("alloc_conf"));
    let malloc_async = uses_cuda_malloc_async(alloc_conf.as_deref());
    let mut devices: Vec<DeviceAllocatorStats> = stats
        .get("devices")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|d| device_from(d, malloc_async))
                .collect()
        })
        .unwrap_or_default();
    devices.sort_by_key(|d| d.index);
    devices.dedup_by_key(|d| d.index);
    TorchInfo {
        python: as_string(hello.get("python")),
        torch: as_string(hello.get("torch")),
        rank: as_u32(hello.get("rank")),
        local_rank: as_u32(hello.get("local_rank")),
        world_size: as_u32(hello.get("world_size")),
        alloc_conf,
        step: stats.get("step").and_then(as_u64_lenient),
        step_time_seconds: stats
            .get("step_time_s")
            .and_then(Value::as_f64)
            .filter(|t| t.is_finite() && *t >= 0.0),
        devices,
        age_seconds: None,
    }
}

/// Why a connection ended.
struct Ending {
    reason: String,
    bad_input: bool,
}

/// What one reader thread has gathered; shared with the hub.
#[derive(Default)]
struct ConnState {
    hello: Option<Value>,
    stats: Option<Value>,
    stats_at: Option<Instant>,
    replies: VecDeque<AgentReply>,
    events: VecDeque<AgentEvent>,
    ended: Option<Ending>,
}

struct Connection {
    file_pid: u32,
    writer: UnixStream,
    state: Arc<Mutex<ConnState>>,
    stop: Arc<AtomicBool>,
    next_id: AtomicU64,
}

fn lock(state: &Mutex<ConnState>) -> std::sync::MutexGuard<'_, ConnState> {
    // A reader thread cannot panic while holding the lock, but poisoning must not spread.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// All agent connections in one socket directory.
pub struct AgentHub {
    dir: PathBuf,
    conns: HashMap<u32, Connection>,
    retry_at: HashMap<u32, Instant>,
    log: VecDeque<String>,
    /// Lines ever logged, so a reader can tell which are new after the ring dropped old ones.
    log_total: usize,
    replies: Vec<(u32, AgentReply)>,
    events: Vec<(u32, AgentEvent)>,
    last_dir_problem: Option<String>,
}

impl AgentHub {
    /// A hub for the sockets in `dir` (usually [`default_socket_dir`]). Connects nothing yet.
    pub fn new(dir: PathBuf) -> Self {
        AgentHub {
            dir,
            conns: HashMap::new(),
            retry_at: HashMap::new(),
            log: VecDeque::new(),
            log_total: 0,
            replies: Vec::new(),
            events: Vec::new(),
            last_dir_problem: None,
        }
    }

    /// The directory this hub watches.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Connects to new agents, drops ended connections, and returns the latest figures per pid
    /// (the pid of the agent's process as this machine sees it). Never blocks on an agent.
    pub fn poll(&mut self) -> HashMap<u32, TorchInfo> {
        self.reap_ended();
        match inspect_socket_dir(&self.dir) {
            Ok(Some(owner)) => {
                self.last_dir_problem = None;
                self.discover(owner);
            }
            Ok(None) => {}
            Err(problem) => {
                if self.last_dir_problem.as_deref() != Some(problem.as_str()) {
                    self.push_log(format!("not reading agents: {problem}"));
                    self.last_dir_problem = Some(problem);
                }
            }
        }
        self.conns
            .iter()
            .filter_map(|(&pid, conn)| {
                let state = lock(&conn.state);
                let hello = state.hello.as_ref()?;
                let mut info = torch_info_from(hello, state.stats.as_ref().unwrap_or(&Value::Null));
                info.age_seconds = state.stats_at.map(|at| at.elapsed().as_secs_f64());
                Some((pid, info))
            })
            .collect()
    }

    /// Sends `cmd` to the agent of `pid`; returns the command id its reply will carry.
    pub fn request(&self, pid: u32, cmd: AgentCommand) -> Result<u64, String> {
        let conn = self
            .conns
            .get(&pid)
            .ok_or_else(|| format!("no agent is connected for pid {pid}"))?;
        if lock(&conn.state).ended.is_some() {
            return Err(format!("the agent of pid {pid} has disconnected"));
        }
        let id = conn.next_id.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = (&conn.writer).write_all(cmd.to_line(id).as_bytes()) {
            // Part of the line may have gone out; the stream is no longer well framed.
            conn.close();
            return Err(format!(
                "could not send a command to the agent of pid {pid}: {e}"
            ));
        }
        Ok(id)
    }

    /// Replies received since the last call, with the pid of the agent that sent each.
    pub fn take_replies(&mut self) -> Vec<(u32, AgentReply)> {
        for (&pid, conn) in &self.conns {
            self.replies
                .extend(lock(&conn.state).replies.drain(..).map(|r| (pid, r)));
        }
        std::mem::take(&mut self.replies)
    }

    /// Events (such as `oom`) received since the last call, with the pid of the agent.
    pub fn take_events(&mut self) -> Vec<(u32, AgentEvent)> {
        for (&pid, conn) in &self.conns {
            self.events
                .extend(lock(&conn.state).events.drain(..).map(|e| (pid, e)));
        }
        std::mem::take(&mut self.events)
    }

    /// Recent reasons for refused or dropped connections and removed stale sockets, oldest first.
    pub fn log(&self) -> Vec<String> {
        self.log.iter().cloned().collect()
    }

    /// How many lines were ever logged.
    pub fn log_total(&self) -> usize {
        self.log_total
    }

    fn push_log(&mut self, line: String) {
        self.log_total += 1;
        if self.log.len() == LOG_CAPACITY {
            self.log.pop_front();
        }
        self.log.push_back(line);
    }

    fn reap_ended(&mut self) {
        let ended: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, conn)| lock(&conn.state).ended.is_some())
            .map(|(&pid, _)| pid)
            .collect();
        for pid in ended {
            let Some(conn) = self.conns.remove(&pid) else {
                continue;
            };
            let mut state = lock(&conn.state);
            self.replies
                .extend(state.replies.drain(..).map(|r| (pid, r)));
            self.events.extend(state.events.drain(..).map(|e| (pid, e)));
            let ending = state.ended.take().unwrap_or(Ending {
                reason: String::new(),
                bad_input: false,
            });
            drop(state);
            let wait = if ending.bad_input {
                RETRY_AFTER_BAD_INPUT
            } else {
                RETRY_AFTER_END
            };
            self.retry_at.insert(conn.file_pid, Instant::now() + wait);
            let verb = if ending.bad_input {
                "dropped the connection"
            } else {
                "connection ended"
            };
            self.push_log(format!("pid {pid}: {verb}: {}", ending.reason));
        }
    }

    fn discover(&mut self, owner: u32) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let connected: HashSet<u32> = self.conns.values().map(|c| c.file_pid).collect();
        let now = Instant::now();
        self.retry_at.retain(|_, at| *at > now);
        for entry in entries.flatten() {
            let Some(file_pid) = socket_file_pid(&entry.file_name()) else {
                continue;
            };
            if connected.contains(&file_pid) || self.retry_at.contains_key(&file_pid) {
                continue;
            }
            let path = entry.path();
            if !Path::new(&format!("/proc/{file_pid}")).exists() {
                self.remove_stale(&path, file_pid);
                continue;
            }
            match open_connection(&path, file_pid, owner) {
                Ok((peer_pid, conn)) => {
                    if let Some(old) = self.conns.insert(peer_pid, conn) {
                        old.close();
                    }
                }
                Err((reason, bad_input)) => {
                    let wait = if bad_input {
                        RETRY_AFTER_BAD_INPUT
                    } else {
                        RETRY_AFTER_FAILURE
                    };
                    self.retry_at.insert(file_pid, now + wait);
                    let verb = if bad_input {
                        "refused"
                    } else {
                        "could not connect"
                    };
                    self.push_log(format!("pid {file_pid}: {verb}: {reason}"));
                }
            }
        }
    }

    fn remove_stale(&mut self, path: &Path, pid: u32) {
        let is_socket = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
        if !is_socket {
            return;
        }
        match fs::remove_file(path) {
            Ok(()) => self.push_log(format!(
                "removed stale socket {} (pid {pid} is gone)",
                path.display()
            )),
            Err(e) => self.push_log(format!(
                "could not remove stale socket {}: {e}",
                path.display()
            )),
        }
    }
}

impl Drop for AgentHub {
    fn drop(&mut self) {
        for conn in self.conns.values() {
            conn.close();
        }
    }
}

impl Connection {
    fn close(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.writer.shutdown(std::net::Shutdown::Both);
    }
}

fn socket_file_pid(name: &OsStr) -> Option<u32> {
    let digits = name.as_bytes().strip_suffix(b".sock")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits)
        .ok()?
        .parse()
        .ok()
        .filter(|&pid| pid > 0)
}

/// Connects, checks the peer, and starts the reader thread. `Err((reason, bad_input))`.
fn open_connection(
    path: &Path,
    file_pid: u32,
    owner: u32,
) -> Result<(u32, Connection), (String, bool)> {
    let stream = connect_nonblocking(path).map_err(|e| (e, false))?;
    let (peer_pid, peer_uid) = peer_credentials(&stream)
        .map_err(|e| (format!("cannot read the peer's credentials: {e}"), false))?;
    if peer_uid != owner {
        return Err((
            format!(
                "{} is served by uid {peer_uid}, but the directory belongs to uid {owner}",
                path.display()
            ),
            true,
        ));
    }
    let setup = |s: &UnixStream| -> io::Result<()> {
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(READ_TIMEOUT))?;
        s.set_write_timeout(Some(WRITE_TIMEOUT))
    };
    setup(&stream).map_err(|e| (format!("cannot configure the socket: {e}"), false))?;
    let reader = stream
        .try_clone()
        .map_err(|e| (format!("cannot clone the socket: {e}"), false))?;
    let state = Arc::new(Mutex::new(ConnState::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let pid = if peer_pid > 0 { peer_pid } else { file_pid };
    let (thread_state, thread_stop) = (Arc::clone(&state), Arc::clone(&stop));
    thread::Builder::new()
        .name(format!("agent-{pid}"))
        .spawn(move || read_loop(reader, &thread_state, &thread_stop))
        .map_err(|e| (format!("cannot start a reader thread: {e}"), false))?;
    Ok((
        pid,
        Connection {
            file_pid,
            writer: stream,
            state,
            stop,
            next_id: AtomicU64::new(1),
        },
    ))
}

/// A Unix-socket connect that fails instead of waiting when the agent's backlog is full.
fn connect_nonblocking(path: &Path) -> Result<UnixStream, String> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(format!(
            "{} is too long for a Unix socket path",
            path.display()
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cannot create a socket: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: addr is a valid sockaddr_un of `len` bytes and fd is an open socket.
    let rc = unsafe {
        libc::connect(
            owned.as_raw_fd(),
            std::ptr::addr_of!(addr).cast::<libc::sockaddr>(),
            len,
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::EAGAIN) => format!(
                "{} is not accepting connections (backlog full)",
                path.display()
            ),
            Some(libc::ECONNREFUSED) => format!("nothing listens on {}", path.display()),
            _ => format!("cannot connect to {}: {err}", path.display()),
        });
    }
    Ok(UnixStream::from(owned))
}

fn read_loop(mut stream: UnixStream, state: &Mutex<ConnState>, stop: &AtomicBool) {
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; 64 * 1024];
    let ending = loop {
        if stop.load(Ordering::Relaxed) {
            break Ending {
                reason: "closed by torchtop".to_string(),
                bad_input: false,
            };
        }
        let n = match stream.read(&mut buf) {
            Ok(0) => {
                let reason = match splitter.pending_bytes() {
                    0 => "the agent closed it".to_string(),
                    n => {
                        format!("the agent closed it in the middle of a line ({n} bytes discarded)")
                    }
                };
                break Ending {
                    reason,
                    bad_input: false,
                };
            }
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                break Ending {
                    reason: format!("read failed: {e}"),
                    bad_input: false,
                }
            }
        };
        match splitter
            .push(&buf[..n])
            .and_then(|lines| absorb(&lines, state))
        {
            Ok(()) => {}
            Err(reason) => {
                break Ending {
                    reason,
                    bad_input: true,
                }
            }
        }
    };
    let _ = stream.shutdown(std::net::Shutdown::Both);
    lock(state).ended = Some(ending);
}

fn absorb(lines: &[Vec<u8>], state: &Mutex<ConnState>) -> Result<(), String> {
    for line in lines {
        let incoming = parse_line(line)?;
        let mut state = lock(state);
        match incoming {
            Incoming::Hello(v) => state.hello = Some(v),
            Incoming::Stats(v) => {
                state.stats = Some(v);
                state.stats_at = Some(Instant::now());
            }
            Incoming::Reply(r) => push_bounded(&mut state.replies, r),
            Incoming::Event(e) => push_bounded(&mut state.events, e),
            Incoming::Ignored => {}
        }
    }
    Ok(())
}

fn push_bounded<T>(queue: &mut VecDeque<T>, item: T) {
    if queue.len() == QUEUE_CAPACITY {
        queue.pop_front();
    }
    queue.push_back(item);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;
    use std::process::{Command, Stdio};

    static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

    /// A fresh 0700 socket directory in a scratch directory of its own, both removed on drop.
    pub(super) struct TempDir(pub(super) PathBuf);

    impl TempDir {
        pub(super) fn new() -> Self {
            let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
            let base = std::env::temp_dir().join(format!("tt-hub-{}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&base);
            fs::create_dir_all(&base).unwrap();
            let dir = base.join("sockets");
            ensure_socket_dir(&dir).unwrap();
            TempDir(dir)
        }
        fn sock(&self, pid: u32) -> PathBuf {
            self.0.join(format!("{pid}.sock"))
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::set_permissions(&self.0, fs::Permissions::from_mode(0o700));
            let _ = fs::remove_dir_all(self.0.parent().unwrap());
        }
    }

    fn my_pid() -> u32 {
        std::process::id()
    }

    /// Listens on `<dir>/<our pid>.sock` and runs `script` on the first connection.
    fn serve(
        dir: &TempDir,
        script: impl FnOnce(UnixStream) + Send + 'static,
    ) -> thread::JoinHandle<()> {
        let listener = UnixListener::bind(dir.sock(my_pid())).unwrap();
        thread::spawn(move || {
            if let Ok((stream, _)) = listener.accept() {
                script(stream);
            }
        })
    }

    fn hello() -> String {
        r#"{"v":1,"type":"hello","pid":1,"argv":["train.py"],"python":"3.12.3","torch":"2.11.0","rank":2,"local_rank":0,"world_size":8,"alloc_conf":null,"interval_ms":1000}"#.to_string()
    }

    fn stats(seq: u64, allocated: u64) -> String {
        json!({"v":1,"type":"stats","seq":seq,"ts":1.0,"step":41,"step_time_s":0.25,"devices":[
            {"index":0,"stats":{
                "allocated_bytes.all.current": allocated, "reserved_bytes.all.current": 4000,
                "active_bytes.all.current": 1500, "inactive_split_bytes.all.current": 300,
                "requested_bytes.all.current": 990, "allocated_bytes.all.peak": 2500,
                "segment.all.current": 3, "num_alloc_retries": 1, "num_ooms": 0,
                "allocated_bytes.small_pool.current": 5, "max_split_size": -1}}]})
        .to_string()
    }

    /// Polls until `done` holds or 5 s pass; returns the last poll and the longest poll time.
    fn poll_until(
        hub: &mut AgentHub,
        done: impl Fn(&HashMap<u32, TorchInfo>, &AgentHub) -> bool,
    ) -> (HashMap<u32, TorchInfo>, Duration) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut slowest = Duration::ZERO;
        loop {
            let t0 = Instant::now();
            let infos = hub.poll();
            slowest = slowest.max(t0.elapsed());
            if done(&infos, hub) || Instant::now() > deadline {
                return (infos, slowest);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn logged(hub: &AgentHub, needle: &str) -> bool {
        hub.log().iter().any(|line| line.contains(needle))
    }

    #[test]
    fn socket_file_names() {
        assert_eq!(socket_file_pid(OsStr::new("123.sock")), Some(123));
        for bad in [
            "x.sock",
            ".sock",
            "0.sock",
            "123.sock.tmp",
            "123",
            "-1.sock",
            "99999999999.sock",
        ] {
            assert_eq!(socket_file_pid(OsStr::new(bad)), None, "{bad}");
        }
    }

    #[test]
    fn torch_info_maps_memory_stats_keys() {
        let hello: Value = serde_json::from_str(&hello()).unwrap();
        let stats: Value = serde_json::from_str(&stats(1, 1234)).unwrap();
        let info = torch_info_from(&hello, &stats);
        assert_eq!(info.python.as_deref(), Some("3.12.3"));
        assert_eq!(info.torch.as_deref(), Some("2.11.0"));
        assert_eq!(
            (info.rank, info.local_rank, info.world_size),
            (Some(2), Some(0), Some(8))
        );
        assert_eq!(info.alloc_conf, None);
        assert_eq!((info.step, info.step_time_seconds), (Some(41), Some(0.25)));
        assert_eq!(info.age_seconds, None);
        let want = DeviceAllocatorStats {
            index: 0,
            allocated_bytes: Some(1234),
            reserved_bytes: Some(4000),
            active_bytes: Some(1500),
            inactive_split_bytes: Some(300),
            requested_bytes: Some(990),
            peak_allocated_bytes: Some(2500),
            segments: Some(3),
            alloc_retries: Some(1),
            ooms: Some(0),
            non_pytorch_bytes: None,
        };
        assert_eq!(info.devices, vec![want]);
    }

    #[test]
    fn torch_info_missing_values_are_none() {
        let stats = json!({"devices":[{"index":1,"stats":{}},{"index":"x"},{"index":0,"stats":{"reserved_bytes.all.current":-5}}]});
        let info = torch_info_from(&Value::Null, &stats);
        assert_eq!(
            info.devices.len(),
            2,
            "an entry without a valid index is skipped"
        );
        assert_eq!(info.devices[0].index, 0);
        assert_eq!(
            info.devices[0].reserved_bytes, None,
            "negative is not a byte count"
        );
        assert_eq!(
            info.devices[1],
            DeviceAllocatorStats {
                index: 1,
                ..Default::default()
            }
        );
        assert_eq!(
            (info.python, info.step, info.step_time_seconds),
            (None, None, None)
        );
        assert!(torch_info_from(&Value::Null, &Value::Null)
            .devices
            .is_empty());
    }

    #[test]
    fn torch_info_hides_counters_that_cuda_malloc_async_leaves_at_zero() {
        let hello = json!({"alloc_conf": "backend:cudaMallocAsync"});
        let stats: Value = serde_json::from_str(&stats(1, 77)).unwrap();
        let d = &torch_info_from(&hello, &stats).devices[0];
        assert_eq!(
            (d.allocated_bytes, d.reserved_bytes, d.active_bytes),
            (Some(77), Some(4000), Some(1500))
        );
        assert_eq!(
            (d.inactive_split_bytes, d.requested_bytes, d.segments),
            (None, None, None)
        );
        assert_eq!((d.alloc_retries, d.ooms), (None, None));
    }

    #[test]
    fn line_parsing_rules() {
        assert!(matches!(
            parse_line(hello().as_bytes()),
            Ok(Incoming::Hello(_))
        ));
        assert!(matches!(
            parse_line(br#"{"v":1,"type":"later","x":[1]}"#),
            Ok(Incoming::Ignored)
        ));
        let reply = parse_line(br#"{"v":1,"type":"reply","id":4,"ok":true,"path":"/p","new":1}"#);
        assert!(matches!(
            reply,
            Ok(Incoming::Reply(AgentReply {
                id: 4,
                ok: true,
                ..
            }))
        ));
        for (bad, why) in [
            (&b"garbage"[..], "not JSON"),
            (b"\xff\xfe", "UTF-8"),
            (b"[1]", "object"),
            (br#"{"v":2,"type":"hello"}"#, "version 2"),
            (br#"{"type":"hello"}"#, "version none"),
            (br#"{"v":"1","type":"hello"}"#, "version"),
            (br#"{"v":1,"type":"reply","ok":true}"#, "integer id"),
        ] {
            let err = parse_line(bad).unwrap_err();
            assert!(err.contains(why), "{err:?} should mention {why:?}");
        }
    }

    #[test]
    fn line_splitter_limits() {
        let mut s = LineSplitter::default();
        assert_eq!(s.push(b"ab").unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(s.push(b"c\n\n  \nd").unwrap(), vec![b"abc".to_vec()]);
        assert_eq!(s.pending_bytes(), 1);
        let mut s = LineSplitter::default();
        assert!(
            s.push(&vec![b'x'; MAX_LINE_BYTES]).is_ok(),
            "exactly the limit is fine"
        );
        assert!(s.push(b"\n").is_ok());
        assert!(s.push(&vec![b'x'; MAX_LINE_BYTES + 1]).is_err());
    }

    #[test]
    fn commands_serialize_as_protocol_lines() {
        let line: Value =
            serde_json::from_str(&AgentCommand::SetInterval { ms: 500 }.to_line(3)).unwrap();
        assert_eq!(
            line,
            json!({"v":1,"type":"cmd","id":3,"cmd":"set_interval","ms":500})
        );
        let line: Value = serde_json::from_str(&AgentCommand::Snapshot.to_line(4)).unwrap();
        assert_eq!(line, json!({"v":1,"type":"cmd","id":4,"cmd":"snapshot"}));
    }

    #[test]
    fn valid_agent_stream_commands_and_replies() {
        let dir = TempDir::new();
        let (tx, rx) = std::sync::mpsc::channel::<Value>();
        let server = serve(&dir, move |stream| {
            let mut w = stream.try_clone().unwrap();
            writeln!(w, "{}\n{}", hello(), stats(1, 100)).unwrap();
            let mut lines = io::BufReader::new(stream).lines();
            let cmd: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
            tx.send(cmd.clone()).unwrap();
            writeln!(w, "{}", stats(2, 200)).unwrap();
            writeln!(w, r#"{{"v":1,"type":"reply","id":{},"ok":true,"cmd":"snapshot","path":"/tmp/s.pickle"}}"#, cmd["id"]).unwrap();
            writeln!(w, r#"{{"v":1,"type":"event","kind":"oom","device":0}}"#).unwrap();
            thread::sleep(Duration::from_millis(500));
        });
        let mut hub = AgentHub::new(dir.0.clone());
        let (infos, _) = poll_until(&mut hub, |i, _| {
            i.get(&my_pid()).is_some_and(|t| !t.devices.is_empty())
        });
        let info = &infos[&my_pid()];
        assert_eq!(info.devices[0].allocated_bytes, Some(100));
        assert!(info.age_seconds.is_some_and(|a| a < 5.0));
        let id = hub.request(my_pid(), AgentCommand::Snapshot).unwrap();
        let sent = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(sent, json!({"v":1,"type":"cmd","id":id,"cmd":"snapshot"}));
        let (infos, slowest) = poll_until(&mut hub, |i, _| {
            i[&my_pid()].devices[0].allocated_bytes == Some(200)
        });
        assert_eq!(infos[&my_pid()].devices[0].allocated_bytes, Some(200));
        assert!(
            slowest < Duration::from_millis(200),
            "poll took {slowest:?}"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut replies = Vec::new();
        while replies.is_empty() && Instant::now() < deadline {
            hub.poll();
            replies = hub.take_replies();
            thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].0, my_pid());
        assert_eq!((replies[0].1.id, replies[0].1.ok), (id, true));
        assert_eq!(replies[0].1.path.as_deref(), Some("/tmp/s.pickle"));
        let events = hub.take_events();
        assert_eq!(events.len(), 1);
        assert_eq!(
            (events[0].1.kind.as_str(), events[0].1.device),
            ("oom", Some(0))
        );
        assert!(hub
            .request(4_000_000, AgentCommand::ResetPeak)
            .unwrap_err()
            .contains("no agent"));
        server.join().unwrap();
    }

    /// An agent that says hello, then sends `payload` and keeps the connection open.
    fn assert_dropped(payload: Vec<u8>, reason: &str) {
        let dir = TempDir::new();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let server = serve(&dir, move |mut stream| {
            writeln!(stream, "{}", hello()).unwrap();
            let _ = stream.write_all(&payload);
            let _ = done_rx.recv_timeout(Duration::from_secs(10));
        });
        let mut hub = AgentHub::new(dir.0.clone());
        let (infos, slowest) = poll_until(&mut hub, |_, h| logged(h, reason));
        assert!(
            logged(&hub, reason),
            "log {:?} should mention {reason:?}",
            hub.log()
        );
        assert!(logged(&hub, "dropped the connection"), "{:?}", hub.log());
        assert!(
            !infos.contains_key(&my_pid()),
            "a dropped agent is not reported"
        );
        assert!(
            slowest < Duration::from_millis(200),
            "poll took {slowest:?}"
        );
        // The dropped agent is not reconnected at once.
        hub.poll();
        assert!(hub.poll().is_empty());
        done_tx.send(()).unwrap();
        server.join().unwrap();
    }

    #[test]
    fn garbage_drops_the_connection() {
        assert_dropped(b"%%% not json %%%\n".to_vec(), "not JSON");
    }

    #[test]
    fn non_utf8_drops_the_connection() {
        assert_dropped(b"{\"v\":1,\"type\":\"\xff\"}\n".to_vec(), "not UTF-8");
    }

    #[test]
    fn oversized_line_drops_the_connection() {
        let mut line = b"{\"v\":1,\"type\":\"stats\",\"pad\":\"".to_vec();
        line.resize(MAX_LINE_BYTES + 100, b'x');
        assert_dropped(line, "longer than");
    }

    #[test]
    fn version_2_drops_the_connection() {
        assert_dropped(
            b"{\"v\":2,\"type\":\"stats\",\"devices\":[]}\n".to_vec(),
            "protocol version 2",
        );
    }

    #[test]
    fn peer_dying_mid_line_is_fine() {
        let dir = TempDir::new();
        let server = serve(&dir, |mut stream| {
            write!(
                stream,
                "{}\n{}\n{{\"v\":1,\"type\":\"sta",
                hello(),
                stats(1, 5)
            )
            .unwrap();
            thread::sleep(Duration::from_millis(300));
        });
        let mut hub = AgentHub::new(dir.0.clone());
        let (infos, _) = poll_until(&mut hub, |i, _| i.contains_key(&my_pid()));
        assert_eq!(infos[&my_pid()].devices[0].allocated_bytes, Some(5));
        server.join().unwrap();
        let (infos, _) = poll_until(&mut hub, |i, _| i.is_empty());
        assert!(infos.is_empty());
        assert!(logged(&hub, "middle of a line"), "{:?}", hub.log());
        assert!(
            !logged(&hub, "dropped"),
            "a dying peer is not bad input: {:?}",
            hub.log()
        );
    }

    #[test]
    fn stale_socket_files_are_removed() {
        let dir = TempDir::new();
        let dead = 999_999_999u32; // above pid_max, so never a live process
        drop(UnixListener::bind(dir.sock(dead)).unwrap());
        let not_a_socket = dir.0.join("999999998.sock");
        fs::write(&not_a_socket, b"").unwrap();
        // A live pid whose socket nobody listens on: kept, and reported.
        drop(UnixListener::bind(dir.sock(my_pid())).unwrap());
        let mut hub = AgentHub::new(dir.0.clone());
        assert!(hub.poll().is_empty());
        assert!(!dir.sock(dead).exists(), "the stale socket must be removed");
        assert!(not_a_socket.exists(), "only sockets are removed");
        assert!(dir.sock(my_pid()).exists());
        assert!(logged(&hub, "removed stale socket"), "{:?}", hub.log());
        assert!(logged(&hub, "nothing listens"), "{:?}", hub.log());
    }

    #[test]
    fn insecure_directories_are_not_read() {
        let dir = TempDir::new();
        let server = serve(&dir, |mut stream| {
            let _ = writeln!(stream, "{}\n{}", hello(), stats(1, 1));
        });
        fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o755)).unwrap();
        let mut hub = AgentHub::new(dir.0.clone());
        assert!(hub.poll().is_empty());
        assert!(logged(&hub, "mode 755"), "{:?}", hub.log());
        hub.poll();
        assert_eq!(hub.log().len(), 1, "the same problem is logged once");
        let link = dir.0.parent().unwrap().join("link");
        std::os::unix::fs::symlink(&dir.0, &link).unwrap();
        fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o700)).unwrap();
        let mut via_link = AgentHub::new(link);
        assert!(via_link.poll().is_empty());
        assert!(logged(&via_link, "symlink"), "{:?}", via_link.log());
        // Unblock the server thread.
        drop(UnixStream::connect(dir.sock(my_pid())));
        server.join().unwrap();
    }

    #[test]
    fn missing_directory_is_quietly_empty() {
        let mut hub = AgentHub::new(PathBuf::from("/nonexistent/torchtop-agents"));
        assert!(hub.poll().is_empty());
        assert!(hub.log().is_empty());
    }

    #[test]
    fn peer_of_another_uid_is_refused() {
        if effective_uid() != 0 {
            println!("skipped: only root can run a peer under another uid");
            return;
        }
        let dir = TempDir::new();
        let path = dir.sock(my_pid());
        // Bind as root, then listen as uid 65534: SO_PEERCRED reports the listener's uid.
        let code = format!(
            "import os,socket,json\ns=socket.socket(socket.AF_UNIX)\ns.bind({:?})\nos.setgid(65534)\nos.setuid(65534)\ns.listen(4)\nprint('ready',flush=True)\n\
             while True:\n  c,_=s.accept()\n  try: c.sendall(b'{}\\n')\n  except OSError: pass\n",
            path.display().to_string(),
            hello().replace('"', "\\\"")
        );
        let child = Command::new("python3")
            .arg("-c")
            .arg(&code)
            .stdout(Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            println!("skipped: python3 is not available");
            return;
        };
        let mut ready = String::new();
        io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready");
        // The file is named after our pid (alive); the peer is the child.
        let mut hub = AgentHub::new(dir.0.clone());
        let (infos, _) = poll_until(&mut hub, |_, h| logged(h, "uid 65534"));
        let _ = child.kill();
        let _ = child.wait();
        assert!(infos.is_empty());
        assert!(
            logged(
                &hub,
                "served by uid 65534, but the directory belongs to uid 0"
            ),
            "{:?}",
            hub.log()
        );
    }
}
