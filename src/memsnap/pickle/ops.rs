//! The opcodes: one arm per opcode of protocols 2 to 5 that a plain-data pickle can hold, and
//! the calls (GLOBAL, REDUCE, BUILD, NEWOBJ...) recorded as opaque objects.

use std::io::BufRead;
use std::rc::Rc;

use super::{Error, Kind, ObjectKind, Reader, Result, Tag, Value, INLINE_MAX, INLINE_MIN};

impl<R: BufRead> Reader<R> {
    #[allow(
        clippy::too_many_lines,
        clippy::match_same_arms,
        reason = "one arm per pickle opcode, in the order of pickle.py's table"
    )]
    pub(super) fn step(&mut self, opcode: u8) -> Result<()> {
        match opcode {
            b'.' => self.result = Some(self.pop()?),
            0x80 => return Err(self.malformed("a second protocol header")),
            0x95 => {
                // FRAME: a length hint for buffering; the opcodes inside are read one by one.
                self.input.array::<8>()?;
            }
            b'(' => self.marks.push(self.stack.len()),
            b'0' => {
                self.pop()?;
            }
            b'1' => {
                let mark = self.pop_mark()?;
                self.stack.truncate(mark);
            }
            b'2' => self.stack.push(self.top()?),
            b'N' => self.stack.push(Value::NONE),
            0x88 => self.stack.push(Value::new(Tag::True, 0)),
            0x89 => self.stack.push(Value::new(Tag::False, 0)),
            b'J' => {
                let arg = i128::from(i32::from_le_bytes(self.input.array()?));
                self.push_int(arg);
            }
            b'K' => {
                let arg = i128::from(self.input.byte()?);
                self.push_int(arg);
            }
            b'M' => {
                let arg = i128::from(u16::from_le_bytes(self.input.array()?));
                self.push_int(arg);
            }
            0x8a => {
                let n = self.input.byte()?;
                self.long(u64::from(n))?;
            }
            0x8b => {
                let n = i32::from_le_bytes(self.input.array()?);
                let n = u64::try_from(n).map_err(|_| self.malformed("a negative length"))?;
                self.long(n)?;
            }
            b'G' => {
                let value = f64::from_be_bytes(self.input.array()?);
                let index = self.pickle.floats.len() as u64;
                self.pickle.floats.push(value);
                self.stack.push(Value::new(Tag::Float, index));
            }
            b'X' => {
                let arg = u64::from(u32::from_le_bytes(self.input.array()?));
                self.text(arg)?;
            }
            0x8c => {
                let arg = u64::from(self.input.byte()?);
                self.text(arg)?;
            }
            0x8d => {
                let arg = u64::from_le_bytes(self.input.array()?);
                self.text(arg)?;
            }
            b'T' => {
                let n = i32::from_le_bytes(self.input.array()?);
                let n = u64::try_from(n).map_err(|_| self.malformed("a negative length"))?;
                self.text(n)?;
            }
            b'U' => {
                let arg = u64::from(self.input.byte()?);
                self.text(arg)?;
            }
            b'B' => {
                let arg = u64::from(u32::from_le_bytes(self.input.array()?));
                self.blob(arg)?;
            }
            b'C' => {
                let arg = u64::from(self.input.byte()?);
                self.blob(arg)?;
            }
            0x8e | 0x96 => {
                let arg = u64::from_le_bytes(self.input.array()?);
                self.blob(arg)?;
            }
            b']' => self.push_node(Kind::List)?,
            b'}' => self.push_node(Kind::Dict)?,
            0x8f => self.push_node(Kind::Set)?,
            b')' => self.push_node(Kind::Tuple)?,
            b'l' => self.push_from_mark(Kind::List)?,
            b'd' => self.dict_from_mark()?,
            b't' => self.push_from_mark(Kind::Tuple)?,
            0x91 => self.push_from_mark(Kind::Set)?,
            0x85..=0x87 => {
                let n = usize::from(opcode - 0x84);
                let from = self.stack.len().saturating_sub(n).max(self.floor());
                if self.stack.len() - from < n {
                    return Err(self.malformed("TUPLE takes more values than the stack holds"));
                }
                let tuple = self.node_from(Kind::Tuple, from)?;
                self.stack.push(tuple);
            }
            b'a' => self.add_items(self.stack.len().saturating_sub(1), &[Kind::List])?,
            b'e' => {
                let mark = self.pop_mark()?;
                self.add_items(mark, &[Kind::List])?;
            }
            0x90 => {
                let mark = self.pop_mark()?;
                self.add_items(mark, &[Kind::Set])?;
            }
            b's' => self.add_items(self.stack.len().saturating_sub(2), &[Kind::Dict])?,
            b'u' => {
                let mark = self.pop_mark()?;
                if (self.stack.len() - mark) % 2 != 0 {
                    return Err(self.malformed("SETITEMS with a key but no value"));
                }
                self.add_items(mark, &[Kind::Dict])?;
            }
            0x94 => {
                let key = (self.memo.len() + self.sparse_memo.len()) as u32;
                self.memo_put(key)?;
            }
            b'q' => {
                let arg = u32::from(self.input.byte()?);
                self.memo_put(arg)?;
            }
            b'r' => {
                let arg = u32::from_le_bytes(self.input.array()?);
                self.memo_put(arg)?;
            }
            b'h' => {
                let arg = u32::from(self.input.byte()?);
                self.memo_get(arg)?;
            }
            b'j' => {
                let arg = u32::from_le_bytes(self.input.array()?);
                self.memo_get(arg)?;
            }
            b'c' => {
                let module = self.line_str()?;
                let name = self.line_str()?;
                self.push_object(ObjectKind::Global, vec![module, name])?;
            }
            0x93 => {
                let name = self.pop()?;
                let module = self.pop()?;
                self.push_object(ObjectKind::Global, vec![module, name])?;
            }
            b'R' | 0x81 | b'b' => {
                let second = self.pop()?;
                let first = self.pop()?;
                let kind = match opcode {
                    b'R' => ObjectKind::Reduce,
                    0x81 => ObjectKind::NewObj,
                    _ => ObjectKind::Build,
                };
                self.push_object(kind, vec![first, second])?;
            }
            0x92 => {
                let kwargs = self.pop()?;
                let args = self.pop()?;
                let class = self.pop()?;
                self.push_object(ObjectKind::NewObj, vec![class, args, kwargs])?;
            }
            b'Q' => {
                let id = self.pop()?;
                self.push_object(ObjectKind::Persistent, vec![id])?;
            }
            0x82 => {
                let arg = u32::from(self.input.byte()?);
                self.extension(arg)?;
            }
            0x83 => {
                let arg = u32::from(u16::from_le_bytes(self.input.array()?));
                self.extension(arg)?;
            }
            0x84 => {
                let arg = u32::from_le_bytes(self.input.array()?);
                self.extension(arg)?;
            }
            0x97 | 0x98 => {
                if opcode == 0x98 {
                    self.pop()?;
                }
                self.push_object(ObjectKind::Buffer, Vec::new())?;
            }
            _ => {
                return Err(Error::Unsupported {
                    offset: self.at,
                    opcode,
                })
            }
        }
        Ok(())
    }

    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn push_int(&mut self, value: i128) {
        let handle = match i64::try_from(value) {
            Ok(v) if (INLINE_MIN..=INLINE_MAX).contains(&v) => Value::new(Tag::Int, v as u64),
            _ => {
                let index = self.pickle.bigs.len() as u64;
                self.pickle.bigs.push(value);
                Value::new(Tag::BigInt, index)
            }
        };
        self.stack.push(handle);
    }

    /// LONG1 and LONG4: little-endian two's complement of `n` bytes.
    fn long(&mut self, n: u64) -> Result<()> {
        let mut bytes = std::mem::take(&mut self.scratch);
        let read = self.input.bytes(n, &mut bytes);
        let value = read.map(|()| {
            if bytes.len() > 16 {
                return None;
            }
            let fill = if bytes.last().is_some_and(|&b| b & 0x80 != 0) {
                0xff
            } else {
                0
            };
            let mut wide = [fill; 16];
            wide[..bytes.len()].copy_from_slice(&bytes);
            Some(i128::from_le_bytes(wide))
        });
        self.scratch = bytes;
        match value? {
            Some(v) => self.push_int(v),
            None => self.stack.push(Value::new(Tag::HugeInt, n)),
        }
        Ok(())
    }

    /// A string, stored once per distinct text. Text that is not UTF-8 (Python writes lone
    /// surrogates from undecodable file names with `surrogatepass`) is kept with U+FFFD.
    fn text(&mut self, n: u64) -> Result<()> {
        let mut bytes = std::mem::take(&mut self.scratch);
        let read = self.input.bytes(n, &mut bytes);
        let value = read.map(|()| self.intern(&String::from_utf8_lossy(&bytes)));
        self.scratch = bytes;
        self.stack.push(value?);
        Ok(())
    }

    fn intern(&mut self, text: &str) -> Value {
        let pickle = &mut self.pickle;
        let id = if let Some(&id) = pickle.string_ids.get(text) {
            id
        } else {
            let id = pickle.strings.len() as u32;
            let shared: Rc<str> = Rc::from(text);
            pickle.strings.push(shared.clone());
            pickle.string_ids.insert(shared, id);
            id
        };
        Value::new(Tag::Str, u64::from(id))
    }

    fn blob(&mut self, n: u64) -> Result<()> {
        let mut bytes = Vec::new();
        self.input.bytes(n, &mut bytes)?;
        let index = self.pickle.bytes.len() as u64;
        self.pickle.bytes.push(bytes.into_boxed_slice());
        self.stack.push(Value::new(Tag::Bytes, index));
        Ok(())
    }

    fn line_str(&mut self) -> Result<Value> {
        let mut bytes = std::mem::take(&mut self.scratch);
        let read = self.input.line(&mut bytes);
        let value = read.map(|()| self.intern(&String::from_utf8_lossy(&bytes)));
        self.scratch = bytes;
        value
    }

    fn push_node(&mut self, kind: Kind) -> Result<()> {
        let node = self.new_node(kind)?;
        self.stack.push(node);
        Ok(())
    }

    fn push_from_mark(&mut self, kind: Kind) -> Result<()> {
        let node = self.node_from_mark(kind)?;
        self.stack.push(node);
        Ok(())
    }

    fn dict_from_mark(&mut self) -> Result<()> {
        let mark = *self
            .marks
            .last()
            .ok_or_else(|| self.malformed("DICT without a MARK"))?;
        if (self.stack.len() - mark) % 2 != 0 {
            return Err(self.malformed("DICT with a key but no value"));
        }
        self.push_from_mark(Kind::Dict)
    }

    fn push_object(&mut self, kind: ObjectKind, parts: Vec<Value>) -> Result<()> {
        let from = self.stack.len();
        self.stack.extend(parts);
        let object = self.node_from(Kind::Object(kind), from)?;
        self.stack.push(object);
        Ok(())
    }

    fn extension(&mut self, code: u32) -> Result<()> {
        self.push_int(i128::from(code));
        let code = self.pop()?;
        self.push_object(ObjectKind::Extension, vec![code])
    }

    /// APPEND(S), ADDITEMS and SETITEM(S): the values from `from` on go into the container
    /// just below them. Objects take anything (recorded, never called).
    fn add_items(&mut self, from: usize, allowed: &[Kind]) -> Result<()> {
        if from == 0 || from < self.floor() || from > self.stack.len() {
            return Err(self.malformed("an opcode adds items but the stack holds no container"));
        }
        let target = self.stack[from - 1];
        match self.kind_of(target) {
            Some(kind) if allowed.contains(&kind) => {}
            Some(Kind::Object(_)) => {}
            _ => return Err(self.malformed("an opcode adds items to a value that is no container")),
        }
        self.extend(target, from)
    }

    fn memo_put(&mut self, key: u32) -> Result<()> {
        let value = self.top()?;
        let key_index = key as usize;
        match key_index.cmp(&self.memo.len()) {
            std::cmp::Ordering::Less => self.memo[key_index] = value,
            std::cmp::Ordering::Equal => {
                self.memo.push(value);
                self.sparse_memo.remove(&key);
            }
            std::cmp::Ordering::Greater => {
                // Sparse keys (only a crafted protocol 2 pickle has them) never size a table.
                self.sparse_memo.insert(key, value);
            }
        }
        Ok(())
    }

    fn memo_get(&mut self, key: u32) -> Result<()> {
        let value = self
            .memo
            .get(key as usize)
            .or_else(|| self.sparse_memo.get(&key))
            .copied()
            .ok_or_else(|| self.malformed("a memo entry is read before it is stored"))?;
        self.stack.push(value);
        Ok(())
    }
}
