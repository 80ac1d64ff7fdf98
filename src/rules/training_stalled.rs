//! `training-stalled`: an agent still reports, but its step counter has stopped: the classic
//! NCCL hang (one rank died or diverged and the others wait in a collective forever), a
//! deadlocked DataLoader, or a stuck filesystem.
//!
//! The engine keeps, per process, the last step it saw, when it last moved, and the agent's step
//! times. The rule fires when the step has not moved for `step_time_factor` median step times
//! and for at least `min_seconds` (evaluation and checkpointing pause the counter too), while
//! the agent's stats are fresh. It also fires, with another sentence, when the agent of a
//! process that was stepping has sent nothing for [`FROZEN_SECONDS`] while the process is still
//! listed: the whole process is frozen (stopped, in uninterruptible sleep, or its interpreter
//! held by native code), which no pause does, since the agent's thread reports through one.
//! A process that froze before the monitor started has never reported: its agent's socket
//! accepts the connection (the kernel does) and the agent says nothing, not even its hello, for
//! [`FROZEN_SECONDS`]; that is the same warning. Other processes that never reported a step
//! (no `torchtop_agent.step()` calls) are left alone.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::config::{NonNegative, Seconds};
use crate::model::{Severity, Snapshot, Subject, Warning};

use super::{fmt_opt, fmt_seconds, warning, Inputs};
use crate::format::shown;

/// `training-stalled`: an agent still reports, but its step counter stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TrainingStalledConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Stalled once the step has not moved for this many median step times. Default 10.
    pub(crate) step_time_factor: NonNegative,
    /// ... and for at least this many seconds (evaluation and checkpoints pause the step
    /// counter too). Default 300.
    pub(crate) min_seconds: Seconds,
}

impl Default for TrainingStalledConfig {
    fn default() -> Self {
        TrainingStalledConfig {
            enabled: true,
            step_time_factor: NonNegative::new(10.0),
            min_seconds: Seconds::new(300.0),
        }
    }
}

pub(crate) const ID: &str = "training-stalled";

/// Stats older than this mean the agent itself is not reporting: the process is gone or
/// frozen, which the step counter cannot tell.
const FRESH_STATS_SECONDS: f64 = 30.0;

/// Stats this old from the agent of a process still listed: the process is frozen. An
/// evaluation or a checkpoint pauses the steps, not the agent's thread.
const FROZEN_SECONDS: f64 = 60.0;

const FROZEN_REMEDY: &str = "See where it is: py-spy dump --pid PID --native reads its stacks \
without running it, and /proc/PID/stack shows what the kernel waits on (state D: a disk or a \
network filesystem). A stopped process resumes on SIGCONT (kill -CONT PID, or fg in the shell \
that stopped it with Ctrl-Z). In a distributed job the other ranks wait on this one in their \
next collective.";

/// The step times kept per process, for the median.
const STEP_TIMES_KEPT: usize = 64;

const REMEDY: &str = "See where every rank is stuck: py-spy dump --pid PID (add --native for \
C++ frames) on each rank; a rank missing from a collective, or one stuck elsewhere, is the \
cause. Run with NCCL_DEBUG=INFO to see the collectives. The NCCL watchdog aborts a hung \
collective only after the process group's timeout (10 min by default; recent PyTorch turns on \
TORCH_NCCL_ASYNC_ERROR_HANDLING and the flight recorder's TORCH_NCCL_TRACE_BUFFER_SIZE by \
default, set them on older ones): pass a shorter timeout= to init_process_group for a faster \
abort, and set TORCH_NCCL_DUMP_ON_TIMEOUT=1 (TORCH_NCCL_DEBUG_INFO_TEMP_FILE says where) so the \
flight recorder dumps each rank's last collectives on timeout; PyTorch's analyzer \
(torchfrtrace, tools/flight_recorder) reads the dumps.";

/// What the engine remembers of one process's steps.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct StepTrack {
    start_ticks: Option<u64>,
    step: Option<u64>,
    /// Sample time the step last changed (or was first seen).
    changed_at: f64,
    /// How many times the step has been seen to move.
    moves: u32,
    step_times: Vec<f64>,
}

