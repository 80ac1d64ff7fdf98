//! Reading JSON from an agent with bounded memory: [`Scalar`] takes one value as the hub needs it
//! (numbers, booleans, text cut to a bound; arrays and objects skipped without being built), and
//! [`visit_fields`] walks an object's keys without allocating them, skipping unknown ones.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The longest text kept from an agent (a snapshot path, an error); the rest is cut.
pub(crate) const MAX_TEXT_BYTES: usize = 4096;

/// Visitor methods that answer every JSON scalar (number, bool, string, null) with `$value`.
macro_rules! scalars_are {
    ($value:expr) => {
        $crate::collect::agent::json::scalars_but_text_are!($value);
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// [`scalars_are`] without `visit_str`, for a visitor that reads text.
macro_rules! scalars_but_text_are {
    ($value:expr) => {
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

pub(crate) use scalars_are;
pub(crate) use scalars_but_text_are;

/// A visitor that writes into room it holds is its own seed: it reads whatever value comes.
macro_rules! seed_is_visitor {
    ($seed:ident) => {
        impl<'de> serde::de::DeserializeSeed<'de> for $seed<'_> {
            type Value = <Self as serde::de::Visitor<'de>>::Value;
            fn deserialize<D: serde::de::Deserializer<'de>>(
                self,
                deserializer: D,
            ) -> Result<Self::Value, D::Error> {
                deserializer.deserialize_any(self)
            }
        }
    };
}

pub(crate) use seed_is_visitor;

/// A JSON value the hub reads as one field; arrays and objects are skipped, text is cut.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Str(String),
    Other,
}

impl Scalar {
    /// A non-negative integer, also from a float with no fraction (Python sends `1e9` so).
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match *self {
            Scalar::U64(v) => Some(v),
            Scalar::F64(f)
                if f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64 =>
            {
                Some(f as u64)
            }
            _ => None,
        }
    }

    pub(crate) fn as_u32(&self) -> Option<u32> {
        self.as_u64().and_then(|v| u32::try_from(v).ok())
    }

    pub(crate) fn as_f64(&self) -> Option<f64> {
        match *self {
            Scalar::U64(v) => Some(v as f64),
            Scalar::I64(v) => Some(v as f64),
            Scalar::F64(v) => Some(v),
            _ => None,
        }
    }

    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Scalar::U64(v) => v.to_string(),
            Scalar::I64(v) => v.to_string(),
            Scalar::F64(v) => v.to_string(),
            Scalar::Bool(v) => v.to_string(),
            Scalar::Str(s) => format!("{:?}", s.chars().take(32).collect::<String>()),
            Scalar::Other => "that is not a number".to_string(),
        }
    }
}

/// A string written into kept room, cut at `max` bytes as [`cut`] cuts; `true` when the value
/// was a string (the room is left as it was otherwise).
pub(crate) struct TextInto<'a>(pub(crate) &'a mut String, pub(crate) usize);

seed_is_visitor!(TextInto);

impl<'de> Visitor<'de> for TextInto<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E>(self, text: &str) -> Result<bool, E> {
        let room = self.0;
        room.clear();
        let (kept, was_cut) = cut_at(text, self.1);
        room.push_str(kept);
        if was_cut {
            room.push('…');
        }
        Ok(true)
    }
    scalars_but_text_are!(false);
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        drain_seq(seq).map(|()| false)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        drain_map(map).map(|()| false)
    }
}

pub(crate) fn cut(text: &str, max: usize) -> String {
    match cut_at(text, max) {
        (kept, true) => format!("{kept}…"),
        (kept, false) => kept.to_string(),
    }
}

/// The first `max` bytes of `text` (fewer, to end on a character), and whether that cut any.
fn cut_at(text: &str, max: usize) -> (&str, bool) {
    let kept = crate::format::within_bytes(text, max);
    (kept, kept.len() < text.len())
}

impl<'de> de::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::U64(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(u64::try_from(v).map_or(Scalar::I64(v), Scalar::U64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::F64(v))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(cut(v, MAX_TEXT_BYTES)))
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar, A::Error> {
                drain_seq(seq).map(|()| Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar, A::Error> {
                drain_map(map).map(|()| Scalar::Other)
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

pub(crate) fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

pub(crate) fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Reads an object key as its position in `names`, `None` for a key not in the list, without
/// allocating.
struct KeyIn(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyIn {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyIn {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|name| *name == v))
    }
}

/// Calls `field` with the position in `names` of each known key, and skips the others. Later
/// duplicates of a key win, as in any JSON reader that keeps the last one.
pub(crate) fn visit_fields<'de, A: MapAccess<'de>>(
    mut map: A,
    names: &'static [&'static str],
    mut field: impl FnMut(usize, &mut A) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    while let Some(key) = map.next_key_seed(KeyIn(names))? {
        match key {
            Some(index) => field(index, &mut map)?,
            None => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    Ok(())
}
