//! `torchtop serve` and `--once --format prometheus` against the fake NVML: the exposition
//! passes `promtool check metrics` (but for the camelCase label dcgm-exporter itself uses), a
//! missing figure is left out, command lines appear only with `--expose-commands`, OpenMetrics
//! comes by content negotiation, a hung GPU leaves scrapes answering, the web config's TLS
//! and basic auth work with curl, and TORCHTOP_HOSTNAME names the host for both.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::fake_nvml::ScenarioFile;
use common::prometheus::{http_get, Serve};
use common::{require_program, PATIENCE};

/// One GPU with every field (energy and remapped rows too) and two ranks of a job.
fn scenario(pids: &[u32]) -> String {
    let mut text =
        common::fake_nvml::fill_pids(&common::fake_nvml::fixture_text("one_gpu.toml"), pids);
    text = text.replace(
        "ecc_uncorrected = 0\n",
        "ecc_uncorrected = 0\nenergy_mj = 123456789\nremapped_rows = { correctable = 3, uncorrectable = 1 }\n",
    );
    text
}

fn ranks() -> Vec<std::process::Child> {
    (0..2)
        .map(|rank| {
            Command::new("sleep")
                .arg("600")
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", "29511")
                .env("SECRET_TOKEN", "hunter2")
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect()
}

fn once_prometheus(scenario: &ScenarioFile) -> String {
    let output = Command::new(common::torchtop_binary())
        .args(["--once", "--format", "prometheus"])
        .envs(scenario.env())
        .stdin(Stdio::null())
        .output()
        .expect("run torchtop");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `promtool check metrics` on `text`: its complaints, one a line.
fn promtool_problems(text: &str) -> Vec<String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let problems: Vec<String> = all
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    assert!(
        output.status.success() || !problems.is_empty(),
        "promtool failed without saying why: {:?}",
        output.status
    );
    problems
}

#[test]
fn the_exposition_passes_promtool_and_leaves_missing_values_out() {
    let mut children = ranks();
    let pids: Vec<u32> = children.iter().map(std::process::Child::id).collect();
    let scenario = ScenarioFile::new(&scenario(&pids));
    let text = once_prometheus(&scenario);
    let job_label = format!(
        "training_job=\"{}\"",
        common::job_of_mine("job 127.0.0.1:29511")
    );
    for wanted in [
        "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-4d3f1c2a-6b7e-4f10-9a2b-0c1d2e3f4a5b\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=",
        "DCGM_FI_DEV_FB_USED{",
        "} 40960\n",
        "DCGM_FI_DEV_FB_FREE{",
        "DCGM_FI_DRIVER_VERSION=\"550.54.15\"",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{",
        "} 123456789\n",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{",
        "torchtop_gpu_state{",
        "state=\"ok\"} 1\n",
        "torchtop_process_gpu_memory_bytes{",
        job_label.as_str(),
        "rank=\"1\"",
        "torchtop_host_memory_total_bytes{",
    ] {
        assert!(text.contains(wanted), "no {wanted:?} in:\n{text}");
    }
    // The fixture's GPU has no fan figure in DCGM's list, and no agent: no allocator series.
    assert!(!text.contains("torchtop_allocator_"), "{text}");
    // Command lines and environments only with --expose-commands.
    assert!(
        !text.contains("sleep 600") && !text.contains("command="),
        "{text}"
    );
    assert!(!text.contains("hunter2"));

    if require_program("promtool") {
        let problems = promtool_problems(&text);
        // dcgm-exporter's own label `modelName` is camelCase; dashboards need it as it is.
        let others: Vec<&String> = problems
            .iter()
            .filter(|p| {
                !p.ends_with("label names should be written in 'snake_case' not 'camelCase'")
            })
            .collect();
        assert!(others.is_empty(), "promtool: {others:#?}\n{text}");
    }
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A review: `TORCHTOP_HOSTNAME=myhost torchtop --once --format prometheus` labelled every
/// series with the machine's own name while `serve` said `myhost`: the textfile's series and
/// the exporter's named one machine two ways.
#[test]
fn once_prometheus_takes_the_host_name_serve_takes() {
    let scenario = ScenarioFile::from_fixture("one_gpu.toml", &[std::process::id()]);
    let env = [
        &scenario.env()[..],
        &[("TORCHTOP_HOSTNAME".to_string(), "myhost".to_string())],
    ]
    .concat();
    let output = Command::new(common::torchtop_binary())
        .args(["--once", "--format", "prometheus"])
        .envs(env.iter().cloned())
        .stdin(Stdio::null())
        .output()
        .expect("run torchtop");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let util = |text: &str| {
        let line = text
            .lines()
            .find(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{"));
        line.unwrap_or_else(|| panic!("no utilization series in:\n{text}"))
            .to_string()
    };
    let hostnames: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split("Hostname=\"").nth(1))
        .collect();
    assert!(!hostnames.is_empty(), "{text}");
    assert!(
        hostnames.iter().all(|h| h.starts_with("myhost\"")),
        "{text}"
    );
    let serve = Serve::start(&["-d", "0.2"], &[], &env);
    let body = serve.wait_for_metrics(PATIENCE, |m| m.contains("DCGM_FI_DEV_GPU_UTIL{"));
    assert!(util(&body).contains("Hostname=\"myhost\""), "{body}");
    assert!(util(&text).contains("Hostname=\"myhost\""), "{text}");
}

/// Xid errors come as NVML events: 0 until the first one (as dcgm-exporter reports it), then the
/// code of the last one, whatever else the scrape carries.
#[test]
fn xid_errors_are_exported_as_the_last_code_seen() {
    let text = common::fake_nvml::fixture_text("one_gpu.toml").replace(
        "ecc_uncorrected = 0\n",
        "ecc_uncorrected = 0\nxid = [{ at_s = 5.0, code = 31 }, { at_s = 5.5, code = 79 }]\n",
    );
    let scenario = ScenarioFile::new(&common::fake_nvml::fill_pids(&text, &[std::process::id()]));
    let once = once_prometheus(&scenario);
    let xid_line = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("DCGM_FI_DEV_XID_ERRORS{"))
            .map(str::to_string)
    };
    let first = xid_line(&once).unwrap_or_else(|| panic!("no Xid series in:\n{once}"));
    assert!(first.ends_with("} 0"), "{first}");
    let serve = Serve::start(&["-d", "0.2"], &[], &scenario.env());
    let body = serve.wait_for_metrics(PATIENCE, |m| {
        xid_line(m).is_some_and(|l| l.ends_with("} 79"))
    });
    assert!(xid_line(&body).unwrap().contains("gpu=\"0\""), "{body}");
}

#[test]
fn serve_answers_both_formats_and_exposes_commands_only_when_asked() {
    let mut children = ranks();
    let pids: Vec<u32> = children.iter().map(std::process::Child::id).collect();
    let scenario = ScenarioFile::new(&scenario(&pids));
    let plain = Serve::start(
        &["-d", "0.2"],
        &["--hostname", "exporter-test"],
        &scenario.env(),
    );
    let body = plain.wait_for_metrics(PATIENCE, |m| {
        m.contains("torchtop_process_gpu_memory_bytes{")
    });
    assert!(body.contains("Hostname=\"exporter-test\""), "{body}");
    assert!(!body.contains("command="), "{body}");
    assert!(body.contains("torchtop_sample_age_seconds{"), "{body}");
    assert!(body.contains("torchtop_scrape_duration_seconds{"), "{body}");
    let (status, head, open) = http_get(
        plain.addr,
        "/metrics",
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )],
        PATIENCE,
    )
    .unwrap();
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(open.ends_with("# EOF\n"), "{open}");
    let (status, head, _) = http_get(plain.addr, "/metrics", &[], PATIENCE).unwrap();
    assert_eq!(status, 200);
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let (status, _, _) = http_get(plain.addr, "/nope", &[], PATIENCE).unwrap();
    assert_eq!(status, 404);

    let exposed = Serve::start(&["-d", "0.2"], &["--expose-commands"], &scenario.env());
    let body = exposed.wait_for_metrics(PATIENCE, |m| m.contains("torchtop_process_info{"));
    assert!(body.contains("command=\"sleep 600\""), "{body}");
    assert!(body.contains("master_port=\"29511\""), "{body}");
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn a_hung_gpu_leaves_scrapes_answering_and_is_exported_as_stale() {
    let scenario = ScenarioFile::from_fixture("hung_gpu.toml", &[]);
    let serve = Serve::start(&["-d", "0.2"], &[], &scenario.env());
    let body = serve.wait_for_metrics(PATIENCE, |m| {
        m.lines().any(|l| {
            l.starts_with("torchtop_gpu_state{gpu=\"1\"")
                && l.contains("state=\"stale\"")
                && l.ends_with(" 1")
        })
    });
    assert!(body.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""), "{body}");
    assert!(
        !body.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\""),
        "a stale GPU's old figures: {body}"
    );
    // Scrape after scrape keeps answering while GPU 1's worker stays blocked in the driver.
    for _ in 0..20 {
        let (status, _, body) = http_get(serve.addr, "/metrics", &[], PATIENCE)
            .unwrap_or_else(|e| panic!("a scrape failed: {e}\n{}", serve.stderr()));
        assert_eq!(status, 200);
        assert!(body.contains("torchtop_gpu_state{gpu=\"1\""));
    }
}

/// Any local user can open connections. Before, connections that held every slot (silent ones
/// for the 10 s header timeout, idle keep-alive ones for their 5-minute lifetime) left a scrape
/// on a new connection waiting in the kernel's queue until one of them ended. Now the new
/// connection closes the one idle the longest, and is answered.
#[test]
fn idle_connections_holding_every_slot_do_not_starve_a_scrape() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let scenario = ScenarioFile::from_fixture("hung_gpu.toml", &[]);
    let serve = Serve::start(&["-d", "0.2"], &[], &scenario.env());
    serve.wait_for_metrics(PATIENCE, |m| m.contains("DCGM_FI_DEV_GPU_UTIL{"));
    let idle: Vec<TcpStream> = (0..256)
        .map(|_| {
            let mut stream = TcpStream::connect(serve.addr).expect("connect");
            stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
            stream
                .write_all(b"GET / HTTP/1.1\r\nHost: flood\r\n\r\n")
                .expect("send");
            let mut answer = Vec::new();
            let mut buffer = [0u8; 512];
            while !String::from_utf8_lossy(&answer).contains("/metrics.\n") {
                let read = stream.read(&mut buffer).expect("the answer to /");
                assert!(read > 0, "closed before answering: {}", serve.stderr());
                answer.extend_from_slice(&buffer[..read]);
            }
            stream
        })
        .collect();
    let (status, _, body) = http_get(serve.addr, "/metrics", &[], PATIENCE)
        .unwrap_or_else(|e| panic!("the scrape failed: {e}\n{}", serve.stderr()));
    assert_eq!(status, 200);
    assert!(body.contains("DCGM_FI_DEV_GPU_UTIL{"), "{body}");
    let closed = idle
        .iter()
        .filter(|stream| {
            stream.set_nonblocking(true).expect("nonblocking");
            !matches!((&mut &**stream).read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        })
        .count();
    assert!(
        closed <= 2,
        "the scrape closed {closed} idle connections, not one"
    );
}

#[test]
fn the_web_config_gives_tls_and_basic_auth() {
    if !require_program("openssl") || !require_program("curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(dir.path().join("server.key"))
        .arg("-out")
        .arg(dir.path().join("server.crt"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    // Cost 4 keeps the test quick; admins use 10 or more.
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prom: '{hash}'\n"),
    )
    .unwrap();
    let scenario = ScenarioFile::from_fixture("hung_gpu.toml", &[]);
    let serve = Serve::start(
        &[],
        &["--web.config.file", web.to_str().unwrap()],
        &scenario.env(),
    );
    assert!(serve.stderr().contains("https://"), "{}", serve.stderr());
    let url = format!("https://{}/metrics", serve.addr);
    let curl = |args: &[&str]| {
        let output = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "60",
                "--cacert",
            ])
            .arg(dir.path().join("server.crt"))
            .args(args)
            .arg(&url)
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).to_string()
    };
    assert_eq!(curl(&[]), "401");
    assert_eq!(curl(&["-u", "prom:wrong"]), "401");
    assert_eq!(curl(&["-u", "nobody:s3cret"]), "401");
    let deadline = std::time::Instant::now() + PATIENCE;
    while curl(&["-u", "prom:s3cret"]) != "200" {
        assert!(
            std::time::Instant::now() < deadline,
            "the right password never got in"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Plain HTTP on the TLS port gets no metrics.
    let plain = http_get(serve.addr, "/metrics", &[], Duration::from_secs(10));
    assert!(!matches!(plain, Ok((200, _, _))), "{plain:?}");
}

#[test]
fn once_prometheus_without_a_driver_still_prints_the_host() {
    let scenario = ScenarioFile::from_fixture("init_failure.toml", &[]);
    let text = once_prometheus(&scenario);
    assert!(!text.contains("DCGM_FI_DEV_GPU_UTIL"), "{text}");
    assert!(text.contains("torchtop_host_memory_total_bytes{"), "{text}");
}

/// A review: with NVML missing, `serve` said only "listening on" and its scrapes simply had no
/// GPU series, and `record` wrote hours of frames without a GPU and without a word.
#[test]
fn without_nvml_serve_and_record_say_so_and_the_exposition_has_nvml_up_0() {
    let missing = ["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"];
    let once = |extra: &[&str]| {
        let output = Command::new(common::torchtop_binary())
            .args(extra)
            .args(["--once", "--format", "prometheus"])
            .envs(ScenarioFile::new("[[gpu]]\nname = \"One\"\n").env())
            .stdin(Stdio::null())
            .output()
            .expect("run torchtop");
        String::from_utf8(output.stdout).unwrap()
    };
    let up = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("torchtop_nvml_up{"))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
    };
    assert_eq!(up(&once(&[])).as_deref(), Some("1"));
    assert_eq!(up(&once(&missing)).as_deref(), Some("0"));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.ttrec");
    let output = Command::new(common::torchtop_binary())
        .args(missing)
        .args(["record", "-o", file.to_str().unwrap(), "--duration", "1s"])
        .stdin(Stdio::null())
        .output()
        .expect("run torchtop record");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("torchtop record: no GPU figures: ").count(),
        1,
        "{stderr}"
    );
}
