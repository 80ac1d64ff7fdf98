//! The fake `libnvidia-ml.so.1` (tests/fake-nvml) as the integration tests use it: built once
//! per test process, scenario files written from text or from the fixtures in tests/fixtures
//! (with the pids of real child processes filled in), and the environment that points torchtop
//! at both.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Environment variable naming the scenario file the fake library reads at init.
pub const SCENARIO_ENV: &str = "TORCHTOP_FAKE_NVML_SCENARIO";
/// Environment variable naming the NVML library torchtop loads.
pub const NVML_LIB_ENV: &str = "TORCHTOP_NVML_LIB";

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fake_target_dir() -> PathBuf {
    repo_root().join("target").join("fake-nvml")
}

/// Builds the fake library (once per test process) and returns the path of its copy named
/// `libnvidia-ml.so.1`, in a directory that holds nothing else (fit for `LD_LIBRARY_PATH`).
pub fn fake_nvml_library() -> PathBuf {
    static LIBRARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match LIBRARY.get_or_init(build_and_install) {
        Ok(path) => path.clone(),
        Err(why) => panic!("{why}"),
    }
}

/// The directory holding `libnvidia-ml.so.1`, for `LD_LIBRARY_PATH`.
pub fn fake_nvml_library_dir() -> PathBuf {
    let library = fake_nvml_library();
    library
        .parent()
        .expect("the library path has a directory")
        .to_path_buf()
}

fn build_and_install() -> Result<PathBuf, String> {
    let target = fake_target_dir();
    // A target dir of its own, so this never waits on the lock of the build running the tests.
    let output = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--locked",
            "-p",
            "fake-nvml",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(repo_root())
        .env_remove("CARGO_TARGET_DIR")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run cargo to build the fake NVML library: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building the fake NVML library failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let built = target.join("debug").join("libnvidia_ml.so");
    let lib_dir = target.join("lib");
    std::fs::create_dir_all(&lib_dir)
        .map_err(|e| format!("cannot create {}: {e}", lib_dir.display()))?;
    let installed = lib_dir.join("libnvidia-ml.so.1");
    // Copy under a private name, then rename: test binaries running at once each see a whole file.
    let staging = lib_dir.join(format!(".libnvidia-ml.so.1.{}", std::process::id()));
    std::fs::copy(&built, &staging).map_err(|e| format!("cannot copy {}: {e}", built.display()))?;
    std::fs::rename(&staging, &installed)
        .map_err(|e| format!("cannot install {}: {e}", installed.display()))?;
    Ok(installed)
}

/// `tests/fixtures/<name>`.
pub fn fixture_path(name: &str) -> PathBuf {
    repo_root().join("tests").join("fixtures").join(name)
}

/// The text of a fixture; panics with the path if it cannot be read.
pub fn fixture_text(name: &str) -> String {
    let path = fixture_path(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()))
}