impl StepTrack {
    /// Since when the step counter has stood still, for a counter seen to move at least once
    /// (a process that never calls `step()` has no pauses to tell).
    pub(crate) fn still_since(&self) -> Option<f64> {
        (self.moves > 0).then_some(self.changed_at)
    }
}

/// Records the steps of this snapshot's agents; forgets processes that are gone.
/// `seen` is room kept by the caller for the pids met, so a tick allocates no list of them.
pub(crate) fn record(
    tracks: &mut BTreeMap<u32, StepTrack>,
    seen: &mut Vec<u32>,
    snapshot: &Snapshot,
) {
    let t = snapshot.unix_seconds;
    seen.clear();
    for process in &snapshot.processes {
        let Some(torch) = &process.torch else {
            continue;
        };
        if seen.contains(&process.pid) {
            continue;
        }
        seen.push(process.pid);
        let track = tracks.entry(process.pid).or_default();
        if track.start_ticks.is_some() && track.start_ticks != process.start_ticks {
            *track = StepTrack::default();
        }
        track.start_ticks = process.start_ticks;
        match (track.step, torch.step) {
            (None, Some(step)) => {
                track.step = Some(step);
                track.changed_at = t;
            }
            (Some(old), Some(new)) if new != old => {
                track.step = Some(new);
                track.changed_at = t;
                track.moves += 1;
            }
            _ => {}
        }
        if let Some(seconds) = torch
            .step_time_seconds
            .filter(|s| s.is_finite() && *s > 0.0)
        {
            if track.step_times.len() == STEP_TIMES_KEPT {
                track.step_times.remove(0);
            }
            track.step_times.push(seconds);
        }
    }
    tracks.retain(|pid, _| seen.contains(pid));
}

pub(crate) fn check(inputs: &Inputs, config: &TrainingStalledConfig) -> Vec<Warning> {
    let now = inputs.snapshot.unix_seconds;
    let tracked = inputs
        .steps
        .iter()
        .filter_map(|(&pid, track)| stalled(inputs, pid, track, now, config));
    let silent = (inputs.snapshot.processes.iter())
        .filter(|p| !inputs.steps.contains_key(&p.pid))
        .filter_map(|p| Some((p.pid, p.agent_silent_seconds?)));
    let mut warnings: Vec<Warning> = tracked.collect();
    for (pid, age) in silent {
        // A process on two GPUs has a row on each.
        if !warnings
            .iter()
            .any(|w| w.subject == Subject::Process { pid })
        {
            warnings.extend(frozen(inputs, pid, None, age));
        }
    }
    warnings
}

fn stalled(
    inputs: &Inputs,
    pid: u32,
    track: &StepTrack,
    now: f64,
    config: &TrainingStalledConfig,
) -> Option<Warning> {
    let step = track.step?;
    let torch = inputs.process(pid)?.torch.as_ref()?;
    let fresh = torch.age_seconds.is_some_and(|a| a < FRESH_STATS_SECONDS);
    if track.moves == 0 {
        return None;
    }
    if !fresh {
        return frozen(inputs, pid, Some(step), torch.age_seconds?);
    }
    let median = median(&track.step_times)?;
    let still = now - track.changed_at;
    let threshold = (config.step_time_factor.get() * median).max(config.min_seconds.get());
    if still < threshold {
        return None;
    }
    let message = format!(
        "pid {pid}'s training step has stayed at {step} for {} ({:.0} median step times of {}) \
         while its agent still reports: the training loop is stuck, most often in a NCCL \
         collective waiting for another rank",
        fmt_seconds(still),
        still / median,
        shown::step_time(median),
    );
    let evidence = vec![
        ("step", step.to_string()),
        ("unchanged for", fmt_seconds(still)),
        ("median step time", shown::step_time(median).to_string()),
        ("threshold", fmt_seconds(threshold)),
        ("stats age", fmt_opt(torch.age_seconds.map(fmt_seconds))),
    ];
    Some(warning(
        ID,
        Severity::Warn,
        Subject::Process { pid },
        message,
        evidence,
        REMEDY,
    ))
}

