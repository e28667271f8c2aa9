//! `sluice consume --storage URI --downstream mysql://…`: reads a storage sink's layout (csv or
//! canal-json, TiCDC's paths) and applies it, in commit order, to a MySQL-compatible downstream
//! through the MySQL sink (safe mode), so `sluice check` can compare the result with the upstream.
//!
//! Invariants:
//! - only names the storage sink writes are read: temporary files (`…#n`, `….tmp.…`), index files
//!   and unknown names are ignored (counted in the report); data files are found by listing, so an
//!   index pointing past the data changes nothing;
//! - rows are applied in (commit ts, file order, line) order when they carry their commit ts
//!   (`include-commit-ts`, `enable-tidb-extension`); without it, a row stands at its table
//!   version's commit ts, and the rows of one table version in (date, partition, dispatcher id,
//!   file index, line) order: a dispatcher writes in commit order, its successor has a greater id
//!   (or, without ids, continues the file index), and every key lives in one span at a time;
//! - DDLs (schema files with a query) are applied at their commit ts, before any row of a later
//!   table version and after every row of an earlier one, across all tables;
//! - a layout whose order cannot be known without commit ts (one table version written both by a
//!   whole-table dispatcher and by dispatchers of split spans; rows of a table an `EXCHANGE
//!   PARTITION` changed without a new table version) is refused, naming the parameter to set;
//!   nothing is applied;
//! - files duplicated by a replay repeat a suffix of a dispatcher's writes, which sorts after the
//!   original and is a no-op in safe mode; DDLs are recorded in the downstream's `ddl_ts`, so
//!   running consume twice is harmless;
//! - **a superseded writer's rows are not applied**: when the layout holds claims (a cluster's
//!   sinks write them, [`layout::Claim`]), a row with commit ts `t` in a file of dispatcher `D`
//!   is ignored (counted in the report) if a later dispatcher claimed a span overlapping `D`'s
//!   from a start ts below `t`: that one replays it, and a paused node's file that landed after
//!   its successor took over is not applied. Rows without their commit ts cannot be told apart;
//!   they keep their place in file order, before the successor's files;
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
    /// Rows of a dispatcher above the start ts of a later one that claimed an overlapping span.
    pub rows_superseded: usize,
    pub ddls_applied: usize,
    /// The root `metadata` checkpoint, if present.
    pub checkpoint_ts: Option<Ts>,
}

impl std::fmt::Display for ConsumeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "consumed {} data files, {} schema files; {} rows read, {} rows applied, {} rows of superseded writers ignored, {} DDLs; {} files ignored; checkpoint {}",
            self.data_files,
            self.schema_files,
            self.rows_read,
            self.rows_applied,
            self.rows_superseded,
            self.ddls_applied,
            self.ignored_files.len(),
            match self.checkpoint_ts {
                Some(ts) => ts.to_string(),
                None => "none".to_string(),
            }
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
                sql_type: crate::storage::layout::type_case(&c.ty, false),
                unsigned: false,
                nullable: c.nullable.as_deref() != Some("false"),
                charset: None,
                collation: None,
                elements: Vec::new(),
                decimals: 0,
                length: 0,
                // Any flag means generated: such a column is never written.
                generated: c.generated.as_deref().map(|g| {
                    if g.eq_ignore_ascii_case("VIRTUAL") {
                        Generation::Virtual
                    } else {
                        Generation::Stored
                    }
                }),
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
        "AlterDatabase" => DdlKind::AlterDatabase,
        _ => DdlKind::Other,
    }
}

