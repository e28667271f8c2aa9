//! The Debezium JSON envelope (Kafka Connect's JSON converter with schemas on), as the Debezium
//! MySQL connector writes it with its default settings, except where noted in
//! `docs/sinks.md`: DECIMAL is a string (`decimal.handling.mode=string`), `ts_ms` is the commit
//! time (not the wall clock, so output is deterministic), no tombstone follows a delete, and a
//! DDL travels in the table's own topic (every partition) as a schema-change payload, so a
//! consumer meets it in order with the rows.
//!
//! Invariants:
//! - encoding is a pure function of (schema, row, topic prefix): golden files pin it;
//! - every column carries its MySQL type in the parameter `__debezium.source.column.type`
//!   (Debezium's `column.propagate.source.type`), which decoding uses to give values back in
//!   MySQL's text form;
//! - `source.commit_ts` is Sluice's commit ts (binlog file index << 32 | end position),
//!   `source.pos` that end position and `source.file` that file's name (`<base>.<index>`, six
//!   digits at least, as MariaDB names it; empty when the sink was not told the upstream's
//!   binlog base name, see [`Origin`]), so a consumer can order and deduplicate; `source.gtid`
//!   and `source.server_id` are the transaction's MariaDB GTID and its server (null and 0
//!   without);
//! - decoding never panics on external data: malformed input is a [`SinkError::Codec`].

use super::json::{push_escaped, push_int, push_str, push_value};
use super::{base64_decode, base64_encode, bit_width, value_bytes, value_text, DecodedRow};
use crate::error::{Result, SinkError};
use serde_json::{json, Map, Value as Json};
use sluice_types::civil::{days_from_civil, utc_parts};
use sluice_types::{ColumnDef, ColumnType, DdlEvent, RowEvent, RowKind, TableSchema, Ts, Value};
use std::fmt::Write;

/// `source.connector` of every message.
pub const CONNECTOR: &str = "sluice";
/// `source.version`: the Debezium envelope version this follows.
pub const ENVELOPE_VERSION: &str = "2.7.0.Final";
/// The parameter carrying a column's MySQL type.
pub const SOURCE_TYPE: &str = "__debezium.source.column.type";

/// The Kafka Connect type, the semantic name and the MySQL type of a column.
fn field_schema(col: &ColumnDef) -> Json {
    let (ty, name): (&str, Option<&str>) = match col.ty {
        ColumnType::TinyInt => ("int16", None),
        ColumnType::SmallInt if !col.unsigned => ("int16", None),
        ColumnType::SmallInt | ColumnType::MediumInt => ("int32", None),
        ColumnType::Int if !col.unsigned => ("int32", None),
        ColumnType::Int | ColumnType::BigInt => ("int64", None),
        ColumnType::Float => ("float", None),
        ColumnType::Double => ("double", None),
        ColumnType::Decimal => ("string", None),
        ColumnType::Char | ColumnType::VarChar | ColumnType::Text => ("string", None),
        ColumnType::Json => ("string", Some("io.debezium.data.Json")),
        ColumnType::Enum => ("string", Some("io.debezium.data.Enum")),
        ColumnType::Set => ("string", Some("io.debezium.data.EnumSet")),
        ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob | ColumnType::Geometry => {
            ("bytes", None)
        }
        ColumnType::Date => ("int32", Some("io.debezium.time.Date")),
        ColumnType::Time => ("int64", Some("io.debezium.time.MicroTime")),
        ColumnType::DateTime if col.decimals <= 3 => ("int64", Some("io.debezium.time.Timestamp")),
        ColumnType::DateTime => ("int64", Some("io.debezium.time.MicroTimestamp")),
        ColumnType::Timestamp => ("string", Some("io.debezium.time.ZonedTimestamp")),
        ColumnType::Year => ("int32", Some("io.debezium.time.Year")),
        ColumnType::Bit if bit_width(col) == 1 => ("boolean", None),
        ColumnType::Bit => ("bytes", Some("io.debezium.data.Bits")),
    };
    let mut f = Map::new();
    f.insert("type".into(), json!(ty));
    f.insert("optional".into(), json!(col.nullable));
    if let Some(n) = name {
        f.insert("name".into(), json!(n));
    }
    let mut params = Map::new();
    params.insert(SOURCE_TYPE.into(), json!(col.sql_type.to_ascii_uppercase()));
    if col.ty == ColumnType::Bit {
        params.insert("length".into(), json!(bit_width(col).to_string()));
    }
    f.insert("parameters".into(), Json::Object(params));
    f.insert("field".into(), json!(col.name));
    Json::Object(f)
}

