//! Where agent sockets live and who may use them, for both ends of protocol v1: the torchtop
//! client (the hub in [`crate::collect::agent`], `torchtop run`/`attach`) and the tch agent
//! server (`crate::tch_agent`, built with the `torch` feature). One set of rules, so both ends
//! always agree on the directory and its checks: `$TORCHTOP_AGENT_DIR`, else
//! `$XDG_RUNTIME_DIR/torchtop`, else `/tmp/torchtop-<uid>`; a real directory (not a symlink) of
//! mode 0700 or stricter; peers identified by `SO_PEERCRED`.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::format::path::named;
use crate::sys::effective_uid;

/// The socket directory for these environment values: `$TORCHTOP_AGENT_DIR`, else
/// `$XDG_RUNTIME_DIR/torchtop`, else `/tmp/torchtop-<uid>`. Empty values count as unset.
pub(crate) fn socket_dir_from(
    agent_dir: Option<&OsStr>,
    xdg_runtime_dir: Option<&OsStr>,
    uid: u32,
) -> PathBuf {
    match (
        agent_dir.filter(|d| !d.is_empty()),
        xdg_runtime_dir.filter(|d| !d.is_empty()),
    ) {
        (Some(dir), _) => PathBuf::from(dir),
        (None, Some(runtime)) => Path::new(runtime).join("torchtop"),
        (None, None) => PathBuf::from(format!("/tmp/torchtop-{uid}")),
    }
}

/// The socket directory for this process's environment and user.
pub(crate) fn default_socket_dir() -> PathBuf {
    let agent_dir = std::env::var_os("TORCHTOP_AGENT_DIR");
    let runtime = std::env::var_os("XDG_RUNTIME_DIR");
    socket_dir_from(agent_dir.as_deref(), runtime.as_deref(), effective_uid())
}

/// The inode of this process's PID namespace (`/proc/self/ns/pid`); `None` where it cannot be
/// read (no `/proc`, no `CONFIG_PID_NS`). It names an agent's socket when another PID
/// namespace's agent already serves under the agent's pid ([`agent_socket_names`]): two
/// processes of the same pid in different namespaces share a directory (containers that mount
/// one volume), and the inode, unique among live namespaces, tells their sockets apart.
#[cfg(any(feature = "torch", test))]
pub(crate) fn own_pid_namespace() -> Option<u64> {
    // The link's target, `pid:[N]`, rather than a stat through it: the same number, without
    // following a magic link.
    let link = fs::read_link("/proc/self/ns/pid").ok()?;
    let inode = link.to_str()?.strip_prefix("pid:[")?.strip_suffix(']')?;
    inode.parse().ok().filter(|&inode| inode > 0)
}

/// The socket names an agent of process `pid` (as its own PID namespace numbers it) may serve
/// under in `dir`, most wanted first, and the name it binds and listens under before it takes
/// one of them.
#[cfg(any(feature = "torch", test))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentSocketNames {
    /// `<pid>.sock`, then, when the PID namespace is known, `<pid>.<namespace inode>.sock`: the
    /// name taken when a live agent of another namespace (with the same pid there) holds the
    /// first. The monitor reads both forms.
    pub(crate) names: Vec<PathBuf>,
    /// `<pid>.<namespace inode>.sock.new` (`<pid>.sock.new` when the namespace is not known):
    /// unique among live processes, so one agent never takes another's for a leftover. The
    /// monitor takes no name ending in `.new` for an agent's.
    pub(crate) staging: PathBuf,
}

/// [`AgentSocketNames`] of process `pid` in PID namespace `pid_ns` (`None`: unknown).
#[cfg(any(feature = "torch", test))]
pub(crate) fn agent_socket_names(dir: &Path, pid: u32, pid_ns: Option<u64>) -> AgentSocketNames {
    let plain = dir.join(format!("{pid}.sock"));
    match pid_ns {
        Some(ns) => AgentSocketNames {
            names: vec![plain, dir.join(format!("{pid}.{ns}.sock"))],
            staging: dir.join(format!("{pid}.{ns}.sock.new")),
        },
        None => AgentSocketNames {
            names: vec![plain],
            staging: dir.join(format!("{pid}.sock.new")),
        },
    }
}

