//! The sampler's part in memory post-mortems: the OOMs agents report, kept (bounded) after
//! their process exits so the `oom` rule can still name them, and the snapshot files written for
//! the viewer (`S`), which are opened only from the directory the agent's socket is in.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::{describe_outcome, Sampler};
use crate::collect::agent::{AgentNews, CommandOutcome};
use crate::format::path::named;
use crate::model::{GpuProcess, MemsnapReady, OomReport, OpenedFile};
use crate::protocol::sockets::{open_checked_dir, CheckedDir};
use crate::protocol::AgentCommand;

/// OOM reports kept; the oldest goes first.
pub(crate) const MAX_OOMS: usize = 32;

/// Adds an `oom` event, unless it is one already kept: an agent sends its latest OOM again to
/// every new connection, with the same time.
pub(crate) fn remember_oom(
    ooms: &mut VecDeque<OomReport>,
    news: &AgentNews,
    processes: &[GpuProcess],
) {
    let (pid, event) = (news.pid, &news.event);
    let unix_seconds = event.ts.unwrap_or_else(now);
    // Two users' processes may share a pid (each pid 1 of its container): the user tells them.
    let known = ooms.iter().any(|r| {
        (r.uid, r.pid) == (news.uid, pid)
            && r.device == event.device
            && event.ts == Some(r.unix_seconds)
    });
    if known {
        return;
    }
    if ooms.len() >= MAX_OOMS {
        let at = evicted(ooms);
        ooms.remove(at);
    }
    ooms.push_back(OomReport {
        pid,
        uid: news.uid,
        command: processes
            .iter()
            .find(|p| p.pid == pid)
            .and_then(|p| p.command.as_deref().map(str::to_string)),
        device: event.device,
        requested_bytes: event.requested_bytes,
        device_free_bytes: event.device_free,
        device_allocated_bytes: event.device_allocated,
        snapshot_path: event.path.clone(),
        snapshot_error: event.error.clone(),
        unix_seconds,
        step: event.step,
    });
}

