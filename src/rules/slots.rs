//! Warnings written into kept storage, so a warning that goes on holding costs no allocation.
//!
//! The engine keeps one [`Slots`] from tick to tick. A rule that fires often (while a job runs)
//! rewrites the next slot's texts in place ([`Slots::write`]: `clear()` then `write!`, into the
//! room the last tick left); the others hand over a built [`Warning`] ([`Slots::push`]), which
//! allocates only while they fire. Evidence rows cut from one warning wait in a spare list for
//! the next that needs a row. [`Slots::copy_found_into`] copies the warnings into a snapshot's
//! list the same way, and keeps the warnings that list no longer needs (fewer warnings this
//! tick) as room for the tick that has more again.

use std::fmt::{self, Write as _};

use crate::model::{Severity, Subject, Warning};

/// The warnings found this tick (the first `used`), and room kept from earlier ticks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Slots {
    warnings: Vec<Warning>,
    used: usize,
    spare_rows: Vec<(String, String)>,
    /// Warnings cut from a snapshot's list when it held more than a tick found.
    spare_warnings: Vec<Warning>,
}

impl Slots {
    /// Empties the list for a new tick, keeping every warning's room.
    pub(crate) fn start(&mut self) {
        self.used = 0;
    }

    /// Adds a warning built elsewhere (its slot's room is given up for the warning's own).
    pub(crate) fn push(&mut self, warning: Warning) {
        match self.warnings.get_mut(self.used) {
            Some(slot) => *slot = warning,
            None => self.warnings.push(warning),
        }
        self.used += 1;
    }

    pub(crate) fn extend(&mut self, warnings: Vec<Warning>) {
        for warning in warnings {
            self.push(warning);
        }
    }

    /// The warnings found so far this tick.
    pub(crate) fn found(&self) -> &[Warning] {
        &self.warnings[..self.used]
    }

    pub(crate) fn found_mut(&mut self) -> &mut [Warning] {
        &mut self.warnings[..self.used]
    }

    /// Keeps the first `kept` found warnings; the others stay as room.
    pub(crate) fn truncate(&mut self, kept: usize) {
        self.used = self.used.min(kept);
    }

    /// Whether a warning `id` about `subject` was found this tick after the first `from`.
    pub(crate) fn holds_after(&self, from: usize, id: &str, subject: SubjectRef) -> bool {
        (self.found()[from..].iter()).any(|w| w.id == id && subject.is(&w.subject))
    }

    /// The next warning, to be written in place: its id, severity, subject and remedy set now,
    /// its message and evidence by the [`Writer`].
    pub(crate) fn write(
        &mut self,
        id: &str,
        severity: Severity,
        subject: SubjectRef,
        remedy: &str,
    ) -> Writer<'_> {
        if self.used == self.warnings.len() {
            self.warnings.push(empty_warning());
        }
        // The room this warning had last tick, when another rule's warnings did not take it.
        let spare = self.warnings[self.used..].iter();
        let own = (spare.clone()).position(|w| w.id == id && subject.is(&w.subject));
        if let Some(at) = own.or_else(|| spare.clone().position(|w| w.id == id)) {
            self.warnings.swap(self.used, self.used + at);
        }
        let warning = &mut self.warnings[self.used];
        self.used += 1;
        set(&mut warning.id, id);
        warning.severity = severity;
        subject.write(&mut warning.subject);
        set(&mut warning.remedy, remedy);
        warning.message.clear();
        warning.since.clear();
        Writer {
            warning,
            rows: 0,
            spare_rows: &mut self.spare_rows,
        }
    }

    /// Appends an evidence row to found warning `at`, in a spare row's room where one is left.
    pub(crate) fn add_row(&mut self, at: usize, name: &str, value: fmt::Arguments) {
        let mut row = self.spare_rows.pop().unwrap_or_default();
        set(&mut row.0, name);
        row.1.clear();
        // Writing into a String cannot fail.
        let _ = row.1.write_fmt(value);
        self.warnings[at].evidence.push(row);
    }
}

/// A [`Subject`] borrowed: compared and written in place without a String of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SubjectRef<'a> {
    Gpu(u32),
    Job(&'a str),
    Process(u32),
}

impl SubjectRef<'_> {
    pub(crate) fn is(self, subject: &Subject) -> bool {
        match (self, subject) {
            (SubjectRef::Job(id), Subject::Job { id: other }) => id == other,
            (SubjectRef::Process(pid), Subject::Process { pid: other }) => pid == *other,
            (SubjectRef::Gpu(index), Subject::Gpu { index: other }) => index == *other,
            _ => false,
        }
    }

    /// `subject` made this one, in its id's room where it is a job already.
    fn write(self, subject: &mut Subject) {
        match (self, subject) {
            (SubjectRef::Job(id), Subject::Job { id: to }) => set(to, id),
            (SubjectRef::Job(id), subject) => *subject = Subject::Job { id: id.to_string() },
            (SubjectRef::Process(pid), subject) => *subject = Subject::Process { pid },
            (SubjectRef::Gpu(index), subject) => *subject = Subject::Gpu { index },
        }
    }
}

/// A text written by a closure: a figure's words put straight into a warning's room.
pub(crate) struct Show<F>(pub(crate) F);

impl<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result> fmt::Display for Show<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.0)(f)
    }
}

/// The value, or N/A: [`fmt_opt`](super::fmt_opt) without a String of its own.
pub(crate) struct Na<T>(pub(crate) Option<T>);

impl<T: fmt::Display> fmt::Display for Na<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str(crate::format::NA),
        }
    }
}

