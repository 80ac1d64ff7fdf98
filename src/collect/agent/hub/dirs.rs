//! The directories the hub reads sockets from: the monitor's own (`$TORCHTOP_AGENT_DIR`, else
//! `$XDG_RUNTIME_DIR/torchtop`, else `/tmp/torchtop-<uid>`) always, and, when the monitor runs as
//! root, other users' (`user` set): the directory each other user's GPU process would put its
//! agent's socket in, worked out as that agent works it out (its own `TORCHTOP_AGENT_DIR`, else
//! its `XDG_RUNTIME_DIR`, else its uid), and the default directories of every user with a live
//! process, GPU or not ([`super::defaults`]). Without them `sudo torchtop` showed every other
//! user's training process as having no agent, even one root had just attached to.
//!
//! A user's environment can name any path, so such a directory is read only while it is that
//! user's own (owner, mode 0700, not a symlink: checked at every poll), and each socket in it
//! only when that user serves it (`SO_PEERCRED`, as for the monitor's own directory). Nothing in
//! it is ever written or removed. A directory no GPU process has named for [`FORGET_AFTER`]
//! (and the census no longer finds) is dropped once no connection from it is open.
//!
//! Bounds: at most [`MAX_USER_DIRS`] users' directories at once, at most [`MAX_DIRS_PER_USER`]
//! for one uid, the default ones the census finds counted with those its processes name (so one
//! user, by naming many or by making both default ones, takes the room of no other), and each
//! directory listed to at most [`MAX_NAMED_ENTRIES`] entries. The census leaves the last
//! [`KEPT_FOR_NAMED`] of the [`MAX_USER_DIRS`] to directories that GPU processes name, so idle
//! users' directories never take a GPU process's room.
//!
//! Two paths can lead to one directory (two containers sharing a volume, each reached through
//! its own `/proc/PID/root`): each poll pairs the directories by device and inode, and only the
//! first of a pair is listed, its sockets counted stale only when no twin's processes know the
//! pid either. Listing both connected each socket twice and refused the second, with a line in
//! the log every 30 s.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::scan::ScanClock;
use super::AgentHub;
use crate::model::AgentDirVars;
use crate::protocol::socket_dir_from;
use crate::protocol::sockets::CheckedDir;

/// Identifies a watched directory for the life of the hub (indices move when one is dropped).
pub(super) type DirId = u32;

/// Other users' directories read at once: a bound on the `lstat`s a poll makes.
pub(crate) const MAX_USER_DIRS: usize = 64;
/// Directories kept for one uid: its processes may name a few (a login's, `/tmp`'s, a job's),
/// and the census finds at most two default ones.
pub(crate) const MAX_DIRS_PER_USER: usize = 4;
/// Of the [`MAX_USER_DIRS`], those the census leaves to directories GPU processes name.
pub(super) const KEPT_FOR_NAMED: usize = 16;
/// Entries listed in a directory a process named (the monitor's own: 4,096): an agent's
/// directory holds its sockets, site directories and snapshots, far fewer.
pub(super) const MAX_NAMED_ENTRIES: usize = 1024;
/// How long a user's directory is kept after the last GPU process that named it.
const FORGET_AFTER: Duration = Duration::from_secs(30);

