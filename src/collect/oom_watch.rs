//! Watches the kernel's OOM-kill counters: `oom_kill` of /proc/vmstat for the host, and of the
//! cgroups that held GPU processes at the previous sample. When one rose, it records an
//! [`OomKillEvent`] naming the GPU processes and children that vanished since that sample.
//! A cgroup's counter file is read once a refresh: the join's cgroup reading takes the
//! sample's ([`OomWatch::fresh`]).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use crate::model::{Cgroup, OomKillEvent, VanishedProcess};
use crate::sys::cgroup as cg;
use crate::sys::kept::KeptFile;
use crate::sys::proc as procfs;

/// How long an event is kept (the `oom-killed` warning holds as long).
pub(crate) const KEEP_SECONDS: f64 = 3600.0;
/// The most events kept.
const MAX_EVENTS: usize = 32;
/// The most vanished processes one event names.
const MAX_VANISHED: usize = 16;

/// The most cgroup counter files kept open between samples; the others are opened for each.
const MAX_KEPT_FILES: usize = 16;

/// A process seen at the previous sample.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    comm: String,
    rss_bytes: Option<u64>,
    /// The refresh that last saw it.
    seen_in: u64,
}

/// A cgroup's OOM counter at the previous sample.
#[derive(Debug)]
struct Counter {
    file: KeptFile,
    path: String,
    label: String,
    kills: u64,
    /// The refresh that last watched it.
    watched_in: u64,
    /// What the last [`OomWatch::sample`] read, until the join after it ends: the join's
    /// cgroup reading takes it instead of reading the same file again.
    fresh: Option<OomCounts>,
}

/// The counters of one cgroup's OOM file as [`OomWatch::sample`] read them: `oom_kill`, and
/// v2's `max` (memory.events; v1's memory.oom_control has no such line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OomCounts {
    pub(crate) oom_kill: Option<u64>,
    pub(crate) max: Option<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct OomWatch {
    host_kills: Option<u64>,
    /// Counts the joins that start a refresh ([`OomWatch::begin`]).
    refresh: u64,
    cgroups: HashMap<PathBuf, Counter>,
    /// The processes of the last join, by (pid, start ticks).
    seen: HashMap<(u32, u64), Seen>,
    events: VecDeque<OomKillEvent>,
    buffer: Vec<u8>,
}

impl OomWatch {
    /// Starts a new join: what it does not watch or see again is forgotten at
    /// [`OomWatch::end`]. (Rows joined later in the same refresh add to it without a begin.)
    pub(crate) fn begin(&mut self) {
        self.refresh += 1;
    }

    /// Forgets the cgroups and processes the join since [`OomWatch::begin`] did not name.
    pub(crate) fn end(&mut self) {
        let refresh = self.refresh;
        self.cgroups.retain(|_, c| c.watched_in == refresh);
        self.cgroups.values_mut().for_each(|c| c.fresh = None);
        self.seen.retain(|_, s| s.seen_in == refresh);
    }

    /// Whether any process or cgroup is watched: a kill could name it.
    pub(crate) fn is_watching(&self) -> bool {
        !self.seen.is_empty() || !self.cgroups.is_empty()
    }

    /// The counters of `file` as this refresh's [`OomWatch::sample`] read them, if it did.
    pub(crate) fn fresh(&self, file: &Path) -> Option<OomCounts> {
        self.cgroups.get(file)?.fresh
    }

    /// Watches the cgroup whose `file` counts its OOM kills, `kills` at the join. A cgroup
    /// already watched keeps the count of the last [`OomWatch::sample`], so that a kill
    /// between that sample and this join is still seen as a rise at the next one.
    pub(crate) fn watch(&mut self, file: &Path, cgroup: &Cgroup, kills: u64) {
        let refresh = self.refresh;
        if let Some(counter) = self.cgroups.get_mut(file) {
            counter.watched_in = refresh;
            return;
        }
        let counter = Counter {
            file: KeptFile::new(file.to_path_buf()),
            path: cgroup.path.clone(),
            label: cgroup.label().to_string(),
            kills,
            watched_in: refresh,
            fresh: None,
        };
        self.cgroups.insert(file.to_path_buf(), counter);
    }

    /// Notes a process of this join; `comm` is asked for only on first sight.
    pub(crate) fn see(
        &mut self,
        pid: u32,
        start_ticks: u64,
        rss_bytes: Option<u64>,
        comm: impl FnOnce() -> String,
    ) {
        let refresh = self.refresh;
        let seen = self.seen.entry((pid, start_ticks)).or_insert_with(|| Seen {
            comm: comm(),
            rss_bytes,
            seen_in: refresh,
        });
        seen.rss_bytes = rss_bytes;
        seen.seen_in = refresh;
    }

