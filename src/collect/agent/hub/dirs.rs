//! The directories the hub reads sockets from: the monitor's own (`$TORCHTOP_AGENT_DIR`, else
//! `$XDG_RUNTIME_DIR/torchtop`, else `/tmp/torchtop-<uid>`) always, and, when the monitor runs as
//! root, the directory each other user's GPU process would put its agent's socket in, worked out
//! as that agent works it out (its own `TORCHTOP_AGENT_DIR`, else its `XDG_RUNTIME_DIR`, else
//! its uid). Without them `sudo torchtop` showed every other user's training process as having
//! no agent, even one root had just attached to.
//!
//! A user's environment can name any path, so such a directory is read only while it is that
//! user's own (owner, mode 0700, not a symlink: checked at every poll), and each socket in it
//! only when that user serves it (`SO_PEERCRED`, as for the monitor's own directory). Nothing in
//! it is ever written or removed. A directory no GPU process has named for [`FORGET_AFTER`] is
//! dropped once no connection from it is open; at most [`MAX_USER_DIRS`] are read at once.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::scan::ScanClock;
use super::AgentHub;
use crate::model::AgentDirVars;
use crate::protocol::socket_dir_from;

/// Identifies a watched directory for the life of the hub (indices move when one is dropped).
pub(super) type DirId = u32;

/// Other users' directories read at once: a bound on the `lstat`s a poll makes.
pub(crate) const MAX_USER_DIRS: usize = 64;
/// How long a user's directory is kept after the last GPU process that named it.
const FORGET_AFTER: Duration = Duration::from_secs(30);

/// One directory the hub reads sockets from.
pub(super) struct Watched {
    pub(super) id: DirId,
    pub(super) path: PathBuf,
    /// The uid that must own the directory and serve its sockets; `None` for the monitor's own
    /// directory, which [`crate::protocol::sockets::inspect_socket_dir`] alone judges.
    pub(super) user: Option<u32>,
    /// What a user's directory was worked out from, so a tick finds it again without building
    /// a path.
    vars: AgentDirVars,
    /// Another entry already reads the same path: kept only to be found again, never listed.
    alias: bool,
    pub(super) scan: ScanClock,
    pub(super) problem: Option<String>,
    pub(super) warned_crowded: bool,
    last_wanted: Instant,
}

impl Watched {
    pub(super) fn own(path: PathBuf, now: Instant) -> Self {
        Watched {
            id: 0,
            path,
            user: None,
            vars: AgentDirVars::default(),
            alias: false,
            scan: ScanClock::default(),
            problem: None,
            warned_crowded: false,
            last_wanted: now,
        }
    }

    /// Whether polls read this directory.
    pub(super) fn is_read(&self) -> bool {
        !self.alias
    }
}

impl AgentHub {
    /// Root only: reads the agents of other users' GPU processes, each `(uid, variables)` naming
    /// the directory that process's agent serves in. Allocates only for a directory not seen
    /// before.
    pub(crate) fn watch_users<'a>(
        &mut self,
        processes: impl Iterator<Item = (u32, &'a AgentDirVars)>,
        now: Instant,
    ) {
        if !self.reads_other_users {
            return;
        }
        for (uid, vars) in processes {
            if uid == self.own_uid {
                continue;
            }
            let known = self
                .dirs
                .iter_mut()
                .find(|d| d.user == Some(uid) && d.vars == *vars);
            match known {
                Some(dir) => dir.last_wanted = now,
                None => self.add_user_dir(uid, vars, now),
            }
        }
        self.forget_unwanted(now);
    }

    fn add_user_dir(&mut self, uid: u32, vars: &AgentDirVars, now: Instant) {
        let users = self.dirs.iter().filter(|d| d.user.is_some()).count();
        if users >= MAX_USER_DIRS {
            if !self.warned_many_users {
                self.warned_many_users = true;
                self.push_log(format!(
                    "other users' processes name more than {MAX_USER_DIRS} agent directories; \
                     only {MAX_USER_DIRS} are read"
                ));
            }
            return;
        }
        let path = socket_dir_from(
            vars.torchtop_agent_dir.as_deref().map(AsRef::as_ref),
            vars.xdg_runtime_dir.as_deref().map(AsRef::as_ref),
            uid,
        );
        let alias = self.dirs.iter().any(|d| d.is_read() && d.path == path);
        self.next_dir += 1;
        self.dirs.push(Watched {
            id: self.next_dir,
            path,
            user: Some(uid),
            vars: vars.clone(),
            alias,
            scan: ScanClock::default(),
            problem: None,
            warned_crowded: false,
            last_wanted: now,
        });
    }

