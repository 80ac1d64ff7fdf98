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
//! [`super::encoder`] writes frames; this module reads them. Encoder and decoder keep the same
//! state (the last frame's entities, each with the one it was patched from, for the linear
//! prediction of floats), so a frame decodes only after the frames since the last key frame.

use std::sync::Arc;

use super::codec::{self, Corrupt, Result};
use super::tokens::{Text, Tok};
#[cfg(test)]
use crate::model::Snapshot;

pub(crate) const FULL: u8 = 0;
pub(crate) const SAME: u8 = 1;
pub(crate) const PATCH: u8 = 2;
/// Entities appear in the same order as in the previous frame's group.
pub(crate) const SAME_ORDER: u8 = 0;
/// Each entity names its reference in the previous frame's group (or none).
pub(crate) const REFERENCED: u8 = 1;

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

impl State {
    /// The snapshot's JSON value (the slow way, which the tests compare with).
    #[cfg(test)]
    pub(crate) fn value(&self) -> std::result::Result<serde_json::Value, super::tokens::Error> {
        let groups: Vec<&[Node]> = self.groups.iter().map(|g| g.nodes.as_slice()).collect();
        super::tokens::to_value(&self.head.toks, &groups)
    }

    /// The snapshot, as `--json` would have read it.
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> std::result::Result<Snapshot, Corrupt> {
        self.read()
    }

