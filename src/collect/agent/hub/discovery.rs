//! How the hub finds agents: scanning a socket directory (bounded per poll), opening a
//! connection to each new socket, refusing or retrying the ones that fail, making room by
//! dropping a connection of the user who holds the most, and removing stale sockets of our own.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rustix::fs::{AtFlags, Dir, FileType};

use super::super::connection::{self, socket_file_name, Refusal, SocketName};
use super::super::reader::Reader;
use super::super::state::{lock, ConnState};
use super::dirs::MAX_NAMED_ENTRIES;
use super::evict::{self, Held};
use super::{AgentHub, DirId, HubConn, RETRY_AFTER_BAD_INPUT, RETRY_AFTER_FAILURE};
use crate::format::path::named;
use crate::protocol::sockets::{nobody_listens, open_checked_dir, CheckedDir};
use crate::sys::effective_uid;

/// Directory entries looked at per poll: a directory of a million files costs a bounded scan.
const MAX_ENTRIES_SCANNED: usize = 4096;
/// The most often a user's directory has a refused connection logged.
const REFUSALS_LOGGED_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl AgentHub {
    /// Lists directory `i` and connects to the sockets not connected yet; false when the
    /// listing stopped short (a bound, or an error), so that the next poll lists it again.
    /// Everything goes through the directory as opened and checked here (a listing of it, a
    /// connection through `/proc/self/fd`), never its path again: the path's last step may be
    /// swapped for a symlink between the check and the use.
    pub(super) fn discover(&mut self, i: usize, checked: CheckedDir, now: Instant) -> bool {
        let opened = open_checked_dir(&self.dirs[i].path, checked);
        let Some(listing) = opened.ok().and_then(|fd| Listing::open(fd).ok()) else {
            return false;
        };
        let dir = self.dirs[i].id;
        self.retry_at.retain(|_, at| *at > now);
        let mut connected = std::mem::take(&mut self.connected);
        connected.clear();
        // A twin may have connected some of its sockets while it was listed on its own.
        let conns = self.conns.values().filter(|c| self.same_dir(dir, c.dir));
        connected.extend(conns.map(|c| c.file));
        let complete = self.connect_listed(i, listing, &connected, checked.owner, now);
        self.connected = connected;
        complete
    }

    fn connect_listed(
        &mut self,
        i: usize,
        mut listing: Listing,
        connected: &HashSet<SocketName>,
        owner: u32,
        now: Instant,
    ) -> bool {
        let dir = self.dirs[i].id;
        let bound = self.entry_bound(dir);
        let mut opened = 0;
        let mut complete = true;
        for scanned in 0.. {
            let entry = match listing.dir.next() {
                None => break,
                Some(Ok(entry)) => entry,
                Some(Err(_)) => {
                    complete = false;
                    break;
                }
            };
            if scanned == bound {
                self.warn_crowded(i, bound);
                // Listing it again at once would see the same first entries: it is listed
                // again when it changes, like a complete listing.
                return complete;
            }
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            let Some(file) = socket_file_name(name) else {
                continue;
            };
            // The entry's own type: a symlink named like a socket is not followed.
            let is_socket = entry.file_type() == FileType::Socket;
            let waiting = self.retry_at.contains_key(&(dir, file));
            if !is_socket || connected.contains(&file) || waiting {
                continue;
            }
            let socket = listing.socket(&self.dirs[i].path, name);
            // A name with a PID namespace names a pid of that namespace, which this /proc says
            // nothing of (pid 1 is always alive here: a dead container's socket stayed for
            // good), so a refused connect alone decides; the agents link such a name into place
            // only once it listens.
            let pid_gone = file.pid_ns.is_some() || !self.dirs[i].file_pid_alive(file.pid);
            if pid_gone {
                let probed = listing.identity(&socket.name);
                if probed.is_some() && nobody_listens(&socket.through) {
                    self.stale(&listing, &socket, (dir, file), probed, now, owner);
                    continue;
                }
            }
            if opened == self.limits.max_new_per_poll {
                return false;
            }
            opened += 1;
            self.connect(&socket, (dir, file), owner, now);
        }
        complete
    }

    /// Entries looked at in one listing of directory `dir`.
    fn entry_bound(&self, dir: DirId) -> usize {
        if self.is_named_by_a_process(dir) {
            MAX_NAMED_ENTRIES
        } else {
            MAX_ENTRIES_SCANNED
        }
    }

    fn warn_crowded(&mut self, i: usize, bound: usize) {
        let dir = &mut self.dirs[i];
        if !dir.warned_crowded {
            dir.warned_crowded = true;
            let line = format!(
                "{} holds more than {bound} entries; only the first {bound} are looked at each \
                 time",
                named(&dir.path)
            );
            self.push_log(line);
        }
    }

    /// Connects to `socket`, whose name is `key`'s.
    fn connect(&mut self, socket: &Socket, key: (DirId, SocketName), owner: u32, now: Instant) {
        let (dir, file) = key;
        let opened = match connection::open(&socket.shown, &socket.through, file, owner) {
            Ok(opened) => opened,
            Err(refusal) => return self.refuse(key, refusal, now),
        };
        let path = &socket.shown;
        let pid = opened.peer_pid;
        if self.conns.values().any(|c| c.pid == pid) {
            let refusal = Refusal {
                reason: format!(
                    "{} is served by pid {pid}, whose agent is already connected",
                    named(path)
                ),
                bad_input: true,
            };
            return self.refuse(key, refusal, now);
        }
        // The reader first: a newcomer it refuses must not have cost another its place.
        if let Err(problem) = self.start_reader() {
            return self.refuse(key, problem, now);
        }
        if self.conns.len() >= self.limits.max_connections {
            self.make_room(pid, owner, now);
        }
        let id = self.next_conn;
        self.next_conn += 1;
        let stream = Arc::new(opened.stream);
        lock(&self.shared)
            .conns
            .insert(id, ConnState::new(pid, opened.start_ticks, now));
        self.conns.insert(
            id,
            HubConn {
                dir,
                owner,
                file,
                pid,
                stream: Arc::clone(&stream),
            },
        );
        if let Some(Err(problem)) = self.reader.as_ref().map(|r| r.add(id, stream)) {
            self.close(id, &problem, RETRY_AFTER_FAILURE);
        }
    }

    fn start_reader(&mut self) -> Result<(), Refusal> {
        if self.reader.is_none() {
            let reader = Reader::start(Arc::clone(&self.shared), self.limits.pending_budget)
                .map_err(|e| Refusal {
                    reason: format!("cannot start the agent reader thread: {e}"),
                    bad_input: false,
                })?;
            self.reader = Some(reader);
        }
        Ok(())
    }

    fn refuse(&mut self, key: (DirId, SocketName), refusal: Refusal, now: Instant) {
        let (wait, verb) = if refusal.bad_input {
            (RETRY_AFTER_BAD_INPUT, "refused")
        } else {
            (RETRY_AFTER_FAILURE, "could not connect")
        };
        self.retry_at.insert(key, now + wait);
        if self.is_named_by_a_process(key.0) && !self.may_log_refusal(key.0, &refusal, now) {
            return;
        }
        self.push_log(format!("pid {}: {verb}: {}", key.1.pid, refusal.reason));
    }

    /// Whether a refusal in user directory `dir` is worth a line in the log (which the monitor
    /// shows in its status line). A user's agent that cannot be reached (its backlog full, its
    /// process gone) is that user's business; one refused for what it sent or who serves it is
    /// the admin's, once a minute per directory: a user with hundreds of agents filled root's
    /// status line at every refresh.
    fn may_log_refusal(&mut self, dir: DirId, refusal: &Refusal, now: Instant) -> bool {
        let Some(dir) = self.dirs.iter_mut().find(|d| d.id == dir) else {
            return false;
        };
        let quiet = dir
            .refusal_logged_at
            .is_some_and(|at| now < at + REFUSALS_LOGGED_EVERY);
        if !refusal.bad_input || quiet {
            return false;
        }
        dir.refusal_logged_at = Some(now);
        true
    }

    /// Makes room for the agent of `newcomer`, served by uid `owner`, by dropping the connection
    /// silent longest of the user who holds the most ([`evict::to_drop`]).
    fn make_room(&mut self, newcomer: u32, owner: u32, now: Instant) {
        let chosen = {
            let shared = lock(&self.shared);
            let held: Vec<Held> = self
                .conns
                .iter()
                .filter_map(|(&id, conn)| {
                    let state = shared.conns.get(&id)?;
                    Some(Held {
                        id,
                        owner: conn.owner,
                        last_line_at: state.last_line_at,
                    })
                })
                .collect();
            evict::to_drop(&held, owner)
                .and_then(|id| Some((id, shared.conns.get(&id)?)))
                .map(|(id, state)| (id, state.pid, state.last_line_at))
        };
        let Some((id, pid, last_line_at)) = chosen else {
            return;
        };
        let idle = now.saturating_duration_since(last_line_at).as_secs_f64();
        let reason = format!(
            "{} agent connections are open, the most torchtop keeps: dropped the one to pid \
             {pid}, silent for {idle:.0} s, to make room for pid {newcomer}",
            self.limits.max_connections
        );
        self.close(id, &reason, RETRY_AFTER_BAD_INPUT);
    }

    /// A socket whose process is gone: removed when the directory is the monitor's own and
    /// ours. Root reading a directory a process named (another user's, a container's) leaves
    /// it alone, since it never writes where another user chose.
    fn stale(
        &mut self,
        listing: &Listing,
        socket: &Socket,
        key: (DirId, SocketName),
        probed: Option<(u64, u64)>,
        now: Instant,
        owner: u32,
    ) {
        let pid = key.1.pid;
        self.retry_at.insert(key, now + RETRY_AFTER_FAILURE);
        if owner != effective_uid() || self.is_named_by_a_process(key.0) {
            return;
        }
        // An agent of that pid may have put its live socket there since the probe (taking the
        // refused one for a leftover, as the hub did): that one is not ours to remove.
        if listing.identity(&socket.name) != probed {
            return;
        }
        let shown = named(&socket.shown);
        let why = if key.1.pid_ns.is_some() {
            "nothing listens on it".to_string()
        } else {
            format!("pid {pid} is gone")
        };
        match rustix::fs::unlinkat(&listing.fd, socket.name.as_os_str(), AtFlags::empty()) {
            Ok(()) => self.push_log(format!("removed stale socket {shown} ({why})")),
            Err(e) => self.push_log(format!(
                "could not remove stale socket {shown}: {}",
                std::io::Error::from(e)
            )),
        }
    }
}

