//! What the user has chosen to look at: selection, scroll, open dialogs.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViewState {
    pub selected: usize,
    pub show_help: bool,
}

impl ViewState {
    pub fn select_next(&mut self, rows: usize) {
        if self.selected + 1 < rows {
            self.selected += 1;
        }
    }

    pub fn select_previous(&mut self) {
        self.selected = self.selected.saturating_sub(1);
    }

    pub fn clamp_to(&mut self, rows: usize) {
        self.selected = self.selected.min(rows.saturating_sub(1));
    }
}
