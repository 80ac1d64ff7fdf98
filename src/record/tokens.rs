//! Snapshots as flat streams of JSON-shaped tokens, and back to JSON values.
//!
//! A recording stores what `--json` would print, so the tokens follow serde_json's data model
//! (an `Option` is its value or null, a unit variant is its name, a struct is a map with its
//! field names). The top-level lists (GPUs, processes, jobs, warnings, the host process table)
//! are split off into groups of one token stream per element, so that a frame can say "this GPU
//! did not change" or "only these three figures of that process did".

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::ser::{self, Serialize};

/// A string in a token: a field name from the program, or text shared with the frame before
/// (most strings do not change, so they are neither copied nor freed from frame to frame).
#[derive(Debug, Clone)]
pub(crate) enum Text {
    Static(&'static str),
    Shared(Arc<str>),
}

impl Text {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Text::Static(s) => s,
            Text::Shared(s) => s,
        }
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text::Shared(Arc::from(s))
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text::Shared(Arc::from(s))
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Text::Shared(a), Text::Shared(b)) if Arc::ptr_eq(a, b) => true,
            _ => self.as_str() == other.as_str(),
        }
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

/// The tokens of the frame before, which the serializer takes strings from when they are
/// unchanged: the head's, and each group's entities by position.
pub(crate) trait Hints {
    fn head(&self) -> Option<&[Tok]>;
    fn entity(&self, group: &str, index: usize) -> Option<&[Tok]>;
}

/// No frame before.
pub(crate) struct NoHints;

impl Hints for NoHints {
    fn head(&self) -> Option<&[Tok]> {
        None
    }
    fn entity(&self, _: &str, _: usize) -> Option<&[Tok]> {
        None
    }
}

/// The top-level fields whose elements become entities of their own.
pub(crate) const SPLIT_FIELDS: [&str; 5] =
    ["gpus", "processes", "jobs", "warnings", "host_processes"];

/// A list split off the head: its field name and one token stream per element.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    pub(crate) name: &'static str,
    pub(crate) entities: Vec<Vec<Tok>>,
}

/// A snapshot as tokens: the head (everything but the split lists) and the groups.
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

/// Serializes `value` (a snapshot) into a head and groups.
#[cfg(test)]
pub(crate) fn split<T: Serialize + ?Sized>(value: &T) -> Result<Split, Error> {
    split_with(value, &NoHints)
}

/// Serializes `value` (a snapshot) into a head and groups, sharing the unchanged strings of the
/// frame before.
pub(crate) fn split_with<T: Serialize + ?Sized>(
    value: &T,
    hints: &dyn Hints,
) -> Result<Split, Error> {
    let mut out = Split::default();
    let top = Top {
        groups: &mut out.groups,
        hints,
    };
    value.serialize(Ser {
        out: &mut out.head,
        top: Some(top),
        hint: hints.head(),
    })?;
    Ok(out)
}

/// What only the top-level value has: where the groups go, and the hints for their entities.
struct Top<'a> {
    groups: &'a mut Vec<Group>,
    hints: &'a dyn Hints,
}

/// Writes tokens into `out`; `top` is set only for the top-level value. `hint` holds the
/// tokens of the same entity in the frame before.
struct Ser<'a> {
    out: &'a mut Vec<Tok>,
    top: Option<Top<'a>>,
    hint: Option<&'a [Tok]>,
}

impl<'a> Ser<'a> {
    fn leaf(self, tok: Tok) -> Result<(), Error> {
        self.out.push(tok);
        Ok(())
    }

    /// A string token, shared with the frame before when it is the same there.
    fn text(self, v: &str) -> Result<(), Error> {
        let tok = match self.hint.and_then(|h| h.get(self.out.len())) {
            Some(Tok::Str(t)) if t.as_str() == v => Tok::Str(t.clone()),
            _ => Tok::Str(Text::from(v)),
        };
        self.leaf(tok)
    }

