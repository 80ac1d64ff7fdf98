//! The arena that holds every container's items: containers created, filled (in one go or in
//! batches), nested no deeper than [`MAX_DEPTH`], and lists with equal items stored once.

use ahash::RandomState;
use std::collections::HashMap;
use std::io::BufRead;

use super::{Error, Kind, Node, Reader, Result, Tag, Value, MAX_DEPTH, PAYLOAD};

/// Lists with the same items share their arena range: torch writes a new frame list for every
/// trace entry, and most of them list the same frames. A shared range is marked by a `cap`
/// below `len`, so that a later append copies it first.
#[derive(Default)]
pub(super) struct SharedLists {
    hasher: RandomState,
    /// Items' hash to the first range that held them; a collision just shares nothing.
    seen: HashMap<u64, (u32, u32)>,
}

/// Shorter lists cost less than their entry in [`SharedLists::seen`].
const SHARE_MIN_ITEMS: usize = 4;

impl SharedLists {
    fn worth_it(node: &Node, items: &[Value]) -> bool {
        items.len() >= SHARE_MIN_ITEMS && matches!(node.kind, Kind::List | Kind::Tuple)
    }

    /// Points a new list at an earlier range with the same items, if there is one.
    fn share(&self, node: &mut Node, arena: &[Value], items: &[Value]) -> bool {
        if !Self::worth_it(node, items) {
            return false;
        }
        let Some(&(start, len)) = self.seen.get(&self.hasher.hash_one(items)) else {
            return false;
        };
        let range = start as usize..start as usize + len as usize;
        if arena.get(range) != Some(items) {
            return false;
        }
        node.start = start;
        node.len = len;
        node.cap = 0;
        true
    }

    fn remember(&mut self, node: &Node, items: &[Value]) {
        if Self::worth_it(node, items) {
            self.seen
                .entry(self.hasher.hash_one(items))
                .or_insert((node.start, items.len() as u32));
        }
    }
}

impl<R: BufRead> Reader<R> {
    fn depth(&self, value: Value) -> u8 {
        value
            .node()
            .map_or(0, |i| self.pickle.nodes[i as usize].depth)
    }

    pub(super) fn new_node(&mut self, kind: Kind) -> Result<Value> {
        let index = u32::try_from(self.pickle.nodes.len())
            .ok()
            .filter(|&i| u64::from(i) < PAYLOAD)
            .ok_or(Error::TooBig(self.input.offset))?;
        self.pickle.nodes.push(Node {
            start: 0,
            len: 0,
            cap: 0,
            kind,
            depth: 1,
        });
        Ok(Value::new(Tag::Node, u64::from(index)))
    }

    /// A container made of the values on the stack above the innermost mark.
    pub(super) fn node_from_mark(&mut self, kind: Kind) -> Result<Value> {
        let mark = self.pop_mark()?;
        self.node_from(kind, mark)
    }

    /// A container made of the stack's values from `from` on, which leave the stack.
    pub(super) fn node_from(&mut self, kind: Kind, from: usize) -> Result<Value> {
        if from > self.stack.len() {
            return Err(self.malformed("a tuple takes more values than the stack holds"));
        }
        let node = self.new_node(kind)?;
        self.extend(node, from)?;
        Ok(node)
    }

    /// Moves the stack's values from `from` on into the container `target`.
    pub(super) fn extend(&mut self, target: Value, from: usize) -> Result<()> {
        let index = target.node().expect("extend is given a container") as usize;
        let added = self.stack.len() - from;
        let deepest = self.stack[from..]
            .iter()
            .map(|&v| self.depth(v))
            .max()
            .unwrap_or(0);
        if deepest >= MAX_DEPTH {
            return Err(Error::TooDeep(self.at));
        }
        let arena = &mut self.pickle.items;
        let node = &mut self.pickle.nodes[index];
        node.depth = node.depth.max(deepest + 1);
        let (start, len, cap) = (node.start as usize, node.len as usize, node.cap as usize);
        let needed = len + added;
        if needed <= cap {
            arena[start + len..start + needed].copy_from_slice(&self.stack[from..]);
        } else if len == 0 && self.lists.share(node, arena, &self.stack[from..]) {
            // Same items as a list seen before: the arena holds them once.
        } else if len == 0 || start + cap == arena.len() {
            // A new container, or the arena's last one: it takes exactly what it needs.
            let start = if len == 0 { arena.len() } else { start };
            check_arena(start + needed, self.at)?;
            arena.truncate(start + len);
            arena.extend_from_slice(&self.stack[from..]);
            node.start = start as u32;
            node.cap = needed as u32;
            if len == 0 {
                self.lists.remember(node, &arena[start..]);
            }
        } else {
            // Moved to the end with room to spare, so that a list filled in batches of 1,000
            // with other containers built in between is copied O(log n) times, not O(n).
            let new_start = arena.len();
            let new_cap = 2 * needed;
            check_arena(new_start + new_cap, self.at)?;
            arena.extend_from_within(start..start + len);
            arena.extend_from_slice(&self.stack[from..]);
            arena.resize(new_start + new_cap, Value::NONE);
            node.start = new_start as u32;
            node.cap = new_cap as u32;
        }
        node.len = needed as u32;
        self.stack.truncate(from);
        Ok(())
    }

    pub(super) fn kind_of(&self, value: Value) -> Option<Kind> {
        value.node().map(|i| self.pickle.nodes[i as usize].kind)
    }
}

/// Arena positions are u32: a pickle that needs more is refused.
fn check_arena(end: usize, at: u64) -> Result<()> {
    if end > u32::MAX as usize {
        return Err(Error::TooBig(at));
    }
    Ok(())
}
