//! The detail view (`Enter`): one process's command line, cwd, environment, history, children
//! and GPUs over the panels. It asks the sampler to read that process's files each tick while
//! it is open ([`SamplerRequest::Detail`]), so nothing is read on the UI task. The action keys
//! work from it on the process it shows; Esc or q closes it.

use crossterm::event::{KeyCode, KeyEvent};

use super::{App, Effect, RowKey};
use crate::sampler::SamplerRequest;

/// The open detail view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DetailView {
    pub(crate) pid: u32,
    /// The row it was opened on, to tell the process from a later one with its pid.
    pub(crate) key: RowKey,
    /// Lines scrolled off the top.
    pub(crate) scroll: u16,
}

/// Keys the detail view passes to the process table's handler, which acts on the selected
/// row: the view keeps the selection on its process.
fn is_action_key(code: KeyCode) -> bool {
    matches!(
        code,
        KeyCode::Char('T' | 'K' | 'I' | 'n' | 's' | 'P' | 'S' | 'R' | ' ') | KeyCode::F(7..=9)
    )
}

impl App {
    /// `Enter`: opens the detail view of the selected process.
    pub(super) fn open_detail(&mut self) -> Effect {
        let Some(row) = self.selected_row() else {
            return Effect::None;
        };
        let (pid, key) = (row.pid, row.key());
        self.detail = Some(DetailView {
            pid,
            key,
            scroll: 0,
        });
        self.ask_for_detail(Some(pid))
    }

    pub(super) fn close_detail(&mut self) -> Effect {
        self.detail = None;
        self.ask_for_detail(None)
    }

    /// Asks the sampler to read (or stop reading) a process's files; a replay has no sampler,
    /// and its process is not this machine's, so it shows what the recording holds instead.
    fn ask_for_detail(&self, pid: Option<u32>) -> Effect {
        if self.replay {
            return Effect::Redraw;
        }
        Effect::AskSampler(SamplerRequest::Detail { pid })
    }

    /// Whether the selected row is still the process the view was opened on.
    pub(crate) fn detail_process_listed(&self) -> bool {
        let Some(view) = &self.detail else {
            return false;
        };
        self.selected_row().is_some_and(|r| r.key() == view.key)
    }

    pub(super) fn on_process_detail_key(&mut self, key: KeyEvent) -> Effect {
        let Some(view) = self.detail.as_mut() else {
            return Effect::None;
        };
        let page = u16::try_from(self.view.page_rows.max(1)).unwrap_or(u16::MAX);
        match key.code {
            // q leaves the view as it leaves htop's sub-screens; F10 and Ctrl-C quit.
            KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q') => return self.close_detail(),
            KeyCode::Down | KeyCode::Char('j') => view.scroll = view.scroll.saturating_add(1),
            KeyCode::Up | KeyCode::Char('k') => view.scroll = view.scroll.saturating_sub(1),
            KeyCode::PageDown => view.scroll = view.scroll.saturating_add(page),
            KeyCode::PageUp => view.scroll = view.scroll.saturating_sub(page),
            KeyCode::Home => view.scroll = 0,
            KeyCode::Char('?' | 'h') | KeyCode::F(1) => self.view.toggle_help(),
            code if is_action_key(code) => {
                let pid = view.pid;
                if !self.detail_process_listed() {
                    self.status = Some(format!(
                        "process {pid} is no longer listed (it may have exited): nothing was done"
                    ));
                    return Effect::Redraw;
                }
                return self.on_normal_key(key);
            }
            _ => return Effect::None,
        }
        Effect::Redraw
    }
}
