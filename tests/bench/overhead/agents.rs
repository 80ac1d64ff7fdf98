//! Stand-in agents for the allocation benchmark: forked children listening on `<pid>.sock` in a
//! private 0700 directory (so the hub's peer check passes as it does for real agents), and one
//! thread here that accepts their connections, says hello and sends a stats line from each
//! every `every`, as a training process's agent does at its interval. The thread's own
//! allocations are not counted ([`super::alloc::uncounted`]): only the monitor's side is.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::forked_agent::ForkedAgent;

/// [`super::alloc::per_tick`] with `agents` stand-in agents connected, each sending stats every `every`:
/// the first `in_nvml` of them are GPU processes of the scenario (their pids fill its first
/// slots of each GPU, `{{pid:0}}`, `{{pid:8}}`, ...: `template` must have 8 per GPU), the
/// others are agent-only rows. Counting starts once every agent's stats have arrived.
pub(crate) fn per_tick_with_agents(
    library: &Path,
    template: &str,
    pids: &[u32],
    (agents, in_nvml): (usize, usize),
    every: Duration,
    phases: &[(u32, u32)],
) -> Vec<super::alloc::PerTick> {
    let mut stand_ins = StandIns::bind(agents);
    let agent_pids = stand_ins.pids();
    let mut filled = pids.to_vec();
    let mut uuids = Vec::new();
    for (i, &pid) in agent_pids.iter().enumerate().take(in_nvml) {
        filled.insert(i * 8, pid);
        uuids.push(format!("{i:08}-a100-4e00-8f00-c0ffee{i:06}"));
    }
    stand_ins.speak(every, uuids);
    let file = crate::common::fake_nvml::ScenarioFile::new(&crate::common::fake_nvml::fill_pids(
        template, &filled,
    ));
    std::env::set_var("TORCHTOP_AGENT_DIR", stand_ins.dir());
    let all_heard = |snapshot: &torchtop::model::Snapshot| {
        agent_pids.iter().all(|pid| {
            (snapshot.processes.iter())
                .any(|p| p.pid == *pid && p.torch.as_ref().is_some_and(|t| t.age_seconds.is_some()))
        })
    };
    let figures = super::alloc::measure_ticks(library, file.path(), phases, all_heard);
    std::env::remove_var("TORCHTOP_AGENT_DIR");
    figures
}

/// The agents, their directory and the thread that speaks for them; all stopped on drop.
pub(crate) struct StandIns {
    dir: PathBuf,
    agents: Vec<ForkedAgent>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StandIns {
    /// `count` agents in a fresh directory; none connected yet (the hub connects on its polls).
    pub(crate) fn bind(count: usize) -> Self {
        let dir =
            std::env::temp_dir().join(format!("torchtop-bench-agents-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create the agents' directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let agents = (0..count).map(|_| ForkedAgent::bind(&dir)).collect();
        StandIns {
            dir,
            agents,
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn pids(&self) -> Vec<u32> {
        self.agents.iter().map(|a| a.pid).collect()
    }

    /// Starts the thread that accepts each agent's connection and then sends stats from each
    /// every `every`; agent `i` reports one device, `cuda:0`, the GPU with UUID `uuids[i]`
    /// (bare, as torch reports it).
    pub(crate) fn speak(&mut self, every: Duration, uuids: Vec<String>) {
        let listeners: Vec<_> = (self.agents.iter())
            .map(|a| a.listener.try_clone().unwrap())
            .collect();
        let stop = Arc::clone(&self.stop);
        self.thread = Some(std::thread::spawn(move || {
            super::alloc::uncounted();
            let mut streams: Vec<Option<UnixStream>> = listeners.iter().map(|_| None).collect();
            let mut line = Vec::with_capacity(4096);
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                seq += 1;
                for (i, listener) in listeners.iter().enumerate() {
                    listener.set_nonblocking(true).unwrap();
                    if streams[i].is_none() {
                        if let Ok((mut stream, _)) = listener.accept() {
                            stream.set_nonblocking(false).unwrap();
                            let _ = stream.write_all(hello(i).as_bytes());
                            streams[i] = Some(stream);
                        }
                    }
                    let Some(stream) = streams[i].as_mut() else {
                        continue;
                    };
                    line.clear();
                    stats_line(&mut line, seq, i, uuids.get(i).map_or("", String::as_str));
                    if stream.write_all(&line).is_err() {
                        streams[i] = None;
                    }
                }
                std::thread::sleep(every);
            }
        }));
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.agents.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn hello(rank: usize) -> String {
    format!(
        "{{\"v\":1,\"type\":\"hello\",\"pid\":1,\"argv\":[\"train.py\"],\"python\":\"3.12.3\",\
         \"torch\":\"2.11.0\",\"rank\":{rank},\"local_rank\":{rank},\"world_size\":8,\
         \"alloc_conf\":\"expandable_segments:True\",\"interval_ms\":100}}\n"
    )
}

/// A stats line as the Python agent writes it, with moving counters; written into `line`
/// (kept by the caller) so the stand-in allocates nothing once it has room.
fn stats_line(line: &mut Vec<u8>, seq: u64, rank: usize, uuid: &str) {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let allocated = (20 + rank as u64) << 30 | (seq % 1024) << 20;
    let reserved = (24 + rank as u64) << 30;
    let _ = writeln!(
        line,
        "{{\"v\":1,\"type\":\"stats\",\"seq\":{seq},\"ts\":{ts},\"step\":{seq},\
         \"step_time_s\":0.1,\"devices\":[{{\"index\":0,\"uuid\":\"{uuid}\",\"stats\":{{\
         \"allocated_bytes.all.current\":{allocated},\"reserved_bytes.all.current\":{reserved},\
         \"active_bytes.all.current\":{allocated},\"inactive_split_bytes.all.current\":1048576,\
         \"requested_bytes.all.current\":{allocated},\"allocated_bytes.all.peak\":{reserved},\
         \"reserved_bytes.all.peak\":{reserved},\"segment.all.current\":40,\
         \"num_alloc_retries\":0,\"num_ooms\":0,\"allocation.all.allocated\":{},\
         \"allocation.all.freed\":{},\"max_split_size\":-1}}}}]}}",
        seq * 100,
        seq * 100 - 5
    );
}
