//! The agent server over real Unix sockets, with a fake allocator source.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::*;
use crate::protocol::sockets::{agent_socket_names, AgentSocketNames};
use crate::protocol::{MAX_INTERVAL_MS, MAX_LINE_BYTES};
use crate::test_ci::PATIENCE;

/// A 0700 directory (`.0`) that is removed when the test ends.
struct TempDir(PathBuf, #[allow(dead_code)] tempfile::TempDir);

impl TempDir {
    fn new() -> TempDir {
        let dir = tempfile::Builder::new()
            .prefix("tt-agent-")
            .tempdir()
            .expect("a scratch directory");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        TempDir(dir.path().to_path_buf(), dir)
    }
}

/// Reports one device whose allocated bytes grow by 1 MiB per reading.
#[derive(Default, Clone)]
struct FakeSource {
    readings: Arc<AtomicU64>,
    ooms: Arc<AtomicI64>,
    resets: Arc<Mutex<Vec<u32>>>,
    panics: bool,
}

impl AllocatorStatsSource for FakeSource {
    fn device_stats(&self) -> Vec<(u32, Map<String, Value>)> {
        assert!(!self.panics, "a source bug");
        let n = self.readings.fetch_add(1, Ordering::SeqCst) + 1;
        let mut stats = Map::new();
        stats.insert("allocated_bytes.all.current".into(), json!(n << 20));
        stats.insert("reserved_bytes.all.current".into(), json!(64u64 << 20));
        stats.insert("num_ooms".into(), json!(self.ooms.load(Ordering::SeqCst)));
        vec![(0, stats)]
    }

    fn torch_version(&self) -> Option<String> {
        Some("2.11.0".into())
    }

    fn reset_peak(&self) -> Result<Vec<u32>, String> {
        self.resets.lock().unwrap().push(0);
        Ok(vec![0])
    }
}

fn facts() -> HelloFacts {
    HelloFacts {
        pid: std::process::id(),
        argv: vec!["trainer".into(), "--fast".into()],
        torch: Some("2.11.0".into()),
        rank: Some(3),
        local_rank: Some(1),
        world_size: Some(8),
        alloc_conf: Some("expandable_segments:True".into()),
        cuda_visible_devices: Some("4,5".into()),
    }
}

/// The PID namespace the tests' agents say they are in.
const PID_NS: u64 = 4_026_532_999;

/// The socket names of an agent of pid 4242 in [`PID_NS`], in `dir`.
fn names(dir: &Path) -> AgentSocketNames {
    agent_socket_names(dir, 4242, Some(PID_NS))
}

fn serve(dir: &Path, interval_ms: u64, source: FakeSource) -> (Agent, Arc<StepCounter>) {
    let steps = Arc::new(StepCounter::default());
    let agent = Agent::serve(
        &names(dir),
        Duration::from_millis(interval_ms),
        facts(),
        Box::new(source),
        steps.clone(),
        |_, _| {},
    )
    .unwrap();
    (agent, steps)
}

struct Peer {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Peer {
    fn connect(agent: &Agent) -> Peer {
        let stream = UnixStream::connect(agent.socket_path()).unwrap();
        // Only there so that a broken agent fails the test instead of hanging it.
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        Peer {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        }
    }

    /// The next message, or None at end of stream.
    fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap()),
        }
    }

    /// The next message of `kind`, skipping others.
    fn next_of(&mut self, kind: &str) -> Value {
        for _ in 0..100 {
            let message = self.next().expect("the stream ended early");
            if message["type"] == kind {
                return message;
            }
        }
        panic!("no {kind} message");
    }

    fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    fn command(&mut self, command: Value) -> Value {
        self.send(format!("{command}\n").as_bytes());
        self.next_of("reply")
    }

    /// Whether the agent closes this connection (within [`PATIENCE`]), reading through anything
    /// queued.
    fn was_dropped(&mut self) -> bool {
        let deadline = Instant::now() + PATIENCE;
        let mut sink = [0u8; 65536];
        while Instant::now() < deadline {
            match self.reader.read(&mut sink) {
                Ok(0) => return true,
                Ok(_) => {}
                // A close with our bytes still unread reaches us as a reset, not an EOF.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    return true
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::Interrupted
                            | std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return false,
            }
        }
        false
    }
}

