//! The warnings grouped by cause, in the order the panel and the `w` view list them.
//!
//! Warnings with the same id and the same cause are one group, shown as one line that expands:
//! eight `gpu-starved` ranks of one job are one problem with one remedy, not eight. The cause
//! comes from fields every warning has: a job or a GPU warning is its own cause; a process's
//! warning is caused by its job when it is a rank of one, otherwise by the GPU it runs on
//! (the lowest index when it holds several), otherwise by the process itself.
//!
//! Groups go most severe first, then by impact (`rules::IMPACT`: health, `oom`, `oom-risk`, `leak`,
//! `fragmentation`, then what costs memory, then the rest), then in the order they were raised.

use std::collections::{BTreeMap, HashMap};

use crate::model::{Severity, Snapshot, Subject, Warning};

/// What a group of warnings is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Cause {
    Job(String),
    Gpu(u32),
    Process(u32),
    Host,
}

/// A warning id and its cause: the identity of a group across refreshes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupKey {
    pub(crate) id: String,
    pub(crate) cause: Cause,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    pub(crate) key: GroupKey,
    /// The highest severity among the members.
    pub(crate) severity: Severity,
    /// Indices into the snapshot's warnings, most severe first, then as raised. Never empty.
    pub(crate) members: Vec<usize>,
}

impl Group {
    pub(crate) fn is_single(&self) -> bool {
        self.members.len() == 1
    }

    /// The member warning at `position`, if the snapshot still has it.
    pub(crate) fn member<'a>(
        &self,
        snapshot: &'a Snapshot,
        position: usize,
    ) -> Option<&'a Warning> {
        self.members
            .get(position)
            .and_then(|&i| snapshot.warnings.get(i))
    }
}

/// The groups of the snapshot's warnings, in display order.
pub(crate) fn group(snapshot: &Snapshot) -> Vec<Group> {
    // Most snapshots raise nothing: no map of the processes' causes for them.
    if snapshot.warnings.is_empty() {
        return Vec::new();
    }
    let causes = ProcessCauses::of(snapshot);
    let mut by_key: BTreeMap<GroupKey, Vec<usize>> = BTreeMap::new();
    for (index, warning) in snapshot.warnings.iter().enumerate() {
        let key = GroupKey {
            id: warning.id.clone(),
            cause: causes.cause_of(&warning.subject),
        };
        by_key.entry(key).or_default().push(index);
    }
    let warnings = &snapshot.warnings;
    let mut groups: Vec<Group> = by_key
        .into_iter()
        .map(|(key, mut members)| {
            members.sort_by_key(|&i| (std::cmp::Reverse(warnings[i].severity), i));
            let severity = warnings[members[0]].severity;
            Group {
                key,
                severity,
                members,
            }
        })
        .collect();
    groups.sort_by_key(|g| {
        let first_raised = g.members.iter().min().copied().unwrap_or(usize::MAX);
        (
            std::cmp::Reverse(g.severity),
            crate::rules::impact_rank(&g.key.id),
            first_raised,
        )
    });
    groups
}

/// Which job or GPU each process belongs to, read once per snapshot.
struct ProcessCauses {
    by_pid: HashMap<u32, Cause>,
}

impl ProcessCauses {
    fn of(snapshot: &Snapshot) -> Self {
        let mut by_pid: HashMap<u32, Cause> = HashMap::new();
        for process in &snapshot.processes {
            let gpu = Cause::Gpu(process.gpu);
            by_pid
                .entry(process.pid)
                .and_modify(|c| *c = c.clone().min(gpu.clone()))
                .or_insert(gpu);
        }
        // A job outranks a GPU: the ranks of one job share one cause across GPUs.
        for job in &snapshot.jobs {
            for rank in &job.ranks {
                by_pid.insert(rank.pid, Cause::Job(job.id.clone()));
            }
        }
        ProcessCauses { by_pid }
    }

    fn cause_of(&self, subject: &Subject) -> Cause {
        match subject {
            Subject::Job { id } => Cause::Job(id.clone()),
            Subject::Gpu { index } => Cause::Gpu(*index),
            Subject::Host => Cause::Host,
            Subject::Process { pid } => self
                .by_pid
                .get(pid)
                .cloned()
                .unwrap_or(Cause::Process(*pid)),
        }
    }
}
