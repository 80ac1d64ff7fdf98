//! Watches the kernel's OOM-kill counters: `oom_kill` of /proc/vmstat for the host, and of the
//! cgroups that held GPU processes at the previous sample. When one rose, it records an
//! [`OomKillEvent`] naming the GPU processes and children that vanished since that sample.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use crate::model::{OomKillEvent, VanishedProcess};
use crate::sys::cgroup as cg;
use crate::sys::proc as procfs;

/// How long an event is kept (the `oom-killed` warning holds as long).
pub(crate) const KEEP_SECONDS: f64 = 3600.0;
/// The most events kept.
const MAX_EVENTS: usize = 32;
/// The most vanished processes one event names.
const MAX_VANISHED: usize = 16;

/// A process seen at the previous sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) pid: u32,
    pub(crate) start_ticks: u64,
    pub(crate) comm: String,
    pub(crate) rss_bytes: Option<u64>,
}

/// A cgroup's OOM counter at the previous sample.
#[derive(Debug, Clone)]
struct Counter {
    file: PathBuf,
    path: String,
    label: String,
    kills: u64,
}

#[derive(Debug, Default)]
pub(crate) struct OomWatch {
    host_kills: Option<u64>,
    cgroups: HashMap<PathBuf, Counter>,
    seen: Vec<Seen>,
    events: VecDeque<OomKillEvent>,
}

impl OomWatch {
    /// What the last join saw: the cgroups' counters and the processes. A cgroup already
    /// watched keeps the count of the last [`OomWatch::sample`], so that a kill between that
    /// sample and this join is still seen as a rise at the next one.
    pub(crate) fn remember(
        &mut self,
        cgroups: impl IntoIterator<Item = (PathBuf, String, String, u64)>,
        seen: Vec<Seen>,
    ) {
        let before = std::mem::take(&mut self.cgroups);
        self.cgroups = cgroups
            .into_iter()
            .map(|(file, path, label, kills)| {
                let kills = before.get(&file).map_or(kills, |old| old.kills);
                let counter = Counter {
                    file: file.clone(),
                    path,
                    label,
                    kills,
                };
                (file, counter)
            })
            .collect();
        self.seen = seen;
    }

    /// Adds rows joined later in the same refresh to what [`OomWatch::remember`] kept.
    pub(crate) fn remember_more(
        &mut self,
        cgroups: impl IntoIterator<Item = (PathBuf, String, String, u64)>,
        seen: Vec<Seen>,
    ) {
        for (file, path, label, kills) in cgroups {
            self.cgroups.entry(file.clone()).or_insert(Counter {
                file,
                path,
                label,
                kills,
            });
        }
        self.seen.extend(seen);
    }

    /// Compares the counters with the previous sample; returns the events of the last hour.
    pub(crate) fn sample(
        &mut self,
        proc_root: &Path,
        host_kills: Option<u64>,
        now: f64,
    ) -> Vec<OomKillEvent> {
        let mut cgroup_kills = 0;
        let counters: Vec<Counter> = self.cgroups.values().cloned().collect();
        for counter in counters {
            let Some(kills) =
                cg::read_small(&counter.file).and_then(|t| cg::keyed_value(&t, "oom_kill"))
            else {
                continue;
            };
            if kills > counter.kills {
                cgroup_kills += kills - counter.kills;
                let event = OomKillEvent {
                    unix_seconds: now,
                    cgroup: Some(counter.path.clone()),
                    label: Some(counter.label.clone()),
                    kills: kills - counter.kills,
                    vanished: self.vanished(proc_root),
                };
                self.push(event);
            }
            if let Some(kept) = self.cgroups.get_mut(&counter.file) {
                kept.kills = kills;
            }
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
            .filter(|s| {
                procfs::read_pid_stat(proc_root, s.pid)
                    .map_or(true, |stat| stat.start_ticks != s.start_ticks)
            })
            .map(|s| VanishedProcess {
                pid: s.pid,
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
        let seen = |pid, start_ticks, comm: &str, rss| Seen {
            pid,
            start_ticks,
            comm: comm.into(),
            rss_bytes: Some(rss),
        };
        watch.remember(
            [(
                events_file.clone(),
                "/docker/x".into(),
                "docker x".into(),
                0,
            )],
            vec![
                seen(10, 100, "python3", 1 << 30),
                seen(11, 110, "pt_data_worker", 1 << 20),
            ],
        );
        assert!(watch.sample(&proc_root, Some(5), 0.0).is_empty());
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
        watch.remember(
            [(
                events_file.clone(),
                "/docker/x".into(),
                "docker x".into(),
                2,
            )],
            vec![],
        );
        let events = watch.sample(&proc_root, Some(9), 3.0);
        assert_eq!(events.len(), 3, "{events:#?}");
        assert_eq!(events[2].cgroup.as_deref(), Some("/docker/x"));
        // An hour later they are forgotten.
        assert!(watch
            .sample(&proc_root, Some(9), 3.0 + KEEP_SECONDS + 1.0)
            .is_empty());
    }
}
