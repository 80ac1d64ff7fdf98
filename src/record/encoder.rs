//! Writing frames ([`super::delta`] describes them) straight from a snapshot's token bytes
//! ([`super::tokens::Wire`]): an unchanged entity is found by comparing its bytes with the last
//! frame's, and a changed one is patched by comparing bytes until they differ, so that only the
//! few tokens that changed are ever looked at one by one. Nothing is allocated per token, and
//! the buffers are reused from frame to frame.

use std::collections::HashMap;
use std::sync::Arc;

use super::codec;
use super::delta::{FULL, PATCH, REFERENCED, SAME, SAME_ORDER};
use super::tokens::{self, View, Wire};

/// One entity's token bytes, with where each token starts.
#[derive(Debug, Default)]
struct Toks {
    bytes: Vec<u8>,
    starts: Vec<u32>,
}

impl Toks {
    fn view(&self) -> View<'_> {
        View {
            bytes: &self.bytes,
            starts: &self.starts,
            base: 0,
        }
    }
}

/// One entity as last written, and the one it was written against (for float predictions).
#[derive(Debug, Clone)]
struct Node {
    toks: Arc<Toks>,
    prev: Option<Arc<Toks>>,
}

#[derive(Debug)]
struct GroupState {
    name: &'static str,
    nodes: Vec<Node>,
}

/// The last frame written: what the next one is written against.
#[derive(Debug)]
struct State {
    head: Node,
    groups: Vec<GroupState>,
}

/// Buffers reused from frame to frame.
#[derive(Debug, Default)]
struct Scratch {
    patch: Vec<u8>,
    positions: Vec<u8>,
    values: Vec<u8>,
    /// Token buffers of entities no frame refers to any more.
    spare: Vec<Toks>,
}

/// At most this many spare buffers are kept.
const SPARE: usize = 4096;

/// Writes frames; keeps the last one.
#[derive(Debug, Default)]
pub(crate) struct Encoder {
    state: Option<State>,
    wire: Wire,
    scratch: Scratch,
}

impl Encoder {
    /// Serializes the next snapshot; [`Encoder::encode`] then writes it. Fails, writing
    /// nothing, when `value` has no JSON form.
    pub(crate) fn prepare<T: serde::Serialize + ?Sized>(
        &mut self,
        value: &T,
    ) -> Result<(), tokens::Error> {
        self.wire.fill(value)
    }

    /// Appends the frame of the prepared snapshot to `out`: whole when `key`, else as changes.
    pub(crate) fn encode(&mut self, key: bool, out: &mut Vec<u8>) {
        let previous = self.state.take();
        let reference = previous.as_ref().filter(|_| !key);
        let scratch = &mut self.scratch;
        let wire = &self.wire;
        let head = entity(scratch, out, wire.head(), reference.map(|p| &p.head));
        codec::put_varint(out, wire.groups.len() as u64);
        let mut groups = Vec::with_capacity(wire.groups.len());
        for group in &wire.groups {
            let found = reference.and_then(|p| p.groups.iter().position(|g| g.name == group.name));
            if let Some(r) = found {
                codec::put_varint(out, r as u64 + 1);
            } else {
                codec::put_varint(out, 0);
                codec::put_str(out, group.name);
            }
            let nodes = found.and_then(|r| reference.map(|p| &p.groups[r].nodes[..]));
            let views: Vec<View<'_>> = group.entities.iter().map(|&s| wire.entity(s)).collect();
            let nodes = write_group(scratch, out, &views, nodes.unwrap_or(&[]));
            groups.push(GroupState {
                name: group.name,
                nodes,
            });
        }
        self.state = Some(State { head, groups });
        if let Some(previous) = previous {
            recycle(&mut self.scratch.spare, previous);
        }
    }
}

/// Keeps the token buffers of `state` that no newer frame refers to.
fn recycle(spare: &mut Vec<Toks>, state: State) {
    let nodes = std::iter::once(state.head).chain(state.groups.into_iter().flat_map(|g| g.nodes));
    for node in nodes {
        for toks in std::iter::once(node.toks).chain(node.prev) {
            if spare.len() >= SPARE {
                return;
            }
            if let Ok(mut toks) = Arc::try_unwrap(toks) {
                toks.bytes.clear();
                toks.starts.clear();
                spare.push(toks);
            }
        }
    }
}