/// Which report goes when the list is full: of the user who holds the most, the oldest of
/// their process that holds the most. A process that runs out of memory again and again, or a
/// user's many processes that do it on purpose (`torch.cuda` OOMs are cheap to cause, one per
/// process as well as forty in one), then push out only that user's own reports, not another
/// user's OOM that root's monitor is there to tell. Counts only when full.
fn evicted(ooms: &VecDeque<OomReport>) -> usize {
    use std::collections::HashMap;
    let mut by_user: HashMap<Option<u32>, usize> = HashMap::new();
    let mut by_process: HashMap<(Option<u32>, u32), usize> = HashMap::new();
    for report in ooms {
        *by_user.entry(report.uid).or_default() += 1;
        *by_process.entry((report.uid, report.pid)).or_default() += 1;
    }
    let user_most = by_user.values().copied().max().unwrap_or(0);
    let theirs = |r: &&OomReport| by_user.get(&r.uid) == Some(&user_most);
    let held = |r: &OomReport| by_process.get(&(r.uid, r.pid)).copied();
    let process_most = (ooms.iter().filter(theirs)).filter_map(held).max();
    (ooms.iter())
        .position(|r| theirs(&r) && held(r) == process_most)
        .unwrap_or(0)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Sampler {
    /// The status-line sentence for a command's outcome; a snapshot written for the viewer also
    /// becomes the next [`MemsnapReady`].
    pub(super) fn on_outcome(&mut self, outcome: &CommandOutcome) -> String {
        let CommandOutcome::Replied {
            pid,
            command: AgentCommand::Snapshot,
            reply,
        } = outcome
        else {
            return describe_outcome(outcome);
        };
        if self.memory_views.remove(&reply.id).is_none() {
            return describe_outcome(outcome);
        }
        let (true, Some(reported)) = (reply.ok, reply.path.as_deref()) else {
            return describe_outcome(outcome);
        };
        let Some((dir, checked)) = self.agents.dir_of(*pid) else {
            return format!("agent of {pid}: it disconnected before its snapshot could be opened");
        };
        let Some(checked) = checked else {
            return format!(
                "agent of {pid}: {} failed its check; its snapshot is not opened",
                named(dir)
            );
        };
        match snapshot_file(dir, checked, reported) {
            Ok((path, file)) => {
                let line = format!(
                    "agent of {pid}: snapshot written to {}; opening it",
                    named(&path)
                );
                self.memsnap_ready = Some(MemsnapReady {
                    request: reply.id,
                    pid: *pid,
                    path,
                    file: Some(OpenedFile(Arc::new(file))),
                });
                line
            }
            Err(why) => format!("agent of {pid}: {why}"),
        }
    }
}

/// The snapshot file an agent reported, opened in the directory the monitor reads that agent
/// from. Only the file name is taken from the agent, and only one shaped as the agent names its
/// files: torchtop (perhaps root) never opens a path another user's process chose. The file is
/// opened relative to the directory as `checked` found it, with no symlink followed at either
/// step, and must be a regular file of the directory's owner; the caller reads that open file,
/// never the path again.
pub(crate) fn snapshot_file(
    agent_dir: &Path,
    checked: CheckedDir,
    reported: &str,
) -> Result<(PathBuf, File), String> {
    use rustix::fs::{fstat, openat, FileType, Mode, OFlags};
    let name = Path::new(reported)
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| is_snapshot_name(n))
        .ok_or_else(|| {
            "the agent reported a snapshot file not named as torchtop's agent names them; \
             open it with `torchtop snapshot FILE` if you trust it"
                .to_string()
        })?;
    let path = agent_dir.join(name);
    let dir = open_checked_dir(agent_dir, checked)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = openat(&dir, name, flags, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP => format!(
            "{} is not a regular file; torchtop does not open it",
            named(&path)
        ),
        e => format!(
            "the snapshot is not in {} ({}); open it with `torchtop snapshot FILE`",
            named(agent_dir),
            std::io::Error::from(e)
        ),
    })?;
    let stat = fstat(&fd).map_err(|e| format!("cannot inspect {}: {e}", named(&path)))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(format!(
            "{} is not a regular file; torchtop does not open it",
            named(&path)
        ));
    }
    if stat.st_uid != checked.owner {
        return Err(format!(
            "{} belongs to uid {}, not to uid {}, whose agent wrote it; torchtop does not open it",
            named(&path),
            stat.st_uid,
            checked.owner
        ));
    }
    Ok((path, File::from(fd)))
}

