//! Avro for the Kafka sink's `protocol=avro`, in TiCDC's layout and Confluent's wire format: a
//! message's key is a record of the table's key columns, its value a record of every column
//! (plus `_tidb_op`, `_tidb_commit_ts` and `_tidb_commit_physical_time` with
//! `enable-tidb-extension=true`); a delete is a tombstone (the key and no value). Each part is
//! framed as magic byte 0, the schema's 4-byte registry id, then the Avro binary encoding.
//!
//! This module owns the schemas (as JSON for a registry), the binary encoding of rows, and the
//! decoding of records for `sluice consume`; the registry itself is `kafka::registry`.
//!
//! Invariants:
//! - encoding is a pure function of (schema, row, options): golden files pin it;
//! - every field's type carries `connect.parameters.tidb_type` (TiCDC's names), which decoding
//!   uses to give values back in MySQL's text form; a column whose name is not an Avro name is
//!   written under a sanitized name with its own name in `sluice.column`;
//! - DECIMAL is Avro's `decimal` logical type (big-endian two's complement of the unscaled
//!   value, precision and scale from the column), or a string with
//!   `avro-decimal-handling-mode=string`; BIGINT UNSIGNED is a `long` holding the value's 64
//!   bits (TiCDC's overflow), or a string with `avro-bigint-unsigned-handling-mode=string`;
//! - decoding never panics on external data: malformed input is a [`SinkError::Codec`].

use super::{bit_width, value_bytes, value_text};
use crate::error::{Result, SinkError};
use serde_json::{json, Map, Value as Json};
use sluice_types::{ColumnDef, ColumnType, RowEvent, RowKind, TableSchema, Value};

/// The first byte of every Confluent-framed message part.
pub const MAGIC: u8 = 0;

/// The encoding choices a sink URI makes (`enable-tidb-extension`, `avro-*-handling-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AvroOptions {
    pub tidb_extension: bool,
    pub decimal_as_string: bool,
    pub bigint_unsigned_as_string: bool,
}

/// How one column is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Int,
    Long,
    Double,
    Str,
    Bytes,
    /// Avro's `decimal` logical type over bytes.
    Decimal {
        precision: u32,
        scale: u32,
    },
}

/// An Avro name: letters, digits and `_`, not starting with a digit.
pub fn avro_name(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// The `(p,s)` of a DECIMAL column's type text (MySQL's default precision 10).
fn decimal_shape(col: &ColumnDef) -> (u32, u32) {
    let t = &col.sql_type;
    let precision = t
        .find('(')
        .and_then(|i| t[i + 1..].split([',', ')']).next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(10);
    (precision, u32::from(col.decimals))
}

fn kind(col: &ColumnDef, o: AvroOptions) -> Kind {
    match col.ty {
        ColumnType::TinyInt | ColumnType::SmallInt | ColumnType::MediumInt | ColumnType::Year => {
            Kind::Int
        }
        ColumnType::Int if col.unsigned => Kind::Long,
        ColumnType::Int => Kind::Int,
        ColumnType::BigInt if col.unsigned && o.bigint_unsigned_as_string => Kind::Str,
        ColumnType::BigInt => Kind::Long,
        ColumnType::Float | ColumnType::Double => Kind::Double,
        ColumnType::Decimal if o.decimal_as_string => Kind::Str,
        ColumnType::Decimal => {
            let (precision, scale) = decimal_shape(col);
            Kind::Decimal { precision, scale }
        }
        ColumnType::Bit
        | ColumnType::Binary
        | ColumnType::VarBinary
        | ColumnType::Blob
        | ColumnType::Geometry => Kind::Bytes,
        _ => Kind::Str,
    }
}

/// TiCDC's `tidb_type` of a column.
fn tidb_type(col: &ColumnDef) -> &'static str {
    match col.ty {
        ColumnType::TinyInt | ColumnType::SmallInt | ColumnType::MediumInt | ColumnType::Int
            if col.unsigned =>
        {
            "INT UNSIGNED"
        }
        ColumnType::TinyInt | ColumnType::SmallInt | ColumnType::MediumInt | ColumnType::Int => {
            "INT"
        }
        ColumnType::BigInt if col.unsigned => "BIGINT UNSIGNED",
        ColumnType::BigInt => "BIGINT",
        ColumnType::Float => "FLOAT",
        ColumnType::Double => "DOUBLE",
        ColumnType::Decimal => "DECIMAL",
        ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob | ColumnType::Geometry => {
            "BLOB"
        }
        ColumnType::Date => "DATE",
        ColumnType::DateTime => "DATETIME",
        ColumnType::Timestamp => "TIMESTAMP",
        ColumnType::Time => "TIME",
        ColumnType::Year => "YEAR",
        ColumnType::Bit => "BIT",
        ColumnType::Json => "JSON",
        ColumnType::Enum => "ENUM",
        ColumnType::Set => "SET",
        ColumnType::Char | ColumnType::VarChar | ColumnType::Text => "TEXT",
    }
}

fn column_type(col: &ColumnDef, o: AvroOptions) -> Json {
    let mut params = Map::new();
    params.insert("tidb_type".into(), json!(tidb_type(col)));
    match col.ty {
        ColumnType::Bit => {
            params.insert("length".into(), json!(bit_width(col).to_string()));
        }
        ColumnType::Enum | ColumnType::Set => {
            params.insert("allowed".into(), json!(col.elements.join(",")));
        }
        _ => {}
    }
    let mut t = Map::new();
    t.insert("connect.parameters".into(), Json::Object(params));
    match kind(col, o) {
        Kind::Decimal { precision, scale } => {
            t.insert("logicalType".into(), json!("decimal"));
            t.insert("precision".into(), json!(precision));
            t.insert("scale".into(), json!(scale));
            t.insert("type".into(), json!("bytes"));
        }
        k => {
            t.insert("type".into(), json!(primitive(k)));
        }
    }
    Json::Object(t)
}

fn primitive(k: Kind) -> &'static str {
    match k {
        Kind::Int => "int",
        Kind::Long => "long",
        Kind::Double => "double",
        Kind::Str => "string",
        Kind::Bytes | Kind::Decimal { .. } => "bytes",
    }
}

