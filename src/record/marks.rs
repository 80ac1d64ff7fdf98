//! Marks: what happened at a frame, as bit flags stored next to it, so that replay can jump
//! from event to event (`[` and `]`) without decoding every frame; and the sentences that
//! describe them.

use std::collections::BTreeSet;

use crate::model::{GpuState, Snapshot, Subject, Warning};

/// A warning that was not there at the frame before (by id and subject).
pub(crate) const NEW_WARNING: u64 = 1;
/// An agent's out-of-memory count rose.
pub(crate) const OOM: u64 = 2;
/// A GPU changed state (ok, stale, lost), or GPUs came or went.
pub(crate) const GPU_STATE: u64 = 4;
/// A GPU process appeared.
pub(crate) const PROCESS_CAME: u64 = 8;
/// A GPU process went away.
pub(crate) const PROCESS_WENT: u64 = 16;
/// The frame carries the host process table (for the tree view); not an event.
pub(crate) const HOST_TABLE: u64 = 32;
/// The marks `[` and `]` stop at.
pub(crate) const EVENTS: u64 = NEW_WARNING | OOM | GPU_STATE | PROCESS_CAME | PROCESS_WENT;

/// What a warning is about, comparable without copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum About<'a> {
    Gpu(u32),
    Process(u32),
    Job(&'a str),
    Host,
}

fn about(subject: &Subject) -> About<'_> {
    match subject {
        Subject::Gpu { index } => About::Gpu(*index),
        Subject::Process { pid } => About::Process(*pid),
        Subject::Job { id } => About::Job(id),
        Subject::Host => About::Host,
    }
}

fn warning_keys(snapshot: &Snapshot) -> BTreeSet<(&str, About<'_>)> {
    snapshot
        .warnings
        .iter()
        .map(|w| (w.id.as_str(), about(&w.subject)))
        .collect()
}

fn pids(snapshot: &Snapshot) -> BTreeSet<u32> {
    snapshot.processes.iter().map(|p| p.pid).collect()
}

/// `(pid, device) -> num_ooms` of every agent.
fn ooms(snapshot: &Snapshot) -> Vec<((u32, u32), u64)> {
    let mut out: Vec<((u32, u32), u64)> = snapshot
        .processes
        .iter()
        .filter_map(|p| Some((p.pid, p.torch.as_ref()?)))
        .flat_map(|(pid, torch)| {
            torch
                .devices
                .iter()
                .filter_map(move |d| Some(((pid, d.index), d.ooms?)))
        })
        .collect();
    out.sort_unstable();
    out.dedup_by_key(|(key, _)| *key);
    out
}

fn gpu_states(snapshot: &Snapshot) -> Vec<(u32, GpuState)> {
    snapshot.gpus.iter().map(|g| (g.index, g.state)).collect()
}

/// The OOM counts that rose between `before` and `now`: `(pid, device, was, is)`.
fn oom_rises(before: &Snapshot, now: &Snapshot) -> Vec<(u32, u32, u64, u64)> {
    let was = ooms(before);
    ooms(now)
        .into_iter()
        .filter_map(|(key, is)| {
            let old = was
                .binary_search_by_key(&key, |(k, _)| *k)
                .ok()
                .map(|i| was[i].1)?;
            (is > old).then_some((key.0, key.1, old, is))
        })
        .collect()
}

/// The marks of `now`, the frame after `before` (no event for the first frame).
pub(crate) fn marks(before: Option<&Snapshot>, now: &Snapshot) -> u64 {
    let table = if now.host_processes.is_empty() {
        0
    } else {
        HOST_TABLE
    };
    let Some(before) = before else {
        return table;
    };
    let mut marks = table;
    if !warning_keys(now).is_subset(&warning_keys(before)) {
        marks |= NEW_WARNING;
    }
    if !oom_rises(before, now).is_empty() {
        marks |= OOM;
    }
    if gpu_states(now) != gpu_states(before) {
        marks |= GPU_STATE;
    }
    let (was, is) = (pids(before), pids(now));
    if !is.is_subset(&was) {
        marks |= PROCESS_CAME;
    }
    if !was.is_subset(&is) {
        marks |= PROCESS_WENT;
    }
    marks
}

