//! The serde serializer that turns a snapshot into tokens: the head, with the top-level lists
//! split off as groups of entities ([`GroupSer`]), strings shared with the frame before where
//! they did not change.

use serde::ser::{self, Serialize};

use super::key::KeySer;
use super::{Error, Group, Hints, Split, Text, Tok, SPLIT_FIELDS};

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
