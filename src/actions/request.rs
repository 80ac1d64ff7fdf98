//! What the app asks to be done to processes ([`ActionRequest`]), carrying it out
//! ([`perform`]), and the status sentence made from the outcome ([`ActionReport`]). The app
//! builds requests without I/O; the event loop runs [`perform`] off the UI task.

use super::{adjust_nice, renice, send_signal, ActionError, Signal};
use crate::format;
use crate::model::ProcessIdentity;

/// A process an action applies to, as it was on screen when the user chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActionTarget {
    pub(crate) identity: ProcessIdentity,
    pub(crate) user: Option<String>,
    pub(crate) command: Option<String>,
}

impl ActionTarget {
    pub(crate) fn pid(&self) -> u32 {
        self.identity.pid
    }

    /// "1234 (python3 train.py)", the command cut to fit a status line.
    pub(crate) fn label(&self) -> String {
        match &self.command {
            Some(command) => format!("{} ({})", self.pid(), format::truncate(command, 40)),
            None => self.pid().to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Signal(Signal),
    /// Set the nice value.
    SetNice(i32),
    /// Move the nice value by this much from its value at the time of the action.
    AdjustNice(i32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActionRequest {
    pub(crate) action: Action,
    pub(crate) targets: Vec<ActionTarget>,
}

/// The outcome per target, in the request's order: for renice, the nice value read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActionReport {
    pub(crate) request: ActionRequest,
    pub(crate) results: Vec<Result<Option<i32>, ActionError>>,
}

/// Runs `request` against each target in turn. Blocks on /proc reads and system calls.
pub(crate) fn perform(request: ActionRequest) -> ActionReport {
    let results = request
        .targets
        .iter()
        .map(|target| match request.action {
            Action::Signal(signal) => send_signal(&target.identity, signal).map(|()| None),
            Action::SetNice(nice) => renice(&target.identity, nice).map(Some),
            Action::AdjustNice(delta) => adjust_nice(&target.identity, delta).map(Some),
        })
        .collect();
    ActionReport { request, results }
}

impl ActionReport {
    /// One sentence for the status line.
    pub(crate) fn sentence(&self) -> String {
        let targets = &self.request.targets;
        let failures: Vec<&ActionError> = self
            .results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .collect();
        if targets.len() == 1 {
            return match &self.results[..] {
                [Ok(value)] => success_one(self.request.action, &targets[0], *value),
                [Err(error)] => error.to_string(),
                _ => "the action reported no outcome".to_string(),
            };
        }
        let done = self.results.len() - failures.len();
        let verb = verb(self.request.action);
        let mut sentence = if failures.is_empty() {
            format!("{verb} {} processes", targets.len())
        } else {
            format!("{verb} {done} of {} processes", targets.len())
        };
        if let Some(first) = failures.first() {
            sentence.push_str(&format!("; {first}"));
            let more = failures.len() - 1;
            if more > 0 {
                let noun = if more == 1 { "failure" } else { "failures" };
                sentence.push_str(&format!(" (and {more} more {noun})"));
            }
        }
        sentence
    }
}

fn success_one(action: Action, target: &ActionTarget, nice: Option<i32>) -> String {
    let label = target.label();
    match (action, nice) {
        (Action::Signal(signal), _) => format!("sent {signal} to {label}"),
        (_, Some(nice)) => format!("the nice value of {label} is now {nice}"),
        (_, None) => format!("changed the nice value of {label}"),
    }
}

fn verb(action: Action) -> String {
    match action {
        Action::Signal(signal) => format!("sent {signal} to"),
        Action::SetNice(nice) => format!("set the nice value to {nice} for"),
        Action::AdjustNice(delta) if delta < 0 => "lowered the nice value of".to_string(),
        Action::AdjustNice(_) => "raised the nice value of".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(pid: u32, command: &str) -> ActionTarget {
        ActionTarget {
            identity: ProcessIdentity::new(pid, 7),
            user: Some("alice".to_string()),
            command: Some(command.to_string()),
        }
    }

    fn report(action: Action, results: Vec<Result<Option<i32>, ActionError>>) -> ActionReport {
        let targets = (0..results.len() as u32)
            .map(|i| target(1234 + i, "python3 train.py"))
            .collect();
        ActionReport {
            request: ActionRequest { action, targets },
            results,
        }
    }

    #[test]
    fn one_target_names_the_process_or_gives_the_error() {
        let sent = report(Action::Signal(Signal::Term), vec![Ok(None)]);
        assert_eq!(sent.sentence(), "sent SIGTERM to 1234 (python3 train.py)");
        let niced = report(Action::AdjustNice(1), vec![Ok(Some(6))]);
        assert_eq!(
            niced.sentence(),
            "the nice value of 1234 (python3 train.py) is now 6"
        );
        let gone = report(
            Action::Signal(Signal::Kill),
            vec![Err(ActionError::Reused { pid: 1234 })],
        );
        assert_eq!(
            gone.sentence(),
            "process 1234 has exited; its pid now belongs to another program"
        );
    }

    #[test]
    fn several_targets_are_summed_up_with_the_first_failure() {
        let all = report(Action::Signal(Signal::Kill), vec![Ok(None), Ok(None)]);
        assert_eq!(all.sentence(), "sent SIGKILL to 2 processes");
        let some = report(
            Action::SetNice(5),
            vec![
                Ok(Some(5)),
                Err(ActionError::Exited { pid: 1235 }),
                Err(ActionError::Exited { pid: 1236 }),
            ],
        );
        assert_eq!(
            some.sentence(),
            "set the nice value to 5 for 1 of 3 processes; process 1235 has exited \
             (and 1 more failure)"
        );
    }

    #[test]
    fn long_commands_are_cut_in_labels() {
        let long = target(9, &"x".repeat(100));
        assert_eq!(long.label().chars().count(), "9 ()".len() + 40);
    }
}