/// Writes one warning's message and evidence rows in place; rows past the last one written
/// go to the spare list when it is dropped.
pub(crate) struct Writer<'a> {
    warning: &'a mut Warning,
    rows: usize,
    spare_rows: &'a mut Vec<(String, String)>,
}

impl Writer<'_> {
    pub(crate) fn message(&mut self, text: fmt::Arguments) {
        self.warning.message.clear();
        // Writing into a String cannot fail.
        let _ = self.warning.message.write_fmt(text);
    }

    /// The next evidence row.
    pub(crate) fn row(&mut self, name: &str, value: fmt::Arguments) {
        let evidence = &mut self.warning.evidence;
        if self.rows == evidence.len() {
            evidence.push(self.spare_rows.pop().unwrap_or_default());
        }
        let (n, v) = &mut evidence[self.rows];
        set(n, name);
        v.clear();
        // Writing into a String cannot fail.
        let _ = v.write_fmt(value);
        self.rows += 1;
    }
}

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        let evidence = &mut self.warning.evidence;
        while evidence.len() > self.rows {
            if let Some(row) = evidence.pop() {
                self.spare_rows.push(row);
            }
        }
    }
}

/// `text` as `to`, in `to`'s room.
fn set(to: &mut String, text: &str) {
    if to != text {
        to.clear();
        to.push_str(text);
    }
}

fn empty_warning() -> Warning {
    Warning {
        id: String::new(),
        severity: Severity::Info,
        subject: Subject::Host,
        message: String::new(),
        evidence: Vec::new(),
        remedy: String::new(),
        since: String::new(),
    }
}

impl Slots {
    /// Makes `warnings` a copy of the warnings found this tick, in the room of those it held
    /// and of the spare ones: once the room has grown to the most warnings and rows seen, a
    /// tick allocates nothing for them, even when warnings come and go from tick to tick.
    pub(crate) fn copy_found_into(&mut self, warnings: &mut Vec<Warning>) {
        let found = &self.warnings[..self.used];
        let spare = &mut self.spare_rows;
        if warnings.len() > found.len() {
            self.spare_warnings.extend(warnings.drain(found.len()..));
            // No list needs more room than the most warnings a tick has found.
            self.spare_warnings.truncate(self.warnings.len());
        }
        for (to, from) in warnings.iter_mut().zip(found) {
            refill(to, from, spare);
        }
        for from in &found[warnings.len()..] {
            let mut to = self.spare_warnings.pop().unwrap_or_else(empty_warning);
            refill(&mut to, from, spare);
            warnings.push(to);
        }
    }
}

/// `to` as a copy of `from`, each text in `to`'s room; evidence rows come from and go to
/// `spare`.
fn refill(to: &mut Warning, from: &Warning, spare: &mut Vec<(String, String)>) {
    set(&mut to.id, &from.id);
    to.severity = from.severity;
    if to.subject != from.subject {
        to.subject.clone_from(&from.subject);
    }
    set(&mut to.message, &from.message);
    if to.evidence.len() > from.evidence.len() {
        spare.extend(to.evidence.drain(from.evidence.len()..));
    }
    while to.evidence.len() < from.evidence.len() {
        to.evidence.push(spare.pop().unwrap_or_default());
    }
    for ((name, value), (from_name, from_value)) in to.evidence.iter_mut().zip(&from.evidence) {
        set(name, from_name);
        set(value, from_value);
    }
    set(&mut to.remedy, &from.remedy);
    set(&mut to.since, &from.since);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warning(id: &str, message: &str, rows: usize) -> Warning {
        Warning {
            id: id.to_string(),
            message: message.to_string(),
            evidence: (0..rows)
                .map(|i| (format!("row {i}"), "1".into()))
                .collect(),
            ..empty_warning()
        }
    }

    /// A tick's warnings as the rules would leave them in `slots`.
    fn found(slots: &mut Slots, warnings: &[Warning]) {
        slots.start();
        for w in warnings {
            slots.push(w.clone());
        }
    }

    #[test]
    fn the_copy_is_the_warnings_found_whatever_the_list_held() {
        let mut slots = Slots::default();
        let mut list = Vec::new();
        for tick in [
            vec![warning("a", "one", 2), warning("b", "two", 0)],
            vec![warning("c", "three", 5)],
            vec![],
            vec![
                warning("b", "two", 1),
                warning("a", "x", 3),
                warning("d", "y", 0),
            ],
        ] {
            found(&mut slots, &tick);
            slots.copy_found_into(&mut list);
            assert_eq!(list, tick);
        }
    }

    #[test]
    fn warnings_that_come_back_reuse_the_room_of_those_that_went() {
        let long = "a long message from a warning that fired a while ago ".repeat(20);
        let mut slots = Slots::default();
        let mut list = Vec::new();
        found(&mut slots, &[warning("a", "1", 1), warning("b", &long, 8)]);
        slots.copy_found_into(&mut list);
        // The second warning goes, then a short one comes in its place.
        found(&mut slots, &[warning("a", "1", 1)]);
        slots.copy_found_into(&mut list);
        found(
            &mut slots,
            &[warning("a", "1", 1), warning("c", "short", 2)],
        );
        slots.copy_found_into(&mut list);
        assert_eq!(list[1], warning("c", "short", 2));
        assert!(
            list[1].message.capacity() >= long.len() && list[1].evidence.capacity() >= 8,
            "the room of the warning that went was dropped: a fresh copy each time one comes back"
        );
    }
}
