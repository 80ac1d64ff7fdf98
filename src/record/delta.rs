//! Frames: a snapshot written as its changes since the previous frame, or whole (a key frame).
//!
//! A snapshot is a head and groups of entities (see [`super::tokens`]). Each entity of a frame
//! is matched with the one of the previous frame that has the same identity (its first two
//! fields: a GPU's index and name, a process's pid and GPU, a warning's id and severity), and
//! written as one of:
//! - *same*: one byte;
//! - *patch*: which tokens changed and their new values in short form ([`super::codec`]), when
//!   the shape is the same (no value appeared or vanished);
//! - *full*: every token.
//!
//! Encoder and decoder keep the same state (the last frame's entities, each with the one it was
//! patched from, for the linear prediction of floats), so a frame decodes only after the frames
//! since the last key frame.

use std::collections::HashMap;
use std::sync::Arc;

use super::codec::{self, Corrupt, Result};
use super::tokens::{self, Hints, Split, Text, Tok};
use crate::model::Snapshot;

const FULL: u8 = 0;
const SAME: u8 = 1;
const PATCH: u8 = 2;
/// Entities appear in the same order as in the previous frame's group.
const SAME_ORDER: u8 = 0;
/// Each entity names its reference in the previous frame's group (or none).
const REFERENCED: u8 = 1;

/// One entity's tokens, and the tokens it was patched from (for float predictions).
#[derive(Debug, Clone)]
struct Node {
    toks: Arc<Vec<Tok>>,
    prev: Option<Arc<Vec<Tok>>>,
}

impl AsRef<[Tok]> for Node {
    fn as_ref(&self) -> &[Tok] {
        &self.toks
    }
}

#[derive(Debug, Clone)]
struct GroupState {
    name: Text,
    nodes: Vec<Node>,
}

/// A decoded (or encoded) frame: what the next frame is written against.
#[derive(Debug, Clone)]
pub(crate) struct State {
    head: Node,
    groups: Vec<GroupState>,
}

impl Hints for State {
    fn head(&self) -> Option<&[Tok]> {
        Some(&self.head.toks)
    }

    fn entity(&self, group: &str, index: usize) -> Option<&[Tok]> {
        let group = self.groups.iter().find(|g| g.name.as_str() == group)?;
        group.nodes.get(index).map(|n| n.toks.as_slice())
    }
}

impl State {
    /// The snapshot's JSON value (the slow way, which the tests compare with).
    #[cfg(test)]
    pub(crate) fn value(&self) -> std::result::Result<serde_json::Value, tokens::Error> {
        let groups: Vec<&[Node]> = self.groups.iter().map(|g| g.nodes.as_slice()).collect();
        tokens::to_value(&self.head.toks, &groups)
    }

    /// The snapshot, as `--json` would have read it.
    pub(crate) fn snapshot(&self) -> std::result::Result<Snapshot, Corrupt> {
        let groups: Vec<&[Node]> = self.groups.iter().map(|g| g.nodes.as_slice()).collect();
        super::de::from_tokens(&self.head.toks, &groups)
            .map_err(|e| Corrupt(format!("a frame does not make a snapshot: {e}")))
    }
}

/// Writes frames; keeps the last one.
#[derive(Debug, Default)]
pub(crate) struct Encoder {
    state: Option<State>,
    scratch: Vec<u8>,
}

impl Encoder {
    /// The tokens of `value`, sharing the strings that did not change since the last frame.
    pub(crate) fn split<T: serde::Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> std::result::Result<Split, tokens::Error> {
        match &self.state {
            Some(state) => tokens::split_with(value, state),
            None => tokens::split_with(value, &tokens::NoHints),
        }
    }

    /// Appends the frame of `split` to `out`: whole when `key`, else as changes.
    pub(crate) fn encode(&mut self, split: Split, key: bool, out: &mut Vec<u8>) {
        let previous = if key { None } else { self.state.take() };
        let previous = previous.as_ref();
        let head = Arc::new(split.head);
        let head = self.entity(out, head, previous.map(|p| &p.head));
        codec::put_varint(out, split.groups.len() as u64);
        let mut groups = Vec::with_capacity(split.groups.len());
        for group in split.groups {
            let reference =
                previous.and_then(|p| p.groups.iter().position(|g| g.name.as_str() == group.name));
            match reference {
                Some(r) => codec::put_varint(out, r as u64 + 1),
                None => {
                    codec::put_varint(out, 0);
                    codec::put_str(out, group.name);
                }
            }
            let reference = reference.and_then(|r| previous.map(|p| &p.groups[r].nodes[..]));
            let nodes = self.group(out, group.entities, reference.unwrap_or(&[]));
            groups.push(GroupState {
                name: Text::Static(group.name),
                nodes,
            });
        }
        self.state = Some(State { head, groups });
    }

