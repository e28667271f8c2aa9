//! `sluice consume --kafka kafka://…/topic?protocol=… --downstream mysql://…`: reads every
//! partition of the topic (or of every topic a `*` pattern in its place matches, e.g.
//! `cdc_*` for a topic per table) from the beginning until it is caught up, orders what it read
//! by commit ts, and applies DDLs and rows to a MySQL-compatible downstream through the MySQL
//! sink (safe mode), so `sluice check` can compare the result with the upstream.
//!
//! Invariants:
//! - every message carries its commit ts (canal-json needs `enable-tidb-extension=true`, which
//!   is refused without; Debezium's `source.commit_ts` is always there; Avro's is in the
//!   `sluice-commit-ts` header), and rows are applied in (commit ts, topic, partition, offset)
//!   order: a key lives in one partition, so its changes keep their order, and the copies a
//!   replay adds sort next to their originals, where applying them again changes nothing (safe
//!   mode);
//! - a DDL (sent to every partition) is applied once, after every row with a smaller commit ts
//!   and before every row with a greater one; its copies are recognised by (commit ts, query);
//! - the end is reached when every partition reported its end and nothing arrived for `idle`;
//! - at most [`MAX_MESSAGES`] messages are held in memory: more is an error saying so.

use super::config::{KafkaConfig, KafkaProtocol};
use crate::codec::{self, DecodedRow};
use crate::consume::{ConsumeReport, CONSUME_CHANGEFEED};
use crate::error::{Result, SinkError};
use crate::mysql::MysqlSink;
use crate::uri::{SinkConfig, SinkUri};
use crate::{RowBatch, Sink};
use sluice_types::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

pub(super) use super::consume_read::Raw;

/// The most messages one run holds in memory.
pub const MAX_MESSAGES: usize = 20_000_000;
/// The default quiet time after every partition's end.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(2);

#[derive(Clone, Debug)]
pub struct KafkaConsumeArgs {
    /// A Kafka sink URI: brokers, topic and the protocol it was written with.
    pub kafka: String,
    /// A MySQL sink URI for the downstream (`safe-mode` is forced on).
    pub downstream: String,
    /// How long to wait for more after every partition reached its end.
    pub idle: Duration,
}

/// What a message holds.
pub(super) enum Event {
    Row {
        table: (String, String),
        columns: Vec<(String, String)>,
        keys: Vec<String>,
        row: DecodedRow,
    },
    Ddl {
        database: String,
        query: String,
        commit_ts: Ts,
        kind: DdlKind,
    },
    Watermark(Ts),
}

/// Reads the topic and applies it. Returns what was done.
pub async fn run(args: &KafkaConsumeArgs) -> Result<ConsumeReport> {
    let masked = crate::uri::mask_uri(&args.kafka);
    let (uri, pattern) = super::consume_read::topic_pattern(&args.kafka);
    let SinkConfig::Kafka(mut cfg) = SinkUri::parse(&uri)?.config else {
        return Err(SinkError::invalid_uri(
            &masked,
            "--kafka must be a kafka:// URI",
        ));
    };
    if cfg.protocol == KafkaProtocol::CanalJson && !cfg.enable_tidb_extension {
        return Err(SinkError::invalid_uri(
            &masked,
            "canal-json carries no commit ts without enable-tidb-extension=true, so the order of rows across partitions and replays cannot be known: write the topic with enable-tidb-extension=true (and pass it here)",
        ));
    }
    if cfg.debezium_disable_schema {
        return Err(SinkError::invalid_uri(
            &masked,
            "debezium-disable-schema=true messages carry no column types, so their values cannot be applied to a table: write the topic with the schema (the default) to consume it",
        ));
    }
    let SinkConfig::Mysql(mut down) = SinkUri::parse(&args.downstream)?.config else {
        return Err(SinkError::invalid_uri(
            &crate::uri::mask_uri(&args.downstream),
            "--downstream must be a mysql:// URI",
        ));
    };
    down.safe_mode = true;
    down.downstream_fence = false;
    if let Some(p) = pattern {
        cfg.topic = p;
    }
    let idle = args.idle;
    let read_cfg = cfg.clone();
    let raws =
        tokio::task::spawn_blocking(move || super::consume_read::read_topics(&read_cfg, idle))
            .await
            .map_err(|e| SinkError::Broker {
                what: "reading the topic".into(),
                reason: e.to_string(),
                retryable: true,
            })??;
    let raws = resolve_claims(&cfg, raws).await?;
    let avro = super::consume_avro::fetch_schemas(&cfg, &raws).await?;
    let mut report = ConsumeReport {
        data_files: 0,
        ..Default::default()
    };
    let items = order(&cfg, raws, &avro, &mut report)?;
    let sink = MysqlSink::connect_for(CONSUME_CHANGEFEED, down).await?;
    apply(&sink, items, &mut report).await?;
    Ok(report)
}

