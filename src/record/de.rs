//! Snapshots straight from tokens: a serde deserializer over a frame's head and groups, so a
//! replayed frame becomes a `Snapshot` without going through JSON values. The tokens follow
//! JSON's data model, so this reads them as `serde_json` would read the same JSON.

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;

use super::tokens::{Error, Tok};

/// The deepest nesting a frame from a file may have.
const MAX_DEPTH: usize = 64;

impl de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

/// Reads a `T` from a head and the entities of its groups.
pub(crate) fn from_tokens<'t, T, E>(head: &'t [Tok], groups: &'t [&'t [E]]) -> Result<T, Error>
where
    T: de::Deserialize<'t>,
    E: AsRef<[Tok]>,
{
    let mut reader = Reader {
        toks: head,
        at: 0,
        groups,
        spliced: vec![false; groups.len()],
        depth: 0,
    };
    let value = T::deserialize(&mut reader)?;
    if reader.at != head.len() {
        return Err(Error("the head has tokens after its end".into()));
    }
    Ok(value)
}

struct Reader<'t, E> {
    toks: &'t [Tok],
    at: usize,
    groups: &'t [&'t [E]],
    /// The groups the head has placed. Each goes in one place: a crafted head that named one
    /// group again and again (under keys nobody reads, which are walked all the same) made a
    /// few kilobytes of file cost hours of replay.
    spliced: Vec<bool>,
    depth: usize,
}

impl<'t, E: AsRef<[Tok]>> Reader<'t, E> {
    fn next(&mut self) -> Result<&'t Tok, Error> {
        let tok = self
            .toks
            .get(self.at)
            .ok_or_else(|| Error("a value ends early".into()))?;
        self.at += 1;
        Ok(tok)
    }

    fn peek(&self) -> Option<&'t Tok> {
        self.toks.get(self.at)
    }

    fn left(&self) -> usize {
        self.toks.len() - self.at
    }

    fn deeper(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Error(format!("values nest deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }
}

impl<'de, E: AsRef<[Tok]>> de::Deserializer<'de> for &mut Reader<'de, E> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.next()? {
            Tok::Null => visitor.visit_unit(),
            Tok::Bool(b) => visitor.visit_bool(*b),
            Tok::U(u) => visitor.visit_u64(*u),
            Tok::I(i) => visitor.visit_i64(*i),
            Tok::F(bits) => visitor.visit_f64(f64::from_bits(*bits)),
            Tok::Str(text) => visitor.visit_borrowed_str(text.as_str()),
            Tok::Key(_) => Err(Error("a key stands where a value should".into())),
            Tok::Seq(n) => {
                self.deeper()?;
                let left = (*n as usize).min(self.left());
                let value = visitor.visit_seq(Items {
                    reader: &mut *self,
                    left: *n,
                    hint: left,
                })?;
                self.depth -= 1;
                Ok(value)
            }
            Tok::Map(n) => {
                self.deeper()?;
                let hint = (*n as usize).min(self.left());
                let value = visitor.visit_map(Entries {
                    reader: &mut *self,
                    left: *n,
                    hint,
                })?;
                self.depth -= 1;
                Ok(value)
            }
            Tok::Splice(g) => {
                let entities = self.groups.get(*g as usize).ok_or_else(|| {
                    Error(format!("the head names group {g}, which the frame lacks"))
                })?;
                if std::mem::replace(&mut self.spliced[*g as usize], true) {
                    return Err(Error(format!("the head names group {g} twice")));
                }
                visitor.visit_seq(Entities {
                    entities,
                    next: 0,
                    depth: self.depth + 1,
                })
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.peek() == Some(&Tok::Null) {
            self.at += 1;
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.next()? {
            // A unit variant is its name, as in JSON.
            Tok::Str(text) => visitor.visit_enum(text.as_str().into_deserializer()),
            _ => Err(Error("only unit variants are recorded as names".into())),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

struct Items<'r, 't, E> {
    reader: &'r mut Reader<'t, E>,
    left: u32,
    hint: usize,
}

impl<'de, E: AsRef<[Tok]>> de::SeqAccess<'de> for Items<'_, 'de, E> {
    type Error = Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.reader).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.hint)
    }
}

struct Entries<'r, 't, E> {
    reader: &'r mut Reader<'t, E>,
    left: u32,
    hint: usize,
}

impl<'de, E: AsRef<[Tok]>> de::MapAccess<'de> for Entries<'_, 'de, E> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        match self.reader.next()? {
            Tok::Key(key) => seed
                .deserialize(de::value::BorrowedStrDeserializer::new(key.as_str()))
                .map(Some),
            _ => Err(Error("a map entry has no key".into())),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        seed.deserialize(&mut *self.reader)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.hint)
    }
}