    /// Compares the counters with the previous sample; returns the events of the last hour.
    pub(crate) fn sample(
        &mut self,
        proc_root: &Path,
        host_kills: Option<u64>,
        now: f64,
    ) -> Vec<OomKillEvent> {
        let mut cgroup_kills = 0;
        // (path, label, kills) of the cgroups whose counter rose; empty, it costs nothing.
        let mut rises = Vec::new();
        for (i, counter) in self.cgroups.values_mut().enumerate() {
            let read = counter.file.read(&mut self.buffer, 4096);
            let text = read.ok().and_then(|bytes| std::str::from_utf8(bytes).ok());
            counter.fresh = text.map(|text| OomCounts {
                oom_kill: cg::keyed_value(text, "oom_kill"),
                max: cg::keyed_value(text, "max"),
            });
            if i >= MAX_KEPT_FILES {
                counter.file.close();
            }
            let Some(kills) = counter.fresh.and_then(|counts| counts.oom_kill) else {
                continue;
            };
            if kills > counter.kills {
                cgroup_kills += kills - counter.kills;
                rises.push((
                    counter.path.clone(),
                    counter.label.clone(),
                    kills - counter.kills,
                ));
            }
            counter.kills = kills;
        }
        for (path, label, kills) in rises {
            let event = OomKillEvent {
                unix_seconds: now,
                cgroup: Some(path),
                label: Some(label),
                kills,
                vanished: self.vanished(proc_root),
            };
            self.push(event);
        }
        if let (Some(before), Some(now_kills)) = (self.host_kills, host_kills) {
            // Kills in a watched cgroup count in vmstat too: only the rest is news.
            let rest = now_kills
                .saturating_sub(before)
                .saturating_sub(cgroup_kills);
            if rest > 0 {
                let event = OomKillEvent {
                    unix_seconds: now,
                    cgroup: None,
                    label: None,
                    kills: rest,
                    vanished: self.vanished(proc_root),
                };
                self.push(event);
            }
        }
        self.host_kills = host_kills.or(self.host_kills);
        while self.events.front().is_some_and(|e| {
            let age = now - e.unix_seconds;
            age.is_nan() || age > KEEP_SECONDS
        }) {
            self.events.pop_front();
        }
        self.events.iter().cloned().collect()
    }

    fn push(&mut self, event: OomKillEvent) {
        if self.events.len() == MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// The processes seen at the previous sample that are gone (or whose pid was reused).
    fn vanished(&self, proc_root: &Path) -> Vec<VanishedProcess> {
        let mut gone: Vec<VanishedProcess> = self
            .seen
            .iter()
            .filter(|((pid, start_ticks), _)| {
                procfs::read_pid_stat(proc_root, *pid)
                    .map_or(true, |stat| stat.start_ticks != *start_ticks)
            })
            .map(|((pid, _), s)| VanishedProcess {
                pid: *pid,
                comm: s.comm.clone(),
                rss_bytes: s.rss_bytes,
            })
            .collect();
        gone.sort_by(|a, b| b.rss_bytes.cmp(&a.rss_bytes).then(a.pid.cmp(&b.pid)));
        gone.truncate(MAX_VANISHED);
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: u32, start: u64) -> String {
        format!(
            "{pid} (python3) S 1 {pid} 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1000 10 \
             18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0\n"
        )
    }

    #[test]
    fn a_rise_names_what_vanished_and_host_counts_only_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        for (pid, start) in [(10, 100), (11, 110)] {
            std::fs::create_dir_all(proc_root.join(pid.to_string())).unwrap();
            std::fs::write(proc_root.join(format!("{pid}/stat")), stat(pid, start)).unwrap();
        }
        let events_file = dir.path().join("memory.events");
        std::fs::write(&events_file, "oom 0\noom_kill 0\n").unwrap();
        let mut watch = OomWatch::default();
        let cgroup = Cgroup {
            path: "/docker/x".into(),
            ..Default::default()
        };
        watch.begin();
        watch.watch(&events_file, &cgroup, 0);
        watch.see(10, 100, Some(1 << 30), || "python3".into());
        watch.see(11, 110, Some(1 << 20), || "pt_data_worker".into());
        watch.end();
        assert!(watch.sample(&proc_root, Some(5), 0.0).is_empty());
        // The join after the sample takes its reading; the one after that reads anew.
        let counts = OomCounts {
            oom_kill: Some(0),
            max: None,
        };
        assert_eq!(watch.fresh(&events_file), Some(counts));
        watch.begin();
        watch.watch(&events_file, &cgroup, 0);
        watch.see(10, 100, Some(1 << 30), || "python3".into());
        watch.see(11, 110, Some(1 << 20), || "pt_data_worker".into());
        watch.end();
        assert_eq!(watch.fresh(&events_file), None);
        // The worker is killed: the cgroup's counter and vmstat's rise by one.
        std::fs::remove_dir_all(proc_root.join("11")).unwrap();
        std::fs::write(&events_file, "oom 1\noom_kill 1\n").unwrap();
        let events = watch.sample(&proc_root, Some(6), 1.0);
        assert_eq!(events.len(), 1, "{events:#?}");
        assert_eq!(events[0].cgroup.as_deref(), Some("/docker/x"));
        assert_eq!(events[0].kills, 1);
        assert_eq!(events[0].vanished.len(), 1);
        assert_eq!(events[0].vanished[0].comm, "pt_data_worker");
        // A kill elsewhere on the host: vmstat rises alone.
        let events = watch.sample(&proc_root, Some(8), 2.0);
        assert_eq!(events.len(), 2);
        assert_eq!((events[1].cgroup.as_ref(), events[1].kills), (None, 2));
        // A kill between a sample and the next join is not lost: the join's newer count does
        // not replace the sampled one.
        std::fs::write(&events_file, "oom 2\noom_kill 2\n").unwrap();
        watch.begin();
        watch.watch(&events_file, &cgroup, 2);
        watch.end();
        let events = watch.sample(&proc_root, Some(9), 3.0);
        assert_eq!(events.len(), 3, "{events:#?}");
        assert_eq!(events[2].cgroup.as_deref(), Some("/docker/x"));
        // An hour later they are forgotten.
        assert!(watch
            .sample(&proc_root, Some(9), 3.0 + KEEP_SECONDS + 1.0)
            .is_empty());
    }
}
