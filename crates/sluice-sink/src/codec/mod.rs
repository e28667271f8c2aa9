//! Row codecs of the sinks: csv ([`csv`]) and canal-json ([`canal`]) for storage, canal-json, the
//! Debezium envelope ([`debezium`]) TiCDC's Open Protocol ([`open`])
//! and Simple protocol ([`simple`]) for Kafka, each encode and decode (decode serves
//! `consume`), plus the value-to-text rules they share and the JSON writer ([`json`]) the JSON
//! protocols append their text with.
//!
//! Invariants:
//! - encoding is a pure function of (schema, row, options): the same input gives the same bytes
//!   (golden files pin them);
//! - every [`Value`] variant has one text form ([`value_text`]); times are UTC; fractional
//!   seconds are printed to the column's precision;
//! - decoding never panics on external data: malformed input is a [`SinkError::Codec`].

pub mod avro;
pub mod canal;
pub mod csv;
pub mod debezium;
pub mod json;
pub mod open;
pub mod simple;

use crate::error::{Result, SinkError};
use sluice_types::{ColumnDef, ColumnType, RowEvent, RowKind, TableSchema, Value};

// Times are UTC and split by the one calendar implementation (`sluice_types::civil`).
pub use sluice_types::civil::{civil_from_days, utc_parts};

fn frac(micros: u32, decimals: u8) -> String {
    if decimals == 0 {
        return String::new();
    }
    let d = usize::from(decimals.min(6));
    let s = format!("{micros:06}");
    format!(".{}", &s[..d])
}

/// True for column types whose values are raw bytes (encoded base64/hex in csv, ISO-8859-1 in
/// canal-json).
pub fn is_binary(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob | ColumnType::Geometry
    )
}

/// The text form of a value that holds it already (text, decimal, JSON), borrowed: what
/// [`value_text`] gives for it, without a copy.
pub fn value_str(v: &Value) -> Option<&str> {
    match v {
        Value::Decimal(s) | Value::Text(s) | Value::Json(s) => Some(s),
        _ => None,
    }
}

/// The text form of a non-binary value; `None` for NULL. `Bytes` in a character column (data not
/// valid in its charset) is shown lossily here; the codecs handle binary columns themselves.
pub fn value_text(v: &Value, col: &ColumnDef) -> Option<String> {
    Some(match v {
        Value::Null => return None,
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Double(f) => f.to_string(),
        Value::Decimal(s) | Value::Text(s) | Value::Json(s) => s.clone(),
        Value::Bytes(b) | Value::Geometry(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Date { year, month, day } => format!("{year:04}-{month:02}-{day:02}"),
        Value::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => format!(
            "{}{hours:02}:{minutes:02}:{seconds:02}{}",
            if *negative { "-" } else { "" },
            frac(*micros, col.decimals)
        ),
        Value::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        } => format!(
            "{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}{}",
            frac(*micros, col.decimals)
        ),
        Value::Timestamp { micros } => {
            let (y, m, d, h, mi, s, us) = utc_parts(*micros);
            format!(
                "{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}{}",
                frac(us, col.decimals)
            )
        }
        Value::Year(y) => format!("{y:04}"),
        Value::Enum { name, .. } => name.clone(),
        Value::Set { names, .. } => names.join(","),
        Value::Bit { bits, .. } => bits.to_string(),
    })
}

/// The width of a BIT column: its length, else the `(n)` of its type, else 1 (MySQL's default).
pub(crate) fn bit_width(col: &ColumnDef) -> u64 {
    if col.length > 0 {
        return col.length;
    }
    let t = &col.sql_type;
    t.find('(')
        .and_then(|i| t[i + 1..].split(')').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(1)
}

/// The raw bytes of a value in a binary column (text values give their UTF-8 bytes).
pub fn value_bytes(v: &Value, col: &ColumnDef) -> Option<Vec<u8>> {
    match v {
        Value::Null => None,
        Value::Bytes(b) | Value::Geometry(b) => Some(b.clone()),
        other => value_text(other, col).map(String::into_bytes),
    }
}

/// Builds the decoded value of one column from its text (consume's side): binary columns get
/// bytes, BIT gets an integer, everything else stays text and is converted by the downstream.
pub fn value_from_text(
    col: &ColumnDef,
    text: Option<String>,
    bytes: Option<Vec<u8>>,
) -> Result<Value> {
    if let Some(b) = bytes {
        return Ok(Value::Bytes(b));
    }
    let Some(t) = text else {
        return Ok(Value::Null);
    };
    Ok(match col.ty {
        ColumnType::Bit => {
            let bits = t.parse::<u64>().map_err(|_| {
                SinkError::Codec(format!("column {}: bad BIT value {t:?}", col.name))
            })?;
            Value::UInt(bits)
        }
        _ => Value::Text(t),
    })
}

/// One decoded row change (consume's unit): the kind, the commit ts when the encoding has it,
/// and the before/after images.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedRow {
    pub kind: RowKind,
    pub commit_ts: Option<u64>,
    pub before: Option<Vec<Value>>,
    pub after: Option<Vec<Value>>,
}

impl DecodedRow {
    pub fn into_event(self, schema: &TableSchema, fallback_ts: u64) -> RowEvent {
        RowEvent {
            table_id: schema.table_id,
            schema_version: schema.version,
            commit_ts: self.commit_ts.unwrap_or(fallback_ts),
            commit_time_ms: 0,
            kind: self.kind,
            key: sluice_types::Key::table_start(schema.table_id),
            before: self.before,
            after: self.after,
            snapshot: false,
            gtid: None,
        }
    }
}

/// Standard base64 (RFC 4648, with padding).
pub fn base64_encode(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        out.push(A[(n >> 18) as usize & 63] as char);
        out.push(A[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            A[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            A[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

pub fn base64_decode(s: &str) -> Result<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return Err(SinkError::Codec(format!(
            "bad base64 length {}",
            bytes.len()
        )));
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for q in bytes.chunks(4) {
        let pad = q.iter().rev().take_while(|c| **c == b'=').count();
        let mut n = 0u32;
        for (i, c) in q.iter().enumerate() {
            let v = if i >= 4 - pad {
                0
            } else {
                val(*c).ok_or_else(|| SinkError::Codec("bad base64 character".into()))?
            };
            n = (n << 6) | v;
        }
        out.push((n >> 16) as u8);
        if pad < 2 {
            out.push((n >> 8) as u8);
        }
        if pad < 1 {
            out.push(n as u8);
        }
    }
    Ok(out)
}

pub fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn hex_decode(s: &str) -> Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return Err(SinkError::Codec("odd hex length".into()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(s.get(i..i + 2).unwrap_or("zz"), 16)
                .map_err(|_| SinkError::Codec("bad hex".into()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_roundtrip_and_known_values() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        for n in 0..40u8 {
            let v: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(base64_decode(&base64_encode(&v)).expect("decodes"), v);
            assert_eq!(hex_decode(&hex_encode(&v)).expect("decodes"), v);
        }
        assert!(base64_decode("Zm9").is_err());
        assert!(base64_decode("Z!9v").is_err());
    }
}
