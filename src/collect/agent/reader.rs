//! The one thread that reads every agent connection: epoll (through mio) over all of them, a
//! turn of bounded size for each ready connection so a chatty agent cannot starve the others,
//! and a budget of bytes held in unfinished lines across all connections. What it reads goes
//! into the shared [`state`](super::state); the hub adds and removes connections through a
//! channel and a waker.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use super::lines::{LineSplitter, SplitError};
use super::parse::{parse_line_into, AgentEvent, AgentReply, Hello, Incoming, Stats};
use super::state::{lock, ConnId, ConnState, Ending, Log, Shared, EVENT_CAPACITY};
use super::MAX_DEVICES_PER_AGENT;
use crate::model::DeviceAllocatorStats;

const WAKE: Token = Token(usize::MAX);
const READ_CHUNK: usize = 64 * 1024;
/// Bytes read from one connection before the other ready ones get their turn.
const READ_TURN: usize = READ_CHUNK;
/// The shortest time between two rounds of reading: an agent that trickles a byte at a time
/// wakes the thread at most this often, and what it sends meanwhile is read in one go.
const MIN_ROUND: Duration = Duration::from_millis(5);
/// Replies kept from one turn; an agent that sends more is answering commands nobody sent.
const REPLIES_PER_TURN: usize = 64;

enum ToReader {
    Add(ConnId, Arc<UnixStream>),
    Remove(ConnId),
    Stop,
}

/// The hub's handle on the reader thread; dropping it stops the thread.
pub(crate) struct Reader {
    commands: Sender<ToReader>,
    waker: Waker,
}

impl Reader {
    /// Starts the thread. `budget`: the most bytes of unfinished lines held at once.
    pub(crate) fn start(shared: Arc<Mutex<Shared>>, budget: usize) -> io::Result<Reader> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKE)?;
        let (commands, inbox) = mpsc::channel();
        let worker = Worker {
            poll,
            inbox,
            shared,
            budget,
            conns: HashMap::new(),
            ready: VecDeque::new(),
            held: 0,
            scratch: Vec::new(),
            devices: Vec::new(),
        };
        thread::Builder::new()
            .name("torchtop-agents".into())
            .spawn(move || worker.run())?;
        Ok(Reader { commands, waker })
    }

    /// Hands a connection (already in the shared state under `id`) to the thread.
    pub(crate) fn add(&self, id: ConnId, stream: Arc<UnixStream>) -> Result<(), String> {
        self.send(ToReader::Add(id, stream))
    }

    /// Tells the thread to stop reading a connection the hub has closed.
    pub(crate) fn remove(&self, id: ConnId) {
        let _ = self.send(ToReader::Remove(id));
    }

    fn send(&self, message: ToReader) -> Result<(), String> {
        self.commands
            .send(message)
            .map_err(|_| "the agent reader thread has stopped".to_string())?;
        self.waker
            .wake()
            .map_err(|e| format!("cannot wake the agent reader thread: {e}"))
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.send(ToReader::Stop);
    }
}

/// One connection as the thread holds it.
struct Conn {
    stream: Arc<UnixStream>,
    splitter: LineSplitter,
    /// Whether it is in the ready queue.
    queued: bool,
}

/// How a connection's turn ended.
enum Turn {
    /// Everything available was read.
    Drained,
    /// The turn's bytes ran out with more to read.
    More,
    Ended(Ending),
}

struct Worker {
    poll: Poll,
    inbox: Receiver<ToReader>,
    shared: Arc<Mutex<Shared>>,
    budget: usize,
    conns: HashMap<ConnId, Conn>,
    ready: VecDeque<ConnId>,
    /// Bytes held by all splitters.
    held: usize,
    /// Where a line that spans reads is put together: one buffer for all connections, of at
    /// most [`MAX_LINE_BYTES`](super::MAX_LINE_BYTES).
    scratch: Vec<u8>,
    /// The room a stats line's devices are read into: the devices the state held before the
    /// last stats line replaced them, so that a steady agent's lines allocate nothing.
    devices: Vec<DeviceAllocatorStats>,
}

