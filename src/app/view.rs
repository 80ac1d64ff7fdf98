//! What the user has chosen to look at: the selected process row and the scroll position of the
//! process table, the GPU or job marked from the warnings view, and whether the help is open;
//! and where the last frame put the panels. Only the key handler and the event loop change it; drawing reads it.

use super::layout::Plan;

/// How much of the screen the GPU panel and the history take, as nvitop's `a` `f` `c`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Density {
    /// Detail rows and larger sparklines only where rows are left after the processes.
    #[default]
    Auto,
    /// Every GPU's detail rows and the larger sparklines, before extra process rows.
    Full,
    /// One line per GPU and one history row per GPU: the most process rows.
    Compact,
}

impl Density {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Density::Auto => "auto",
            Density::Full => "full",
            Density::Compact => "compact",
        }
    }
}

/// A GPU or a job highlighted in its panel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mark {
    Gpu(u32),
    Job(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ViewState {
    /// Index of the selected row in the process table.
    pub(crate) selected: usize,
    /// Index of the first process row on screen. Drawing moves the window further if the
    /// selection would fall outside it, so a stale value is harmless.
    pub(crate) offset: usize,
    /// How many process rows the last layout had room for ([`Plan::process_rows`]).
    /// Page keys move by this much. 0 means "not known yet" and counts as 1.
    pub(crate) page_rows: usize,
    pub(crate) show_help: bool,
    /// Lines of the help scrolled past at the top (j k PgDn End in the help).
    pub(crate) help_scroll: usize,
    /// The GPU or job that `g` in the warnings view went to, highlighted until Esc.
    pub(crate) mark: Option<Mark>,
    /// Where the last frame put the panels, to map mouse clicks to rows.
    pub(crate) plan: Plan,
    /// How many characters of COMMAND are scrolled off to the left (`←` `→`).
    pub(crate) command_scroll: usize,
    /// `a` `f` `c`: auto, full or compact GPU panel and history.
    pub(crate) density: Density,
}

impl ViewState {
    // Every move takes the table's row count, so that the window stays filled from the top as
    // far as the rows allow (see [`first_visible_row`]).

    pub(crate) fn select_next(&mut self, rows: usize) {
        if self.selected + 1 < rows {
            self.selected += 1;
        }
        self.keep_selection_visible(rows);
    }

    pub(crate) fn select_previous(&mut self, rows: usize) {
        self.selected = self.selected.saturating_sub(1);
        self.keep_selection_visible(rows);
    }

    /// Selects row `index` (clamped to the `rows` there are) and scrolls it into view.
    pub(crate) fn select_index(&mut self, index: usize, rows: usize) {
        self.selected = index.min(rows.saturating_sub(1));
        self.keep_selection_visible(rows);
    }

    /// Keeps the selection on a row that exists after the row count changed, and the window
    /// filled: a filter that leaves 10 of 22 rows shows all 10, not the last 5 and blank lines.
    pub(crate) fn clamp_to(&mut self, rows: usize) {
        self.selected = self.selected.min(rows.saturating_sub(1));
        self.keep_selection_visible(rows);
    }

    pub(crate) fn page_down(&mut self, rows: usize) {
        self.selected = (self.selected + self.page()).min(rows.saturating_sub(1));
        self.keep_selection_visible(rows);
    }

    pub(crate) fn page_up(&mut self, rows: usize) {
        self.selected = self.selected.saturating_sub(self.page());
        self.keep_selection_visible(rows);
    }

    pub(crate) fn select_first(&mut self, _rows: usize) {
        self.selected = 0;
        self.offset = 0;
    }

    pub(crate) fn select_last(&mut self, rows: usize) {
        self.selected = rows.saturating_sub(1);
        self.keep_selection_visible(rows);
    }

    /// Records how many process rows fit on screen (`page`) for a table of `rows`, so the page
    /// keys and scrolling match it: a taller window shows the rows above, not blank lines.
    pub(crate) fn set_page_rows(&mut self, page: usize, rows: usize) {
        self.page_rows = page;
        self.keep_selection_visible(rows);
    }

    pub(crate) fn toggle_help(&mut self) {
        self.show_help = !self.show_help;
    }

    /// Closes the help, or else drops the mark; returns whether there was one, so Esc can
    /// close things before it quits.
    pub(crate) fn close_overlays(&mut self) -> bool {
        if self.show_help {
            self.show_help = false;
            return true;
        }
        self.mark.take().is_some()
    }

    fn page(&self) -> usize {
        self.page_rows.max(1)
    }

    /// The table's first row on screen for this selection, page and row count.
    pub(crate) fn first_visible(&self, rows: usize) -> usize {
        first_visible_row(self.offset, self.selected, self.page(), rows)
    }

    fn keep_selection_visible(&mut self, rows: usize) {
        self.offset = self.first_visible(rows);
    }
}

/// The first of `rows` to draw so that `selected` is inside a window of `height` rows, moving
/// the window from `offset` as little as possible, and never so far down that the window ends
/// below the last row while rows above it are hidden (as htop: at most `rows - height`).
pub(crate) fn first_visible_row(
    offset: usize,
    selected: usize,
    height: usize,
    rows: usize,
) -> usize {
    let height = height.max(1);
    let first = if selected < offset {
        selected
    } else if selected >= offset + height {
        selected + 1 - height
    } else {
        offset
    };
    first.min(rows.saturating_sub(height))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrolling_moves_the_window_only_at_its_edges() {
        let mut view = ViewState::default();
        view.set_page_rows(5, 20);
        for _ in 0..7 {
            view.select_next(20);
        }
        assert_eq!((view.selected, view.offset), (7, 3));
        view.select_previous(20);
        assert_eq!((view.selected, view.offset), (6, 3));
        for _ in 0..4 {
            view.select_previous(20);
        }
        assert_eq!((view.selected, view.offset), (2, 2));
    }

    #[test]
    fn paging_and_ends_stay_in_range() {
        let mut view = ViewState::default();
        view.set_page_rows(10, 15);
        view.page_down(15);
        assert_eq!(view.selected, 10);
        view.page_down(15);
        assert_eq!(view.selected, 14);
        view.page_up(15);
        assert_eq!(view.selected, 4);
        view.select_last(15);
        assert_eq!((view.selected, view.offset), (14, 5));
        view.select_first(15);
        assert_eq!((view.selected, view.offset), (0, 0));
        view.select_last(0);
        assert_eq!(view.selected, 0);
    }

    #[test]
    fn clamping_follows_a_shrinking_table() {
        let mut view = ViewState {
            selected: 9,
            offset: 6,
            ..Default::default()
        };
        view.clamp_to(3);
        assert_eq!((view.selected, view.offset), (2, 2));
        view.clamp_to(0);
        assert_eq!((view.selected, view.offset), (0, 0));
    }

    /// A review: `End` in 22 rows, then a filter leaving 10 drew the last 5 over 5 blank lines.
    #[test]
    fn a_shrinking_table_is_filled_from_its_top() {
        let mut view = ViewState::default();
        view.set_page_rows(8, 22);
        view.select_last(22);
        assert_eq!((view.selected, view.offset), (21, 14));
        view.select_index(9, 10);
        assert_eq!((view.selected, view.offset), (9, 2));
        view.clamp_to(5);
        assert_eq!((view.selected, view.offset), (4, 0));
        // A taller window after a resize shows the rows above.
        view.select_last(22);
        view.set_page_rows(20, 22);
        assert_eq!((view.selected, view.offset), (21, 2));
        assert_eq!(first_visible_row(14, 21, 8, 10), 2);
    }

    #[test]
    fn esc_closes_overlays_first() {
        let mut view = ViewState::default();
        assert!(!view.close_overlays());
        view.toggle_help();
        assert!(view.close_overlays());
        assert!(!view.show_help);
    }
}
