//! The agent's socket file: bound owner-only (a stale socket of ours replaced, anything else
//! left alone), removed only while it is still a socket, and peers limited to our own user or
//! root.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::sys::{effective_uid, peer_credentials};

/// Removes the socket file at `path` if it is still a socket (never anything else).
pub(crate) fn remove_socket(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Binds and listens under `<path>.new`, a name the monitor does not take for an agent's, then
/// puts the socket in place, as the Python agent does: a monitor that connects between a
/// bind and its listen is refused, and tries again only seconds later. A path with no room for
/// the 4 more bytes is bound as it is.
pub(super) fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let ours = meta.uid() == effective_uid();
        if meta.file_type().is_socket() && ours {
            std::fs::remove_file(path)?;
        }
    }
    let mut staging = path.as_os_str().to_owned();
    staging.push(".new");
    let staging = PathBuf::from(staging);
    let staging = if staging.as_os_str().len() < SUN_PATH_BYTES {
        remove_socket(&staging); // left by an earlier process that had our pid
        staging
    } else {
        path.to_path_buf()
    };
    let listener = UnixListener::bind(&staging)?;
    // The directory is 0700 already; 0600 closes the socket itself too.
    let placed = std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| listener.set_nonblocking(true))
        .and_then(|()| {
            if staging == path {
                Ok(())
            } else {
                put_in_place(&staging, path)
            }
        });
    if let Err(error) = placed {
        let _ = std::fs::remove_file(&staging);
        return Err(error);
    }
    Ok(listener)
}

/// Gives the socket at `staging` the name `path` by a link, which unlike a rename never replaces
/// what is there (a file that is not our socket is left alone, as a bind there would have
/// failed); by a rename where the filesystem makes no links and nothing is at `path`.
fn put_in_place(staging: &Path, path: &Path) -> io::Result<()> {
    match std::fs::hard_link(staging, path) {
        Ok(()) => std::fs::remove_file(staging),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(e),
        Err(_) if std::fs::symlink_metadata(path).is_err() => std::fs::rename(staging, path),
        Err(e) => Err(e),
    }
}

/// The room for a path in `sockaddr_un`, its final NUL included.
const SUN_PATH_BYTES: usize = 108;

/// Only our own user (or root) may talk to the agent, as the socket's mode already says.
pub(super) fn peer_allowed(stream: &UnixStream) -> Result<(), String> {
    let (_, uid) = peer_credentials(stream)
        .map_err(|e| format!("refused a peer whose credentials could not be read: {e}"))?;
    if uid == effective_uid() || uid == 0 {
        Ok(())
    } else {
        Err(format!("refused a peer of uid {uid}"))
    }
}