    fn group(
        &mut self,
        out: &mut Vec<u8>,
        entities: Vec<Vec<Tok>>,
        reference: &[Node],
    ) -> Vec<Node> {
        codec::put_varint(out, entities.len() as u64);
        let same_order = entities.len() == reference.len()
            && entities
                .iter()
                .zip(reference)
                .all(|(e, r)| identity(e) == identity(&r.toks));
        let refs: Vec<Option<usize>> = if same_order {
            out.push(SAME_ORDER);
            (0..entities.len()).map(Some).collect()
        } else {
            out.push(REFERENCED);
            let mut by_identity: HashMap<&[Tok], usize> = HashMap::with_capacity(reference.len());
            for (i, r) in reference.iter().enumerate() {
                by_identity.entry(identity(&r.toks)).or_insert(i);
            }
            let refs: Vec<Option<usize>> = entities
                .iter()
                .map(|e| by_identity.get(identity(e)).copied())
                .collect();
            for r in &refs {
                codec::put_varint(out, r.map_or(0, |r| r as u64 + 1));
            }
            refs
        };
        entities
            .into_iter()
            .zip(refs)
            .map(|(toks, r)| self.entity(out, Arc::new(toks), r.map(|r| &reference[r])))
            .collect()
    }

    fn entity(&mut self, out: &mut Vec<u8>, toks: Arc<Vec<Tok>>, reference: Option<&Node>) -> Node {
        let Some(reference) = reference else {
            put_full(out, &toks);
            return Node { toks, prev: None };
        };
        if toks == reference.toks {
            out.push(SAME);
            return Node {
                toks,
                prev: Some(reference.toks.clone()),
            };
        }
        self.scratch.clear();
        if put_patch(&mut self.scratch, &toks, reference) {
            out.push(PATCH);
            out.extend_from_slice(&self.scratch);
            Node {
                toks,
                prev: Some(reference.toks.clone()),
            }
        } else {
            put_full(out, &toks);
            Node { toks, prev: None }
        }
    }
}

/// What matches an entity with its predecessor: its first two fields and their values.
fn identity(toks: &[Tok]) -> &[Tok] {
    &toks[1.min(toks.len())..5.min(toks.len())]
}

fn put_full(out: &mut Vec<u8>, toks: &[Tok]) {
    out.push(FULL);
    codec::put_varint(out, toks.len() as u64);
    for tok in toks {
        codec::put_tok(out, tok);
    }
}

/// The float `i` of the entity before the reference, for the linear prediction.
fn before(reference: &Node, i: usize, len: usize) -> Option<f64> {
    match reference.prev.as_deref() {
        Some(prev) if prev.len() == len => match prev[i] {
            Tok::F(bits) => Some(f64::from_bits(bits)),
            _ => None,
        },
        _ => None,
    }
}

/// Writes the changed tokens of `toks` against `reference`; false when the shapes differ.
/// The positions come first and the values after them: the same fields change from frame to
/// frame, so the positions repeat and compress to almost nothing.
fn put_patch(out: &mut Vec<u8>, toks: &[Tok], reference: &Node) -> bool {
    let old = &reference.toks;
    if toks.len() != old.len() {
        return false;
    }
    let mut positions = Vec::new();
    let mut values = Vec::new();
    let mut count = 0u64;
    let mut last = 0usize;
    for (i, (new, was)) in toks.iter().zip(old.iter()).enumerate() {
        if new == was {
            continue;
        }
        count += 1;
        codec::put_varint(&mut positions, (i - last) as u64);
        last = i + 1;
        match (new, was) {
            (Tok::Bool(_), Tok::Bool(_)) => {}
            (Tok::U(c), Tok::U(p)) => {
                codec::put_varint(&mut values, codec::zigzag(c.wrapping_sub(*p) as i64))
            }
            (Tok::I(c), Tok::I(p)) => {
                codec::put_varint(&mut values, codec::zigzag(c.wrapping_sub(*p)))
            }
            (Tok::F(c), Tok::F(p)) => codec::put_float_change(
                &mut values,
                f64::from_bits(*c),
                f64::from_bits(*p),
                before(reference, i, old.len()),
            ),
            (Tok::Str(c), Tok::Str(_)) => codec::put_str(&mut values, c.as_str()),
            _ => return false,
        }
    }
    codec::put_varint(out, count);
    out.extend_from_slice(&positions);
    out.extend_from_slice(&values);
    true
}

