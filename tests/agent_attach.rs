//! `torchtop attach` and `torchtop run` against real python3 children with a stand-in torch:
//! the agent's socket appears and an `AgentHub` reads the child's allocator stats.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use torchtop::collect::agent::AgentHub;
use torchtop::model::TorchInfo;

fn fake_torch_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/fake_torch")
}

/// One socket directory for this test binary, set before any test reads the environment.
fn socket_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("tt-attach-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let dir = base.join("agents");
        std::env::set_var("TORCHTOP_AGENT_DIR", &dir);
        dir
    })
    .clone()
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn first_line(out: ChildStdout) -> String {
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    line.trim().to_string()
}

fn stats_for(dir: &Path, pid: u32) -> TorchInfo {
    let mut hub = AgentHub::new(dir.to_path_buf());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let infos = hub.poll();
        if let Some(info) = infos.get(&pid).filter(|i| !i.devices.is_empty()) {
            return info.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no stats for pid {pid}; hub log: {:?}",
            hub.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn attach_starts_the_agent_in_a_running_python() {
    if !have("python3") {
        println!("skipped: python3 is not installed");
        return;
    }
    let dir = socket_dir();
    let code = "import sys, time, torch\n\
                torch.cuda._fake_init([0])\n\
                print('ready', 'torchtop_agent' in sys.modules, flush=True)\n\
                while True:\n    time.sleep(0.05)\n";
    let mut child = Command::new("python3")
        .args(["-c", code])
        .env("PYTHONPATH", fake_torch_dir())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let child = Killed(child);
    let pid = child.0.id();
    assert_eq!(
        first_line(stdout),
        "ready False",
        "the child must start without the agent"
    );
    let socket = dir.join(format!("{pid}.sock"));
    assert!(!socket.exists());

    let version = Command::new("python3")
        .args(["-c", "import sys; print(sys.version_info >= (3, 14))"])
        .output()
        .unwrap();
    let needs_gdb = String::from_utf8_lossy(&version.stdout).trim() == "False";
    if needs_gdb && !have("gdb") {
        println!("skipped: gdb is not installed, and this python3 predates sys.remote_exec");
        return;
    }
    let message = match torchtop::launch::attach(pid) {
        Ok(message) => message,
        Err(e) if e.contains("ptrace is not permitted") => {
            println!("skipped: this machine forbids ptrace, so attach cannot inject: {e}");
            return;
        }
        Err(e) => panic!("attach failed: {e}"),
    };
    assert!(message.contains(&socket.display().to_string()), "{message}");
    assert!(socket.exists());

    let info = stats_for(&dir, pid);
    assert_eq!(info.torch.as_deref(), Some("2.11.0+fake"));
    assert_eq!(info.devices[0].index, 0);
    assert!(
        info.devices[0]
            .allocated_bytes
            .is_some_and(|b| b > 100 << 20),
        "{info:?}"
    );

    let again = torchtop::launch::attach(pid).unwrap();
    assert!(again.contains("already runs the torchtop agent"), "{again}");
}

#[test]
fn attach_refuses_a_process_that_is_not_python() {
    let child = Killed(Command::new("sleep").arg("30").spawn().unwrap());
    let err = torchtop::launch::attach(child.0.id()).unwrap_err();
    assert!(err.contains("is not a Python interpreter"), "{err}");
}

#[test]
fn run_gives_a_python_program_an_agent_and_cleans_up() {
    if !have("python3") {
        println!("skipped: python3 is not installed");
        return;
    }
    let dir = socket_dir();
    let code = format!(
        "import sys\nsys.path.insert(0, {:?})\nimport torch, torchtop_agent\n\
         torch.cuda._fake_init([0])\nprint(torchtop_agent.socket_path(), flush=True)\nsys.stdin.readline()\n",
        fake_torch_dir().display().to_string()
    );
    let mut cmd =
        torchtop::launch::prepare_run(&["python3".to_string(), "-c".to_string(), code]).unwrap();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let socket = first_line(child.stdout.take().unwrap());
    assert_eq!(PathBuf::from(&socket), dir.join(format!("{pid}.sock")));

    let info = stats_for(&dir, pid);
    assert!(
        info.devices[0].reserved_bytes.is_some_and(|b| b > 0),
        "{info:?}"
    );

    child.stdin.take().unwrap().write_all(b"done\n").unwrap();
    assert!(child.wait().unwrap().success());
    assert!(
        !Path::new(&socket).exists(),
        "the socket is removed when the program exits"
    );
}
