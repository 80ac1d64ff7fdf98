//! Keys that ask the torchtop agent inside the selected process for something: `s` (a memory
//! snapshot), `S` (the memory viewer) and `P` (reset its peak memory figures). `P` asks first,
//! as the signal keys do: the peaks it clears cannot be had back, and htop users press `P` to
//! sort by CPU. Each request leaves as an [`Effect::AskSampler`]; the sampler puts its outcome
//! on the status line.

use crossterm::event::{KeyCode, KeyEvent};

use super::{App, Effect, Mode, READONLY_REFUSAL};
use crate::protocol::AgentCommand;
use crate::sampler::SamplerRequest;

/// The process a `P` confirmation is about, as its dialog names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentTarget {
    pub(crate) pid: u32,
    pub(crate) user: Option<String>,
    pub(crate) command: Option<String>,
}

/// The status after `n` or Esc in the `P` confirmation.
pub(crate) const PEAK_RESET_CANCELLED: &str = "peak memory figures not reset";

impl App {
    /// `s`: a command for the agent inside the selected process.
    pub(super) fn ask_agent(&mut self, command: AgentCommand) -> Effect {
        self.ask_for_agent(|pid| SamplerRequest::Agent { pid, command })
    }

    /// A request about the agent inside the selected process (`s`, `S`).
    pub(super) fn ask_for_agent(&mut self, request: impl FnOnce(u32) -> SamplerRequest) -> Effect {
        match self.agent_of_selected() {
            Ok(pid) => Effect::AskSampler(request(pid)),
            Err(refused) => refused,
        }
    }

    /// `P`: opens the confirmation; `y` then sends the reset.
    pub(super) fn ask_to_reset_peak(&mut self) -> Effect {
        if let Err(refused) = self.agent_of_selected() {
            return refused;
        }
        let Some(row) = self.selected_row() else {
            return Effect::None;
        };
        let target = AgentTarget {
            pid: row.pid,
            user: row.user().map(str::to_string),
            command: row.command(),
        };
        self.mode = Mode::ConfirmPeakReset { target };
        Effect::Redraw
    }

    pub(super) fn on_confirm_peak_reset_key(&mut self, key: KeyEvent, pid: u32) -> Effect {
        match key.code {
            KeyCode::Char('y' | 'Y') | KeyCode::Enter => {
                self.mode = Mode::Normal;
                self.status = None;
                Effect::AskSampler(SamplerRequest::Agent {
                    pid,
                    command: AgentCommand::ResetPeak,
                })
            }
            KeyCode::Char('n' | 'N') | KeyCode::Esc => {
                self.mode = Mode::Normal;
                self.status = Some(PEAK_RESET_CANCELLED.to_string());
                Effect::Redraw
            }
            _ => Effect::None,
        }
    }

    /// The pid of the selected process when its agent can be asked; otherwise what refusing
    /// does (the status line says why, or nothing is selected).
    fn agent_of_selected(&mut self) -> Result<u32, Effect> {
        if self.readonly {
            self.status = Some(READONLY_REFUSAL.to_string());
            return Err(Effect::Redraw);
        }
        let Some(row) = self.selected_row() else {
            return Err(Effect::None);
        };
        let pid = row.pid;
        let has_agent = row.gpus.iter().any(|g| g.torch.is_some());
        if !has_agent && row.identity().is_none() {
            // Not in /proc: gone, or in another container. `torchtop attach` could not reach
            // it either, so say what F7, F8 and the signal keys say on this row.
            self.status = Some(super::action_keys::not_visible(pid));
            return Err(Effect::Redraw);
        }
        let silent = row.gpus.iter().find(|g| g.agent_silent_seconds.is_some());
        if let (false, Some(process)) = (has_agent, silent) {
            self.status = Some(format!(
                "process {pid}'s agent cannot answer: {}; it has said nothing for {} since \
                 torchtop connected",
                process.why_agent_silent(),
                crate::format::span(process.agent_silent_seconds.unwrap_or_default().round()),
            ));
            return Err(Effect::Redraw);
        }
        let others = row.uid().is_some_and(|uid| uid != self.effective_uid);
        if !has_agent && others && self.effective_uid != 0 {
            // Not "use torchtop attach": attaching to another user's process is refused, and
            // an agent it has serves a directory this monitor does not read.
            self.status = Some(format!(
                "process {pid} is another user's: run torchtop with sudo to reach its agent"
            ));
            return Err(Effect::Redraw);
        }
        if !has_agent {
            self.status = Some(format!(
                "process {pid} has no torchtop agent: start it under `torchtop run` or use `torchtop attach {pid}`"
            ));
            return Err(Effect::Redraw);
        }
        Ok(pid)
    }
}