#[test]
fn hello_then_stats_then_periodic_stats() {
    let dir = TempDir::new();
    let (agent, steps) = serve(&dir.0, 50, FakeSource::default());
    let mut peer = Peer::connect(&agent);

    let hello = peer.next().unwrap();
    assert_eq!(hello["v"], 1);
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["pid"], std::process::id());
    assert_eq!(hello["argv"], json!(["trainer", "--fast"]));
    assert_eq!(hello["python"], Value::Null);
    assert_eq!(hello["torch"], "2.11.0");
    assert_eq!(
        (&hello["rank"], &hello["local_rank"], &hello["world_size"]),
        (&json!(3), &json!(1), &json!(8))
    );
    assert_eq!(hello["alloc_conf"], "expandable_segments:True");
    assert_eq!(hello["cuda_visible_devices"], "4,5");
    assert_eq!(hello["interval_ms"], 50);

    let first = peer.next().unwrap();
    assert_eq!(first["type"], "stats");
    assert_eq!(first["v"], 1);
    assert_eq!(first["step"], Value::Null, "no step marked yet");
    assert!(first["ts"].as_f64().unwrap() > 1.6e9);
    let device = &first["devices"][0];
    assert_eq!(device["index"], 0);
    assert!(
        device["stats"]["allocated_bytes.all.current"]
            .as_u64()
            .unwrap()
            >= 1 << 20
    );

    steps.mark();
    steps.mark();
    let later = peer.next_of("stats");
    assert!(later["seq"].as_u64().unwrap() > first["seq"].as_u64().unwrap());
    assert!(
        later["devices"][0]["stats"]["allocated_bytes.all.current"].as_u64()
            > device["stats"]["allocated_bytes.all.current"].as_u64(),
        "each reading comes fresh from the source"
    );
    assert_eq!(later["step"], 2);
    assert!(later["step_time_s"].as_f64().unwrap() >= 0.0);
}

#[test]
fn commands_are_answered() {
    let dir = TempDir::new();
    let source = FakeSource::default();
    // The longest interval there is: a next reading that waited it out would come in an hour,
    // far past the read timeout.
    let (agent, _) = serve(&dir.0, MAX_INTERVAL_MS, source.clone());
    let mut peer = Peer::connect(&agent);

    peer.next_of("stats");
    let reply = peer.command(json!({"v":1,"type":"cmd","id":7,"cmd":"set_interval","ms":40}));
    assert_eq!(reply["id"], 7);
    assert_eq!(reply["ok"], true);
    assert_eq!(reply["interval_ms"], 40);
    let next = peer.next_of("stats");
    assert_eq!(
        next["interval_ms"], 40,
        "a shorter interval is in force without waiting out the old one"
    );

    let reply = peer.command(json!({"v":1,"type":"cmd","id":8,"cmd":"set_interval","ms":1}));
    assert_eq!((&reply["id"], &reply["ok"]), (&json!(8), &json!(false)));
    assert!(reply["error"].as_str().unwrap().contains("ms must be"));

    let reply = peer.command(json!({"v":1,"type":"cmd","id":9,"cmd":"reset_peak"}));
    assert_eq!(reply["ok"], true);
    assert_eq!(reply["devices"], json!([0]));
    assert_eq!(*source.resets.lock().unwrap(), vec![0]);

    let reply = peer.command(json!({"v":1,"type":"cmd","id":10,"cmd":"snapshot"}));
    assert_eq!(reply["ok"], false);
    assert!(reply["error"].as_str().unwrap().contains("not supported"));

    let reply = peer.command(json!({"v":1,"type":"cmd","id":11,"cmd":"launch_missiles"}));
    assert_eq!(reply["ok"], false);

    // Unknown types and fields are ignored: the connection stays and the next reply is ours.
    peer.send(b"{\"v\":1,\"type\":\"gossip\",\"extra\":[1,2]}\n\n");
    let reply = peer.command(json!({"v":1,"type":"cmd","id":12,"cmd":"reset_peak","x":1}));
    assert_eq!((&reply["id"], &reply["ok"]), (&json!(12), &json!(true)));
}

fn assert_dropped_after(bad: &[u8]) {
    let dir = TempDir::new();
    let (agent, _) = serve(&dir.0, 30, FakeSource::default());
    let mut bystander = Peer::connect(&agent);
    let mut peer = Peer::connect(&agent);
    peer.next_of("stats");
    // The agent may drop us before it has read everything: a failed write is part of that.
    let _ = peer.writer.write_all(bad);
    assert!(
        peer.was_dropped(),
        "{:?} should drop the client",
        String::from_utf8_lossy(&bad[..bad.len().min(40)])
    );
    // The agent goes on serving everyone else, and new clients.
    let before = bystander.next_of("stats")["seq"].as_u64().unwrap();
    assert!(bystander.next_of("stats")["seq"].as_u64().unwrap() > before);
    assert_eq!(Peer::connect(&agent).next().unwrap()["type"], "hello");
}