fn date_days(year: u16, month: u8, day: u8) -> Option<i64> {
    (month >= 1 && day >= 1)
        .then(|| days_from_civil(i64::from(year), u32::from(month), u32::from(day)))
}

/// A column value as Debezium's JSON converter writes it (see the module docs). A value
/// Debezium cannot represent (a zero date) is `null`, as the Debezium MySQL connector does.
fn field_value(v: &Value, col: &ColumnDef) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Int(i) => json!(i),
        Value::UInt(u) if col.ty == ColumnType::Bit => bit_value(*u, col),
        Value::UInt(u) => json!(u),
        Value::Float(f) => json!(f),
        Value::Double(f) => json!(f),
        Value::Bit { bits, .. } => bit_value(*bits, col),
        Value::Date { year, month, day } => {
            date_days(*year, *month, *day).map_or(Json::Null, |d| json!(d))
        }
        Value::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => {
            let us = ((i64::from(*hours) * 60 + i64::from(*minutes)) * 60 + i64::from(*seconds))
                * 1_000_000
                + i64::from(*micros);
            json!(if *negative { -us } else { us })
        }
        Value::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        } => match date_days(*year, *month, *day) {
            None => Json::Null,
            Some(d) => {
                let us = ((d * 24 + i64::from(*hour)) * 60 + i64::from(*minute)) * 60_000_000
                    + i64::from(*second) * 1_000_000
                    + i64::from(*micros);
                json!(if col.decimals <= 3 {
                    us.div_euclid(1000)
                } else {
                    us
                })
            }
        },
        Value::Timestamp { micros } => {
            let (y, m, d, h, mi, s, us) = utc_parts(*micros);
            let frac = if col.decimals == 0 {
                String::new()
            } else {
                format!(".{:06}", us)[..=usize::from(col.decimals.min(6))].to_string()
            };
            json!(format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}{frac}Z"))
        }
        Value::Year(y) => json!(y),
        _ if super::is_binary(col.ty) => {
            json!(base64_encode(&value_bytes(v, col).unwrap_or_default()))
        }
        other => value_text(other, col).map_or(Json::Null, Json::String),
    }
}

fn bit_value(bits: u64, col: &ColumnDef) -> Json {
    let width = bit_width(col);
    if width == 1 {
        return json!(bits != 0);
    }
    let n = width.div_ceil(8).clamp(1, 8) as usize;
    json!(base64_encode(&bits.to_le_bytes()[..n]))
}

/// Appends one value as [`field_value`] writes it, without building a JSON value for the
/// common kinds (integers, text).
fn push_field(out: &mut String, v: &Value, col: &ColumnDef) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Int(i) => push_int(out, *i),
        Value::UInt(u) if col.ty != ColumnType::Bit => push_int(out, *u),
        Value::Text(s) | Value::Decimal(s) | Value::Json(s) if !super::is_binary(col.ty) => {
            push_str(out, s)
        }
        Value::Enum { name, .. } if !super::is_binary(col.ty) => push_str(out, name),
        _ => push_value(out, &field_value(v, col)),
    }
}

/// The columns' positions in the order of their names (a JSON object's keys are written
/// sorted, as `serde_json`'s map keeps them).
fn by_name(columns: &[ColumnDef]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..columns.len()).collect();
    order.sort_by(|&a, &b| columns[a].name.cmp(&columns[b].name));
    order
}