    fn open(self, container: fn(u32) -> Tok) -> Compound<'a> {
        let at = self.out.len();
        self.out.push(container(0));
        Compound {
            out: self.out,
            top: self.top,
            hint: self.hint,
            at,
            count: 0,
        }
    }

    /// `{"Variant": ...}`, as serde_json writes newtype, tuple and struct variants.
    fn open_variant(self, variant: &'static str, container: fn(u32) -> Tok) -> Compound<'a> {
        self.out.push(Tok::Map(1));
        self.out.push(Tok::Key(Text::Static(variant)));
        Ser {
            out: self.out,
            top: None,
            hint: self.hint,
        }
        .open(container)
    }
}

/// An open sequence or map: its count is written back when it closes.
struct Compound<'a> {
    out: &'a mut Vec<Tok>,
    top: Option<Top<'a>>,
    hint: Option<&'a [Tok]>,
    at: usize,
    count: u32,
}

impl Compound<'_> {
    fn nested(&mut self) -> Ser<'_> {
        Ser {
            out: self.out,
            top: None,
            hint: self.hint,
        }
    }

    fn close(self) -> Result<(), Error> {
        let count = self.count;
        match &mut self.out[self.at] {
            Tok::Seq(n) | Tok::Map(n) => *n = count,
            _ => return Err(Error("internal: a container lost its place".into())),
        }
        Ok(())
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        self.count += 1;
        self.out.push(Tok::Key(Text::Static(key)));
        if let Some(top) = self.top.as_mut().filter(|_| SPLIT_FIELDS.contains(&key)) {
            let mut group = Group {
                name: key,
                entities: Vec::new(),
            };
            if value.serialize(GroupSer(&mut group, top.hints)).is_ok() {
                self.out.push(Tok::Splice(top.groups.len() as u32));
                top.groups.push(group);
                return Ok(());
            }
        }
        value.serialize(self.nested())
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.count += 1;
        value.serialize(self.nested())
    }
    fn end(self) -> Result<(), Error> {
        self.close()
    }
}

macro_rules! seq_like {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for Compound<'_> {
            type Ok = ();
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                ser::SerializeSeq::serialize_element(self, value)
            }
            fn end(self) -> Result<(), Error> {
                self.close()
            }
        }
    )*};
}
seq_like!(
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.count += 1;
        let key = key.serialize(KeySer)?;
        self.out.push(Tok::Key(Text::from(key)));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(self.nested())
    }
    fn end(self) -> Result<(), Error> {
        self.close()
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), Error> {
        self.close()
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.count += 1;
        self.out.push(Tok::Key(Text::Static(key)));
        value.serialize(self.nested())
    }
    fn end(self) -> Result<(), Error> {
        self.close()
    }
}