fn write_group(
    scratch: &mut Scratch,
    out: &mut Vec<u8>,
    entities: &[View<'_>],
    reference: &[Node],
) -> Vec<Node> {
    codec::put_varint(out, entities.len() as u64);
    let same_order = entities.len() == reference.len()
        && entities
            .iter()
            .zip(reference)
            .all(|(e, r)| e.identity() == r.toks.view().identity());
    if same_order {
        out.push(SAME_ORDER);
        return entities
            .iter()
            .zip(reference)
            .map(|(e, r)| entity(scratch, out, *e, Some(r)))
            .collect();
    }
    out.push(REFERENCED);
    let views: Vec<View<'_>> = reference.iter().map(|r| r.toks.view()).collect();
    let mut by_identity: HashMap<&[u8], usize> = HashMap::with_capacity(reference.len());
    for (i, r) in views.iter().enumerate() {
        by_identity.entry(r.identity()).or_insert(i);
    }
    let refs: Vec<Option<usize>> = entities
        .iter()
        .map(|e| by_identity.get(e.identity()).copied())
        .collect();
    for r in &refs {
        codec::put_varint(out, r.map_or(0, |r| r as u64 + 1));
    }
    entities
        .iter()
        .zip(refs)
        .map(|(e, r)| entity(scratch, out, *e, r.map(|r| &reference[r])))
        .collect()
}

/// Writes one entity against its reference: same, patched, or full.
fn entity(
    scratch: &mut Scratch,
    out: &mut Vec<u8>,
    new: View<'_>,
    reference: Option<&Node>,
) -> Node {
    let Some(reference) = reference else {
        put_full(out, new);
        return Node {
            toks: keep(scratch, new),
            prev: None,
        };
    };
    let old = reference.toks.view();
    if new.starts.len() == old.starts.len() && new.bytes == old.bytes {
        out.push(SAME);
        return Node {
            toks: reference.toks.clone(),
            prev: Some(reference.toks.clone()),
        };
    }
    if put_patch(scratch, new, reference) {
        out.push(PATCH);
        out.extend_from_slice(&scratch.patch);
        Node {
            toks: keep(scratch, new),
            prev: Some(reference.toks.clone()),
        }
    } else {
        put_full(out, new);
        Node {
            toks: keep(scratch, new),
            prev: None,
        }
    }
}

/// A copy of `view`'s tokens for the next frame to be written against.
fn keep(scratch: &mut Scratch, view: View<'_>) -> Arc<Toks> {
    let mut toks = scratch.spare.pop().unwrap_or_default();
    toks.bytes.extend_from_slice(view.bytes);
    toks.starts
        .extend(view.starts.iter().map(|&s| s - view.base));
    Arc::new(toks)
}

fn put_full(out: &mut Vec<u8>, view: View<'_>) {
    out.push(FULL);
    codec::put_varint(out, view.starts.len() as u64);
    out.extend_from_slice(view.bytes);
}

/// How many bytes `a` and `b` have in common at their start.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    for (x, y) in a[..n].chunks_exact(8).zip(b[..n].chunks_exact(8)) {
        let x = u64::from_le_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(y.try_into().expect("8 bytes"));
        if x != y {
            return i + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Writes the changed tokens of `new` against `reference` into `scratch.patch`; false when the
/// shapes differ. Tokens are self-delimiting, so the first byte that differs lies in the first
/// token that differs, at the same place in both: the bytes before it are skipped unparsed.
/// The positions come first and the values after them: the same fields change from frame to
/// frame, so the positions repeat and compress to almost nothing.
fn put_patch(scratch: &mut Scratch, new: View<'_>, reference: &Node) -> bool {
    let old = reference.toks.view();
    let n = new.starts.len();
    if n != old.starts.len() {
        return false;
    }
    let before = reference
        .prev
        .as_deref()
        .map(Toks::view)
        .filter(|p| p.starts.len() == n);
    scratch.positions.clear();
    scratch.values.clear();
    let (mut count, mut last, mut i) = (0u64, 0usize, 0usize);
    while i < n {
        let (a, b) = (new.start(i), old.start(i));
        let common = common_prefix(&new.bytes[a..], &old.bytes[b..]);
        if a + common == new.bytes.len() && b + common == old.bytes.len() {
            break;
        }
        // The token holding the first differing byte: the last one starting at or before it.
        let j = i + new.starts[i..].partition_point(|&s| (s - new.base) as usize <= a + common) - 1;
        count += 1;
        codec::put_varint(&mut scratch.positions, (j - last) as u64);
        last = j + 1;
        let pp = before.map(|p| p.token(j)).and_then(float);
        if !put_change(&mut scratch.values, new.token(j), old.token(j), pp) {
            return false;
        }
        i = j + 1;
    }
    scratch.patch.clear();
    codec::put_varint(&mut scratch.patch, count);
    scratch.patch.extend_from_slice(&scratch.positions);
    scratch.patch.extend_from_slice(&scratch.values);
    true
}

fn float(token: &[u8]) -> Option<f64> {
    match token {
        [5, bits @ ..] => Some(f64::from_bits(u64::from_le_bytes(bits.try_into().ok()?))),
        _ => None,
    }
}

fn varint(mut bytes: &[u8]) -> Option<u64> {
    codec::get_varint(&mut bytes).ok()
}

/// Writes the new value of a changed token in its short form; false when it cannot be patched
/// (its kind changed, or it is a null, a key, a count or a splice).
fn put_change(values: &mut Vec<u8>, new: &[u8], old: &[u8], pp: Option<f64>) -> bool {
    match (new.first(), old.first()) {
        (Some(1 | 2), Some(1 | 2)) => true,
        (Some(3), Some(3)) => match (varint(&new[1..]), varint(&old[1..])) {
            (Some(c), Some(p)) => {
                codec::put_varint(values, codec::zigzag(c.wrapping_sub(p) as i64));
                true
            }
            _ => false,
        },
        (Some(4), Some(4)) => match (varint(&new[1..]), varint(&old[1..])) {
            (Some(c), Some(p)) => {
                let (c, p) = (codec::unzigzag(c), codec::unzigzag(p));
                codec::put_varint(values, codec::zigzag(c.wrapping_sub(p)));
                true
            }
            _ => false,
        },
        (Some(5), Some(5)) => match (float(new), float(old)) {
            (Some(c), Some(p)) => {
                codec::put_float_change(values, c, p, pp);
                true
            }
            _ => false,
        },
        // A string token is its kind and then the string as a patch writes it.
        (Some(6), Some(6)) => {
            values.extend_from_slice(&new[1..]);
            true
        }
        _ => false,
    }
}
