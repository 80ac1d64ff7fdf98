//! A small unpickler for PyTorch memory snapshots. It reads the opcodes of pickle protocols 2
//! to 5 that carry plain data (dicts, lists, tuples, sets, str, bytes, int, float, bool, None)
//! and never executes anything: GLOBAL, STACK_GLOBAL, REDUCE, BUILD, NEWOBJ and the like become
//! opaque [`Data::Object`] values that name what they would have called.
//!
//! Values shared through the memo stay shared: a value is a copyable 8-byte handle, and
//! containers live once in an arena, so a frame list referenced by a million trace entries is
//! stored once. Hostile input gets an [`Error`] sentence, never a panic or an allocation that the
//! input's size does not pay for:
//! - every declared length is checked against the bytes that remain before anything is read;
//! - containers record how deep they nest, and nesting past [`MAX_DEPTH`] stops the read;
//! - what the reader holds (values, memo, strings) is capped at a multiple of the bytes read.

use std::collections::HashMap;
use std::io::{self, BufRead};
use std::rc::Rc;

/// Torch snapshots nest 7 levels (snapshot, segments, segment, blocks, block, frames, frame).
pub(crate) const MAX_DEPTH: u8 = 64;
/// Bytes the reader may hold per byte of input, plus [`BUDGET_FLOOR`]. Real snapshots need
/// about 2.5; a pickle that shares one value a million times needs many more.
const BUDGET_PER_INPUT_BYTE: u64 = 8;
const BUDGET_FLOOR: u64 = 16 << 20;
/// How many opcodes run between two checks of the budget.
const BUDGET_CHECK_EVERY: u32 = 4096;

