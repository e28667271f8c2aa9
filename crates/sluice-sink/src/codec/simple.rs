//! TiCDC's Simple protocol (JSON encoding): one event per message, `version: 1`; row changes
//! (`INSERT`, `UPDATE`, `DELETE`) carry `data`/`old` objects of column values and the
//! `schemaVersion` of their table, which a consumer finds in a `BOOTSTRAP` message (the table's
//! schema, sent before the table's first row and again every [`BOOTSTRAP_EVERY`] rows) or in a DDL
//! message (`tableSchema`); `WATERMARK` messages carry the checkpoint.
//!
//! Invariants:
//! - encoding is a pure function of its input (`buildTs` is the commit time, not the clock):
//!   golden files pin it;
//! - values are strings in MySQL's text form (times in UTC), binary types base64, NULL `null`;
//!   ENUM and SET by their member names (TiCDC sends their numbers; names keep a consumer
//!   independent of the definition);
//! - decoding never panics on external data: malformed input is a [`SinkError::Codec`].

use super::{base64_decode, base64_encode, is_binary, value_bytes, value_text};
use crate::error::{Result, SinkError};
use serde_json::{json, Map, Value as Json};
use sluice_types::{ColumnType, DdlEvent, RowEvent, RowKind, TableSchema, Ts, Value};

/// A table's BOOTSTRAP message is sent again after this many of its rows (TiCDC's default of
/// `send-bootstrap-in-msg-count`).
pub const BOOTSTRAP_EVERY: u64 = 10_000;

/// The base type word of a column type (`varchar(64)` → `varchar`).
fn base_type(sql: &str) -> String {
    let s = sql.to_ascii_lowercase();
    s.split(['(', ' ']).next().unwrap_or_default().to_string()
}

/// The `tableSchema` object of a table version.
pub fn table_schema(schema: &TableSchema) -> Json {
    let columns: Vec<Json> = schema
        .columns
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "dataType": {
                    "mysqlType": base_type(&c.sql_type),
                    "charset": c.charset.clone().unwrap_or_else(|| "binary".into()),
                    "collate": c.collation.clone().unwrap_or_else(|| "binary".into()),
                    "length": c.length,
                    "decimal": c.decimals,
                    "unsigned": c.unsigned,
                    "elements": c.elements,
                    "generated": c.generated.is_some()
                },
                "nullable": c.nullable,
                "default": null
            })
        })
        .collect();
    let names = |idx: &[usize]| -> Vec<String> {
        idx.iter()
            .filter_map(|i| schema.columns.get(*i))
            .map(|c| c.name.clone())
            .collect()
    };
    let mut indexes = Vec::new();
    if !schema.key_columns.is_empty() {
        indexes.push(json!({"name": "primary", "unique": true, "primary": true, "nullable": false, "columns": names(&schema.key_columns)}));
    }
    for (i, uk) in schema.unique_keys.iter().enumerate() {
        indexes.push(json!({"name": format!("unique_{i}"), "unique": true, "primary": false, "nullable": true, "columns": names(uk)}));
    }
    json!({
        "schema": schema.database, "table": schema.name, "tableID": schema.table_id.0,
        "version": schema.version, "columns": columns, "indexes": indexes
    })
}

fn values(schema: &TableSchema, row: &[Value]) -> Result<Json> {
    if row.len() != schema.columns.len() {
        return Err(SinkError::Codec(format!(
            "{}: row has {} values for {} columns",
            schema.qualified_name(),
            row.len(),
            schema.columns.len()
        )));
    }
    let mut m = Map::new();
    for (v, c) in row.iter().zip(&schema.columns) {
        let text = if is_binary(c.ty) {
            value_bytes(v, c).map(|b| base64_encode(&b))
        } else {
            value_text(v, c)
        };
        m.insert(c.name.clone(), text.map_or(Json::Null, Json::String));
    }
    Ok(Json::Object(m))
}

/// The message of a row change.
pub fn encode_row(schema: &TableSchema, row: &RowEvent) -> Result<String> {
    let missing = || {
        SinkError::Codec(format!(
            "{}: {:?} row without its image",
            schema.qualified_name(),
            row.kind
        ))
    };
    let mut m = json!({
        "version": 1, "database": schema.database, "table": schema.name, "tableID": schema.table_id.0,
        "type": match row.kind { RowKind::Insert => "INSERT", RowKind::Update => "UPDATE", RowKind::Delete => "DELETE" },
        "commitTs": row.commit_ts, "buildTs": row.commit_time_ms, "schemaVersion": schema.version
    });
    if row.kind != RowKind::Delete {
        m["data"] = values(schema, row.after.as_deref().ok_or_else(missing)?)?;
    }
    if row.kind != RowKind::Insert {
        m["old"] = values(schema, row.before.as_deref().ok_or_else(missing)?)?;
    }
    Ok(m.to_string())
}

/// The BOOTSTRAP message of a table version.
pub fn encode_bootstrap(schema: &TableSchema) -> String {
    json!({"version": 1, "type": "BOOTSTRAP", "commitTs": 0, "buildTs": 0, "tableSchema": table_schema(schema)}).to_string()
}

/// The message of a DDL; `table`: the version it produces, if it produces one.
pub fn encode_ddl(ddl: &DdlEvent, table: Option<&TableSchema>) -> String {
    let mut m = json!({
        "version": 1, "type": super::canal::ddl_type(ddl.kind), "sql": ddl.query,
        "commitTs": ddl.commit_ts, "buildTs": ddl.commit_time_ms
    });
    if let Some(t) = table {
        m["tableSchema"] = table_schema(t);
    }
    m.to_string()
}