/// `<pid>-snapshot-<stamp>[-n].pickle` or `<pid>-oom-<stamp>[-n].pickle`.
fn is_snapshot_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".pickle") else {
        return false;
    };
    let Some((pid, rest)) = stem.split_once('-') else {
        return false;
    };
    let stamp = rest
        .strip_prefix("snapshot-")
        .or_else(|| rest.strip_prefix("oom-"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(pid) && stamp.is_some_and(|s| digits(&s.replace('-', "")) && !s.starts_with('-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::agent::AgentEvent;
    use crate::protocol::sockets::check_socket_dir;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};

    /// A directory as an agent's is: its owner's alone.
    fn private_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn only_files_named_as_the_agent_names_them_in_the_agent_dir_are_opened() {
        let dir = private_dir();
        let checked = check_socket_dir(dir.path()).unwrap().unwrap();
        let open = |reported: &str| snapshot_file(dir.path(), checked, reported);
        let good = "42-snapshot-20260101-120000.pickle";
        std::fs::write(dir.path().join(good), b"x").unwrap();
        let (found, _) = open(&format!("/elsewhere/{good}")).unwrap();
        assert_eq!(
            found,
            dir.path().join(good),
            "the agent's directory part is ignored"
        );
        std::fs::write(dir.path().join("42-oom-20260101-120000-1.pickle"), b"x").unwrap();
        assert!(open("42-oom-20260101-120000-1.pickle").is_ok());
        for bad in [
            "/etc/shadow",
            "../42-snapshot-1.pickle",
            "42-snapshot-.pickle",
            "x-snapshot-1.pickle",
            "42-other-1.pickle",
            "42-snapshot-1.pickle.gz",
        ] {
            assert!(open(bad).is_err(), "{bad}");
        }
        let link = "43-snapshot-20260101-120000.pickle";
        std::os::unix::fs::symlink(dir.path().join(good), dir.path().join(link)).unwrap();
        let refused = open(link).unwrap_err();
        assert!(refused.contains("not a regular file"), "{refused}");
        let fifo = "45-snapshot-20260101-120000.pickle";
        nix::unistd::mkfifo(&dir.path().join(fifo), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let refused = open(fifo).unwrap_err();
        assert!(refused.contains("not a regular file"), "{refused}");
        let missing = open("44-snapshot-1.pickle").unwrap_err();
        assert!(missing.contains("torchtop snapshot FILE"), "{missing}");
    }

    /// A user owns their name in `/tmp`: after the hub checked `/tmp/torchtop-<uid>`, they
    /// rename it away and put a symlink to another user's directory in its place, then reply
    /// with the name of a snapshot that user wrote. Root's viewer opened that other user's file
    /// and showed it as the first user's (the check looked at the path's last step only).
    #[test]
    fn a_directory_swapped_after_its_check_is_not_opened() {
        let base = tempfile::tempdir().unwrap();
        let (agent_dir, other) = (base.path().join("agent"), base.path().join("other"));
        for dir in [&agent_dir, &other] {
            std::fs::DirBuilder::new().mode(0o700).create(dir).unwrap();
        }
        let checked = check_socket_dir(&agent_dir).unwrap().unwrap();
        let name = "42-snapshot-20260101-120000.pickle";
        std::fs::write(other.join(name), b"someone else's").unwrap();
        std::fs::rename(&agent_dir, base.path().join("away")).unwrap();
        std::os::unix::fs::symlink(&other, &agent_dir).unwrap();
        let refused = snapshot_file(&agent_dir, checked, name).unwrap_err();
        assert!(
            refused.contains("changed since it was checked"),
            "{refused}"
        );
        // A directory put in its place is not the one checked either.
        std::fs::remove_file(&agent_dir).unwrap();
        std::fs::rename(&other, &agent_dir).unwrap();
        let refused = snapshot_file(&agent_dir, checked, name).unwrap_err();
        assert!(
            refused.contains("changed since it was checked"),
            "{refused}"
        );
    }

    /// In the agent's own directory, a file of another owner (root can make one; so can a
    /// hard link to another user's file where the kernel allows it) is not the agent's.
    #[test]
    fn a_snapshot_not_of_the_directorys_owner_is_not_opened() {
        if crate::sys::effective_uid() != 0 {
            return; // chown needs root; CI runs as root
        }
        let dir = private_dir();
        let checked = check_socket_dir(dir.path()).unwrap().unwrap();
        let name = "42-snapshot-20260101-120000.pickle";
        std::fs::write(dir.path().join(name), b"x").unwrap();
        std::os::unix::fs::chown(dir.path().join(name), Some(65534), None).unwrap();
        let refused = snapshot_file(dir.path(), checked, name).unwrap_err();
        assert!(
            refused.contains("belongs to uid 65534, not to uid 0"),
            "{refused}"
        );
    }

    /// An `oom` event on device 0 at `ts`.
    fn oom_at(ts: f64) -> AgentEvent {
        AgentEvent {
            kind: "oom".into(),
            device: Some(0),
            ts: Some(ts),
            ..Default::default()
        }
    }

    /// An event from the agent of `pid`, whose socket directory is `uid`'s.
    fn news(pid: u32, uid: u32, event: &AgentEvent) -> AgentNews {
        AgentNews {
            pid,
            uid: Some(uid),
            event: event.clone(),
        }
    }

    #[test]
    fn an_oom_sent_again_to_a_new_connection_is_kept_once() {
        let mut ooms = VecDeque::new();
        let event = AgentEvent {
            kind: "oom".into(),
            device: Some(0),
            ts: Some(1000.5),
            requested_bytes: Some(7),
            path: Some("/d/42-oom-1.pickle".into()),
            ..Default::default()
        };
        let mut process = GpuProcess::new(42, 0, crate::model::ProcessKind::Compute);
        process.command = Some("python train.py".into());
        remember_oom(&mut ooms, &news(42, 0, &event), &[process]);
        remember_oom(&mut ooms, &news(42, 0, &event), &[]);
        assert_eq!(ooms.len(), 1);
        assert_eq!(ooms[0].command.as_deref(), Some("python train.py"));
        assert_eq!(ooms[0].unix_seconds, 1000.5);
        for i in 0..100 {
            let later = AgentEvent {
                ts: Some(2000.0 + f64::from(i)),
                ..event.clone()
            };
            remember_oom(&mut ooms, &news(42, 0, &later), &[]);
        }
        assert_eq!(ooms.len(), MAX_OOMS, "bounded");
        assert_eq!(ooms.back().unwrap().unix_seconds, 2099.0);
    }

    /// The diff review: uid 65534 caused 40 OOMs in its own process and pushed root's job's
    /// OOM out of the list, and its `oom` warning off root's monitor.
    #[test]
    fn a_process_that_floods_oom_reports_pushes_out_only_its_own() {
        let mut ooms = VecDeque::new();
        let event = oom_at;
        remember_oom(&mut ooms, &news(7, 0, &event(1.0)), &[]);
        for i in 0..40 {
            remember_oom(
                &mut ooms,
                &news(666, 65534, &event(2.0 + f64::from(i))),
                &[],
            );
        }
        assert_eq!(ooms.len(), MAX_OOMS);
        assert!(ooms.iter().any(|r| r.pid == 7), "the victim's OOM is kept");
        assert_eq!(
            ooms.back().unwrap().unix_seconds,
            41.0,
            "the newest is kept"
        );
    }

    /// Two containers' processes, both pid 1, of two users, with OOMs at the same second: two
    /// reports, not one taken for the other's repeat.
    #[test]
    fn two_users_processes_of_one_pid_keep_their_own_reports() {
        let mut ooms = VecDeque::new();
        let event = AgentEvent {
            kind: "oom".into(),
            device: Some(0),
            ts: Some(1000.0),
            ..Default::default()
        };
        remember_oom(&mut ooms, &news(1, 1000, &event), &[]);
        remember_oom(&mut ooms, &news(1, 1001, &event), &[]);
        remember_oom(&mut ooms, &news(1, 1001, &event), &[]);
        let users: Vec<Option<u32>> = ooms.iter().map(|r| r.uid).collect();
        assert_eq!(users, [Some(1000), Some(1001)]);
    }

    /// One OOM from each of 40 processes of one user (each holds as few as the victim's) must
    /// not push out another user's: a user's reports count together.
    #[test]
    fn a_user_whose_many_processes_each_report_an_oom_pushes_out_only_their_own() {
        let mut ooms = VecDeque::new();
        let event = oom_at;
        remember_oom(&mut ooms, &news(7, 0, &event(1.0)), &[]);
        for i in 0..40 {
            let flood = news(1000 + i, 65534, &event(2.0 + f64::from(i)));
            remember_oom(&mut ooms, &flood, &[]);
        }
        assert_eq!(ooms.len(), MAX_OOMS);
        let victim = ooms.iter().find(|r| r.pid == 7);
        assert_eq!(
            victim.map(|r| r.uid),
            Some(Some(0)),
            "the victim's OOM is kept"
        );
        let flooder = ooms.iter().filter(|r| r.uid == Some(65534)).count();
        assert_eq!(flooder, MAX_OOMS - 1);
        assert_eq!(ooms.back().unwrap().pid, 1039, "the newest is kept");
    }
}
