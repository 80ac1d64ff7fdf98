//! `sudo torchtop` reads the agents of other users' training processes, in the directory each
//! process's environment names (as its agent works it out), and only there where that user owns
//! the directory: a user cannot point root's monitor at a directory that is not theirs, and root
//! writes and removes nothing in theirs. A user's process that holds no GPU is found through the
//! user's default directory. The monitor runs as root, the users' processes as `nobody`;
//! elsewhere these tests say so and pass.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::fake_nvml::ScenarioFile;
use crate::common::wait_until;
use crate::launch_support::{
    dir_of, fake_torch_dir, is_root, listing, nobody_python, open_base, python_as,
    python_for_nobody, spawn_python, Killed, NOBODY,
};

fn agent_module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/python")
}

/// A script that starts the agent (interval 100 ms) with the stand-in torch on GPU 0 and idles.
fn agent_script() -> String {
    format!(
        "import sys, time, torch\nsys.path.insert(0, {:?})\nimport torchtop_agent\n\
         torch.cuda._fake_init([0])\ntorchtop_agent.start(interval_ms=100)\n\
         print('ready', flush=True)\nwhile True:\n    time.sleep(0.05)\n",
        agent_module_dir().display().to_string()
    )
}

fn gpu_with(pids: &[u32]) -> ScenarioFile {
    let mut text = "[[gpu]]\nname = \"Shared GPU\"\nmemory_total_mib = 81920\n".to_string();
    for pid in pids {
        text += &format!("[[gpu.process]]\npid = {pid}\nused_memory_mib = 2048\n");
    }
    ScenarioFile::new(&text)
}

/// `torchtop --once --json` as root, reading its own agents from `own` (empty).
fn once(scenario: &ScenarioFile, own: &Path) -> Value {
    crate::common::once_json_of(
        Command::new(crate::common::torchtop_binary())
            .envs(scenario.env())
            .env("TORCHTOP_AGENT_DIR", own)
            .env_remove("XDG_RUNTIME_DIR"),
    )
}

fn row(doc: &Value, pid: u32) -> Option<&Value> {
    doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
}

/// The python `nobody` can run, when this test can run at all.
fn setting() -> Option<PathBuf> {
    if !is_root() {
        println!("skipped: root reading other users' agents needs root and uid {NOBODY}");
        return None;
    }
    let python = python_for_nobody();
    if python.is_none() {
        crate::ci::skip_or_fail(&format!("no python that uid {NOBODY} can run"));
    }
    python
}

#[test]
fn root_reads_another_users_agent_where_its_process_says_and_writes_nothing_there() {
    let Some(python) = setting() else {
        return;
    };
    let base = open_base();
    let own = dir_of(&base.path().join("root-agents"), 0, 0o700);
    // A login session's runtime directory: the agent serves in `$XDG_RUNTIME_DIR/torchtop`.
    let runtime = dir_of(&base.path().join("run-user"), NOBODY, 0o700);
    let fake_torch = fake_torch_dir();
    let user = nobody_python(
        &python,
        &agent_script(),
        &[("XDG_RUNTIME_DIR", &runtime), ("PYTHONPATH", &fake_torch)],
    );
    let pid = user.pid();
    let theirs = runtime.join("torchtop");
    let socket = theirs.join(format!("{pid}.sock"));
    wait_until("the user's agent socket", || socket.exists());
    let scenario = gpu_with(&[pid]);

    wait_until("root's monitor to show the user's allocator", || {
        let doc = once(&scenario, &own);
        let torch = &row(&doc, pid).expect("the GPU row")["torch"];
        torch["devices"][0]["allocated_bytes"].as_u64().is_some()
    });
    assert_eq!(listing(&theirs), [(format!("{pid}.sock"), NOBODY)]);

    // The process is gone and its socket stale: root leaves it where it is.
    drop(user);
    let doc = once(&scenario, &own);
    assert!(row(&doc, pid).is_none_or(|r| r["torch"].is_null()));
    assert_eq!(listing(&theirs), [(format!("{pid}.sock"), NOBODY)]);
    assert_eq!(listing(&own), []);
}

#[test]
fn a_user_cannot_point_roots_monitor_at_a_directory_that_is_not_theirs() {
    let Some(python) = setting() else {
        return;
    };
    let base = open_base();
    let own = dir_of(&base.path().join("root-agents"), 0, 0o700);
    // Root's other agents, which the monitor is not asked to read.
    let decoy = dir_of(&base.path().join("root-elsewhere"), 0, 0o700);
    let (root_agent, _out) = start_root_agent(&python, &decoy);
    let root_pid = root_agent.pid();
    let fake_torch = fake_torch_dir();
    let loop_code = "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.05)\n";
    let user = nobody_python(
        &python,
        loop_code,
        &[("TORCHTOP_AGENT_DIR", &decoy), ("PYTHONPATH", &fake_torch)],
    );
    let scenario = gpu_with(&[user.pid()]);

    let doc = once(&scenario, &own);

    assert!(
        row(&doc, root_pid).is_none(),
        "root's agent elsewhere was read because a user named its directory: {doc}"
    );
    let user_row = row(&doc, user.pid()).expect("the user's GPU row");
    assert!(user_row["torch"].is_null(), "{user_row}");
}

