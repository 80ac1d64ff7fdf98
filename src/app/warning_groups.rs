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

use std::collections::HashMap;

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

/// What grouping keeps between snapshots: what the groups last made were made of, so that the
/// same warnings are not grouped again each tick, and the map of the processes' causes,
/// refilled rather than rebuilt. Neither allocates while the warnings stay the same.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Grouper {
    /// The warnings grouped last are the first `count`; those after are kept for their room.
    inputs: Vec<Input>,
    count: usize,
    by_pid: HashMap<u32, PidCause>,
    /// The warnings' indices sorted by group key.
    order: Vec<usize>,
    /// The groups before a regrouping, whose keys and vectors the new groups take over.
    spare: Vec<Group>,
}

/// One warning as grouping sees it: all that the groups and the entries listed from them
/// depend on.
#[derive(Debug, Clone, PartialEq)]
struct Input {
    id: String,
    subject: Subject,
    severity: Severity,
    cause: Cause,
}

/// A process's cause by its GPU or by the index of its job in the snapshot, so the map borrows
/// nothing from a snapshot and is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PidCause {
    Gpu(u32),
    Job(usize),
}

/// A [`Cause`] borrowing its job id from the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CauseRef<'a> {
    Job(&'a str),
    Gpu(u32),
    Process(u32),
    Host,
}

impl CauseRef<'_> {
    fn to_cause(self) -> Cause {
        match self {
            CauseRef::Job(id) => Cause::Job(id.to_string()),
            CauseRef::Gpu(index) => Cause::Gpu(index),
            CauseRef::Process(pid) => Cause::Process(pid),
            CauseRef::Host => Cause::Host,
        }
    }
}

impl Cause {
    fn is(&self, other: CauseRef<'_>) -> bool {
        match (self, other) {
            (Cause::Job(a), CauseRef::Job(b)) => a == b,
            (Cause::Gpu(a), CauseRef::Gpu(b)) | (Cause::Process(a), CauseRef::Process(b)) => {
                *a == b
            }
            (Cause::Host, CauseRef::Host) => true,
            _ => false,
        }
    }
}

impl Grouper {
    /// Groups the snapshot's warnings into `groups`, in display order, unless they are the
    /// warnings (ids, subjects, severities and causes) `groups` were made of: whether it did.
    pub(crate) fn regroup(&mut self, snapshot: &Snapshot, groups: &mut Vec<Group>) -> bool {
        // Most snapshots raise nothing: no map of the processes' causes for them.
        if snapshot.warnings.is_empty() {
            let changed = self.count > 0 || !groups.is_empty();
            self.count = 0;
            groups.clear();
            return changed;
        }
        self.fill_causes(snapshot);
        let warnings = &snapshot.warnings;
        let same = self.count == warnings.len()
            && self.inputs.iter().zip(warnings).all(|(input, w)| {
                input.id == w.id
                    && input.severity == w.severity
                    && input.subject == w.subject
                    && input.cause.is(self.cause_of(snapshot, &w.subject))
            });
        if same {
            return false;
        }
        self.remember(snapshot);
        self.group_into(groups);
        true
    }

    /// Keeps what the snapshot's warnings are grouped by, reusing the room of the last ones.
    fn remember(&mut self, snapshot: &Snapshot) {
        let warnings = &snapshot.warnings;
        let mut inputs = std::mem::take(&mut self.inputs);
        for (i, w) in warnings.iter().enumerate() {
            let cause = self.cause_of(snapshot, &w.subject);
            match inputs.get_mut(i) {
                Some(input) => {
                    input.id.clone_from(&w.id);
                    input.subject.clone_from(&w.subject);
                    input.severity = w.severity;
                    if !input.cause.is(cause) {
                        input.cause = cause.to_cause();
                    }
                }
                None => inputs.push(Input {
                    id: w.id.clone(),
                    subject: w.subject.clone(),
                    severity: w.severity,
                    cause: cause.to_cause(),
                }),
            }
        }
        self.inputs = inputs;
        self.count = warnings.len();
    }

