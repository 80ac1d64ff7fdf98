//! The agent's socket file: bound owner-only under `<pid>.sock`, or `<pid>.<pid namespace
//! inode>.sock` where the live agent of another PID namespace (a container sharing the
//! directory, whose process has our pid there) holds the first; a stale socket of ours (one
//! nothing listens on) replaced, a live one or anything else left alone; removed only while it
//! is still the socket this process bound; peers limited to our own user or root. The same
//! rules as the Python agent's (assets/agent-protocol.md, "Where the socket lives").

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::protocol::sockets::{nobody_listens, AgentSocketNames};
use crate::sys::{effective_uid, peer_credentials};

/// A socket file's device and inode: which file a path led to when it was bound.
pub(crate) type FileId = (u64, u64);

/// A listening socket, put in place.
pub(super) struct Bound {
    pub(super) listener: UnixListener,
    /// The name it serves under.
    pub(super) path: PathBuf,
    /// Its file, so that only this one is ever removed.
    pub(super) id: FileId,
}

/// Removes the socket file at `path` if it is still the one bound (`id`): once gone, the path
/// may be another agent's (a process of our pid in another PID namespace), and removing that
/// made it vanish from every monitor. Anything else there is left alone.
pub(crate) fn remove_socket(path: &Path, id: FileId) {
    let ours = std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.file_type().is_socket() && (m.dev(), m.ino()) == id);
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

/// Called with every name the socket may have (the staging name and each of `names.names`) and
/// the file bound, before the socket is put in place under one of them: what must be ready
/// when a monitor, or a launcher's SIGTERM, can first find it there.
pub(crate) type BeforePlacing = fn(&[&Path], FileId);

/// Binds and listens under `names.staging`, a name the monitor does not take for an agent's,
/// then puts the socket in place under the first of `names.names` no live listener holds, as
/// the Python agent does: a monitor that connects between a bind and its listen is refused,
/// and tries again only seconds later. Where the staging name does not fit in a socket
/// address, the first name is bound as it is (and `before_placing` runs just after).
pub(super) fn bind(names: &AgentSocketNames, before_placing: BeforePlacing) -> io::Result<Bound> {
    let staging = &names.staging;
    let in_place = staging.as_os_str().len() >= SUN_PATH_BYTES;
    let bound_at = if in_place {
        make_room(&names.names[0])?;
        &names.names[0]
    } else {
        // Left by an earlier process of our pid and namespace, which no live process shares.
        remove_any_socket(staging);
        staging
    };
    let listener = UnixListener::bind(bound_at)?;
    // The directory is 0700 already; 0600 closes the socket itself too.
    let placed = std::fs::set_permissions(bound_at, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::symlink_metadata(bound_at))
        .and_then(|meta| {
            listener.set_nonblocking(true)?;
            let id = (meta.dev(), meta.ino());
            let mut all: Vec<&Path> = vec![staging];
            all.extend(names.names.iter().map(PathBuf::as_path));
            before_placing(&all, id);
            let path = if in_place {
                bound_at.clone()
            } else {
                put_in_place(staging, &names.names)?
            };
            Ok((path, id))
        });
    match placed {
        Ok((path, id)) => Ok(Bound { listener, path, id }),
        Err(error) => {
            if !in_place {
                let _ = std::fs::remove_file(staging);
            }
            Err(error)
        }
    }
}

/// Removes the file at `path` if it is a socket: the staging name, which is ours alone.
fn remove_any_socket(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Whether something listens on the socket at `path` ([`nobody_listens`]): a live listener's
/// socket is never removed.
fn listened(path: &Path) -> bool {
    !nobody_listens(path)
}

/// Removes a stale socket of ours at `path` (left by an earlier process that had our pid, one
/// nothing listens on); `AddrInUse` when a live listener holds the name. Anything else there is
/// left alone: the link (or bind) into its place then fails.
fn make_room(path: &Path) -> io::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() || meta.uid() != effective_uid() {
        return Ok(());
    }
    if listened(path) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "the agent of another process of our pid (in another PID namespace) listens on {}",
                path.display()
            ),
        ));
    }
    // Still the socket found refused, not one another agent has put there since.
    remove_socket(path, (meta.dev(), meta.ino()));
    Ok(())
}

/// Gives the socket at `staging` the first of `names` that no live listener holds, and
/// returns it. A link, unlike a rename, never replaces what is at a name (a file that is not a
/// stale socket of ours is left alone, as a bind there would have failed); a rename where the
/// filesystem makes no links and nothing is at the name.
fn put_in_place(staging: &Path, names: &[PathBuf]) -> io::Result<PathBuf> {
    let mut held = Vec::new();
    for path in names {
        if let Err(e) = make_room(path) {
            held.push(e);
            continue;
        }
        match std::fs::hard_link(staging, path) {
            Ok(()) => {
                std::fs::remove_file(staging)?;
                return Ok(path.clone());
            }
            // Another agent of our pid took it since: the next name, if that one is live.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && listened(path) => held.push(e),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(e),
            Err(_) if std::fs::symlink_metadata(path).is_err() => {
                std::fs::rename(staging, path)?;
                return Ok(path.clone());
            }
            Err(e) => return Err(e),
        }
    }
    Err(held.pop().unwrap_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "no socket name to serve under")
    }))
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
