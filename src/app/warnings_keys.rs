//! Keys and clicks while the `w` view is open, and `g`, which selects a warning's subject in the
//! monitor. Every key is answered here or ignored: nothing typed in the view reaches the process
//! table behind it; Esc goes back one level and `q` or `w` closes the view, and neither quits.

use crossterm::event::{KeyCode, KeyEvent, MouseButton, MouseEvent, MouseEventKind};

use super::view::Mark;
use super::warnings_view::{Level, Target};
use super::{App, Effect};

impl App {
    /// `w`: opens the list of warnings.
    pub(crate) fn open_warnings(&mut self) -> Effect {
        self.warnings_view.open_list(&self.snapshot);
        Effect::Redraw
    }

    pub(crate) fn on_warnings_key(&mut self, key: KeyEvent) -> Effect {
        match key.code {
            // q leaves the view as it leaves htop's sub-screens; F10 and Ctrl-C quit.
            KeyCode::Char('q' | 'w') => self.warnings_view.level = Level::Closed,
            KeyCode::Char('?') | KeyCode::F(1) => self.view.toggle_help(),
            KeyCode::Char('g') => return self.go_to_subject(),
            _ if matches!(self.warnings_view.level, Level::Detail(_)) => {
                return self.on_detail_key(key)
            }
            _ => return self.on_list_key(key),
        }
        Effect::Redraw
    }

    fn on_list_key(&mut self, key: KeyEvent) -> Effect {
        let view = &mut self.warnings_view;
        let snapshot = &self.snapshot;
        let last = view.entries.len().saturating_sub(1);
        let page = view.list_rows();
        match key.code {
            KeyCode::Esc => view.level = Level::Closed,
            KeyCode::Down | KeyCode::Char('j') | KeyCode::Tab => {
                view.select((view.selected + 1).min(last), snapshot);
            }
            KeyCode::Up | KeyCode::Char('k') | KeyCode::BackTab => {
                view.select(view.selected.saturating_sub(1), snapshot);
            }
            KeyCode::PageDown => view.select(view.selected + page, snapshot),
            KeyCode::PageUp => view.select(view.selected.saturating_sub(page), snapshot),
            KeyCode::Home => view.select(0, snapshot),
            KeyCode::End => view.select(last, snapshot),
            KeyCode::Enter => {
                if !view.toggle_group(None, snapshot) {
                    view.open_detail(snapshot);
                }
            }
            KeyCode::Right | KeyCode::Char('l') => {
                if !view.toggle_group(Some(true), snapshot) {
                    view.open_detail(snapshot);
                }
            }
            KeyCode::Left => {
                view.toggle_group(Some(false), snapshot);
            }
            _ => return Effect::None,
        }
        Effect::Redraw
    }

    fn on_detail_key(&mut self, key: KeyEvent) -> Effect {
        let view = &mut self.warnings_view;
        let page = i32::from(view.area.body.height.max(1));
        match key.code {
            KeyCode::Esc | KeyCode::Backspace | KeyCode::Left => view.level = Level::List,
            KeyCode::Down | KeyCode::Char('j') => view.scroll_detail(1),
            KeyCode::Up | KeyCode::Char('k') => view.scroll_detail(-1),
            KeyCode::PageDown | KeyCode::Char(' ') => view.scroll_detail(page),
            KeyCode::PageUp => view.scroll_detail(-page),
            KeyCode::Home => view.scroll_detail(i32::MIN / 2),
            KeyCode::End => view.scroll_detail(i32::MAX / 2),
            _ => return Effect::None,
        }
        Effect::Redraw
    }

    /// Clicks select an entry (a second click on it opens it) and the wheel walks the list or
    /// scrolls the detail. Nothing reaches the panels behind the view.
    pub(crate) fn on_warnings_mouse(&mut self, mouse: MouseEvent) -> Effect {
        // A screen too small for the monitor shows no view to click on.
        if !matches!(self.view.plan, super::Plan::Screen(_)) {
            return Effect::None;
        }
        let detail = matches!(self.warnings_view.level, Level::Detail(_));
        let step = match mouse.kind {
            MouseEventKind::ScrollDown => KeyCode::Down,
            MouseEventKind::ScrollUp => KeyCode::Up,
            MouseEventKind::Down(MouseButton::Left) if !detail => {
                return self.click_warning(mouse.column, mouse.row)
            }
            _ => return Effect::None,
        };
        let key = KeyEvent::from(step);
        if detail {
            self.on_detail_key(key)
        } else {
            self.on_list_key(key)
        }
    }

