//! canal-json encoding as TiCDC writes it for storage sinks: one JSON object per row change and
//! line (`\r\n`), keys in canal's order (`id, database, table, pkNames, isDdl, type, es, ts, sql,
//! sqlType, mysqlType, old, data`), values as strings, NULL as `null`, binary values as
//! ISO-8859-1 text (each byte one char). With `enable-tidb-extension`, `_tidb.commitTs` carries
//! the commit ts.
//!
//! Invariants: `es` and `ts` are the upstream commit time in ms (not the wall clock), so output
//! is deterministic; an update carries the full old row in `old`.

use super::json::{push_int, push_str};
use super::{is_binary, value_bytes, value_from_text, value_text, DecodedRow};
use crate::error::{Result, SinkError};
use sluice_types::{
    ColumnDef, ColumnType, DdlEvent, DdlKind, RowEvent, RowKind, TableSchema, Ts, Value,
};

pub const TERMINATOR: &str = "\r\n";

/// JDBC type code canal uses for a column (`sqlType`).
pub fn jdbc_type(col: &ColumnDef) -> i32 {
    match col.ty {
        ColumnType::TinyInt => -6,
        ColumnType::SmallInt => 5,
        ColumnType::MediumInt | ColumnType::Int => 4,
        ColumnType::BigInt => -5,
        ColumnType::Decimal => 3,
        ColumnType::Float => 7,
        ColumnType::Double => 8,
        ColumnType::Char => 1,
        ColumnType::VarChar | ColumnType::Year | ColumnType::Json => 12,
        ColumnType::Text => 2005,
        ColumnType::Binary => -2,
        ColumnType::VarBinary => -3,
        ColumnType::Blob | ColumnType::Geometry => 2004,
        ColumnType::Date => 91,
        ColumnType::Time => 92,
        ColumnType::DateTime | ColumnType::Timestamp => 93,
        ColumnType::Enum => 4,
        ColumnType::Set | ColumnType::Bit => -7,
    }
}

fn latin1(b: &[u8]) -> String {
    b.iter().map(|&x| char::from(x)).collect()
}

fn from_latin1(s: &str) -> Result<Vec<u8>> {
    s.chars()
        .map(|c| {
            u8::try_from(u32::from(c)).map_err(|_| {
                SinkError::Codec(format!("canal-json: binary value has char {c:?} > U+00FF"))
            })
        })
        .collect()
}

fn push_image(out: &mut String, schema: &TableSchema, values: &[Value]) -> Result<()> {
    if values.len() != schema.columns.len() {
        return Err(SinkError::Codec(format!(
            "{}: row has {} values for {} columns",
            schema.qualified_name(),
            values.len(),
            schema.columns.len()
        )));
    }
    out.push_str("[{");
    for (i, (v, col)) in values.iter().zip(&schema.columns).enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, &col.name);
        out.push(':');
        if !is_binary(col.ty) && push_plain(out, v) {
            continue;
        }
        let text = if is_binary(col.ty) {
            value_bytes(v, col).map(|b| latin1(&b))
        } else {
            value_text(v, col)
        };
        match text {
            None => out.push_str("null"),
            Some(t) => push_str(out, &t),
        }
    }
    out.push_str("}]");
    Ok(())
}

/// Appends a character column's value as [`value_text`] gives it, without building that text,
/// for the common kinds (integers, text); false for the others (nothing appended).
fn push_plain(out: &mut String, v: &Value) -> bool {
    match v {
        Value::Int(i) => {
            out.push('"');
            push_int(out, *i);
            out.push('"');
        }
        Value::UInt(u) => {
            out.push('"');
            push_int(out, *u);
            out.push('"');
        }
        Value::Decimal(s) | Value::Text(s) | Value::Json(s) => push_str(out, s),
        Value::Enum { name, .. } => push_str(out, name),
        _ => return false,
    }
    true
}

/// Appends the canal-json line of one row change (the message and the terminator), the
/// unchanging parts from the table version's [`Layout`] if given (a file's rows share one).
pub fn encode_row(
    out: &mut String,
    layout: Option<&Layout>,
    tidb_extension: bool,
    schema: &TableSchema,
    row: &RowEvent,
) -> Result<()> {
    encode_row_parts(out, layout, tidb_extension, schema, row)?;
    out.push_str(TERMINATOR);
    Ok(())
}

/// The parts of a table version's row messages that no row changes (names, key names, column
/// types), built once per version: the Kafka sink keeps them ([`encode_row_message_with`]);
/// [`encode_row_message`] writes them for each row.
#[derive(Debug)]
pub struct Layout {
    /// `{"id":0,…,"pkNames":[…],"isDdl":false,"type":"`
    head: String,
    /// `,"sql":"","sqlType":{…},"mysqlType":{…}`
    types: String,
}

impl Layout {
    pub fn new(schema: &TableSchema) -> Layout {
        let (mut head, mut types) = (String::new(), String::new());
        push_head(&mut head, schema);
        push_types(&mut types, schema);
        Layout { head, types }
    }
}