/// One directory the hub reads sockets from.
pub(super) struct Watched {
    pub(super) id: DirId,
    pub(super) path: PathBuf,
    /// The uid that must own the directory and serve its sockets; `None` for the monitor's own
    /// directory, which [`crate::protocol::sockets::inspect_socket_dir`] alone judges.
    pub(super) user: Option<u32>,
    /// The directory as the process names it; `path` when the monitor sees the same.
    inner: PathBuf,
    /// What a user's directory was worked out from, so a tick finds it again without building
    /// a path.
    vars: AgentDirVars,
    /// The process the directory is reached through, when `path` goes through its `/proc` entry.
    pub(super) via: Option<Via>,
    /// The last census found it as its user's default directory: kept until one does not.
    pub(super) census: bool,
    /// What this poll's check found; `None` when the directory is missing or refused.
    pub(super) checked: Option<CheckedDir>,
    /// The directory of this poll that this one is too (same device and inode): listed alone.
    pub(super) twin_of: Option<DirId>,
    /// How this directory's twins see pids (`Some`: through that process's root, `None`: as
    /// this machine does), for the sockets their processes name after a pid.
    twin_views: Vec<Option<u32>>,
    pub(super) scan: ScanClock,
    pub(super) problem: Option<String>,
    pub(super) warned_crowded: bool,
    /// When a refused connection in it was last logged (a user's directory only).
    pub(super) refusal_logged_at: Option<Instant>,
    pub(super) last_wanted: Instant,
}

/// The process whose `/proc/PID/root` (or `cwd`) a directory is reached through.
pub(super) struct Via {
    pid: u32,
    /// When a tick last listed that process.
    seen_at: Instant,
    /// Another process of this tick that names the same directory.
    spare: Option<u32>,
}

impl Via {
    fn note(&mut self, pid: u32, now: Instant) {
        if pid == self.pid {
            self.seen_at = now;
        } else {
            self.spare = Some(pid);
        }
    }
}

/// `inner` as process `pid` sees it: through its root, or its working directory for a relative
/// path (where the agent resolved it).
fn through(pid: u32, inner: &Path) -> PathBuf {
    match inner.strip_prefix("/") {
        Ok(rest) => PathBuf::from(format!("/proc/{pid}/root")).join(rest),
        Err(_) => PathBuf::from(format!("/proc/{pid}/cwd")).join(inner),
    }
}

/// Whether `pid` is a live process as seen through process `view`'s root (`None`: ours).
fn pid_alive_in(view: Option<u32>, pid: u32) -> bool {
    let proc = match view {
        Some(view) => format!("/proc/{view}/root/proc/{pid}"),
        None => format!("/proc/{pid}"),
    };
    Path::new(&proc).exists()
}

impl Watched {
    pub(super) fn own(path: PathBuf, now: Instant) -> Self {
        Watched::of_user(None, path, AgentDirVars::default(), None, now)
    }

    /// A directory of `user` (not yet given an id), as a process names it (`inner`) and
    /// reached `via` a process (`path` is `inner` then seen through it).
    pub(super) fn of_user(
        user: Option<u32>,
        inner: PathBuf,
        vars: AgentDirVars,
        via: Option<Via>,
        now: Instant,
    ) -> Self {
        let path = match &via {
            Some(via) => through(via.pid, &inner),
            None => inner.clone(),
        };
        Watched {
            id: 0,
            path,
            user,
            inner,
            vars,
            via,
            census: false,
            checked: None,
            twin_of: None,
            twin_views: Vec::new(),
            scan: ScanClock::default(),
            problem: None,
            warned_crowded: false,
            refusal_logged_at: None,
            last_wanted: now,
        }
    }

    /// Whether the process a socket file is named after lives. The agent names it with the
    /// pid its own namespace gives it: a container's is looked up in the container's /proc,
    /// and in each twin's (a container sharing the directory).
    pub(super) fn file_pid_alive(&self, file_pid: u32) -> bool {
        let view = self.via.as_ref().map(|via| via.pid);
        let mut views = std::iter::once(view).chain(self.twin_views.iter().copied());
        views.any(|view| pid_alive_in(view, file_pid))
    }
}