impl<'a> ser::Serializer for Ser<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.leaf(Tok::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.serialize_i64(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.serialize_i64(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.serialize_i64(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        // One form per number, as JSON has: 5 is the same token whatever its Rust type.
        match u64::try_from(v) {
            Ok(u) => self.leaf(Tok::U(u)),
            Err(_) => self.leaf(Tok::I(v)),
        }
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.serialize_u64(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.serialize_u64(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.serialize_u64(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.leaf(Tok::U(v))
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.leaf(Tok::F(v.to_bits()))
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.text(v.encode_utf8(&mut [0u8; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.text(v)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Error> {
        Err(Error("byte strings have no JSON form".into()))
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.leaf(Tok::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.leaf(Tok::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.leaf(Tok::Null)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, v: &'static str) -> Result<(), Error> {
        self.leaf(Tok::Str(Text::Static(v)))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.out.push(Tok::Map(1));
        self.out.push(Tok::Key(Text::Static(variant)));
        value.serialize(Ser {
            out: self.out,
            top: None,
            hint: self.hint,
        })
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Error> {
        Ok(self.open(Tok::Seq))
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a>, Error> {
        Ok(self.open(Tok::Seq))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Error> {
        Ok(self.open(Tok::Seq))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Error> {
        Ok(self.open_variant(variant, Tok::Seq))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Error> {
        Ok(self.open(Tok::Map))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Error> {
        Ok(self.open(Tok::Map))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Error> {
        Ok(self.open_variant(variant, Tok::Map))
    }
}

/// Collects the elements of one top-level list as entities; anything but a sequence is
/// refused, and the field then stays in the head.
struct GroupSer<'g>(&'g mut Group, &'g dyn Hints);

struct GroupSeq<'g>(&'g mut Group, &'g dyn Hints);

impl ser::SerializeSeq for GroupSeq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let hint = self.1.entity(self.0.name, self.0.entities.len());
        let mut tokens = Vec::with_capacity(hint.map_or(64, <[Tok]>::len));
        value.serialize(Ser {
            out: &mut tokens,
            top: None,
            hint,
        })?;
        self.0.entities.push(tokens);
        Ok(())
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

fn not_a_list<T>() -> Result<T, Error> {
    Err(Error("not a list".into()))
}

macro_rules! refuse {
    ($($method:ident($($arg:ty),*)),* $(,)?) => {$(
        fn $method(self, $(_: $arg),*) -> Result<(), Error> {
            not_a_list()
        }
    )*};
}

impl<'g> ser::Serializer for GroupSer<'g> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = GroupSeq<'g>;
    type SerializeTuple = ser::Impossible<(), Error>;
    type SerializeTupleStruct = ser::Impossible<(), Error>;
    type SerializeTupleVariant = ser::Impossible<(), Error>;
    type SerializeMap = ser::Impossible<(), Error>;
    type SerializeStruct = ser::Impossible<(), Error>;
    type SerializeStructVariant = ser::Impossible<(), Error>;

    fn serialize_seq(self, _: Option<usize>) -> Result<GroupSeq<'g>, Error> {
        Ok(GroupSeq(self.0, self.1))
    }
    refuse!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    );
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), Error> {
        not_a_list()
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<(), Error> {
        not_a_list()
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Error> {
        not_a_list()
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
        not_a_list()
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        not_a_list()
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        not_a_list()
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        not_a_list()
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
        not_a_list()
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        not_a_list()
    }
}

/// Map keys: strings, and integers written as strings (as serde_json does).
struct KeySer;

impl ser::Serializer for KeySer {
    type Ok = String;
    type Error = Error;
    type SerializeSeq = ser::Impossible<String, Error>;
    type SerializeTuple = ser::Impossible<String, Error>;
    type SerializeTupleStruct = ser::Impossible<String, Error>;
    type SerializeTupleVariant = ser::Impossible<String, Error>;
    type SerializeMap = ser::Impossible<String, Error>;
    type SerializeStruct = ser::Impossible<String, Error>;
    type SerializeStructVariant = ser::Impossible<String, Error>;

    fn serialize_str(self, v: &str) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_char(self, v: char) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        v: &'static str,
    ) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<String, Error> {
        value.serialize(self)
    }
    fn serialize_bool(self, _: bool) -> Result<String, Error> {
        bad_key()
    }
    fn serialize_i8(self, v: i8) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, _: f32) -> Result<String, Error> {
        bad_key()
    }
    fn serialize_f64(self, _: f64) -> Result<String, Error> {
        bad_key()
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<String, Error> {
        bad_key()
    }
    fn serialize_none(self) -> Result<String, Error> {
        bad_key()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<String, Error> {
        bad_key()
    }
    fn serialize_unit(self) -> Result<String, Error> {
        bad_key()
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<String, Error> {
        bad_key()
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String, Error> {
        bad_key()
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        bad_key()
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
        bad_key()
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        bad_key()
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        bad_key()
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        bad_key()
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
        bad_key()
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        bad_key()
    }
}

fn bad_key<T>() -> Result<T, Error> {
    Err(Error("map keys must be strings or integers".into()))
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
        for entity in group.iter() {
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
            throttle_reasons: Some(vec!["sw_power_cap".into()]),
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
