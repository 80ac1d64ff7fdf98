//! The serde serializer behind [`super::Wire::fill`]: a snapshot written straight as token
//! bytes, the head with the top-level lists split off as groups of entities.

use serde::ser::{self, Serialize};

use super::key::KeySer;
use super::wire::{
    Sink, Span, WireGroup, FALSE, FLOAT, KEY, MAP, NINT, NULL, SEQ, SPLICE, STR, TRUE, UINT,
};
use super::{Error, SPLIT_FIELDS};
use crate::record::codec;

/// Serializes `value` into `head`, its split-off lists into `groups` and `body`.
pub(super) fn serialize<T: Serialize + ?Sized>(
    value: &T,
    head: &mut Sink,
    body: &mut Sink,
    groups: &mut Vec<WireGroup>,
) -> Result<(), Error> {
    value.serialize(Ser {
        out: head,
        top: Some(Top { groups, body }),
    })
}

/// What only the top-level value has: where the groups and their entities go.
struct Top<'a> {
    groups: &'a mut Vec<WireGroup>,
    body: &'a mut Sink,
}

/// Writes tokens into `out`; `top` is set only for the top-level value.
struct Ser<'a> {
    out: &'a mut Sink,
    top: Option<Top<'a>>,
}

impl<'a> Ser<'a> {
    fn leaf(self, kind: u8) -> Result<(), Error> {
        self.out.start(kind);
        Ok(())
    }

    fn open(self, kind: u8) -> Compound<'a> {
        let at = self.out.bytes.len();
        let first = self.out.starts.len();
        // The count is written when the container closes; one byte holds up to 127.
        self.out.start(kind);
        self.out.bytes.push(0);
        Compound {
            out: self.out,
            top: self.top,
            at,
            first,
            count: 0,
        }
    }

    /// `{"Variant": ...}`, as serde_json writes newtype, tuple and struct variants.
    fn open_variant(self, variant: &'static str, kind: u8) -> Compound<'a> {
        self.out.varint(MAP, 1);
        self.out.text(KEY, variant);
        Ser {
            out: self.out,
            top: None,
        }
        .open(kind)
    }
}

/// An open sequence or map: its count is written back when it closes.
struct Compound<'a> {
    out: &'a mut Sink,
    top: Option<Top<'a>>,
    at: usize,
    /// The index of its own token in `out.starts`.
    first: usize,
    count: u32,
}

impl Compound<'_> {
    fn nested(&mut self) -> Ser<'_> {
        Ser {
            out: self.out,
            top: None,
        }
    }

    fn close(self) -> Result<(), Error> {
        let count = self.count;
        if count < 0x80 {
            self.out.bytes[self.at + 1] = count as u8;
            return Ok(());
        }
        let mut varint = Vec::with_capacity(5);
        codec::put_varint(&mut varint, u64::from(count));
        let grow = (varint.len() - 1) as u32;
        self.out
            .bytes
            .splice(self.at + 1..self.at + 2, varint.iter().copied());
        // The tokens inside the container moved by the longer count.
        for start in &mut self.out.starts[self.first + 1..] {
            *start += grow;
        }
        Ok(())
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        self.count += 1;
        self.out.text(KEY, key);
        if let Some(top) = self.top.as_mut().filter(|_| SPLIT_FIELDS.contains(&key)) {
            let mark = top.body.mark();
            let mut group = WireGroup {
                name: key,
                entities: Vec::new(),
            };
            match value.serialize(GroupSer(&mut group, top.body)) {
                Ok(()) => {
                    self.out.varint(SPLICE, top.groups.len() as u64);
                    top.groups.push(group);
                    return Ok(());
                }
                Err(_) => top.body.truncate(mark),
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
        self.out.text(KEY, &key);
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
        self.out.text(KEY, key);
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
        self.leaf(if v { TRUE } else { FALSE })
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
            Ok(u) => self.out.varint(UINT, u),
            Err(_) => self.out.varint(NINT, codec::zigzag(v)),
        }
        Ok(())
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
        self.out.varint(UINT, v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.out.start(FLOAT);
        self.out.bytes.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.out.text(STR, v.encode_utf8(&mut [0u8; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.out.text(STR, v);
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Error> {
        Err(Error("byte strings have no JSON form".into()))
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.leaf(NULL)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.leaf(NULL)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.leaf(NULL)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, v: &'static str) -> Result<(), Error> {
        self.out.text(STR, v);
        Ok(())
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
        self.out.varint(MAP, 1);
        self.out.text(KEY, variant);
        value.serialize(Ser {
            out: self.out,
            top: None,
        })
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Error> {
        Ok(self.open(SEQ))
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a>, Error> {
        Ok(self.open(SEQ))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Error> {
        Ok(self.open(SEQ))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Error> {
        Ok(self.open_variant(variant, SEQ))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Error> {
        Ok(self.open(MAP))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Error> {
        Ok(self.open(MAP))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Error> {
        Ok(self.open_variant(variant, MAP))
    }
}

/// Collects the elements of one top-level list as entities; anything but a sequence is
/// refused, and the field then stays in the head.
struct GroupSer<'g>(&'g mut WireGroup, &'g mut Sink);

struct GroupSeq<'g>(&'g mut WireGroup, &'g mut Sink);

impl ser::SerializeSeq for GroupSeq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let (bytes, starts) = self.1.mark();
        value.serialize(Ser {
            out: self.1,
            top: None,
        })?;
        self.0.entities.push(Span {
            bytes: (bytes, self.1.bytes.len()),
            starts: (starts, self.1.starts.len()),
        });
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