#[test]
fn garbage_drops_only_that_client() {
    assert_dropped_after(b"this is not json\n");
    assert_dropped_after(b"[1,2,3]\n");
    assert_dropped_after(b"\xff\xfe{}\n");
}

#[test]
fn another_version_drops_the_client() {
    assert_dropped_after(b"{\"v\":2,\"type\":\"cmd\",\"id\":1,\"cmd\":\"reset_peak\"}\n");
    assert_dropped_after(b"{\"type\":\"cmd\",\"id\":1,\"cmd\":\"reset_peak\"}\n");
    assert_dropped_after(b"{\"v\":1,\"type\":\"cmd\",\"id\":\"one\",\"cmd\":\"reset_peak\"}\n");
}

#[test]
fn an_oversized_line_drops_the_client() {
    let mut huge = vec![b'x'; MAX_LINE_BYTES + 10];
    huge.push(b'\n');
    assert_dropped_after(&huge);
    // No newline at all: dropped as soon as the buffer passes the limit.
    assert_dropped_after(&vec![b' '; MAX_LINE_BYTES + 70_000]);
}

#[test]
fn a_peer_dying_mid_line_is_forgotten() {
    let dir = TempDir::new();
    let (agent, _) = serve(&dir.0, 20, FakeSource::default());
    {
        let mut peer = Peer::connect(&agent);
        peer.send(b"{\"v\":1,\"type\":\"cmd\",\"id\"");
    }
    let mut next = Peer::connect(&agent);
    assert_eq!(next.next().unwrap()["type"], "hello");
    next.next_of("stats");
}

#[test]
fn a_rising_oom_count_is_announced() {
    let dir = TempDir::new();
    let source = FakeSource::default();
    let (agent, _) = serve(&dir.0, 30, source.clone());
    let mut peer = Peer::connect(&agent);
    peer.next_of("stats");
    source.ooms.store(1, Ordering::SeqCst);
    let event = peer.next_of("event");
    assert_eq!(event["kind"], "oom");
    assert_eq!(event["device"], 0);
    assert_eq!(event["num_ooms"], 1);
}

#[test]
fn a_panicking_source_does_not_stop_the_agent() {
    let dir = TempDir::new();
    let source = FakeSource {
        panics: true,
        ..FakeSource::default()
    };
    let (agent, _) = serve(&dir.0, 20, source);
    let mut peer = Peer::connect(&agent);
    assert_eq!(peer.next().unwrap()["type"], "hello");
    let stats = peer.next_of("stats");
    assert_eq!(stats["devices"], json!([]));
    assert!(peer.next_of("stats")["seq"].as_u64() > stats["seq"].as_u64());
}

#[test]
fn the_socket_is_private_and_removed_on_drop() {
    let dir = TempDir::new();
    let (agent, _) = serve(&dir.0, 1000, FakeSource::default());
    let path = agent.socket_path().to_path_buf();
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    let mut peer = Peer::connect(&agent);
    peer.next_of("stats");
    drop(agent);
    assert!(!path.exists(), "the socket file is removed");
    assert!(peer.was_dropped(), "clients are disconnected");
}

#[test]
fn a_stale_socket_of_ours_is_replaced() {
    let dir = TempDir::new();
    let path = dir.0.join("4242.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists(), "a dead process left its socket");
    let (agent, _) = serve(&dir.0, 1000, FakeSource::default());
    assert_eq!(Peer::connect(&agent).next().unwrap()["type"], "hello");
}

/// Two processes of pid 4242 in two PID namespaces share the directory (containers that mount
/// one volume): the second agent removed the first's live socket, which vanished from every
/// monitor, and took its name.
#[test]
fn a_live_socket_of_another_namespace_is_left_alone_and_the_tagged_name_taken() {
    let dir = TempDir::new();
    let plain = dir.0.join("4242.sock");
    let theirs = std::os::unix::net::UnixListener::bind(&plain).unwrap();
    let (agent, _) = serve(&dir.0, 1000, FakeSource::default());
    let tagged = dir.0.join(format!("4242.{PID_NS}.sock"));
    assert_eq!(agent.socket_path(), tagged);
    assert_eq!(Peer::connect(&agent).next().unwrap()["type"], "hello");
    UnixStream::connect(&plain).expect("the first agent's socket still leads to it");
    theirs.set_nonblocking(true).unwrap();
    assert!(
        theirs.accept().is_ok(),
        "the connection went to the first agent"
    );
    let mut left: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["4242.4026532999.sock", "4242.sock"],
        "no staging name left"
    );
}