/// A uid (nobody's, else one just below it) whose default agent directory
/// `/tmp/torchtop-<uid>` does not exist yet, so the test's agent makes it and the test removes
/// it: one left by another program is neither used nor touched.
fn uid_without_a_tmp_agent_dir() -> Option<u32> {
    (0..100)
        .map(|below| NOBODY - below)
        .find(|uid| std::fs::symlink_metadata(format!("/tmp/torchtop-{uid}")).is_err())
}

/// Removes the directory the test's agent made, once that agent has ended.
struct RemovedAfter(PathBuf);

impl Drop for RemovedAfter {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A user's process that holds no GPU yet (loading its data, say) serves its agent in the
/// user's default directory, `/tmp/torchtop-<uid>`. Root learned users' directories only from
/// their GPU processes, so it never listed this one, while a monitor run as that user did.
#[test]
fn root_lists_a_users_process_that_holds_no_gpu_for_its_agent() {
    let Some(python) = setting() else {
        return;
    };
    let Some(uid) = uid_without_a_tmp_agent_dir() else {
        crate::ci::skip_or_fail("every /tmp/torchtop-<uid> this test may use exists already");
        return;
    };
    let base = open_base();
    let own = dir_of(&base.path().join("root-agents"), 0, 0o700);
    let theirs = PathBuf::from(format!("/tmp/torchtop-{uid}"));
    let _removed = RemovedAfter(theirs.clone());
    // Neither TORCHTOP_AGENT_DIR nor XDG_RUNTIME_DIR: the agent serves in /tmp/torchtop-<uid>.
    let fake_torch = fake_torch_dir();
    let user = python_as(
        uid,
        &python,
        &agent_script(),
        &[("PYTHONPATH", &fake_torch)],
    );
    let pid = user.pid();
    let socket = theirs.join(format!("{pid}.sock"));
    wait_until("the user's agent socket in its default directory", || {
        socket.exists()
    });
    let no_process_on_the_gpu = gpu_with(&[]);

    let mut found = Value::Null;
    wait_until(
        "root's monitor to list the user's process for its agent",
        || {
            let doc = once(&no_process_on_the_gpu, &own);
            found = row(&doc, pid).cloned().unwrap_or(Value::Null);
            found["torch"]["devices"][0]["allocated_bytes"]
                .as_u64()
                .is_some()
        },
    );

    assert!(found["gpu"].is_null(), "listed for its agent only: {found}");
    assert_eq!(found["uid"], uid, "{found}");
    assert_eq!(listing(&theirs), [(format!("{pid}.sock"), uid)]);
    assert_eq!(listing(&own), []);
}

/// A root process serving an agent in `dir`, which holds no GPU.
fn start_root_agent(
    python: &Path,
    dir: &Path,
) -> (Killed, std::io::BufReader<std::process::ChildStdout>) {
    let code = agent_script().replace(
        "torchtop_agent.start(interval_ms=100)",
        &format!(
            "torchtop_agent.start(interval_ms=100, socket_dir={:?})",
            dir.display().to_string()
        ),
    );
    let (child, mut out) = spawn_python(python, &code);
    assert_eq!(crate::launch_support::first_line(&mut out), "ready");
    let socket = dir.join(format!("{}.sock", child.pid()));
    wait_until("root's agent socket", || socket.exists());
    (child, out)
}

/// Root's own training process in a container (here a mount namespace whose scratch directory
/// is a tmpfs of its own, and a pid namespace where the process is pid 50001): its agent's
/// directory is reached through `/proc/PID/root`, since the same path on the host is another
/// directory, and its socket, named after the container's pid, is not taken for a stale one.
#[test]
fn a_containers_agent_is_read_through_the_containers_filesystem() {
    let Some(python) = setting() else {
        return;
    };
    let base = open_base();
    let own = dir_of(&base.path().join("root-agents"), 0, 0o700);
    let hidden = base.path().join("container-tmp");
    std::fs::create_dir(&hidden).unwrap();
    let agents = hidden.join("agents");
    let mut command = Command::new("unshare");
    command
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--propagation",
            "private",
        ])
        .args(["sh", "-c"])
        .arg(
            "mount -t tmpfs none \"$1\" && echo 50000 > /proc/sys/kernel/ns_last_pid && \
             exec \"$2\" -c \"$3\"",
        )
        .arg("sh")
        .arg(&hidden)
        .arg(&python)
        .arg(agent_script().replace(
            "import sys, time",
            "import os, sys, time\nos.fork() and os.wait() and sys.exit()\nimport sys, time",
        ))
        .env("TORCHTOP_AGENT_DIR", &agents)
        .env("PYTHONPATH", fake_torch_dir())
        .stdout(std::process::Stdio::piped());
    let mut child = command.spawn().expect("unshare");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let _container = Killed(child);
    assert_eq!(crate::launch_support::first_line(&mut out), "ready");
    let (pid, inner_pid) = host_pid_of_agent(&agents);
    assert_ne!(pid, inner_pid);
    let inside = PathBuf::from(format!("/proc/{pid}/root")).join(agents.strip_prefix("/").unwrap());
    wait_until("the agent socket inside the container", || {
        inside.join(format!("{inner_pid}.sock")).exists()
    });
    assert!(!agents.exists(), "the host's path is another directory");
    let scenario = gpu_with(&[pid]);

    wait_until("root's monitor to show the container's allocator", || {
        let doc = once(&scenario, &own);
        let torch = &row(&doc, pid).expect("the GPU row")["torch"];
        torch["devices"][0]["allocated_bytes"].as_u64().is_some()
    });
}