/// Replaces each claim-check reference by the message it stands for, read from the URI's
/// `claim-check-storage-uri`.
async fn resolve_claims(cfg: &KafkaConfig, mut raws: Vec<Raw>) -> Result<Vec<Raw>> {
    let mut store = None;
    for raw in &mut raws {
        let Some(location) = raw.value.as_deref().and_then(super::claim::location_of) else {
            continue;
        };
        if store.is_none() {
            let c = cfg.claim_check.as_deref().ok_or_else(|| SinkError::Layout {
                path: format!("{}/{}@{}", cfg.topic, raw.partition, raw.offset),
                reason: format!("a claim-check reference to {location}: pass large-message-handle-option=claim-check&claim-check-storage-uri=… in --kafka"),
            })?;
            store = Some(super::claim::ClaimCheck::open(c)?);
        }
        if let Some(s) = &store {
            raw.value = Some(s.get(&location).await?);
        }
    }
    Ok(raws)
}

/// Simple protocol: the schemas its BOOTSTRAP and DDL messages announced, by (db, table,
/// version): (columns with their mysqlType and generated flag, key columns).
type SimpleSchemas = BTreeMap<(String, String, Ts), (Vec<(String, String, bool)>, Vec<String>)>;

fn decode(
    cfg: &KafkaConfig,
    raw: &Raw,
    simple: &mut SimpleSchemas,
    avro: &super::consume_avro::Schemas,
) -> Result<Vec<Event>> {
    if cfg.protocol == KafkaProtocol::Avro {
        return super::consume_avro::decode(raw, avro).map(|e| vec![e]);
    }
    if cfg.protocol == KafkaProtocol::Simple {
        return decode_simple(raw.value.as_deref().unwrap_or_default(), simple);
    }
    if cfg.protocol == KafkaProtocol::OpenProtocol {
        let key = raw
            .key
            .as_deref()
            .ok_or_else(|| SinkError::Codec("open-protocol: a message without its key".into()))?;
        return decode_open(key, raw.value.as_deref().unwrap_or_default());
    }
    let Some(value) = raw.value.as_deref() else {
        return Ok(Vec::new()); // a tombstone
    };
    let ev = match cfg.protocol {
        KafkaProtocol::CanalJson => decode_canal(value)?,
        KafkaProtocol::Debezium => decode_debezium(raw.key.as_deref(), value)?,
        KafkaProtocol::OpenProtocol | KafkaProtocol::Simple | KafkaProtocol::Avro => None,
    };
    Ok(ev.into_iter().collect())
}

fn decode_simple(value: &[u8], schemas: &mut SimpleSchemas) -> Result<Vec<Event>> {
    use codec::simple::Event as S;
    let mut out = Vec::new();
    for ev in codec::simple::decode(value)? {
        match ev {
            S::Watermark(ts) => out.push(Event::Watermark(ts)),
            S::Schema {
                database,
                table,
                version,
                columns,
                keys,
            } => {
                schemas.insert((database, table, version), (columns, keys));
            }
            S::Ddl {
                query,
                commit_ts,
                database,
            } => out.push(Event::Ddl {
                database,
                query,
                commit_ts,
                kind: DdlKind::Other,
            }),
            S::Row {
                database,
                table,
                version,
                commit_ts,
                kind,
                data,
                old,
            } => {
                let (cols, keys) = schemas.get(&(database.clone(), table.clone(), version)).ok_or_else(|| {
                    SinkError::Codec(format!("simple: a row of {database}.{table} version {version} before its BOOTSTRAP or DDL message"))
                })?;
                let image = |m: &Option<serde_json::Map<String, serde_json::Value>>| -> Result<Option<Vec<Value>>> {
                    m.as_ref().map(|m| cols.iter().map(|(n, t, _)| codec::simple::value_of(m.get(n), t)).collect()).transpose()
                };
                let row = DecodedRow {
                    kind,
                    commit_ts: Some(commit_ts),
                    before: image(&old)?,
                    after: image(&data)?,
                };
                let columns = cols
                    .iter()
                    .map(|(n, t, g)| {
                        (
                            n.clone(),
                            if *g {
                                format!("{t} {GENERATED}")
                            } else {
                                t.clone()
                            },
                        )
                    })
                    .collect();
                out.push(Event::Row {
                    table: (database, table),
                    columns,
                    keys: keys.clone(),
                    row,
                });
            }
        }
    }
    Ok(out)
}