/// Replaces each `{{pid:N}}` in a scenario template with `pids[N % pids.len()]` (so a short
/// list of pids is reused). Panics if the template has placeholders and `pids` is empty.
pub fn fill_pids(template: &str, pids: &[u32]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{pid:") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "{{pid:".len()..];
        let end = after
            .find("}}")
            .unwrap_or_else(|| panic!("unterminated {{{{pid:N}}}} in scenario template"));
        let n: usize = after[..end]
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("bad placeholder {{{{pid:{}}}}}", &after[..end]));
        assert!(!pids.is_empty(), "the scenario template needs pids");
        out.push_str(&pids[n % pids.len()].to_string());
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// A machine of `gpus` H100-like GPUs, every figure moving, with `processes` GPU processes
/// dealt to the GPUs in turn; `{{pid:N}}` placeholders as in the fixtures.
pub fn many_gpus_scenario(gpus: usize, processes: usize) -> String {
    let mut text = String::from(
        "[system]\ndriver_version = \"550.54.15\"\nnvml_version = \"12.550.54.15\"\n\
         cuda_driver_version = 12040\n",
    );
    for gpu in 0..gpus {
        text.push_str(&format!(
            "\n[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\n\
             uuid = \"GPU-00000000-a100-4e00-8f00-c0ffee{gpu:06x}\"\n\
             bus_id = \"00000000:{:02x}:00.0\"\nmemory_total_mib = 81559\n\
             power_limit_w = 700\nnum_fans = 0\nunsupported = [\"fan\"]\n\
             utilization_gpu = {{ fn = \"sine\", mean = 55, amplitude = 35, period_s = 10 }}\n\
             memory_used_mib = {{ fn = \"ramp\", from = 20000, to = 60000, duration_s = 60, repeat = true }}\n\
             temperature_c = {{ fn = \"sine\", mean = 58, amplitude = 8, period_s = 30 }}\n\
             power_w = {{ fn = \"sine\", mean = 450, amplitude = 200, period_s = 10 }}\n\
             pcie_rx_kbs = {{ fn = \"noise\", mean = 400000, amplitude = 300000, seed = {gpu} }}\n",
            0x18 + gpu
        ));
        for process in (gpu..processes).step_by(gpus) {
            text.push_str(&format!(
                "\n[[gpu.process]]\npid = {{{{pid:{process}}}}}\nused_memory_mib = {}\n\
                 sm_percent = {{ fn = \"noise\", mean = 20, amplitude = 2, seed = {process} }}\n\
                 mem_percent = 30\n",
                256 + process % 64
            ));
        }
    }
    text
}

/// A scenario written to a file of its own under target/fake-nvml/tmp; removed on drop.
pub struct ScenarioFile {
    path: PathBuf,
}

impl ScenarioFile {
    /// Writes `text` as a new scenario file.
    pub fn new(text: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = fake_target_dir().join("tmp");
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("scenario-{}-{n}.toml", std::process::id()));
        let file = ScenarioFile { path };
        file.rewrite(text);
        file
    }

    /// A fixture from tests/fixtures with `{{pid:N}}` filled from `pids`.
    pub fn from_fixture(name: &str, pids: &[u32]) -> Self {
        Self::new(&fill_pids(&fixture_text(name), pids))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's content in one step (write aside, then rename), so a client that
    /// reloads it never reads half a file.
    pub fn rewrite(&self, text: &str) {
        let staging = self.path.with_extension("toml.new");
        std::fs::write(&staging, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", staging.display()));
        std::fs::rename(&staging, &self.path)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", self.path.display()));
    }

    /// The environment that makes torchtop load the fake library with this scenario. Its
    /// default agents' directory is one no agent serves in (under an `XDG_RUNTIME_DIR` that
    /// does not exist), so that an agent running on the machine (a developer's job beside
    /// `cargo test`) adds no row; a test that starts agents names their directory with
    /// `TORCHTOP_AGENT_DIR`, which comes first.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                NVML_LIB_ENV.to_string(),
                fake_nvml_library().display().to_string(),
            ),
            (SCENARIO_ENV.to_string(), self.path.display().to_string()),
            (
                "XDG_RUNTIME_DIR".to_string(),
                self.path
                    .with_extension("no-runtime-dir")
                    .display()
                    .to_string(),
            ),
        ]
    }
}

impl Drop for ScenarioFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Borrows `(String, String)` pairs as the `(&str, &str)` pairs `PtySession::spawn` takes.
pub fn env_refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Real child processes (`sleep`) whose pids a scenario can name; killed and reaped on drop.
pub struct Sleepers {
    children: Vec<Child>,
}

impl Sleepers {
    pub fn spawn(count: usize) -> Self {
        let children = (0..count).map(|_| sleep(None)).collect();
        Sleepers { children }
    }

    /// One sleeper per name, each with a command line that reads `<name> 600`, so torchtop's
    /// filter can find it.
    pub fn named(names: &[&str]) -> Self {
        let children = names.iter().map(|name| sleep(Some(name))).collect();
        Sleepers { children }
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    pub fn pid(&self, i: usize) -> u32 {
        self.children[i].id()
    }

    /// Whether the `i`-th child still runs (it is reaped if it has ended).
    pub fn running(&mut self, i: usize) -> bool {
        matches!(self.children[i].try_wait(), Ok(None))
    }

    /// Waits for the `i`-th child to end and reaps it; `None` if it still runs after `timeout`.
    pub fn wait_exit(&mut self, i: usize, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.children[i].try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills and reaps the `i`-th child, so its pid no longer exists.
    pub fn kill(&mut self, i: usize) {
        let child = &mut self.children[i];
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn sleep(name: Option<&str>) -> Child {
    let mut command = Command::new("sleep");
    if let Some(name) = name {
        command.arg0(name);
    }
    command
        .arg("600")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a sleep process")
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