    /// The groups of the kept warnings into `groups`, in display order: warnings of one id and
    /// cause are one group, members most severe first, then as raised. A group whose key was
    /// already a group's takes over that group's key and vector.
    fn group_into(&mut self, groups: &mut Vec<Group>) {
        let Grouper {
            inputs,
            count,
            order,
            spare,
            ..
        } = self;
        let inputs = &inputs[..*count];
        spare.clear();
        spare.append(groups);
        order.clear();
        order.extend(0..inputs.len());
        let key = |i: usize| (&inputs[i].id, &inputs[i].cause);
        order.sort_unstable_by(|&a, &b| key(a).cmp(&key(b)).then(a.cmp(&b)));
        for members in order.chunk_by(|&a, &b| key(a) == key(b)) {
            let (id, cause) = key(members[0]);
            let reused = spare
                .iter()
                .position(|g| g.key.id == *id && g.key.cause == *cause);
            // A key not grouped last time takes a group no key matches, if one is left over.
            let leftover = || {
                let matched = |g: &Group| {
                    (order.iter())
                        .any(|&i| inputs[i].id == g.key.id && inputs[i].cause == g.key.cause)
                };
                spare.iter().position(|g| !matched(g))
            };
            let mut group = match reused.or_else(leftover) {
                Some(at) => {
                    let mut group = spare.swap_remove(at);
                    if reused.is_none() {
                        group.key.id.clone_from(id);
                        group.key.cause.clone_from(cause);
                    }
                    group
                }
                None => Group {
                    key: GroupKey {
                        id: id.clone(),
                        cause: cause.clone(),
                    },
                    severity: Severity::Info,
                    members: Vec::new(),
                },
            };
            group.members.clear();
            group.members.extend_from_slice(members);
            // Each member once: the unstable sort gives the order a stable one would.
            let severity = |i: usize| std::cmp::Reverse(inputs[i].severity);
            group.members.sort_unstable_by_key(|&i| (severity(i), i));
            group.severity = inputs[group.members[0]].severity;
            groups.push(group);
        }
        // Groups never share a member, so no two tie on the first raised: unstable is stable.
        groups.sort_unstable_by_key(|g| {
            let first_raised = g.members.iter().min().copied().unwrap_or(usize::MAX);
            (
                std::cmp::Reverse(g.severity),
                crate::rules::impact_rank(&g.key.id),
                first_raised,
            )
        });
    }

    /// Which job or GPU each process belongs to, read once per snapshot.
    fn fill_causes(&mut self, snapshot: &Snapshot) {
        self.by_pid.clear();
        for process in &snapshot.processes {
            let gpu = process.gpu;
            self.by_pid
                .entry(process.pid)
                .and_modify(|c| {
                    if let PidCause::Gpu(other) = c {
                        *other = (*other).min(gpu);
                    }
                })
                .or_insert(PidCause::Gpu(gpu));
        }
        // A job outranks a GPU: the ranks of one job share one cause across GPUs.
        for (index, job) in snapshot.jobs.iter().enumerate() {
            for rank in &job.ranks {
                self.by_pid.insert(rank.pid, PidCause::Job(index));
            }
        }
    }

    fn cause_of<'a>(&self, snapshot: &'a Snapshot, subject: &'a Subject) -> CauseRef<'a> {
        match subject {
            Subject::Job { id } => CauseRef::Job(id),
            Subject::Gpu { index } => CauseRef::Gpu(*index),
            Subject::Host => CauseRef::Host,
            Subject::Process { pid } => match self.by_pid.get(pid) {
                Some(PidCause::Gpu(index)) => CauseRef::Gpu(*index),
                Some(PidCause::Job(job)) => CauseRef::Job(&snapshot.jobs[*job].id),
                None => CauseRef::Process(*pid),
            },
        }
    }
}
