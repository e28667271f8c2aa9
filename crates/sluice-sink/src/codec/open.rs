//! TiCDC's Open Protocol: a message's key and value are each a list of events framed by
//! big-endian 64-bit lengths (the key list starts with the protocol version, 1). Sluice writes
//! one event per message. Event keys are `{"ts","scm","tbl","t"}` (`t`: 1 row, 2 DDL, 3
//! resolved); a row's value holds its columns (`u` after, `p` before an update, `d` deleted),
//! each `{"t": type code, "h": handle, "f": flags, "v": value}`; a DDL's value is `{"q","t"}`.
//!
//! Invariants:
//! - encoding is a pure function of (schema, row): golden files pin it;
//! - values are lossless: TEXT and BLOB types base64, BINARY/VARBINARY escaped (`\xNN` for every
//!   byte outside printable ASCII, and `\\`), ENUM as its index, SET as its bit mask, BIT as its
//!   integer, times as MySQL text in UTC;
//! - decoding never panics on external data: malformed input is a [`SinkError::Codec`].

use super::{base64_decode, base64_encode, is_binary, value_bytes, value_text};
use crate::error::{Result, SinkError};
use serde_json::{json, Map, Value as Json};
use sluice_types::{
    ColumnDef, ColumnType, DdlEvent, DdlKind, RowEvent, RowKind, TableSchema, Ts, Value,
};

/// The Open Protocol version the key list starts with.
pub const VERSION: u64 = 1;

pub const BINARY_FLAG: u64 = 0x01;
pub const HANDLE_KEY_FLAG: u64 = 0x02;
pub const GENERATED_FLAG: u64 = 0x04;
pub const PRIMARY_KEY_FLAG: u64 = 0x08;
pub const MULTIPLE_KEY_FLAG: u64 = 0x20;
pub const NULLABLE_FLAG: u64 = 0x40;
pub const UNSIGNED_FLAG: u64 = 0x80;

/// The Open Protocol type code of a column (MySQL's type codes, as TiCDC lists them).
pub fn type_code(col: &ColumnDef) -> u64 {
    let sql = col.sql_type.to_ascii_lowercase();
    match col.ty {
        ColumnType::TinyInt => 1,
        ColumnType::SmallInt => 2,
        ColumnType::Int => 3,
        ColumnType::Float => 4,
        ColumnType::Double => 5,
        ColumnType::Timestamp => 7,
        ColumnType::BigInt => 8,
        ColumnType::MediumInt => 9,
        ColumnType::Date => 10,
        ColumnType::Time => 11,
        ColumnType::DateTime => 12,
        ColumnType::Year => 13,
        ColumnType::VarChar | ColumnType::VarBinary => 15,
        ColumnType::Bit => 16,
        ColumnType::Json => 245,
        ColumnType::Decimal => 246,
        ColumnType::Enum => 247,
        ColumnType::Set => 248,
        ColumnType::Text | ColumnType::Blob if sql.starts_with("tiny") => 249,
        ColumnType::Text | ColumnType::Blob if sql.starts_with("medium") => 250,
        ColumnType::Text | ColumnType::Blob if sql.starts_with("long") => 251,
        ColumnType::Text | ColumnType::Blob => 252,
        ColumnType::Char | ColumnType::Binary => 254,
        ColumnType::Geometry => 255,
    }
}

fn flags(schema: &TableSchema, i: usize) -> u64 {
    let col = &schema.columns[i];
    let mut f = 0;
    if is_binary(col.ty) {
        f |= BINARY_FLAG;
    }
    if schema.key_columns.contains(&i) {
        f |= HANDLE_KEY_FLAG | PRIMARY_KEY_FLAG;
        if schema.key_columns.len() > 1 {
            f |= MULTIPLE_KEY_FLAG;
        }
    }
    if col.generated.is_some() {
        f |= GENERATED_FLAG;
    }
    if col.nullable {
        f |= NULLABLE_FLAG;
    }
    if col.unsigned {
        f |= UNSIGNED_FLAG;
    }
    f
}

