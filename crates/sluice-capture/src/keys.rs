//! Row keys: the memcomparable encoding of a row's primary key (or not-null unique key), so
//! that byte order of keys equals the upstream's order of key values and two values the
//! upstream considers equal get the same bytes.
//!
//! Invariants:
//! - `encode(a) < encode(b)` bytewise iff `a < b` in the column's order, for every type used
//!   in keys (integers, decimals, floats, strings, binary, temporal, enum/set/bit/year);
//! - strings are encoded by their collation weight: case-insensitive collations fold case
//!   (Unicode simple uppercase, per character), PAD SPACE collations drop trailing spaces, so
//!   `'a'`, `'A'` and `'a '` are one key under MariaDB's default collations. Accent folding of
//!   `general_ci` (é = e) is not modelled: such rows get distinct keys (still correct routing,
//!   only the "same key" grouping is finer than the upstream's);
//! - the encoding is self-delimiting per column, so concatenating columns keeps the order.

use crate::decode::{is_case_sensitive, is_pad_space};
use sluice_types::{Key, TableId, Value};

/// Encodes one key column value.
pub fn encode_value(out: &mut Vec<u8>, v: &Value, collation: u16) {
    match v {
        Value::Null => out.push(0x00),
        Value::Int(i) => {
            out.push(0x03);
            out.extend_from_slice(&((*i as u64) ^ (1 << 63)).to_be_bytes());
        }
        Value::UInt(u) => {
            out.push(0x03);
            out.extend_from_slice(&u.to_be_bytes());
        }
        Value::Float(f) => {
            out.push(0x04);
            out.extend_from_slice(&float_key(*f as f64));
        }
        Value::Double(f) => {
            out.push(0x04);
            out.extend_from_slice(&float_key(*f));
        }
        Value::Decimal(s) => {
            out.push(0x05);
            encode_decimal(out, s);
        }
        Value::Text(s) => {
            out.push(0x06);
            let w = weight(s, collation);
            encode_bytes(out, w.as_bytes());
        }
        Value::Bytes(b) | Value::Geometry(b) => {
            out.push(0x06);
            encode_bytes(out, b);
        }
        Value::Json(s) => {
            out.push(0x06);
            encode_bytes(out, s.as_bytes());
        }
        Value::Date { year, month, day } => {
            out.push(0x07);
            out.extend_from_slice(&year.to_be_bytes());
            out.extend_from_slice(&[*month, *day]);
        }
        Value::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        } => {
            out.push(0x07);
            out.extend_from_slice(&year.to_be_bytes());
            out.extend_from_slice(&[*month, *day, *hour, *minute, *second]);
            out.extend_from_slice(&micros.to_be_bytes());
        }
        Value::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => {
            out.push(0x07);
            let total = ((*hours as i64 * 60 + *minutes as i64) * 60 + *seconds as i64) * 1_000_000
                + *micros as i64;
            let signed = if *negative { -total } else { total };
            out.extend_from_slice(&((signed as u64) ^ (1 << 63)).to_be_bytes());
        }
        Value::Timestamp { micros } => {
            out.push(0x07);
            out.extend_from_slice(&((*micros as u64) ^ (1 << 63)).to_be_bytes());
        }
        Value::Year(y) => {
            out.push(0x03);
            out.extend_from_slice(&(*y as u64).to_be_bytes());
        }
        Value::Enum { index, .. } => {
            out.push(0x03);
            out.extend_from_slice(&(*index as u64).to_be_bytes());
        }
        Value::Set { bits, .. } | Value::Bit { bits, .. } => {
            out.push(0x03);
            out.extend_from_slice(&bits.to_be_bytes());
        }
    }
}

/// The key of a row: table prefix plus the encoded key columns. `columns` pairs each key column's
/// index with its collation id. A table without a key uses an empty encoding (one span).
pub fn row_key(table: TableId, row: &[Value], columns: &[(usize, u16)]) -> Key {
    // `Key::row(table, &encoded)` built in place: one allocation instead of three (the test
    // `row_key_is_key_row` checks the bytes are the same).
    let mut k = Vec::with_capacity(9 + 16 * columns.len());
    k.push(sluice_types::TABLE_PREFIX);
    k.extend_from_slice(&table.0.to_be_bytes());
    for (i, coll) in columns {
        encode_value(&mut k, row.get(*i).unwrap_or(&Value::Null), *coll);
    }
    Key(k)
}

/// The collation weight string of a text value.
pub fn weight(s: &str, collation: u16) -> String {
    let s = if is_pad_space(collation) {
        s.trim_end_matches(' ')
    } else {
        s
    };
    if is_case_sensitive(collation) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            let mut up = c.to_uppercase();
            match (up.next(), up.next()) {
                (Some(u), None) => u,
                _ => c,
            }
        })
        .collect()
}

