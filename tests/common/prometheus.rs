//! `torchtop serve` instances and a real Prometheus for the exporter and cluster tests: each
//! started on a free port in a private directory, waited for by polling, and stopped on drop.
//! Also a tiny HTTP/1.0 GET, so the tests need no HTTP client crate of their own.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a free port")
}

/// One HTTP/1.0 GET: (status, head, body). Errors are strings for the assertion messages.
pub fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Result<(u16, String, String), String> {
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_read_timeout(Some(timeout)).ok();
    stream.set_write_timeout(Some(timeout)).ok();
    let mut request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (key, value) in headers {
        request.push_str(&format!("{key}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP head in {answer:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, head.to_string(), body.to_string()))
}

/// A running `torchtop serve`; killed on drop.
pub struct Serve {
    child: Child,
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Serve {
    /// Starts `torchtop [top] serve --listen 127.0.0.1:0 [args]` with `env`, and waits for the
    /// address it prints.
    pub fn start(top: &[&str], args: &[&str], env: &[(String, String)]) -> Serve {
        let mut child = Command::new(super::torchtop_binary())
            .args(top)
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start torchtop serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                // Kept before the address goes out, so that a caller who has it sees the line.
                sink.lock().unwrap().push_str(&format!("{line}\n"));
                if let Some(rest) = line.split("://").nth(1) {
                    if let Some(addr) = rest.strip_suffix("/metrics") {
                        let _ = addr_tx.send(addr.to_string());
                    }
                }
            }
        });
        let addr = if let Ok(addr) = addr_rx.recv_timeout(super::PATIENCE) {
            addr.parse().expect("a socket address")
        } else {
            let _ = child.kill();
            panic!(
                "torchtop serve printed no address; stderr:\n{}",
                stderr.lock().unwrap()
            );
        };
        Serve {
            child,
            addr,
            stderr,
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Polls /metrics until `condition` holds on the body; returns the last body.
    pub fn wait_for_metrics(&self, timeout: Duration, condition: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Ok((200, _, body)) = http_get(self.addr, "/metrics", &[], super::PATIENCE) {
                if condition(&body) {
                    return body;
                }
                last = body;
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "/metrics never satisfied the condition; last body:\n{last}\nstderr:\n{}",
            self.stderr()
        );
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus scraping `targets` every second, in a temporary directory.
pub struct Prometheus {
    child: Child,
    dir: tempfile::TempDir,
    pub url: String,
}

impl Prometheus {
    pub fn start(targets: &[SocketAddr]) -> Prometheus {
        let dir = tempfile::tempdir().expect("temporary directory");
        let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: torchtop\n    static_configs:\n      - targets: [{}]\n",
            list.join(", ")
        );
        Self::start_with_config(dir, &config)
    }

    /// Starts Prometheus on `config` (YAML) with its data in `dir`, and waits until it is ready.
    pub fn start_with_config(dir: tempfile::TempDir, config: &str) -> Prometheus {
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write prometheus.yml");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=1d")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus {
            child,
            dir,
            url: format!("http://127.0.0.1:{port}"),
        };
        prometheus.wait_ready(port);
        prometheus
    }

    fn wait_ready(&self, port: u16) {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + super::PATIENCE;
        while Instant::now() < deadline {
            if let Ok((200, _, _)) = http_get(addr, "/-/ready", &[], Duration::from_secs(5)) {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("Prometheus never became ready:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `torchtop cluster --prometheus URL --once` with `extra` arguments: (exit status, stdout,
/// stderr).
pub fn cluster_once(url: &str, extra: &[&str]) -> (ExitStatus, String, String) {
    let output = Command::new(super::torchtop_binary())
        .args(["cluster", "--prometheus", url, "--once"])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("run torchtop cluster");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status, text(&output.stdout), text(&output.stderr))
}

/// Polls `torchtop cluster --once --json` (with `extra` arguments) until `condition` holds on
/// its document, for at most 90 s; fails saying `what` it waited for, with the last document.
pub fn wait_for_cluster(
    prometheus: &Prometheus,
    extra: &[&str],
    what: &str,
    condition: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    let args: Vec<&str> = std::iter::once("--json")
        .chain(extra.iter().copied())
        .collect();
    loop {
        let (_, stdout, _) = cluster_once(&prometheus.url, &args);
        let doc: Option<Value> = serde_json::from_str(&stdout).ok();
        if let Some(doc) = doc.as_ref().filter(|doc| condition(doc)) {
            return doc.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the cluster view never showed {what}; last answer:\n{doc:#?}\nPrometheus log:\n{}",
            prometheus.log()
        );
        thread::sleep(Duration::from_millis(500));
    }
}
