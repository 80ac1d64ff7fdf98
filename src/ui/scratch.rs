//! [`Scratch`]: the text and vectors a frame is drawn with, kept by the drawing thread between
//! frames and cleared before each use, so that a frame in steady state allocates nothing: a
//! panel writes its figures into a `String` or [`Runs`] that already has the room, instead of a
//! `String`, `Span` or `Line` of its own per figure. Panels are drawn one after another, so one
//! set serves them all; a panel takes it ([`take`]) for its drawing only.

use std::cell::Cell;
use std::ops::{Deref, DerefMut};

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
    /// The process table's columns this frame.
    pub(crate) placed: Vec<Placed>,
    /// The width and the columns the table was last laid out for, and where each column went
    /// ([`Scratch::column_areas`]): the solver runs again only when either changes.
    pub(crate) laid_out: Option<(u16, Vec<Placed>)>,
    pub(crate) column_areas: Vec<Rect>,
}

thread_local! {
    /// The UI thread's scratch, between frames. A thread local, not a field of the app: the
    /// app is a layer below the drawing, and the event loop draws on one thread.
    static KEPT: Cell<Scratch> = Cell::new(Scratch::default());
}

/// The scratch, for one panel's drawing: handed back when the returned value is dropped. Taken
/// again meanwhile (a panel drawing another), the second taker gets an empty one, which only
/// costs allocations.
pub(crate) fn take() -> Taken {
    Taken(KEPT.with(Cell::take))
}

/// The scratch taken by [`take`], until dropped.
pub(crate) struct Taken(Scratch);

impl Deref for Taken {
    type Target = Scratch;

    fn deref(&self) -> &Scratch {
        &self.0
    }
}

impl DerefMut for Taken {
    fn deref_mut(&mut self) -> &mut Scratch {
        &mut self.0
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let scratch = std::mem::take(&mut self.0);
        // During the thread's teardown there is nothing left to hand it back to.
        let _ = KEPT.try_with(|kept| kept.set(scratch));
    }
}