/// `\xNN` for every byte outside printable ASCII, `\\` for a backslash.
fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &x in b {
        match x {
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(char::from(x)),
            _ => s.push_str(&format!("\\x{x:02x}")),
        }
    }
    s
}

fn unescape(s: &str) -> Result<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1)) {
            (b'\\', Some(b'\\')) => {
                out.push(b'\\');
                i += 2;
            }
            (b'\\', Some(b'x')) => {
                let hex = s
                    .get(i + 2..i + 4)
                    .ok_or_else(|| SinkError::Codec("open-protocol: a cut \\x escape".into()))?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| {
                    SinkError::Codec(format!("open-protocol: bad escape \\x{hex}"))
                })?);
                i += 4;
            }
            (x, _) => {
                out.push(x);
                i += 1;
            }
        }
    }
    Ok(out)
}

fn column_value(v: &Value, col: &ColumnDef) -> Json {
    let code = type_code(col);
    match v {
        Value::Null => Json::Null,
        Value::Int(i) => json!(i),
        Value::UInt(u) => json!(u),
        Value::Float(f) => json!(f),
        Value::Double(f) => json!(f),
        Value::Year(y) => json!(y),
        Value::Enum { index, .. } => json!(index),
        Value::Set { bits, .. } | Value::Bit { bits, .. } => json!(bits),
        _ if (249..=252).contains(&code) || code == 255 => {
            json!(base64_encode(&value_bytes(v, col).unwrap_or_default()))
        }
        _ if is_binary(col.ty) => json!(escape(&value_bytes(v, col).unwrap_or_default())),
        other => value_text(other, col).map_or(Json::Null, Json::String),
    }
}

fn columns(schema: &TableSchema, values: &[Value]) -> Result<Json> {
    if values.len() != schema.columns.len() {
        return Err(SinkError::Codec(format!(
            "{}: row has {} values for {} columns",
            schema.qualified_name(),
            values.len(),
            schema.columns.len()
        )));
    }
    let mut m = Map::new();
    for (i, (v, col)) in values.iter().zip(&schema.columns).enumerate() {
        let mut c = Map::new();
        c.insert("t".into(), json!(type_code(col)));
        if schema.key_columns.contains(&i) {
            c.insert("h".into(), json!(true));
        }
        let f = flags(schema, i);
        if f != 0 {
            c.insert("f".into(), json!(f));
        }
        c.insert("v".into(), column_value(v, col));
        m.insert(col.name.clone(), Json::Object(c));
    }
    Ok(Json::Object(m))
}

/// Frames one event key as a message key (version, then the length-prefixed key).
pub fn frame_key(key: &str) -> Vec<u8> {
    let mut out = VERSION.to_be_bytes().to_vec();
    out.extend((key.len() as u64).to_be_bytes());
    out.extend(key.as_bytes());
    out
}

/// Frames one event value as a message value (length-prefixed).
pub fn frame_value(value: &str) -> Vec<u8> {
    let mut out = (value.len() as u64).to_be_bytes().to_vec();
    out.extend(value.as_bytes());
    out
}

/// The (key, value) of a row change's message.
pub fn encode_row(schema: &TableSchema, row: &RowEvent) -> Result<(Vec<u8>, Vec<u8>)> {
    let key = json!({"ts": row.commit_ts, "scm": schema.database, "tbl": schema.name, "t": 1})
        .to_string();
    let missing = || {
        SinkError::Codec(format!(
            "{}: {:?} row without its image",
            schema.qualified_name(),
            row.kind
        ))
    };
    let value = match row.kind {
        RowKind::Insert => {
            json!({"u": columns(schema, row.after.as_deref().ok_or_else(missing)?)?})
        }
        RowKind::Update => json!({
            "u": columns(schema, row.after.as_deref().ok_or_else(missing)?)?,
            "p": columns(schema, row.before.as_deref().ok_or_else(missing)?)?
        }),
        RowKind::Delete => {
            json!({"d": columns(schema, row.before.as_deref().ok_or_else(missing)?)?})
        }
    };
    Ok((frame_key(&key), frame_value(&value.to_string())))
}

