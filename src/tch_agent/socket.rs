//! The agent's socket file: bound owner-only (a stale socket of ours replaced, anything else
//! left alone), removed only while it is still a socket, and peers limited to our own user or
//! root.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use crate::sys::{effective_uid, peer_credentials};

/// Removes the socket file at `path` if it is still a socket (never anything else).
pub(crate) fn remove_socket(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

pub(super) fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let ours = meta.uid() == effective_uid();
        if meta.file_type().is_socket() && ours {
            std::fs::remove_file(path)?;
        }
    }
    let listener = UnixListener::bind(path)?;
    // The directory is 0700 already; 0600 closes the socket itself too.
    let closed = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| listener.set_nonblocking(true));
    if let Err(error) = closed {
        let _ = std::fs::remove_file(path);
        return Err(error);
    }
    Ok(listener)
}

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