impl Worker {
    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        let mut buf = vec![0u8; READ_CHUNK];
        let mut round = Instant::now();
        loop {
            thread::sleep(MIN_ROUND.saturating_sub(round.elapsed()));
            round = Instant::now();
            let timeout = (!self.ready.is_empty()).then_some(Duration::ZERO);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                lock(&self.shared)
                    .log
                    .push(format!("stopped reading agents: polling failed: {e}"));
                return;
            }
            let mut woken = false;
            for event in &events {
                match event.token() {
                    WAKE => woken = true,
                    Token(id) => self.queue(id),
                }
            }
            if woken && !self.take_commands() {
                return;
            }
            self.serve_ready(&mut buf);
        }
    }

    fn queue(&mut self, id: ConnId) {
        if let Some(conn) = self.conns.get_mut(&id) {
            if !conn.queued {
                conn.queued = true;
                self.ready.push_back(id);
            }
        }
    }

    /// Carries out the hub's requests; false when the thread must stop.
    fn take_commands(&mut self) -> bool {
        loop {
            match self.inbox.try_recv() {
                Ok(ToReader::Add(id, stream)) => self.add(id, stream),
                Ok(ToReader::Remove(id)) => self.forget(id),
                Ok(ToReader::Stop) | Err(TryRecvError::Disconnected) => return false,
                Err(TryRecvError::Empty) => return true,
            }
        }
    }

    fn add(&mut self, id: ConnId, stream: Arc<UnixStream>) {
        let fd = stream.as_raw_fd();
        let registered =
            self.poll
                .registry()
                .register(&mut SourceFd(&fd), Token(id), Interest::READABLE);
        self.conns.insert(
            id,
            Conn {
                stream,
                splitter: LineSplitter::default(),
                queued: false,
            },
        );
        match registered {
            // Bytes may have arrived before the registration: read them now.
            Ok(()) => self.queue(id),
            Err(e) => self.end(
                id,
                Ending {
                    reason: format!("cannot watch the connection: {e}"),
                    bad_input: false,
                },
            ),
        }
    }

    /// Drops a connection without a word in the shared state (the hub already removed it).
    fn forget(&mut self, id: ConnId) {
        if let Some(conn) = self.conns.remove(&id) {
            let fd = conn.stream.as_raw_fd();
            let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
            let _ = conn.stream.shutdown(std::net::Shutdown::Both);
            self.held -= conn.splitter.held_bytes();
        }
    }

    /// Ends a connection and says why in the shared state, where the hub will reap it.
    fn end(&mut self, id: ConnId, ending: Ending) {
        self.forget(id);
        if let Some(state) = lock(&self.shared).conns.get_mut(&id) {
            state.ended.get_or_insert(ending);
        }
    }

    fn serve_ready(&mut self, buf: &mut [u8]) {
        for _ in 0..self.ready.len() {
            let Some(id) = self.ready.pop_front() else {
                return;
            };
            match self.turn(id, buf) {
                Turn::Drained => {
                    if let Some(conn) = self.conns.get_mut(&id) {
                        conn.queued = false;
                    }
                }
                Turn::More => self.ready.push_back(id),
                Turn::Ended(ending) => self.end(id, ending),
            }
            // After every turn, so the budget holds at every moment, not only between rounds.
            self.enforce_budget();
        }
    }

    /// Reads one connection until it has nothing more, or for [`READ_TURN`] bytes.
    fn turn(&mut self, id: ConnId, buf: &mut [u8]) -> Turn {
        let Some(conn) = self.conns.get_mut(&id) else {
            return Turn::Drained;
        };
        let held_before = conn.splitter.held_bytes();
        let mut batch = Batch {
            devices: std::mem::take(&mut self.devices),
            ..Batch::default()
        };
        let mut read = 0;
        let turn = loop {
            if read >= READ_TURN {
                break Turn::More;
            }
            match (&*conn.stream).read(buf) {
                Ok(0) => break Turn::Ended(closed_by_agent(conn.splitter.pending_bytes())),
                Ok(n) => {
                    read += n;
                    if let Err(e) = conn
                        .splitter
                        .push(&buf[..n], &mut self.scratch, |line| batch.absorb(line))
                    {
                        break Turn::Ended(Ending {
                            reason: match e {
                                SplitError::TooLong(e) => e.to_string(),
                                SplitError::Line(e) => e,
                            },
                            bad_input: true,
                        });
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Turn::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    break Turn::Ended(Ending {
                        reason: format!("read failed: {e}"),
                        bad_input: false,
                    })
                }
            }
        };
        self.held = self.held - held_before + conn.splitter.held_bytes();
        // Nothing complete arrived: no need to take the lock (a trickling agent wakes us often).
        let known = batch.lines == 0 || batch.apply(&mut lock(&self.shared), id);
        self.devices = batch.devices;
        match turn {
            // The hub closed it meanwhile: stop reading it.
            Turn::Drained | Turn::More if !known => {
                self.forget(id);
                Turn::Drained
            }
            other => other,
        }
    }

    /// Drops the connections holding the most unfinished bytes until all fit the budget.
    fn enforce_budget(&mut self) {
        while self.held > self.budget {
            let Some((&id, held, _)) = self
                .conns
                .iter()
                .map(|(id, conn)| {
                    (
                        id,
                        conn.splitter.held_bytes(),
                        conn.splitter.pending_bytes(),
                    )
                })
                .max_by_key(|(_, held, pending)| (*held, *pending))
            else {
                return;
            };
            let reason = format!(
                "its unfinished line held {held} bytes when the unfinished lines of all agents \
                 together passed the {} MiB torchtop keeps for them",
                self.budget >> 20
            );
            self.end(
                id,
                Ending {
                    reason,
                    bad_input: true,
                },
            );
        }
    }
}