    /// Drops the users' directories no process named lately and no connection comes from. An
    /// alias whose original goes is read in its place.
    fn forget_unwanted(&mut self, now: Instant) {
        let stale = |d: &Watched| {
            d.user.is_some() && now.saturating_duration_since(d.last_wanted) >= FORGET_AFTER
        };
        if !self.dirs.iter().any(stale) {
            return;
        }
        let conns = &self.conns;
        self.dirs
            .retain(|d| !stale(d) || conns.values().any(|c| c.dir == d.id));
        for i in 0..self.dirs.len() {
            if self.dirs[i].alias {
                let path = &self.dirs[i].path;
                let read = self.dirs.iter().any(|d| !d.alias && d.path == *path);
                self.dirs[i].alias = read;
            }
        }
    }

    /// The directory the agent of `pid` serves in, while it is connected.
    pub(crate) fn dir_of(&self, pid: u32) -> Option<&std::path::Path> {
        let conn = self.conns.values().find(|c| c.pid == pid)?;
        let dir = self.dirs.iter().find(|d| d.id == conn.dir)?;
        Some(&dir.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(agent_dir: Option<&str>, runtime: Option<&str>) -> AgentDirVars {
        AgentDirVars {
            torchtop_agent_dir: agent_dir.map(str::to_string),
            xdg_runtime_dir: runtime.map(str::to_string),
        }
    }

    fn hub_for_root() -> AgentHub {
        let mut hub = AgentHub::new(PathBuf::from("/nonexistent/torchtop-own"));
        hub.reads_other_users = true;
        hub.own_uid = 0;
        hub
    }

    fn paths(hub: &AgentHub) -> Vec<(String, Option<u32>, bool)> {
        (hub.dirs.iter())
            .map(|d| (d.path.display().to_string(), d.user, d.is_read()))
            .collect()
    }

    #[test]
    fn each_users_directory_is_worked_out_as_their_agent_does_and_kept_once() {
        let mut hub = hub_for_root();
        let now = Instant::now();
        let (plain, login) = (vars(None, None), vars(None, Some("/run/user/1000")));
        let named = vars(Some("/scratch/me/agents"), Some("/run/user/1001"));
        let seen = [(1000, &plain), (1000, &login), (1001, &named), (0, &plain)];
        hub.watch_users(seen.into_iter().chain(seen), now);
        assert_eq!(
            paths(&hub),
            [
                ("/nonexistent/torchtop-own".to_string(), None, true),
                ("/tmp/torchtop-1000".to_string(), Some(1000), true),
                ("/run/user/1000/torchtop".to_string(), Some(1000), true),
                ("/scratch/me/agents".to_string(), Some(1001), true),
            ],
            "root's own processes use the monitor's directory"
        );
    }

    #[test]
    fn a_path_two_users_name_is_read_once_and_forgotten_when_nobody_names_it() {
        let mut hub = hub_for_root();
        let now = Instant::now();
        let shared = vars(Some("/scratch/agents"), None);
        hub.watch_users([(1000, &shared), (1001, &shared)].into_iter(), now);
        let read: Vec<_> = paths(&hub)
            .into_iter()
            .map(|(_, u, read)| (u, read))
            .collect();
        assert_eq!(
            read,
            [(None, true), (Some(1000), true), (Some(1001), false)]
        );

        // Only uid 1001 names it from now on: its entry is read once 1000's is dropped.
        let later = now + FORGET_AFTER;
        hub.watch_users([(1001, &shared)].into_iter(), later);
        let read: Vec<_> = paths(&hub)
            .into_iter()
            .map(|(_, u, read)| (u, read))
            .collect();
        assert_eq!(read, [(None, true), (Some(1001), true)]);

        hub.watch_users(std::iter::empty(), later + FORGET_AFTER);
        assert_eq!(
            hub.dirs.len(),
            1,
            "only the monitor's own directory is left"
        );
    }

    #[test]
    fn a_monitor_run_as_a_user_reads_no_other_users_directory() {
        let mut hub = hub_for_root();
        hub.reads_other_users = false;
        let plain = vars(None, None);
        hub.watch_users([(1000, &plain)].into_iter(), Instant::now());
        assert_eq!(hub.dirs.len(), 1);
    }

    #[test]
    fn at_most_the_bound_of_users_directories_are_read() {
        let mut hub = hub_for_root();
        let plain = vars(None, None);
        let many = (1..=MAX_USER_DIRS as u32 + 5).map(|uid| (uid, &plain));
        hub.watch_users(many, Instant::now());
        assert_eq!(hub.dirs.len(), MAX_USER_DIRS + 1);
        assert_eq!(hub.log().len(), 1, "{:?}", hub.log());
    }
}
