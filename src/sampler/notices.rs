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
            // In words, never the wire's name ("reset_peak done" means nothing to a user).
            let what = match command {
                AgentCommand::ResetPeak => "the peak reset",
                AgentCommand::Snapshot => "snapshot",
                AgentCommand::RecordHistory => "recording memory history",
            };
            match (reply.ok, &reply.path, &reply.error) {
                (true, Some(path), _) => format!("agent of {pid}: {what} written to {path}"),
                (true, None, _) => match command {
                    AgentCommand::ResetPeak => format!("agent of {pid}: peak memory figures reset"),
                    AgentCommand::Snapshot => format!("agent of {pid}: snapshot written"),
                    AgentCommand::RecordHistory => {
                        format!("agent of {pid}: memory history is being recorded")
                    }
                },
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

    fn replied(command: AgentCommand, ok: bool, error: Option<&str>) -> String {
        describe_outcome(&CommandOutcome::Replied {
            pid: 28102,
            command,
            reply: AgentReply {
                id: 1,
                ok,
                cmd: Some(command.name().to_string()),
                path: None,
                error: error.map(str::to_string),
            },
        })
    }

    /// The status line says what happened in words, never the protocol's command names.
    #[test]
    fn an_agents_answer_reads_as_plain_english() {
        use AgentCommand::{RecordHistory, ResetPeak, Snapshot};
        let said = [
            replied(ResetPeak, true, None),
            replied(ResetPeak, false, Some("no CUDA")),
            replied(RecordHistory, true, None),
            replied(RecordHistory, false, None),
            replied(Snapshot, false, Some("disk full")),
        ];
        assert_eq!(
            said,
            [
                "agent of 28102: peak memory figures reset",
                "agent of 28102: the peak reset failed: no CUDA",
                "agent of 28102: memory history is being recorded",
                "agent of 28102: recording memory history failed",
                "agent of 28102: snapshot failed: disk full",
            ]
        );
        assert!(said.iter().all(|s| !s.contains('_')), "{said:?}");
    }
}
