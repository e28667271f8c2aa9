//! `sluice consume --storage URI --downstream mysql://…`: reads a storage sink's layout (csv or
//! canal-json, TiCDC's paths) and applies it, in commit order, to a MySQL-compatible downstream
//! through the MySQL sink (safe mode), so `sluice check` can compare the result with the upstream.
//!
//! Invariants:
//! - only names the storage sink writes are read: temporary files (`…#n`, `….tmp.…`), index files
//!   and unknown names are ignored (counted in the report); data files are found by listing, so an
//!   index pointing past the data changes nothing;
//! - rows are applied in (commit ts, file order, line) order, DDLs (schema files with a query) at
//!   their commit ts before any row above it; files duplicated by a replay repeat whole
//!   transactions, which sort right after their originals and are no-ops in safe mode; DDLs are recorded in the downstream's `ddl_ts`, so running consume twice is harmless;
//! - the number of rows held in memory is bounded by [`MAX_ROWS`].

use crate::codec::{self, DecodedRow};
use crate::error::{Result, SinkError};
use crate::mysql::MysqlSink;
use crate::storage::build_store;
use crate::storage::layout::{self, TableDefinition};
use crate::uri::{Protocol, SinkConfig, SinkUri, StorageConfig};
use crate::{RowBatch, Sink};
use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use sluice_types::*;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The changefeed id consume records its DDLs under in the downstream's `ddl_ts`.
pub const CONSUME_CHANGEFEED: &str = "sluice-consume";
/// The most rows one run holds in memory.
pub const MAX_ROWS: usize = 20_000_000;

#[derive(Clone, Debug)]
pub struct ConsumeArgs {
    /// A storage sink URI (`file://…` or `s3://…`, with the protocol and csv options it was written with).
    pub storage: String,
    /// A MySQL sink URI for the downstream (`safe-mode` is forced on).
    pub downstream: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumeReport {
    pub data_files: usize,
    pub schema_files: usize,
    pub ignored_files: Vec<String>,
    pub rows_read: usize,
    pub rows_applied: usize,
    pub ddls_applied: usize,
    /// The root `metadata` checkpoint, if present.
    pub checkpoint_ts: Option<Ts>,
}

impl std::fmt::Display for ConsumeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "consumed {} data files, {} schema files; {} rows read, {} rows applied, {} DDLs; {} files ignored; checkpoint {:?}",
            self.data_files,
            self.schema_files,
            self.rows_read,
            self.rows_applied,
            self.ddls_applied,
            self.ignored_files.len(),
            self.checkpoint_ts
        )
    }
}

/// A schema built from a TiCDC definition without Sluice's full schema: every column is text,
/// binary-looking types are bytes.
fn schema_from_definition(def: &TableDefinition, table_id: TableId) -> TableSchema {
    let columns = def
        .columns
        .iter()
        .map(|c| {
            let up = c.ty.to_ascii_uppercase();
            let ty = if up.contains("BLOB") || up.contains("BINARY") {
                ColumnType::Blob
            } else if up.starts_with("BIT") {
                ColumnType::Bit
            } else {
                ColumnType::Text
            };
            ColumnDef {
                name: c.name.clone(),
                ty,
                sql_type: c.ty.to_ascii_lowercase(),
                unsigned: false,
                nullable: c.nullable.as_deref() != Some("false"),
                charset: None,
                collation: None,
                elements: Vec::new(),
                decimals: 0,
                length: 0,
            }
        })
        .collect();
    let key_columns = def
        .columns
        .iter()
        .enumerate()
        .filter(|(_, c)| c.is_pk.as_deref() == Some("true"))
        .map(|(i, _)| i)
        .collect();
    TableSchema {
        table_id,
        database: def.schema.clone(),
        name: def.table.clone(),
        columns,
        key_columns,
        unique_keys: Vec::new(),
        version: def.table_version,
        partitioning: None,
    }
}

fn parse_kind(s: &str) -> DdlKind {
    match s {
        "CreateDatabase" => DdlKind::CreateDatabase,
        "DropDatabase" => DdlKind::DropDatabase,
        "CreateTable" => DdlKind::CreateTable,
        "DropTable" => DdlKind::DropTable,
        "TruncateTable" => DdlKind::TruncateTable,
        "RenameTable" => DdlKind::RenameTable,
        "AlterTable" => DdlKind::AlterTable,
        "CreateView" => DdlKind::CreateView,
        "DropView" => DdlKind::DropView,
        _ => DdlKind::Other,
    }
}

enum Item {
    Ddl(DdlEvent),
    Rows {
        schema: Arc<TableSchema>,
        rows: Vec<RowEvent>,
    },
}

async fn read_all(store: &Arc<dyn ObjectStore>, path: &str) -> Result<Vec<u8>> {
    let p = object_store::path::Path::from(path);
    let r = store
        .get(&p)
        .await
        .map_err(|e| SinkError::store("get", path, e))?;
    Ok(r.bytes()
        .await
        .map_err(|e| SinkError::store("get", path, e))?
        .to_vec())
}