    /// The frame read as a `T`: a [`crate::model::Snapshot`], or a type with only some of its
    /// fields, whose other fields are skipped without being built.
    pub(crate) fn read<T: serde::de::DeserializeOwned>(&self) -> std::result::Result<T, Corrupt> {
        let groups: Vec<&[Node]> = self.groups.iter().map(|g| g.nodes.as_slice()).collect();
        super::de::from_tokens(&self.head.toks, &groups)
            .map_err(|e| Corrupt(format!("a frame does not make a snapshot: {e}")))
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

/// Reads frames; keeps the last one.
#[derive(Debug, Default, Clone)]
pub(crate) struct Decoder {
    state: Option<State>,
}

/// The most entities, or tokens in one entity, a frame may claim: far above any machine.
const MAX_COUNT: u64 = 1 << 24;

/// The most entities and tokens one frame may hold in all: about ten times a frame of 16 GPUs,
/// 1,000 GPU processes and the tree view's 10,000 host processes. A token takes a byte of a
/// block and 24 in memory: a review's 3 KB file of one group of 3 million null entities took
/// 786 MB to read.
const MAX_FRAME_ENTITIES: usize = 1 << 18;
const MAX_FRAME_TOKENS: usize = 1 << 22;

/// What a frame has decoded so far, against [`MAX_FRAME_ENTITIES`] and [`MAX_FRAME_TOKENS`].
#[derive(Default)]
struct Budget {
    entities: usize,
    tokens: usize,
}

impl Budget {
    fn take(&mut self, tokens: usize) -> Result<()> {
        self.entities += 1;
        self.tokens += tokens;
        self.check(0)
    }

    /// Refuses a frame that would pass either bound with `more` entities.
    fn check(&self, more: usize) -> Result<()> {
        if self.entities + more > MAX_FRAME_ENTITIES || self.tokens > MAX_FRAME_TOKENS {
            return Err(Corrupt(format!(
                "a frame holds more than {MAX_FRAME_ENTITIES} entities or {MAX_FRAME_TOKENS} \
                 values, far more than any machine's"
            )));
        }
        Ok(())
    }
}

impl Decoder {
    /// The last frame decoded.
    pub(crate) fn state(&self) -> Option<&State> {
        self.state.as_ref()
    }

    /// About how many bytes the state takes: every entity's tokens, and those of the frame
    /// before that it keeps for predicting numbers. Tokens shared with other states are
    /// counted in full, and texts (shared by every frame) not at all.
    pub(crate) fn weight(&self) -> usize {
        let node = |n: &Node| {
            std::mem::size_of::<Node>()
                + (n.toks.len() + n.prev.as_ref().map_or(0, |p| p.len()))
                    * std::mem::size_of::<Tok>()
        };
        self.state.as_ref().map_or(0, |state| {
            node(&state.head)
                + state
                    .groups
                    .iter()
                    .flat_map(|g| &g.nodes)
                    .map(node)
                    .sum::<usize>()
        })
    }

    /// Decodes one frame's body; on error the state is gone.
    pub(crate) fn decode(&mut self, key: bool, mut input: &[u8]) -> Result<()> {
        let previous = if key { None } else { self.state.take() };
        if !key && previous.is_none() {
            return Err(Corrupt("a change frame has no frame before it".into()));
        }
        let previous = previous.as_ref();
        let input = &mut input;
        let budget = &mut Budget::default();
        let head = get_entity(input, previous.map(|p| &p.head), budget)?;
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
            let nodes = get_group(input, reference.map_or(&[][..], |g| &g.nodes[..]), budget)?;
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

fn get_group(input: &mut &[u8], reference: &[Node], budget: &mut Budget) -> Result<Vec<Node>> {
    let count = get_count(input)?;
    budget.check(count)?;
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
        .map(|r| get_entity(input, r.map(|r| &reference[r]), budget))
        .collect()
}

fn get_entity(input: &mut &[u8], reference: Option<&Node>, budget: &mut Budget) -> Result<Node> {
    match (codec::get_u8(input)?, reference) {
        (FULL, _) => {
            let count = get_count(input)?;
            budget.take(count)?;
            let toks = (0..count)
                .map(|_| codec::get_tok(input))
                .collect::<Result<Vec<Tok>>>()?;
            Ok(Node {
                toks: Arc::new(toks),
                prev: None,
            })
        }
        (SAME, Some(reference)) => budget.take(reference.toks.len()).map(|()| Node {
            toks: reference.toks.clone(),
            prev: Some(reference.toks.clone()),
        }),
        (PATCH, Some(reference)) => {
            budget.take(reference.toks.len())?;
            get_patch(input, reference)
        }
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
    use crate::record::encoder::Encoder;

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
            p.command = Some(format!("python train.py --rank {pid}").into());
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
            encoder.prepare(s).unwrap();
            encoder.encode(key, &mut out);
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
        encoder.prepare(&snapshot(0, &[1, 2])).unwrap();
        encoder.encode(true, &mut out);
        for cut in 0..out.len() {
            assert!(decoder.decode(true, &out[..cut]).is_err(), "cut at {cut}");
        }
        decoder.decode(true, &out).unwrap();
        let mut change = Vec::new();
        encoder.prepare(&snapshot(1, &[1, 2])).unwrap();
        encoder.encode(false, &mut change);
        let mut garbage = change.clone();
        garbage.push(0);
        assert!(decoder.clone().decode(false, &garbage).is_err());
        decoder.decode(false, &change).unwrap();
    }

    /// A review: a 3 KB file of one group of 3 million one-null entities took 786 MB to read.
    #[test]
    fn a_frame_past_any_machine_is_refused_before_it_is_held() {
        // A key frame: a head of one null, then one group of `n` entities of one null each.
        let frame = |n: u64| {
            let mut out = vec![FULL, 1, 0];
            codec::put_varint(&mut out, 1);
            out.push(0);
            codec::put_str(&mut out, "processes");
            codec::put_varint(&mut out, n);
            out.push(REFERENCED);
            out.extend(std::iter::repeat_n(0u8, n as usize));
            for _ in 0..n {
                out.extend([FULL, 1, 0]);
            }
            out
        };
        let fits = MAX_FRAME_ENTITIES as u64 - 1;
        assert!(Decoder::default().decode(true, &frame(fits)).is_ok());
        let err = Decoder::default()
            .decode(true, &frame(fits + 1))
            .unwrap_err();
        assert!(err.0.contains("more than 262144 entities"), "{err:?}");
    }
}