impl AgentHub {
    /// Root only: reads the agents of other users' GPU processes, and of root's own in another
    /// filesystem (a container's), each `(pid, uid, what names its directory)`, and at each
    /// census the default directories of every user who has one ([`super::defaults`]).
    /// Allocates only for a directory not seen before, or to follow another live process of a
    /// container.
    pub(crate) fn watch_users<'a>(
        &mut self,
        processes: impl Iterator<Item = (u32, u32, &'a AgentDirVars)>,
        now: Instant,
    ) {
        if !self.reads_other_users {
            return;
        }
        for (pid, uid, vars) in processes {
            let elsewhere = self.other_filesystem(vars);
            if uid == self.own_uid && !elsewhere {
                continue;
            }
            let known = self
                .dirs
                .iter_mut()
                .find(|d| d.user == Some(uid) && d.vars == *vars);
            match known {
                Some(dir) => {
                    dir.last_wanted = now;
                    if let Some(via) = &mut dir.via {
                        via.note(pid, now);
                    }
                }
                None => self.add_user_dir(pid, uid, vars, elsewhere, now),
            }
        }
        self.follow_live_processes(now);
        self.watch_default_dirs(now);
        self.forget_unwanted(now);
    }

    /// Whether the process sees another filesystem than ours (another mount namespace).
    fn other_filesystem(&self, vars: &AgentDirVars) -> bool {
        matches!((vars.mount_ns, self.own_mount_ns), (Some(theirs), Some(ours)) if theirs != ours)
    }

    fn add_user_dir(
        &mut self,
        pid: u32,
        uid: u32,
        vars: &AgentDirVars,
        elsewhere: bool,
        now: Instant,
    ) {
        if !self.room_for(uid, false) {
            return;
        }
        let inner = socket_dir_from(
            vars.torchtop_agent_dir.as_deref().map(AsRef::as_ref),
            vars.xdg_runtime_dir.as_deref().map(AsRef::as_ref),
            uid,
        );
        // A path in another filesystem, or relative to the process's working directory, is
        // reached through the process's own view of it.
        let via = (elsewhere || inner.is_relative()).then_some(Via {
            pid,
            seen_at: now,
            spare: None,
        });
        let dir = Watched::of_user(Some(uid), inner, vars.clone(), via, now);
        self.push_user_dir(dir);
    }

    /// Whether one more directory of `uid` fits the bounds (a line says so once when not); a
    /// directory the census found fits only while the room kept for named ones stays free.
    pub(super) fn room_for(&mut self, uid: u32, census: bool) -> bool {
        let users = self.dirs.iter().filter(|d| d.user.is_some()).count();
        let theirs = self.dirs.iter().filter(|d| d.user == Some(uid)).count();
        let room = if census {
            MAX_USER_DIRS - KEPT_FOR_NAMED
        } else {
            MAX_USER_DIRS
        };
        if theirs >= MAX_DIRS_PER_USER {
            self.warn_many_dirs(uid, None);
        } else if users >= room {
            self.warn_many_dirs(uid, Some(room));
        }
        theirs < MAX_DIRS_PER_USER && users < room
    }

    /// Gives `dir` its id and watches it from the next poll on.
    pub(super) fn push_user_dir(&mut self, mut dir: Watched) {
        self.next_dir += 1;
        dir.id = self.next_dir;
        self.dirs.push(dir);
    }

    /// Says once per uid (for the first [`MAX_USER_DIRS`] uids) that a directory goes unread:
    /// past the uid's own bound (`None`), or past `room` users' directories in all.
    fn warn_many_dirs(&mut self, uid: u32, room: Option<usize>) {
        if self.warned_uids.contains(&uid) || self.warned_uids.len() >= MAX_USER_DIRS {
            return;
        }
        self.warned_uids.push(uid);
        let line = match room {
            None => format!(
                "uid {uid} has more than {MAX_DIRS_PER_USER} agent directories (named by its \
                 processes or in the default places); only the first {MAX_DIRS_PER_USER} are \
                 read"
            ),
            Some(room) => format!(
                "more than {room} users' agent directories are in use; those of uid {uid} are \
                 not read"
            ),
        };
        self.push_log(line);
    }

    /// Whether directory `id` is a user's (not the monitor's own): one a process named, or
    /// the census found.
    pub(super) fn is_named_by_a_process(&self, id: DirId) -> bool {
        self.dirs.iter().any(|d| d.id == id && d.user.is_some())
    }