/// Appends a row image (`null` for none), its columns in `order`.
fn push_image(
    out: &mut String,
    schema: &TableSchema,
    order: &[usize],
    values: Option<&[Value]>,
) -> Result<()> {
    let Some(values) = values else {
        out.push_str("null");
        return Ok(());
    };
    if values.len() != schema.columns.len() {
        return Err(SinkError::Codec(format!(
            "{}: row has {} values for {} columns",
            schema.qualified_name(),
            values.len(),
            schema.columns.len()
        )));
    }
    out.push('{');
    for (i, &c) in order.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let col = &schema.columns[c];
        push_str(out, &col.name);
        out.push(':');
        push_field(out, &values[c], col);
    }
    out.push('}');
    Ok(())
}

fn source_schema() -> Json {
    let f = |ty: &str, optional: bool, field: &str| json!({"type": ty, "optional": optional, "field": field});
    json!({
        "type": "struct",
        "fields": [
            f("string", false, "version"), f("string", false, "connector"), f("string", false, "name"),
            f("int64", false, "ts_ms"), f("string", true, "snapshot"), f("string", false, "db"),
            f("string", true, "table"), f("int64", false, "server_id"), f("string", true, "gtid"),
            f("string", false, "file"), f("int64", false, "pos"), f("int32", false, "row"),
            f("int64", true, "thread"), f("string", true, "query"), f("int64", false, "commit_ts"),
        ],
        "optional": false,
        "name": "io.debezium.connector.mysql.Source",
        "field": "source"
    })
}

/// Who writes the messages: the logical server name (`source.name` and the schema names'
/// prefix; the Kafka sink passes its topic) and the upstream's binlog base name (`mysql-bin` for
/// files `mysql-bin.000042`), which with a change's commit ts gives `source.file`; `None` when
/// it is not known (a sink opened without it): `file` is then the empty string.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    pub name: &'a str,
    pub binlog_base: Option<&'a str>,
}

impl<'a> Origin<'a> {
    /// An origin without a binlog base name (`source.file` empty).
    pub fn named(name: &'a str) -> Origin<'a> {
        Origin {
            name,
            binlog_base: None,
        }
    }
}

/// Appends `source.file`: the name of the binlog file commit ts `ts` is in (`base.NNNNNN`, as
/// `BinlogPos::from_ts` in capture names it), or `""` without a base name.
fn push_file(out: &mut String, base: Option<&str>, ts: Ts) {
    match base {
        Some(b) => {
            out.push('"');
            push_escaped(out, b);
            let _ = write!(out, ".{:06}\"", ts >> 32);
        }
        None => out.push_str("\"\""),
    }
}

/// Where a message's change comes from: the `source` block's fields that vary.
struct Source<'a> {
    origin: Origin<'a>,
    db: &'a str,
    /// `None`: a DDL that names no table.
    table: Option<&'a str>,
    commit_ts: Ts,
    time_ms: u64,
    snapshot: bool,
    gtid: Option<sluice_types::Gtid>,
}

