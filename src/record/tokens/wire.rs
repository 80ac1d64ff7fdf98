//! A snapshot as token bytes (each token as [`crate::record::codec::get_tok`] reads it): the
//! head, and the entities of the split-off lists one after the other, each with where its
//! tokens start. No token is built and no string copied into one: the writer compares and
//! patches these bytes, and the buffers are reused from frame to frame.

use serde::Serialize;

use super::{Error, View};
use crate::record::codec;

/// The token kinds, as the format numbers them.
pub(super) const NULL: u8 = 0;
pub(super) const FALSE: u8 = 1;
pub(super) const TRUE: u8 = 2;
pub(super) const UINT: u8 = 3;
pub(super) const NINT: u8 = 4;
pub(super) const FLOAT: u8 = 5;
pub(super) const STR: u8 = 6;
pub(super) const SEQ: u8 = 7;
pub(super) const MAP: u8 = 8;
pub(super) const KEY: u8 = 9;
pub(super) const SPLICE: u8 = 10;

/// Token bytes, where each token starts, and how many there are.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Sink {
    pub(crate) bytes: Vec<u8>,
    /// The offset of each token in `bytes`.
    pub(crate) starts: Vec<u32>,
}

impl Sink {
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.starts.clear();
    }

    pub(super) fn start(&mut self, kind: u8) {
        self.starts.push(self.bytes.len() as u32);
        self.bytes.push(kind);
    }

    pub(super) fn varint(&mut self, kind: u8, v: u64) {
        self.start(kind);
        codec::put_varint(&mut self.bytes, v);
    }

    pub(super) fn text(&mut self, kind: u8, s: &str) {
        self.start(kind);
        codec::put_str(&mut self.bytes, s);
    }

    pub(super) fn truncate(&mut self, mark: (usize, usize)) {
        self.bytes.truncate(mark.0);
        self.starts.truncate(mark.1);
    }

    pub(super) fn mark(&self) -> (usize, usize) {
        (self.bytes.len(), self.starts.len())
    }
}

/// One entity: its bytes and token starts in [`Wire::body`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) bytes: (usize, usize),
    pub(crate) starts: (usize, usize),
}

/// A list split off the head: its field name and its elements.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WireGroup {
    pub(crate) name: &'static str,
    pub(crate) entities: Vec<Span>,
}

/// A snapshot as token bytes: the head, and the entities of every group one after the other in
/// `body`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Wire {
    pub(crate) head: Sink,
    pub(crate) body: Sink,
    pub(crate) groups: Vec<WireGroup>,
}

impl Wire {
    /// Serializes `value` (a snapshot) into this buffer, replacing what it held.
    pub(crate) fn fill<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.head.clear();
        self.body.clear();
        self.groups.clear();
        super::serializer::serialize(value, &mut self.head, &mut self.body, &mut self.groups)
    }

    pub(crate) fn entity(&self, span: Span) -> View<'_> {
        View {
            bytes: &self.body.bytes[span.bytes.0..span.bytes.1],
            starts: &self.body.starts[span.starts.0..span.starts.1],
            base: span.bytes.0 as u32,
        }
    }

    pub(crate) fn head(&self) -> View<'_> {
        View {
            bytes: &self.head.bytes,
            starts: &self.head.starts,
            base: 0,
        }
    }
}
