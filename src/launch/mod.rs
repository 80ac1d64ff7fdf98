//! `torchtop run` and `torchtop attach`: putting the agent into Python programs.
//!
//! Both write the embedded agent (assets/python/torchtop_agent.py) and its sitecustomize into a
//! private "site" directory, `<socket dir>/site-<content hash>`, mode 0700:
//! - [`run`] puts that directory first on `PYTHONPATH` and execs the command, so every Python
//!   process it starts runs the sitecustomize, which starts the agent;
//! - [`attach`] makes a running interpreter load the agent from there, through
//!   `sys.remote_exec` (Python 3.14+) or gdb (older Pythons).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::collect::agent::ensure_socket_dir;

pub mod attach;
pub mod run;

pub use attach::attach;
pub use run::{prepare_run, run};

/// The agent module, embedded so that torchtop needs no pip install.
pub const AGENT_SOURCE: &str = include_str!("../../assets/python/torchtop_agent.py");
/// The sitecustomize that starts the agent after chaining any other sitecustomize.
pub const SITECUSTOMIZE_SOURCE: &str = include_str!("../../assets/python/sitecustomize.py");

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
/// `sitecustomize.py`, and returns its path. With `owner` set (root preparing the directory
/// for another user's process), the socket directory, the site directory and its files are
/// handed to that uid so the target can read them.
pub fn prepare_site_dir(socket_dir: &Path, owner: Option<u32>) -> Result<PathBuf, String> {
    ensure_socket_dir(socket_dir)?;
    let site = socket_dir.join(format!("site-{}", sources_hash()));
    ensure_socket_dir(&site)?;
    for (name, source) in [
        ("torchtop_agent.py", AGENT_SOURCE),
        ("sitecustomize.py", SITECUSTOMIZE_SOURCE),
    ] {
        write_if_different(&site.join(name), source)?;
    }
    if let Some(uid) = owner {
        for path in [
            socket_dir.to_path_buf(),
            site.clone(),
            site.join("torchtop_agent.py"),
            site.join("sitecustomize.py"),
        ] {
            std::os::unix::fs::lchown(&path, Some(uid), None)
                .map_err(|e| format!("cannot hand {} to uid {uid}: {e}", path.display()))?;
        }
    }
    Ok(site)
}

/// Writes through a temporary file and a rename, so a concurrent reader never sees half a file.
fn write_if_different(path: &Path, content: &str) -> Result<(), String> {
    if fs::read_to_string(path).is_ok_and(|old| old == content) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(content.as_bytes()));
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o600));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn site_dir_holds_both_files_privately() {
        let base = std::env::temp_dir().join(format!("tt-site-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let sockets = base.join("sockets");
        let site = prepare_site_dir(&sockets, None).unwrap();
        assert_eq!(site.parent(), Some(sockets.as_path()));
        assert_eq!(
            fs::read_to_string(site.join("torchtop_agent.py")).unwrap(),
            AGENT_SOURCE
        );
        assert_eq!(
            fs::read_to_string(site.join("sitecustomize.py")).unwrap(),
            SITECUSTOMIZE_SOURCE
        );
        assert_eq!(fs::metadata(&site).unwrap().mode() & 0o777, 0o700);
        assert_eq!(
            fs::metadata(site.join("sitecustomize.py")).unwrap().mode() & 0o777,
            0o600
        );
        fs::write(site.join("torchtop_agent.py"), "tampered").unwrap();
        assert_eq!(
            prepare_site_dir(&sockets, None).unwrap(),
            site,
            "same version, same directory"
        );
        assert_eq!(
            fs::read_to_string(site.join("torchtop_agent.py")).unwrap(),
            AGENT_SOURCE
        );
        let _ = fs::remove_dir_all(&base);
    }
}