/// Appends a row message's start up to its type's opening quote.
fn push_head(out: &mut String, schema: &TableSchema) {
    out.push_str("{\"id\":0,\"database\":");
    push_str(out, &schema.database);
    out.push_str(",\"table\":");
    push_str(out, &schema.name);
    out.push_str(",\"pkNames\":[");
    for (i, k) in schema.key_columns.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let name = schema
            .columns
            .get(*k)
            .map(|c| c.name.as_str())
            .unwrap_or_default();
        push_str(out, name);
    }
    out.push_str("],\"isDdl\":false,\"type\":\"");
}

/// Appends `sql`, `sqlType` and `mysqlType` (with the comma before them).
fn push_types(out: &mut String, schema: &TableSchema) {
    out.push_str(",\"sql\":\"\",\"sqlType\":{");
    for (i, c) in schema.columns.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, &c.name);
        out.push(':');
        push_int(out, jdbc_type(c));
    }
    out.push_str("},\"mysqlType\":{");
    for (i, c) in schema.columns.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, &c.name);
        out.push(':');
        if c.sql_type.bytes().any(|b| b.is_ascii_uppercase()) {
            push_str(out, &c.sql_type.to_ascii_lowercase());
        } else {
            push_str(out, &c.sql_type);
        }
    }
    out.push('}');
}

/// Appends the canal-json object of one row change (a Kafka message's value).
pub fn encode_row_message(
    out: &mut String,
    tidb_extension: bool,
    schema: &TableSchema,
    row: &RowEvent,
) -> Result<()> {
    encode_row_parts(out, None, tidb_extension, schema, row)
}

/// [`encode_row_message`] with the table version's [`Layout`] already built.
pub fn encode_row_message_with(
    out: &mut String,
    layout: &Layout,
    tidb_extension: bool,
    schema: &TableSchema,
    row: &RowEvent,
) -> Result<()> {
    encode_row_parts(out, Some(layout), tidb_extension, schema, row)
}

/// A row message, its unchanging parts from `layout` or written here (`None`).
fn encode_row_parts(
    out: &mut String,
    layout: Option<&Layout>,
    tidb_extension: bool,
    schema: &TableSchema,
    row: &RowEvent,
) -> Result<()> {
    let missing = || {
        SinkError::Codec(format!(
            "{}: {:?} row without its image",
            schema.qualified_name(),
            row.kind
        ))
    };
    let ty = match row.kind {
        RowKind::Insert => "INSERT",
        RowKind::Update => "UPDATE",
        RowKind::Delete => "DELETE",
    };
    match layout {
        Some(l) => out.push_str(&l.head),
        None => push_head(out, schema),
    }
    out.push_str(ty);
    out.push_str("\",\"es\":");
    push_int(out, row.commit_time_ms);
    out.push_str(",\"ts\":");
    push_int(out, row.commit_time_ms);
    match layout {
        Some(l) => out.push_str(&l.types),
        None => push_types(out, schema),
    }
    out.push_str(",\"old\":");
    match row.kind {
        RowKind::Update => push_image(out, schema, row.before.as_deref().ok_or_else(missing)?)?,
        _ => out.push_str("null"),
    }
    out.push_str(",\"data\":");
    match row.kind {
        RowKind::Delete => push_image(out, schema, row.before.as_deref().ok_or_else(missing)?)?,
        _ => push_image(out, schema, row.after.as_deref().ok_or_else(missing)?)?,
    }
    if tidb_extension {
        // A snapshot read says so (canal has no place for it; the extension does).
        let snapshot = if row.snapshot {
            ",\"snapshot\":true"
        } else {
            ""
        };
        out.push_str(",\"_tidb\":{\"commitTs\":");
        push_int(out, row.commit_ts);
        out.push_str(snapshot);
        out.push('}');
    }
    out.push('}');
    Ok(())
}

/// canal's event type of a DDL (TiCDC's mapping; everything else is `QUERY`).
pub fn ddl_type(kind: DdlKind) -> &'static str {
    match kind {
        DdlKind::CreateTable => "CREATE",
        DdlKind::DropTable => "ERASE",
        DdlKind::AlterTable => "ALTER",
        DdlKind::TruncateTable => "TRUNCATE",
        DdlKind::RenameTable => "RENAME",
        _ => "QUERY",
    }
}

/// The canal-json object of a DDL (a Kafka message's value): `table` is the table it changes
/// ("" for a database-level DDL); with the TiDB extension `_tidb.commitTs` carries its commit ts.
pub fn encode_ddl_message(tidb_extension: bool, ddl: &DdlEvent, table: &str) -> String {
    let mut out = String::from("{\"id\":0,\"database\":");
    push_str(&mut out, ddl.target_database());
    out.push_str(",\"table\":");
    push_str(&mut out, table);
    out.push_str(",\"pkNames\":null,\"isDdl\":true,\"type\":\"");
    out.push_str(ddl_type(ddl.kind));
    out.push_str(&format!(
        "\",\"es\":{0},\"ts\":{0},\"sql\":",
        ddl.commit_time_ms
    ));
    push_str(&mut out, &ddl.query);
    out.push_str(",\"sqlType\":null,\"mysqlType\":null,\"data\":null,\"old\":null");
    if tidb_extension {
        out.push_str(&format!(",\"_tidb\":{{\"commitTs\":{}}}", ddl.commit_ts));
    }
    out.push('}');
    out
}