/// Whether the kernel refuses a connection to the socket at `path`: nothing listens on it, the
/// one proof that a socket is stale, for the hub and the agents alike. A full backlog, or an
/// error that tells nothing, counts as a live listener's. A pid the reader's /proc does not
/// show is no such proof: a monitor in a pid namespace of its own (`unshare --pid`, a container
/// sharing the agent directory) sees none of the host's processes, and removing their sockets
/// cut live training jobs off from every monitor.
pub(crate) fn nobody_listens(path: &Path) -> bool {
    let refused = crate::sys::connect_unix_nonblocking(path).map_err(|e| e.raw_os_error());
    matches!(refused, Err(Some(libc::ECONNREFUSED | libc::ENOENT)))
}

/// A socket directory that passed [`check_socket_dir`]: its owner, and which directory it is
/// (device and inode), since two paths can lead to one directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckedDir {
    pub(crate) owner: u32,
    pub(crate) id: (u64, u64),
}

/// Checks a socket directory: a real directory (not a symlink), owned by us (any owner when we
/// are root), mode 0700 or stricter. Returns its owner's uid, `Ok(None)` when it does not exist.
pub(crate) fn inspect_socket_dir(dir: &Path) -> Result<Option<u32>, String> {
    Ok(check_socket_dir(dir)?.map(|checked| checked.owner))
}

/// [`inspect_socket_dir`], with the directory's device and inode (from the same `lstat`).
pub(crate) fn check_socket_dir(dir: &Path) -> Result<Option<CheckedDir>, String> {
    let meta = match fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot inspect {}: {e}", named(dir))),
    };
    if meta.file_type().is_symlink() {
        return Err(format!("{} is a symlink; refusing to use it", named(dir)));
    }
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", named(dir)));
    }
    check_owner(dir, meta.uid(), RootMayUseAny::Yes)?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} has mode {:o}; it must be accessible by its owner only (0700)",
            named(dir),
            meta.mode() & 0o7777
        ));
    }
    Ok(Some(CheckedDir {
        owner: meta.uid(),
        id: (meta.dev(), meta.ino()),
    }))
}

/// Opens the directory that [`check_socket_dir`] judged at `dir`, for reading relative to it:
/// refused unless what opens is that very directory (same device and inode, owner and a mode
/// still 0700 or stricter). A user who owns a name in a shared place (`/tmp/torchtop-<uid>`) can
/// swap it for a symlink to another user's directory between the check and the use; this
/// binds the use to what was checked. `O_NOFOLLOW` refuses a symlink at the last step, the
/// `fstat` anything else.
pub(crate) fn open_checked_dir(dir: &Path, checked: CheckedDir) -> Result<OwnedFd, String> {
    use rustix::fs::{fstat, open, Mode, OFlags};
    use rustix::io::Errno;
    let flags =
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let changed = || format!("{} changed since it was checked; not read", named(dir));
    let fd = open(dir, flags, Mode::empty()).map_err(|e| match e {
        // A symlink (refused with O_DIRECTORY as not a directory) or nothing in its place.
        Errno::LOOP | Errno::NOTDIR | Errno::NOENT => changed(),
        e => format!("cannot open {}: {}", named(dir), io::Error::from(e)),
    })?;
    let stat =
        fstat(&fd).map_err(|e| format!("cannot inspect {}: {}", named(dir), io::Error::from(e)))?;
    let open_to_others = stat.st_mode & 0o077 != 0;
    let same =
        (stat.st_dev, stat.st_ino) == checked.id && stat.st_uid == checked.owner && !open_to_others;
    if !same {
        return Err(changed());
    }
    Ok(fd)
}

/// Creates `dir` with mode 0700 if it is missing (parents as needed), then checks it as
/// [`inspect_socket_dir`] does.
pub fn ensure_socket_dir(dir: &Path) -> Result<u32, String> {
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() && !parent.exists() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", named(parent)))?;
        }
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", named(dir))),
    }
    inspect_socket_dir(dir)?.ok_or_else(|| format!("{} vanished while being created", named(dir)))
}

/// [`ensure_socket_dir`] for a directory an agent serves in: it must be ours even when we are
/// root, as the Python agent requires, since torchtop refuses a socket whose server is not the
/// directory's owner.
#[cfg(any(feature = "torch", test))]
pub(crate) fn ensure_own_socket_dir(dir: &Path) -> Result<(), String> {
    let owner = ensure_socket_dir(dir)?;
    check_owner(dir, owner, RootMayUseAny::No)
}

