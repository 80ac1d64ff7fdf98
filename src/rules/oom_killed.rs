//! `oom-killed`: the kernel's OOM killer ran, in the cgroup of a GPU process (its `oom_kill`
//! in memory.events rose) or anywhere on the host (/proc/vmstat's `oom_kill` rose). Critical:
//! a killed DataLoader worker or rank ends the job. It names what vanished at that moment.
//!
//! It reads the kills the collector keeps in [`HostSnapshot::oom_kills`](crate::model::HostSnapshot)
//! for an hour, so a replayed history warns the same; one warning per cgroup (about a GPU
//! process still in it, else the host), about its latest kill.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::config::Seconds;
use crate::model::{OomKillEvent, Severity, Subject, Warning};

use super::{fmt_opt_bytes, warning, Inputs};

/// `oom-killed`: the kernel's OOM killer ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct OomKilledConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// How long the warning stays after the kill, in seconds (at most 3600, as long as the
    /// kills are kept). Default 3600.
    pub(crate) hold_seconds: Seconds,
}

impl Default for OomKilledConfig {
    fn default() -> Self {
        OomKilledConfig {
            enabled: true,
            hold_seconds: Seconds::new(3600.0),
        }
    }
}

pub(crate) const ID: &str = "oom-killed";

const REMEDY: &str = "Find what was killed and why with `journalctl -k | grep -i -A20 'out of \
memory'` (or dmesg). Then give the job more memory (docker run --memory, Kubernetes \
resources.limits.memory, Slurm --mem) or use less: fewer or lighter DataLoader workers, a \
smaller prefetch_factor, data loaded lazily or memory-mapped; add RAM or swap on the host.";

pub(crate) fn check(inputs: &Inputs, config: &OomKilledConfig) -> Vec<Warning> {
    let snapshot = inputs.snapshot;
    let now = snapshot.unix_seconds;
    let mut latest: BTreeMap<Option<&str>, (&OomKillEvent, u64)> = BTreeMap::new();
    for event in &snapshot.host.oom_kills {
        let age = now - event.unix_seconds;
        if !(-config.hold_seconds.get()..=config.hold_seconds.get()).contains(&age) {
            continue;
        }
        let entry = latest.entry(event.cgroup.as_deref()).or_insert((event, 0));
        entry.1 += event.kills;
        if entry.0.unix_seconds <= event.unix_seconds {
            entry.0 = event;
        }
    }
    latest
        .into_values()
        .map(|(event, total)| killed(inputs, event, total))
        .collect()
}

fn killed(inputs: &Inputs, event: &OomKillEvent, total: u64) -> Warning {
    let processes = &inputs.snapshot.processes;
    let still_there = event.cgroup.as_deref().and_then(|path| {
        processes
            .iter()
            .filter(|p| p.cgroup.as_ref().is_some_and(|c| c.path == path))
            .map(|p| p.pid)
            .min()
    });
    let subject = match still_there {
        Some(pid) => Subject::Process { pid },
        None => Subject::Host,
    };
    let place = match (&event.label, &event.cgroup) {
        (Some(label), Some(path)) => format!("in {label} ({path})"),
        _ => "on the host".to_string(),
    };
    let when = humantime_of(event.unix_seconds);
    let mut message = format!(
        "The kernel's OOM killer killed {} {place} at {when}",
        plural(event.kills),
    );
    if total > event.kills {
        message.push_str(&format!(" ({total} kills in all)"));
    }
    let gone: Vec<String> = event
        .vanished
        .iter()
        .map(|v| format!("pid {} {} ({})", v.pid, v.comm, fmt_opt_bytes(v.rss_bytes)))
        .collect();
    if gone.is_empty() {
        message.push_str("; no GPU process or worker vanished");
    } else {
        message.push_str(&format!("; gone since: {}", gone.join(", ")));
    }
    let evidence = vec![
        (
            "cgroup",
            event.cgroup.clone().unwrap_or_else(|| "host".into()),
        ),
        ("kills", event.kills.to_string()),
        ("killed at", when),
        ("vanished", event.vanished.len().to_string()),
    ];
    warning(ID, Severity::Critical, subject, message, evidence, REMEDY)
}

fn plural(kills: u64) -> String {
    if kills == 1 {
        "1 process".to_string()
    } else {
        format!("{kills} processes")
    }
}

fn humantime_of(seconds: f64) -> String {
    if !(0.0..=253_402_300_799.0).contains(&seconds) {
        return "N/A".to_string();
    }
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(seconds);
    humantime::format_rfc3339_seconds(time).to_string()
}

#[cfg(test)]
mod tests {
    use crate::model::{Cgroup, OomKillEvent, Severity, Subject, VanishedProcess};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    fn event(t: f64, cgroup: Option<&str>) -> OomKillEvent {
        OomKillEvent {
            unix_seconds: t,
            cgroup: cgroup.map(str::to_string),
            label: cgroup.map(|_| "docker 3f2a1b9c0d4e".to_string()),
            kills: 1,
            vanished: vec![VanishedProcess {
                pid: 41,
                comm: "pt_data_worker".into(),
                rss_bytes: Some(GIB),
            }],
        }
    }

    #[test]
    fn a_kill_in_a_gpu_process_cgroup_names_what_vanished() {
        let warnings = replay_default(5, |step| {
            let mut snap = at(step);
            let mut p = process(40, 0, GIB);
            p.cgroup = Some(std::sync::Arc::new(Cgroup {
                path: "/docker/x".into(),
                ..Default::default()
            }));
            snap.processes = vec![p];
            if step >= 2 {
                snap.host.oom_kills = vec![event(T0 + 2.0, Some("/docker/x"))];
            }
            snap
        });
        let w = find(&warnings, "oom-killed", &Subject::Process { pid: 40 });
        assert_eq!(w.severity, Severity::Critical);
        assert!(
            w.message
                .contains("killed 1 process in docker 3f2a1b9c0d4e (/docker/x)"),
            "{}",
            w.message
        );
        assert!(
            w.message
                .contains("gone since: pid 41 pt_data_worker (1.0GiB)"),
            "{}",
            w.message
        );
    }

    #[test]
    fn host_kills_go_on_the_host_and_expire() {
        let host = |step: u32| {
            let mut snap = at(step);
            snap.host.oom_kills = vec![event(T0, None)];
            snap
        };
        assert_eq!(with_id(&replay_default(0, host), "oom-killed").len(), 1);
        let mut config = RulesConfig::default();
        config.oom_killed.hold_seconds = crate::config::Seconds::new(10.0);
        assert!(with_id(&replay(config, 20, host), "oom-killed").is_empty());
    }
}
