//! The sampler's part in memory post-mortems: the OOMs agents report, kept (bounded) after
//! their process exits so the `oom` rule can still name them, and the snapshot files written for
//! the viewer (`S`), which are opened only from the directory the agent's socket is in.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{describe_outcome, Sampler};
use crate::collect::agent::{AgentEvent, CommandOutcome};
use crate::model::{GpuProcess, MemsnapReady, OomReport};
use crate::protocol::AgentCommand;

/// OOM reports kept; the oldest goes first.
pub(crate) const MAX_OOMS: usize = 32;

/// Adds an `oom` event, unless it is one already kept: an agent sends its latest OOM again to
/// every new connection, with the same time.
pub(crate) fn remember_oom(
    ooms: &mut VecDeque<OomReport>,
    pid: u32,
    event: &AgentEvent,
    processes: &[GpuProcess],
) {
    let unix_seconds = event.ts.unwrap_or_else(now);
    let known = ooms
        .iter()
        .any(|r| r.pid == pid && r.device == event.device && event.ts == Some(r.unix_seconds));
    if known {
        return;
    }
    if ooms.len() == MAX_OOMS {
        ooms.pop_front();
    }
    ooms.push_back(OomReport {
        pid,
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
    });
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
        let dir = self.agents.dir_of(*pid).unwrap_or(&self.config.agent_dir);
        match snapshot_file(dir, reported) {
            Ok(path) => {
                self.memsnap_ready = Some(MemsnapReady {
                    request: reply.id,
                    pid: *pid,
                    path,
                });
                format!("agent of {pid}: snapshot written to {reported}; opening it")
            }
            Err(why) => format!("agent of {pid}: {why}"),
        }
    }
}

/// The snapshot file an agent reported, in the directory the monitor reads that agent from. Only
/// the file name is taken from the agent, and only one shaped as the agent names its files:
/// torchtop (perhaps root) never opens a path another user's process chose.
pub(crate) fn snapshot_file(agent_dir: &Path, reported: &str) -> Result<PathBuf, String> {
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
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_file() => Ok(path),
        Ok(_) => Err(format!(
            "{} is not a regular file; torchtop does not open it",
            path.display()
        )),
        Err(e) => Err(format!(
            "the snapshot is not in {} ({e}); open it with `torchtop snapshot FILE`",
            agent_dir.display()
        )),
    }
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

    #[test]
    fn only_files_named_as_the_agent_names_them_in_the_agent_dir_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let good = "42-snapshot-20260101-120000.pickle";
        std::fs::write(dir.path().join(good), b"x").unwrap();
        let found = snapshot_file(dir.path(), &format!("/elsewhere/{good}")).unwrap();
        assert_eq!(
            found,
            dir.path().join(good),
            "the agent's directory part is ignored"
        );
        std::fs::write(dir.path().join("42-oom-20260101-120000-1.pickle"), b"x").unwrap();
        assert!(snapshot_file(dir.path(), "42-oom-20260101-120000-1.pickle").is_ok());
        for bad in [
            "/etc/shadow",
            "../42-snapshot-1.pickle",
            "42-snapshot-.pickle",
            "x-snapshot-1.pickle",
            "42-other-1.pickle",
            "42-snapshot-1.pickle.gz",
        ] {
            assert!(snapshot_file(dir.path(), bad).is_err(), "{bad}");
        }
        let link = "43-snapshot-20260101-120000.pickle";
        std::os::unix::fs::symlink(dir.path().join(good), dir.path().join(link)).unwrap();
        let refused = snapshot_file(dir.path(), link).unwrap_err();
        assert!(refused.contains("not a regular file"), "{refused}");
        let missing = snapshot_file(dir.path(), "44-snapshot-1.pickle").unwrap_err();
        assert!(missing.contains("torchtop snapshot FILE"), "{missing}");
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
        remember_oom(&mut ooms, 42, &event, &[process]);
        remember_oom(&mut ooms, 42, &event, &[]);
        assert_eq!(ooms.len(), 1);
        assert_eq!(ooms[0].command.as_deref(), Some("python train.py"));
        assert_eq!(ooms[0].unix_seconds, 1000.5);
        for i in 0..100 {
            let later = AgentEvent {
                ts: Some(2000.0 + f64::from(i)),
                ..event.clone()
            };
            remember_oom(&mut ooms, 42, &later, &[]);
        }
        assert_eq!(ooms.len(), MAX_OOMS, "bounded");
        assert_eq!(ooms.back().unwrap().unix_seconds, 2099.0);
    }
}
