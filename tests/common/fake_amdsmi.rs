//! The fake `libamd_smi.so` (tests/fake-amdsmi/fake_amdsmi.c) as the integration tests use
//! it: compiled with the system C compiler once per test process into
//! `target/fake-amdsmi/`, and the environment that points torchtop at it and at a scenario.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Environment variable naming the scenario file the fake library reads at `amdsmi_init`.
pub const SCENARIO_ENV: &str = "TORCHTOP_FAKE_AMDSMI_SCENARIO";
/// Environment variable naming the amd-smi library torchtop loads.
pub const LIB_ENV: &str = "TORCHTOP_AMDSMI_LIB";

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Compiles the fake library (once per test process) and returns its path.
pub fn fake_amdsmi_library() -> PathBuf {
    static LIBRARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match LIBRARY.get_or_init(build) {
        Ok(path) => path.clone(),
        Err(why) => panic!("{why}"),
    }
}

fn build() -> Result<PathBuf, String> {
    if !super::require_program("cc") {
        return Err("cc is needed to build the fake amd-smi library".into());
    }
    let source = repo_root().join("tests/fake-amdsmi/fake_amdsmi.c");
    let dir = repo_root().join("target/fake-amdsmi");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // Compile under a private name, then rename: test binaries running at once each see a
    // whole file.
    let staging = dir.join(format!(".libamd_smi.so.{}", std::process::id()));
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&staging)
        .arg(&source)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run cc to build the fake amd-smi library: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building the fake amd-smi library failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let installed = dir.join("libamd_smi.so");
    std::fs::rename(&staging, &installed)
        .map_err(|e| format!("cannot install {}: {e}", installed.display()))?;
    Ok(installed)
}

/// A scenario file for the fake library, removed when dropped.
pub struct AmdSmiScenario {
    file: tempfile::NamedTempFile,
}

impl AmdSmiScenario {
    pub fn new(text: &str) -> Self {
        let file = tempfile::Builder::new()
            .prefix("torchtop-amdsmi-")
            .suffix(".txt")
            .tempfile()
            .unwrap();
        std::fs::write(file.path(), text).unwrap();
        AmdSmiScenario { file }
    }

    /// The variables that make torchtop load the fake library with this scenario.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (LIB_ENV.into(), fake_amdsmi_library().display().to_string()),
            (SCENARIO_ENV.into(), self.file.path().display().to_string()),
        ]
    }
}