/// The host pid and the container's pid of the process whose environment names `agents`.
fn host_pid_of_agent(agents: &Path) -> (u32, u32) {
    let wanted = format!("TORCHTOP_AGENT_DIR={}", agents.display());
    let mut found = None;
    wait_until("the container's agent process", || {
        found = std::fs::read_dir("/proc").unwrap().find_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let named = environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes());
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
            let pids: Vec<u32> = nspid
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            (named && pids.len() == 2 && pids[1] > 50000).then(|| (pids[0], pids[1]))
        });
        found.is_some()
    });
    found.unwrap()
}

/// Run by `nobody`: listens on `<dir>/<its pid>.sock`, hands the socket to a child that relays
/// every connection to the real agent socket `argv[2]`, prints its pid and ends. The kernel
/// keeps naming the ended pid as the socket's server (`SO_PEERCRED`).
const PID_TRAP: &str = r#"
import os, socket, sys, threading, time
d, real = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.bind(os.path.join(d, "%d.sock" % os.getpid()))
s.listen(8)
if os.fork():
    print(os.getpid(), flush=True)
    os._exit(0)
time.sleep(0.2)
print(os.getpid(), flush=True)
def pump(a, b):
    # The monitor closing its end is the normal end, not an error to print.
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
while True:
    c, _ = s.accept()
    r = socket.socket(socket.AF_UNIX)
    r.connect(real)
    threading.Thread(target=pump, args=(c, r), daemon=True).start()
    threading.Thread(target=pump, args=(r, c), daemon=True).start()
"#;

/// A process of root's (`sleep`) given exactly `pid`, by setting the kernel's last pid just
/// below it; `None` when other processes keep taking it first.
fn process_with_pid(pid: u32) -> Option<Killed> {
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
        let child = Killed(Command::new("sleep").arg("300").spawn().unwrap());
        if child.pid() == pid {
            return Some(child);
        }
    }
    None
}

/// A user's listener ends after handing its socket to a child; its pid is then reused by
/// another user's process (root's here). The socket still names the ended pid as its server,
/// so root's monitor once put the user's figures on the other user's process.
#[test]
fn a_users_socket_never_lends_its_figures_to_a_later_process_of_its_pid() {
    let Some(python) = setting() else {
        return;
    };
    let base = open_base();
    let own = dir_of(&base.path().join("root-agents"), 0, 0o700);
    let theirs = dir_of(&base.path().join("agents"), NOBODY, 0o700);
    let fake_torch = fake_torch_dir();
    let agent = nobody_python(
        &python,
        &agent_script(),
        &[("TORCHTOP_AGENT_DIR", &theirs), ("PYTHONPATH", &fake_torch)],
    );
    let real = theirs.join(format!("{}.sock", agent.pid()));
    wait_until("the user's agent socket", || real.exists());
    let mut trap = Command::new(&python);
    trap.args(["-c", PID_TRAP])
        .arg(&theirs)
        .arg(&real)
        .env_clear()
        .stdout(std::process::Stdio::piped());
    let mut child = crate::launch_support::as_nobody(&mut trap).spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let ended: u32 = crate::launch_support::first_line(&mut out).parse().unwrap();
    let relay: u32 = crate::launch_support::first_line(&mut out).parse().unwrap();
    let _relay = scopeguard_kill(relay);
    let _ = child.wait();
    let Some(victim) = process_with_pid(ended) else {
        crate::ci::skip_or_fail(&format!("could not get pid {ended} again for a process"));
        return;
    };
    let scenario = gpu_with(&[victim.pid(), agent.pid()]);

    let mut doc = Value::Null;
    wait_until("root's monitor to read the user's real agent", || {
        doc = once(&scenario, &own);
        row(&doc, agent.pid()).is_some_and(|r| r["torch"].is_object())
    });

    let victims = row(&doc, victim.pid()).expect("the reused pid's GPU row");
    assert!(
        victims["torch"].is_null(),
        "the user's figures were put on root's `sleep`: {victims}"
    );
    assert_eq!(victims["user"], "root");
}

/// Kills `pid` with SIGKILL when dropped.
fn scopeguard_kill(pid: u32) -> impl Drop {
    struct KillOnDrop(i32);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            // SAFETY: kill has no memory effects; a pid already gone gives ESRCH.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    KillOnDrop(pid as i32)
}