impl<'a> Source<'a> {
    fn of_row(origin: Origin<'a>, schema: &'a TableSchema, row: &RowEvent) -> Source<'a> {
        Source {
            origin,
            db: &schema.database,
            table: Some(&schema.name),
            commit_ts: row.commit_ts,
            time_ms: row.commit_time_ms,
            snapshot: row.snapshot,
            gtid: row.gtid,
        }
    }

    /// A DDL's (`table` empty: it names none).
    fn of_ddl(origin: Origin<'a>, ddl: &'a DdlEvent, table: &'a str) -> Source<'a> {
        Source {
            origin,
            db: ddl.target_database(),
            table: (!table.is_empty()).then_some(table),
            commit_ts: ddl.commit_ts,
            time_ms: ddl.commit_time_ms,
            snapshot: false,
            gtid: None,
        }
    }

    /// Appends the block, its keys sorted (as the `serde_json` map it once was wrote them).
    fn push(&self, out: &mut String) {
        out.push_str("{\"commit_ts\":");
        push_int(out, self.commit_ts);
        out.push_str(",\"connector\":");
        push_str(out, CONNECTOR);
        out.push_str(",\"db\":");
        push_str(out, self.db);
        out.push_str(",\"file\":");
        push_file(out, self.origin.binlog_base, self.commit_ts);
        out.push_str(",\"gtid\":");
        match self.gtid {
            // Digits and dashes: nothing to escape.
            Some(g) => {
                let _ = write!(out, "\"{g}\"");
            }
            None => out.push_str("null"),
        }
        out.push_str(",\"name\":");
        push_str(out, self.origin.name);
        out.push_str(",\"pos\":");
        push_int(out, self.commit_ts & 0xffff_ffff);
        out.push_str(",\"query\":null,\"row\":0,\"server_id\":");
        // The server that wrote the transaction, as its GTID says (0: not known).
        push_int(out, self.gtid.map_or(0, |g| g.server));
        out.push_str(",\"snapshot\":");
        out.push_str(if self.snapshot {
            "\"true\""
        } else {
            "\"false\""
        });
        out.push_str(",\"table\":");
        match self.table {
            Some(t) => push_str(out, t),
            None => out.push_str("null"),
        }
        out.push_str(",\"thread\":null,\"ts_ms\":");
        push_int(out, self.time_ms);
        out.push_str(",\"version\":");
        push_str(out, ENVELOPE_VERSION);
        out.push('}');
    }
}

/// What every message of one table version shares, built once per version: the `schema`
/// parts of its values and keys, and the order its columns are written in.
#[derive(Debug)]
pub struct Envelope {
    /// Messages carry their `schema` part (Kafka Connect's `schemas.enable`); off with the sink
    /// URI's `debezium-disable-schema=true` (TiCDC's parameter): `{"payload": …}` alone.
    with_schema: bool,
    value_schema: String,
    /// `None`: the table has no key (its messages have none).
    key_schema: Option<String>,
    by_name: Vec<usize>,
    /// The key columns' positions, by name.
    key_by_name: Vec<usize>,
}

impl Envelope {
    pub fn new(name: &str, schema: &TableSchema) -> Envelope {
        Envelope::with_schema(name, schema, true)
    }

    /// [`Envelope::new`]; `with_schema: false` leaves the `schema` part out of every message.
    pub fn with_schema(name: &str, schema: &TableSchema, with_schema: bool) -> Envelope {
        let mut key_by_name = schema.key_columns.clone();
        key_by_name.sort_by(|&a, &b| {
            let n = |i: usize| schema.columns.get(i).map(|c| c.name.as_str());
            n(a).cmp(&n(b))
        });
        Envelope {
            with_schema,
            value_schema: match with_schema {
                true => envelope_schema(name, schema),
                false => String::new(),
            },
            key_schema: key_schema(name, schema),
            by_name: by_name(&schema.columns),
            key_by_name,
        }
    }
}

/// The value of a row change's message, written by `origin` (see [`Origin`]).
pub fn encode_row_value(
    origin: Origin<'_>,
    schema: &TableSchema,
    row: &RowEvent,
) -> Result<String> {
    encode_row_value_with(&Envelope::new(origin.name, schema), origin, schema, row)
}

/// The `schema` part of every row message of one table version: the same for all its rows, so
/// a sink builds it once per version ([`encode_row_value_with`]).
pub fn envelope_schema(name: &str, schema: &TableSchema) -> String {
    let fields: Vec<Json> = schema.columns.iter().map(field_schema).collect();
    let record = format!("{name}.{}.{}", schema.database, schema.name);
    let image_schema = |field: &str| json!({"type": "struct", "fields": fields, "optional": true, "name": format!("{record}.Value"), "field": field});
    json!({
        "type": "struct",
        "fields": [image_schema("before"), image_schema("after"), source_schema(),
            {"type": "string", "optional": false, "field": "op"},
            {"type": "int64", "optional": true, "field": "ts_ms"}],
        "optional": false,
        "name": format!("{record}.Envelope"),
        "version": 1
    })
    .to_string()
}

