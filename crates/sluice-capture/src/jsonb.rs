//! MySQL 8 binary JSON (column type JSON, 245; the server's "JSONB" storage format) decoded to
//! JSON text. MariaDB never sends this: its JSON is a LONGTEXT and is decoded as text.
//!
//! The format (MySQL `sql-common/json_binary.h`), all integers little-endian:
//!
//! ```text
//! doc        ::= type value
//! type       ::= 0x00 small object | 0x01 large object | 0x02 small array | 0x03 large array
//!              | 0x04 literal | 0x05 int16 | 0x06 uint16 | 0x07 int32 | 0x08 uint32
//!              | 0x09 int64 | 0x0a uint64 | 0x0b double | 0x0c string | 0x0f opaque
//! object     ::= count size key-entry* value-entry* key* value*     (count, size: 2 bytes small,
//! array      ::= count size value-entry* value*                      4 bytes large)
//! key-entry  ::= key-offset (2|4) key-length (2)
//! value-entry::= type offset-or-inlined-value (2|4)   literal/int16/uint16 inlined (and in large
//!                                                     containers int32/uint32 too); offsets are
//!                                                     from the start of the container
//! literal    ::= 0x00 null | 0x01 true | 0x02 false
//! string     ::= data-length utf8mb4-data          data-length: 1-5 bytes, 7 bits each, low first
//! opaque     ::= field-type data-length data        DECIMAL: precision, scale, binary decimal;
//!                                                   DATE/TIME/DATETIME/TIMESTAMP: 8-byte packed
//! ```
//!
//! Output (the "canonical JSON text" of [`sluice_types::Value::Json`]): compact (no spaces),
//! object members in stored order (MySQL stores keys sorted by length, then bytes, and without
//! duplicates), integers as integers, doubles with a fraction or exponent (`1.0`, `1e300`),
//! strings JSON-escaped. Opaque values print as MySQL prints them: DECIMAL as a bare number,
//! DATE as `"YYYY-MM-DD"`, DATETIME/TIMESTAMP as `"YYYY-MM-DD hh:mm:ss.ffffff"`, TIME as
//! `"[-]hh:mm:ss.ffffff"`, any other field type as `"base64:typeN:<base64 of the data>"`.
//! A zero-length value (MySQL writes one for a NOT NULL JSON column given no value in non-strict
//! mode) is `null`, as the server reads it.
//!
//! Invariant: external bytes never panic or read out of bounds here; truncated or corrupt input
//! is a [`JsonbError`], and nesting is bounded by [`MAX_DEPTH`].

use std::fmt::Write as _;

/// Deeper documents are refused (MySQL itself refuses more than 100 levels).
pub const MAX_DEPTH: usize = 150;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonbError {
    #[error(
        "binary JSON truncated: {what} needs {need} bytes at offset {at} of a {len}-byte value"
    )]
    Truncated {
        what: &'static str,
        at: usize,
        need: usize,
        len: usize,
    },
    #[error("binary JSON: unknown value type 0x{0:02x}")]
    UnknownType(u8),
    #[error("binary JSON: unknown literal 0x{0:02x}")]
    UnknownLiteral(u8),
    #[error("binary JSON: nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("binary JSON corrupt: {0}")]
    Corrupt(String),
}

const SMALL_OBJECT: u8 = 0x00;
const LARGE_OBJECT: u8 = 0x01;
const SMALL_ARRAY: u8 = 0x02;
const LARGE_ARRAY: u8 = 0x03;
const LITERAL: u8 = 0x04;
const INT16: u8 = 0x05;
const UINT16: u8 = 0x06;
const INT32: u8 = 0x07;
const UINT32: u8 = 0x08;
const INT64: u8 = 0x09;
const UINT64: u8 = 0x0a;
const DOUBLE: u8 = 0x0b;
const STRING: u8 = 0x0c;
const OPAQUE: u8 = 0x0f;

/// MySQL field types that can appear inside an opaque value with a special text form.
const FT_TIMESTAMP: u8 = 7;
const FT_DATE: u8 = 10;
const FT_TIME: u8 = 11;
const FT_DATETIME: u8 = 12;
const FT_NEWDECIMAL: u8 = 246;

/// Decodes one binary JSON value (the bytes of a JSON column, without its length prefix) into
/// compact JSON text.
pub fn to_json_text(b: &[u8]) -> Result<String, JsonbError> {
    let mut out = String::with_capacity(b.len() + b.len() / 2 + 4);
    if b.is_empty() {
        out.push_str("null");
        return Ok(out);
    }
    value(b[0], &b[1..], &mut out, 0)?;
    Ok(out)
}

/// A bounds-checked slice read: `b[at..at + n]`.
fn get<'a>(b: &'a [u8], at: usize, n: usize, what: &'static str) -> Result<&'a [u8], JsonbError> {
    at.checked_add(n)
        .and_then(|end| b.get(at..end))
        .ok_or(JsonbError::Truncated {
            what,
            at,
            need: n,
            len: b.len(),
        })
}