/// A directory opened for one listing: what was checked, and the entries read from it.
struct Listing {
    fd: OwnedFd,
    dir: Dir,
}

/// A socket in a [`Listing`]: its name, its path as the log shows it, and the path connected
/// to, through the opened directory.
struct Socket {
    name: PathBuf,
    shown: PathBuf,
    through: PathBuf,
}

impl Listing {
    /// The device and inode of the entry `name` itself (a link is not followed).
    fn identity(&self, name: &Path) -> Option<(u64, u64)> {
        let stat = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        Some((stat.st_dev, stat.st_ino))
    }

    fn open(fd: OwnedFd) -> std::io::Result<Self> {
        let dir = Dir::read_from(&fd)?;
        Ok(Listing { fd, dir })
    }

    fn socket(&self, path: &Path, name: &OsStr) -> Socket {
        let fd = self.fd.as_raw_fd();
        Socket {
            name: PathBuf::from(name),
            shown: path.join(name),
            through: Path::new(&format!("/proc/self/fd/{fd}")).join(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A directory crowded past the bound was listed again at every poll, since its listing
    /// stopped short: 4,096 entries a poll for nothing, and 64 such directories named by a
    /// user's processes cost root's monitor 15% of a core.
    #[test]
    fn a_crowded_directory_is_listed_again_only_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        for i in 0..MAX_ENTRIES_SCANNED + 10 {
            std::fs::write(dir.path().join(format!("f{i}")), b"").unwrap();
        }
        let mut hub = AgentHub::new(dir.path().to_path_buf());
        hub.poll();
        assert!(
            hub.log()[0].contains("holds more than 4096 entries"),
            "{:?}",
            hub.log()
        );
        assert!(!hub.dirs[0].scan.stopped_short());
    }

    /// A user's agents that cannot be reached (here: nothing listens on their sockets) are
    /// that user's business: root's status line showed a line for each, at every refresh,
    /// for a user with hundreds of them. The monitor's own directory still says.
    #[test]
    fn a_users_unreachable_agents_are_not_logged_and_the_monitors_own_are() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        for pid in [1, std::process::id()] {
            drop(std::os::unix::net::UnixListener::bind(
                dir.path().join(format!("{pid}.sock")),
            ));
        }
        let mut hub = AgentHub::new(PathBuf::from("/nonexistent/torchtop-own"));
        let user = super::super::dirs::Watched::of_user(
            Some(effective_uid()),
            dir.path().to_path_buf(),
            crate::model::AgentDirVars::default(),
            None,
            Instant::now(),
        );
        hub.push_user_dir(user);
        hub.poll();
        assert!(hub.log().is_empty(), "{:?}", hub.log());

        let mut own = AgentHub::new(dir.path().to_path_buf());
        own.poll();
        let log = own.log().join("\n");
        assert!(
            log.contains("could not connect: nothing listens on"),
            "{log}"
        );
    }

    /// The check and the listing are two steps: a user who owns the directory's name in `/tmp`
    /// swapped it for a symlink to another directory in between, and the hub listed that one
    /// and connected to its sockets (as root, to another user's agents), or removed them as
    /// stale in its own.
    #[test]
    fn a_directory_swapped_after_its_check_is_not_listed() {
        let base = tempfile::tempdir().unwrap();
        let (checked, other) = (base.path().join("checked"), base.path().join("other"));
        for dir in [&checked, &other] {
            std::fs::create_dir(dir).unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let me = std::process::id();
        let _listener =
            std::os::unix::net::UnixListener::bind(other.join(format!("{me}.sock"))).unwrap();
        std::fs::write(other.join("999999999.sock"), b"").unwrap();
        let mut hub = AgentHub::new(checked.clone());
        hub.check_dir(0);
        assert!(hub.dirs[0].checked.is_some());
        std::fs::rename(&checked, base.path().join("away")).unwrap();
        std::os::unix::fs::symlink(&other, &checked).unwrap();
        hub.list_if_due(0, Instant::now());
        assert!(
            hub.conns.is_empty(),
            "connected through the swapped directory"
        );
        assert!(other.join(format!("{me}.sock")).exists());

        // The same directory, not swapped: listed, and its socket connected.
        std::fs::remove_file(&checked).unwrap();
        std::fs::rename(&other, &checked).unwrap();
        let mut hub = AgentHub::new(checked.clone());
        hub.check_dir(0);
        hub.list_if_due(0, Instant::now());
        assert_eq!(hub.conns.len(), 1, "{:?}", hub.log());
    }

    /// An agent whose `<pid>.sock` the live agent of another PID namespace holds serves under
    /// `<pid>.<namespace inode>.sock`: read like any other agent's, and removed like any other
    /// once stale. A name of a form the hub does not know is ignored, never connected to.
    #[test]
    fn a_socket_named_with_a_pid_namespace_is_read_and_removed_once_stale() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let me = std::process::id();
        let served = dir.path().join(format!("{me}.4026532175.sock"));
        let _agent = std::os::unix::net::UnixListener::bind(&served).unwrap();
        let stale = dir.path().join("999999999.4026532175.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let unknown = dir.path().join(format!("{me}.04026532175.sock"));
        let _other = std::os::unix::net::UnixListener::bind(&unknown).unwrap();
        let mut hub = AgentHub::new(dir.path().to_path_buf());
        hub.poll();
        assert_eq!(hub.connections(), 1, "{:?}", hub.log());
        let file = hub.conns.values().next().unwrap().file;
        assert_eq!(file.pid, me);
        assert_eq!(file.pid_ns, Some(4_026_532_175));
        assert!(!stale.exists(), "{:?}", hub.log());
        assert!(served.exists() && unknown.exists());
        assert_eq!(
            hub.log(),
            [format!(
                "removed stale socket {} (nothing listens on it)",
                named(&stale)
            )]
        );
    }

    /// A dead container's `1.<inode>.sock`: pid 1 is always alive in the monitor's /proc, so
    /// the pid told nothing and the socket stayed for good (a review). The refused connection
    /// alone makes it stale; a live one of the same form stays.
    #[test]
    fn a_namespaced_socket_nothing_listens_on_is_removed_whatever_its_pid() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let dead = dir.path().join("1.4026532175.sock");
        drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
        let plain = dir.path().join("1.sock");
        drop(std::os::unix::net::UnixListener::bind(&plain).unwrap());
        let live = dir.path().join("1.4026532176.sock");
        let _agent = std::os::unix::net::UnixListener::bind(&live).unwrap();
        let mut hub = AgentHub::new(dir.path().to_path_buf());
        hub.poll();
        assert!(!dead.exists(), "{:?}", hub.log());
        assert!(live.exists(), "{:?}", hub.log());
        assert!(plain.exists(), "pid 1 is alive here: a plain name is kept");
    }
}
