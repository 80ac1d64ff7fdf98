//! The tree view (`t`) and its requests to the sampler: with the tree open, the sampler reads again each
//! tick only the figures of the rows on screen (10,000 host processes would cost 20 µs each
//! otherwise), so the app tells it which rows those are whenever they change.

use super::rows;
use super::view::first_visible_row;
use super::{App, Effect};
use crate::sampler::SamplerRequest;

impl App {
    /// `t`: the tree needs the host processes, which the sampler reads only while asked.
    pub(super) fn toggle_tree(&mut self) -> Effect {
        self.settings.tree = !self.settings.tree;
        self.refresh_rows();
        let visible = self.tree_rows_on_screen().filter(|_| self.settings.tree);
        self.told_on_screen.clone_from(&visible);
        Effect::AskSampler(SamplerRequest::ProcessTable {
            wanted: self.settings.tree,
            visible,
        })
    }

    /// After a frame is laid out: the sampler reads again only the figures of the tree rows on
    /// screen, so it is told which they are whenever that changes (a scroll, a new snapshot).
    pub(crate) fn screen_rows_request(&mut self) -> Option<SamplerRequest> {
        if !self.settings.tree {
            self.told_on_screen = None;
            return None;
        }
        let on_screen = self.tree_rows_on_screen();
        if on_screen.is_none() || self.told_on_screen == on_screen {
            return None;
        }
        self.told_on_screen.clone_from(&on_screen);
        Some(SamplerRequest::ProcessTable {
            wanted: true,
            visible: on_screen,
        })
    }

    /// The pids of the rows on screen, sorted; `None` before the first layout, when the
    /// table's height is not known.
    fn tree_rows_on_screen(&self) -> Option<Vec<u32>> {
        let height = self.view.page_rows;
        if height == 0 {
            return None;
        }
        let first = first_visible_row(self.view.offset, self.view.selected, height);
        let mut pids: Vec<u32> = self.rows[first.min(self.rows.len())..]
            .iter()
            .take(height)
            .map(|r| rows::materialize(&self.snapshot, r).pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        Some(pids)
    }
}
