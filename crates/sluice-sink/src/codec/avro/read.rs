//! Reading Avro records back (`sluice consume`): a record schema parsed from its JSON (the
//! types Sluice and TiCDC write: records of primitives, `["null", T]` unions, the `decimal`
//! logical type), and a record's binary body decoded into one [`Datum`] per field.
//!
//! Invariant: decoding never panics and never reads past its input; anything else is a
//! [`SinkError::Codec`] naming the field.

use crate::error::{Result, SinkError};
use serde_json::Value as Json;

/// An Avro type this reader knows.
#[derive(Clone, Debug, PartialEq)]
pub enum AvroType {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Union(Vec<AvroType>),
}

/// One field: its Avro name, the column it stands for, its type, TiCDC's `tidb_type`, and the
/// scale of a `decimal`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldSchema {
    pub name: String,
    pub column: String,
    pub ty: AvroType,
    pub tidb_type: Option<String>,
    pub decimal_scale: Option<u32>,
    /// ENUM/SET members (`connect.parameters.allowed`).
    pub allowed: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RecordSchema {
    pub name: String,
    pub namespace: Option<String>,
    /// The upstream database and table (`sluice.database`/`sluice.table`, else the namespace
    /// and the name).
    pub database: String,
    pub table: String,
    pub fields: Vec<FieldSchema>,
}

/// One decoded value.
#[derive(Clone, Debug, PartialEq)]
pub enum Datum {
    Null,
    Boolean(bool),
    Long(i64),
    Double(f64),
    Bytes(Vec<u8>),
    String(String),
}

fn codec(what: impl Into<String>) -> SinkError {
    SinkError::Codec(format!("avro: {}", what.into()))
}

fn primitive(name: &str) -> Result<AvroType> {
    Ok(match name {
        "null" => AvroType::Null,
        "boolean" => AvroType::Boolean,
        "int" => AvroType::Int,
        "long" => AvroType::Long,
        "float" => AvroType::Float,
        "double" => AvroType::Double,
        "bytes" => AvroType::Bytes,
        "string" => AvroType::String,
        other => {
            return Err(codec(format!(
                "type {other:?} is not read by sluice consume"
            )))
        }
    })
}

/// (type, tidb_type, decimal scale, allowed) of a field's `type`.
type Parsed = (AvroType, Option<String>, Option<u32>, Option<String>);

fn parse_type(t: &Json) -> Result<Parsed> {
    match t {
        Json::String(s) => Ok((primitive(s)?, None, None, None)),
        Json::Array(branches) => {
            let mut types = Vec::new();
            let (mut tidb, mut scale, mut allowed) = (None, None, None);
            for b in branches {
                let (ty, t2, s2, a2) = parse_type(b)?;
                if matches!(ty, AvroType::Union(_)) {
                    return Err(codec("a union inside a union"));
                }
                types.push(ty);
                tidb = tidb.or(t2);
                scale = scale.or(s2);
                allowed = allowed.or(a2);
            }
            Ok((AvroType::Union(types), tidb, scale, allowed))
        }
        Json::Object(o) => {
            let name = o.get("type").and_then(Json::as_str).unwrap_or_default();
            let params = o.get("connect.parameters");
            let text = |k: &str| {
                params
                    .and_then(|p| p.get(k))
                    .and_then(Json::as_str)
                    .map(str::to_string)
            };
            let scale = (o.get("logicalType").and_then(Json::as_str) == Some("decimal"))
                .then(|| o.get("scale").and_then(Json::as_u64).unwrap_or(0) as u32);
            Ok((primitive(name)?, text("tidb_type"), scale, text("allowed")))
        }
        other => Err(codec(format!("a type of {other}"))),
    }
}

