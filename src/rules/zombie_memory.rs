//! `zombie-memory`: GPU memory held by a pid that is not in this machine's /proc.
//!
//! Fires when a (pid, GPU) pair NVML lists has been invisible in /proc for at least
//! `min_seconds` (so a process exiting between the driver read and the /proc read stays quiet).
//! A pid from another container or PID namespace looks exactly the same, and the message says so.
//! When several processes hold GPUs and none of them is in /proc, torchtop itself runs in a
//! PID namespace of its own (a container without `--pid=host`): then every process looks
//! missing, and the rule stays quiet rather than flag them all.

use serde::{Deserialize, Serialize};

use crate::config::Seconds;
use crate::model::{Severity, Subject, Warning};

use super::{
    covering, fmt_seconds, held_on_gpu_evidence, holds_on_gpu, warning, Inputs, Point, ProcPoint,
};

/// `zombie-memory`: GPU memory held by a pid missing from /proc.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ZombieMemoryConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// How long the pid must have been missing. Default 2.
    pub(crate) min_seconds: Seconds,
}

impl Default for ZombieMemoryConfig {
    fn default() -> Self {
        ZombieMemoryConfig {
            enabled: true,
            min_seconds: Seconds::new(2.0),
        }
    }
}

pub(crate) const ID: &str = "zombie-memory";

const REMEDY: &str = "If the pid runs in another container, look there (or run nvidia-smi on the \
host). Otherwise find what still holds the GPU (fuser -v /dev/nvidia*, or lsof /dev/nvidia*) and \
end the stray process, e.g. a DataLoader worker or child left behind by a crashed run; a defunct \
process's memory is freed once its parent reaps it. If nothing holds it, resetting the GPU \
(nvidia-smi -r) frees it.";

pub(crate) fn check(inputs: &Inputs, config: &ZombieMemoryConfig) -> Vec<Warning> {
    let processes = &inputs.snapshot.processes;
    // Two pids or more (one differs from the first), none of them in /proc.
    let two_pids = processes.first().is_some_and(|first| {
        let pid = first.pid;
        processes.iter().any(|p| p.pid != pid)
    });
    if two_pids && processes.iter().all(|p| !p.visible) {
        return Vec::new();
    }
    covering(inputs.processes, config.min_seconds.get())
        .filter_map(|((pid, gpu), points)| missing(pid, gpu, points))
        .collect()
}

/// The warning for a pid missing from /proc in every point of `points` (the last
/// `min_seconds`). "missing for" counts from when it was last seen there, not over `points`:
/// that span is `min_seconds` however long the pid has been gone.
fn missing(pid: u32, gpu: u32, points: &[Point<ProcPoint>]) -> Option<Warning> {
    if points.iter().any(|p| p.v.visible) {
        return None;
    }
    let latest = points.last()?;
    let memory = latest.v.gpu_memory_bytes;
    let span = latest.t - latest.v.missing_since.unwrap_or(latest.t);
    let message = format!(
        "{} but is not in /proc: it has exited while the driver still holds its memory, or it \
         runs in another container or PID namespace",
        holds_on_gpu(pid, gpu, memory),
    );
    let mut evidence = held_on_gpu_evidence(gpu, memory);
    evidence.push(("missing for", fmt_seconds(span)));
    Some(warning(
        ID,
        Severity::Warn,
        Subject::Process { pid },
        message,
        evidence,
        REMEDY,
    ))
}

#[cfg(test)]
mod tests {
    use crate::model::{Snapshot, Subject};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    fn ghost(visible: impl Fn(u32) -> bool + Copy) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            snap.gpus = vec![gpu(1, 5 * GIB, 80 * GIB, 0)];
            let mut p = process(4242, 1, 3 * GIB);
            p.visible = visible(step);
            if !p.visible {
                p.command = None;
                p.start_ticks = None;
            }
            snap.processes = vec![p];
            snap
        }
    }

    #[test]
    fn memory_held_by_a_missing_pid_fires_and_mentions_containers() {
        let warnings = replay_default(5, ghost(|_| false));
        let w = find(&warnings, "zombie-memory", &Subject::Process { pid: 4242 });
        assert!(w.message.contains("3.0GiB on GPU 1"), "{}", w.message);
        assert!(w.message.contains("another container"), "{}", w.message);
        assert!(w.remedy.contains("fuser"));
    }

    #[test]
    fn visible_pids_and_a_brief_race_stay_silent() {
        let visible = replay_default(5, ghost(|_| true));
        assert!(with_id(&visible, "zombie-memory").is_empty());
        // Missing only in the last sample: shorter than min_seconds.
        let race = replay_default(5, ghost(|s| s < 5));
        assert!(with_id(&race, "zombie-memory").is_empty(), "{race:#?}");
        // A single snapshot is not enough either with the default.
        assert!(with_id(&replay_default(0, ghost(|_| false)), "zombie-memory").is_empty());
    }

    #[test]
    fn a_zero_wait_fires_on_a_single_snapshot() {
        let mut config = RulesConfig::default();
        config.zombie_memory.min_seconds = crate::config::Seconds::new(0.0);
        let warnings = replay(config, 0, ghost(|_| false));
        assert_eq!(with_id(&warnings, "zombie-memory").len(), 1);
    }

    /// A review: "missing for" read 2 s, 3 s, 2 s... for a pid gone 10 s and more, the span of
    /// the rule's 2 s window. It counts from when the pid was last seen in /proc, and `since`
    /// (when the warning began) stays put meanwhile.
    #[test]
    fn missing_for_counts_from_when_the_pid_was_last_seen() {
        let mut engine = crate::rules::Engine::new(RulesConfig::default());
        let gone = ghost(|s| s <= 2);
        let mut first_since = None;
        for step in 0..=40 {
            let warnings = engine.evaluate(&gone(step));
            let Some(w) = warnings.iter().find(|w| w.id == "zombie-memory") else {
                assert!(step < 5, "no warning at {step} s: {warnings:#?}");
                continue;
            };
            assert_eq!(
                evidence(w, "missing for"),
                format!("{} s", step - 2),
                "at {step} s"
            );
            let since = first_since.get_or_insert_with(|| w.since.clone());
            assert_eq!(&w.since, since, "at {step} s");
        }
        assert_eq!(first_since.as_deref(), Some(rfc3339(T0 + 5.0).as_str()));
    }

    /// A pid never seen in /proc has been missing since torchtop first listed it.
    #[test]
    fn a_pid_never_seen_is_missing_since_it_was_first_listed() {
        let warnings = replay_default(30, ghost(|_| false));
        let w = find(&warnings, "zombie-memory", &Subject::Process { pid: 4242 });
        assert_eq!(evidence(w, "missing for"), "30 s");
    }

    /// torchtop in a container of its own sees none of the GPU processes in /proc.
    #[test]
    fn a_pid_namespace_of_its_own_hides_every_process_and_stays_quiet() {
        let warnings = replay_default(30, |step| {
            let mut snap = ghost(|_| false)(step);
            let mut other = snap.processes[0].clone();
            other.pid = 4343;
            snap.processes.push(other);
            snap
        });
        assert!(
            with_id(&warnings, "zombie-memory").is_empty(),
            "{warnings:#?}"
        );
    }
}
