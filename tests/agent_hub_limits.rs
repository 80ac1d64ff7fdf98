//! The agent hub's bounds at their real values, through its public API: many agents (each a
//! process of its own) are read by one thread, and no more than 256 connections stay open.
//! The tests share this process's thread count, so they run one at a time.

mod common;

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use common::forked_agent::{ForkedAgent, Greeter};
use common::PATIENCE;
use torchtop::collect::agent::{ensure_socket_dir, AgentHub};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const HELLO: &str = r#"{"v":1,"type":"hello","pid":1,"python":"3.12.3","torch":"2.11.0"}"#;

fn threads_of_this_process() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// `count` fake agents in a fresh socket directory, each connection greeted with a hello
/// until the [`Greeter`] is dropped.
fn agents(
    count: usize,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    Vec<ForkedAgent>,
    Greeter,
) {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("agents");
    ensure_socket_dir(&dir).unwrap();
    let agents: Vec<ForkedAgent> = (0..count).map(|_| ForkedAgent::bind(&dir)).collect();
    let listeners = agents
        .iter()
        .map(|a| a.listener.try_clone().unwrap())
        .collect();
    let greeting = format!("{HELLO}\n").into_bytes();
    (scratch, dir, agents, Greeter::start(listeners, greeting))
}

#[test]
fn one_thread_reads_forty_agents() {
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (_scratch, dir, agents, server) = agents(40);
    let before = threads_of_this_process();
    let mut hub = AgentHub::new(dir);
    let deadline = Instant::now() + PATIENCE;
    let mut heard = 0;
    while heard < agents.len() && Instant::now() < deadline {
        heard = hub.poll().len();
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(heard, agents.len(), "log: {:?}", hub.log());
    let added = threads_of_this_process().saturating_sub(before);
    assert!(
        added <= 1,
        "{added} threads were started to read {heard} agents"
    );
    drop(hub);
    drop(server);
}

#[test]
fn no_more_than_256_connections_stay_open() {
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (_scratch, dir, agents, server) = agents(300);
    let mut hub = AgentHub::new(dir);
    let deadline = Instant::now() + PATIENCE;
    let mut most = 0;
    while Instant::now() < deadline {
        most = most.max(hub.poll().len());
        let evicted = hub
            .log()
            .iter()
            .any(|l| l.contains("256 agent connections are open, the most torchtop keeps"));
        if evicted {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    assert!(most <= 256, "{most} agents were connected at once");
    assert!(
        hub.log()
            .iter()
            .any(|l| l.contains("dropped the one to pid")),
        "{:?}",
        hub.log()
    );
    drop(hub);
    drop(agents);
    drop(server);
}
