//! The tree view (`t`) and the app's requests to the sampler about the rows on screen: the
//! sampler reads again each tick only the figures of the rows on screen (10,000 host processes
//! in the tree would cost 20 µs each otherwise, and so would 1,000 GPU processes), so the app
//! tells it which rows those are whenever they change.

use super::rows;
use super::view::first_visible_row;
use super::{App, Effect};
use crate::sampler::SamplerRequest;

impl App {
    /// `t`: the tree needs the host processes, which the sampler reads only while asked.
    pub(super) fn toggle_tree(&mut self) -> Effect {
        self.settings.tree = !self.settings.tree;
        self.refresh_rows();
        let visible = self.rows_on_screen(self.view.page_rows / 2);
        self.told_on_screen.clone_from(&visible);
        self.told_tree = self.settings.tree;
        Effect::AskSampler(SamplerRequest::ProcessTable {
            wanted: self.settings.tree,
            visible,
        })
    }

    /// After a frame is laid out: the sampler reads again each tick only the figures of the
    /// rows on screen (in the tree, or in the GPU process table: at 1,000 GPU processes the
    /// others are read every few seconds), so it is told which they are whenever a row comes
    /// on screen that it was not told of. It is told of half a page more on each side, so
    /// that a table whose order moves a little each tick does not need telling each tick.
    pub(crate) fn screen_rows_request(&mut self) -> Option<SamplerRequest> {
        let on_screen = self.rows_on_screen(0)?;
        let told = self.told_on_screen.as_deref().unwrap_or_default();
        let all_told = self.told_tree == self.settings.tree
            && self.told_on_screen.is_some()
            && on_screen.iter().all(|pid| told.binary_search(pid).is_ok());
        if all_told {
            return None;
        }
        let around = self.rows_on_screen(self.view.page_rows / 2);
        self.told_on_screen.clone_from(&around);
        self.told_tree = self.settings.tree;
        Some(SamplerRequest::ProcessTable {
            wanted: self.settings.tree,
            visible: around,
        })
    }

    /// Forgets what the sampler was told, so that the next frame tells it again (after a
    /// recording, which asked it for every row).
    pub(crate) fn retell_rows_on_screen(&mut self) {
        self.told_on_screen = None;
    }

    /// The pids of the rows on screen and `margin` rows on each side, sorted; `None` before
    /// the first layout, when the table's height is not known.
    fn rows_on_screen(&self, margin: usize) -> Option<Vec<u32>> {
        let height = self.view.page_rows;
        if height == 0 {
            return None;
        }
        let first = first_visible_row(
            self.view.offset,
            self.view.selected,
            height,
            self.rows.len(),
        );
        let first = first.saturating_sub(margin).min(self.rows.len());
        let mut pids: Vec<u32> = self.rows[first..]
            .iter()
            .take(height + 2 * margin)
            .map(|r| rows::materialize(&self.snapshot, r).pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        Some(pids)
    }
}