/// [`encode_row_value`] with the table version's [`Envelope`] already built.
pub fn encode_row_value_with(
    envelope: &Envelope,
    origin: Origin<'_>,
    schema: &TableSchema,
    row: &RowEvent,
) -> Result<String> {
    let mut out = String::with_capacity(envelope.value_schema.len() + 512);
    write_row_value(&mut out, envelope, origin, schema, row)?;
    Ok(out)
}

/// Appends the value of a row change's message to `out` (a buffer the caller sized).
pub fn write_row_value(
    out: &mut String,
    envelope: &Envelope,
    origin: Origin<'_>,
    schema: &TableSchema,
    row: &RowEvent,
) -> Result<()> {
    let (op, before, after) = match row.kind {
        // A snapshot read is Debezium's read event.
        RowKind::Insert if row.snapshot => ("r", None, row.after.as_deref()),
        RowKind::Insert => ("c", None, row.after.as_deref()),
        RowKind::Update => ("u", row.before.as_deref(), row.after.as_deref()),
        RowKind::Delete => ("d", row.before.as_deref(), None),
    };
    if (row.kind != RowKind::Insert && before.is_none())
        || (row.kind != RowKind::Delete && after.is_none())
    {
        return Err(SinkError::Codec(format!(
            "{}: {:?} row without its image",
            schema.qualified_name(),
            row.kind
        )));
    }
    let order = &envelope.by_name;
    out.push('{');
    if envelope.with_schema {
        out.push_str("\"schema\":");
        out.push_str(&envelope.value_schema);
        out.push(',');
    }
    // The payload's keys in sorted order, as the serde_json map it once was wrote them.
    out.push_str("\"payload\":{\"after\":");
    push_image(out, schema, order, after)?;
    out.push_str(",\"before\":");
    push_image(out, schema, order, before)?;
    out.push_str(",\"op\":");
    push_str(out, op);
    out.push_str(",\"source\":");
    Source::of_row(origin, schema, row).push(out);
    out.push_str(",\"ts_ms\":");
    push_int(out, row.commit_time_ms);
    out.push_str("}}");
    Ok(())
}

/// The `schema` part of a table version's keys; `None` for a table without a key.
fn key_schema(name: &str, schema: &TableSchema) -> Option<String> {
    if schema.key_columns.is_empty() {
        return None;
    }
    let mut fields = Vec::new();
    for &k in &schema.key_columns {
        fields.push(field_schema(schema.columns.get(k)?));
    }
    Some(
        json!({"type": "struct", "fields": fields, "optional": false,
               "name": format!("{name}.{}.{}.Key", schema.database, schema.name)})
        .to_string(),
    )
}

/// The key of a row change's message: the key columns (primary key, else the not-null unique
/// key the rows are routed by); `None` for a table without one.
pub fn encode_key(name: &str, schema: &TableSchema, row: &RowEvent) -> Option<String> {
    encode_key_with(&Envelope::new(name, schema), schema, row)
}

/// [`encode_key`] with the table version's [`Envelope`] already built.
pub fn encode_key_with(
    envelope: &Envelope,
    schema: &TableSchema,
    row: &RowEvent,
) -> Option<String> {
    let key_schema = envelope.key_schema.as_deref()?;
    let values = match row.kind {
        RowKind::Delete => row.before.as_deref()?,
        _ => row.after.as_deref()?,
    };
    let mut out = String::with_capacity(
        64 + if envelope.with_schema {
            key_schema.len()
        } else {
            0
        },
    );
    out.push_str("{\"payload\":{");
    for (i, &k) in envelope.key_by_name.iter().enumerate() {
        let col = schema.columns.get(k)?;
        if i > 0 {
            out.push(',');
        }
        push_str(&mut out, &col.name);
        out.push(':');
        push_field(&mut out, values.get(k)?, col);
    }
    out.push('}');
    if envelope.with_schema {
        out.push_str(",\"schema\":");
        out.push_str(key_schema);
    }
    out.push('}');
    Some(out)
}