/// A process that was stepping (at `step`) whose agent has sent nothing for `age` seconds, or
/// whose agent has said nothing at all (`step` is `None`) for `age` seconds since torchtop
/// connected, and why, from its state: stopped, in uninterruptible sleep, or its interpreter
/// held.
fn frozen(inputs: &Inputs, pid: u32, step: Option<u64>, age: f64) -> Option<Warning> {
    let row = inputs.process(pid)?;
    if age < FROZEN_SECONDS || !row.visible {
        return None;
    }
    let why = match row.state {
        Some('T' | 't') => {
            "it is stopped (state T): a signal (SIGSTOP, Ctrl-Z) or a debugger holds it"
        }
        Some('D') => {
            "it is in uninterruptible sleep (state D), waiting on a disk or a network \
             filesystem that does not answer"
        }
        _ => {
            "its agent's thread cannot run: native code holds Python's GIL without returning, \
             or the interpreter is deadlocked"
        }
    };
    let message = match step {
        Some(step) => format!(
            "pid {pid}'s agent has sent nothing for {} at step {step} while the process is \
             still listed: {why}",
            fmt_seconds(age),
        ),
        None => format!(
            "pid {pid}'s agent has said nothing for {} since torchtop connected to it, while \
             the process is still listed: {why}",
            fmt_seconds(age),
        ),
    };
    let state = row.state.map_or("N/A".to_string(), |s| s.to_string());
    let (age_label, step) = match step {
        Some(step) => ("stats age", step.to_string()),
        None => ("silent since connected", "N/A (never reported)".to_string()),
    };
    let evidence = vec![
        ("step", step),
        (age_label, fmt_seconds(age)),
        ("state", state),
        ("threshold", fmt_seconds(FROZEN_SECONDS)),
    ];
    Some(warning(
        ID,
        Severity::Warn,
        Subject::Process { pid },
        message,
        evidence,
        FROZEN_REMEDY,
    ))
}

/// The median of the kept step times (at most [`STEP_TIMES_KEPT`]), sorted on the stack: it is
/// asked of every agent each tick.
fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = [0.0; STEP_TIMES_KEPT];
    let n = values.len().min(STEP_TIMES_KEPT);
    sorted[..n].copy_from_slice(&values[..n]);
    let sorted = &mut sorted[..n];
    sorted.sort_unstable_by(f64::total_cmp);
    sorted.get(n / 2).copied()
}

#[cfg(test)]
mod tests {
    use crate::model::{Snapshot, Subject, TorchInfo};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    /// One agent stepping every second until `stop`, then holding its step while stats go on.
    fn stepping(stop: u32) -> impl Fn(u32) -> Snapshot {
        move |t| {
            let mut snap = at(t);
            snap.gpus = vec![gpu(0, GIB, 80 * GIB, 100)];
            let mut p = process(4, 0, GIB);
            p.torch = Some(std::sync::Arc::new(TorchInfo {
                step: Some(u64::from(t.min(stop))),
                step_time_seconds: Some(1.0),
                age_seconds: Some(0.2),
                ..Default::default()
            }));
            snap.processes = vec![p];
            snap
        }
    }

    fn quick() -> RulesConfig {
        let mut config = RulesConfig::default();
        config.training_stalled.min_seconds = crate::config::Seconds::new(20.0);
        config
    }

    #[test]
    fn a_step_that_stops_while_stats_go_on_is_a_stall() {
        let warnings = replay(quick(), 60, stepping(30));
        let w = find(&warnings, "training-stalled", &Subject::Process { pid: 4 });
        assert!(w.message.contains("stayed at 30 for 30 s"), "{}", w.message);
        for name in [
            "py-spy dump",
            "NCCL_DEBUG=INFO",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING",
            "TORCH_NCCL_TRACE_BUFFER_SIZE",
            "TORCH_NCCL_DUMP_ON_TIMEOUT=1",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
            "torchfrtrace",
            "timeout= to init_process_group",
        ] {
            assert!(w.remedy.contains(name), "{name}");
        }
        // A review: the watchdog aborts a hung collective after the process group's timeout,
        // and no flight-recorder dump is written without TORCH_NCCL_DUMP_ON_TIMEOUT=1.
        for claim in [
            "waiting forever",
            "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 turns on",
        ] {
            assert!(!w.remedy.contains(claim), "{claim}: {}", w.remedy);
        }
    }