enum Item {
    Ddl(Box<DdlEvent>),
    Rows {
        schema: Arc<TableSchema>,
        rows: Vec<RowEvent>,
        /// The rows carry no commit ts of their own: they stand at their table version's.
        synthetic_ts: bool,
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
    // One process applies the layout in order, with dispatcher ids that start again each run:
    // there is no successor to fence against.
    down.downstream_fence = false;
    let store = build_store(&cfg)?;
    let mut report = ConsumeReport::default();
    let items = read_layout(&store, &cfg, &mut report).await?;
    let sink = MysqlSink::connect_for(CONSUME_CHANGEFEED, down).await?;
    for (seq, item) in items.into_iter().enumerate() {
        let d = consume_dispatcher(seq);
        match item {
            Item::Ddl(ddl) => {
                apply_ddl(&sink, d, *ddl).await?;
                report.ddls_applied += 1;
            }
            Item::Rows {
                schema,
                rows,
                synthetic_ts,
            } => report.rows_applied += apply_rows(&sink, d, schema, rows, synthetic_ts).await?,
        }
    }
    Ok(report)
}

/// The dispatcher id of consume's `seq`-th item (a fresh one each: consume's writes have no
/// successor to fence against).
pub(crate) fn consume_dispatcher(seq: usize) -> DispatcherId {
    DispatcherId {
        epoch: u64::MAX,
        seq: seq as u64,
    }
}

/// Applies one DDL through dispatcher `d` (recorded in the downstream's `ddl_ts`).
pub(crate) async fn apply_ddl(sink: &MysqlSink, d: DispatcherId, ddl: DdlEvent) -> Result<()> {
    let ts = ddl.commit_ts;
    sink.open(d, Span::whole_table(TableId(0)), ts.saturating_sub(1))
        .await?;
    sink.write_ddl(d, ddl, Vec::new()).await?;
    sink.close(d).await;
    Ok(())
}

/// Applies one table version's rows through dispatcher `d`; returns how many.
async fn apply_rows(
    sink: &MysqlSink,
    d: DispatcherId,
    schema: Arc<TableSchema>,
    mut rows: Vec<RowEvent>,
    synthetic_ts: bool,
) -> Result<usize> {
    let Some(first) = rows.first().map(|r| r.commit_ts) else {
        return Ok(0);
    };
    let start = if synthetic_ts {
        // Rows without commit ts (a table version from the snapshot stands at 0): each its own
        // transaction, numbered in order after 0.
        for (i, r) in rows.iter_mut().enumerate() {
            r.commit_ts = i as Ts + 1;
        }
        0
    } else {
        first.saturating_sub(1)
    };
    let n = rows.len();
    sink.open(d, Span::whole_table(schema.table_id), start)
        .await?;
    sink.write_rows(d, RowBatch { schema, rows }).await?;
    sink.flush(d).await?;
    match sink.close(d).await.error {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

/// A table version: (database, table, commit ts of the version).
type VersionKey = (String, String, Ts);
/// A data file's place among the files of its table version: (date, partition, dispatcher id,
/// file index).
type FileOrder = (String, Option<u32>, Option<String>, u64);

struct DataFile {
    path: String,
    version: VersionKey,
    order: FileOrder,
}

/// A DDL that changed a table without making a new version of it: the table's rows from before
/// and after it share one version directory.
struct InPlaceDdl {
    version: VersionKey,
    ts: Ts,
    query: String,
}

/// What the listing holds.
#[derive(Default)]
struct Scan {
    schemas: BTreeMap<VersionKey, Arc<TableSchema>>,
    ddls: BTreeMap<(Ts, String), DdlEvent>,
    /// Table ids, assigned per (db, table) in name order.
    table_ids: BTreeMap<(String, String), TableId>,
    in_place: Vec<InPlaceDdl>,
    data: Vec<DataFile>,
    /// Claims per table directory `(db, table)`.
    claims: BTreeMap<(String, String), Vec<layout::Claim>>,
}

impl Scan {
    /// The least start ts of a later dispatcher whose claimed span overlaps that of the
    /// dispatcher that wrote `file` (which must have claimed its own): its rows above it are
    /// the later one's to write.
    fn superseded_above(&self, file: &DataFile) -> Option<Ts> {
        let writer = file.order.2.as_deref()?;
        let claims = self
            .claims
            .get(&(file.version.0.clone(), file.version.1.clone()))?;
        let own = claims.iter().find(|c| c.dispatcher == writer)?.span()?;
        claims
            .iter()
            // Ids are fixed-width hex of (epoch, sequence): text order is id order.
            .filter(|c| c.dispatcher.as_str() > writer)
            .filter(|c| c.span().is_some_and(|s| s.overlaps(&own)))
            .map(|c| c.start_ts)
            .min()
    }

    fn add_definition(&mut self, def: TableDefinition) {
        if !def.query.is_empty() {
            self.ddls
                .entry((def.table_version, def.query.clone()))
                .or_insert_with(|| ddl_event(&def));
        }
        if def.table.is_empty() {
            return;
        }
        if let Some(s) = &def.sluice_schema {
            if !def.query.is_empty() && s.version < def.table_version {
                self.in_place.push(InPlaceDdl {
                    version: (def.schema.clone(), def.table.clone(), s.version),
                    ts: def.table_version,
                    query: def.query.clone(),
                });
            }
        }
        let n = self.table_ids.len() as u64 + 1;
        let id = *self
            .table_ids
            .entry((def.schema.clone(), def.table.clone()))
            .or_insert(TableId(n));
        let mut schema = def
            .sluice_schema
            .clone()
            .unwrap_or_else(|| schema_from_definition(&def, id));
        schema.table_id = id;
        schema.version = def.table_version;
        self.schemas
            .insert((def.schema, def.table, def.table_version), Arc::new(schema));
    }
}

fn ddl_event(def: &TableDefinition) -> DdlEvent {
    DdlEvent {
        session: Default::default(),
        object_database: None,
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
            sources: vec![],
        },
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(path: &str, b: &[u8]) -> Result<T> {
    serde_json::from_slice(b).map_err(|e| SinkError::Layout {
        path: path.to_string(),
        reason: e.to_string(),
    })
}

/// Lists the layout and reads its metadata and schema files; data files are only named.
async fn scan_layout(
    store: &Arc<dyn ObjectStore>,
    cfg: &StorageConfig,
    report: &mut ConsumeReport,
) -> Result<Scan> {
    let mut paths: Vec<String> = store
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .map_err(|e| SinkError::store("list", "/", e))?;
    paths.sort();
    let mut scan = Scan::default();
    for p in paths {
        let parts: Vec<&str> = p.split('/').collect();
        let name = parts.last().copied().unwrap_or_default();
        if p == layout::METADATA {
            let v: serde_json::Value = parse_json(&p, &read_all(store, &p).await?)?;
            report.checkpoint_ts = v.get("checkpoint-ts").and_then(|t| t.as_u64());
            continue;
        }
        // `<db>/<table>/meta/…`, `<db>/meta/…`, and `meta/…` (a DDL that names no table version,
        // run in a session without a default database).
        let is_meta = parts.len() >= 2 && parts[parts.len() - 2] == "meta";
        if is_meta && parts.len() <= 4 && layout::parse_schema_name(name).is_some() {
            report.schema_files += 1;
            scan.add_definition(parse_json(&p, &read_all(store, &p).await?)?);
            continue;
        }
        if is_meta && parts.len() == 4 && layout::parse_claim_name(name).is_some() {
            let claim: layout::Claim = parse_json(&p, &read_all(store, &p).await?)?;
            let table = (parts[0].to_string(), parts[1].to_string());
            scan.claims.entry(table).or_default().push(claim);
            continue;
        }
        match layout::parse_data_name(name) {
            Some(dn) if dn.ext == cfg.protocol.extension() && (4..=6).contains(&parts.len()) => {
                let file = data_file(cfg, &parts, dn)?;
                scan.data.push(file);
            }
            _ => report.ignored_files.push(p.clone()),
        }
    }
    Ok(scan)
}

/// Places a data file `<db>/<table>/<ver>[/<partition>][/<date>]/<name>` in its table version.
fn data_file(cfg: &StorageConfig, parts: &[&str], dn: layout::DataName) -> Result<DataFile> {
    let path = parts.join("/");
    let version: Ts = parts[2].parse().map_err(|_| SinkError::Layout {
        path: path.clone(),
        reason: "version directory is not a number".into(),
    })?;
    // One directory between the version and the name is a date when it has the configured
    // separator's shape, else a partition.
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
            path: path.clone(),
            reason: format!(
                "directory {p:?} is neither a partition number nor a date of the configured \
                 date-separator; pass the parameters the layout was written with"
            ),
        })?),
    };
    Ok(DataFile {
        path,
        version: (parts[0].to_string(), parts[1].to_string(), version),
        order: (date.unwrap_or_default(), partition, dn.dispatcher, dn.index),
    })
}