fn uint(b: &[u8], at: usize, n: usize, what: &'static str) -> Result<u64, JsonbError> {
    Ok(get(b, at, n, what)?
        .iter()
        .rev()
        .fold(0u64, |acc, x| (acc << 8) | *x as u64))
}

/// Reads a variable-length length (1-5 bytes of 7 bits, low group first); returns
/// `(length, bytes used)`.
fn var_len(b: &[u8], at: usize) -> Result<(usize, usize), JsonbError> {
    let mut len: u64 = 0;
    for i in 0..5 {
        let byte = *b.get(at + i).ok_or(JsonbError::Truncated {
            what: "data length",
            at: at + i,
            need: 1,
            len: b.len(),
        })?;
        len |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l <= u32::MAX as usize)
                .ok_or_else(|| JsonbError::Corrupt(format!("data length {len} too large")))?;
            return Ok((len, i + 1));
        }
    }
    Err(JsonbError::Corrupt(
        "data length uses more than 5 bytes".into(),
    ))
}

/// Writes the value of type `t` whose data starts at `b[0]`. `b` extends to the end of the
/// enclosing container (or document).
fn value(t: u8, b: &[u8], out: &mut String, depth: usize) -> Result<(), JsonbError> {
    match t {
        SMALL_OBJECT | LARGE_OBJECT | SMALL_ARRAY | LARGE_ARRAY => {
            if depth >= MAX_DEPTH {
                return Err(JsonbError::TooDeep);
            }
            container(t, b, out, depth + 1)
        }
        LITERAL => literal(
            *b.first().ok_or(JsonbError::Truncated {
                what: "literal",
                at: 0,
                need: 1,
                len: 0,
            })?,
            out,
        ),
        INT16 => {
            let _ = write!(out, "{}", uint(b, 0, 2, "int16")? as u16 as i16);
            Ok(())
        }
        UINT16 => {
            let _ = write!(out, "{}", uint(b, 0, 2, "uint16")?);
            Ok(())
        }
        INT32 => {
            let _ = write!(out, "{}", uint(b, 0, 4, "int32")? as u32 as i32);
            Ok(())
        }
        UINT32 => {
            let _ = write!(out, "{}", uint(b, 0, 4, "uint32")?);
            Ok(())
        }
        INT64 => {
            let _ = write!(out, "{}", uint(b, 0, 8, "int64")? as i64);
            Ok(())
        }
        UINT64 => {
            let _ = write!(out, "{}", uint(b, 0, 8, "uint64")?);
            Ok(())
        }
        DOUBLE => double(f64::from_bits(uint(b, 0, 8, "double")?), out),
        STRING => {
            let (len, used) = var_len(b, 0)?;
            let s = get(b, used, len, "string")?;
            let s = std::str::from_utf8(s)
                .map_err(|e| JsonbError::Corrupt(format!("string is not UTF-8: {e}")))?;
            quote(s, out);
            Ok(())
        }
        OPAQUE => {
            let ft = *b.first().ok_or(JsonbError::Truncated {
                what: "opaque type",
                at: 0,
                need: 1,
                len: 0,
            })?;
            let (len, used) = var_len(b, 1)?;
            let data = get(b, 1 + used, len, "opaque data")?;
            opaque(ft, data, out)
        }
        other => Err(JsonbError::UnknownType(other)),
    }
}

fn literal(l: u8, out: &mut String) -> Result<(), JsonbError> {
    out.push_str(match l {
        0 => "null",
        1 => "true",
        2 => "false",
        other => return Err(JsonbError::UnknownLiteral(other)),
    });
    Ok(())
}

fn double(f: f64, out: &mut String) -> Result<(), JsonbError> {
    if !f.is_finite() {
        return Err(JsonbError::Corrupt(format!(
            "double {f} is not a JSON number"
        )));
    }
    // `{:?}` is the shortest repr that reads back to the same bits, and always has a fraction or
    // an exponent (`1.0`, `1e300`, `-0.0`): the value stays a double for the reader.
    let _ = write!(out, "{f:?}");
    Ok(())
}