    fn click_warning(&mut self, column: u16, y: u16) -> Effect {
        let Some(index) = self.warnings_view.entry_at(column, y) else {
            return Effect::None;
        };
        if index == self.warnings_view.selected {
            return self.on_list_key(KeyEvent::from(KeyCode::Enter));
        }
        self.warnings_view.select(index, &self.snapshot);
        Effect::Redraw
    }

    /// `g`: selects what the warning is about in the monitor and closes the view.
    fn go_to_subject(&mut self) -> Effect {
        let Some(target) = self.warnings_view.target(&self.snapshot) else {
            return Effect::None;
        };
        self.warnings_view.level = Level::Closed;
        self.view.mark = None;
        let sentence = match target {
            Target::Process(pid) => self.select_process(|row| row.pid == pid, pid),
            Target::Gpu(index) => {
                self.view.mark = Some(Mark::Gpu(index));
                let found = self.select_first_row(|row| row.gpus.iter().any(|g| g.gpu == index));
                match found {
                    Some(pid) => format!("GPU {index}: its first process, pid {pid}, is selected"),
                    None => format!("GPU {index} is marked above; no listed process uses it"),
                }
            }
            Target::Job(id) => {
                let pids = self.ranks_of(&id);
                // Job ids that start with "job " are not prefixed twice ("job job 127.0.0.1:…").
                let label = crate::model::Subject::Job { id: id.clone() }.label();
                let shown = crate::format::escape(&label).into_owned();
                self.view.mark = Some(Mark::Job(id));
                match self.select_first_row(|row| pids.first() == Some(&row.pid)) {
                    Some(pid) => format!("{shown}: its first rank, pid {pid}, is selected"),
                    None => format!("{shown} has no listed process now"),
                }
            }
            Target::Host => "this warning is about the host: see the HOST panel".to_string(),
        };
        self.status = Some(sentence);
        Effect::Redraw
    }

    /// The pids of job `id`'s ranks, in rank order. A job down to one process (rank-gone: its
    /// other rank has left) is no longer among the snapshot's jobs, which need two: its
    /// processes are found by their job's id.
    fn ranks_of(&self, id: &str) -> Vec<u32> {
        if let Some(job) = self.snapshot.jobs.iter().find(|j| j.id == id) {
            return job.ranks.iter().map(|r| r.pid).collect();
        }
        let mut ranks: Vec<(Option<u32>, u32)> = (self.snapshot.processes.iter())
            .filter(|p| crate::rules::job_key(p).as_deref() == Some(id))
            .map(|p| (crate::rules::job_rank(p).rank, p.pid))
            .collect();
        ranks.sort_unstable_by_key(|&(rank, pid)| (rank.unwrap_or(u32::MAX), pid));
        ranks.dedup();
        ranks.into_iter().map(|(_, pid)| pid).collect()
    }

    fn select_process(
        &mut self,
        wanted: impl Fn(&super::ProcessRow<'_>) -> bool,
        pid: u32,
    ) -> String {
        match self.select_first_row(wanted) {
            Some(_) => format!("pid {pid} is selected"),
            None => format!("process {pid} is not in the process table now (it may have exited)"),
        }
    }

    /// Selects the first row that `wanted` accepts, clearing a filter that hides every such
    /// row; returns its pid.
    fn select_first_row(&mut self, wanted: impl Fn(&super::ProcessRow<'_>) -> bool) -> Option<u32> {
        let mut found = self.rows().iter().position(&wanted);
        if found.is_none() && !self.settings.filter.is_empty() {
            self.set_filter(String::new());
            found = self.rows().iter().position(&wanted);
        }
        let index = found?;
        self.view.select_index(index, self.row_count());
        self.remember_selection();
        self.selected_row().map(|r| r.pid)
    }
}