/// A row with its order key: (commit ts, file order, line).
struct Placed {
    ts: Ts,
    order: FileOrder,
    line: usize,
    row: DecodedRow,
    version: VersionKey,
}

/// Reads and decodes every data file of `scan`.
async fn decode_all(
    store: &Arc<dyn ObjectStore>,
    cfg: &StorageConfig,
    scan: &mut Scan,
    report: &mut ConsumeReport,
) -> Result<Vec<Placed>> {
    let mut placed: Vec<Placed> = Vec::new();
    for file in std::mem::take(&mut scan.data) {
        let (db, table, version) = &file.version;
        let schema = scan
            .schemas
            .get(&file.version)
            .ok_or_else(|| SinkError::Layout {
                path: file.path.clone(),
                reason: format!("no schema file for {db}.{table} version {version}"),
            })?;
        let bytes = read_all(store, &file.path).await?;
        let text = String::from_utf8(bytes).map_err(|_| SinkError::Layout {
            path: file.path.clone(),
            reason: "not UTF-8".into(),
        })?;
        let rows = match cfg.protocol {
            Protocol::Csv => codec::csv::decode_file(&text, &cfg.csv, schema),
            Protocol::CanalJson => codec::canal::decode_file(&text, schema),
        }
        .map_err(|e| SinkError::Layout {
            path: file.path.clone(),
            reason: e.to_string(),
        })?;
        report.data_files += 1;
        report.rows_read += rows.len();
        let superseded_above = scan.superseded_above(&file);
        if report.rows_read > MAX_ROWS {
            return Err(SinkError::Layout {
                path: file.path,
                reason: format!("more than {MAX_ROWS} rows: consume in parts"),
            });
        }
        for (line, row) in rows.into_iter().enumerate() {
            if let (Some(limit), Some(ts)) = (superseded_above, row.commit_ts) {
                if ts > limit {
                    report.rows_superseded += 1;
                    continue;
                }
            }
            placed.push(Placed {
                ts: row.commit_ts.unwrap_or(*version),
                order: file.order.clone(),
                line,
                row,
                version: file.version.clone(),
            });
        }
    }
    Ok(placed)
}