/// The type text `build_schema` reads for an Open Protocol type code and flags.
fn open_type(code: u64, flags: u64) -> String {
    let binary = flags & codec::open::BINARY_FLAG != 0;
    let ty = match code {
        16 => "bit",
        247 => "enum",
        248 => "set",
        255 => "geometry",
        15 | 254 | 249..=252 if binary => "blob",
        _ => "text",
    };
    if flags & codec::open::GENERATED_FLAG != 0 {
        format!("{ty} {GENERATED}")
    } else {
        ty.to_string()
    }
}

/// What a column's type text ends with when the message marks it generated.
const GENERATED: &str = "generated";

fn decode_open(key: &[u8], value: &[u8]) -> Result<Vec<Event>> {
    use codec::open::Event as Open;
    let mut out = Vec::new();
    for ev in codec::open::decode(key, value)? {
        out.push(match ev {
            Open::Resolved(ts) => Event::Watermark(ts),
            Open::Ddl {
                database,
                query,
                commit_ts,
                ..
            } => Event::Ddl {
                database,
                query,
                commit_ts,
                kind: DdlKind::Other,
            },
            Open::Row {
                database,
                table,
                commit_ts,
                kind,
                columns,
                before,
                after,
            } => {
                let keys = columns
                    .iter()
                    .filter(|(_, _, f)| f & codec::open::HANDLE_KEY_FLAG != 0)
                    .map(|(n, _, _)| n.clone())
                    .collect();
                let columns = columns
                    .into_iter()
                    .map(|(n, t, f)| (n, open_type(t, f)))
                    .collect();
                let row = DecodedRow {
                    kind,
                    commit_ts: Some(commit_ts),
                    before,
                    after,
                };
                Event::Row {
                    table: (database, table),
                    columns,
                    keys,
                    row,
                }
            }
        });
    }
    Ok(out)
}

fn decode_canal(value: &[u8]) -> Result<Option<Event>> {
    let v: serde_json::Value =
        serde_json::from_slice(value).map_err(|e| SinkError::Codec(format!("canal-json: {e}")))?;
    let s = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_string()
    };
    if v.get("type").and_then(|t| t.as_str()) == Some("TIDB_WATERMARK") {
        return Ok(v
            .pointer("/_tidb/watermarkTs")
            .and_then(|t| t.as_u64())
            .map(Event::Watermark));
    }
    let commit_ts = v
        .pointer("/_tidb/commitTs")
        .and_then(|t| t.as_u64())
        .ok_or_else(|| SinkError::Codec("canal-json: a message without _tidb.commitTs".into()))?;
    if v.get("isDdl").and_then(|x| x.as_bool()) == Some(true) {
        let kind = match s("type").as_str() {
            "CREATE" => DdlKind::CreateTable,
            "ERASE" => DdlKind::DropTable,
            "ALTER" => DdlKind::AlterTable,
            "TRUNCATE" => DdlKind::TruncateTable,
            "RENAME" => DdlKind::RenameTable,
            _ => DdlKind::Other,
        };
        return Ok(Some(Event::Ddl {
            database: s("database"),
            query: s("sql"),
            commit_ts,
            kind,
        }));
    }
    let columns: Vec<(String, String)> = v
        .get("mysqlType")
        .and_then(|m| m.as_object())
        .ok_or_else(|| SinkError::Codec("canal-json: a row without mysqlType".into()))?
        .iter()
        .map(|(k, t)| (k.clone(), t.as_str().unwrap_or_default().to_string()))
        .collect();
    let keys: Vec<String> = v
        .get("pkNames")
        .and_then(|k| k.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let table = (s("database"), s("table"));
    let schema = build_schema(TableId(0), &table, &columns, &keys);
    let mut line = String::from_utf8_lossy(value).into_owned();
    line.push('\n');
    let mut rows = codec::canal::decode_file(&line, &schema)?;
    let row = rows
        .pop()
        .ok_or_else(|| SinkError::Codec("canal-json: an empty row message".into()))?;
    Ok(Some(Event::Row {
        table,
        columns,
        keys,
        row,
    }))
}