    /// A directory reached through a process that is gone is reached through another live
    /// process that names it (another rank in the same container).
    fn follow_live_processes(&mut self, now: Instant) {
        for dir in &mut self.dirs {
            let Some(via) = &mut dir.via else {
                continue;
            };
            let spare = via.spare.take();
            if dir.last_wanted != now || via.seen_at == now {
                continue;
            }
            if let Some(pid) = spare {
                via.pid = pid;
                via.seen_at = now;
                dir.path = through(pid, &dir.inner);
                dir.scan.forget();
            }
        }
    }

    /// Drops the users' directories that no process named lately, the census did not find and
    /// no connection comes from.
    fn forget_unwanted(&mut self, now: Instant) {
        let stale = |d: &Watched| {
            d.user.is_some()
                && !d.census
                && now.saturating_duration_since(d.last_wanted) >= FORGET_AFTER
        };
        if !self.dirs.iter().any(stale) {
            return;
        }
        let conns = &self.conns;
        self.dirs
            .retain(|d| !stale(d) || conns.values().any(|c| c.dir == d.id));
    }

    /// Pairs this poll's checked directories by device and inode: each one that an earlier one
    /// is too becomes its twin (not listed), and lends it its view of pids.
    pub(super) fn pair_twins(&mut self) {
        for i in 0..self.dirs.len() {
            self.dirs[i].twin_views.clear();
            let same = self.dirs[i].checked.map(|checked| checked.id);
            let first = same.and_then(|same| {
                self.dirs[..i].iter().find(|d| {
                    d.twin_of.is_none() && d.checked.is_some_and(|checked| checked.id == same)
                })
            });
            let first = first.map(|d| d.id);
            let dir = &mut self.dirs[i];
            dir.twin_of = first;
            let Some(first) = first else {
                continue;
            };
            // Listed in full once it is read again on its own.
            dir.scan.forget();
            let view = dir.via.as_ref().map(|via| via.pid);
            if let Some(first) = self.dirs.iter_mut().find(|d| d.id == first) {
                first.twin_views.push(view);
            }
        }
    }

    /// Whether directory `other` is `dir`, or its twin in this poll.
    pub(super) fn same_dir(&self, dir: DirId, other: DirId) -> bool {
        other == dir || (self.dirs.iter()).any(|d| d.id == other && d.twin_of == Some(dir))
    }

