//! Issue 14's screen work in a pseudo-terminal against the fake NVML: the detail view reads a
//! real process's cwd, environment and children and acts on it; compact mode fits 19 of 20
//! processes at 120x40; `g` and `m` filter by GPU and by user; the clock follows `TZ`.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::common;

use common::fake_nvml::{env_refs, ScenarioFile, Sleepers};
use common::pty::PtySession;
use common::PATIENCE;

fn spawn(
    scenario: &ScenarioFile,
    args: &[&str],
    extra: &[(&str, &str)],
    cols: u16,
    rows: u16,
) -> PtySession {
    let mut env = scenario.env();
    // "Only mine" means the sudo user under sudo; here it must be the uid running the tests.
    env.push(("SUDO_UID".to_string(), String::new()));
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    PtySession::spawn(
        &common::torchtop_binary(),
        args,
        &env_refs(&env),
        cols,
        rows,
    )
}

/// A shell that forks one `sleep` (a stand-in DataLoader worker) and waits, in a process group
/// of its own so that both are killed on drop.
struct Job {
    child: Child,
}

impl Job {
    fn spawn(cwd: &Path, env: &[(&str, &str)]) -> Job {
        let mut command = Command::new("sh");
        command
            .args(["-c", "sleep 600 & wait"])
            .current_dir(cwd)
            .envs(env.iter().copied())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Job {
            child: command.spawn().expect("spawn sh"),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // SAFETY: kill has no memory effects; the group is this job's own (process_group(0)).
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// One GPU per pid, each holding that pid.
fn gpus_with(pids: &[u32]) -> String {
    let mut text = String::from("[system]\ndriver_version = \"550.54.15\"\n");
    for (i, pid) in pids.iter().enumerate() {
        text.push_str(&format!(
            "\n[[gpu]]\nname = \"Test GPU {i}\"\nmemory_total_mib = 81920\nmemory_used_mib = 4096\n\
             utilization_gpu = 50\n\n[[gpu.process]]\npid = {pid}\nused_memory_mib = 2048\n"
        ));
    }
    text
}

/// The process rows on screen: lines whose first word is one of `pids`.
fn rows_of(screen: &str, pids: &[u32]) -> Vec<u32> {
    screen
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|pid| pids.contains(pid))
        .collect()
}

#[test]
fn enter_shows_cwd_environment_and_children_and_k_acts_from_there() {
    let dir = tempfile::tempdir().unwrap();
    let job = Job::spawn(
        dir.path(),
        &[
            ("NCCL_DEBUG", "INFO"),
            ("RANK", "3"),
            ("HIDDEN_SECRET", "x"),
        ],
    );
    let pid = job.pid();
    let scenario = ScenarioFile::new(&gpus_with(&[pid]));
    let mut session = spawn(&scenario, &[], &[], 120, 40);
    assert!(
        session.wait_for(PATIENCE, |s| rows_of(s, &[pid]) == [pid]),
        "{}",
        session.screen()
    );
    session.send(b"\r");
    let cwd = dir.path().canonicalize().unwrap().display().to_string();
    let shown = |s: &str| {
        s.contains("NCCL_DEBUG=INFO")
            && s.contains("RANK=3")
            && s.contains(&cwd)
            && s.contains("Children (1)")
            && s.contains(" sleep")
    };
    assert!(session.wait_for(PATIENCE, shown), "{}", session.screen());
    assert!(
        !session.screen().contains("HIDDEN_SECRET"),
        "{}",
        session.screen()
    );
    session.send(b"K");
    assert!(
        session.wait_for(PATIENCE, |s| s.contains("to this process?")
            && s.contains(&pid.to_string())),
        "K from the detail view asks about its process:\n{}",
        session.screen()
    );
    session.send(b"\x1b");
    assert!(
        session.wait_for(PATIENCE, |s| !s.contains("to this process?")
            && s.contains("NCCL_DEBUG")),
        "Esc closed the question and the view stayed:\n{}",
        session.screen()
    );
    session.send(b"\x1b");
    assert!(
        session.wait_for(PATIENCE, |s| !s.contains("NCCL_DEBUG")
            && s.contains("COMMAND")),
        "a second Esc closed the view:\n{}",
        session.screen()
    );
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).expect("q quits").success());
}

