//! `torchtop run` and `torchtop attach`: putting the agent into Python programs.
//!
//! - [`fn@run`] writes the embedded agent (assets/python/torchtop_agent.py) and its sitecustomize
//!   into a private site directory, `<socket dir>/site-<content hash>` (0700, ours, reached from
//!   `/` through directories only root or we can change; see [`trusted`]), puts it first on
//!   `PYTHONPATH` and execs the command. When that directory cannot be made safely, the command
//!   runs without the agent and stderr says why.
//! - [`fn@attach`] makes a running interpreter start the agent from source carried in memory (the
//!   ptrace injector, gdb, or `sys.remote_exec` on 3.14+); it writes no file where the target
//!   or its environment points.

pub(crate) mod attach;
mod external;
mod inject;
pub(crate) mod run;
mod scratch;
mod start_code;
mod target;
mod trusted;
mod yama;

use std::path::{Path, PathBuf};

pub use attach::{attach, attach_with, inject_python, AttachOptions, Method};
pub use run::{prepare_run, prepare_run_recording, run, Prepared, RECORD_HISTORY_ENV};

/// The agent module, embedded so that torchtop needs no pip install.
pub(crate) const AGENT_SOURCE: &str = include_str!("../../assets/python/torchtop_agent.py");
/// The sitecustomize that starts the agent after chaining any other sitecustomize.
pub(crate) const SITECUSTOMIZE_SOURCE: &str = include_str!("../../assets/python/sitecustomize.py");

/// FNV-1a over both sources: a new torchtop version gets a new site directory, while several
/// runs of one version share theirs.
fn sources_hash() -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in AGENT_SOURCE
        .bytes()
        .chain([0u8])
        .chain(SITECUSTOMIZE_SOURCE.bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Creates (or re-checks) `<socket_dir>/site-<hash>` holding `torchtop_agent.py` and
/// `sitecustomize.py`, and returns its path. The socket directory is created 0700 when missing;
/// it and the site directory must be ours and private, and every directory above them owned by
/// root or us and not writable by others (unless sticky). Otherwise: a sentence, and nothing
/// written.
pub fn prepare_site_dir(socket_dir: &Path) -> Result<PathBuf, String> {
    let sockets = trusted::TrustedDir::open(socket_dir, true)?;
    sockets.require_private()?;
    let site = sockets.private_child(&format!("site-{}", sources_hash()))?;
    for (name, source) in [
        ("torchtop_agent.py", AGENT_SOURCE),
        ("sitecustomize.py", SITECUSTOMIZE_SOURCE),
    ] {
        site.ensure_file(name, source.as_bytes(), 0o600)?;
    }
    Ok(site.path().to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// The agent's `__version__` (sent in its hello) is the package's: it said 1.0.0 while
    /// `pip show torchtop` and `torchtop --version` said 0.1.0.
    #[test]
    fn the_python_agent_carries_the_packages_version() {
        let line = format!("__version__ = \"{}\"", env!("CARGO_PKG_VERSION"));
        assert!(AGENT_SOURCE.lines().any(|l| l == line), "no line {line}");
    }

    #[test]
    fn site_dir_holds_both_files_privately() {
        let base = tempfile::tempdir().unwrap();
        let sockets = base.path().join("sockets");
        let site = prepare_site_dir(&sockets).unwrap();
        assert_eq!(site.parent(), Some(sockets.as_path()));
        assert_eq!(
            fs::read_to_string(site.join("torchtop_agent.py")).unwrap(),
            AGENT_SOURCE
        );
        assert_eq!(
            fs::read_to_string(site.join("sitecustomize.py")).unwrap(),
            SITECUSTOMIZE_SOURCE
        );
        assert_eq!(fs::metadata(&sockets).unwrap().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(&site).unwrap().mode() & 0o777, 0o700);
        assert_eq!(
            fs::metadata(site.join("sitecustomize.py")).unwrap().mode() & 0o777,
            0o600
        );
        fs::write(site.join("torchtop_agent.py"), "tampered").unwrap();
        assert_eq!(
            prepare_site_dir(&sockets).unwrap(),
            site,
            "same version, same directory"
        );
        assert_eq!(
            fs::read_to_string(site.join("torchtop_agent.py")).unwrap(),
            AGENT_SOURCE
        );
    }

    #[test]
    fn unsafe_socket_dirs_get_no_site_dir() {
        let base = tempfile::tempdir().unwrap();
        let open = base.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
        let err = prepare_site_dir(&open).unwrap_err();
        assert!(err.contains("0700"), "{err}");
        assert_eq!(fs::read_dir(&open).unwrap().count(), 0, "nothing written");

        let real = base.path().join("real");
        fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, base.path().join("link")).unwrap();
        let err = prepare_site_dir(&base.path().join("link")).unwrap_err();
        assert!(err.contains("symlink"), "{err}");
        assert_eq!(fs::read_dir(&real).unwrap().count(), 0, "nothing written");
    }
}
