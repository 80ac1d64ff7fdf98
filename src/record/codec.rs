//! Bytes: varints, tokens, and the short forms of a number that changed.
//!
//! A changed integer is written as the zigzag varint of its difference. A changed float picks
//! the shortest of: the XOR with the previous value (leading and trailing zero bytes left out),
//! the XOR with the linear prediction `p + (p - pp)` (running times and counters advance by the
//! interval, so this is often a byte or two), or a decimal form `n / 10^d` plus a correction in
//! units in the last place (figures read from text, such as watts or load averages).

use std::fmt;

use super::tokens::{Text, Tok};

/// Bytes that do not decode; the sentence says what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Corrupt(pub String);

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) type Result<T> = std::result::Result<T, Corrupt>;

fn corrupt<T>(what: &str) -> Result<T> {
    Err(Corrupt(what.to_string()))
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

pub(crate) fn get_varint(input: &mut &[u8]) -> Result<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let Some((&byte, rest)) = input.split_first() else {
            return corrupt("a number is cut off");
        };
        *input = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    corrupt("a number is longer than 64 bits")
}

pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub(crate) fn get_u8(input: &mut &[u8]) -> Result<u8> {
    let Some((&byte, rest)) = input.split_first() else {
        return corrupt("the data ends early");
    };
    *input = rest;
    Ok(byte)
}