#[test]
fn compact_mode_shows_19_of_20_processes_at_120x40_with_4_gpus() {
    let sleepers = Sleepers::spawn(20);
    let pids = sleepers.pids();
    let scenario = ScenarioFile::from_fixture("four_gpus_20_procs.toml", &pids);
    // The scenario's GPUs touch their power cap now and then: the warnings panel keeps their
    // rows for 30 s, which would be counted against compact mode here.
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "[rules.throttle]\nenabled = false\n").unwrap();
    let config_arg = config.path().to_str().unwrap();
    let mut session = spawn(&scenario, &["--config", config_arg], &[], 120, 40);
    assert!(
        session.wait_for(PATIENCE, |s| !rows_of(s, &pids).is_empty()),
        "{}",
        session.screen()
    );
    session.send(b"c");
    assert!(
        session.wait_for(PATIENCE, |s| rows_of(s, &pids).len() >= 19),
        "fewer than 19 rows in compact mode:\n{}",
        session.screen()
    );
    session.send(b"q");
    assert!(session.wait_exit(PATIENCE).expect("q quits").success());
}

#[test]
fn g_filters_by_gpu_and_m_shows_only_my_processes() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: a process of another user needs root to start");
        return;
    }
    let mine = Sleepers::spawn(1);
    let mut theirs = Command::new("sleep");
    theirs.arg("600").uid(65534).gid(65534).stdin(Stdio::null());
    let mut theirs = theirs.spawn().expect("spawn sleep as nobody");
    let (a, b) = (mine.pid(0), theirs.id());
    let scenario = ScenarioFile::new(&gpus_with(&[a, b]));
    let mut session = spawn(&scenario, &[], &[], 120, 40);
    let shows = |want: &'static [usize]| {
        move |s: &str| {
            let mut rows = rows_of(s, &[a, b]);
            rows.sort_unstable();
            let mut wanted: Vec<u32> = want.iter().map(|&i| [a, b][i]).collect();
            wanted.sort_unstable();
            rows == wanted
        }
    };
    let steps: [(&[u8], &'static [usize], &str); 5] = [
        (b"g", &[0], "GPUs 0"),
        (b"g", &[1], "GPUs 1"),
        (b"g", &[0, 1], "every GPU"),
        (b"m", &[0], "only mine"),
        (b"m", &[0, 1], "COMMAND"),
    ];
    assert!(
        session.wait_for(PATIENCE, shows(&[0, 1])),
        "{}",
        session.screen()
    );
    for (key, want, text) in steps {
        session.send(key);
        assert!(
            session.wait_for(PATIENCE, |s| shows(want)(s) && s.contains(text)),
            "after {:?}: want rows {want:?} and {text:?}:\n{}",
            String::from_utf8_lossy(key),
            session.screen()
        );
    }
    session.send(b"q");
    let _ = theirs.kill();
    let _ = theirs.wait();
    assert!(session.wait_exit(PATIENCE).expect("q quits").success());
}

#[test]
fn the_clock_is_local_as_tz_says_and_utc_with_the_flag() {
    if !Path::new("/usr/share/zoneinfo/Asia/Kolkata").exists() {
        eprintln!("skipped: no tzdata (/usr/share/zoneinfo)");
        return;
    }
    let scenario = ScenarioFile::new(&gpus_with(&[]));
    for (args, zone) in [(&[][..], " IST"), (&["--utc"][..], " UTC")] {
        let mut session = spawn(&scenario, args, &[("TZ", "Asia/Kolkata")], 100, 30);
        let header = |s: &str| {
            s.lines()
                .next()
                .is_some_and(|l| l.trim_end().ends_with(zone))
        };
        assert!(
            session.wait_for(PATIENCE, header),
            "{args:?}:\n{}",
            session.screen()
        );
        session.send(b"q");
        assert!(session.wait_exit(PATIENCE).expect("q quits").success());
    }
}