fn decode_debezium(key: Option<&[u8]>, value: &[u8]) -> Result<Option<Event>> {
    Ok(Some(match codec::debezium::decode(value)? {
        codec::debezium::Decoded::Ddl {
            database,
            query,
            commit_ts,
        } => Event::Ddl {
            database,
            query,
            commit_ts,
            kind: DdlKind::Other,
        },
        codec::debezium::Decoded::Row {
            database,
            table,
            columns,
            row,
        } => {
            let keys = key
                .and_then(|k| serde_json::from_slice::<serde_json::Value>(k).ok())
                .and_then(|k| {
                    k.get("payload")
                        .and_then(|p| p.as_object())
                        .map(|o| o.keys().cloned().collect())
                })
                .unwrap_or_default();
            Event::Row {
                table: (database, table),
                columns,
                keys,
                row,
            }
        }
    }))
}

/// A table schema from what a message says of its columns: every column is text but binary
/// ones (bytes) and BIT (an integer); the MySQL downstream converts.
pub(super) fn build_schema(
    id: TableId,
    table: &(String, String),
    columns: &[(String, String)],
    keys: &[String],
) -> TableSchema {
    let cols = columns
        .iter()
        .map(|(name, ty)| {
            let t = ty.to_ascii_lowercase();
            let geometry = [
                "geometry",
                "point",
                "linestring",
                "polygon",
                "multipoint",
                "multilinestring",
                "multipolygon",
                "geometrycollection",
            ];
            let generated = t.ends_with(GENERATED).then_some(Generation::Stored);
            let ty = if t.starts_with("bit") {
                ColumnType::Bit
            } else if t == "enum" || t.starts_with("enum ") {
                ColumnType::Enum
            } else if t == "set" || t.starts_with("set ") {
                ColumnType::Set
            } else if t.contains("blob")
                || t.contains("binary")
                || geometry.iter().any(|g| t.starts_with(g))
            {
                ColumnType::Blob
            } else {
                ColumnType::Text
            };
            ColumnDef {
                name: name.clone(),
                ty,
                sql_type: t,
                unsigned: false,
                nullable: true,
                charset: None,
                collation: None,
                elements: Vec::new(),
                decimals: 0,
                length: 0,
                generated,
            }
        })
        .collect();
    let key_columns = keys
        .iter()
        .filter_map(|k| columns.iter().position(|(n, _)| n == k))
        .collect();
    TableSchema {
        table_id: id,
        database: table.0.clone(),
        name: table.1.clone(),
        columns: cols,
        key_columns,
        unique_keys: Vec::new(),
        version: 0,
        partitioning: None,
    }
}

/// A table's schema as one message shows it: (db, table), its columns with their MySQL
/// types, its key columns.
type SchemaKey = ((String, String), Vec<(String, String)>, Vec<String>);
/// Rows of a segment per table, in runs of one schema each (in order: an Avro tombstone has
/// the key's columns only, so a table's runs alternate, and their order is kept).
type Segment = BTreeMap<(String, String), Vec<(Arc<TableSchema>, Vec<RowEvent>)>>;

/// What is applied, in order.
enum Item {
    Ddl(Box<DdlEvent>),
    Rows(Arc<TableSchema>, Vec<RowEvent>),
}

/// A decoded row with its place: (commit ts, topic, partition, offset).
struct Placed {
    at: (Ts, u32, i32, i64),
    table: (String, String),
    schema: Arc<TableSchema>,
    row: DecodedRow,
}

