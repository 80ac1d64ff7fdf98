//! Build script: with the `torch` feature, compiles the C++ shim that reads libtorch's CUDA
//! caching-allocator counters (src/tch_agent/shim.cpp). Without the feature, and in tch's doc-only
//! mode (`torch-doc-only`, no libtorch present), it builds no C++. Always: it writes the
//! `--version` line (version, git commit, features) into `TORCHTOP_LONG_VERSION`.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(torchtop_shim)");
    long_version::emit();
    #[cfg(feature = "torch")]
    shim::build();
}

/// `torchtop 0.1.0 (commit abc1234, features: torch)`. Without git (a crates.io or sdist
/// tarball) the commit comes from cargo's `.cargo_vcs_info.json` when present, else it is
/// `unknown`: a missing git never fails the build.
mod long_version {
    use std::env;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    pub(super) fn emit() {
        let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
        let commit = git_commit(&root)
            .or_else(|| packaged_commit(&root))
            .unwrap_or_else(|| "unknown".into());
        let mut features: Vec<String> = env::vars()
            .filter_map(|(name, _)| Some(name.strip_prefix("CARGO_FEATURE_")?.to_string()))
            .filter(|name| name != "DEFAULT")
            .map(|name| name.to_lowercase().replace('_', "-"))
            .collect();
        features.sort();
        let features = if features.is_empty() {
            "none".to_string()
        } else {
            features.join(", ")
        };
        let version = env::var("CARGO_PKG_VERSION").unwrap_or_default();
        println!(
            "cargo:rustc-env=TORCHTOP_LONG_VERSION={version} (commit {commit}, features: {features})"
        );
    }

    fn git(root: &Path, args: &[&str]) -> Option<String> {
        let output = Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()?;
        let text = String::from_utf8(output.stdout).ok()?;
        output.status.success().then(|| text.trim().to_string())
    }

    /// The short commit of HEAD, only when the crate is the top of its own git work tree: a
    /// tarball unpacked inside some other repository must not take that repository's commit.
    fn git_commit(root: &Path) -> Option<String> {
        let top = git(root, &["rev-parse", "--show-toplevel"])?;
        if Path::new(&top).canonicalize().ok()? != root.canonicalize().ok()? {
            return None;
        }
        let commit = git(root, &["rev-parse", "--short=7", "HEAD"])?;
        // Rebuild the line when HEAD moves: HEAD itself, the branch it names, packed refs.
        let mut watched = vec![git(root, &["rev-parse", "--git-path", "HEAD"])?];
        watched.extend(git(root, &["rev-parse", "--git-path", "packed-refs"]));
        if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
            watched.extend(git(root, &["rev-parse", "--git-path", &branch]));
        }
        for path in watched {
            let path = root.join(path);
            // A path that does not exist would make cargo rerun this script on every build.
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
        Some(commit)
    }

    /// `cargo package` records the commit in `.cargo_vcs_info.json` ("sha1": "...").
    fn packaged_commit(root: &Path) -> Option<String> {
        let path = root.join(".cargo_vcs_info.json");
        let text = std::fs::read_to_string(&path).ok()?;
        println!("cargo:rerun-if-changed={}", path.display());
        let sha = text.split("\"sha1\"").nth(1)?.split('"').nth(1)?;
        let short: String = sha.chars().take(7).collect();
        (short.len() == 7 && short.chars().all(|c| c.is_ascii_hexdigit())).then_some(short)
    }
}

#[cfg(feature = "torch")]
mod shim {
    use std::env;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    const SHIM: &str = "src/tch_agent/shim.cpp";

    /// The same probe torch-sys runs for LIBTORCH_USE_PYTORCH, limited to what the shim needs.
    const PYTHON_PROBE: &str = "
import torch
from torch.utils import cpp_extension
print('LIBTORCH_CXX11:', torch._C._GLIBCXX_USE_CXX11_ABI)
for p in cpp_extension.include_paths():
    print('LIBTORCH_INCLUDE:', p)
for p in cpp_extension.library_paths():
    print('LIBTORCH_LIB:', p)
";