/// The canal-json WATERMARK message TiCDC sends with the TiDB extension: every event with a
/// smaller commit ts was sent before it on its partition.
pub fn encode_watermark_message(ts: Ts, time_ms: u64) -> String {
    format!(
        "{{\"id\":0,\"database\":\"\",\"table\":\"\",\"pkNames\":null,\"isDdl\":false,\"type\":\"TIDB_WATERMARK\",\"es\":{time_ms},\"ts\":{time_ms},\"sql\":\"\",\"sqlType\":null,\"mysqlType\":null,\"data\":null,\"old\":null,\"_tidb\":{{\"watermarkTs\":{ts}}}}}"
    )
}

fn decode_image(v: &serde_json::Value, schema: &TableSchema) -> Result<Vec<Value>> {
    let obj = v
        .as_array()
        .and_then(|a| a.first())
        .and_then(|o| o.as_object())
        .ok_or_else(|| SinkError::Codec("canal-json: image is not [{…}]".into()))?;
    schema
        .columns
        .iter()
        .map(|col| match obj.get(&col.name) {
            None => Err(SinkError::Codec(format!(
                "canal-json: column {} missing",
                col.name
            ))),
            Some(serde_json::Value::Null) => Ok(Value::Null),
            Some(serde_json::Value::String(s)) => {
                if is_binary(col.ty) {
                    value_from_text(col, None, Some(from_latin1(s)?))
                } else {
                    value_from_text(col, Some(s.clone()), None)
                }
            }
            Some(other) => value_from_text(col, Some(other.to_string()), None),
        })
        .collect()
}

/// Decodes a canal-json data file of `schema`'s table version.
pub fn decode_file(data: &str, schema: &TableSchema) -> Result<Vec<DecodedRow>> {
    let mut out = Vec::new();
    for line in data.split('\n') {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| SinkError::Codec(format!("canal-json: {e}")))?;
        let commit_ts = v
            .get("_tidb")
            .and_then(|t| t.get("commitTs"))
            .and_then(|t| t.as_u64());
        let data = v
            .get("data")
            .ok_or_else(|| SinkError::Codec("canal-json: no data".into()))?;
        let row = match v.get("type").and_then(|t| t.as_str()) {
            Some("INSERT") => DecodedRow {
                kind: RowKind::Insert,
                commit_ts,
                before: None,
                after: Some(decode_image(data, schema)?),
            },
            Some("UPDATE") => {
                let before = match v.get("old") {
                    Some(o) if !o.is_null() => Some(decode_image(o, schema)?),
                    _ => None,
                };
                DecodedRow {
                    kind: RowKind::Update,
                    commit_ts,
                    before,
                    after: Some(decode_image(data, schema)?),
                }
            }
            Some("DELETE") => DecodedRow {
                kind: RowKind::Delete,
                commit_ts,
                before: Some(decode_image(data, schema)?),
                after: None,
            },
            other => {
                return Err(SinkError::Codec(format!(
                    "canal-json: unknown type {other:?}"
                )))
            }
        };
        out.push(row);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{all_types_rows, all_types_schema};

    /// A row message from a table version's [`Layout`] is the one written whole, for every
    /// column type and row kind, with and without the TiDB extension.
    #[test]
    fn the_layout_writes_what_the_direct_path_writes() {
        let schema = all_types_schema("d\"b", 5);
        let layout = Layout::new(&schema);
        let mut rows = Vec::new();
        for row in all_types_rows(&schema, 7 << 32 | 9, 1_700_000_000_000) {
            let mut update = row.clone();
            update.kind = RowKind::Update;
            update.before = row.after.clone();
            let mut delete = update.clone();
            delete.kind = RowKind::Delete;
            delete.after = None;
            rows.extend([row, update, delete]);
        }
        for row in rows {
            for tidb in [false, true] {
                let (mut direct, mut laid) = (String::new(), String::new());
                encode_row_message(&mut direct, tidb, &schema, &row).expect("direct");
                encode_row_message_with(&mut laid, &layout, tidb, &schema, &row).expect("layout");
                assert_eq!(laid, direct);
                let (mut line, mut laid_line) = (String::new(), String::new());
                encode_row(&mut line, None, tidb, &schema, &row).expect("line");
                encode_row(&mut laid_line, Some(&layout), tidb, &schema, &row).expect("line");
                assert_eq!(laid_line, line);
                assert_eq!(line, direct + TERMINATOR);
            }
        }
    }
}