/// The value of a DDL's message: Debezium's schema-change payload (`databaseName`, `ddl`) with
/// the source block.
pub fn encode_ddl_value(origin: Origin<'_>, ddl: &DdlEvent, table: &str) -> String {
    let source = Source::of_ddl(origin, ddl, table);
    // The payload's keys sorted, then `schema`, as the serde_json map it once was wrote them.
    let mut out = String::with_capacity(ddl.query.len() + 512);
    out.push_str("{\"payload\":{\"databaseName\":");
    push_str(&mut out, ddl.target_database());
    out.push_str(",\"ddl\":");
    push_str(&mut out, &ddl.query);
    out.push_str(",\"schemaName\":null,\"source\":");
    source.push(&mut out);
    out.push_str(",\"tableChanges\":[],\"ts_ms\":");
    push_int(&mut out, ddl.commit_time_ms);
    out.push_str("},\"schema\":null}");
    out
}

/// What one Debezium message holds, decoded (consume's side).
#[derive(Debug)]
pub enum Decoded {
    Row {
        database: String,
        table: String,
        /// The columns in the schema's order, their MySQL types, and the key columns' names.
        columns: Vec<(String, String)>,
        row: DecodedRow,
    },
    Ddl {
        database: String,
        query: String,
        commit_ts: Ts,
    },
}

fn codec_err(what: &str) -> SinkError {
    SinkError::Codec(format!("debezium: {what}"))
}

/// Decodes a message value.
pub fn decode(value: &[u8]) -> Result<Decoded> {
    let v: Json = serde_json::from_slice(value).map_err(|e| codec_err(&e.to_string()))?;
    let payload = v.get("payload").ok_or_else(|| codec_err("no payload"))?;
    let source = payload
        .get("source")
        .ok_or_else(|| codec_err("no source"))?;
    let commit_ts = source
        .get("commit_ts")
        .and_then(Json::as_u64)
        .ok_or_else(|| codec_err("source without commit_ts"))?;
    let database = source
        .get("db")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string();
    if let Some(ddl) = payload.get("ddl").and_then(Json::as_str) {
        return Ok(Decoded::Ddl {
            database,
            query: ddl.to_string(),
            commit_ts,
        });
    }
    let table = source
        .get("table")
        .and_then(Json::as_str)
        .ok_or_else(|| codec_err("source without table"))?
        .to_string();
    let fields = v
        .pointer("/schema/fields")
        .and_then(Json::as_array)
        .and_then(|f| {
            f.iter()
                .find(|x| x.get("field").and_then(Json::as_str) == Some("after"))
        })
        .and_then(|a| a.get("fields"))
        .and_then(Json::as_array)
        .ok_or_else(|| match v.get("schema") {
            None => codec_err(
                "a row message without its schema (written with debezium-disable-schema=true): \
                 its column types are unknown, so it cannot be applied; write the topic with \
                 the schema (the default) to consume it",
            ),
            Some(_) => codec_err("schema without the after struct's fields"),
        })?;
    let cols: Vec<Field> = fields.iter().map(Field::read).collect::<Result<_>>()?;
    let kind = match payload.get("op").and_then(Json::as_str) {
        Some("c") | Some("r") => RowKind::Insert,
        Some("u") => RowKind::Update,
        Some("d") => RowKind::Delete,
        other => return Err(codec_err(&format!("unknown op {other:?}"))),
    };
    let img = |k: &str| -> Result<Option<Vec<Value>>> {
        match payload.get(k) {
            None | Some(Json::Null) => Ok(None),
            Some(o) => cols
                .iter()
                .map(|c| c.value(o.get(&c.name).unwrap_or(&Json::Null)))
                .collect::<Result<Vec<_>>>()
                .map(Some),
        }
    };
    let row = DecodedRow {
        kind,
        commit_ts: Some(commit_ts),
        before: img("before")?,
        after: img("after")?,
    };
    let columns = cols.into_iter().map(|c| (c.name, c.source_type)).collect();
    Ok(Decoded::Row {
        database,
        table,
        columns,
        row,
    })
}

