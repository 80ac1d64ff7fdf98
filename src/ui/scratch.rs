//! [`Scratch`]: the text and vectors a frame is drawn with, kept in the app between frames and
//! cleared before each use, so that a frame in steady state allocates nothing: a panel writes
//! its figures into a `String` or [`Runs`] that already has the room, instead of a `String`,
//! `Span` or `Line` of its own per figure. Panels are drawn one after another, so one set
//! serves them all; a panel borrows it for its drawing only.

use std::cell::{RefCell, RefMut};

use ratatui::layout::Rect;

use super::label::Runs;
use crate::app::columns::Placed;

/// What a frame draws with, cleared by whoever uses a part.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Styled lines for a panel (or a part of one).
    pub(crate) runs: Runs,
    /// A cell's or a label's text.
    pub(crate) text: String,
    /// The sparklines' buckets.
    pub(crate) buckets: Vec<Option<f64>>,
    /// The process table's columns as last laid out, for the width they were laid out at, and
    /// where each went: the solver runs again only when the columns or the width change.
    pub(crate) placed: Vec<Placed>,
    pub(crate) laid_out: Option<(u16, Vec<Placed>)>,
    pub(crate) column_areas: Vec<Rect>,
}

/// [`Scratch`] behind a `RefCell`, as the app keeps it: drawing reads the app through `&App`.
#[derive(Default)]
pub(crate) struct Kept(RefCell<Scratch>);

impl Kept {
    /// The scratch, for one panel's drawing.
    ///
    /// # Panics
    /// If it is already borrowed: a panel must not draw another while it holds it.
    pub(crate) fn get(&self) -> RefMut<'_, Scratch> {
        self.0.borrow_mut()
    }
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scratch")
    }
}