fn field(col: &ColumnDef, nullable: bool, o: AvroOptions) -> Json {
    let mut f = Map::new();
    let name = avro_name(&col.name);
    if nullable {
        f.insert("default".into(), Json::Null);
    }
    if name != col.name {
        f.insert("sluice.column".into(), json!(col.name));
    }
    f.insert("name".into(), json!(name));
    let ty = column_type(col, o);
    f.insert(
        "type".into(),
        if nullable { json!(["null", ty]) } else { ty },
    );
    Json::Object(f)
}

fn record(schema: &TableSchema, fields: Vec<Json>) -> Result<Json> {
    let mut seen = std::collections::BTreeSet::new();
    for f in &fields {
        if !seen.insert(f["name"].as_str().unwrap_or_default().to_string()) {
            return Err(SinkError::TableRefused {
                table: schema.qualified_name(),
                reason: format!(
                    "two columns have the Avro name {}: rename one, or use another protocol",
                    f["name"]
                ),
            });
        }
    }
    let mut r = Map::new();
    r.insert("fields".into(), Json::Array(fields));
    r.insert("name".into(), json!(avro_name(&schema.name)));
    r.insert("namespace".into(), json!(avro_name(&schema.database)));
    // The names as they are upstream, where Avro's rules changed them.
    if avro_name(&schema.database) != schema.database {
        r.insert("sluice.database".into(), json!(schema.database));
    }
    if avro_name(&schema.name) != schema.name {
        r.insert("sluice.table".into(), json!(schema.name));
    }
    r.insert("type".into(), json!("record"));
    Ok(Json::Object(r))
}

/// The key columns Avro writes: the table's primary or not-null unique key (a table without
/// one is refused: a delete could not say which row it removes).
fn key_columns(schema: &TableSchema) -> Result<&[usize]> {
    if schema.key_columns.is_empty() {
        return Err(SinkError::TableRefused {
            table: schema.qualified_name(),
            reason: "protocol=avro needs a primary key or a not-null unique key (a delete is a key with no value): add one, leave the table out with the filter, or use canal-json or debezium".into(),
        });
    }
    Ok(&schema.key_columns)
}

/// The key record's schema (the key columns, never null).
pub fn key_schema(schema: &TableSchema, o: AvroOptions) -> Result<Json> {
    let fields = key_columns(schema)?
        .iter()
        .map(|&i| field(&schema.columns[i], false, o))
        .collect();
    record(schema, fields)
}

/// The value record's schema (every column, plus the TiDB extension's fields).
pub fn value_schema(schema: &TableSchema, o: AvroOptions) -> Result<Json> {
    key_columns(schema)?;
    let mut fields: Vec<Json> = schema
        .columns
        .iter()
        .map(|c| field(c, c.nullable, o))
        .collect();
    if o.tidb_extension {
        fields.push(json!({"name": "_tidb_op", "type": "string"}));
        fields.push(json!({"name": "_tidb_commit_ts", "type": "long"}));
        fields.push(json!({"name": "_tidb_commit_physical_time", "type": "long"}));
    }
    record(schema, fields)
}