    /// The directory the agent of `pid` serves in, while it is connected, and what this poll's
    /// check found it to be (`None`: it failed the check).
    pub(crate) fn dir_of(&self, pid: u32) -> Option<(&Path, Option<CheckedDir>)> {
        let conn = self.conns.values().find(|c| c.pid == pid)?;
        let dir = self.dirs.iter().find(|d| d.id == conn.dir)?;
        Some((&dir.path, dir.checked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(agent_dir: Option<&str>, runtime: Option<&str>) -> AgentDirVars {
        AgentDirVars {
            torchtop_agent_dir: agent_dir.map(str::to_string),
            xdg_runtime_dir: runtime.map(str::to_string),
            mount_ns: None,
        }
    }

    /// A root monitor whose census finds no default directory (they are under a path that
    /// does not exist).
    fn hub_for_root() -> AgentHub {
        let mut hub = AgentHub::new(PathBuf::from("/nonexistent/torchtop-own"));
        hub.reads_other_users = true;
        hub.own_uid = 0;
        hub.own_mount_ns = Some(1);
        hub.census = super::super::defaults::Census::under(Path::new("/nonexistent/census"));
        hub
    }

    fn paths(hub: &AgentHub) -> Vec<(String, Option<u32>)> {
        (hub.dirs.iter())
            .map(|d| (d.path.display().to_string(), d.user))
            .collect()
    }

    #[test]
    fn each_users_directory_is_worked_out_as_their_agent_does_and_kept_once() {
        let mut hub = hub_for_root();
        let now = Instant::now();
        let (plain, login) = (vars(None, None), vars(None, Some("/run/user/1000")));
        let named = vars(Some("/scratch/me/agents"), Some("/run/user/1001"));
        let seen = [
            (10, 1000, &plain),
            (11, 1000, &login),
            (12, 1001, &named),
            (13, 0, &plain),
        ];
        hub.watch_users(seen.into_iter().chain(seen), now);
        assert_eq!(
            paths(&hub),
            [
                ("/nonexistent/torchtop-own".to_string(), None),
                ("/tmp/torchtop-1000".to_string(), Some(1000)),
                ("/run/user/1000/torchtop".to_string(), Some(1000)),
                ("/scratch/me/agents".to_string(), Some(1001)),
            ],
            "root's own processes use the monitor's directory"
        );
    }

    #[test]
    fn a_path_two_users_name_is_kept_for_each_until_nobody_names_it() {
        let mut hub = hub_for_root();
        let now = Instant::now();
        let shared = vars(Some("/scratch/agents"), None);
        hub.watch_users([(10, 1000, &shared), (11, 1001, &shared)].into_iter(), now);
        let users: Vec<_> = hub.dirs.iter().map(|d| d.user).collect();
        assert_eq!(users, [None, Some(1000), Some(1001)]);

        // Only uid 1001 names it from now on: 1000's entry is dropped.
        let later = now + FORGET_AFTER;
        hub.watch_users([(11, 1001, &shared)].into_iter(), later);
        let users: Vec<_> = hub.dirs.iter().map(|d| d.user).collect();
        assert_eq!(users, [None, Some(1001)]);

        hub.watch_users(std::iter::empty(), later + FORGET_AFTER);
        assert_eq!(
            hub.dirs.len(),
            1,
            "only the monitor's own directory is left"
        );
    }

    /// Another user made `/tmp/torchtop-0` before root's monitor first ran: root read their
    /// agents there with its own directory's bounds, and its own agents could not serve.
    #[test]
    fn the_monitors_own_directory_is_read_only_while_it_is_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o700);
        std::fs::set_permissions(dir.path(), mode).unwrap();
        let mut hub = AgentHub::new(dir.path().to_path_buf()).at_default_dir(true);
        hub.check_dir(0);
        assert!(hub.dirs[0].checked.is_some(), "{:?}", hub.log());
        hub.own_uid = 4242;
        hub.check_dir(0);
        assert!(hub.dirs[0].checked.is_none());
        let log = hub.log().join("\n");
        assert!(log.contains("not to us (uid 4242)"), "{log}");
        // Named on purpose (TORCHTOP_AGENT_DIR), it is read whoever owns it.
        let mut hub = AgentHub::new(dir.path().to_path_buf());
        hub.own_uid = 4242;
        hub.check_dir(0);
        assert!(hub.dirs[0].checked.is_some(), "{:?}", hub.log());
    }

    #[test]
    fn a_monitor_run_as_a_user_reads_no_other_users_directory() {
        let mut hub = hub_for_root();
        hub.reads_other_users = false;
        let plain = vars(None, None);
        hub.watch_users([(10, 1000, &plain)].into_iter(), Instant::now());
        assert_eq!(hub.dirs.len(), 1);
    }

    #[test]
    fn at_most_the_bound_of_users_directories_are_read() {
        let mut hub = hub_for_root();
        let plain = vars(None, None);
        let many = (1..=MAX_USER_DIRS as u32 + 5).map(|uid| (uid, uid, &plain));
        hub.watch_users(many, Instant::now());
        assert_eq!(hub.dirs.len(), MAX_USER_DIRS + 1);
        assert_eq!(
            hub.log().len(),
            5,
            "a line per uid left out: {:?}",
            hub.log()
        );
    }

    /// The attack: one user's processes each name a directory of their own, to take the room
    /// of every other user's.
    #[test]
    fn one_user_cannot_take_the_room_of_the_others() {
        let mut hub = hub_for_root();
        let named: Vec<AgentDirVars> = (0..MAX_USER_DIRS)
            .map(|i| vars(Some(&format!("/tmp/mine-{i}")), None))
            .collect();
        let plain = vars(None, None);
        let seen = (named.iter().enumerate()).map(|(i, v)| (100 + i as u32, 65534, v));
        hub.watch_users(seen.chain([(7, 1000, &plain)]), Instant::now());
        let users: Vec<_> = hub.dirs.iter().map(|d| d.user).collect();
        assert_eq!(
            users.iter().filter(|u| **u == Some(65534)).count(),
            MAX_DIRS_PER_USER
        );
        assert!(users.contains(&Some(1000)), "another user still gets read");
        assert_eq!(
            hub.log(),
            [format!(
                "uid 65534 has more than {MAX_DIRS_PER_USER} agent directories (named by its \
                 processes or in the default places); only the first {MAX_DIRS_PER_USER} are \
                 read"
            )]
        );
    }

    #[test]
    fn a_containers_directory_is_read_through_a_live_process_of_the_container() {
        let mut hub = hub_for_root();
        let now = Instant::now();
        let container = AgentDirVars {
            mount_ns: Some(2),
            ..vars(None, None)
        };
        let relative = vars(Some("agents"), None);
        let ours = AgentDirVars {
            mount_ns: Some(1),
            ..vars(None, None)
        };
        let seen = [
            (20, 0, &container),
            (21, 0, &container),
            (30, 1000, &relative),
            (40, 0, &ours),
        ];
        hub.watch_users(seen.into_iter(), now);
        assert_eq!(
            paths(&hub)[1..],
            [
                ("/proc/20/root/tmp/torchtop-0".to_string(), Some(0)),
                ("/proc/30/cwd/agents".to_string(), Some(1000)),
            ],
            "root's own processes in our filesystem use the monitor's directory"
        );

        // Rank 20 is gone: the directory is reached through rank 21.
        let later = now + Duration::from_secs(1);
        hub.watch_users([(21, 0, &container)].into_iter(), later);
        assert_eq!(paths(&hub)[1].0, "/proc/21/root/tmp/torchtop-0");
    }

    /// Two paths to one directory (here a symlink above it; in production two containers that
    /// share a volume, each reached through its own `/proc/PID/root`) are listed once. Both
    /// were listed: the second listing connected to the same agent again and was refused
    /// ("already connected"), with a line in the log every 30 s.
    #[test]
    fn two_paths_to_one_directory_are_listed_once() {
        let base = tempfile::tempdir().unwrap();
        let agents = base.path().join("agents");
        std::fs::create_dir(&agents).unwrap();
        let private = std::os::unix::fs::PermissionsExt::from_mode(0o700);
        std::fs::set_permissions(&agents, private).unwrap();
        std::os::unix::fs::symlink(base.path(), base.path().join("link")).unwrap();
        let socket = agents.join(format!("{}.sock", std::process::id()));
        let _agent = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let mut hub = hub_for_root();
        // The test's own uid plays the user: the monitor is another.
        hub.own_uid = u32::MAX;
        let me = crate::sys::effective_uid();
        let by_link = base.path().join("link/agents");
        let paths = [agents.to_str().unwrap(), by_link.to_str().unwrap()];
        let named = paths.map(|path| vars(Some(path), None));
        let seen = [(1, me, &named[0]), (2, me, &named[1])];
        hub.watch_users(seen.into_iter(), Instant::now());
        assert_eq!(hub.dirs.len(), 3);

        for _ in 0..3 {
            hub.poll();
        }

        assert_eq!(hub.connections(), 1, "{:?}", hub.log());
        assert_eq!(hub.log(), Vec::<String>::new());
        assert_eq!(hub.dirs[2].twin_of, Some(hub.dirs[1].id));
    }
}
