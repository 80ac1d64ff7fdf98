//! Snapshots as flat streams of JSON-shaped tokens, and back to JSON values.
//!
//! A recording stores what `--json` would print, so the tokens follow serde_json's data model
//! (an `Option` is its value or null, a unit variant is its name, a struct is a map with its
//! field names). The top-level lists (GPUs, processes, jobs, warnings, the host process table)
//! are split off into groups of one token stream per element, so that a frame can say "this GPU
//! did not change" or "only these three figures of that process did".
//!
//! The writer serializes a snapshot straight to token bytes ([`Wire`]); the reader decodes
//! those bytes into [`Tok`]s.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::ser;

mod key;
mod serializer;
mod wire;

pub(crate) use wire::Wire;

/// A string in a token, shared by the frames that did not change it (a patch copies an
/// entity's tokens, not its strings).
#[derive(Debug, Clone)]
pub(crate) struct Text(Arc<str>);

impl Text {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text(Arc::from(s))
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text(Arc::from(s))
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.as_str() == other.as_str()
    }
}

impl Eq for Text {}

impl Hash for Text {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

/// One token. Floats are kept as their bits, so that equal means bit-identical.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Tok {
    Null,
    Bool(bool),
    /// A non-negative integer.
    U(u64),
    /// A negative integer.
    I(i64),
    /// An `f64`, as `to_bits`.
    F(u64),
    Str(Text),
    /// A sequence of this many values.
    Seq(u32),
    /// A map of this many key/value pairs; each key is a [`Tok::Key`].
    Map(u32),
    Key(Text),
    /// Only in a frame's head: the list at this place is group number N of the frame.
    Splice(u32),
}

/// One entity's token bytes (each token as [`super::codec::get_tok`] reads it) and where each
/// token starts: `starts[i] - base` is the offset of token `i` in `bytes`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) starts: &'a [u32],
    pub(crate) base: u32,
}

impl<'a> View<'a> {
    /// Where token `i` starts; the end of the bytes for `i` = the number of tokens.
    pub(crate) fn start(&self, i: usize) -> usize {
        self.starts
            .get(i)
            .map_or(self.bytes.len(), |&s| (s - self.base) as usize)
    }

    pub(crate) fn token(&self, i: usize) -> &'a [u8] {
        &self.bytes[self.start(i)..self.start(i + 1)]
    }

    /// What matches an entity with its predecessor: its first two fields and their values
    /// (tokens 1 to 4: key, value, key, value).
    pub(crate) fn identity(&self) -> &'a [u8] {
        let n = self.starts.len();
        &self.bytes[self.start(1.min(n))..self.start(5.min(n))]
    }
}

/// The top-level fields whose elements become entities of their own.
pub(crate) const SPLIT_FIELDS: [&str; 5] =
    ["gpus", "processes", "jobs", "warnings", "host_processes"];

/// A list split off the head: its field name and one token stream per element.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    pub(crate) name: &'static str,
    pub(crate) entities: Vec<Vec<Tok>>,
}

/// A snapshot as tokens: the head (everything but the split lists) and the groups.
#[cfg(test)]
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Split {
    pub(crate) head: Vec<Tok>,
    pub(crate) groups: Vec<Group>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

/// Serializes `value` (a snapshot) into a head and groups, as tokens.
#[cfg(test)]
pub(crate) fn split<T: serde::Serialize + ?Sized>(value: &T) -> Result<Split, Error> {
    let mut wire = Wire::default();
    wire.fill(value)?;
    let toks = |view: View<'_>| -> Result<Vec<Tok>, Error> {
        let mut bytes = view.bytes;
        let mut toks = Vec::new();
        for i in 0..view.starts.len() {
            if view.start(i) != view.bytes.len() - bytes.len() {
                return Err(Error(format!("token {i} does not start where it says")));
            }
            toks.push(super::codec::get_tok(&mut bytes).map_err(|e| Error(e.0))?);
        }
        if !bytes.is_empty() {
            return Err(Error("an entity has bytes after its last token".into()));
        }
        Ok(toks)
    };
    let mut groups = Vec::new();
    for group in &wire.groups {
        let entities = group
            .entities
            .iter()
            .map(|&span| toks(wire.entity(span)))
            .collect::<Result<_, _>>()?;
        groups.push(Group {
            name: group.name,
            entities,
        });
    }
    Ok(Split {
        head: toks(wire.head())?,
        groups,
    })
}

/// The deepest nesting a token stream from a file may have.
#[cfg(test)]
const MAX_DEPTH: usize = 64;

/// Rebuilds the JSON value of a snapshot from its head and the entities of its groups (the
/// reference that [`super::de`] is tested against).
#[cfg(test)]
pub(crate) fn to_value<E: AsRef<[Tok]>>(
    head: &[Tok],
    groups: &[&[E]],
) -> Result<serde_json::Value, Error> {
    let mut reader = Reader {
        tokens: head,
        at: 0,
        groups: Some(groups),
    };
    let value = reader.value(0)?;
    if reader.at != head.len() {
        return Err(Error("the head has tokens after its end".into()));
    }
    Ok(value)
}

#[cfg(test)]
struct Reader<'t, E> {
    tokens: &'t [Tok],
    at: usize,
    groups: Option<&'t [&'t [E]]>,
}

