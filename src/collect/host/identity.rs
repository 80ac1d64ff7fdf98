//! The identity of a process as the host collector caches it: what does not change during
//! its life (start time, name, user, command line, environment), read once on first sight
//! (and again after an exec or a pid reuse) and shared with every row and snapshot after.

use std::sync::Arc;
use std::time::Instant;

use crate::model::LaunchEnv;
use crate::sys::proc::{self as procfs, PidStat};
use crate::sys::user_name;

use super::super::launcher::launcher_in;
use super::{HostCollector, Vanished};

/// What does not change during a process's life (or changes only at exec, which renames it).
#[derive(Debug, Clone)]
pub(super) struct Identity {
    pub(super) start_ticks: u64,
    pub(super) comm: String,
    pub(super) uid: Option<u32>,
    /// Shared with every row of this process, in every snapshot: no copy per row per tick.
    pub(super) user: Option<Arc<str>>,
    /// Outer `None`: unreadable; inner `None`: empty (kernel thread, zombie).
    pub(super) cmdline: Option<Option<String>>,
    /// The command as a GPU row shows it ([`Identity::display_command`]), made once.
    pub(super) display: Option<Arc<str>>,
    /// Outer `None`: not read yet (the tree view does not need it); inner `None`: unreadable.
    pub(super) env: Option<Option<Arc<LaunchEnv>>>,
    /// Direct children from the last walk of every thread's `children` file; `None` when the
    /// kernel has no such files.
    pub(super) children: Option<Vec<u32>>,
    pub(super) children_scanned_at: Option<Instant>,
    pub(super) last_seen: Instant,
}

impl Identity {
    /// Whether this cached identity still describes `stat`'s process. An empty command line
    /// of a live user process is not trusted: it is also what a process shows in the middle
    /// of exec (before the kernel has set up its arguments), so it is read again.
    pub(super) fn matches(&self, stat: &PidStat) -> bool {
        let settled =
            !matches!(self.cmdline, Some(None)) || stat.state == 'Z' || stat.is_kernel_thread();
        settled && self.start_ticks == stat.start_ticks && self.comm == stat.comm
    }

    /// The command as a GPU row shows it: `[comm]` for an empty command line.
    fn display_command(cmdline: Option<&Option<String>>, comm: &str) -> Option<Arc<str>> {
        match cmdline? {
            Some(line) => Some(line.as_str().into()),
            None => Some(format!("[{comm}]").into()),
        }
    }
}

impl HostCollector {
    /// The cached identity of `stat`'s process, read on first sight (or after an exec or a
    /// pid reuse). `with_env` also reads environ if that was not done yet.
    pub(super) fn identity(
        &mut self,
        stat: &PidStat,
        with_env: bool,
        now: Instant,
    ) -> Result<&Identity, Vanished> {
        let pid = stat.pid;
        let cached = self.identities.get(&pid).filter(|id| id.matches(stat));
        let known = cached.is_some();
        let needs_env = with_env && cached.is_none_or(|id| id.env.is_none());
        if !known || needs_env {
            let mut identity = match self.identities.remove(&pid) {
                Some(old) if known => old,
                _ => self.read_identity(stat, now),
            };
            if with_env && identity.env.is_none() {
                let mut env = procfs::read_environ(&self.root, pid).ok();
                if let Some(env) = env.as_mut() {
                    env.agent_dir_vars.mount_ns = procfs::read_mount_namespace(&self.root, pid);
                    let parent = procfs::read_cmdline(&self.root, stat.ppid).ok().flatten();
                    env.launcher = parent.as_deref().and_then(launcher_in).map(str::to_string);
                }
                identity.env = Some(env.map(Arc::new));
            }
            self.confirm_same_process(stat)?;
            self.identities.insert(pid, identity);
        }
        let identity = self.identities.get_mut(&pid).ok_or(Vanished)?;
        identity.last_seen = now;
        Ok(identity)
    }

    fn read_identity(&mut self, stat: &PidStat, now: Instant) -> Identity {
        let status = procfs::read_pid_status(&self.root, stat.pid).ok();
        let cmdline = procfs::read_cmdline(&self.root, stat.pid).ok();
        let uid = status.map(|s| s.uid);
        Identity {
            start_ticks: stat.start_ticks,
            comm: stat.comm.clone(),
            uid,
            user: uid.map(|uid| self.user_name(uid)),
            display: Identity::display_command(cmdline.as_ref(), &stat.comm),
            cmdline,
            env: None,
            children: None,
            children_scanned_at: None,
            last_seen: now,
        }
    }

    /// Reads stat again after the identity files, so that a pid reused in between is not
    /// given the previous owner's command line.
    fn confirm_same_process(&self, stat: &PidStat) -> Result<(), Vanished> {
        match procfs::read_pid_stat(&self.root, stat.pid) {
            Ok(again) if again.start_ticks == stat.start_ticks => Ok(()),
            _ => Err(Vanished),
        }
    }

    fn user_name(&mut self, uid: u32) -> Arc<str> {
        self.user_names
            .entry(uid)
            .or_insert_with(|| user_name(uid).unwrap_or_else(|| uid.to_string()).into())
            .clone()
    }
}