/// TiCDC's DDL type code of a DDL kind (the closest one Sluice tells apart).
pub fn ddl_code(kind: DdlKind) -> u64 {
    match kind {
        DdlKind::CreateDatabase => 1,
        DdlKind::DropDatabase => 2,
        DdlKind::CreateTable => 3,
        DdlKind::DropTable => 4,
        DdlKind::TruncateTable => 11,
        DdlKind::AlterTable => 12,
        DdlKind::RenameTable => 14,
        DdlKind::CreateView => 21,
        DdlKind::DropView => 24,
        DdlKind::AlterDatabase => 26,
        DdlKind::Other | DdlKind::Unreplicable => 0,
    }
}

/// The (key, value) of a DDL's message; `table`: "" for a DDL of no table.
pub fn encode_ddl(ddl: &DdlEvent, table: &str) -> (Vec<u8>, Vec<u8>) {
    let key = json!({"ts": ddl.commit_ts, "scm": ddl.target_database(), "tbl": table, "t": 2})
        .to_string();
    let value = json!({"q": ddl.query, "t": ddl_code(ddl.kind)}).to_string();
    (frame_key(&key), frame_value(&value))
}

/// The (key, value) of a resolved event: every event of its partition with a smaller ts was
/// sent before it. The value is empty.
pub fn encode_resolved(ts: Ts) -> (Vec<u8>, Vec<u8>) {
    (
        frame_key(&json!({"ts": ts, "t": 3}).to_string()),
        Vec::new(),
    )
}

/// Splits a framed list (after `skip` leading bytes) into its elements.
fn unframe(b: &[u8], skip: usize) -> Result<Vec<&[u8]>> {
    let bad = || SinkError::Codec("open-protocol: a cut frame".into());
    let mut out = Vec::new();
    let mut i = skip;
    while i < b.len() {
        let len = u64::from_be_bytes(
            b.get(i..i + 8)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        ) as usize;
        out.push(b.get(i + 8..i + 8 + len).ok_or_else(bad)?);
        i += 8 + len;
    }
    Ok(out)
}

/// One decoded Open Protocol event.
#[derive(Debug)]
pub enum Event {
    Row {
        database: String,
        table: String,
        commit_ts: Ts,
        kind: RowKind,
        /// (name, type code, flags) of each column, in the message's order.
        columns: Vec<(String, u64, u64)>,
        before: Option<Vec<Value>>,
        after: Option<Vec<Value>>,
    },
    Ddl {
        database: String,
        query: String,
        commit_ts: Ts,
        code: u64,
    },
    Resolved(Ts),
}

fn err(what: &str) -> SinkError {
    SinkError::Codec(format!("open-protocol: {what}"))
}

/// Decodes every event of a message.
pub fn decode(key: &[u8], value: &[u8]) -> Result<Vec<Event>> {
    let version = u64::from_be_bytes(
        key.get(..8)
            .ok_or_else(|| err("a key without its version"))?
            .try_into()
            .map_err(|_| err("bad version"))?,
    );
    if version != VERSION {
        return Err(err(&format!("version {version}, not {VERSION}")));
    }
    let keys = unframe(key, 8)?;
    let values = unframe(value, 0)?;
    keys.iter()
        .enumerate()
        .map(|(i, k)| {
            let k: Json = serde_json::from_slice(k).map_err(|e| err(&e.to_string()))?;
            decode_event(&k, values.get(i).copied())
        })
        .collect()
}

fn decode_event(k: &Json, v: Option<&[u8]>) -> Result<Event> {
    let ts = k
        .get("ts")
        .and_then(Json::as_u64)
        .ok_or_else(|| err("a key without ts"))?;
    let s = |f: &str| {
        k.get(f)
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string()
    };
    match k.get("t").and_then(Json::as_u64) {
        Some(3) => Ok(Event::Resolved(ts)),
        Some(2) => {
            let v: Json = serde_json::from_slice(v.ok_or_else(|| err("a DDL without its value"))?)
                .map_err(|e| err(&e.to_string()))?;
            let query = v
                .get("q")
                .and_then(Json::as_str)
                .ok_or_else(|| err("a DDL without q"))?
                .to_string();
            Ok(Event::Ddl {
                database: s("scm"),
                query,
                commit_ts: ts,
                code: v.get("t").and_then(Json::as_u64).unwrap_or(0),
            })
        }
        Some(1) => {
            let v: Json = serde_json::from_slice(v.ok_or_else(|| err("a row without its value"))?)
                .map_err(|e| err(&e.to_string()))?;
            decode_row(s("scm"), s("tbl"), ts, &v)
        }
        other => Err(err(&format!("unknown event type {other:?}"))),
    }
}