fn command(snapshot: &Snapshot, pid: u32) -> String {
    snapshot
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .and_then(|p| p.command.clone())
        .map(|c| format!(" ({})", crate::format::escape(&c)))
        .unwrap_or_default()
}

fn new_warnings<'a>(before: &Snapshot, now: &'a Snapshot) -> Vec<&'a Warning> {
    let was = warning_keys(before);
    now.warnings
        .iter()
        .filter(|w| !was.contains(&(w.id.as_str(), about(&w.subject))))
        .collect()
}

/// Sentences for what changed from `before` to `now`, most important first.
pub(crate) fn describe(before: &Snapshot, now: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (pid, device, was, is) in oom_rises(before, now) {
        out.push(format!(
            "out of memory: pid {pid}{} on cuda:{device} (num_ooms {was} -> {is})",
            command(now, pid)
        ));
    }
    let mut fresh = new_warnings(before, now);
    fresh.sort_by_key(|w| std::cmp::Reverse(w.severity));
    for w in fresh {
        out.push(format!(
            "new {:?} warning {}: {}",
            w.severity,
            w.id,
            crate::format::escape(&w.message)
        ));
    }
    let was: std::collections::BTreeMap<u32, GpuState> = gpu_states(before).into_iter().collect();
    for (index, state) in gpu_states(now) {
        match was.get(&index) {
            Some(old) if *old != state => out.push(format!(
                "GPU {index} went from {} to {}",
                state_name(*old),
                state_name(state)
            )),
            None => out.push(format!("GPU {index} appeared")),
            _ => {}
        }
    }
    let (was_pids, is_pids) = (pids(before), pids(now));
    for pid in is_pids.difference(&was_pids) {
        out.push(format!("process {pid}{} appeared", command(now, *pid)));
    }
    for pid in was_pids.difference(&is_pids) {
        out.push(format!("process {pid}{} went away", command(before, *pid)));
    }
    out
}

fn state_name(state: GpuState) -> &'static str {
    match state {
        GpuState::Ok => "ok",
        GpuState::Stale => "stale",
        GpuState::Lost => "lost",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceAllocatorStats, GpuProcess, ProcessKind, Severity, TorchInfo};

    fn with_ooms(pid: u32, ooms: u64) -> Snapshot {
        let mut p = GpuProcess::new(pid, 0, ProcessKind::Compute);
        p.torch = Some(std::sync::Arc::new(TorchInfo {
            devices: vec![DeviceAllocatorStats {
                index: 0,
                ooms: Some(ooms),
                ..Default::default()
            }],
            ..Default::default()
        }));
        Snapshot {
            processes: vec![p],
            ..Default::default()
        }
    }

    #[test]
    fn an_oom_a_new_warning_and_a_process_change_are_marked_and_described() {
        let before = with_ooms(7, 0);
        let mut now = with_ooms(7, 1);
        now.warnings.push(Warning {
            id: "oom-risk".into(),
            severity: Severity::Critical,
            subject: Subject::Process { pid: 7 },
            message: "pid 7 hit 1 CUDA out-of-memory error".into(),
            evidence: vec![],
            remedy: String::new(),
            since: String::new(),
        });
        assert_eq!(marks(Some(&before), &now), NEW_WARNING | OOM);
        let sentences = describe(&before, &now);
        assert!(
            sentences[0].starts_with("out of memory: pid 7"),
            "{sentences:?}"
        );
        assert!(sentences[1].contains("oom-risk"), "{sentences:?}");
        assert_eq!(marks(Some(&now), &now), 0);
        assert_eq!(marks(None, &now), 0);
        let other = with_ooms(8, 0);
        assert_eq!(marks(Some(&before), &other), PROCESS_CAME | PROCESS_WENT);
    }
}