fn container(t: u8, b: &[u8], out: &mut String, depth: usize) -> Result<(), JsonbError> {
    let large = t == LARGE_OBJECT || t == LARGE_ARRAY;
    let object = t == SMALL_OBJECT || t == LARGE_OBJECT;
    let w = if large { 4 } else { 2 };
    let count = uint(b, 0, w, "element count")? as usize;
    let size = uint(b, w, w, "container size")? as usize;
    if size > b.len() {
        return Err(JsonbError::Truncated {
            what: "container",
            at: 0,
            need: size,
            len: b.len(),
        });
    }
    let b = &b[..size];
    let key_entry = w + 2;
    let value_entry = 1 + w;
    count
        .checked_mul(if object {
            key_entry + value_entry
        } else {
            value_entry
        })
        .and_then(|x| x.checked_add(2 * w))
        .filter(|h| *h <= size)
        .ok_or_else(|| {
            JsonbError::Corrupt(format!(
                "container of {count} elements does not fit its size {size}"
            ))
        })?;
    let values_at = 2 * w + if object { count * key_entry } else { 0 };
    out.push(if object { '{' } else { '[' });
    for i in 0..count {
        if i > 0 {
            out.push(',');
        }
        if object {
            let e = 2 * w + i * key_entry;
            let off = uint(b, e, w, "key offset")? as usize;
            let len = uint(b, e + w, 2, "key length")? as usize;
            let key = get(b, off, len, "key")?;
            let key = std::str::from_utf8(key)
                .map_err(|e| JsonbError::Corrupt(format!("key is not UTF-8: {e}")))?;
            quote(key, out);
            out.push(':');
        }
        let e = values_at + i * value_entry;
        let vt = *get(b, e, 1, "value type")?.first().unwrap_or(&0);
        let inlined = match vt {
            LITERAL | INT16 | UINT16 => true,
            INT32 | UINT32 => large,
            _ => false,
        };
        if inlined {
            value(vt, get(b, e + 1, w, "inlined value")?, out, depth)?;
        } else {
            let off = uint(b, e + 1, w, "value offset")? as usize;
            if off < values_at || off >= size {
                return Err(JsonbError::Corrupt(format!(
                    "value offset {off} outside the container (header {values_at}, size {size})"
                )));
            }
            value(vt, &b[off..], out, depth)?;
        }
    }
    out.push(if object { '}' } else { ']' });
    Ok(())
}

/// Writes `s` as a JSON string.
pub(crate) fn quote(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let esc = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '\n' => "\\n",
            '\r' => "\\r",
            '\t' => "\\t",
            '\u{8}' => "\\b",
            '\u{c}' => "\\f",
            c if (c as u32) < 0x20 => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push_str(esc);
        }
        start = i + c.len_utf8();
    }
    out.push_str(&s[start..]);
    out.push('"');
}

fn opaque(ft: u8, data: &[u8], out: &mut String) -> Result<(), JsonbError> {
    match ft {
        FT_NEWDECIMAL => {
            let (p, s) = match data {
                [p, s, ..] => (*p as usize, *s as usize),
                _ => {
                    return Err(JsonbError::Truncated {
                        what: "decimal precision and scale",
                        at: 0,
                        need: 2,
                        len: data.len(),
                    })
                }
            };
            let text = crate::rowimage::decimal_text(&data[2..], p, s)
                .map_err(|m| JsonbError::Corrupt(format!("decimal: {m}")))?;
            out.push_str(&text);
            Ok(())
        }
        FT_DATE | FT_DATETIME | FT_TIMESTAMP | FT_TIME => {
            let raw = get(data, 0, 8, "packed temporal")?;
            let packed = raw.iter().rev().fold(0u64, |acc, x| (acc << 8) | *x as u64) as i64;
            let negative = packed < 0;
            let p = packed.unsigned_abs();
            let micros = p & 0xff_ffff;
            let int = p >> 24;
            if ft == FT_TIME {
                let hms = int;
                let _ = write!(
                    out,
                    "\"{}{:02}:{:02}:{:02}.{:06}\"",
                    if negative { "-" } else { "" },
                    (hms >> 12) & 0x3ff,
                    (hms >> 6) & 0x3f,
                    hms & 0x3f,
                    micros
                );
            } else {
                let ymd = int >> 17;
                let ym = ymd >> 5;
                let hms = int & 0x1ffff;
                let _ = write!(out, "\"{:04}-{:02}-{:02}", ym / 13, ym % 13, ymd & 31);
                if ft != FT_DATE {
                    let _ = write!(
                        out,
                        " {:02}:{:02}:{:02}.{:06}",
                        hms >> 12,
                        (hms >> 6) & 0x3f,
                        hms & 0x3f,
                        micros
                    );
                }
                out.push('"');
            }
            Ok(())
        }
        _ => {
            let _ = write!(out, "\"base64:type{ft}:");
            base64(data, out);
            out.push('"');
            Ok(())
        }
    }
}

fn base64(data: &[u8], out: &mut String) {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (*b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut s = String::new();
            base64(i.as_bytes(), &mut s);
            assert_eq!(s, o);
        }
    }

    #[test]
    fn quote_escapes_json_specials() {
        let mut s = String::new();
        quote("a\"b\\c\nd\u{1}é", &mut s);
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }

    #[test]
    fn var_len_rejects_six_byte_lengths() {
        assert!(matches!(
            var_len(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01], 0),
            Err(JsonbError::Corrupt(_))
        ));
        assert_eq!(var_len(&[0xbe, 0x15], 0), Ok((2750, 2)));
    }
}