/// Reads frames; keeps the last one.
#[derive(Debug, Default, Clone)]
pub(crate) struct Decoder {
    state: Option<State>,
}

/// The most entities, or tokens in one entity, a frame may claim: far above any machine.
const MAX_COUNT: u64 = 1 << 24;

impl Decoder {
    /// The last frame decoded.
    pub(crate) fn state(&self) -> Option<&State> {
        self.state.as_ref()
    }

    /// Decodes one frame's body; on error the state is gone.
    pub(crate) fn decode(&mut self, key: bool, mut input: &[u8]) -> Result<()> {
        let previous = if key { None } else { self.state.take() };
        if !key && previous.is_none() {
            return Err(Corrupt("a change frame has no frame before it".into()));
        }
        let previous = previous.as_ref();
        let input = &mut input;
        let head = get_entity(input, previous.map(|p| &p.head))?;
        let count = get_count(input)?;
        let mut groups = Vec::new();
        for _ in 0..count {
            let reference = match codec::get_varint(input)? {
                0 => None,
                r => Some(
                    previous
                        .and_then(|p| p.groups.get(r as usize - 1))
                        .ok_or_else(|| Corrupt("a group refers to one that is not there".into()))?,
                ),
            };
            let name = match reference {
                Some(g) => g.name.clone(),
                None => Text::from(codec::get_str(input)?),
            };
            let nodes = get_group(input, reference.map_or(&[][..], |g| &g.nodes[..]))?;
            groups.push(GroupState { name, nodes });
        }
        if !input.is_empty() {
            return Err(Corrupt("a frame has bytes after its end".into()));
        }
        self.state = Some(State { head, groups });
        Ok(())
    }
}

fn get_count(input: &mut &[u8]) -> Result<usize> {
    let n = codec::get_varint(input)?;
    if n > MAX_COUNT || n > input.len() as u64 + 1 {
        return Err(Corrupt("a frame claims more entries than it holds".into()));
    }
    Ok(n as usize)
}

fn get_group(input: &mut &[u8], reference: &[Node]) -> Result<Vec<Node>> {
    let count = get_count(input)?;
    let refs: Vec<Option<usize>> = match codec::get_u8(input)? {
        SAME_ORDER if count == reference.len() => (0..count).map(Some).collect(),
        REFERENCED => (0..count)
            .map(|_| match codec::get_varint(input)? {
                0 => Ok(None),
                r if (r as usize) <= reference.len() => Ok(Some(r as usize - 1)),
                _ => Err(Corrupt("an entity refers to one that is not there".into())),
            })
            .collect::<Result<_>>()?,
        _ => return Err(Corrupt("a group's order is unreadable".into())),
    };
    refs.into_iter()
        .map(|r| get_entity(input, r.map(|r| &reference[r])))
        .collect()
}

fn get_entity(input: &mut &[u8], reference: Option<&Node>) -> Result<Node> {
    match (codec::get_u8(input)?, reference) {
        (FULL, _) => {
            let count = get_count(input)?;
            let toks = (0..count)
                .map(|_| codec::get_tok(input))
                .collect::<Result<Vec<Tok>>>()?;
            Ok(Node {
                toks: Arc::new(toks),
                prev: None,
            })
        }
        (SAME, Some(reference)) => Ok(Node {
            toks: reference.toks.clone(),
            prev: Some(reference.toks.clone()),
        }),
        (PATCH, Some(reference)) => get_patch(input, reference),
        _ => Err(Corrupt(
            "an entity is written against one that is not there".into(),
        )),
    }
}

