//! How the hub finds agents: scanning a socket directory (bounded per poll), opening a
//! connection to each new socket, refusing or retrying the ones that fail, making room by
//! dropping the connection idle longest, and removing stale sockets of our own.

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::super::connection::{self, socket_file_pid, Refusal};
use super::super::reader::Reader;
use super::super::state::{lock, ConnState};
use super::dirs::MAX_NAMED_ENTRIES;
use super::{AgentHub, DirId, HubConn, RETRY_AFTER_BAD_INPUT, RETRY_AFTER_FAILURE};
use crate::sys::effective_uid;

/// Directory entries looked at per poll: a directory of a million files costs a bounded scan.
const MAX_ENTRIES_SCANNED: usize = 4096;

impl AgentHub {
    /// Lists directory `i` and connects to the sockets not connected yet; false when the
    /// listing stopped short (a bound, or an error), so that the next poll lists it again.
    pub(super) fn discover(&mut self, i: usize, owner: u32, now: Instant) -> bool {
        let Ok(entries) = fs::read_dir(&self.dirs[i].path) else {
            return false;
        };
        let dir = self.dirs[i].id;
        self.retry_at.retain(|_, at| *at > now);
        let mut connected = std::mem::take(&mut self.connected);
        connected.clear();
        // A twin may have connected some of its sockets while it was listed on its own.
        let conns = self.conns.values().filter(|c| self.same_dir(dir, c.dir));
        connected.extend(conns.map(|c| c.file_pid));
        let complete = self.connect_listed(i, entries, &connected, owner, now);
        self.connected = connected;
        complete
    }

    fn connect_listed(
        &mut self,
        i: usize,
        entries: fs::ReadDir,
        connected: &HashSet<u32>,
        owner: u32,
        now: Instant,
    ) -> bool {
        let dir = self.dirs[i].id;
        let bound = self.entry_bound(dir);
        let mut opened = 0;
        let mut complete = true;
        for (scanned, entry) in entries.enumerate() {
            let Ok(entry) = entry else {
                complete = false;
                continue;
            };
            if scanned == bound {
                self.warn_crowded(i, bound);
                // Listing it again at once would see the same first entries: it is listed
                // again when it changes, like a complete listing.
                return complete;
            }
            let Some(file_pid) = socket_file_pid(&entry.file_name()) else {
                continue;
            };
            // The entry's own type: a symlink named like a socket is not followed.
            let is_socket = entry.file_type().is_ok_and(|t| {
                use std::os::unix::fs::FileTypeExt;
                t.is_socket()
            });
            let waiting = self.retry_at.contains_key(&(dir, file_pid));
            if !is_socket || connected.contains(&file_pid) || waiting {
                continue;
            }
            let path = entry.path();
            if !self.dirs[i].file_pid_alive(file_pid) {
                self.stale(&path, (dir, file_pid), owner, now);
                continue;
            }
            if opened == self.limits.max_new_per_poll {
                return false;
            }
            opened += 1;
            self.connect(&path, (dir, file_pid), owner, now);
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
                dir.path.display()
            );
            self.push_log(line);
        }
    }

    /// Connects to the socket `path`, whose name carries `key`'s file pid.
    fn connect(&mut self, path: &Path, key: (DirId, u32), owner: u32, now: Instant) {
        let (dir, file_pid) = key;
        let opened = match connection::open(path, file_pid, owner) {
            Ok(opened) => opened,
            Err(refusal) => return self.refuse(key, refusal, now),
        };
        let pid = opened.peer_pid;
        if self.conns.values().any(|c| c.pid == pid) {
            let refusal = Refusal {
                reason: format!(
                    "{} is served by pid {pid}, whose agent is already connected",
                    path.display()
                ),
                bad_input: true,
            };
            return self.refuse(key, refusal, now);
        }
        if self.conns.len() >= self.limits.max_connections {
            self.evict_oldest_idle(file_pid, now);
        }
        if let Err(problem) = self.start_reader() {
            return self.refuse(key, problem, now);
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
                file_pid,
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

    fn refuse(&mut self, key: (DirId, u32), refusal: Refusal, now: Instant) {
        let (wait, verb) = if refusal.bad_input {
            (RETRY_AFTER_BAD_INPUT, "refused")
        } else {
            (RETRY_AFTER_FAILURE, "could not connect")
        };
        self.retry_at.insert(key, now + wait);
        self.push_log(format!("pid {}: {verb}: {}", key.1, refusal.reason));
    }

    /// Makes room for the agent of `newcomer` by dropping the connection silent longest.
    fn evict_oldest_idle(&mut self, newcomer: u32, now: Instant) {
        let oldest = lock(&self.shared)
            .conns
            .iter()
            .min_by_key(|(_, state)| state.last_line_at)
            .map(|(&id, state)| (id, state.pid, state.last_line_at));
        let Some((id, pid, last_line_at)) = oldest else {
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
    fn stale(&mut self, path: &Path, key: (DirId, u32), owner: u32, now: Instant) {
        let pid = key.1;
        self.retry_at.insert(key, now + RETRY_AFTER_FAILURE);
        if owner != effective_uid() || self.is_named_by_a_process(key.0) {
            return;
        }
        match fs::remove_file(path) {
            Ok(()) => self.push_log(format!(
                "removed stale socket {} (pid {pid} is gone)",
                path.display()
            )),
            Err(e) => self.push_log(format!(
                "could not remove stale socket {}: {e}",
                path.display()
            )),
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
}