    #[test]
    fn advancing_steps_a_short_pause_and_the_default_minimum_stay_quiet() {
        assert!(with_id(&replay(quick(), 60, stepping(1000)), "training-stalled").is_empty());
        assert!(with_id(&replay(quick(), 60, stepping(50)), "training-stalled").is_empty());
        let warnings = replay_default(120, stepping(30));
        assert!(
            with_id(&warnings, "training-stalled").is_empty(),
            "{warnings:#?}"
        );
    }

    #[test]
    fn stale_stats_or_a_process_that_never_stepped_stay_quiet() {
        let frozen = replay(quick(), 60, |t| {
            let mut snap = stepping(30)(t);
            if t > 30 {
                std::sync::Arc::make_mut(snap.processes[0].torch.as_mut().unwrap()).age_seconds =
                    Some(f64::from(t - 30));
            }
            snap
        });
        assert!(
            with_id(&frozen, "training-stalled").is_empty(),
            "{frozen:#?}"
        );
        let never = replay(quick(), 60, stepping(0));
        assert!(with_id(&never, "training-stalled").is_empty(), "{never:#?}");
    }

    /// Found trying the monitor beside a job: a rank stopped with SIGSTOP raised nothing, its
    /// agent silent, as "frozen, which this rule does not judge".
    #[test]
    fn an_agent_silent_for_a_minute_in_a_listed_process_is_a_frozen_process() {
        let silent_from = |state: char| {
            move |t: u32| {
                let mut snap = stepping(30)(t);
                let p = &mut snap.processes[0];
                if t > 30 {
                    p.state = Some(state);
                    std::sync::Arc::make_mut(p.torch.as_mut().unwrap()).age_seconds =
                        Some(f64::from(t - 30));
                }
                snap
            }
        };
        let stopped = replay_default(100, silent_from('T'));
        let w = find(&stopped, "training-stalled", &Subject::Process { pid: 4 });
        assert!(
            w.message.starts_with(
                "pid 4's agent has sent nothing for 70 s at step 30 while the process is \
                 still listed: it is stopped (state T)"
            ),
            "{}",
            w.message
        );
        assert_eq!(evidence(w, "state"), "T");
        assert!(w.remedy.contains("SIGCONT") && w.remedy.contains("py-spy dump"));
        let held = replay_default(100, silent_from('S'));
        let w = find(&held, "training-stalled", &Subject::Process { pid: 4 });
        assert!(w.message.contains("holds Python's GIL"), "{}", w.message);
        // Under a minute, or a process no longer listed: quiet.
        assert!(with_id(&replay_default(80, silent_from('T')), "training-stalled").is_empty());
        let gone = replay_default(100, |t| {
            let mut snap = silent_from('T')(t);
            snap.processes[0].visible = t <= 30;
            snap
        });
        assert!(with_id(&gone, "training-stalled").is_empty(), "{gone:#?}");
    }

    /// Found trying the monitor as a user: started after a rank had been stopped, the monitor
    /// showed it as a process with no agent at all, and warned of nothing. Its agent's socket
    /// accepts the connection and the agent never says hello.
    #[test]
    fn an_agent_silent_since_the_monitor_connected_is_a_frozen_process() {
        let silent = |seconds: f64| {
            move |t: u32| {
                let mut snap = at(t);
                snap.gpus = vec![gpu(0, GIB, 80 * GIB, 100)];
                let mut p = process(4, 0, GIB);
                p.state = Some('T');
                p.agent_silent_seconds = Some(seconds + f64::from(t));
                let mut again = p.clone();
                again.gpu = 1;
                snap.processes = vec![p, again];
                snap
            }
        };
        let stopped = replay_default(3, silent(60.0));
        let w = find(&stopped, "training-stalled", &Subject::Process { pid: 4 });
        assert_eq!(
            w.message,
            "pid 4's agent has said nothing for 63 s since torchtop connected to it, while the \
             process is still listed: it is stopped (state T): a signal (SIGSTOP, Ctrl-Z) or a \
             debugger holds it"
        );
        assert_eq!(evidence(w, "step"), "N/A (never reported)");
        assert_eq!(
            with_id(&stopped, "training-stalled").len(),
            1,
            "one per process"
        );
        // Under a minute: an agent busy starting (an import holding the GIL) is not frozen.
        assert!(with_id(&replay_default(3, silent(50.0)), "training-stalled").is_empty());
    }
}