    /// Where libtorch's headers and libraries are, found the way torch-sys finds them.
    struct Libtorch {
        includes: Vec<PathBuf>,
        lib_dir: PathBuf,
        cxx11_abi: String,
    }

    pub(crate) fn build() {
        println!("cargo:rerun-if-changed={SHIM}");
        if env::var_os("CARGO_FEATURE_TORCH_DOC_ONLY").is_some() {
            return;
        }
        let libtorch = match locate() {
            Ok(found) => found,
            Err(why) => panic!("torchtop's torch feature needs libtorch 2.11: {why}"),
        };
        cc::Build::new()
            .cpp(true)
            .pic(true)
            .warnings(false)
            .includes(&libtorch.includes)
            .flag("-std=c++17")
            .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={}", libtorch.cxx11_abi))
            .file(SHIM)
            .compile("torchtop_shim");
        println!(
            "cargo:rustc-link-search=native={}",
            libtorch.lib_dir.display()
        );
        println!("cargo:rustc-link-lib=dylib=c10");
        println!("cargo:rustc-cfg=torchtop_shim");
        keep_cuda_linked(&libtorch.lib_dir);
    }

    /// The linker's --as-needed would drop libtorch_cuda (nothing names its symbols), and with it
    /// the CUDA backend: `tch::Cuda::is_available()` would say false on a GPU machine.
    fn keep_cuda_linked(lib_dir: &Path) {
        if lib_dir.join("libtorch_cuda.so").exists() {
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
            println!("cargo:rustc-link-arg=-ltorch_cuda");
        }
    }

    fn env_var(name: &str) -> Option<String> {
        println!("cargo:rerun-if-env-changed={name}");
        env::var(name).ok().filter(|v| !v.is_empty())
    }

    fn locate() -> Result<Libtorch, String> {
        if env_var("LIBTORCH_USE_PYTORCH").is_some() {
            return from_python();
        }
        let root =
            match env_var("LIBTORCH") {
                Some(dir) => PathBuf::from(dir),
                None if Path::new("/usr/lib/libtorch.so").exists() => PathBuf::from("/usr"),
                None => return Err(
                    "set LIBTORCH to a libtorch directory, or LIBTORCH_USE_PYTORCH=1 with torch \
                     2.11 importable by python"
                        .into(),
                ),
            };
        let include_root = env_var("LIBTORCH_INCLUDE").map_or_else(|| root.clone(), PathBuf::from);
        let lib_root = env_var("LIBTORCH_LIB").map_or_else(|| root.clone(), PathBuf::from);
        Ok(Libtorch {
            includes: vec![
                include_root.join("include"),
                include_root.join("include/torch/csrc/api/include"),
            ],
            lib_dir: lib_root.join("lib"),
            cxx11_abi: env_var("LIBTORCH_CXX11_ABI").unwrap_or_else(|| "1".into()),
        })
    }

    fn from_python() -> Result<Libtorch, String> {
        let python = if env::var_os("VIRTUAL_ENV").is_some() {
            "python"
        } else {
            "python3"
        };
        let output = Command::new(python)
            .arg("-c")
            .arg(PYTHON_PROBE)
            .output()
            .map_err(|e| format!("cannot run {python}: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mut includes = Vec::new();
        let mut lib_dir = None;
        let mut cxx11_abi = None;
        for line in stdout.lines() {
            if let Some(path) = line.strip_prefix("LIBTORCH_INCLUDE: ") {
                includes.push(PathBuf::from(path));
            } else if let Some(path) = line.strip_prefix("LIBTORCH_LIB: ") {
                lib_dir = Some(PathBuf::from(path));
            } else if let Some(flag) = line.strip_prefix("LIBTORCH_CXX11: ") {
                cxx11_abi = Some(if flag == "True" { "1" } else { "0" }.to_string());
            }
        }
        match (lib_dir, cxx11_abi) {
            (Some(lib_dir), Some(cxx11_abi)) if !includes.is_empty() => Ok(Libtorch {
                includes,
                lib_dir,
                cxx11_abi,
            }),
            _ => Err(format!(
                "{python} could not describe its torch install: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )),
        }
    }
}