/// Confluent's framing: magic byte, schema id (big-endian), body.
pub fn frame(id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(MAGIC);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// The schema id and body of a framed message part.
pub fn unframe(b: &[u8]) -> Result<(u32, &[u8])> {
    match b {
        [MAGIC, a, b2, c, d, body @ ..] => Ok((u32::from_be_bytes([*a, *b2, *c, *d]), body)),
        _ => Err(SinkError::Codec(
            "avro: not a Confluent-framed message (magic byte 0 and a 4-byte schema id)".into(),
        )),
    }
}

fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_long(out, b.len() as i64);
    out.extend_from_slice(b);
}

fn bad(col: &ColumnDef, v: &Value, what: &str) -> SinkError {
    SinkError::Codec(format!("avro: column {}: {what}: {v:?}", col.name))
}

fn int_of(col: &ColumnDef, v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        // BIGINT UNSIGNED as a long keeps the value's 64 bits (TiCDC's overflow).
        Value::UInt(u) => Ok(*u as i64),
        Value::Year(y) => Ok(i64::from(*y)),
        Value::Bit { bits, .. } => Ok(*bits as i64),
        other => Err(bad(col, other, "not an integer")),
    }
}

fn put_value(out: &mut Vec<u8>, col: &ColumnDef, v: &Value, k: Kind) -> Result<()> {
    match k {
        Kind::Int | Kind::Long => put_long(out, int_of(col, v)?),
        Kind::Double => {
            let d = match v {
                Value::Float(f) => f64::from(*f),
                Value::Double(d) => *d,
                other => return Err(bad(col, other, "not a floating-point number")),
            };
            out.extend_from_slice(&d.to_le_bytes());
        }
        Kind::Str => put_bytes(out, value_text(v, col).unwrap_or_default().as_bytes()),
        Kind::Bytes if col.ty == ColumnType::Bit => {
            let bits = int_of(col, v)? as u64;
            let n = bit_width(col).div_ceil(8).clamp(1, 8) as usize;
            put_bytes(out, &bits.to_be_bytes()[8 - n..]);
        }
        Kind::Bytes => put_bytes(out, &value_bytes(v, col).unwrap_or_default()),
        Kind::Decimal { scale, .. } => {
            let Value::Decimal(text) = v else {
                return Err(bad(col, v, "not a decimal"));
            };
            let unscaled = decimal::unscaled_bytes(text, scale)
                .ok_or_else(|| bad(col, v, "not a decimal of its scale"))?;
            put_bytes(out, &unscaled);
        }
    }
    Ok(())
}

fn put_field(
    out: &mut Vec<u8>,
    col: &ColumnDef,
    nullable: bool,
    v: &Value,
    o: AvroOptions,
) -> Result<()> {
    let k = kind(col, o);
    match (nullable, v) {
        (true, Value::Null) => put_long(out, 0),
        (false, Value::Null) => return Err(bad(col, v, "NULL in a NOT NULL column")),
        (true, v) => {
            put_long(out, 1);
            put_value(out, col, v, k)?;
        }
        (false, v) => put_value(out, col, v, k)?,
    }
    Ok(())
}

fn image<'a>(schema: &TableSchema, values: Option<&'a [Value]>) -> Result<&'a [Value]> {
    match values {
        Some(v) if v.len() == schema.columns.len() => Ok(v),
        _ => Err(SinkError::Codec(format!(
            "{}: a row image without a value for each column",
            schema.qualified_name()
        ))),
    }
}

/// The key record of a row change (the body, unframed).
pub fn encode_key(schema: &TableSchema, row: &RowEvent, o: AvroOptions) -> Result<Vec<u8>> {
    let values = image(
        schema,
        match row.kind {
            RowKind::Delete => row.before.as_deref(),
            _ => row.after.as_deref(),
        },
    )?;
    let mut out = Vec::new();
    for &i in key_columns(schema)? {
        put_field(&mut out, &schema.columns[i], false, &values[i], o)?;
    }
    Ok(out)
}

/// The value record of a row change (the body, unframed); `None` for a delete (a tombstone).
pub fn encode_value(
    schema: &TableSchema,
    row: &RowEvent,
    o: AvroOptions,
) -> Result<Option<Vec<u8>>> {
    if row.kind == RowKind::Delete {
        return Ok(None);
    }
    let values = image(schema, row.after.as_deref())?;
    let mut out = Vec::new();
    for (col, v) in schema.columns.iter().zip(values) {
        put_field(&mut out, col, col.nullable, v, o)?;
    }
    if o.tidb_extension {
        let op = match (row.snapshot, row.kind) {
            (true, _) => "r",
            (false, RowKind::Update) => "u",
            (false, _) => "c",
        };
        put_bytes(&mut out, op.as_bytes());
        put_long(&mut out, row.commit_ts as i64);
        put_long(&mut out, row.commit_time_ms as i64);
    }
    Ok(Some(out))
}

pub use read::{
    column_value, decode_record, parse_record_schema, AvroType, Datum, FieldSchema, RecordSchema,
};

mod decimal;
mod read;

#[cfg(test)]
mod tests;