/// Decodes every message and puts rows and DDLs in their order (see the module docs).
fn order(
    cfg: &KafkaConfig,
    raws: Vec<Raw>,
    avro: &super::consume_avro::Schemas,
    report: &mut ConsumeReport,
) -> Result<Vec<Item>> {
    let mut ddls: BTreeMap<(Ts, String), DdlEvent> = BTreeMap::new();
    let mut rows: Vec<Placed> = Vec::new();
    let mut schemas: BTreeMap<SchemaKey, Arc<TableSchema>> = BTreeMap::new();
    let mut ids: BTreeMap<(String, String), TableId> = BTreeMap::new();
    let mut marks: BTreeMap<(u32, i32), Ts> = BTreeMap::new();
    let partitions: BTreeSet<(u32, i32)> = raws.iter().map(|r| (r.topic, r.partition)).collect();
    let mut simple = SimpleSchemas::new();
    for raw in &raws {
        let events = decode(cfg, raw, &mut simple, avro).map_err(|e| SinkError::Layout {
            path: format!(
                "{} (topic #{}) {}@{}",
                cfg.topic, raw.topic, raw.partition, raw.offset
            ),
            reason: e.to_string(),
        })?;
        for ev in events {
            match ev {
                Event::Watermark(ts) => {
                    let m = marks.entry((raw.topic, raw.partition)).or_default();
                    *m = (*m).max(ts);
                }
                Event::Ddl {
                    database,
                    query,
                    commit_ts,
                    kind,
                } => {
                    ddls.entry((commit_ts, query.clone()))
                        .or_insert_with(|| ddl_event(database, query, commit_ts, kind));
                }
                Event::Row {
                    table,
                    columns,
                    keys,
                    row,
                } => {
                    report.rows_read += 1;
                    let n = ids.len() as u64 + 1;
                    let id = *ids.entry(table.clone()).or_insert(TableId(n));
                    // Each column set of a table is a version of its own (the sink keys its
                    // statements by table and version).
                    let version = schemas.len() as Ts + 1;
                    let schema = schemas
                        .entry((table.clone(), columns.clone(), keys.clone()))
                        .or_insert_with(|| {
                            let mut s = build_schema(id, &table, &columns, &keys);
                            s.version = version;
                            Arc::new(s)
                        })
                        .clone();
                    let ts = row.commit_ts.unwrap_or_default();
                    rows.push(Placed {
                        at: (ts, raw.topic, raw.partition, raw.offset),
                        table,
                        schema,
                        row,
                    });
                }
            }
        }
    }
    report.data_files = partitions.len();
    report.checkpoint_ts = (marks.len() == partitions.len() && !marks.is_empty())
        .then(|| marks.values().copied().min().unwrap_or_default());
    rows.sort_by_key(|p| p.at);
    Ok(interleave(ddls, rows))
}

fn ddl_event(database: String, query: String, commit_ts: Ts, kind: DdlKind) -> DdlEvent {
    DdlEvent {
        session: None,
        object_database: None,
        commit_ts,
        commit_time_ms: 0,
        kind,
        database,
        query,
        influence: DdlInfluence::scoped(InfluenceScope::All, true),
    }
}

/// Rows between two DDLs form a segment, applied per table in order.
fn interleave(ddls: BTreeMap<(Ts, String), DdlEvent>, rows: Vec<Placed>) -> Vec<Item> {
    let mut items = Vec::new();
    let mut ddls = ddls.into_values().peekable();
    let mut segment: Segment = BTreeMap::new();
    let flush = |segment: &mut Segment, items: &mut Vec<Item>| {
        for (_, runs) in std::mem::take(segment) {
            items.extend(
                runs.into_iter()
                    .map(|(schema, rows)| Item::Rows(schema, rows)),
            );
        }
    };
    for p in rows {
        while let Some(d) = ddls.next_if(|d| d.commit_ts <= p.at.0) {
            flush(&mut segment, &mut items);
            items.push(Item::Ddl(Box::new(d)));
        }
        // One batch per run of a table's rows with one column set (a replayed row of an older
        // version keeps its own columns).
        let ev = p.row.into_event(&p.schema, p.at.0);
        let runs = segment.entry(p.table).or_default();
        match runs.last_mut() {
            Some((schema, rows)) if Arc::ptr_eq(schema, &p.schema) => rows.push(ev),
            _ => runs.push((p.schema.clone(), vec![ev])),
        }
    }
    flush(&mut segment, &mut items);
    items.extend(ddls.map(|d| Item::Ddl(Box::new(d))));
    items
}