/// One column of a message's schema.
struct Field {
    name: String,
    ty: String,
    semantic: Option<String>,
    source_type: String,
}

impl Field {
    fn read(f: &Json) -> Result<Field> {
        let s = |k: &str| f.get(k).and_then(Json::as_str).map(str::to_string);
        Ok(Field {
            name: s("field").ok_or_else(|| codec_err("a field without its name"))?,
            ty: s("type").unwrap_or_default(),
            semantic: s("name"),
            source_type: f
                .pointer(&format!("/parameters/{SOURCE_TYPE}"))
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_string(),
        })
    }

    /// The value in MySQL's text form (bytes for binary columns, an integer for BIT).
    fn value(&self, v: &Json) -> Result<Value> {
        if v.is_null() {
            return Ok(Value::Null);
        }
        let text = |t: String| -> Result<Value> { Ok(Value::Text(t)) };
        match (self.semantic.as_deref(), v) {
            (Some("io.debezium.time.Date"), Json::Number(n)) => {
                let (y, m, d) = sluice_types::civil::civil_from_days(
                    n.as_i64().ok_or_else(|| codec_err("bad date"))?,
                );
                text(format!("{y:04}-{m:02}-{d:02}"))
            }
            (Some("io.debezium.time.MicroTime"), Json::Number(n)) => {
                text(micro_time(n.as_i64().ok_or_else(|| codec_err("bad time"))?))
            }
            (Some("io.debezium.time.Timestamp"), Json::Number(n)) => text(datetime(
                n.as_i64().ok_or_else(|| codec_err("bad datetime"))? * 1000,
            )),
            (Some("io.debezium.time.MicroTimestamp"), Json::Number(n)) => text(datetime(
                n.as_i64().ok_or_else(|| codec_err("bad datetime"))?,
            )),
            (Some("io.debezium.time.ZonedTimestamp"), Json::String(s)) => {
                text(s.trim_end_matches('Z').replacen('T', " ", 1))
            }
            (Some("io.debezium.data.Bits"), Json::String(s)) => {
                let b = base64_decode(s)?;
                Ok(Value::UInt(
                    b.iter()
                        .rev()
                        .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)),
                ))
            }
            (_, Json::Bool(b)) => Ok(Value::UInt(u64::from(*b))),
            (_, Json::String(s)) if self.ty == "bytes" => Ok(Value::Bytes(base64_decode(s)?)),
            (_, Json::String(s)) => text(s.clone()),
            (_, Json::Number(n)) => text(n.to_string()),
            (_, other) => Err(codec_err(&format!(
                "column {}: unexpected value {other}",
                self.name
            ))),
        }
    }
}