/// The parameter that puts the commit ts into rows of `protocol`.
fn commit_ts_param(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Csv => "include-commit-ts=true",
        Protocol::CanalJson => "enable-tidb-extension=true",
    }
}

/// True for `ALTER TABLE … EXCHANGE PARTITION …`, which moves rows without row events.
fn is_exchange(query: &str) -> bool {
    let words: Vec<String> = query
        .split_whitespace()
        .map(|w| w.to_ascii_uppercase())
        .collect();
    words
        .windows(2)
        .any(|w| w[0] == "EXCHANGE" && w[1] == "PARTITION")
}

/// Refuses a layout whose rows cannot be ordered without their commit ts (see the module docs).
fn check_orderable(scan: &Scan, placed: &[Placed], protocol: Protocol) -> Result<()> {
    // Table versions with rows lacking commit ts: (files without, with dispatcher ids).
    let mut untimed: BTreeMap<&VersionKey, (bool, bool)> = BTreeMap::new();
    for p in placed.iter().filter(|p| p.row.commit_ts.is_none()) {
        let e = untimed.entry(&p.version).or_default();
        match p.order.2 {
            None => e.0 = true,
            Some(_) => e.1 = true,
        }
    }
    let param = commit_ts_param(protocol);
    let at = |(db, table, ver): &VersionKey| format!("{db}/{table}/{ver}");
    if let Some((v, _)) = untimed.iter().find(|(_, (plain, ids))| *plain && *ids) {
        return Err(SinkError::Layout {
            path: at(v),
            reason: format!(
                "the rows of {}.{} version {} carry no commit ts and were written both by a \
                 whole-table dispatcher (files CDC<index>) and by dispatchers of split spans \
                 (files CDC_<dispatcher>_<index>), so their order cannot be known; write the \
                 layout with {param}, or with enable-table-across-nodes=true (every file then \
                 names its dispatcher)",
                v.0, v.1, v.2
            ),
        });
    }
    for d in &scan.in_place {
        if is_exchange(&d.query) && untimed.contains_key(&d.version) {
            let (db, table, ver) = &d.version;
            return Err(SinkError::Layout {
                path: at(&d.version),
                reason: format!(
                    "the rows of {db}.{table} version {ver} carry no commit ts, so it cannot be \
                     known which of them came before `{}` (commit ts {}), which moves rows \
                     between tables without row events; write the layout with {param}",
                    d.query, d.ts
                ),
            });
        }
    }
    Ok(())
}

