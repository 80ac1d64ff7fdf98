//! The sentences the sampler puts on the status line about the agents: what was asked of
//! them, what they answered, and what they reported on their own.

use crate::collect::agent::{AgentEvent, CommandOutcome};
use crate::protocol::AgentCommand;

pub(super) fn command_label(command: AgentCommand) -> &'static str {
    match command {
        AgentCommand::ResetPeak => "a peak reset",
        AgentCommand::Snapshot => "a memory snapshot",
        AgentCommand::RecordHistory => "memory history recording",
    }
}

/// The sentence for the status line about a command's outcome. The command's name is the one
/// this monitor sent, not the agent's echo of it.
pub(super) fn describe_outcome(outcome: &CommandOutcome) -> String {
    match outcome {
        CommandOutcome::Replied {
            pid,
            command,
            reply,
        } => {
            let what = command.name();
            match (reply.ok, &reply.path, &reply.error) {
                (true, Some(path), _) => format!("agent of {pid}: {what} written to {path}"),
                // Not "reset_peak done": the wire's name means nothing on the status line.
                (true, None, _) if *command == AgentCommand::ResetPeak => {
                    format!("agent of {pid}: peak memory figures reset")
                }
                (true, None, _) => format!("agent of {pid}: {what} done"),
                (false, _, Some(error)) => format!("agent of {pid}: {what} failed: {error}"),
                (false, _, None) => format!("agent of {pid}: {what} failed"),
            }
        }
        CommandOutcome::TimedOut {
            pid,
            command,
            after,
        } => format!(
            "the agent of {pid} did not answer the {} within {} s",
            command.request_words(),
            after.as_secs_f64().round()
        ),
        CommandOutcome::Unanswered {
            pid,
            command,
            reason,
        } => format!(
            "the agent of {pid} did not answer the {}: {reason}",
            command.request_words()
        ),
    }
}

/// The sentence for an event an agent reported, if it is one worth the status line.
pub(super) fn describe_event(pid: u32, event: &AgentEvent) -> Option<String> {
    if event.kind != "oom" {
        return None;
    }
    let mut sentence = match event.device {
        Some(device) => format!("agent of {pid}: PyTorch ran out of memory on cuda:{device}"),
        None => format!("agent of {pid}: PyTorch ran out of memory"),
    };
    if let Some(path) = &event.path {
        sentence.push_str(&format!("; snapshot written to {path}"));
    }
    Some(sentence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::agent::AgentReply;

    #[test]
    fn a_peak_reset_done_reads_as_plain_english() {
        let outcome = CommandOutcome::Replied {
            pid: 28102,
            command: AgentCommand::ResetPeak,
            reply: AgentReply {
                id: 1,
                ok: true,
                cmd: Some("reset_peak".to_string()),
                path: None,
                error: None,
            },
        };
        assert_eq!(
            describe_outcome(&outcome),
            "agent of 28102: peak memory figures reset"
        );
    }
}