async fn apply(sink: &MysqlSink, items: Vec<Item>, report: &mut ConsumeReport) -> Result<()> {
    for (seq, item) in items.into_iter().enumerate() {
        let d = crate::consume::consume_dispatcher(seq);
        match item {
            Item::Ddl(ddl) => {
                crate::consume::apply_ddl(sink, d, *ddl).await?;
                report.ddls_applied += 1;
            }
            Item::Rows(schema, rows) => {
                report.rows_applied += apply_rows(sink, d, schema, rows).await?
            }
        }
    }
    Ok(())
}

/// Applies one table's rows of a segment through dispatcher `d`; returns how many.
async fn apply_rows(
    sink: &MysqlSink,
    d: DispatcherId,
    schema: Arc<TableSchema>,
    mut rows: Vec<RowEvent>,
) -> Result<usize> {
    let Some(first) = rows.first().map(|r| r.commit_ts) else {
        return Ok(0);
    };
    name_members(sink, &schema, &mut rows).await?;
    // Copies a replay added share their original's commit ts: one transaction each keeps the
    // sink's order check (strictly after the previous write) satisfied.
    let mut next = first.saturating_sub(1);
    for r in &mut rows {
        next = next.max(r.commit_ts.saturating_sub(1)) + 1;
        r.commit_ts = next;
    }
    let n = rows.len();
    sink.open(
        d,
        Span::whole_table(schema.table_id),
        first.saturating_sub(1),
    )
    .await?;
    sink.write_rows(d, RowBatch { schema, rows }).await?;
    sink.flush(d).await?;
    match sink.close(d).await.error {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

/// The members of an ENUM or SET column type text (`enum('a','it''s')` → `a`, `it's`).
fn members(column_type: &str) -> Vec<String> {
    let Some(inner) = column_type
        .find('(')
        .and_then(|i| column_type.get(i + 1..column_type.len().saturating_sub(1)))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('\'', true) if chars.peek() == Some(&'\'') => {
                cur.push('\'');
                chars.next();
            }
            ('\'', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, true) => cur.push(c),
            _ => {}
        }
    }
    out.push(cur);
    out
}

/// ENUM indexes and SET bit masks (the Open Protocol's values) as their member names, read from
/// the downstream's definition of the table as it is now (every earlier DDL applied): a
/// downstream write of a number into an ENUM would be taken as a name by `LOAD DATA`.
async fn name_members(sink: &MysqlSink, schema: &TableSchema, rows: &mut [RowEvent]) -> Result<()> {
    use mysql_async::prelude::Queryable;
    let cols: Vec<usize> = (0..schema.columns.len())
        .filter(|i| matches!(schema.columns[*i].ty, ColumnType::Enum | ColumnType::Set))
        .collect();
    if cols.is_empty() {
        return Ok(());
    }
    let mut conn = sink
        .pool()
        .get_conn()
        .await
        .map_err(|e| SinkError::db("connect", e))?;
    let types: Vec<(String, String)> = conn
        .exec("SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", (&schema.database, &schema.name))
        .await
        .map_err(|e| SinkError::db(format!("read the columns of {}", schema.qualified_name()), e))?;
    for i in cols {
        let col = &schema.columns[i];
        let names = types
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(&col.name))
            .map(|(_, t)| members(t))
            .unwrap_or_default();
        let named = |v: &mut Value| {
            let Value::UInt(n) = *v else { return };
            *v = Value::Text(match col.ty {
                ColumnType::Enum => names
                    .get((n as usize).wrapping_sub(1))
                    .cloned()
                    .unwrap_or_default(),
                _ => names
                    .iter()
                    .enumerate()
                    .filter(|(b, _)| *b < 64 && n & (1 << b) != 0)
                    .map(|(_, m)| m.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            });
        };
        for r in rows.iter_mut() {
            for img in [r.before.as_mut(), r.after.as_mut()].into_iter().flatten() {
                if let Some(v) = img.get_mut(i) {
                    named(v);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::members;

    #[test]
    fn members_of_enum_and_set_types() {
        assert_eq!(members("enum('a','b','c')"), ["a", "b", "c"]);
        assert_eq!(members("set('x','it''s','a,b')"), ["x", "it's", "a,b"]);
        assert_eq!(members("enum('')"), [""]);
    }
}