fn decode_row(database: String, table: String, commit_ts: Ts, v: &Json) -> Result<Event> {
    let (kind, main) = if let Some(d) = v.get("d") {
        (RowKind::Delete, d)
    } else if v.get("p").is_some() {
        (
            RowKind::Update,
            v.get("u").ok_or_else(|| err("an update without u"))?,
        )
    } else {
        (
            RowKind::Insert,
            v.get("u").ok_or_else(|| err("a row without u or d"))?,
        )
    };
    let obj = main
        .as_object()
        .ok_or_else(|| err("columns are not an object"))?;
    let columns: Vec<(String, u64, u64)> = obj
        .iter()
        .map(|(name, c)| {
            (
                name.clone(),
                c.get("t").and_then(Json::as_u64).unwrap_or(0),
                c.get("f").and_then(Json::as_u64).unwrap_or(0),
            )
        })
        .collect();
    let image = |o: &Json| -> Result<Vec<Value>> {
        columns
            .iter()
            .map(|(name, t, f)| {
                column_from(
                    o.get(name).and_then(|c| c.get("v")).unwrap_or(&Json::Null),
                    *t,
                    *f,
                )
            })
            .collect()
    };
    let (before, after) = match kind {
        RowKind::Insert => (None, Some(image(main)?)),
        RowKind::Update => (
            Some(image(v.get("p").unwrap_or(&Json::Null))?),
            Some(image(main)?),
        ),
        RowKind::Delete => (Some(image(main)?), None),
    };
    Ok(Event::Row {
        database,
        table,
        commit_ts,
        kind,
        columns,
        before,
        after,
    })
}

/// A column value back in the form the MySQL sink writes: text, bytes for binary columns, an
/// integer for BIT, ENUM (its index) and SET (its bit mask).
fn column_from(v: &Json, code: u64, flags: u64) -> Result<Value> {
    let binary = flags & BINARY_FLAG != 0;
    Ok(match v {
        Json::Null => Value::Null,
        Json::Number(n) if matches!(code, 16 | 247 | 248) => Value::UInt(
            n.as_u64()
                .ok_or_else(|| err("a bad BIT, ENUM or SET value"))?,
        ),
        Json::Number(n) => Value::Text(n.to_string()),
        Json::String(s) if (249..=252).contains(&code) || code == 255 => {
            let b = base64_decode(s)?;
            if binary || code == 255 {
                Value::Bytes(b)
            } else {
                Value::Text(
                    String::from_utf8(b).map_err(|_| err("a TEXT value that is not UTF-8"))?,
                )
            }
        }
        Json::String(s) if binary => Value::Bytes(unescape(s)?),
        Json::String(s) => Value::Text(s.clone()),
        other => return Err(err(&format!("unexpected value {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_roundtrip_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let e = escape(&all);
        assert!(e.is_ascii());
        assert_eq!(unescape(&e).expect("unescapes"), all);
        assert_eq!(escape(b"a\\b\x00"), "a\\\\b\\x00");
        assert!(unescape("\\x4").is_err());
    }

    #[test]
    fn frames_split_back() {
        let k = frame_key("{\"ts\":1,\"t\":3}");
        assert_eq!(&k[..8], &1u64.to_be_bytes());
        let parts = unframe(&k, 8).expect("frames");
        assert_eq!(parts, vec![b"{\"ts\":1,\"t\":3}".as_slice()]);
        assert!(unframe(&k[..k.len() - 1], 8).is_err());
        let ev = decode(&k, &[]).expect("decodes");
        assert!(matches!(ev.as_slice(), [Event::Resolved(1)]));
    }
}
