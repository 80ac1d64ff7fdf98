//! The protocol v1 server: one background thread that owns the listening socket and every
//! client, sends hello and periodic stats, and answers commands. Pure std + libc + serde_json;
//! the allocator figures come from an [`AllocatorStatsSource`].

use std::collections::{BTreeMap, HashSet};
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use super::socket::{bind, peer_allowed, remove_socket, BeforePlacing, FileId};
use super::{AllocatorStatsSource, HelloFacts, StepCounter};
use crate::protocol::sockets::AgentSocketNames;
use crate::protocol::{
    message_line, DeviceStats, Event, Hello, Reply, Stats, MAX_INTERVAL_MS, MAX_LINE_BYTES,
    MIN_INTERVAL_MS, PROTOCOL_VERSION,
};

/// A client that does not read is dropped once this much output waits for it.
const MAX_QUEUED_BYTES: usize = 8 << 20;

/// A running agent server. Dropping it ends the thread, closes every
/// connection and removes the socket file.
pub(crate) struct Agent {
    path: PathBuf,
    /// The socket file bound, which alone is ever removed.
    file: FileId,
    stopping: Arc<AtomicBool>,
    waker: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl Agent {
    /// Binds the first of `names` no live listener holds (0600) and serves protocol v1 from a
    /// background thread.
    ///
    /// The directory must already be safe (see [`crate::protocol::ensure_own_socket_dir`]); a
    /// stale socket of ours at a name (a previous process with the same pid, nothing listening)
    /// is replaced. `before_placing` runs before the socket can be found under its name.
    pub(crate) fn serve(
        names: &AgentSocketNames,
        interval: Duration,
        facts: HelloFacts,
        source: Box<dyn AllocatorStatsSource>,
        steps: Arc<StepCounter>,
        before_placing: BeforePlacing,
    ) -> io::Result<Agent> {
        let bound = bind(names, before_placing)?;
        let (listener, path) = (bound.listener, bound.path);
        let (waker, wake_read) = UnixStream::pair()?;
        waker.set_nonblocking(true)?;
        wake_read.set_nonblocking(true)?;
        let stopping = Arc::new(AtomicBool::new(false));
        let mut server = Server {
            listener,
            wake_read,
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            interval_ms: clamp_interval(interval),
            facts,
            source,
            steps,
            clients: Vec::new(),
            seq: 0,
            seen_ooms: BTreeMap::new(),
            next_tick: Instant::now() + Duration::from_millis(clamp_interval(interval)),
            logged: HashSet::new(),
            stopping: stopping.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("torchtop-agent".into())
            .spawn(move || server.run())?;
        Ok(Agent {
            path,
            file: bound.id,
            stopping,
            waker,
            thread: Some(thread),
        })
    }

    /// Where the socket is.
    pub(crate) fn socket_path(&self) -> &Path {
        &self.path
    }

    /// The socket file bound (device and inode).
    pub(crate) fn socket_file(&self) -> FileId {
        self.file
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // Removed while it still listens: a socket nothing listens on is stale to another
        // agent of our pid, which may take its name between our check and our removal.
        remove_socket(&self.path, self.file);
        self.stopping.store(true, Ordering::SeqCst);
        let _ = (&self.waker).write(b"x");
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn clamp_interval(interval: Duration) -> u64 {
    let ms = u64::try_from(interval.as_millis()).unwrap_or(MAX_INTERVAL_MS);
    ms.clamp(MIN_INTERVAL_MS, MAX_INTERVAL_MS)
}

/// poll(2)'s timeout: until the next tick while a monitor listens; with none connected there is
/// nothing to send, so -1: the thread sleeps until one connects or `Agent`'s drop wakes it, and
/// costs a training process no wake-up.
pub(super) fn poll_timeout_ms(listened: bool, next_tick: Instant, now: Instant) -> libc::c_int {
    if !listened {
        return -1;
    }
    let wait = next_tick.saturating_duration_since(now);
    libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX)
}

struct Client {
    stream: UnixStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    open: bool,
}

struct Server {
    listener: UnixListener,
    wake_read: UnixStream,
    dir: PathBuf,
    interval_ms: u64,
    facts: HelloFacts,
    source: Box<dyn AllocatorStatsSource>,
    steps: Arc<StepCounter>,
    clients: Vec<Client>,
    seq: u64,
    seen_ooms: BTreeMap<u32, i64>,
    next_tick: Instant,
    logged: HashSet<String>,
    stopping: Arc<AtomicBool>,
}

impl Server {
    fn run(&mut self) {
        while !self.stopping.load(Ordering::SeqCst) {
            let wait = poll_timeout_ms(!self.clients.is_empty(), self.next_tick, Instant::now());
            if let Err(error) = self.poll_once(wait) {
                self.log(&format!("the agent stopped: poll failed: {error}"));
                return;
            }
            let now = Instant::now();
            if now >= self.next_tick {
                if !self.clients.is_empty() {
                    let stats = self.stats();
                    self.broadcast(&stats);
                }
                self.next_tick = now + Duration::from_millis(self.interval_ms);
            }
        }
    }

    /// Waits up to `timeout_ms` (-1: until an event) and serves what is ready.
    fn poll_once(&mut self, timeout_ms: libc::c_int) -> io::Result<()> {
        let mut fds = vec![
            pollfd(self.listener.as_raw_fd(), libc::POLLIN),
            pollfd(self.wake_read.as_raw_fd(), libc::POLLIN),
        ];
        for client in &self.clients {
            let mut events = libc::POLLIN;
            if !client.outbuf.is_empty() {
                events |= libc::POLLOUT;
            }
            fds.push(pollfd(client.stream.as_raw_fd(), events));
        }
        // SAFETY: `fds` is a live, correctly sized array of pollfd for the whole call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            return if error.kind() == ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(error)
            };
        }
        if fds[1].revents != 0 {
            drain(&mut self.wake_read);
        }
        for (index, fd) in fds.iter().enumerate().skip(2) {
            self.service_client(index - 2, fd.revents);
        }
        self.clients.retain(|c| c.open);
        if fds[0].revents != 0 {
            self.accept_all();
        }
        Ok(())
    }

    fn service_client(&mut self, index: usize, revents: libc::c_short) {
        if revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            self.read_client(index);
        }
        if revents & libc::POLLOUT != 0 && self.clients[index].open {
            self.flush_client(index);
        }
    }