/// Escaped bytes: 0x00 → 0x00 0xFF, terminated by 0x00 0x01 (order-preserving, self-delimiting).
fn encode_bytes(out: &mut Vec<u8>, b: &[u8]) {
    for &c in b {
        out.push(c);
        if c == 0 {
            out.push(0xff);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

fn float_key(f: f64) -> [u8; 8] {
    let f = if f == 0.0 { 0.0 } else { f }; // -0.0 == 0.0
    let b = f.to_bits();
    let k = if b >> 63 == 1 { !b } else { b | (1 << 63) };
    k.to_be_bytes()
}

/// Decimal text → sign byte, then (for positives) exponent and digits, terminated; negatives are
/// the bitwise complement so larger magnitudes sort first.
fn encode_decimal(out: &mut Vec<u8>, s: &str) {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    let mut digits: Vec<u8> = int.bytes().chain(frac.bytes()).collect();
    // exponent = number of integer digits; leading zeros of a pure fraction lower it.
    let mut exp = int.len() as i32;
    if int.is_empty() {
        let lead = frac.bytes().take_while(|b| *b == b'0').count();
        exp = -(lead as i32);
        digits.drain(..lead);
    }
    if digits.is_empty() {
        out.push(0x01);
        return;
    }
    let mut body = Vec::with_capacity(digits.len() + 5);
    body.extend_from_slice(&((exp as u32) ^ (1 << 31)).to_be_bytes());
    body.extend(digits.iter().map(|d| d.wrapping_sub(b'0') + 1));
    body.push(0);
    if neg {
        out.push(0x00);
        out.extend(body.iter().map(|b| !b));
    } else {
        out.push(0x02);
        out.extend(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: Value, coll: u16) -> Vec<u8> {
        let mut o = Vec::new();
        encode_value(&mut o, &v, coll);
        o
    }

    #[test]
    fn ci_pad_space_collation_makes_one_key() {
        let c = 45; // utf8mb4_general_ci
        let a = enc(Value::Text("a".into()), c);
        assert_eq!(a, enc(Value::Text("A".into()), c));
        assert_eq!(a, enc(Value::Text("a ".into()), c));
        assert_ne!(a, enc(Value::Text("b".into()), c));
        // binary collation keeps them apart
        assert_ne!(
            enc(Value::Text("a".into()), 46),
            enc(Value::Text("A".into()), 46)
        );
        // NO PAD keeps trailing spaces
        assert_ne!(
            enc(Value::Text("a".into()), 1024 + 45),
            enc(Value::Text("a ".into()), 1024 + 45)
        );
    }

    #[test]
    fn order_is_preserved() {
        let ints = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in ints.windows(2) {
            assert!(enc(Value::Int(w[0]), 0) < enc(Value::Int(w[1]), 0));
        }
        let decs = [
            "-100.5", "-100", "-2.25", "-0.001", "0", "0.000", "0.0001", "0.5", "1", "1.05", "1.5",
            "10", "99.99",
        ];
        for w in decs.windows(2) {
            let (a, b) = (
                enc(Value::Decimal(w[0].into()), 0),
                enc(Value::Decimal(w[1].into()), 0),
            );
            if w[0] == "0" {
                assert_eq!(a, b);
            } else {
                assert!(a < b, "{} < {}", w[0], w[1]);
            }
        }
        let strs = ["", "a", "a\0", "ab", "b"];
        for w in strs.windows(2) {
            assert!(enc(Value::Bytes(w[0].into()), 63) < enc(Value::Bytes(w[1].into()), 63));
        }
        let fl = [f64::NEG_INFINITY, -1.5, 0.0, 1e-9, 2.0];
        for w in fl.windows(2) {
            assert!(enc(Value::Double(w[0]), 0) < enc(Value::Double(w[1]), 0));
        }
        // composite keys: (1, "b") < (2, "a")
        let k1 = row_key(
            TableId(1),
            &[Value::Int(1), Value::Text("b".into())],
            &[(0, 0), (1, 45)],
        );
        let k2 = row_key(
            TableId(1),
            &[Value::Int(2), Value::Text("a".into())],
            &[(0, 0), (1, 45)],
        );
        assert!(k1 < k2);
    }

    #[test]
    fn row_key_is_key_row() {
        let row = vec![
            Value::Int(-7),
            Value::Text("Ab ".into()),
            Value::Null,
            Value::UInt(u64::MAX),
        ];
        let cols = [(0usize, 0u16), (1, 45), (2, 0), (3, 0)];
        let mut enc = Vec::new();
        for (i, c) in &cols {
            encode_value(&mut enc, &row[*i], *c);
        }
        assert_eq!(
            row_key(TableId(1234), &row, &cols),
            Key::row(TableId(1234), &enc)
        );
        assert_eq!(row_key(TableId(5), &row, &[]), Key::row(TableId(5), &[]));
    }
}