/// The elements of a split-off list: one entity each, read with a reader of its own.
struct Entities<'t, E> {
    entities: &'t [E],
    next: usize,
    depth: usize,
}

impl<'de, E: AsRef<[Tok]>> de::SeqAccess<'de> for Entities<'de, E> {
    type Error = Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        let Some(entity) = self.entities.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        let toks = entity.as_ref();
        let mut reader: Reader<'de, E> = Reader {
            toks,
            at: 0,
            groups: &[],
            spliced: Vec::new(),
            depth: self.depth,
        };
        let value = seed.deserialize(&mut reader)?;
        if reader.at != toks.len() {
            return Err(Error("an entity has tokens after its end".into()));
        }
        Ok(Some(value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entities.len() - self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Snapshot;

    fn read(head: Vec<Tok>) -> Result<Snapshot, Error> {
        let none: [&[Vec<Tok>]; 0] = [];
        from_tokens(&head, &none)
    }

    #[test]
    fn bad_streams_are_errors_not_panics_or_deep_recursion() {
        assert!(read(vec![Tok::Seq(1); 100_000]).is_err());
        let none: [&[Vec<Tok>]; 0] = [];
        let deep = vec![Tok::Seq(1); 100_000];
        let any: Result<serde_json::Value, Error> = from_tokens(&deep, &none);
        assert!(any.unwrap_err().0.contains("deeper"));
        assert!(read(vec![Tok::Map(u32::MAX)]).is_err());
        assert!(read(vec![Tok::Map(1), Tok::U(3)])
            .unwrap_err()
            .0
            .contains("no key"));
        assert!(read(vec![Tok::Splice(4)])
            .unwrap_err()
            .0
            .contains("group 4"));
        assert!(read(vec![]).is_err());
    }

    /// A review: a head naming one group under 100,000 unknown keys, its group 100,000 nulls,
    /// made a 788-byte file take 63 s to sum up (3 million of each: 16 hours, 786 MB).
    /// A type that knows no keys: serde walks and drops every entry.
    #[derive(Debug, serde::Deserialize)]
    struct Nothing {}

    #[test]
    fn a_group_is_placed_once() {
        let group: Vec<Vec<Tok>> = vec![vec![Tok::Null]; 3];
        let groups = [group.as_slice()];
        let key = |k: &str| Tok::Key(super::super::tokens::Text::from(k));
        let once = [Tok::Map(1), key("x"), Tok::Splice(0)];
        let value: serde_json::Value = from_tokens(&once, &groups).unwrap();
        assert_eq!(value, serde_json::json!({"x": [null, null, null]}));
        let twice = [
            Tok::Map(2),
            key("x"),
            Tok::Splice(0),
            key("y"),
            Tok::Splice(0),
        ];
        let err = from_tokens::<serde_json::Value, _>(&twice, &groups).unwrap_err();
        assert!(err.0.contains("group 0 twice"), "{err:?}");
        // Under keys the type does not know, which serde walks and drops.
        let unknown = [
            Tok::Map(2),
            key("z"),
            Tok::Splice(0),
            key("z2"),
            Tok::Splice(0),
        ];
        let err = from_tokens::<Nothing, _>(&unknown, &groups).unwrap_err();
        assert!(err.0.contains("group 0 twice"), "{err:?}");
    }

    /// What `--summary` and the TUI show of a frame that cannot be read quotes the file, so
    /// they escape it (replay::summary's `a_frame_s_error_is_escaped`).
    #[test]
    fn a_decoding_error_quotes_the_file() {
        let head = [Tok::Str(super::super::tokens::Text::from(
            "\x1b]0;PWNED\x07",
        ))];
        let none: [&[Vec<Tok>]; 0] = [];
        let err = from_tokens::<crate::model::GpuState, _>(&head, &none).unwrap_err();
        assert!(err.0.contains('\x1b'), "{err:?}");
    }
}