fn get_patch(input: &mut &[u8], reference: &Node) -> Result<Node> {
    let old = &reference.toks;
    let mut toks: Vec<Tok> = old.as_ref().clone();
    let count = get_count(input)?;
    let mut positions = Vec::with_capacity(count);
    let mut at = 0usize;
    for _ in 0..count {
        let skip = codec::get_varint(input)?;
        let i = usize::try_from(skip)
            .ok()
            .and_then(|s| at.checked_add(s))
            .filter(|&i| i < toks.len())
            .ok_or_else(|| Corrupt("a change points past its entity".into()))?;
        positions.push(i);
        at = i + 1;
    }
    for i in positions {
        toks[i] = match &old[i] {
            Tok::Bool(b) => Tok::Bool(!b),
            Tok::U(p) => Tok::U(p.wrapping_add(codec::unzigzag(codec::get_varint(input)?) as u64)),
            Tok::I(p) => Tok::I(p.wrapping_add(codec::unzigzag(codec::get_varint(input)?))),
            Tok::F(p) => {
                let pp = before(reference, i, old.len());
                Tok::F(codec::get_float_change(input, f64::from_bits(*p), pp)?.to_bits())
            }
            Tok::Str(_) => Tok::Str(Text::from(codec::get_str(input)?)),
            _ => {
                return Err(Corrupt(
                    "a change touches a value that cannot change".into(),
                ))
            }
        };
    }
    Ok(Node {
        toks: Arc::new(toks),
        prev: Some(reference.toks.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuProcess, GpuSample, ProcessKind};

    fn snapshot(t: u32, pids: &[u32]) -> Snapshot {
        let mut s = Snapshot::at(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.into()));
        for index in 0..8 {
            s.gpus.push(GpuSample {
                index,
                name: Some("NVIDIA H100 80GB HBM3".into()),
                utilization_percent: Some((t * 7 + index) % 100),
                power_w: Some(400.0 + f64::from(t % 10) * 0.125),
                memory_used_bytes: Some(20 << 30),
                ..Default::default()
            });
        }
        for &pid in pids {
            let mut p = GpuProcess::new(pid, pid % 8, ProcessKind::Compute);
            p.command = Some(format!("python train.py --rank {pid}"));
            p.running_seconds = Some(f64::from(t) + 3125.36 - 3119.91);
            p.cpu_percent = Some(0.0);
            s.processes.push(p);
        }
        s
    }

    fn round_trip(snapshots: &[Snapshot], key_every: usize) -> Vec<usize> {
        let mut encoder = Encoder::default();
        let mut decoder = Decoder::default();
        let mut sizes = Vec::new();
        for (i, s) in snapshots.iter().enumerate() {
            let key = i % key_every == 0;
            let mut out = Vec::new();
            encoder.encode(tokens::split(s).unwrap(), key, &mut out);
            decoder.decode(key, &out).unwrap();
            let state = decoder.state().unwrap();
            let back = state.snapshot().unwrap();
            let by_value: Snapshot = serde_json::from_value(state.value().unwrap()).unwrap();
            assert_eq!(back, by_value);
            assert_eq!(
                serde_json::to_string(&back).unwrap(),
                serde_json::to_string(s).unwrap(),
                "frame {i}"
            );
            sizes.push(out.len());
        }
        sizes
    }

    #[test]
    fn frames_decode_to_the_same_json_and_changes_are_small() {
        let pids: Vec<u32> = (100..164).collect();
        let snapshots: Vec<Snapshot> = (0..20).map(|t| snapshot(t, &pids)).collect();
        let sizes = round_trip(&snapshots, 10);
        assert!(sizes[0] > 5000, "{sizes:?}");
        // A change frame: the time, 8 utilizations and powers, 64 running times.
        assert!(sizes[5] * 10 < sizes[0], "{sizes:?}");
    }

    #[test]
    fn processes_that_come_and_go_are_matched_by_identity() {
        let a: Vec<u32> = (100..110).collect();
        let b: Vec<u32> = (103..115).rev().collect();
        let snapshots = vec![
            snapshot(0, &a),
            snapshot(1, &b),
            snapshot(2, &a),
            snapshot(3, &[]),
        ];
        round_trip(&snapshots, 100);
    }

    #[test]
    fn a_change_frame_without_its_predecessor_or_with_bad_bytes_is_an_error() {
        let mut decoder = Decoder::default();
        assert!(decoder.decode(false, &[SAME]).is_err());
        let mut encoder = Encoder::default();
        let mut out = Vec::new();
        encoder.encode(
            tokens::split(&snapshot(0, &[1, 2])).unwrap(),
            true,
            &mut out,
        );
        for cut in 0..out.len() {
            assert!(decoder.decode(true, &out[..cut]).is_err(), "cut at {cut}");
        }
        decoder.decode(true, &out).unwrap();
        let mut change = Vec::new();
        encoder.encode(
            tokens::split(&snapshot(1, &[1, 2])).unwrap(),
            false,
            &mut change,
        );
        let mut garbage = change.clone();
        garbage.push(0);
        assert!(decoder.clone().decode(false, &garbage).is_err());
        decoder.decode(false, &change).unwrap();
    }
}