fn micro_time(us: i64) -> String {
    let sign = if us < 0 { "-" } else { "" };
    let a = us.unsigned_abs();
    let (s, frac) = (a / 1_000_000, a % 1_000_000);
    format!(
        "{sign}{:02}:{:02}:{:02}.{frac:06}",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

fn datetime(us: i64) -> String {
    let (y, m, d, h, mi, s, frac) = utc_parts(us);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}.{frac:06}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_types::{Key, TableId};

    /// The `source` block as `serde_json` builds it: the reference the writer must match.
    fn reference_source(src: &Source<'_>) -> Json {
        json!({
            "version": ENVELOPE_VERSION, "connector": CONNECTOR, "name": src.origin.name,
            "ts_ms": src.time_ms, "snapshot": if src.snapshot { "true" } else { "false" },
            "db": src.db, "table": src.table, "server_id": src.gtid.map_or(0, |g| g.server),
            "gtid": src.gtid.map(|g| g.to_string()),
            "file": src.origin.binlog_base.map_or(String::new(), |b| format!("{b}.{:06}", src.commit_ts >> 32)),
            "pos": src.commit_ts & 0xffff_ffff, "row": 0, "thread": null, "query": null,
            "commit_ts": src.commit_ts
        })
    }

    /// The source block written straight equals the one `serde_json` builds, for every field
    /// that varies (snapshot or not, a GTID or none, names that need escaping, no table, the
    /// largest commit ts, a binlog base name or none).
    #[test]
    fn the_source_block_written_straight_is_the_built_one() {
        let gtid = sluice_types::Gtid {
            domain: 0,
            server: 42,
            seq: u64::MAX,
        };
        for (snapshot, ts, gtid, table, base) in [
            (
                false,
                1u64 << 32 | 4,
                Some(gtid),
                Some("t\\1"),
                Some("mysql-bin"),
            ),
            (true, u64::MAX, None, None, Some("/var/log/b\"in")),
            (false, 3u64 << 32 | 4, None, Some("t"), None),
        ] {
            let src = Source {
                origin: Origin {
                    name: "top\nic",
                    binlog_base: base,
                },
                db: "d\"b",
                table,
                commit_ts: ts,
                time_ms: 1_700_000_000_123,
                snapshot,
                gtid,
            };
            let mut out = String::new();
            src.push(&mut out);
            assert_eq!(out, reference_source(&src).to_string());
        }
        let mut schema = crate::testing::simple_schema("d", "t", 7, 1);
        schema.table_id = TableId(7);
        let row = RowEvent {
            table_id: schema.table_id,
            schema_version: 1,
            commit_ts: 9,
            commit_time_ms: 5,
            kind: RowKind::Insert,
            key: Key::default(),
            before: None,
            after: None,
            snapshot: true,
            gtid: Some(gtid),
        };
        let src = Source::of_row(Origin::named("n"), &schema, &row);
        assert_eq!(
            (src.db, src.table, src.snapshot, src.gtid),
            ("d", Some("t"), true, Some(gtid))
        );
    }

    /// `source.file` names the commit ts's binlog file as MariaDB does (six digits at least),
    /// and is empty only without a base name.
    #[test]
    fn the_file_is_the_commit_ts_binlog_file() {
        let file = |base, ts| {
            let mut out = String::new();
            push_file(&mut out, base, ts);
            out
        };
        assert_eq!(
            file(Some("mysql-bin"), 3 << 32 | 1234),
            "\"mysql-bin.000003\""
        );
        assert_eq!(file(Some("b"), 1_234_567 << 32), "\"b.1234567\"");
        assert_eq!(file(None, 3 << 32), "\"\"");
    }

    /// A DDL's message written straight equals the one `serde_json` builds.
    #[test]
    fn the_ddl_message_written_straight_is_the_built_one() {
        for table in ["", "t\"x"] {
            let mut ddl =
                crate::testing::ddl_event(77, "d", "CREATE TABLE `t\"x` (a INT)\n", TableId(3));
            ddl.commit_time_ms = 1_700_000_000_000;
            let origin = Origin {
                name: "topic",
                binlog_base: Some("log-bin"),
            };
            let src = Source::of_ddl(origin, &ddl, table);
            let built = json!({
                "schema": null,
                "payload": {
                    "source": reference_source(&src), "ts_ms": ddl.commit_time_ms,
                    "databaseName": ddl.target_database(), "schemaName": null,
                    "ddl": ddl.query, "tableChanges": []
                }
            });
            assert_eq!(encode_ddl_value(origin, &ddl, table), built.to_string());
        }
    }
}