/// Why a pickle could not be read: each message completes a sentence about the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("is empty")]
    Empty,
    #[error("is not a pickle: it does not start with a pickle protocol 2 to 5 header (torch writes snapshots with protocol 4)")]
    NotPickle,
    #[error("looks like a pickle of protocol 0 or 1, which torchtop does not read: it reads protocols 2 to 5 (torch writes snapshots with protocol 4); write it again with pickle.dump(snapshot, file, protocol=4)")]
    OldProtocol,
    #[error("uses pickle protocol {0}; torchtop reads protocols 2 to 5")]
    Protocol(u8),
    #[error(
        "ends early, at byte {0}: the file is truncated (still being written, or copied in part)"
    )]
    Truncated(u64),
    #[error("declares a {declared}-byte value at byte {offset} but only {remaining} bytes follow: the file is corrupt or crafted")]
    HugeLength {
        offset: u64,
        declared: u64,
        remaining: u64,
    },
    #[error("nests values deeper than {MAX_DEPTH} levels (at byte {0}); torch snapshots nest 7: the file is corrupt or crafted")]
    TooDeep(u64),
    #[error("builds far more values than its {0} bytes can hold (a memo bomb?): the file is corrupt or crafted")]
    TooBig(u64),
    #[error("uses pickle opcode 0x{opcode:02x} at byte {offset}, which snapshot files never use")]
    Unsupported { offset: u64, opcode: u8 },
    #[error("is not a valid pickle: {what} at byte {offset}")]
    Malformed { offset: u64, what: &'static str },
    #[error("could not be read: {0}")]
    Io(#[from] io::Error),
}

type Result<T> = std::result::Result<T, Error>;

/// A handle to one unpickled value: a tag and a 60-bit payload (an inline integer, or an index
/// into one of the [`Pickle`]'s tables).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Value(u64);

const TAG_SHIFT: u32 = 60;
const PAYLOAD: u64 = (1 << TAG_SHIFT) - 1;
const INLINE_MIN: i64 = -(1 << 59);
const INLINE_MAX: i64 = (1 << 59) - 1;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Tag {
    None = 0,
    False,
    True,
    Int,
    BigInt,
    HugeInt,
    Float,
    Str,
    Bytes,
    Node,
}

impl Value {
    pub(crate) const NONE: Value = Value::new(Tag::None, 0);

    const fn new(tag: Tag, payload: u64) -> Value {
        Value(((tag as u64) << TAG_SHIFT) | (payload & PAYLOAD))
    }

    fn tag(self) -> u8 {
        (self.0 >> TAG_SHIFT) as u8
    }

    fn payload(self) -> u64 {
        self.0 & PAYLOAD
    }

    /// The arena index of a container or object, to cache what was made of it.
    pub(crate) fn node(self) -> Option<u32> {
        (self.tag() == Tag::Node as u8).then_some(self.payload() as u32)
    }
}

/// What a [`Value`] holds. Dict items alternate key and value.
#[derive(Debug, PartialEq)]
pub(crate) enum Data<'a> {
    None,
    Bool(bool),
    Int(i128),
    /// An integer wider than 128 bits, with its byte count.
    HugeInt(u64),
    Float(f64),
    Str(&'a str),
    Bytes(&'a [u8]),
    List(&'a [Value]),
    Tuple(&'a [Value]),
    Dict(&'a [Value]),
    Set(&'a [Value]),
    Object(ObjectKind, &'a [Value]),
}

/// A call the pickle asks for and this reader records instead of making.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ObjectKind {
    /// `[module, name]`
    Global,
    /// `[callable, args]`, then anything appended or set on the result.
    Reduce,
    /// `[object, state]`
    Build,
    /// `[class, args]` or `[class, args, kwargs]`
    NewObj,
    /// `[persistent id]`
    Persistent,
    /// `[extension code]`
    Extension,
    /// An out-of-band buffer (protocol 5).
    Buffer,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    List,
    Tuple,
    Dict,
    Set,
    Object(ObjectKind),
}

/// A container's items: `len` values from `start` in the arena, with room for `cap`.
#[derive(Clone, Copy, Debug)]
struct Node {
    start: u32,
    len: u32,
    cap: u32,
    kind: Kind,
    depth: u8,
}

/// An unpickled file: the root value and the tables its handles point into.
pub(crate) struct Pickle {
    root: Value,
    nodes: Vec<Node>,
    items: Vec<Value>,
    strings: Vec<Rc<str>>,
    string_ids: HashMap<Rc<str>, u32, ahash::RandomState>,
    bigs: Vec<i128>,
    floats: Vec<f64>,
    bytes: Vec<Box<[u8]>>,
    input_len: u64,
}

impl Pickle {
    /// Reads one pickle. `len` is the input's size when known (a file), so that declared
    /// lengths are refused before anything is allocated for them.
    pub(crate) fn read(input: impl BufRead, len: Option<u64>) -> Result<Pickle> {
        let mut reader = Reader::new(input, len);
        reader.run()?;
        let input_len = reader.input.offset;
        let root = reader.result.ok_or(Error::Truncated(input_len))?;
        let Reader { pickle, .. } = reader;
        Ok(Pickle {
            root,
            input_len,
            ..pickle
        })
    }

    pub(crate) fn root(&self) -> Value {
        self.root
    }

    /// The number of bytes the pickle took up.
    pub(crate) fn input_len(&self) -> u64 {
        self.input_len
    }

    /// How many containers and objects the pickle holds, for tables indexed by [`Value::node`].
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The value of the string `text`, if the pickle holds that string anywhere: dict keys are
    /// then found by comparing handles.
    pub(crate) fn str_value(&self, text: &str) -> Option<Value> {
        self.string_ids
            .get(text)
            .map(|&id| Value::new(Tag::Str, u64::from(id)))
    }

    pub(crate) fn get(&self, value: Value) -> Data<'_> {
        let payload = value.payload();
        match value.tag() {
            t if t == Tag::False as u8 => Data::Bool(false),
            t if t == Tag::True as u8 => Data::Bool(true),
            t if t == Tag::Int as u8 => Data::Int(i128::from(((payload << 4) as i64) >> 4)),
            t if t == Tag::BigInt as u8 => Data::Int(self.bigs[payload as usize]),
            t if t == Tag::HugeInt as u8 => Data::HugeInt(payload),
            t if t == Tag::Float as u8 => Data::Float(self.floats[payload as usize]),
            t if t == Tag::Str as u8 => Data::Str(&self.strings[payload as usize]),
            t if t == Tag::Bytes as u8 => Data::Bytes(&self.bytes[payload as usize]),
            t if t == Tag::Node as u8 => {
                let node = self.nodes[payload as usize];
                let items = &self.items[node.start as usize..(node.start + node.len) as usize];
                match node.kind {
                    Kind::List => Data::List(items),
                    Kind::Tuple => Data::Tuple(items),
                    Kind::Dict => Data::Dict(items),
                    Kind::Set => Data::Set(items),
                    Kind::Object(kind) => Data::Object(kind, items),
                }
            }
            _ => Data::None,
        }
    }

    /// A few words on what a value is, for error messages: "a list of 3 items",
    /// "the Python object os.system(...)". Bounded in depth and length.
    pub(crate) fn describe(&self, value: Value) -> String {
        self.describe_at(value, 0)
    }

    fn describe_at(&self, value: Value, depth: u8) -> String {
        let count = |n: usize, what: &str| format!("a {what} of {n} items");
        match self.get(value) {
            Data::None => "None".to_string(),
            Data::Bool(b) => if b { "True" } else { "False" }.to_string(),
            Data::Int(i) => format!("the integer {i}"),
            Data::HugeInt(n) => format!("a {n}-byte integer"),
            Data::Float(f) => format!("the number {f}"),
            Data::Str(s) => format!("the string {:?}", s.chars().take(60).collect::<String>()),
            Data::Bytes(b) => format!("{} bytes", b.len()),
            Data::List(items) => count(items.len(), "list"),
            Data::Tuple(items) => count(items.len(), "tuple"),
            Data::Dict(items) => count(items.len() / 2, "dict"),
            Data::Set(items) => count(items.len(), "set"),
            Data::Object(..) => format!("the Python object {}", self.object_name(value, depth)),
        }
    }

    fn object_name(&self, value: Value, depth: u8) -> String {
        let text = |v: Value| match self.get(v) {
            Data::Str(s) => s.chars().take(80).collect(),
            _ => "?".to_string(),
        };
        match self.get(value) {
            _ if depth > 4 => "…".to_string(),
            Data::Object(ObjectKind::Global, [module, name, ..]) => {
                format!("{}.{}", text(*module), text(*name))
            }
            Data::Object(ObjectKind::Reduce | ObjectKind::NewObj, [callable, ..]) => {
                format!("{}(...)", self.object_name(*callable, depth + 1))
            }
            Data::Object(ObjectKind::Build, [object, ..]) => self.object_name(*object, depth + 1),
            Data::Object(kind, _) => format!("({kind:?})"),
            _ => self.describe_at(value, depth + 1),
        }
    }
}

/// The pickle machine: a stack, a stack of marks and the memo.
struct Reader<R> {
    input: Input<R>,
    pickle: Pickle,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Vec<Value>,
    sparse_memo: HashMap<u32, Value>,
    scratch: Vec<u8>,
    lists: SharedLists,
    result: Option<Value>,
    /// Where the opcode being run started, for messages.
    at: u64,
}

mod arena;
mod input;
mod ops;

use arena::SharedLists;
use input::Input;

impl<R: BufRead> Reader<R> {
    fn new(inner: R, len: Option<u64>) -> Self {
        Reader {
            input: Input {
                inner,
                offset: 0,
                len,
            },
            pickle: Pickle {
                root: Value::NONE,
                nodes: Vec::new(),
                items: Vec::new(),
                strings: Vec::new(),
                string_ids: HashMap::default(),
                bigs: Vec::new(),
                floats: Vec::new(),
                bytes: Vec::new(),
                input_len: 0,
            },
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            sparse_memo: HashMap::new(),
            scratch: Vec::new(),
            lists: SharedLists::default(),
            result: None,
            at: 0,
        }
    }

    fn run(&mut self) -> Result<()> {
        self.header()?;
        let mut until_check = BUDGET_CHECK_EVERY;
        while self.result.is_none() {
            self.at = self.input.offset;
            let opcode = self.input.byte()?;
            self.step(opcode)?;
            until_check -= 1;
            if until_check == 0 {
                self.check_budget()?;
                until_check = BUDGET_CHECK_EVERY;
            }
        }
        self.check_budget()
    }

    fn header(&mut self) -> Result<()> {
        let first = match self.input.byte() {
            Err(Error::Truncated(0)) => return Err(Error::Empty),
            other => other?,
        };
        // Protocols 0 and 1 have no header; a dict or a list of them starts with MARK,
        // EMPTY_DICT or EMPTY_LIST.
        if matches!(first, b'(' | b'}' | b']') {
            return Err(Error::OldProtocol);
        }
        if first != 0x80 {
            return Err(Error::NotPickle);
        }
        match self.input.byte()? {
            2..=5 => Ok(()),
            version if version < 2 => Err(Error::OldProtocol),
            version => Err(Error::Protocol(version)),
        }
    }

    /// What the reader holds, in bytes, against what the input read so far pays for.
    fn check_budget(&self) -> Result<()> {
        let p = &self.pickle;
        let cells = p.items.len() + self.stack.len() + self.memo.len() + 2 * self.sparse_memo.len();
        let held = 8 * cells as u64
            + 16 * p.nodes.len() as u64
            + 16 * (p.bigs.len() + p.floats.len() + p.bytes.len()) as u64
            + 40 * p.strings.len() as u64;
        if held > BUDGET_FLOOR + BUDGET_PER_INPUT_BYTE * self.input.offset {
            return Err(Error::TooBig(self.input.offset));
        }
        Ok(())
    }

    fn malformed(&self, what: &'static str) -> Error {
        Error::Malformed {
            offset: self.at,
            what,
        }
    }

    fn pop(&mut self) -> Result<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed("an opcode takes a value from an empty stack"));
        }
        Ok(self.stack.pop().expect("checked above"))
    }

    fn top(&self) -> Result<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match self.stack.last() {
            Some(&v) if self.stack.len() > floor => Ok(v),
            _ => Err(self.malformed("an opcode needs a value on an empty stack")),
        }
    }

    /// The index on the stack where the innermost MARK was set; the mark is removed.
    fn pop_mark(&mut self) -> Result<usize> {
        self.marks
            .pop()
            .ok_or_else(|| self.malformed("an opcode needs a MARK that was never set"))
    }
}

#[cfg(test)]
mod tests;