#[test]
fn with_both_names_held_by_live_agents_it_does_not_start_and_removes_neither() {
    let dir = TempDir::new();
    let names = names(&dir.0);
    let _held: Vec<_> = (names.names.iter())
        .map(|path| std::os::unix::net::UnixListener::bind(path).unwrap())
        .collect();
    let steps = Arc::new(StepCounter::default());
    let source = Box::new(FakeSource::default());
    let served = Agent::serve(
        &names,
        Duration::from_secs(1),
        facts(),
        source,
        steps,
        |_, _| {},
    );
    let error = served.err().expect("no name was free").to_string();
    assert!(error.contains("listens on"), "{error}");
    for path in &names.names {
        UnixStream::connect(path).expect("a live agent's socket was removed");
    }
    assert!(!names.staging.exists());
}

/// Once its socket was gone, another agent of our pid took the path: dropping ours removed
/// that one too.
#[test]
fn drop_leaves_a_socket_at_its_path_that_it_did_not_bind() {
    let dir = TempDir::new();
    let (agent, _) = serve(&dir.0, 1000, FakeSource::default());
    let path = agent.socket_path().to_path_buf();
    // Moved away rather than removed, so that the new socket cannot get its inode number.
    std::fs::rename(&path, dir.0.join("gone")).unwrap();
    let _theirs = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(agent);
    UnixStream::connect(&path).expect("the other agent's socket was removed");
}

#[test]
fn a_regular_file_at_the_socket_path_is_not_clobbered() {
    let dir = TempDir::new();
    let path = dir.0.join("4242.sock");
    std::fs::write(&path, "precious").unwrap();
    let steps = Arc::new(StepCounter::default());
    let served = Agent::serve(
        &agent_socket_names(&dir.0, 4242, None),
        Duration::from_secs(1),
        facts(),
        Box::new(FakeSource::default()),
        steps,
        |_, _| {},
    );
    assert!(served.is_err());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
}

#[test]
fn hello_facts_come_from_the_environment() {
    let vars = |name: &str| match name {
        "RANK" => Some("5".to_string()),
        "WORLD_SIZE" => Some(" 16 ".to_string()),
        "LOCAL_RANK" => Some("not a number".to_string()),
        "PYTORCH_CUDA_ALLOC_CONF" => Some("backend:cudaMallocAsync".to_string()),
        "CUDA_VISIBLE_DEVICES" => Some("GPU-3a3b,1".to_string()),
        _ => None,
    };
    let facts = HelloFacts::gather(vars, Some("2.11.0".into()));
    assert_eq!(facts.pid, std::process::id());
    assert_eq!((facts.rank, facts.world_size), (Some(5), Some(16)));
    assert_eq!(facts.local_rank, None, "garbage is a missing value, not 0");
    assert_eq!(facts.alloc_conf.as_deref(), Some("backend:cudaMallocAsync"));
    assert_eq!(facts.cuda_visible_devices.as_deref(), Some("GPU-3a3b,1"));
    assert!(!facts.argv.is_empty());
    let none = HelloFacts::gather(|_| None, None);
    assert_eq!((none.rank, none.alloc_conf), (None, None));
}

#[test]
fn steps_count_and_time() {
    let steps = StepCounter::default();
    assert_eq!(steps.read(), (None, None));
    steps.mark();
    assert_eq!(
        steps.read(),
        (Some(1), None),
        "one mark has no interval yet"
    );
    std::thread::sleep(Duration::from_millis(20));
    steps.mark();
    let (count, mean) = steps.read();
    assert_eq!(count, Some(2));
    assert!(mean.unwrap() >= 0.015, "{mean:?}");
}

#[test]
fn the_thread_sleeps_until_an_event_while_no_monitor_listens() {
    let now = Instant::now();
    let tick = now + Duration::from_millis(250);
    // It used to wake every 200 ms at most, monitor or not.
    assert_eq!(server::poll_timeout_ms(false, tick, now), -1);
    assert_eq!(server::poll_timeout_ms(true, tick, now), 250);
    assert_eq!(
        server::poll_timeout_ms(true, now, tick),
        0,
        "a tick that is due"
    );
    let far = now + Duration::from_secs(3_600);
    assert_eq!(server::poll_timeout_ms(true, far, now), 3_600_000);
}