async fn read_layout(
    store: &Arc<dyn ObjectStore>,
    cfg: &StorageConfig,
    report: &mut ConsumeReport,
) -> Result<Vec<Item>> {
    let mut scan = scan_layout(store, cfg, report).await?;
    let mut placed = decode_all(store, cfg, &mut scan, report).await?;
    check_orderable(&scan, &placed, cfg.protocol)?;
    placed.sort_by(|a, b| (a.ts, &a.order, a.line).cmp(&(b.ts, &b.order, b.line)));
    interleave(scan, placed)
}

/// Rows of one table version inside a segment, and whether any lacks its commit ts.
type Segment = BTreeMap<VersionKey, (Vec<RowEvent>, bool)>;

/// Merges the sorted rows with the DDLs: rows between two DDLs form a segment, applied per table
/// version in order.
fn interleave(scan: Scan, placed: Vec<Placed>) -> Result<Vec<Item>> {
    let schemas = scan.schemas;
    let schema_of = |key: &VersionKey| {
        schemas.get(key).cloned().ok_or_else(|| SinkError::Layout {
            path: format!("{}/{}/{}", key.0, key.1, key.2),
            reason: "schema vanished".into(),
        })
    };
    let flush = |segment: &mut Segment, items: &mut Vec<Item>| -> Result<()> {
        for (key, (rows, synthetic_ts)) in std::mem::take(segment) {
            let schema = schema_of(&key)?;
            items.push(Item::Rows {
                schema,
                rows,
                synthetic_ts,
            });
        }
        Ok(())
    };
    let mut items: Vec<Item> = Vec::new();
    let mut ddls = scan.ddls.into_values().peekable();
    let mut segment = Segment::new();
    for p in placed {
        while let Some(d) = ddls.next_if(|d| d.commit_ts <= p.ts) {
            flush(&mut segment, &mut items)?;
            items.push(Item::Ddl(Box::new(d)));
        }
        let schema = schema_of(&p.version)?;
        let synthetic = p.row.commit_ts.is_none();
        let ev = p.row.into_event(&schema, p.ts);
        let e = segment.entry(p.version).or_default();
        e.0.push(ev);
        e.1 |= synthetic;
    }
    flush(&mut segment, &mut items)?;
    items.extend(ddls.map(|d| Item::Ddl(Box::new(d))));
    Ok(items)
}