#[derive(Clone, Copy, PartialEq)]
enum RootMayUseAny {
    Yes,
    /// Only for a directory an agent serves in, which only the tch agent does.
    #[cfg_attr(not(any(feature = "torch", test)), allow(dead_code))]
    No,
}

fn check_owner(dir: &Path, owner: u32, root: RootMayUseAny) -> Result<(), String> {
    let me = effective_uid();
    if owner == me || (me == 0 && root == RootMayUseAny::Yes) {
        return Ok(());
    }
    Err(format!(
        "{} is owned by uid {owner}, not by us (uid {me})",
        named(dir)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("tt-sockets-")
            .tempdir()
            .expect("create a scratch directory")
    }

    #[test]
    fn socket_dir_rules() {
        let os = |s: &'static str| Some(OsStr::new(s));
        assert_eq!(
            socket_dir_from(os("/x/agents"), os("/run/user/7"), 7),
            PathBuf::from("/x/agents")
        );
        assert_eq!(
            socket_dir_from(None, os("/run/user/7"), 7),
            PathBuf::from("/run/user/7/torchtop")
        );
        assert_eq!(
            socket_dir_from(os(""), os(""), 7),
            PathBuf::from("/tmp/torchtop-7")
        );
        assert_eq!(
            socket_dir_from(None, None, 0),
            PathBuf::from("/tmp/torchtop-0")
        );
    }

    #[test]
    fn own_pid_namespace_is_the_inode_of_the_namespace_file() {
        let Ok(meta) = fs::metadata("/proc/self/ns/pid") else {
            println!("skipped: /proc/self/ns/pid cannot be read here");
            return;
        };
        assert_eq!(own_pid_namespace(), Some(meta.ino()));
    }

    #[test]
    fn an_agents_names_carry_its_pid_namespace_only_when_it_is_known() {
        let dir = Path::new("/run/user/7/torchtop");
        let known = agent_socket_names(dir, 42, Some(4_026_532_175));
        assert_eq!(
            known.names,
            [dir.join("42.sock"), dir.join("42.4026532175.sock")]
        );
        assert_eq!(known.staging, dir.join("42.4026532175.sock.new"));
        let unknown = agent_socket_names(dir, 42, None);
        assert_eq!(unknown.names, [dir.join("42.sock")]);
        assert_eq!(unknown.staging, dir.join("42.sock.new"));
    }

    #[test]
    fn own_socket_dir_is_created_0700_and_unsafe_dirs_are_refused() {
        let temp = scratch();
        let base = temp.path();
        let fresh = base.join("run/torchtop");
        ensure_own_socket_dir(&fresh).unwrap();
        assert_eq!(fs::metadata(&fresh).unwrap().mode() & 0o777, 0o700);
        ensure_own_socket_dir(&fresh).unwrap();

        let link = base.join("link");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        assert!(ensure_own_socket_dir(&link)
            .unwrap_err()
            .contains("symlink"));

        let open = base.join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(ensure_own_socket_dir(&open).unwrap_err().contains("0700"));

        // A name another user chose is quoted, so that it cannot pass for torchtop's words.
        let forged = base.join("x: agents read; all good");
        fs::create_dir(&forged).unwrap();
        fs::set_permissions(&forged, fs::Permissions::from_mode(0o755)).unwrap();
        let refused = check_socket_dir(&forged).unwrap_err();
        let quoted = format!("\"{}\" has mode 755", forged.display());
        assert!(refused.starts_with(&quoted), "{refused}");

        let file = base.join("file");
        fs::write(&file, "").unwrap();
        assert!(ensure_own_socket_dir(&file)
            .unwrap_err()
            .contains("not a directory"));
    }

    #[test]
    fn root_reads_other_users_dirs_but_serves_only_in_its_own() {
        if effective_uid() != 0 {
            println!("skipped: only root can make a directory of another uid");
            return;
        }
        let temp = scratch();
        let foreign = temp.path().join("foreign");
        fs::create_dir(&foreign).unwrap();
        fs::set_permissions(&foreign, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&foreign, Some(12345), Some(12345)).unwrap();
        assert_eq!(inspect_socket_dir(&foreign), Ok(Some(12345)));
        assert_eq!(ensure_socket_dir(&foreign), Ok(12345));
        assert!(ensure_own_socket_dir(&foreign)
            .unwrap_err()
            .contains("owned by uid 12345"));
    }
}
