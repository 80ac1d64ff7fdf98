//! Tests of the agent client, and the fake agents other tests use: a socket served by this
//! process, or by a forked child so that each agent has a pid of its own.

#[path = "../../../tests/common/forked_agent.rs"]
pub(crate) mod forked_agent;

use std::fs;
use std::io::{self, BufRead, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::test_ci::{require_program, PATIENCE};
use forked_agent::{ForkedAgent, Greeter};

use super::hub::{CommandOutcome, Limits};
use super::parse::{parse_line, AgentReply, Incoming, Stats};
use super::state::torch_info;
use super::*;
use crate::model::{DeviceAllocatorStats, TorchInfo};
use crate::protocol::AgentCommand;
use crate::sys::effective_uid;

/// A fresh 0700 socket directory (`.0`) in a scratch directory of its own, both removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf, tempfile::TempDir);

impl TempDir {
    pub(crate) fn new() -> Self {
        let base = tempfile::Builder::new()
            .prefix("tt-hub-")
            .tempdir()
            .expect("create a scratch directory");
        let dir = base.path().join("sockets");
        ensure_socket_dir(&dir).unwrap();
        TempDir(dir, base)
    }

    pub(crate) fn sock(&self, pid: u32) -> PathBuf {
        self.0.join(format!("{pid}.sock"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A test may have left the directory unreadable; tempfile removes the rest.
        let _ = fs::set_permissions(&self.0, fs::Permissions::from_mode(0o700));
    }
}

pub(crate) fn my_pid() -> u32 {
    std::process::id()
}

/// Listens on `<dir>/<our pid>.sock` and runs `script` on the first connection.
pub(crate) fn serve(
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

pub(crate) fn hello() -> String {
    r#"{"v":1,"type":"hello","pid":1,"argv":["train.py"],"python":"3.12.3","torch":"2.11.0","rank":2,"local_rank":0,"world_size":8,"alloc_conf":null,"interval_ms":1000}"#.to_string()
}

pub(crate) fn stats(seq: u64, allocated: u64) -> String {
    json!({"v":1,"type":"stats","seq":seq,"ts":1.0,"step":41,"step_time_s":0.25,"devices":[
        {"index":0,"stats":{
            "allocated_bytes.all.current": allocated, "reserved_bytes.all.current": 4000,
            "active_bytes.all.current": 1500, "inactive_split_bytes.all.current": 300,
            "requested_bytes.all.current": 990, "allocated_bytes.all.peak": 2500,
            "segment.all.current": 3, "num_alloc_retries": 1, "num_ooms": 0,
            "allocated_bytes.small_pool.current": 5, "max_split_size": -1}}]})
    .to_string()
}

/// Polls until `done` holds or [`PATIENCE`] passes; returns the last poll.
fn poll_until(
    hub: &mut AgentHub,
    done: impl Fn(&std::collections::HashMap<u32, TorchInfo>, &AgentHub) -> bool,
) -> std::collections::HashMap<u32, TorchInfo> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let infos = hub.poll();
        if done(&infos, hub) || Instant::now() > deadline {
            return infos;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn logged(hub: &AgentHub, needle: &str) -> bool {
    hub.log().iter().any(|line| line.contains(needle))
}

fn info_of(hello_text: &str, stats_text: &str) -> TorchInfo {
    let Ok(Incoming::Hello(hello)) = parse_line(hello_text.as_bytes()) else {
        panic!("not a hello: {hello_text}");
    };
    let Ok(Incoming::Stats(stats)) = parse_line(stats_text.as_bytes()) else {
        panic!("not stats: {stats_text}");
    };
    torch_info(&hello, Some(&stats))
}

#[test]
fn torch_info_maps_memory_stats_keys() {
    let info = info_of(&hello(), &stats(1, 1234));
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
        ..Default::default()
    };
    assert_eq!(info.devices, vec![want]);
}

#[test]
fn torch_info_reads_the_summary_keys_the_uuid_and_the_visible_devices() {
    let hello = r#"{"v":1,"type":"hello","pid":5,"argv":[],"cuda_visible_devices":"2,3"}"#;
    let stats = r#"{"v":1,"type":"stats","seq":1,"ts":1767225600.5,"devices":[
        {"index":1,"uuid":"GPU-3a3b","stats":{"reserved_bytes.all.peak":9000,
         "reserved_bytes.large_pool.current":7000,"reserved_bytes.small_pool.current":1000,
         "allocation.all.allocated":500,"allocation.all.freed":450,
         "oversize_allocations.current":2,"oversize_segments.current":1,
         "max_split_size":18446744073709551615}}]}"#
        .replace('\n', "");
    let info = info_of(hello, &stats);
    assert_eq!(info.cuda_visible_devices.as_deref(), Some("2,3"));
    assert_eq!(info.stats_unix_seconds, Some(1767225600.5));
    let d = &info.devices[0];
    assert_eq!(d.uuid.as_deref(), Some("GPU-3a3b"));
    assert_eq!(
        (
            d.peak_reserved_bytes,
            d.large_pool_reserved_bytes,
            d.small_pool_reserved_bytes
        ),
        (Some(9000), Some(7000), Some(1000))
    );
    assert_eq!((d.allocations_total, d.frees_total), (Some(500), Some(450)));
    assert_eq!(
        (d.oversize_allocations, d.oversize_segments),
        (Some(2), Some(1))
    );
    assert_eq!(d.max_split_size_bytes, None, "SIZE_MAX is no limit");
    let old = info_of(&hello_old(), &stats_old());
    assert_eq!(
        (old.cuda_visible_devices, old.devices[0].uuid.clone()),
        (None, None)
    );
}

fn hello_old() -> String {
    r#"{"v":1,"type":"hello","pid":5,"argv":[]}"#.to_string()
}

fn stats_old() -> String {
    r#"{"v":1,"type":"stats","seq":1,"devices":[{"index":0,"stats":{"max_split_size":1048576}}]}"#
        .to_string()
}

#[test]
fn torch_info_missing_values_are_none() {
    let stats_text = json!({"v":1,"type":"stats","devices":[{"index":1,"stats":{}},{"index":"x"},7,
        {"index":0,"stats":{"reserved_bytes.all.current":-5,"allocated_bytes.all.current":1e3}},
        {"index":0,"stats":{"reserved_bytes.all.current":9}}]})
    .to_string();
    let info = info_of(r#"{"v":1,"type":"hello"}"#, &stats_text);
    assert_eq!(
        info.devices.len(),
        2,
        "entries without a valid index are skipped"
    );
    assert_eq!(info.devices[0].index, 0);
    assert_eq!(
        info.devices[0].reserved_bytes, None,
        "negative is not a byte count"
    );
    assert_eq!(
        info.devices[0].allocated_bytes,
        Some(1000),
        "1e3 is a whole number"
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
    let hello = super::parse::Hello::default();
    assert!(torch_info(&hello, None).devices.is_empty());
    assert!(torch_info(&hello, Some(&Stats::default()))
        .devices
        .is_empty());
}

#[test]
fn torch_info_hides_counters_that_cuda_malloc_async_leaves_at_zero() {
    let info = info_of(
        r#"{"v":1,"type":"hello","alloc_conf":"backend:cudaMallocAsync"}"#,
        &stats(1, 77),
    );
    let d = &info.devices[0];
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
        parse_line(br#"{"v":1,"type":"later","x":[1,{"y":2}]}"#),
        Ok(Incoming::Ignored)
    ));
    for odd_type in [
        "5",
        "null",
        r#"["stats"]"#,
        r#"{"a":"stats"}"#,
        r#""Stats""#,
    ] {
        let line = format!(r#"{{"v":1,"type":{odd_type},"devices":[]}}"#);
        assert!(
            matches!(parse_line(line.as_bytes()), Ok(Incoming::Ignored)),
            "{line}"
        );
    }
    assert!(matches!(
        parse_line(br#"{"type":"stats","type":"hello","v":1}"#),
        Ok(Incoming::Hello(_))
    ));
    let reply = parse_line(br#"{"ok":true,"v":1,"type":"reply","id":4,"path":"/p","new":1}"#);
    assert!(matches!(
        reply,
        Ok(Incoming::Reply(AgentReply {
            id: 4,
            ok: true,
            ..
        }))
    ));
    let dup = parse_line(br#"{"v":1,"type":"hello","python":"2.7","python":"3.12"}"#);
    let Ok(Incoming::Hello(dup)) = dup else {
        panic!("{dup:?}");
    };
    assert_eq!(
        dup.python.as_deref(),
        Some("3.12"),
        "the last duplicate wins"
    );
    let long = format!(
        r#"{{"v":1,"type":"hello","alloc_conf":"{}"}}"#,
        "x".repeat(100_000)
    );
    let Ok(Incoming::Hello(long)) = parse_line(long.as_bytes()) else {
        panic!("a long hello");
    };
    assert!(
        long.alloc_conf.unwrap().len() < 1024,
        "text from an agent is cut"
    );
    for (bad, why) in [
        (&b"garbage"[..], "not JSON"),
        (b"\xff\xfe", "UTF-8"),
        (b"[1]", "object"),
        (b"17", "object"),
        (br#"{"v":2,"type":"hello"}"#, "version 2"),
        (br#"{"type":"hello"}"#, "version none"),
        (br#"{"v":"1","type":"hello"}"#, "version"),
        (br#"{"v":1.0,"type":"hello"}"#, "version"),
        (br#"{"v":1,"type":"reply","ok":true}"#, "integer id"),
        (
            br#"{"v":1,"type":"reply","id":1.5,"ok":true}"#,
            "integer id",
        ),
        (br#"{"v":1,"type":"hello"} x"#, "not JSON"),
    ] {
        let err = parse_line(bad).unwrap_err();
        assert!(err.contains(why), "{err:?} should mention {why:?}");
    }
}

#[test]
fn only_the_first_64_devices_are_read() {
    let devices: Vec<Value> = (0..5000u32)
        .map(|i| json!({"index": i, "stats": {"allocated_bytes.all.current": i}}))
        .collect();
    let line = json!({"v":1,"type":"stats","devices":devices}).to_string();
    let Ok(Incoming::Stats(stats)) = parse_line(line.as_bytes()) else {
        panic!("not stats");
    };
    assert_eq!(stats.listed, 5000);
    assert_eq!(stats.devices.len(), MAX_DEVICES_PER_AGENT);
    assert_eq!(stats.devices[63].allocated_bytes, Some(63));
}

fn wait_for_outcomes(hub: &mut AgentHub) -> Vec<CommandOutcome> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        hub.poll();
        let outcomes = hub.take_outcomes();
        if !outcomes.is_empty() || Instant::now() > deadline {
            return outcomes;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn valid_agent_stream_commands_and_replies() {
    let dir = TempDir::new();
    let began = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let server = serve(&dir, move |stream| {
        let mut w = stream.try_clone().unwrap();
        writeln!(w, "{}\n{}", hello(), stats(1, 100)).unwrap();
        let mut lines = io::BufReader::new(stream).lines();
        let cmd: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        tx.send(cmd.clone()).unwrap();
        writeln!(w, "{}", stats(2, 200)).unwrap();
        writeln!(
            w,
            r#"{{"v":1,"type":"reply","id":{},"ok":true,"cmd":"snapshot","path":"/tmp/s.pickle"}}"#,
            cmd["id"]
        )
        .unwrap();
        writeln!(w, r#"{{"v":1,"type":"event","kind":"oom","device":0}}"#).unwrap();
        // Open until the test has read it all: an end seen with the lines would drop the agent.
        let _ = done_rx.recv();
    });
    let mut hub = AgentHub::new(dir.0.clone());
    let infos = poll_until(&mut hub, |i, _| {
        i.get(&my_pid()).is_some_and(|t| !t.devices.is_empty())
    });
    let info = &infos[&my_pid()];
    assert_eq!(info.devices[0].allocated_bytes, Some(100));
    let age = info.age_seconds.expect("an age");
    assert!(
        (0.0..=began.elapsed().as_secs_f64()).contains(&age),
        "{age} s is older than the test"
    );
    let id = hub.request(my_pid(), AgentCommand::Snapshot).unwrap();
    let sent = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(sent, json!({"v":1,"type":"cmd","id":id,"cmd":"snapshot"}));
    let infos = poll_until(&mut hub, |i, _| {
        i[&my_pid()].devices[0].allocated_bytes == Some(200)
    });
    assert_eq!(infos[&my_pid()].devices[0].allocated_bytes, Some(200));
    let outcomes = wait_for_outcomes(&mut hub);
    let [CommandOutcome::Replied {
        pid,
        command,
        reply,
    }] = &outcomes[..]
    else {
        panic!("{outcomes:?}");
    };
    assert_eq!((*pid, *command), (my_pid(), AgentCommand::Snapshot));
    assert_eq!((reply.id, reply.ok), (id, true));
    assert_eq!(reply.path.as_deref(), Some("/tmp/s.pickle"));
    let events = hub.take_events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].event.kind.as_str(), events[0].event.device),
        ("oom", Some(0))
    );
    assert_eq!(
        events[0].uid,
        Some(crate::sys::effective_uid()),
        "the user it serves"
    );
    assert!(hub
        .request(4_000_000, AgentCommand::ResetPeak)
        .unwrap_err()
        .contains("no agent"));
    drop(done_tx);
    server.join().unwrap();
}

#[test]
fn replies_nobody_asked_for_are_dropped() {
    let dir = TempDir::new();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let server = serve(&dir, move |stream| {
        let mut w = stream.try_clone().unwrap();
        writeln!(w, "{}", hello()).unwrap();
        for id in [1, 2, 99] {
            writeln!(w, r#"{{"v":1,"type":"reply","id":{id},"ok":true,"cmd":"snapshot","path":"/etc/shadow"}}"#).unwrap();
        }
        let mut lines = io::BufReader::new(stream).lines();
        let cmd: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        tx.send(cmd.clone()).unwrap();
        // The right id, answered twice: the second is as unsolicited as the first three.
        for _ in 0..2 {
            writeln!(w, r#"{{"v":1,"type":"reply","id":{},"ok":false,"cmd":"reset_peak","error":"no CUDA"}}"#, cmd["id"]).unwrap();
        }
        // Lines are read in order: once these stats are in, both answers have been handled.
        writeln!(w, "{}", stats(7, 700)).unwrap();
        let _ = done_rx.recv();
    });
    let mut hub = AgentHub::new(dir.0.clone());
    poll_until(&mut hub, |i, h| {
        i.contains_key(&my_pid()) && logged(h, "ignored a reply")
    });
    assert!(
        logged(&hub, "ignored a reply to command 1"),
        "{:?}",
        hub.log()
    );
    assert!(hub.take_outcomes().is_empty());
    let id = hub.request(my_pid(), AgentCommand::ResetPeak).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap()["id"], id);
    let outcomes = wait_for_outcomes(&mut hub);
    assert!(
        matches!(&outcomes[..], [CommandOutcome::Replied { command: AgentCommand::ResetPeak, reply, .. }] if reply.id == id && !reply.ok),
        "{outcomes:?}"
    );
    poll_until(&mut hub, |i, _| {
        i[&my_pid()].devices.first().and_then(|d| d.allocated_bytes) == Some(700)
    });
    assert!(hub.take_outcomes().is_empty(), "a second answer is dropped");
    assert_eq!(
        hub.log()
            .iter()
            .filter(|l| l.contains("ignored a reply"))
            .count(),
        1
    );
    drop(done_tx);
    server.join().unwrap();
}

#[test]
fn a_reply_on_another_connection_is_dropped() {
    let dir = TempDir::new();
    let asked = ForkedAgent::bind(&dir.0);
    let liar = ForkedAgent::bind(&dir.0);
    let mut hub = AgentHub::new(dir.0.clone());
    hub.poll();
    let mut asked_stream = asked.accept(PATIENCE).unwrap();
    let mut liar_stream = liar.accept(PATIENCE).unwrap();
    writeln!(asked_stream, "{}", hello()).unwrap();
    writeln!(liar_stream, "{}", hello()).unwrap();
    poll_until(&mut hub, |i, _| i.len() == 2);
    let id = hub.request(asked.pid, AgentCommand::Snapshot).unwrap();
    writeln!(
        liar_stream,
        r#"{{"v":1,"type":"reply","id":{id},"ok":true,"path":"/etc/shadow"}}"#
    )
    .unwrap();
    poll_until(&mut hub, |_, h| logged(h, "ignored a reply"));
    assert!(logged(
        &hub,
        &format!("pid {}: ignored a reply to command {id}", liar.pid)
    ));
    assert!(hub.take_outcomes().is_empty());
}

#[test]
fn a_command_without_an_answer_times_out() {
    let dir = TempDir::new();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let server = serve(&dir, move |mut stream| {
        writeln!(stream, "{}", hello()).unwrap();
        // Reads nothing and answers nothing until the test is over.
        let _ = done_rx.recv();
    });
    let limits = Limits {
        command_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let mut hub = AgentHub::with_limits(dir.0.clone(), limits);
    poll_until(&mut hub, |i, _| i.contains_key(&my_pid()));
    hub.request(my_pid(), AgentCommand::Snapshot).unwrap();
    let outcomes = wait_for_outcomes(&mut hub);
    assert_eq!(
        outcomes,
        vec![CommandOutcome::TimedOut {
            pid: my_pid(),
            command: AgentCommand::Snapshot,
            after: Duration::from_millis(300)
        }]
    );
    drop(done_tx);
    server.join().unwrap();
}

#[test]
fn commands_to_an_agent_that_reads_none_fail_at_once() {
    let dir = TempDir::new();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let server = serve(&dir, move |mut stream| {
        writeln!(stream, "{}", hello()).unwrap();
        let _ = done_rx.recv();
    });
    let limits = Limits {
        max_awaiting: usize::MAX,
        ..Limits::default()
    };
    let mut hub = AgentHub::with_limits(dir.0.clone(), limits);
    poll_until(&mut hub, |i, _| i.contains_key(&my_pid()));
    // The socket's buffers take some thousands of commands; then the next one must fail, not wait.
    let refusal = (0..1_000_000)
        .find_map(|_| hub.request(my_pid(), AgentCommand::ResetPeak).err())
        .unwrap();
    assert!(refusal.contains("is not reading its commands"), "{refusal}");
    assert_eq!(
        hub.connections(),
        1,
        "a full socket is no reason to drop the agent"
    );
    done_tx.send(()).unwrap();
    server.join().unwrap();
}

#[test]
fn at_most_16_commands_wait_for_an_answer() {
    let dir = TempDir::new();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let server = serve(&dir, move |mut stream| {
        writeln!(stream, "{}", hello()).unwrap();
        let _ = done_rx.recv();
    });
    let mut hub = AgentHub::new(dir.0.clone());
    poll_until(&mut hub, |i, _| i.contains_key(&my_pid()));
    for _ in 0..16 {
        hub.request(my_pid(), AgentCommand::ResetPeak).unwrap();
    }
    let refusal = hub.request(my_pid(), AgentCommand::Snapshot).unwrap_err();
    assert!(
        refusal.contains("has not answered 16 earlier commands"),
        "{refusal}"
    );
    drop(done_tx);
    server.join().unwrap();
}

#[test]
fn a_command_lost_with_its_connection_is_reported() {
    let dir = TempDir::new();
    let server = serve(&dir, |stream| {
        writeln!(&stream, "{}", hello()).unwrap();
        let mut line = String::new();
        io::BufReader::new(&stream).read_line(&mut line).unwrap();
    });
    let mut hub = AgentHub::new(dir.0.clone());
    poll_until(&mut hub, |i, _| i.contains_key(&my_pid()));
    hub.request(my_pid(), AgentCommand::ResetPeak).unwrap();
    let outcomes = wait_for_outcomes(&mut hub);
    assert!(
        matches!(&outcomes[..], [CommandOutcome::Unanswered { command: AgentCommand::ResetPeak, reason, .. }] if reason.contains("closed")),
        "{outcomes:?}"
    );
    server.join().unwrap();
}

/// `count` forked agents that each say hello and then stay silent.
fn silent_agents(dir: &Path, count: usize) -> (Vec<ForkedAgent>, Greeter) {
    let agents: Vec<ForkedAgent> = (0..count).map(|_| ForkedAgent::bind(dir)).collect();
    let listeners = agents
        .iter()
        .map(|a| a.listener.try_clone().unwrap())
        .collect();
    let greeting = format!("{}\n", hello()).into_bytes();
    (agents, Greeter::start(listeners, greeting))
}

#[test]
fn past_the_connection_cap_the_oldest_idle_is_dropped() {
    let dir = TempDir::new();
    let (agents, server) = silent_agents(&dir.0, 6);
    let limits = Limits {
        max_connections: 4,
        ..Limits::default()
    };
    let mut hub = AgentHub::with_limits(dir.0.clone(), limits);
    let infos = poll_until(&mut hub, |_, h| {
        h.log()
            .iter()
            .filter(|l| l.contains("the most torchtop keeps"))
            .count()
            >= 2
    });
    assert!(hub.connections() <= 4);
    assert!(infos.len() <= 4);
    assert!(
        logged(
            &hub,
            "4 agent connections are open, the most torchtop keeps: dropped the one to pid"
        ),
        "{:?}",
        hub.log()
    );
    drop(agents);
    drop(server);
}

#[test]
fn unfinished_lines_beyond_the_budget_drop_the_biggest() {
    let dir = TempDir::new();
    let agents: Vec<ForkedAgent> = (0..4).map(|_| ForkedAgent::bind(&dir.0)).collect();
    let limits = Limits {
        pending_budget: 1 << 20,
        ..Limits::default()
    };
    let mut hub = AgentHub::with_limits(dir.0.clone(), limits);
    hub.poll();
    let mut streams: Vec<UnixStream> = agents.iter().map(|a| a.accept(PATIENCE).unwrap()).collect();
    for stream in &mut streams {
        writeln!(stream, "{}", hello()).unwrap();
    }
    poll_until(&mut hub, |i, _| i.len() == 4);
    // Three small unfinished lines, then one that grows past the 1 MiB budget on its own.
    for stream in &mut streams[..3] {
        stream.write_all(&[b' '; 100_000]).unwrap();
    }
    let _ = streams[3].write_all(&vec![b' '; 900_000]);
    let infos = poll_until(&mut hub, |_, h| logged(h, "unfinished lines of all agents"));
    let dropped = format!(
        "pid {}: dropped the connection: its unfinished line held",
        agents[3].pid
    );
    assert!(logged(&hub, &dropped), "{:?}", hub.log());
    assert_eq!(infos.len(), 3, "the small ones stay");
    assert!(!infos.contains_key(&agents[3].pid));
}

/// An agent that says hello, then sends `payload` and keeps the connection open.
fn assert_dropped(payload: Vec<u8>, reason: &str) {
    let dir = TempDir::new();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let server = serve(&dir, move |mut stream| {
        writeln!(stream, "{}", hello()).unwrap();
        let _ = stream.write_all(&payload);
        let _ = done_rx.recv();
    });
    let mut hub = AgentHub::new(dir.0.clone());
    let infos = poll_until(&mut hub, |_, h| logged(h, reason));
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
fn too_many_devices_are_ignored_with_one_log_line() {
    let dir = TempDir::new();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let server = serve(&dir, move |mut stream| {
        let devices: Vec<Value> = (0..5000u32)
            .map(|i| json!({"index": i, "stats": {"allocated_bytes.all.current": i}}))
            .collect();
        writeln!(stream, "{}", hello()).unwrap();
        for step in 1..=3 {
            let line = json!({"v":1,"type":"stats","step":step,"devices":devices});
            writeln!(stream, "{line}").unwrap();
        }
        let _ = done_rx.recv();
    });
    let mut hub = AgentHub::new(dir.0.clone());
    // Lines are read in order: at step 3, all three have been.
    let infos = poll_until(&mut hub, |i, _| {
        i.get(&my_pid()).is_some_and(|t| t.step == Some(3))
    });
    assert_eq!(infos[&my_pid()].devices.len(), MAX_DEVICES_PER_AGENT);
    assert_eq!(
        hub.log()
            .iter()
            .filter(|l| l.contains("lists 5000 devices; only the first 64 are read"))
            .count(),
        1,
        "{:?}",
        hub.log()
    );
    drop(done_tx);
    server.join().unwrap();
}

#[test]
fn peer_dying_mid_line_is_fine() {
    let dir = TempDir::new();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let server = serve(&dir, move |mut stream| {
        write!(
            stream,
            "{}\n{}\n{{\"v\":1,\"type\":\"sta",
            hello(),
            stats(1, 5)
        )
        .unwrap();
        // Dies only once the test has seen it alive.
        let _ = done_rx.recv();
    });
    let mut hub = AgentHub::new(dir.0.clone());
    let infos = poll_until(&mut hub, |i, _| i.contains_key(&my_pid()));
    assert_eq!(infos[&my_pid()].devices[0].allocated_bytes, Some(5));
    drop(done_tx);
    server.join().unwrap();
    let infos = poll_until(&mut hub, |i, _| i.is_empty());
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

/// A README review: a torchtop in a pid namespace of its own (`unshare --pid --fork
/// --mount-proc torchtop --once`) sees none of the host's pids, and removed the sockets of live
/// training jobs, which never came back. A socket someone listens on is never stale.
/// An agent whose process is stopped: the kernel accepts the connection, the agent says
/// nothing. The hub lists it as silent until it speaks, then as heard.
#[test]
fn an_agent_that_says_nothing_is_listed_silent_until_its_hello() {
    let dir = TempDir::new();
    let (speak, spoken) = std::sync::mpsc::channel::<()>();
    let _server = serve(&dir, move |mut stream| {
        let _ = spoken.recv();
        let _ = writeln!(stream, "{}\n{}", hello(), stats(1, 10));
        thread::sleep(PATIENCE);
    });
    let mut hub = AgentHub::new(dir.0.clone());
    poll_until(&mut hub, |_, hub| !hub.silent().is_empty());
    let silent = hub.silent().to_vec();
    assert_eq!(silent.len(), 1, "{silent:?}");
    assert_eq!(silent[0].pid, my_pid());
    assert!(silent[0].seconds >= 0.0);
    speak.send(()).unwrap();
    let infos = poll_until(&mut hub, |infos, _| infos.contains_key(&my_pid()));
    assert!(infos.contains_key(&my_pid()), "{:?}", hub.log());
    assert_eq!(hub.silent(), [], "heard, so not silent");
}

#[test]
fn a_socket_someone_listens_on_is_kept_whatever_its_pid() {
    let dir = TempDir::new();
    let unseen = 999_999_997u32; // above pid_max: a pid this /proc cannot show
    let _listener = UnixListener::bind(dir.sock(unseen)).unwrap();
    let mut hub = AgentHub::new(dir.0.clone());
    hub.poll();
    assert!(dir.sock(unseen).exists(), "{:?}", hub.log());
    assert!(!logged(&hub, "removed stale socket"), "{:?}", hub.log());
}

#[test]
fn a_symlink_named_like_a_socket_is_not_followed() {
    let dir = TempDir::new();
    let elsewhere = dir.1.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    let _listener = UnixListener::bind(elsewhere.join("real.sock")).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("real.sock"), dir.sock(my_pid())).unwrap();
    let mut hub = AgentHub::new(dir.0.clone());
    hub.poll();
    assert_eq!(hub.connections(), 0);
    assert!(hub.log().is_empty(), "{:?}", hub.log());
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
    if !require_program("python3") {
        return;
    }
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(&code)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut ready = String::new();
    io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready.trim(), "ready");
    // The file is named after our pid (alive); the peer is the child.
    let mut hub = AgentHub::new(dir.0.clone());
    let infos = poll_until(&mut hub, |_, h| logged(h, "uid 65534"));
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

/// Every key of `torch.cuda.memory_stats()` (what agents sent before they picked the keys torchtop
/// reads), each with a value of its own.
fn whole_memory_stats() -> serde_json::Map<String, Value> {
    let mut keys = Vec::new();
    for family in [
        "allocation",
        "segment",
        "active",
        "inactive_split",
        "allocated_bytes",
        "reserved_bytes",
        "active_bytes",
        "inactive_split_bytes",
        "requested_bytes",
    ] {
        for pool in ["all", "small_pool", "large_pool"] {
            for counter in ["current", "peak", "allocated", "freed"] {
                keys.push(format!("{family}.{pool}.{counter}"));
            }
        }
    }
    for family in ["oversize_allocations", "oversize_segments"] {
        for counter in ["current", "peak", "allocated", "freed"] {
            keys.push(format!("{family}.{counter}"));
        }
    }
    for scalar in [
        "num_alloc_retries",
        "num_ooms",
        "num_sync_all_streams",
        "num_device_alloc",
        "num_device_free",
        "max_split_size",
    ] {
        keys.push(scalar.to_string());
    }
    keys.into_iter()
        .enumerate()
        .map(|(i, key)| (key, json!(1000 + i)))
        .collect()
}

#[test]
fn the_whole_memory_stats_dict_and_the_keys_torchtop_reads_give_the_same_figures() {
    let whole = whole_memory_stats();
    assert_eq!(whole.len(), 122);
    let picked: serde_json::Map<String, Value> = crate::protocol::STAT_KEYS
        .iter()
        .map(|key| (key.to_string(), whole[*key].clone()))
        .collect();
    let line = |stats: &serde_json::Map<String, Value>| {
        json!({"v": 1, "type": "stats", "seq": 1, "devices": [{"index": 0, "stats": stats}]})
            .to_string()
    };
    let from_whole = info_of(&hello(), &line(&whole)).devices;
    let from_picked = info_of(&hello(), &line(&picked)).devices;
    assert_eq!(from_whole, from_picked);
    let d = &from_picked[0];
    let figures = [
        d.allocated_bytes,
        d.reserved_bytes,
        d.active_bytes,
        d.inactive_split_bytes,
        d.requested_bytes,
        d.peak_allocated_bytes,
        d.segments,
        d.alloc_retries,
        d.ooms,
        d.peak_reserved_bytes,
        d.large_pool_reserved_bytes,
        d.small_pool_reserved_bytes,
        d.allocations_total,
        d.frees_total,
        d.oversize_allocations,
        d.oversize_segments,
        d.max_split_size_bytes,
    ];
    let expected: Vec<Option<u64>> = crate::protocol::STAT_KEYS
        .iter()
        .map(|key| whole[*key].as_u64())
        .collect();
    assert_eq!(
        figures.to_vec(),
        expected,
        "each key lands in its own field"
    );
}

/// Polls into `heard` until `done` holds or [`PATIENCE`] passes.
fn poll_into_until(
    hub: &mut AgentHub,
    heard: &mut std::collections::HashMap<u32, Heard>,
    done: impl Fn(&std::collections::HashMap<u32, Heard>) -> bool,
) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        hub.poll_into(heard);
        if done(heard) || Instant::now() > deadline {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_agents_figures_are_built_once_per_stats_and_refilled_in_place() {
    let dir = TempDir::new();
    let (next_tx, next_rx) = std::sync::mpsc::channel::<()>();
    let server = serve(&dir, move |mut stream| {
        writeln!(stream, "{}\n{}", hello(), stats(1, 100)).unwrap();
        let _ = next_rx.recv();
        writeln!(stream, "{}", stats(2, 200)).unwrap();
        let _ = next_rx.recv();
    });
    let mut hub = AgentHub::new(dir.0.clone());
    let mut heard = std::collections::HashMap::new();
    let allocated = |h: &std::collections::HashMap<u32, Heard>| {
        h.get(&my_pid())
            .and_then(|h| h.info.devices.first())
            .and_then(|d| d.allocated_bytes)
    };
    poll_into_until(&mut hub, &mut heard, |h| allocated(h) == Some(100));
    let first = Arc::clone(&heard[&my_pid()].info);
    assert_eq!(first.age_seconds, None, "the age is the join's");
    assert!(heard[&my_pid()].stats_at.is_some());
    hub.poll_into(&mut heard);
    assert!(
        Arc::ptr_eq(&first, &heard[&my_pid()].info),
        "no stats came: the same figures"
    );
    drop(first);
    next_tx.send(()).unwrap();
    let kept = Arc::as_ptr(&heard[&my_pid()].info);
    poll_into_until(&mut hub, &mut heard, |h| allocated(h) == Some(200));
    assert_eq!(
        Arc::as_ptr(&heard[&my_pid()].info),
        kept,
        "refilled in place, no one else holding them"
    );
    let held = Arc::clone(&heard[&my_pid()].info);
    drop(next_tx);
    server.join().unwrap();
    // The connection ended: the figures held elsewhere stay as they were.
    assert_eq!(held.devices[0].allocated_bytes, Some(200));
}