pub(crate) fn get_bytes<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
    if input.len() < n {
        return corrupt("the data ends early");
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn get_str(input: &mut &[u8]) -> Result<String> {
    let len = get_varint(input)?;
    let len = usize::try_from(len).or_else(|_| corrupt("a text is too long"))?;
    let bytes = get_bytes(input, len)?;
    String::from_utf8(bytes.to_vec()).or_else(|_| corrupt("a text is not UTF-8"))
}

fn get_count(input: &mut &[u8]) -> Result<u32> {
    u32::try_from(get_varint(input)?).or_else(|_| corrupt("a count is too large"))
}

/// One token's bytes: the reference for the serializer (`tokens::Wire`), which writes the same
/// bytes without building tokens.
#[cfg(test)]
pub(crate) fn put_tok(out: &mut Vec<u8>, tok: &Tok) {
    match tok {
        Tok::Null => out.push(0),
        Tok::Bool(false) => out.push(1),
        Tok::Bool(true) => out.push(2),
        Tok::U(u) => {
            out.push(3);
            put_varint(out, *u);
        }
        Tok::I(i) => {
            out.push(4);
            put_varint(out, zigzag(*i));
        }
        Tok::F(bits) => {
            out.push(5);
            out.extend_from_slice(&bits.to_le_bytes());
        }
        Tok::Str(s) => {
            out.push(6);
            put_str(out, s.as_str());
        }
        Tok::Seq(n) => {
            out.push(7);
            put_varint(out, u64::from(*n));
        }
        Tok::Map(n) => {
            out.push(8);
            put_varint(out, u64::from(*n));
        }
        Tok::Key(k) => {
            out.push(9);
            put_str(out, k.as_str());
        }
        Tok::Splice(g) => {
            out.push(10);
            put_varint(out, u64::from(*g));
        }
    }
}

pub(crate) fn get_tok(input: &mut &[u8]) -> Result<Tok> {
    Ok(match get_u8(input)? {
        0 => Tok::Null,
        1 => Tok::Bool(false),
        2 => Tok::Bool(true),
        3 => Tok::U(get_varint(input)?),
        4 => Tok::I(unzigzag(get_varint(input)?)),
        5 => {
            let bytes = get_bytes(input, 8)?;
            Tok::F(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
        }
        6 => Tok::Str(Text::from(get_str(input)?)),
        7 => Tok::Seq(get_count(input)?),
        8 => Tok::Map(get_count(input)?),
        9 => Tok::Key(Text::from(get_str(input)?)),
        10 => Tok::Splice(get_count(input)?),
        other => return corrupt(&format!("unknown token kind {other}")),
    })
}

// ---- changed numbers --------------------------------------------------------------------

const XOR_PREVIOUS: u8 = 0x00;
const XOR_PREDICTED: u8 = 0x40;
const DECIMAL_DELTA: u8 = 0x80;
const DECIMAL_ABSOLUTE: u8 = 0x88;
const EXACTLY_PREDICTED: u8 = 0x90;
/// The decimal forms try `n / 10^d` for these d (9: nanoseconds, as `Duration`s give).
const POW10: [f64; 8] = [1.0, 10.0, 100.0, 1e3, 1e4, 1e6, 1e9, 1e12];
/// Integers up to this size are exact in an f64.
const EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// The linear prediction from the two previous values.
fn predict(p: f64, pp: f64) -> f64 {
    p + (p - pp)
}

/// `(n, r)`: `x` as `n / 10^d` plus `r` units in the last place, when `n` is exact.
fn decimal(x: f64, d: usize) -> Option<(i64, i64)> {
    let n = (x * POW10[d]).round();
    if !n.is_finite() || n.abs() > EXACT_INT {
        return None;
    }
    // The base is made from the integer, as the reader makes it (so -0.0 stays apart from 0.0).
    let n = n as i64;
    let base = n as f64 / POW10[d];
    let r = (x.to_bits() as i64).wrapping_sub(base.to_bits() as i64);
    Some((n, r))
}

fn from_decimal(n: i64, r: i64, d: usize) -> f64 {
    let base = n as f64 / POW10[d];
    f64::from_bits((base.to_bits() as i64).wrapping_add(r) as u64)
}

/// The XOR form: a tag with the counts of zero bytes left out, then the bytes between.
fn put_xor(out: &mut Vec<u8>, mode: u8, x: u64) {
    let lead = ((x.leading_zeros() / 8) as u8).min(7);
    let trail = ((x.trailing_zeros() / 8) as u8).min(7 - lead);
    out.push(mode | (lead << 3) | trail);
    let bytes = x.to_be_bytes();
    out.extend_from_slice(&bytes[usize::from(lead)..8 - usize::from(trail)]);
}

fn xor_len(x: u64) -> usize {
    let lead = (x.leading_zeros() / 8).min(7) as usize;
    let trail = (x.trailing_zeros() / 8).min(7 - lead as u32) as usize;
    1 + 8 - lead - trail
}

fn decimal_candidate(c: f64, p: f64) -> Option<(usize, u8, u64, u64)> {
    let mut best: Option<(usize, u8, u64, u64)> = None;
    for d in 0..POW10.len() {
        let Some((n, r)) = decimal(c, d) else {
            continue;
        };
        let (tag, first) = match decimal(p, d) {
            Some((np, _)) => (DECIMAL_DELTA | d as u8, zigzag(n.wrapping_sub(np))),
            None => (DECIMAL_ABSOLUTE | d as u8, zigzag(n)),
        };
        let second = zigzag(r);
        let len = 1 + varint_len(first) + varint_len(second);
        if best.is_none_or(|(l, ..)| len < l) {
            best = Some((len, tag, first, second));
        }
        if r == 0 {
            break;
        }
    }
    best
}

/// Writes float `c`, which replaced `p` (itself preceded by `pp`, when known).
pub(crate) fn put_float_change(out: &mut Vec<u8>, c: f64, p: f64, pp: Option<f64>) {
    let cb = c.to_bits();
    let predicted = pp.map(|pp| predict(p, pp).to_bits());
    if predicted == Some(cb) {
        out.push(EXACTLY_PREDICTED);
        return;
    }
    let by_previous = cb ^ p.to_bits();
    let mut best = (xor_len(by_previous), XOR_PREVIOUS, by_previous);
    if let Some(predicted) = predicted {
        let x = cb ^ predicted;
        if xor_len(x) < best.0 {
            best = (xor_len(x), XOR_PREDICTED, x);
        }
    }
    if best.0 > 2 {
        if let Some((len, tag, first, second)) = decimal_candidate(c, p) {
            if len < best.0 {
                out.push(tag);
                put_varint(out, first);
                put_varint(out, second);
                return;
            }
        }
    }
    put_xor(out, best.1, best.2);
}

pub(crate) fn get_float_change(input: &mut &[u8], p: f64, pp: Option<f64>) -> Result<f64> {
    let tag = get_u8(input)?;
    let predicted = || {
        pp.map(|pp| predict(p, pp))
            .ok_or_else(|| Corrupt("a figure is predicted from values the frame lacks".into()))
    };
    match tag {
        EXACTLY_PREDICTED => predicted(),
        0x00..=0x7f => {
            let lead = usize::from((tag >> 3) & 7);
            let trail = usize::from(tag & 7);
            if lead + trail >= 8 {
                return corrupt("a figure has no bytes");
            }
            let mut bytes = [0u8; 8];
            bytes[lead..8 - trail].copy_from_slice(get_bytes(input, 8 - lead - trail)?);
            let x = u64::from_be_bytes(bytes);
            let base = if tag & XOR_PREDICTED != 0 {
                predicted()?
            } else {
                p
            };
            Ok(f64::from_bits(base.to_bits() ^ x))
        }
        0x80..=0x8f => {
            let d = usize::from(tag & 7);
            let first = unzigzag(get_varint(input)?);
            let r = unzigzag(get_varint(input)?);
            let n = if tag & DECIMAL_ABSOLUTE == DECIMAL_ABSOLUTE {
                first
            } else {
                let (np, _) = decimal(p, d)
                    .ok_or_else(|| Corrupt("a decimal figure follows one that is not".into()))?;
                np.wrapping_add(first)
            };
            Ok(from_decimal(n, r, d))
        }
        _ => corrupt("unknown figure form"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(c: f64, p: f64, pp: Option<f64>) -> usize {
        let mut out = Vec::new();
        put_float_change(&mut out, c, p, pp);
        let mut input = out.as_slice();
        let back = get_float_change(&mut input, p, pp).unwrap();
        assert_eq!(back.to_bits(), c.to_bits(), "{c} after {p}, {pp:?}");
        assert!(input.is_empty());
        out.len()
    }

    #[test]
    fn every_float_comes_back_bit_for_bit() {
        let values = [
            0.0,
            -0.0,
            1.0,
            5.450000000000273,
            412.125,
            566.275,
            3125.36,
            f64::NAN,
            f64::INFINITY,
            f64::MIN_POSITIVE,
            -1e300,
            1e-300,
            0.1 + 0.2,
        ];
        for &c in &values {
            for &p in &values {
                round_trip(c, p, None);
                for &pp in &values {
                    round_trip(c, p, Some(pp));
                }
            }
        }
    }

    #[test]
    fn running_times_and_read_figures_are_short() {
        // A running time computed as uptime minus start: linear from one second to the next.
        let started = 311_991.0 / 100.0;
        let at = |uptime: f64| uptime - started;
        assert!(round_trip(at(3127.36), at(3126.36), Some(at(3125.36))) <= 3);
        // Watts from milliwatts, and load averages: decimal.
        assert!(round_trip(566.275, 412.5, None) <= 5);
        assert!(round_trip(4.84, 4.8, None) <= 3);
    }

    #[test]
    fn varints_and_tokens_round_trip_and_bad_bytes_are_errors() {
        for v in [0, 1, 127, 128, 300, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            assert_eq!(get_varint(&mut out.as_slice()).unwrap(), v);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert!(get_varint(&mut [0xffu8; 11].as_slice()).is_err());
        assert!(get_tok(&mut [6u8, 50, b'a'].as_slice()).is_err());
        assert!(get_tok(&mut [77u8].as_slice()).is_err());
        assert!(get_tok(&mut [6u8, 2, 0xff, 0xfe].as_slice()).is_err());
        let mut out = Vec::new();
        put_tok(&mut out, &Tok::Key("pid".into()));
        assert_eq!(
            get_tok(&mut out.as_slice()).unwrap(),
            Tok::Key("pid".into())
        );
    }
}