/// Reads the layout and applies it. Returns what was done.
pub async fn run(args: &ConsumeArgs) -> Result<ConsumeReport> {
    let SinkConfig::Storage(cfg) = SinkUri::parse(&args.storage)?.config else {
        return Err(SinkError::invalid_uri(
            &crate::uri::mask_uri(&args.storage),
            "--storage must be a file:// or s3:// URI",
        ));
    };
    let SinkConfig::Mysql(mut down) = SinkUri::parse(&args.downstream)?.config else {
        return Err(SinkError::invalid_uri(
            &crate::uri::mask_uri(&args.downstream),
            "--downstream must be a mysql:// URI",
        ));
    };
    down.safe_mode = true;
    let store = build_store(&cfg)?;
    let mut report = ConsumeReport::default();
    let items = read_layout(&store, &cfg, &mut report).await?;
    let sink = MysqlSink::connect_for(CONSUME_CHANGEFEED, down).await?;
    for (seq, item) in items.into_iter().enumerate() {
        let d = DispatcherId {
            epoch: u64::MAX,
            seq: seq as u64,
        };
        match item {
            Item::Ddl(ddl) => {
                let ts = ddl.commit_ts;
                sink.open(d, Span::whole_table(TableId(0)), ts.saturating_sub(1))
                    .await?;
                sink.write_ddl(d, ddl, Vec::new()).await?;
                sink.close(d).await;
                report.ddls_applied += 1;
            }
            Item::Rows { schema, rows } => {
                let Some(first) = rows.first().map(|r| r.commit_ts) else {
                    continue;
                };
                report.rows_applied += rows.len();
                sink.open(
                    d,
                    Span::whole_table(schema.table_id),
                    first.saturating_sub(1),
                )
                .await?;
                sink.write_rows(d, RowBatch { schema, rows }).await?;
                sink.flush(d).await?;
                let r = sink.close(d).await;
                if let Some(e) = r.error {
                    return Err(e);
                }
            }
        }
    }
    Ok(report)
}

/// A row with its order key: (commit ts, file order, line).
struct Placed {
    ts: Ts,
    /// (date, partition, dispatcher, index).
    file: (String, Option<u32>, Option<String>, u64),
    line: usize,
    row: DecodedRow,
    table: (String, String, Ts),
}