    fn accept_all(&mut self) {
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.log(&format!("accept failed: {e}"));
                    return;
                }
            };
            if let Err(why) = peer_allowed(&stream) {
                self.log(&why);
                continue;
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if self.clients.is_empty() {
                // Asleep with no monitor until now: the next stats are an interval away.
                self.next_tick = Instant::now() + Duration::from_millis(self.interval_ms);
            }
            self.clients.push(Client {
                stream,
                inbuf: Vec::new(),
                outbuf: Vec::new(),
                open: true,
            });
            let index = self.clients.len() - 1;
            let hello = self.hello();
            self.send(index, &hello);
            let stats = self.stats();
            self.send(index, &stats);
        }
    }

    fn read_client(&mut self, index: usize) {
        let mut chunk = [0u8; 65536];
        loop {
            let read = self.clients[index].stream.read(&mut chunk);
            match read {
                Ok(0) => return self.close(index, None),
                Ok(n) => self.clients[index].inbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return self.close(index, Some(format!("read failed: {e}"))),
            }
            if self.clients[index].inbuf.len() > MAX_LINE_BYTES + 65536 {
                break;
            }
        }
        if let Err(why) = self.handle_lines(index) {
            self.close(index, Some(format!("dropped a client: {why}")));
        }
    }

    fn handle_lines(&mut self, index: usize) -> Result<(), String> {
        loop {
            let client = &mut self.clients[index];
            let Some(newline) = client.inbuf.iter().position(|b| *b == b'\n') else {
                if client.inbuf.len() > MAX_LINE_BYTES {
                    return Err(format!("a line longer than {MAX_LINE_BYTES} bytes"));
                }
                return Ok(());
            };
            if newline > MAX_LINE_BYTES {
                return Err(format!("a line longer than {MAX_LINE_BYTES} bytes"));
            }
            let line: Vec<u8> = client.inbuf.drain(..=newline).collect();
            let line = &line[..newline];
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if let Some(reply) = self.command_reply(line)? {
                self.send(index, &reply);
            }
            if !self.clients[index].open {
                return Ok(());
            }
        }
    }

    /// The reply to one line, None for a message type we ignore, or why the line is bad input.
    fn command_reply(&mut self, line: &[u8]) -> Result<Option<String>, String> {
        let text = std::str::from_utf8(line).map_err(|_| "not UTF-8".to_string())?;
        let message: Value = serde_json::from_str(text).map_err(|_| "not JSON".to_string())?;
        let Value::Object(message) = message else {
            return Err("not a JSON object".into());
        };
        if message.get("v").and_then(Value::as_u64) != Some(PROTOCOL_VERSION) {
            return Err(format!(
                "protocol version {}, expected {PROTOCOL_VERSION}",
                message.get("v").unwrap_or(&Value::Null)
            ));
        }
        if message.get("type").and_then(Value::as_str) != Some("cmd") {
            return Ok(None);
        }
        let Some(id) = message.get("id").filter(|v| v.is_i64() || v.is_u64()) else {
            return Err("a command without an integer id".into());
        };
        let reply = self.run_command(id.clone(), &message);
        Ok(Some(message_line("reply", &reply)))
    }

    fn run_command(&mut self, id: Value, message: &Map<String, Value>) -> Reply {
        let cmd = message.get("cmd").cloned().unwrap_or(Value::Null);
        let outcome = match cmd.as_str() {
            Some("set_interval") => self.set_interval(message.get("ms")),
            Some("reset_peak") => self
                .guarded(|source| source.reset_peak())
                .map(|devices| json!({"devices": devices})),
            Some("snapshot") => {
                let dir = self.dir.clone();
                self.guarded(|source| source.snapshot(&dir))
                    .map(|(path, bytes)| json!({"path": path, "bytes": bytes}))
            }
            _ => Err(format!("unknown command {cmd}")),
        };
        let (ok, error, fields) = match outcome {
            Ok(Value::Object(fields)) => (true, None, fields),
            Ok(_) => (true, None, Map::new()),
            Err(error) => (false, Some(error), Map::new()),
        };
        Reply {
            id,
            cmd,
            ok,
            error,
            fields,
        }
    }

    fn set_interval(&mut self, ms: Option<&Value>) -> Result<Value, String> {
        match ms.and_then(Value::as_u64) {
            Some(ms) if (MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&ms) => {
                self.interval_ms = ms;
                // A shorter interval takes effect now, not after the old one runs out.
                let sooner = Instant::now() + Duration::from_millis(ms);
                self.next_tick = self.next_tick.min(sooner);
                Ok(json!({"interval_ms": ms}))
            }
            _ => Err(format!(
                "ms must be an integer from {MIN_INTERVAL_MS} to {MAX_INTERVAL_MS}"
            )),
        }
    }

    /// Runs a source call; a panic inside it becomes an error, never the agent's end.
    fn guarded<T>(
        &self,
        call: impl FnOnce(&dyn AllocatorStatsSource) -> Result<T, String>,
    ) -> Result<T, String> {
        catch_unwind(AssertUnwindSafe(|| call(self.source.as_ref())))
            .unwrap_or_else(|_| Err("the allocator stats source panicked".into()))
    }

    fn hello(&self) -> String {
        let facts = &self.facts;
        let hello = Hello {
            pid: facts.pid,
            argv: &facts.argv,
            python: None,
            torch: facts.torch.as_deref(),
            rank: facts.rank,
            local_rank: facts.local_rank,
            world_size: facts.world_size,
            alloc_conf: facts.alloc_conf.as_deref(),
            cuda_visible_devices: facts.cuda_visible_devices.as_deref(),
            interval_ms: self.interval_ms,
            agent: concat!("torchtop-rs ", env!("CARGO_PKG_VERSION")),
        };
        message_line("hello", &hello)
    }

    fn stats(&mut self) -> String {
        self.seq += 1;
        let devices = match self.guarded(|source| Ok(source.device_stats())) {
            Ok(devices) => devices,
            Err(why) => {
                self.log(&why);
                Vec::new()
            }
        };
        self.note_ooms(&devices);
        let (step, step_time_s) = self.steps.read();
        let stats = Stats {
            seq: self.seq,
            ts: unix_seconds(),
            step,
            step_time_s,
            interval_ms: self.interval_ms,
            devices: devices
                .into_iter()
                .map(|(index, stats)| DeviceStats { index, stats })
                .collect(),
        };
        message_line("stats", &stats)
    }

    /// Announces an OOM when a device's `num_ooms` rises between two readings.
    fn note_ooms(&mut self, devices: &[(u32, Map<String, Value>)]) {
        for (index, stats) in devices {
            let Some(count) = stats.get("num_ooms").and_then(Value::as_i64) else {
                continue;
            };
            let before = self.seen_ooms.insert(*index, count);
            if before.is_some_and(|before| count > before) {
                let event = Event {
                    kind: "oom",
                    ts: unix_seconds(),
                    device: *index,
                    num_ooms: count,
                    source: "num_ooms",
                    step: self.steps.read().0,
                };
                self.broadcast(&message_line("event", &event));
            }
        }
    }

    fn broadcast(&mut self, line: &str) {
        for index in 0..self.clients.len() {
            self.send(index, line);
        }
    }

    /// Queues one line (newline included) for a client.
    fn send(&mut self, index: usize, line: &str) {
        if !self.clients[index].open {
            return;
        }
        let line = line.as_bytes();
        if self.clients[index].outbuf.len() + line.len() > MAX_QUEUED_BYTES {
            return self.close(index, Some("dropped a client that does not read".into()));
        }
        self.clients[index].outbuf.extend_from_slice(line);
        self.flush_client(index);
    }

    fn flush_client(&mut self, index: usize) {
        let client = &mut self.clients[index];
        while !client.outbuf.is_empty() {
            match client.stream.write(&client.outbuf) {
                Ok(0) => break,
                Ok(n) => {
                    client.outbuf.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return self.close(index, Some(format!("write failed: {e}"))),
            }
        }
    }

    fn close(&mut self, index: usize, reason: Option<String>) {
        let client = &mut self.clients[index];
        client.open = false;
        client.inbuf = Vec::new();
        client.outbuf = Vec::new();
        let _ = client.stream.shutdown(std::net::Shutdown::Both);
        if let Some(reason) = reason {
            self.log(&reason);
        }
    }

    /// Says each distinct problem once on stderr: the host program's output is not ours to flood.
    fn log(&mut self, message: &str) {
        if self.logged.len() < 100 && self.logged.insert(message.to_string()) {
            say!("torchtop agent: {message}");
        }
    }
}

fn pollfd(fd: libc::c_int, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

fn drain(stream: &mut UnixStream) {
    let mut sink = [0u8; 256];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