fn closed_by_agent(pending: usize) -> Ending {
    let reason = match pending {
        0 => "the agent closed it".to_string(),
        n => format!("the agent closed it in the middle of a line ({n} bytes discarded)"),
    };
    Ending {
        reason,
        bad_input: false,
    }
}

/// What one turn read from a connection, applied to the shared state under one lock.
#[derive(Default)]
struct Batch {
    lines: usize,
    hello: Option<Hello>,
    stats: Option<Stats>,
    replies: Vec<AgentReply>,
    events: VecDeque<AgentEvent>,
    /// Room for the next stats line's devices; after `apply`, the devices it replaced.
    devices: Vec<DeviceAllocatorStats>,
}

impl Batch {
    fn absorb(&mut self, line: &[u8]) -> Result<(), String> {
        self.lines += 1;
        match parse_line_into(line, &mut self.devices)? {
            Incoming::Hello(hello) => self.hello = Some(hello),
            Incoming::Stats(stats) => {
                // Two stats lines in one turn: the first one's devices are room again.
                if let Some(earlier) = self.stats.replace(stats) {
                    self.devices = earlier.devices;
                }
            }
            Incoming::Reply(reply) if self.replies.len() < REPLIES_PER_TURN => {
                self.replies.push(reply);
            }
            Incoming::Event(event) => push_bounded(&mut self.events, event),
            Incoming::Reply(_) | Incoming::Ignored => {}
        }
        Ok(())
    }

    /// Applies the batch to the connection's state; false when the hub no longer knows it.
    /// The devices the state held before are left in `self.devices`, as room.
    fn apply(&mut self, shared: &mut Shared, id: ConnId) -> bool {
        let Shared { conns, log } = shared;
        let Some(state) = conns.get_mut(&id) else {
            return false;
        };
        let now = Instant::now();
        if self.lines > 0 {
            state.last_line_at = now;
        }
        if let Some(hello) = self.hello.take() {
            state.hello = Some(hello);
            state.fresh = true;
        }
        if let Some(stats) = self.stats.take() {
            warn_of_many_devices(state, log, stats.listed);
            if let Some(replaced) = state.stats.replace(stats) {
                self.devices = replaced.devices;
            }
            state.stats_at = Some(now);
            state.fresh = true;
        }
        for reply in self.replies.drain(..) {
            accept_reply(state, log, reply);
        }
        for event in self.events.drain(..) {
            push_bounded(&mut state.events, event);
        }
        true
    }
}

fn warn_of_many_devices(state: &mut ConnState, log: &mut Log, listed: usize) {
    if listed > MAX_DEVICES_PER_AGENT && !state.warned_devices {
        state.warned_devices = true;
        log.push(format!(
            "pid {}: the agent lists {listed} devices; only the first {MAX_DEVICES_PER_AGENT} \
             are read",
            state.pid
        ));
    }
}

/// Keeps a reply only if it answers a command this hub sent on this connection.
fn accept_reply(state: &mut ConnState, log: &mut Log, reply: AgentReply) {
    match state.awaiting.remove(&reply.id) {
        Some(awaiting) => state.replies.push((awaiting, reply)),
        None if !state.warned_unsolicited => {
            state.warned_unsolicited = true;
            log.push(format!(
                "pid {}: ignored a reply to command {}, which torchtop did not send on this \
                 connection or no longer waits for (further ones are ignored without a word)",
                state.pid, reply.id
            ));
        }
        None => {}
    }
}

fn push_bounded<T>(queue: &mut VecDeque<T>, item: T) {
    if queue.len() == EVENT_CAPACITY {
        queue.pop_front();
    }
    queue.push_back(item);
}