async fn read_layout(
    store: &Arc<dyn ObjectStore>,
    cfg: &StorageConfig,
    report: &mut ConsumeReport,
) -> Result<Vec<Item>> {
    let mut paths: Vec<String> = store
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .map_err(|e| SinkError::store("list", "/", e))?;
    paths.sort();
    let ext = cfg.protocol.extension();
    // (db, table, version) -> schema; table ids are assigned per (db, table) in name order.
    let mut schemas: BTreeMap<(String, String, Ts), Arc<TableSchema>> = BTreeMap::new();
    let mut ddls: BTreeMap<(Ts, String), DdlEvent> = BTreeMap::new();
    let mut table_ids: BTreeMap<(String, String), TableId> = BTreeMap::new();
    type Dirs = (Option<u32>, Option<String>);
    let mut data: Vec<(String, String, String, Ts, Dirs, layout::DataName)> = Vec::new();
    for p in &paths {
        let parts: Vec<&str> = p.split('/').collect();
        let name = parts.last().copied().unwrap_or_default();
        if p == layout::METADATA {
            let b = read_all(store, p).await?;
            let v: serde_json::Value =
                serde_json::from_slice(&b).map_err(|e| SinkError::Layout {
                    path: p.clone(),
                    reason: e.to_string(),
                })?;
            report.checkpoint_ts = v.get("checkpoint-ts").and_then(|t| t.as_u64());
            continue;
        }
        let is_meta = parts.len() >= 2 && parts[parts.len() - 2] == "meta";
        if is_meta
            && (parts.len() == 3 || parts.len() == 4)
            && layout::parse_schema_name(name).is_some()
        {
            report.schema_files += 1;
            let b = read_all(store, p).await?;
            let def: TableDefinition =
                serde_json::from_slice(&b).map_err(|e| SinkError::Layout {
                    path: p.clone(),
                    reason: e.to_string(),
                })?;
            if !def.query.is_empty() {
                ddls.entry((def.table_version, def.query.clone()))
                    .or_insert_with(|| DdlEvent {
                        commit_ts: def.table_version,
                        commit_time_ms: 0,
                        kind: parse_kind(&def.kind),
                        database: def.schema.clone(),
                        query: def.query.clone(),
                        influence: DdlInfluence {
                            scope: InfluenceScope::All,
                            trigger: true,
                            dropped: vec![],
                            added: vec![],
                            renamed: vec![],
                        },
                    });
            }
            if !def.table.is_empty() {
                let n = table_ids.len() as u64 + 1;
                let id = *table_ids
                    .entry((def.schema.clone(), def.table.clone()))
                    .or_insert(TableId(n));
                let mut schema = def
                    .sluice_schema
                    .clone()
                    .unwrap_or_else(|| schema_from_definition(&def, id));
                schema.table_id = id;
                schema.version = def.table_version;
                schemas.insert(
                    (def.schema.clone(), def.table.clone(), def.table_version),
                    Arc::new(schema),
                );
            }
            continue;
        }
        match layout::parse_data_name(name) {
            Some(dn) if dn.ext == ext && (4..=6).contains(&parts.len()) => {
                let version: Ts = parts[2].parse().map_err(|_| SinkError::Layout {
                    path: p.clone(),
                    reason: "version directory is not a number".into(),
                })?;
                // <ver>[/<partition>][/<date>]: one directory between the version and the
                // name is a date when it has the configured separator's shape, else a partition.
                let dirs = &parts[3..parts.len() - 1];
                let (partition, date) = match dirs {
                    [] => (None, None),
                    [d] if layout::is_date_dir(cfg.date_separator, d) => (None, Some(d.to_string())),
                    [p] => (Some(*p), None),
                    [p, d] => (Some(*p), Some(d.to_string())),
                    _ => (None, None),
                };
                let partition = match partition {
                    None => None,
                    Some(p) => Some(p.parse::<u32>().map_err(|_| SinkError::Layout {
                        path: parts.join("/"),
                        reason: format!(
                            "directory {p:?} is neither a partition number nor a date of the \
                             configured date-separator; pass the parameters the layout was written with"
                        ),
                    })?),
                };
                data.push((
                    p.clone(),
                    parts[0].to_string(),
                    parts[1].to_string(),
                    version,
                    (partition, date),
                    dn,
                ));
            }
            _ => report.ignored_files.push(p.clone()),
        }
    }
    let mut placed: Vec<Placed> = Vec::new();
    for (path, db, table, version, (partition, date), dn) in data {
        let key = (db.clone(), table.clone(), version);
        let schema = schemas.get(&key).ok_or_else(|| SinkError::Layout {
            path: path.clone(),
            reason: format!("no schema file for {db}.{table} version {version}"),
        })?;
        let bytes = read_all(store, &path).await?;
        let text = String::from_utf8(bytes).map_err(|_| SinkError::Layout {
            path: path.clone(),
            reason: "not UTF-8".into(),
        })?;
        let rows = match cfg.protocol {
            Protocol::Csv => codec::csv::decode_file(&text, &cfg.csv, schema),
            Protocol::CanalJson => codec::canal::decode_file(&text, schema),
        }
        .map_err(|e| SinkError::Layout {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        report.data_files += 1;
        report.rows_read += rows.len();
        if report.rows_read > MAX_ROWS {
            return Err(SinkError::Layout {
                path,
                reason: format!("more than {MAX_ROWS} rows: consume in parts"),
            });
        }
        for (line, row) in rows.into_iter().enumerate() {
            placed.push(Placed {
                ts: row.commit_ts.unwrap_or(version),
                file: (
                    date.clone().unwrap_or_default(),
                    partition,
                    dn.dispatcher.clone(),
                    dn.index,
                ),
                line,
                row,
                table: key.clone(),
            });
        }
    }
    placed.sort_by(|a, b| (a.ts, &a.file, a.line).cmp(&(b.ts, &b.file, b.line)));
    // Rows between two DDLs form a segment, applied per table version in order. A replayed file
    // repeats whole transactions; sorted by commit ts, each repeat follows its original and is a
    // no-op in safe mode.
    let mut items: Vec<Item> = Vec::new();
    let mut ddl_iter = ddls.into_values().peekable();
    let mut segment: BTreeMap<(String, String, Ts), Vec<RowEvent>> = BTreeMap::new();
    let flush_segment = |segment: &mut BTreeMap<(String, String, Ts), Vec<RowEvent>>,
                         items: &mut Vec<Item>|
     -> Result<()> {
        for (key, rows) in std::mem::take(segment) {
            let schema = schemas
                .get(&key)
                .cloned()
                .ok_or_else(|| SinkError::Layout {
                    path: key.0.clone(),
                    reason: "schema vanished".into(),
                })?;
            items.push(Item::Rows { schema, rows });
        }
        Ok(())
    };
    for p in placed {
        while ddl_iter.peek().is_some_and(|d| d.commit_ts <= p.ts) {
            if let Some(d) = ddl_iter.next() {
                flush_segment(&mut segment, &mut items)?;
                items.push(Item::Ddl(d));
            }
        }
        let schema = schemas.get(&p.table).ok_or_else(|| SinkError::Layout {
            path: p.table.0.clone(),
            reason: "schema vanished".into(),
        })?;
        let ev = p.row.into_event(schema, p.ts);
        segment.entry(p.table).or_default().push(ev);
    }
    flush_segment(&mut segment, &mut items)?;
    items.extend(ddl_iter.map(Item::Ddl));
    Ok(items)
}