/// Parses a record schema's JSON text.
pub fn parse_record_schema(text: &str) -> Result<RecordSchema> {
    let j: Json = serde_json::from_str(text).map_err(|e| codec(format!("schema JSON: {e}")))?;
    if j.get("type").and_then(Json::as_str) != Some("record") {
        return Err(codec("the schema is not a record"));
    }
    let fields = j
        .get("fields")
        .and_then(Json::as_array)
        .ok_or_else(|| codec("a record schema without fields"))?
        .iter()
        .map(|f| {
            let name = f
                .get("name")
                .and_then(Json::as_str)
                .ok_or_else(|| codec("a field without a name"))?
                .to_string();
            let column = f
                .get("sluice.column")
                .and_then(Json::as_str)
                .map_or_else(|| name.clone(), str::to_string);
            let (ty, tidb_type, decimal_scale, allowed) =
                parse_type(f.get("type").unwrap_or(&Json::Null))
                    .map_err(|e| codec(format!("field {name}: {e}")))?;
            Ok(FieldSchema {
                name,
                column,
                ty,
                tidb_type,
                decimal_scale,
                allowed,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let text = |k: &str| j.get(k).and_then(Json::as_str).map(str::to_string);
    let name = text("name").unwrap_or_default();
    let namespace = text("namespace");
    Ok(RecordSchema {
        database: text("sluice.database")
            .or_else(|| namespace.clone())
            .unwrap_or_default(),
        table: text("sluice.table").unwrap_or_else(|| name.clone()),
        name,
        namespace,
        fields,
    })
}

struct Cursor<'a> {
    b: &'a [u8],
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if n > self.b.len() {
            return Err(codec("the body ends early"));
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    fn long(&mut self) -> Result<i64> {
        let mut z: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            z |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
            }
        }
        Err(codec("a varint longer than 10 bytes"))
    }

    fn bytes(&mut self) -> Result<Vec<u8>> {
        let n = self.long()?;
        let n = usize::try_from(n).map_err(|_| codec("a negative length"))?;
        Ok(self.take(n)?.to_vec())
    }

    fn datum(&mut self, t: &AvroType) -> Result<Datum> {
        Ok(match t {
            AvroType::Null => Datum::Null,
            AvroType::Boolean => Datum::Boolean(self.take(1)?[0] != 0),
            AvroType::Int | AvroType::Long => Datum::Long(self.long()?),
            AvroType::Float => {
                let b = self.take(4)?;
                Datum::Double(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            }
            AvroType::Double => {
                let mut a = [0u8; 8];
                a.copy_from_slice(self.take(8)?);
                Datum::Double(f64::from_le_bytes(a))
            }
            AvroType::Bytes => Datum::Bytes(self.bytes()?),
            AvroType::String => Datum::String(
                String::from_utf8(self.bytes()?).map_err(|_| codec("a string not in UTF-8"))?,
            ),
            AvroType::Union(branches) => {
                let i = self.long()?;
                let b = usize::try_from(i)
                    .ok()
                    .and_then(|i| branches.get(i))
                    .ok_or_else(|| codec(format!("union branch {i} of {}", branches.len())))?;
                self.datum(b)?
            }
        })
    }
}

/// Decodes a record body: one datum per field, in the schema's order.
pub fn decode_record(schema: &RecordSchema, body: &[u8]) -> Result<Vec<Datum>> {
    let mut c = Cursor { b: body };
    let out = schema
        .fields
        .iter()
        .map(|f| {
            c.datum(&f.ty)
                .map_err(|e| codec(format!("field {}: {e}", f.name)))
        })
        .collect::<Result<Vec<_>>>()?;
    if !c.b.is_empty() {
        return Err(codec(format!("{} bytes after the record", c.b.len())));
    }
    Ok(out)
}

/// A decoded field as the value `consume` applies: numbers and text as MySQL text, BIT as its
/// integer, a `decimal` as its text, other bytes as bytes (by the field's `tidb_type`).
pub fn column_value(f: &FieldSchema, d: Datum) -> sluice_types::Value {
    use sluice_types::Value;
    let tidb = f.tidb_type.as_deref().unwrap_or_default();
    match d {
        Datum::Null => Value::Null,
        Datum::Boolean(b) => Value::Text(if b { "1" } else { "0" }.into()),
        Datum::Long(i) if tidb == "BIGINT UNSIGNED" => Value::Text((i as u64).to_string()),
        Datum::Long(i) => Value::Text(i.to_string()),
        // A FLOAT column's value was widened from 32 bits: its shortest 32-bit text.
        Datum::Double(x) if tidb == "FLOAT" => Value::Text((x as f32).to_string()),
        Datum::Double(x) => Value::Text(x.to_string()),
        Datum::Bytes(b) if tidb == "BIT" => Value::UInt(
            b.iter()
                .rev()
                .take(8)
                .rev()
                .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)),
        ),
        Datum::Bytes(b) => match f.decimal_scale {
            Some(scale) => Value::Text(super::decimal::text_of(&b, scale)),
            None => Value::Bytes(b),
        },
        Datum::String(s) => Value::Text(s),
    }
}