#[cfg(test)]
impl<E: AsRef<[Tok]>> Reader<'_, E> {
    fn next(&mut self) -> Result<&Tok, Error> {
        let tok = self
            .tokens
            .get(self.at)
            .ok_or_else(|| Error("a value ends early".into()))?;
        self.at += 1;
        Ok(tok)
    }

    fn value(&mut self, depth: usize) -> Result<serde_json::Value, Error> {
        use serde_json::Value;
        if depth > MAX_DEPTH {
            return Err(Error(format!("values nest deeper than {MAX_DEPTH}")));
        }
        let left = self.tokens.len() - self.at;
        Ok(match self.next()?.clone() {
            Tok::Null => Value::Null,
            Tok::Bool(b) => Value::Bool(b),
            Tok::U(u) => Value::from(u),
            Tok::I(i) => Value::from(i),
            Tok::F(bits) => Value::from(f64::from_bits(bits)),
            Tok::Str(s) => Value::String(s.as_str().to_string()),
            Tok::Seq(n) => {
                let mut items = Vec::with_capacity((n as usize).min(left));
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Value::Array(items)
            }
            Tok::Map(n) => {
                let mut map = serde_json::Map::new();
                for _ in 0..n {
                    let Tok::Key(key) = self.next()?.clone() else {
                        return Err(Error("a map entry has no key".into()));
                    };
                    let value = self.value(depth + 1)?;
                    map.insert(key.as_str().to_string(), value);
                }
                Value::Object(map)
            }
            Tok::Key(_) => return Err(Error("a key stands where a value should".into())),
            Tok::Splice(g) => self.group(g, depth)?,
        })
    }

    fn group(&mut self, g: u32, depth: usize) -> Result<serde_json::Value, Error> {
        let group = self
            .groups
            .and_then(|groups| groups.get(g as usize))
            .ok_or_else(|| Error(format!("the head names group {g}, which the frame lacks")))?;
        let mut items = Vec::with_capacity(group.len());
        for entity in *group {
            let tokens = entity.as_ref();
            let mut reader: Reader<'_, E> = Reader {
                tokens,
                at: 0,
                groups: None,
            };
            items.push(reader.value(depth + 1)?);
            if reader.at != tokens.len() {
                return Err(Error("an entity has tokens after its end".into()));
            }
        }
        Ok(serde_json::Value::Array(items))
    }
}

#[cfg(test)]
impl Split {
    /// The JSON value of this snapshot.
    #[cfg(test)]
    pub(crate) fn to_value(&self) -> Result<serde_json::Value, Error> {
        let groups: Vec<&[Vec<Tok>]> = self.groups.iter().map(|g| g.entities.as_slice()).collect();
        to_value(&self.head, &groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        GpuProcess, GpuSample, HostProcess, ProcessKind, Snapshot, Subject, Warning,
    };

    fn snapshot() -> Snapshot {
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        snapshot.unix_seconds = 1234.5678;
        snapshot.gpus.push(GpuSample {
            index: 0,
            name: Some("GPU \"zero\"".into()),
            power_w: Some(412.125),
            throttle_reasons: Some(vec!["sw_power_cap".into()].into()),
            ..Default::default()
        });
        let mut process = GpuProcess::new(42, 0, ProcessKind::Both);
        process.nice = Some(-5);
        process.cpu_percent = Some(f64::MIN_POSITIVE);
        snapshot.processes.push(process);
        snapshot.warnings.push(Warning {
            id: "leak".into(),
            severity: crate::model::Severity::Warn,
            subject: Subject::Process { pid: 42 },
            message: "m".into(),
            evidence: vec![("a".into(), "b".into())],
            remedy: "r".into(),
            since: "t".into(),
        });
        snapshot.host_processes.push(HostProcess {
            pid: 1,
            state: 'S',
            ..Default::default()
        });
        snapshot
    }

    #[test]
    fn the_lists_are_split_off_and_the_json_comes_back_identical() {
        let snapshot = snapshot();
        let split = split(&snapshot).unwrap();
        let names: Vec<&str> = split.groups.iter().map(|g| g.name).collect();
        assert_eq!(names, SPLIT_FIELDS);
        assert_eq!(split.groups[1].entities.len(), 1);
        assert!(split.head.contains(&Tok::Splice(0)));
        let value = split.to_value().unwrap();
        let back: Snapshot = serde_json::from_value(value).unwrap();
        assert_eq!(back, snapshot);
        assert_eq!(
            serde_json::to_string(&back).unwrap(),
            serde_json::to_string(&snapshot).unwrap()
        );
    }

    #[test]
    fn the_wire_bytes_are_the_tokens_bytes_also_for_counts_over_127() {
        let mut snapshot = snapshot();
        // 300 pairs: a count that takes two bytes, written once the container closes.
        snapshot.warnings[0].evidence = (0..300)
            .map(|i| (format!("k{i}"), format!("v{i}")))
            .collect();
        snapshot.warnings.push(snapshot.warnings[0].clone());
        let split = split(&snapshot).unwrap();
        let back: Snapshot = serde_json::from_value(split.to_value().unwrap()).unwrap();
        assert_eq!(back, snapshot);
        let mut wire = Wire::default();
        wire.fill(&snapshot).unwrap();
        for (group, tokens) in wire.groups.iter().zip(&split.groups) {
            for (&span, toks) in group.entities.iter().zip(&tokens.entities) {
                let mut bytes = Vec::new();
                for t in toks {
                    super::super::codec::put_tok(&mut bytes, t);
                }
                assert_eq!(wire.entity(span).bytes, &bytes[..], "{}", group.name);
            }
        }
    }

    #[test]
    fn a_stream_that_ends_early_or_lies_about_its_counts_is_an_error() {
        let mut split = split(&snapshot()).unwrap();
        split.head.truncate(split.head.len() - 2);
        assert!(split.to_value().is_err());
        let lying = Split {
            head: vec![Tok::Seq(u32::MAX)],
            groups: vec![],
        };
        assert!(lying.to_value().is_err());
        let deep = Split {
            head: vec![Tok::Seq(1); 10_000],
            groups: vec![],
        };
        assert!(deep.to_value().unwrap_err().0.contains("deeper"));
    }
}