/// The WATERMARK message of the checkpoint `ts`.
pub fn encode_watermark(ts: Ts) -> String {
    json!({"version": 1, "type": "WATERMARK", "commitTs": ts, "buildTs": 0}).to_string()
}

/// One decoded Simple protocol message.
#[derive(Debug)]
pub enum Event {
    /// A table's schema (BOOTSTRAP, or the `tableSchema` of a DDL): (db, table, version, columns
    /// as (name, mysqlType, generated), key columns).
    Schema {
        database: String,
        table: String,
        version: Ts,
        columns: Vec<(String, String, bool)>,
        keys: Vec<String>,
    },
    Ddl {
        query: String,
        commit_ts: Ts,
        database: String,
    },
    Row {
        database: String,
        table: String,
        version: Ts,
        commit_ts: Ts,
        kind: RowKind,
        data: Option<Map<String, Json>>,
        old: Option<Map<String, Json>>,
    },
    Watermark(Ts),
}

fn err(what: &str) -> SinkError {
    SinkError::Codec(format!("simple: {what}"))
}

fn read_schema(t: &Json) -> Result<Event> {
    let s = |k: &str| {
        t.get(k)
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let columns = t
        .get("columns")
        .and_then(Json::as_array)
        .ok_or_else(|| err("a tableSchema without columns"))?
        .iter()
        .map(|c| {
            let name = c
                .get("name")
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_string();
            let ty = c
                .pointer("/dataType/mysqlType")
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_string();
            let generated = c
                .pointer("/dataType/generated")
                .and_then(Json::as_bool)
                .unwrap_or(false);
            (name, ty, generated)
        })
        .collect();
    let keys = t
        .get("indexes")
        .and_then(Json::as_array)
        .and_then(|ix| {
            ix.iter()
                .find(|i| i.get("primary").and_then(Json::as_bool) == Some(true))
        })
        .and_then(|i| i.get("columns").and_then(Json::as_array))
        .map(|c| {
            c.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(Event::Schema {
        database: s("schema"),
        table: s("table"),
        version: t.get("version").and_then(Json::as_u64).unwrap_or(0),
        columns,
        keys,
    })
}

/// Decodes a message: a DDL gives its schema event (if any) then the DDL.
pub fn decode(value: &[u8]) -> Result<Vec<Event>> {
    let v: Json = serde_json::from_slice(value).map_err(|e| err(&e.to_string()))?;
    let ty = v
        .get("type")
        .and_then(Json::as_str)
        .ok_or_else(|| err("a message without type"))?;
    let ts = v.get("commitTs").and_then(Json::as_u64).unwrap_or(0);
    let obj = |k: &str| v.get(k).and_then(Json::as_object).cloned();
    let s = |k: &str| {
        v.get(k)
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(match ty {
        "WATERMARK" => vec![Event::Watermark(ts)],
        "BOOTSTRAP" => vec![read_schema(
            v.get("tableSchema")
                .ok_or_else(|| err("a BOOTSTRAP without tableSchema"))?,
        )?],
        "INSERT" | "UPDATE" | "DELETE" => {
            let kind = match ty {
                "INSERT" => RowKind::Insert,
                "UPDATE" => RowKind::Update,
                _ => RowKind::Delete,
            };
            let version = v
                .get("schemaVersion")
                .and_then(Json::as_u64)
                .ok_or_else(|| err("a row without schemaVersion"))?;
            vec![Event::Row {
                database: s("database"),
                table: s("table"),
                version,
                commit_ts: ts,
                kind,
                data: obj("data"),
                old: obj("old"),
            }]
        }
        _ => {
            let mut out = Vec::new();
            let database = v
                .pointer("/tableSchema/schema")
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_string();
            if let Some(t) = v.get("tableSchema") {
                out.push(read_schema(t)?);
            }
            out.push(Event::Ddl {
                query: s("sql"),
                commit_ts: ts,
                database,
            });
            out
        }
    })
}

/// A value back in the form the MySQL sink writes (`ty`: the column's mysqlType).
pub fn value_of(v: Option<&Json>, ty: &str) -> Result<Value> {
    let t = ty.to_ascii_lowercase();
    Ok(match v {
        None | Some(Json::Null) => Value::Null,
        Some(Json::String(s)) if t.contains("blob") || t.contains("binary") || is_geometry(&t) => {
            Value::Bytes(base64_decode(s)?)
        }
        Some(Json::String(s)) if t == "bit" => Value::UInt(
            s.parse()
                .map_err(|_| err(&format!("bad BIT value {s:?}")))?,
        ),
        Some(Json::String(s)) => Value::Text(s.clone()),
        Some(other) => Value::Text(other.to_string()),
    })
}

fn is_geometry(t: &str) -> bool {
    [
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
    ]
    .contains(&t)
}

/// The column type a consumer builds for a mysqlType (binary ones bytes, BIT an integer).
pub fn column_type(ty: &str) -> ColumnType {
    let t = ty.to_ascii_lowercase();
    if t == "bit" {
        ColumnType::Bit
    } else if t.contains("blob") || t.contains("binary") || is_geometry(&t) {
        ColumnType::Blob
    } else {
        ColumnType::Text
    }
}
