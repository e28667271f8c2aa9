//! The schema history of one upstream: a snapshot of `information_schema` taken at a known
//! binlog position, then every DDL read from the binlog applied in commit-ts order. Shared by
//! every changefeed and node (persist it in the meta store; it is `serde`-serializable).
//!
//! Invariants:
//! - **table ids are a pure function of the history**: tables in the snapshot get
//!   [`SNAPSHOT_FIRST_TABLE_ID`]`+ i` in `(database, name)` byte order; a table created (or
//!   truncated, which makes a new table as in TiDB) by a DDL gets the DDL's commit ts as its id
//!   (commit ts values are `>= 1 << 32`, so they never collide with snapshot ids); RENAME and
//!   ALTER keep the id;
//! - versions are keyed by commit ts: [`SchemaHistory::tables_at`]`(ts)` is the state after
//!   every DDL with commit ts `<= ts`, so a row with commit ts `t` decodes with `tables_at(t)`;
//! - applying a DDL is idempotent by commit ts: a DDL at or below the history's head is not
//!   applied again and returns the event recorded the first time (several readers, on several
//!   nodes, feed one history);
//! - an unparseable DDL is a [`CaptureError::Ddl`] and leaves the history unchanged, unless
//!   [`SchemaHistory::skip_unparseable_ddl`] is set, in which case it is recorded in
//!   `skipped` and otherwise ignored. Statements that are not about tables or databases
//!   (GRANT, CREATE USER, FLUSH, procedures, triggers, ...) are ignored;
//! - every character column has the charset and collation *names* the server gives it, resolved
//!   from the history alone ([`crate::charset`]): server, database and table defaults read at the
//!   snapshot are kept current by the DDLs (`CREATE/ALTER DATABASE`, table options, `CONVERT
//!   TO`); `ALTER DATABASE` changes only those defaults (a database-level event, no table
//!   version);
//! - view DDLs and `ALTER DATABASE` are events the table trigger writes, never table versions;
//!   a DDL is read as the `sql_mode` of its session makes the server read it
//!   ([`crate::session`]).

use crate::binlog::master_position;
use crate::charset::{scan_charset_options, AlterCharset, CharsetDefaults, CharsetOptions};
use crate::error::{CaptureError, Result};
use crate::pos::BinlogPos;
use mysql_async::prelude::Queryable;
use serde::{Deserialize, Serialize};
use sluice_types::partition::split_partition_options;
use sluice_types::{
    ColumnDef, ColumnType, DdlEvent, DdlInfluence, DdlKind, DdlSession, Generation, InfluenceScope,
    Partitioning, TableId, TableSchema, Ts,
};
use sqlparser::ast::{
    AlterTableOperation, ColumnOption, CreateTableLikeKind, CreateTableOptions, ObjectName,
    ObjectType, RenameTableNameKind, SchemaName, SqlOption, Statement, TableConstraint,
};
use sqlparser::dialect::MySqlDialect;
use std::collections::BTreeMap;
use std::path::Path;

/// The first id given to snapshot tables.
pub const SNAPSHOT_FIRST_TABLE_ID: u64 = 1000;
/// How many times the snapshot is retried when a DDL lands while it is read.
pub const SNAPSHOT_RETRIES: usize = 20;
/// Schemas never captured.
pub const SYSTEM_SCHEMAS: [&str; 4] = ["mysql", "information_schema", "performance_schema", "sys"];

pub fn is_system_schema(db: &str) -> bool {
    SYSTEM_SCHEMAS.iter().any(|s| s.eq_ignore_ascii_case(db))
}

/// One version of one table, valid for commit ts in `[from, to)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableVersion {
    pub from: Ts,
    pub to: Option<Ts>,
    pub schema: TableSchema,
    /// Made by a DDL the history could not parse: completed from the first TABLE_MAP of the
    /// table after it ([`crate::binlog_schema`]).
    #[serde(default)]
    pub from_binlog: bool,
}

/// A DDL that was skipped because it could not be parsed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkippedDdl {
    pub commit_ts: Ts,
    pub database: String,
    pub query: String,
    pub error: String,
}

/// See the module docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchemaHistory {
    /// Binlog position of the snapshot; readers start here or later.
    pub snapshot_pos: BinlogPos,
    /// The ts of the snapshot (`snapshot_pos.ts()`).
    pub snapshot_ts: Ts,
    /// The commit ts of the last applied DDL (or the snapshot ts).
    pub head: Ts,
    /// Every version of every table.
    pub tables: BTreeMap<TableId, Vec<TableVersion>>,
    /// Databases: name → `[created, dropped)`.
    pub databases: BTreeMap<String, Vec<(Ts, Option<Ts>)>>,
    /// Applied DDLs in commit ts order.
    pub ddls: Vec<DdlEvent>,
    pub skipped: Vec<SkippedDdl>,
    /// Configuration: skip unparseable DDLs instead of failing.
    #[serde(default)]
    pub skip_unparseable_ddl: bool,
    /// Index: `db.name` → every id that ever had that name (derived from `tables`).
    #[serde(default)]
    pub names: BTreeMap<String, Vec<TableId>>,
    /// MariaDB sequences (`db.name`): their row events (NEXTVAL) are not captured.
    #[serde(default)]
    pub sequences: std::collections::BTreeSet<String>,
    /// Server, database and table defaults the charset and collation of string columns made by
    /// DDLs are resolved from ([`crate::charset`]). Empty in histories persisted before it
    /// existed: their later string columns keep only what the DDL itself says.
    #[serde(default)]
    pub charsets: CharsetDefaults,
    /// Versions taken from the binlog because the history's own disagreed with it (newest
    /// [`crate::binlog_schema::MAX_REPAIRS_KEPT`]).
    #[serde(default)]
    pub repairs: Vec<crate::binlog_schema::SchemaRepair>,
    /// Grows with every change that is not a DDL event of its own (versions completed or
    /// repaired from the binlog): whoever keeps or publishes the history saves it again.
    #[serde(default)]
    pub revision: u64,
    /// Every table's foreign keys over time ([`crate::foreign_keys`]). Empty in histories
    /// persisted before it existed.
    #[serde(default)]
    pub foreign_keys: crate::foreign_keys::ForeignKeys,
}

/// A boxed future, so [`SchemaStore`] can be implemented over async clients (etcd) and used as
/// `dyn SchemaStore`.
pub type StoreFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + Send + 'a>>;

/// Persistence of a schema history (the server implements it over its meta store).
pub trait SchemaStore: Send + Sync {
    fn load(&self) -> StoreFuture<'_, Option<SchemaHistory>>;
    fn save<'a>(&'a self, history: &'a SchemaHistory) -> StoreFuture<'a, ()>;
}

/// A [`SchemaStore`] in one JSON file, replaced atomically (write + rename).
pub struct FileSchemaStore(pub std::path::PathBuf);

impl FileSchemaStore {
    pub fn load_sync(&self) -> Result<Option<SchemaHistory>> {
        match std::fs::read(&self.0) {
            Ok(b) => SchemaHistory::from_json(&b).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CaptureError::Storage(format!(
                "reading {}: {e}",
                self.0.display()
            ))),
        }
    }

    pub fn save_sync(&self, history: &SchemaHistory) -> Result<()> {
        let tmp = self.0.with_extension("tmp");
        let data = history.to_json()?;
        std::fs::write(&tmp, data)
            .map_err(|e| CaptureError::Storage(format!("writing {}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, &self.0)
            .map_err(|e| CaptureError::Storage(format!("renaming to {}: {e}", self.0.display())))
    }
}

impl SchemaStore for FileSchemaStore {
    fn load(&self) -> StoreFuture<'_, Option<SchemaHistory>> {
        Box::pin(async move { self.load_sync() })
    }
    fn save<'a>(&'a self, history: &'a SchemaHistory) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.save_sync(history) })
    }
}

fn qualified(db: &str, name: &str) -> String {
    format!("{db}.{name}")
}

/// `db.table` of an object name, defaulting the database to `default_db`.
fn split_name(name: &ObjectName, default_db: &str) -> (String, String) {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| match p.as_ident() {
            Some(i) => i.value.clone(),
            None => p.to_string(),
        })
        .collect();
    match parts.as_slice() {
        [db, t] => (db.clone(), t.clone()),
        [t] => (default_db.to_string(), t.clone()),
        _ => (
            default_db.to_string(),
            parts.last().cloned().unwrap_or_default(),
        ),
    }
}

/// Parses a column type as MariaDB prints it (`int(11) unsigned`, `enum('a','b')`,
/// `decimal(10,2)`, `datetime(6)`, `longtext`, `json`, ...).
pub fn column_from_sql_type(name: &str, sql_type: &str) -> ColumnDef {
    let lower = sql_type.trim().to_ascii_lowercase();
    let word: String = lower
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let args: Vec<String> = lower
        .find('(')
        .and_then(|s| {
            lower[s + 1..]
                .find(')')
                .map(|e| lower[s + 1..s + 1 + e].to_string())
        })
        .map(|a| a.split(',').map(|x| x.trim().to_string()).collect())
        .unwrap_or_default();
    let num = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok());
    let varying = lower.starts_with("character varying") || lower.starts_with("char varying");
    let ty = match word.as_str() {
        _ if varying => ColumnType::VarChar,
        "tinyint" | "bool" | "boolean" => ColumnType::TinyInt,
        "smallint" => ColumnType::SmallInt,
        "mediumint" => ColumnType::MediumInt,
        "int" | "integer" => ColumnType::Int,
        "bigint" => ColumnType::BigInt,
        "decimal" | "numeric" | "dec" | "fixed" => ColumnType::Decimal,
        "float" => ColumnType::Float,
        "double" | "real" => ColumnType::Double,
        "char" | "character" | "nchar" => ColumnType::Char,
        "varchar" | "nvarchar" => ColumnType::VarChar,
        "tinytext" | "text" | "mediumtext" | "longtext" | "long" => ColumnType::Text,
        "binary" => ColumnType::Binary,
        "varbinary" => ColumnType::VarBinary,
        "tinyblob" | "blob" | "mediumblob" | "longblob" => ColumnType::Blob,
        "date" => ColumnType::Date,
        "time" => ColumnType::Time,
        "datetime" => ColumnType::DateTime,
        "timestamp" => ColumnType::Timestamp,
        "year" => ColumnType::Year,
        "enum" => ColumnType::Enum,
        "set" => ColumnType::Set,
        "bit" => ColumnType::Bit,
        "json" => ColumnType::Json,
        // MariaDB's binary-stored types whose values capture turns into text
        // (`crate::textual`): a fixed-width character value for sinks and consumers.
        "uuid" | "inet4" | "inet6" => ColumnType::Char,
        _ => ColumnType::Geometry,
    };
    let elements = if matches!(ty, ColumnType::Enum | ColumnType::Set) {
        parse_elements(sql_type)
    } else {
        Vec::new()
    };
    let decimals = match ty {
        ColumnType::Decimal => num(1).unwrap_or(0) as u8,
        ColumnType::Time | ColumnType::DateTime | ColumnType::Timestamp => {
            num(0).unwrap_or(0) as u8
        }
        _ => 0,
    };
    ColumnDef {
        name: name.to_string(),
        ty,
        sql_type: lower.clone(),
        unsigned: lower.contains("unsigned"),
        nullable: true,
        charset: None,
        collation: None,
        elements,
        decimals,
        length: if matches!(ty, ColumnType::Enum | ColumnType::Set) {
            0
        } else {
            num(0).unwrap_or(0)
        },
        generated: None,
    }
}

/// `enum('a','b''c')` → `["a", "b'c"]`.
fn parse_elements(sql_type: &str) -> Vec<String> {
    let Some(start) = sql_type.find('(') else {
        return Vec::new();
    };
    let b = &sql_type.as_bytes()[start + 1..];
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\'' {
            let mut s = Vec::new();
            i += 1;
            while i < b.len() {
                if b[i] == b'\'' && b.get(i + 1) == Some(&b'\'') {
                    s.push(b'\'');
                    i += 2;
                } else if b[i] == b'\'' {
                    break;
                } else if b[i] == b'\\' && i + 1 < b.len() {
                    s.push(b[i + 1]);
                    i += 2;
                } else {
                    s.push(b[i]);
                    i += 1;
                }
            }
            out.push(String::from_utf8_lossy(&s).into_owned());
        } else if b[i] == b')' {
            break;
        }
        i += 1;
    }
    out
}

/// `AS (expr) [VIRTUAL|STORED]`: the server's default is VIRTUAL (MariaDB's PERSISTENT reaches
/// the parser as STORED, [`normalize_for_parser`]).
/// A period column reaches the parser with a marker expression
/// ([`crate::mariadb_sql::PERIOD_MARKERS`]).
fn generation_of(
    expr: &sqlparser::ast::Expr,
    mode: Option<sqlparser::ast::GeneratedExpressionMode>,
) -> Generation {
    let (start, end) = crate::mariadb_sql::PERIOD_MARKERS;
    match mode {
        _ if expr.to_string() == start => Generation::RowStart,
        _ if expr.to_string() == end => Generation::RowEnd,
        Some(sqlparser::ast::GeneratedExpressionMode::Stored) => Generation::Stored,
        _ => Generation::Virtual,
    }
}

/// A generated column as `information_schema.COLUMNS.EXTRA` shows it: `VIRTUAL GENERATED` or
/// `STORED GENERATED` (MariaDB before 10.2: `VIRTUAL`, `PERSISTENT`), possibly followed by
/// `, INVISIBLE`. MySQL's `DEFAULT_GENERATED` (a DEFAULT expression) is not one. The snapshot
/// appends ` ROW_START` / ` ROW_END` for a period column (its `GENERATION_EXPRESSION`).
pub fn generation_from_extra(extra: &str) -> Option<Generation> {
    let upper = extra.to_ascii_uppercase();
    let words: Vec<&str> = upper
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    let period = words.iter().find_map(|w| match *w {
        "ROW_START" => Some(Generation::RowStart),
        "ROW_END" => Some(Generation::RowEnd),
        _ => None,
    });
    period.or_else(|| {
        words.iter().find_map(|w| match *w {
            "VIRTUAL" => Some(Generation::Virtual),
            "STORED" | "PERSISTENT" => Some(Generation::Stored),
            _ => None,
        })
    })
}

/// The tables a CREATE TABLE's foreign keys reference (table constraints and column
/// `REFERENCES`).
fn foreign_parents<'a>(
    constraints: &'a [TableConstraint],
    columns: &'a [sqlparser::ast::ColumnDef],
) -> Vec<&'a ObjectName> {
    let inline = columns
        .iter()
        .flat_map(|c| c.options.iter())
        .filter_map(|o| match &o.option {
            ColumnOption::ForeignKey(fk) => Some(&fk.foreign_table),
            _ => None,
        });
    constraints
        .iter()
        .filter_map(|c| match c {
            TableConstraint::ForeignKey(fk) => Some(&fk.foreign_table),
            _ => None,
        })
        .chain(inline)
        .collect()
}

fn ident_of_index_expr(e: &impl std::fmt::Display) -> String {
    let s = e.to_string();
    let s = s.split('(').next().unwrap_or(&s).trim();
    s.trim_matches('`').trim_matches('"').to_string()
}

fn apply_column_options(
    c: &mut ColumnDef,
    options: &[ColumnOption],
    pk: &mut Vec<String>,
    uniques: &mut Vec<Vec<String>>,
) {
    for o in options {
        match o {
            ColumnOption::NotNull => c.nullable = false,
            ColumnOption::Null => c.nullable = true,
            ColumnOption::PrimaryKey(_) => {
                c.nullable = false;
                pk.push(c.name.clone());
            }
            ColumnOption::Unique(_) => uniques.push(vec![c.name.clone()]),
            ColumnOption::Generated {
                generation_expr: Some(e),
                generation_expr_mode,
                ..
            } => c.generated = Some(generation_of(e, *generation_expr_mode)),
            ColumnOption::Check(ch)
                if ch.to_string().to_ascii_lowercase().contains("json_valid") =>
            {
                c.ty = ColumnType::Json;
            }
            _ => {}
        }
    }
}

/// The `CHARACTER SET` and `COLLATE` written on a column (the last of each, as the server takes
/// them).
fn column_charset_options(options: &[ColumnOption]) -> (Option<String>, Option<String>) {
    let (mut cs, mut coll) = (None, None);
    for o in options {
        match o {
            ColumnOption::CharacterSet(n) => cs = Some(n.to_string()),
            ColumnOption::Collation(n) => coll = Some(n.to_string()),
            _ => {}
        }
    }
    (cs, coll)
}

/// `[DEFAULT] CHARSET|CHARACTER SET = x` and `[DEFAULT] COLLATE = y` among CREATE TABLE options.
fn table_charset_options(options: &CreateTableOptions) -> CharsetOptions {
    let list = match options {
        CreateTableOptions::None => return CharsetOptions::default(),
        CreateTableOptions::With(l)
        | CreateTableOptions::Options(l)
        | CreateTableOptions::Plain(l)
        | CreateTableOptions::TableProperties(l) => l,
    };
    let mut out = CharsetOptions::default();
    for o in list {
        if let SqlOption::KeyValue { key, value } = o {
            let key = key.to_string().to_ascii_uppercase();
            let key = key.strip_prefix("DEFAULT ").unwrap_or(&key);
            match key {
                "CHARSET" | "CHARACTER SET" => out.charset = Some(value.to_string()),
                "COLLATE" => out.collation = Some(value.to_string()),
                _ => {}
            }
        }
    }
    out
}

/// Chooses the routing key: the primary key, else the first unique key whose columns are all
/// NOT NULL. Returns column indexes.
fn choose_key(
    columns: &[ColumnDef],
    pk: &[String],
    uniques: &[Vec<String>],
) -> (Vec<usize>, Vec<Vec<usize>>) {
    let idx = |names: &[String]| -> Option<Vec<usize>> {
        names
            .iter()
            .map(|n| columns.iter().position(|c| c.name.eq_ignore_ascii_case(n)))
            .collect()
    };
    let uk: Vec<Vec<usize>> = uniques.iter().filter_map(|u| idx(u)).collect();
    if let Some(k) = idx(pk).filter(|k| !k.is_empty()) {
        return (k, uk);
    }
    for u in &uk {
        if u.iter().all(|i| !columns[*i].nullable) {
            let rest = uk.iter().filter(|x| *x != u).cloned().collect();
            return (u.clone(), rest);
        }
    }
    (Vec::new(), uk)
}

fn names_of(columns: &[ColumnDef], idx: &[usize]) -> Vec<String> {
    idx.iter()
        .filter_map(|i| columns.get(*i).map(|c| c.name.clone()))
        .collect()
}

/// Mutable key description while applying an ALTER.
struct KeyNames {
    pk: Vec<String>,
    uniques: Vec<Vec<String>>,
}

impl SchemaHistory {
    /// An empty history at `pos` (an upstream without tables, or for tests).
    pub fn empty(pos: BinlogPos) -> SchemaHistory {
        let ts = pos.ts().unwrap_or(0);
        SchemaHistory {
            snapshot_pos: pos,
            snapshot_ts: ts,
            head: ts,
            tables: BTreeMap::new(),
            databases: BTreeMap::new(),
            ddls: Vec::new(),
            skipped: Vec::new(),
            skip_unparseable_ddl: false,
            names: BTreeMap::new(),
            sequences: Default::default(),
            charsets: CharsetDefaults::default(),
            repairs: Vec::new(),
            revision: 0,
            foreign_keys: Default::default(),
        }
    }

    /// Takes a snapshot of `information_schema` at a known binlog position: reads the position,
    /// the schema, the position again, and retries while they differ.
    pub async fn snapshot(url: &str) -> Result<SchemaHistory> {
        let opts = mysql_async::Opts::from_url(url)
            .map_err(|e| CaptureError::Connection(format!("bad url: {e}")))?;
        let mut conn = mysql_async::Conn::new(opts)
            .await
            .map_err(CaptureError::from_mysql)?;
        for _ in 0..SNAPSHOT_RETRIES {
            let before = master_position(&mut conn).await?;
            let h = Self::read_schema(&mut conn, before.clone()).await?;
            let after = master_position(&mut conn).await?;
            if before == after {
                let _ = conn.disconnect().await;
                return Ok(h);
            }
        }
        Err(CaptureError::Sql(format!(
            "the binlog kept moving during {SNAPSHOT_RETRIES} schema snapshots"
        )))
    }

    async fn read_schema(conn: &mut mysql_async::Conn, pos: BinlogPos) -> Result<SchemaHistory> {
        let e = CaptureError::from_mysql;
        let mut h = SchemaHistory::empty(pos);
        h.charsets = read_charset_defaults(conn).await?;
        let dbs: Vec<(String, Option<String>, Option<String>)> = conn
            .query(
                "SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME \
                 FROM information_schema.SCHEMATA",
            )
            .await
            .map_err(e)?;
        for (d, cs, coll) in dbs.into_iter().filter(|d| !is_system_schema(&d.0)) {
            if let Some(cc) = h.charsets.resolve(cs.as_deref(), coll.as_deref(), None) {
                h.charsets.databases.insert(d.clone(), cc);
            }
            h.databases.insert(d, vec![(0, None)]);
        }
        let seqs: Vec<(String, String)> = conn
            .query("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'SEQUENCE'")
            .await
            .map_err(e)?;
        h.sequences = seqs.into_iter().map(|(d, t)| qualified(&d, &t)).collect();
        let mut tables: Vec<(String, String, Option<String>)> = conn
            .query("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED')")
            .await
            .map_err(e)?;
        // System-versioned tables without explicit period columns: MariaDB's implicit ones.
        let implicit_period = crate::mariadb_sql::tables_with_implicit_period(conn).await?;
        tables.retain(|(d, _, _)| !is_system_schema(d));
        tables.sort();
        type ColRow = (
            String,
            String,
            String,
            String,
            String,
            Option<String>,
            Option<String>,
            String,
        );
        let cols: Vec<ColRow> = conn
            .query(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, COLLATION_NAME, \
                 CONCAT(EXTRA, IF(GENERATION_EXPRESSION IN ('ROW START', 'ROW END'), \
                 CONCAT(' ', REPLACE(GENERATION_EXPRESSION, ' ', '_')), '')) \
                 FROM information_schema.COLUMNS ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
            )
            .await
            .map_err(e)?;
        let idx: Vec<(String, String, String, i64, String)> = conn
            .query(
                "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS \
                 ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
            )
            .await
            .map_err(e)?;
        // MariaDB JSON columns are LONGTEXT with a json_valid() CHECK.
        let checks: Vec<(String, String, String)> = conn
            .query("SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS")
            .await
            .unwrap_or_default();
        let partitioned: std::collections::BTreeSet<(String, String)> = conn
            .query(
                "SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME FROM information_schema.PARTITIONS \
                 WHERE PARTITION_NAME IS NOT NULL",
            )
            .await
            .map_err(e)?
            .into_iter()
            .collect();
        for (i, (db, name, table_collation)) in tables.iter().enumerate() {
            let mut columns: Vec<ColumnDef> = cols
                .iter()
                .filter(|c| &c.0 == db && &c.1 == name)
                .map(|c| {
                    let mut d = column_from_sql_type(&c.2, &c.3);
                    d.nullable = c.4 == "YES";
                    d.charset = c.5.clone();
                    d.collation = c.6.clone();
                    d.generated = generation_from_extra(&c.7);
                    d
                })
                .collect();
            if implicit_period.contains(&(db.clone(), name.clone())) {
                columns.extend(crate::mariadb_sql::implicit_period_columns());
            }
            for (_, _, clause) in checks.iter().filter(|c| &c.0 == db && &c.1 == name) {
                let cl = clause.to_ascii_lowercase();
                if let Some(rest) = cl.strip_prefix("json_valid(") {
                    let col = rest.trim_end_matches(')').trim_matches('`');
                    for c in columns
                        .iter_mut()
                        .filter(|c| c.name.eq_ignore_ascii_case(col))
                    {
                        c.ty = ColumnType::Json;
                    }
                }
            }
            let mut pk = Vec::new();
            let mut uniques: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (_, _, index, non_unique, col) in idx.iter().filter(|x| &x.0 == db && &x.1 == name)
            {
                if index == "PRIMARY" {
                    pk.push(col.clone());
                } else if *non_unique == 0 {
                    uniques.entry(index.clone()).or_default().push(col.clone());
                }
            }
            let uniques: Vec<Vec<String>> = uniques.into_values().collect();
            let (key_columns, unique_keys) = choose_key(&columns, &pk, &uniques);
            let id = TableId(SNAPSHOT_FIRST_TABLE_ID + i as u64);
            if let Some(cc) = h.charsets.resolve(None, table_collation.as_deref(), None) {
                h.charsets.tables.insert(id, cc);
            }
            let partitioning = if partitioned.contains(&(db.clone(), name.clone())) {
                Some(read_partitioning(conn, db, name).await?)
            } else {
                None
            };
            h.index_name(id, db, name);
            h.tables.insert(
                id,
                vec![TableVersion {
                    from: 0,
                    to: None,
                    schema: TableSchema {
                        table_id: id,
                        database: db.clone(),
                        name: name.clone(),
                        columns,
                        key_columns,
                        unique_keys,
                        version: 0,
                        partitioning,
                    },
                    from_binlog: false,
                }],
            );
        }
        let fk_rows: Vec<crate::foreign_keys::SnapshotRow> = conn
            .query(crate::foreign_keys::SNAPSHOT_QUERY)
            .await
            .map_err(e)?;
        h.snapshot_foreign_keys(fk_rows);
        Ok(h)
    }

    /// The foreign keys read at the snapshot, on the snapshot's tables (ts 0).
    fn snapshot_foreign_keys(&mut self, rows: Vec<crate::foreign_keys::SnapshotRow>) {
        for ((db, t), keys) in crate::foreign_keys::group_snapshot(rows) {
            if let Some(id) = self.find_id(&db, &t, 0) {
                self.foreign_keys.set(id, 0, keys);
            }
        }
    }

    pub fn to_json(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self)
            .map_err(|e| CaptureError::Storage(format!("serializing the schema history: {e}")))
    }

    pub fn from_json(b: &[u8]) -> Result<SchemaHistory> {
        serde_json::from_slice(b)
            .map_err(|e| CaptureError::Storage(format!("parsing the schema history: {e}")))
    }

    /// Loads from a file written by [`FileSchemaStore`].
    pub fn load(path: &Path) -> Result<Option<SchemaHistory>> {
        FileSchemaStore(path.to_path_buf()).load_sync()
    }

    /// True when `db.name` is a sequence (its NEXTVAL row events are not data).
    pub fn is_sequence(&self, db: &str, name: &str) -> bool {
        self.sequences.contains(&qualified(db, name))
    }

    /// Every table that exists at `ts` (after all DDLs with commit ts `<= ts`).
    pub fn tables_at(&self, ts: Ts) -> Vec<&TableSchema> {
        self.tables
            .values()
            .filter_map(|v| Self::version_at(v, ts))
            .collect()
    }

    fn version_at(versions: &[TableVersion], ts: Ts) -> Option<&TableSchema> {
        versions
            .iter()
            .rev()
            .find(|v| v.from <= ts && v.to.is_none_or(|to| ts < to))
            .map(|v| &v.schema)
    }

    /// The table named `db.name` at `ts`.
    pub fn table_at(&self, db: &str, name: &str, ts: Ts) -> Option<&TableSchema> {
        if self.names.is_empty() && !self.tables.is_empty() {
            // A history persisted before the name index existed.
            return self
                .tables
                .values()
                .filter_map(|v| Self::version_at(v, ts))
                .find(|s| s.database == db && s.name == name);
        }
        self.names
            .get(&qualified(db, name))?
            .iter()
            .filter_map(|id| self.table_by_id_at(*id, ts))
            .find(|s| s.database == db && s.name == name)
    }

    fn index_name(&mut self, id: TableId, db: &str, name: &str) {
        let ids = self.names.entry(qualified(db, name)).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }

    /// The table with id `id` at `ts`.
    pub fn table_by_id_at(&self, id: TableId, ts: Ts) -> Option<&TableSchema> {
        self.tables.get(&id).and_then(|v| Self::version_at(v, ts))
    }

    /// DDLs with commit ts `> ts`, in order.
    pub fn ddls_after(&self, ts: Ts) -> &[DdlEvent] {
        let i = self.ddls.partition_point(|d| d.commit_ts <= ts);
        &self.ddls[i..]
    }

    fn database_exists(&self, db: &str, ts: Ts) -> bool {
        self.databases.get(db).is_some_and(|v| {
            v.iter()
                .any(|(from, to)| *from <= ts && to.is_none_or(|t| ts < t))
        })
    }

    pub(crate) fn close_table(&mut self, id: TableId, ts: Ts) {
        self.close(id, ts)
    }

    pub(crate) fn push_version_at(&mut self, schema: TableSchema, ts: Ts) {
        self.push_version(schema, ts)
    }

    fn close(&mut self, id: TableId, ts: Ts) {
        if let Some(v) = self.tables.get_mut(&id).and_then(|v| v.last_mut()) {
            if v.to.is_none() {
                v.to = Some(ts);
            }
        }
    }

    fn push_version(&mut self, mut schema: TableSchema, ts: Ts) {
        schema.version = ts;
        // MariaDB's implicit system-versioning columns are generated (the server sets them).
        let from = schema.columns.len() - implicit_period_columns(&schema.columns);
        let period = [Generation::RowStart, Generation::RowEnd];
        for (c, g) in schema.columns[from..].iter_mut().zip(period) {
            c.generated = Some(g);
        }
        let id = schema.table_id;
        self.index_name(id, &schema.database.clone(), &schema.name.clone());
        self.close(id, ts);
        self.tables.entry(id).or_default().push(TableVersion {
            from: ts,
            to: None,
            schema,
            from_binlog: false,
        });
    }

    /// Applies one statement read from the binlog at `commit_ts`. Returns the DDL event for
    /// table/database DDLs, `None` for statements that do not change the schema. See the module
    /// docs for idempotence and unparseable statements.
    pub fn apply(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
    ) -> Result<Option<DdlEvent>> {
        self.apply_in_session(
            commit_ts,
            commit_time_ms,
            database,
            query,
            &DdlSession::default(),
        )
    }

    /// [`SchemaHistory::apply`] of a statement read from the binlog, with the session it ran
    /// under: the history reads the statement as that `sql_mode` makes the server read it
    /// ([`crate::session::as_sql_mode_reads`]), and a new DDL event carries the session (a
    /// replayed one has it already).
    pub fn apply_in_session(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
        session: &DdlSession,
    ) -> Result<Option<DdlEvent>> {
        let fresh = commit_ts > self.head;
        let mut ev = self.apply_statement(commit_ts, commit_time_ms, database, query, session)?;
        if let Some(ev) = ev.as_mut().filter(|_| fresh) {
            let session = (!session.is_empty()).then(|| Box::new(session.clone()));
            ev.session = session.clone();
            if let Some(last) = self.ddls.last_mut().filter(|d| d.commit_ts == commit_ts) {
                last.session = session;
            }
        }
        Ok(ev)
    }

    fn apply_statement(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
        session: &DdlSession,
    ) -> Result<Option<DdlEvent>> {
        if commit_ts <= self.head {
            return Ok(self.ddls.iter().find(|d| d.commit_ts == commit_ts).cloned());
        }
        // Executable comments are executed by the server (`/*!50100 CREATE TABLE … */`,
        // `/*M!100500 ALTER … */`): their content is the statement. The event keeps `query`.
        let opened = expand_executable_comments(query);
        // `SET STATEMENT … FOR <DDL>`: the DDL (its settings are in the event's session).
        let moded = crate::session::as_sql_mode_reads(
            crate::session::strip_set_statement(opened.as_str()),
            session.sql_mode.as_deref(),
        );
        let text = moded.as_ref();
        if let Some(seq) = sequence_statement(text) {
            return Ok(self.sequence_ddl(commit_ts, commit_time_ms, database, query, seq));
        }
        if let Some((db, options)) = alter_database_statement(text, database) {
            // Only the defaults of tables created later change: no table version, an event the
            // table trigger writes so the downstream database gets the same defaults.
            let server = self.charsets.server.clone();
            if let Some(cc) = self.charsets.resolve(
                options.charset.as_deref(),
                options.collation.as_deref(),
                server.as_ref(),
            ) {
                if !options.is_empty() {
                    self.charsets.databases.insert(db, cc);
                }
            }
            let ev = self.trigger_ddl(
                commit_ts,
                commit_time_ms,
                database,
                query,
                DdlKind::AlterDatabase,
            );
            return Ok(Some(ev));
        }
        if let Some((kind, view_db)) = view_statement(text) {
            let mut ev = self.trigger_ddl(commit_ts, commit_time_ms, database, query, kind);
            if let Some(last) = self.ddls.last_mut().filter(|_| view_db.is_some()) {
                last.object_database = view_db.as_deref().map(Box::from);
                ev.object_database = view_db.map(String::into_boxed_str);
            }
            return Ok(Some(ev));
        }
        if !is_schema_statement(text) {
            return Ok(None);
        }
        // Partition options are kept apart: sqlparser does not know MySQL's partition syntax,
        // and they change the layout of a table version, never its columns.
        let (sql, partition_text) = if is_create_or_alter_table(text) {
            split_partition_options(text)
        } else {
            (text.to_string(), None)
        };
        // MariaDB's syntax in the words sqlparser reads, with the same effect on columns.
        let sql = crate::mariadb_sql::prepare(&sql);
        // Charset options of an ALTER TABLE (sqlparser knows none of them): the table default
        // and CONVERT TO CHARACTER SET.
        let alter_cs = strip_alter_options(&sql)
            .map(|s| s.charset)
            .unwrap_or_default();
        let stmts = match parse_mysql(&sql) {
            Ok(s) => s,
            Err(e) => match strip_alter_options(&sql) {
                // ALTER TABLE with table options sqlparser does not know (ENGINE=, CONVERT TO
                // CHARACTER SET, LOCK=, ...): they change no column; parse the rest.
                Some(stripped) if stripped.specs_left => match parse_mysql(&stripped.query) {
                    Ok(s) => s,
                    Err(e2) => {
                        return self.unparseable(
                            commit_ts,
                            commit_time_ms,
                            database,
                            query,
                            format!("{e}; without table options: {e2}"),
                        )
                    }
                },
                Some(stripped) => {
                    return Ok(self.options_only_alter(
                        commit_ts,
                        commit_time_ms,
                        database,
                        query,
                        &stripped.table,
                        partition_text.as_deref(),
                        &alter_cs,
                    ))
                }
                None => {
                    return self.unparseable(
                        commit_ts,
                        commit_time_ms,
                        database,
                        query,
                        e.to_string(),
                    )
                }
            },
        };
        let mut work = self.clone();
        let mut kind = DdlKind::Other;
        let mut influence = DdlInfluence {
            scope: InfluenceScope::Tables(Vec::new()),
            trigger: true,
            dropped: vec![],
            added: vec![],
            renamed: vec![],
            sources: vec![],
        };
        let mut touched: Vec<TableId> = Vec::new();
        for stmt in &stmts {
            let applied = work.apply_stmt(
                commit_ts,
                database,
                stmt,
                &alter_cs,
                &mut influence,
                &mut touched,
            );
            match applied {
                Ok(Some(k)) => kind = k,
                Ok(None) => {}
                Err(msg) => {
                    return self.unparseable(commit_ts, commit_time_ms, database, query, msg)
                }
            }
        }
        if let Some(text) = &partition_text {
            let target = match kind {
                DdlKind::CreateTable => influence.added.last().map(|(id, _)| *id),
                _ => touched.last().copied(),
            };
            if let Some(id) = target {
                work.set_partitioning(id, commit_ts, text, kind != DdlKind::CreateTable);
            }
        }
        if kind == DdlKind::Other
            && touched.is_empty()
            && influence.added.is_empty()
            && influence.dropped.is_empty()
        {
            // Parsed, but nothing Sluice tracks (e.g. CREATE TEMPORARY TABLE, CREATE INDEX on an
            // untracked table): no event.
            if !matches!(kind, DdlKind::Other) {
                return Ok(None);
            }
        }
        if let InfluenceScope::Tables(ref mut v) = influence.scope {
            v.extend(touched.iter().copied());
            v.sort();
            v.dedup();
        }
        // A table the DDL changes (or creates) is no mere source (a self-referencing key).
        let changed = |t: &TableId| match &influence.scope {
            InfluenceScope::Tables(v) => v.contains(t),
            _ => false,
        } || influence.added.iter().any(|(a, _)| a == t);
        let mut sources = std::mem::take(&mut influence.sources);
        sources.retain(|t| !changed(t));
        sources.sort();
        sources.dedup();
        influence.sources = sources;
        let ev = DdlEvent {
            session: Default::default(),
            object_database: None,
            commit_ts,
            commit_time_ms,
            kind,
            database: database.to_string(),
            query: query.to_string(),
            influence,
        };
        work.head = commit_ts;
        work.ddls.push(ev.clone());
        *self = work;
        Ok(Some(ev))
    }

    /// A sequence DDL: the history's set of sequences (whose NEXTVAL rows are not table data)
    /// follows it, and a non-temporary one becomes an event the table trigger writes (kind
    /// `Other`, run as logged), so the downstream has the sequence a table's `DEFAULT (NEXT VALUE
    /// FOR s)` names before that table's DDL. Temporary sequences are the session's own.
    fn sequence_ddl(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
        seq: SequenceDdl,
    ) -> Option<DdlEvent> {
        let mut object_db = None;
        for name in &seq.names {
            let parsed = sqlparser::parser::Parser::new(&MySqlDialect {})
                .try_with_sql(name)
                .and_then(|mut p| p.parse_object_name(false));
            let Ok(n) = parsed else { continue };
            if n.0.len() > 1 {
                object_db.get_or_insert_with(|| split_name(&n, database).0);
            }
            let (db, t) = split_name(&n, database);
            match seq.change {
                _ if seq.temporary => {}
                SequenceChange::Create => {
                    self.sequences.insert(qualified(&db, &t));
                }
                SequenceChange::Drop => {
                    self.sequences.remove(&qualified(&db, &t));
                }
                SequenceChange::Alter => {}
            }
        }
        if seq.temporary {
            self.head = commit_ts;
            return None;
        }
        let mut ev = self.trigger_ddl(commit_ts, commit_time_ms, database, query, DdlKind::Other);
        if let Some(last) = self.ddls.last_mut().filter(|_| object_db.is_some()) {
            last.object_database = object_db.as_deref().map(Box::from);
            ev.object_database = object_db.map(String::into_boxed_str);
        }
        Some(ev)
    }

    /// A DDL that changes no table (views, database defaults): the table trigger writes it. A
    /// view DDL waits for every table (a view reads their definitions, so each table's earlier
    /// DDLs must be downstream first); `DROP VIEW` and `ALTER DATABASE` wait for none.
    fn trigger_ddl(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
        kind: DdlKind,
    ) -> DdlEvent {
        let scope = match kind {
            DdlKind::CreateView => InfluenceScope::All,
            _ => InfluenceScope::Tables(Vec::new()),
        };
        let ev = DdlEvent {
            commit_ts,
            commit_time_ms,
            kind,
            database: database.to_string(),
            query: query.to_string(),
            influence: DdlInfluence::scoped(scope, true),
            session: None,
            object_database: None,
        };
        self.head = commit_ts;
        self.ddls.push(ev.clone());
        ev
    }

    /// An ALTER TABLE that only sets table options: a DDL event for the table, no new version
    /// (a new default charset is recorded for later columns); with a partition operation or
    /// `CONVERT TO CHARACTER SET`, a new version with the new layout or column charsets.
    #[allow(clippy::too_many_arguments)]
    fn options_only_alter(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
        table: &str,
        partition_text: Option<&str>,
        alter_cs: &AlterCharset,
    ) -> Option<DdlEvent> {
        let name = sqlparser::parser::Parser::new(&MySqlDialect {})
            .try_with_sql(table)
            .and_then(|mut p| p.parse_object_name(false))
            .ok()?;
        let (db, t) = split_name(&name, database);
        let id = self.find_id(&db, &t, commit_ts - 1)?;
        let convert = self.alter_table_default(id, &db, alter_cs);
        if partition_text.is_some() || convert.is_some() {
            if let Some(mut s) = self.table_by_id_at(id, commit_ts - 1).cloned() {
                if let Some(to) = &convert {
                    self.charsets.convert_columns(&mut s.columns, to);
                }
                self.push_version(s, commit_ts);
                if let Some(text) = partition_text {
                    self.set_partitioning(id, commit_ts, text, true);
                }
            }
        }
        // EXCHANGE PARTITION moves rows between two tables without row events: both tables'
        // dispatchers stop at it (everything before it written downstream, nothing after).
        let mut ids = vec![id];
        if let Some(other) = partition_text.and_then(exchange_partner) {
            let other = sqlparser::parser::Parser::new(&MySqlDialect {})
                .try_with_sql(&other)
                .and_then(|mut p| p.parse_object_name(false))
                .ok()
                .map(|n| split_name(&n, database))
                .and_then(|(odb, ot)| self.find_id(&odb, &ot, commit_ts - 1));
            if let Some(o) = other.filter(|o| *o != id) {
                ids.push(o);
                ids.sort();
            }
        }
        let ev = DdlEvent {
            session: Default::default(),
            object_database: None,
            commit_ts,
            commit_time_ms,
            kind: DdlKind::AlterTable,
            database: database.to_string(),
            query: query.to_string(),
            influence: DdlInfluence {
                scope: InfluenceScope::Tables(ids),
                trigger: false,
                dropped: vec![],
                added: vec![],
                renamed: vec![],
                sources: vec![],
            },
        };
        self.head = commit_ts;
        self.ddls.push(ev.clone());
        Some(ev)
    }

    /// Applies the charset options of an ALTER TABLE to the default of table `id` (in database
    /// `db`): `[DEFAULT] CHARSET/COLLATE` set it; `CONVERT TO CHARACTER SET` sets it too (unless
    /// the statement also has the former) and is returned, for the caller to convert the
    /// columns (after any column changes of the same statement, as the server does).
    fn alter_table_default(
        &mut self,
        id: TableId,
        db: &str,
        alter_cs: &AlterCharset,
    ) -> Option<crate::charset::CharsetCollation> {
        let db_default = self.charsets.database(db).cloned();
        let resolve = |o: &CharsetOptions| {
            self.charsets.resolve(
                o.charset.as_deref(),
                o.collation.as_deref(),
                db_default.as_ref(),
            )
        };
        let default = (!alter_cs.default.is_empty()).then(|| resolve(&alter_cs.default));
        let convert = alter_cs.convert.as_ref().and_then(resolve);
        // With both, the columns take CONVERT TO and the table default the explicit option.
        if let Some(c) = &convert {
            self.set_table_default(id, Some(c.clone()));
        }
        if let Some(d) = default {
            self.set_table_default(id, d);
        }
        convert
    }

    fn set_table_default(&mut self, id: TableId, cc: Option<crate::charset::CharsetCollation>) {
        match cc {
            Some(cc) => self.charsets.tables.insert(id, cc),
            None => self.charsets.tables.remove(&id),
        };
    }

    /// Sets the partition layout of `id`'s version created at `ts` from a `PARTITION BY` clause
    /// (CREATE) or a partition operation applied to the previous layout (ALTER). A layout
    /// Sluice cannot model is recorded as such ([`Partitioning::unsupported`]): capture never
    /// stops for it; only a sink that must place rows in partitions reports it.
    fn set_partitioning(&mut self, id: TableId, ts: Ts, text: &str, alter: bool) {
        let Some(v) = self
            .tables
            .get_mut(&id)
            .and_then(|v| v.last_mut())
            .filter(|v| v.from == ts)
        else {
            return;
        };
        let result = if alter {
            Partitioning::apply_alter(v.schema.partitioning.as_ref(), text)
        } else {
            Partitioning::parse(text).map(Some)
        };
        v.schema.partitioning = match result {
            Ok(p) => p,
            Err(e) => Some(Partitioning::unsupported(text, &e.to_string())),
        };
    }

    fn unparseable(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
        message: String,
    ) -> Result<Option<DdlEvent>> {
        if self.skip_unparseable_ddl {
            self.skipped.push(SkippedDdl {
                commit_ts,
                database: database.into(),
                query: query.into(),
                error: message,
            });
            self.head = commit_ts;
            return Ok(None);
        }
        Ok(self.follow_unparsed(commit_ts, commit_time_ms, database, query, message))
    }

    fn find_id(&self, db: &str, name: &str, ts: Ts) -> Option<TableId> {
        self.table_at(db, name, ts).map(|s| s.table_id)
    }

    /// Applies one parsed statement to `self`. `Ok(None)`: not a tracked change.
    fn apply_stmt(
        &mut self,
        ts: Ts,
        default_db: &str,
        stmt: &Statement,
        alter_cs: &AlterCharset,
        inf: &mut DdlInfluence,
        touched: &mut Vec<TableId>,
    ) -> std::result::Result<Option<DdlKind>, String> {
        // State before this DDL.
        let before = ts - 1;
        match stmt {
            Statement::CreateDatabase {
                db_name,
                if_not_exists,
                default_charset,
                default_collation,
                ..
            } => {
                let (_, db) = split_name(db_name, default_db);
                if self.create_database(&db, ts, *if_not_exists) {
                    let server = self.charsets.server.clone();
                    let cc = self.charsets.resolve(
                        default_charset.as_deref(),
                        default_collation.as_deref(),
                        server.as_ref(),
                    );
                    self.set_database_default(&db, cc);
                }
                Ok(Some(DdlKind::CreateDatabase))
            }
            Statement::CreateSchema {
                schema_name,
                if_not_exists,
                ..
            } => {
                let db = match schema_name {
                    SchemaName::Simple(n) | SchemaName::NamedAuthorization(n, _) => {
                        split_name(n, default_db).1
                    }
                    SchemaName::UnnamedAuthorization(i) => i.value.clone(),
                };
                if self.create_database(&db, ts, *if_not_exists) {
                    let server = self.charsets.server.clone();
                    self.set_database_default(&db, server);
                }
                Ok(Some(DdlKind::CreateDatabase))
            }
            Statement::Drop {
                object_type,
                names,
                temporary,
                ..
            } => {
                if *temporary {
                    return Ok(None);
                }
                match object_type {
                    ObjectType::Schema | ObjectType::Database => {
                        for n in names {
                            let db = split_name(n, default_db).1;
                            let ids: Vec<TableId> = self
                                .tables_at(before)
                                .iter()
                                .filter(|t| t.database == db)
                                .map(|t| t.table_id)
                                .collect();
                            for id in ids {
                                self.close(id, ts);
                                self.charsets.tables.remove(&id);
                                inf.dropped.push(id);
                            }
                            self.charsets.databases.remove(&db);
                            if let Some(v) = self.databases.get_mut(&db).and_then(|v| v.last_mut())
                            {
                                if v.1.is_none() {
                                    v.1 = Some(ts);
                                }
                            }
                            inf.scope = InfluenceScope::Database(db);
                        }
                        Ok(Some(DdlKind::DropDatabase))
                    }
                    ObjectType::Table => {
                        for n in names {
                            let (db, t) = split_name(n, default_db);
                            if let Some(id) = self.find_id(&db, &t, before) {
                                self.close(id, ts);
                                self.charsets.tables.remove(&id);
                                inf.dropped.push(id);
                                touched.push(id);
                            }
                        }
                        Ok(Some(DdlKind::DropTable))
                    }
                    ObjectType::View => Ok(Some(DdlKind::DropView)),
                    ObjectType::Index => {
                        // MySQL: DROP INDEX i ON t — a new version of t.
                        Ok(None)
                    }
                    _ => Ok(None),
                }
            }
            Statement::CreateTable(ct) => {
                if ct.temporary {
                    return Ok(None);
                }
                let (db, t) = split_name(&ct.name, default_db);
                let mut replaced = None;
                if let Some(old) = self.find_id(&db, &t, before) {
                    if ct.if_not_exists {
                        return Ok(None);
                    }
                    if !ct.or_replace {
                        return Err(format!("table {db}.{t} already exists"));
                    }
                    // CREATE OR REPLACE: the old table is dropped, a new one (new id) made.
                    self.close(old, ts);
                    inf.dropped.push(old);
                    touched.push(old);
                    replaced = Some(old);
                }
                let id = TableId(ts);
                let table_default;
                let schema = if let Some(like) = &ct.like {
                    let src = match like {
                        CreateTableLikeKind::Parenthesized(l) | CreateTableLikeKind::Plain(l) => {
                            &l.name
                        }
                    };
                    let (sdb, st) = split_name(src, default_db);
                    let mut s = self
                        .table_at(&sdb, &st, before)
                        .cloned()
                        .ok_or_else(|| format!("LIKE source {sdb}.{st} is unknown"))?;
                    table_default = self.charsets.tables.get(&s.table_id).cloned();
                    // The downstream copies the source's definition: its earlier DDLs first.
                    inf.sources.push(s.table_id);
                    s.table_id = id;
                    s.database = db.clone();
                    s.name = t.clone();
                    s
                } else {
                    // Table default: its own options, else the database's.
                    let o = table_charset_options(&ct.table_options);
                    table_default = self.charsets.resolve(
                        o.charset.as_deref(),
                        o.collation.as_deref(),
                        self.charsets.database(&db),
                    );
                    let mut pk = Vec::new();
                    let mut uniques = Vec::new();
                    let mut columns = Vec::new();
                    for c in &ct.columns {
                        let mut d = column_from_sql_type(&c.name.value, &c.data_type.to_string());
                        let opts: Vec<ColumnOption> =
                            c.options.iter().map(|o| o.option.clone()).collect();
                        apply_column_options(&mut d, &opts, &mut pk, &mut uniques);
                        let (cs, coll) = column_charset_options(&opts);
                        self.charsets.resolve_column(
                            &mut d,
                            cs.as_deref(),
                            coll.as_deref(),
                            table_default.as_ref(),
                        );
                        columns.push(d);
                    }
                    let mut keys = KeyNames { pk, uniques };
                    for con in &ct.constraints {
                        apply_constraint(con, &mut keys, &mut columns);
                    }
                    for parent in foreign_parents(&ct.constraints, &ct.columns) {
                        let (pdb, pt) = split_name(parent, &db);
                        inf.sources.extend(self.find_id(&pdb, &pt, before));
                    }
                    let (key_columns, unique_keys) = choose_key(&columns, &keys.pk, &keys.uniques);
                    TableSchema {
                        table_id: id,
                        database: db.clone(),
                        name: t.clone(),
                        columns,
                        key_columns,
                        unique_keys,
                        version: ts,
                        partitioning: None,
                    }
                };
                self.push_version(schema, ts);
                // CREATE TABLE … LIKE copies no foreign keys (as the server).
                if ct.like.is_none() {
                    let keys =
                        crate::foreign_keys::of_create(&ct.constraints, &ct.columns, &db, &t);
                    self.foreign_keys.set(id, ts, keys);
                }
                if let Some(old) = replaced {
                    self.charsets.tables.remove(&old);
                }
                self.set_table_default(id, table_default);
                inf.added.push((id, qualified(&db, &t)));
                Ok(Some(DdlKind::CreateTable))
            }
            Statement::AlterTable(at) => {
                let (db, t) = split_name(&at.name, default_db);
                let Some(id) = self.find_id(&db, &t, before) else {
                    return if at.if_exists {
                        Ok(None)
                    } else {
                        Err(format!("ALTER of unknown table {db}.{t}"))
                    };
                };
                let Some(mut s) = self.table_by_id_at(id, before).cloned() else {
                    return Ok(None);
                };
                let mut keys = KeyNames {
                    pk: names_of(&s.columns, &s.key_columns),
                    uniques: s
                        .unique_keys
                        .iter()
                        .map(|u| names_of(&s.columns, u))
                        .collect(),
                };
                // The key chosen may have been a unique key rather than the PK; a PK drop below
                // clears it either way.
                let mut renamed = None;
                // A new table default applies to the columns this statement defines; CONVERT TO
                // CHARACTER SET applies to every column, after them.
                let convert = self.alter_table_default(id, &db, alter_cs);
                let table_default = self.charsets.tables.get(&id).cloned();
                let charsets = &self.charsets;
                let resolve = |d: &mut ColumnDef, opts: &[ColumnOption]| {
                    let (cs, coll) = column_charset_options(opts);
                    charsets.resolve_column(
                        d,
                        cs.as_deref(),
                        coll.as_deref(),
                        table_default.as_ref(),
                    );
                };
                for op in &at.operations {
                    match op {
                        AlterTableOperation::AddColumn {
                            column_def,
                            column_position,
                            ..
                        } => {
                            let exists = s
                                .columns
                                .iter()
                                .any(|c| c.name.eq_ignore_ascii_case(&column_def.name.value));
                            // The server adds an existing column only under IF NOT EXISTS
                            // (which MariaDB's syntax may have carried): nothing changes.
                            if exists {
                                continue;
                            }
                            let mut d = column_from_sql_type(
                                &column_def.name.value,
                                &column_def.data_type.to_string(),
                            );
                            let opts: Vec<ColumnOption> = column_def
                                .options
                                .iter()
                                .map(|o| o.option.clone())
                                .collect();
                            apply_column_options(&mut d, &opts, &mut keys.pk, &mut keys.uniques);
                            resolve(&mut d, &opts);
                            place_column(&mut s.columns, d, column_position.as_ref(), None);
                        }
                        AlterTableOperation::DropColumn { column_names, .. } => {
                            for n in column_names {
                                s.columns.retain(|c| !c.name.eq_ignore_ascii_case(&n.value));
                                keys.pk.retain(|c| !c.eq_ignore_ascii_case(&n.value));
                                keys.uniques.retain(|u| {
                                    !u.iter().any(|c| c.eq_ignore_ascii_case(&n.value))
                                });
                            }
                        }
                        AlterTableOperation::ModifyColumn {
                            col_name,
                            data_type,
                            options,
                            column_position,
                        } => {
                            let mut d =
                                column_from_sql_type(&col_name.value, &data_type.to_string());
                            apply_column_options(&mut d, options, &mut keys.pk, &mut keys.uniques);
                            resolve(&mut d, options);
                            keep_key_nullability(&mut d, &keys);
                            place_column(
                                &mut s.columns,
                                d,
                                column_position.as_ref(),
                                Some(&col_name.value),
                            );
                        }
                        AlterTableOperation::ChangeColumn {
                            old_name,
                            new_name,
                            data_type,
                            options,
                            column_position,
                        } => {
                            let mut d =
                                column_from_sql_type(&new_name.value, &data_type.to_string());
                            apply_column_options(&mut d, options, &mut keys.pk, &mut keys.uniques);
                            resolve(&mut d, options);
                            rename_key_column(&mut keys, &old_name.value, &new_name.value);
                            keep_key_nullability(&mut d, &keys);
                            place_column(
                                &mut s.columns,
                                d,
                                column_position.as_ref(),
                                Some(&old_name.value),
                            );
                        }
                        AlterTableOperation::RenameColumn {
                            old_column_name,
                            new_column_name,
                        } => {
                            if let Some(c) = s
                                .columns
                                .iter_mut()
                                .find(|c| c.name.eq_ignore_ascii_case(&old_column_name.value))
                            {
                                c.name = new_column_name.value.clone();
                            }
                            rename_key_column(
                                &mut keys,
                                &old_column_name.value,
                                &new_column_name.value,
                            );
                        }
                        AlterTableOperation::AddConstraint { constraint, .. } => {
                            if let TableConstraint::ForeignKey(fk) = constraint {
                                let (pdb, pt) = split_name(&fk.foreign_table, &db);
                                inf.sources.extend(self.find_id(&pdb, &pt, before));
                            }
                            apply_constraint(constraint, &mut keys, &mut s.columns)
                        }
                        AlterTableOperation::DropPrimaryKey { .. } => keys.pk.clear(),
                        AlterTableOperation::RenameTable { table_name } => {
                            let n = match table_name {
                                RenameTableNameKind::As(n) | RenameTableNameKind::To(n) => n,
                            };
                            // An unqualified new name is in the session's database.
                            let (ndb, nt) = split_name(n, default_db);
                            s.database = ndb.clone();
                            s.name = nt.clone();
                            renamed = Some(qualified(&ndb, &nt));
                        }
                        _ => {}
                    }
                }
                if let Some(to) = &convert {
                    self.charsets.convert_columns(&mut s.columns, to);
                }
                let (key_columns, unique_keys) = choose_key(&s.columns, &keys.pk, &keys.uniques);
                s.key_columns = key_columns;
                s.unique_keys = unique_keys;
                let (ndb, nt) = (s.database.clone(), s.name.clone());
                self.push_version(s, ts);
                let keys = crate::foreign_keys::of_alter(&at.operations, &db);
                if !keys.is_empty() {
                    self.foreign_keys.alter(id, ts, &t, keys);
                }
                if renamed.is_some() {
                    self.foreign_keys.renamed(id, (&db, &t), (&ndb, &nt), ts);
                }
                touched.push(id);
                if let Some(n) = renamed {
                    inf.renamed.push((id, n));
                    return Ok(Some(DdlKind::RenameTable));
                }
                inf.trigger = false;
                Ok(Some(DdlKind::AlterTable))
            }
            Statement::RenameTable(renames) => {
                // Renames apply in sequence (RENAME TABLE a TO tmp, b TO a, tmp TO b).
                let mut at = before;
                for r in renames {
                    let (odb, ot) = split_name(&r.old_name, default_db);
                    let (ndb, nt) = split_name(&r.new_name, default_db);
                    let id = self
                        .find_id(&odb, &ot, at)
                        .ok_or_else(|| format!("RENAME of unknown table {odb}.{ot}"))?;
                    let mut s = self.table_by_id_at(id, at).cloned().ok_or("no version")?;
                    s.database = ndb.clone();
                    s.name = nt.clone();
                    self.push_version(s, ts);
                    self.foreign_keys.renamed(id, (&odb, &ot), (&ndb, &nt), ts);
                    at = ts;
                    touched.push(id);
                    inf.renamed.retain(|(i, _)| *i != id);
                    inf.renamed.push((id, qualified(&ndb, &nt)));
                }
                Ok(Some(DdlKind::RenameTable))
            }
            Statement::Truncate(tr) => {
                for target in &tr.table_names {
                    let (db, t) = split_name(&target.name, default_db);
                    let Some(old) = self.find_id(&db, &t, before) else {
                        continue;
                    };
                    let mut s = self
                        .table_by_id_at(old, before)
                        .cloned()
                        .ok_or("no version")?;
                    self.close(old, ts);
                    s.table_id = TableId(ts);
                    self.push_version(s, ts);
                    self.foreign_keys.carry(old, TableId(ts), ts);
                    if let Some(cc) = self.charsets.tables.remove(&old) {
                        self.charsets.tables.insert(TableId(ts), cc);
                    }
                    inf.dropped.push(old);
                    inf.added.push((TableId(ts), qualified(&db, &t)));
                    touched.push(old);
                }
                Ok(Some(DdlKind::TruncateTable))
            }
            Statement::CreateView(_) => {
                inf.scope = InfluenceScope::All;
                Ok(Some(DdlKind::CreateView))
            }
            Statement::CreateIndex(ci) => {
                let (db, t) = split_name(&ci.table_name, default_db);
                let Some(id) = self.find_id(&db, &t, before) else {
                    return Ok(None);
                };
                let Some(mut s) = self.table_by_id_at(id, before).cloned() else {
                    return Ok(None);
                };
                if ci.unique {
                    let cols: Vec<String> = ci
                        .columns
                        .iter()
                        .map(|c| ident_of_index_expr(&c.column.expr))
                        .collect();
                    let mut keys = KeyNames {
                        pk: if s.key_columns.is_empty() {
                            vec![]
                        } else {
                            names_of(&s.columns, &s.key_columns)
                        },
                        uniques: s
                            .unique_keys
                            .iter()
                            .map(|u| names_of(&s.columns, u))
                            .collect(),
                    };
                    keys.uniques.push(cols);
                    let (k, u) = choose_key(&s.columns, &keys.pk, &keys.uniques);
                    s.key_columns = k;
                    s.unique_keys = u;
                }
                self.push_version(s, ts);
                touched.push(id);
                inf.trigger = false;
                Ok(Some(DdlKind::AlterTable))
            }
            _ => Ok(None),
        }
    }

    /// Records a new database; false when it already exists.
    fn create_database(&mut self, db: &str, ts: Ts, _if_not_exists: bool) -> bool {
        if self.database_exists(db, ts - 1) {
            return false;
        }
        self.databases
            .entry(db.to_string())
            .or_default()
            .push((ts, None));
        true
    }

    fn set_database_default(&mut self, db: &str, cc: Option<crate::charset::CharsetCollation>) {
        match cc {
            Some(cc) => self.charsets.databases.insert(db.to_string(), cc),
            None => self.charsets.databases.remove(db),
        };
    }
}

/// Adds `col` (or replaces the column named `replace`) at `pos`: in place when replacing
/// without a position, at the end when adding without one.
fn place_column(
    columns: &mut Vec<ColumnDef>,
    col: ColumnDef,
    pos: Option<&sqlparser::ast::MySQLColumnPosition>,
    replace: Option<&str>,
) {
    use sqlparser::ast::MySQLColumnPosition as P;
    let old = replace.and_then(|n| columns.iter().position(|c| c.name.eq_ignore_ascii_case(n)));
    if replace.is_some() && old.is_none() {
        // MODIFY/CHANGE IF EXISTS of a column that is not there: the server changed nothing.
        return;
    }
    match (old, pos) {
        (Some(i), None) => {
            columns[i] = col;
            return;
        }
        (Some(i), Some(_)) => {
            columns.remove(i);
        }
        _ => {}
    }
    match pos {
        Some(P::First) => columns.insert(0, col),
        Some(P::After(name)) => match columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(&name.value))
        {
            Some(i) => columns.insert(i + 1, col),
            None => columns.push(col),
        },
        None => {
            // MariaDB keeps the implicit system-versioning columns last.
            let at = columns.len() - implicit_period_columns(columns);
            columns.insert(at, col)
        }
    }
}

/// 2 when the table ends with the implicit `row_start`, `row_end` columns MariaDB adds for
/// `WITH SYSTEM VERSIONING` ([`crate::mariadb_sql`]), else 0.
fn implicit_period_columns(columns: &[ColumnDef]) -> usize {
    let implicit = |c: &ColumnDef, name: &str| {
        c.name == name && c.ty == ColumnType::Timestamp && c.decimals == 6 && !c.nullable
    };
    match columns {
        [.., s, e] if implicit(s, "row_start") && implicit(e, "row_end") => 2,
        _ => 0,
    }
}

/// A column of the primary key stays NOT NULL when redefined.
fn keep_key_nullability(d: &mut ColumnDef, keys: &KeyNames) {
    if keys.pk.iter().any(|n| n.eq_ignore_ascii_case(&d.name)) {
        d.nullable = false;
    }
}

fn rename_key_column(keys: &mut KeyNames, old: &str, new: &str) {
    for c in keys.pk.iter_mut().chain(keys.uniques.iter_mut().flatten()) {
        if c.eq_ignore_ascii_case(old) {
            *c = new.to_string();
        }
    }
}

fn apply_constraint(con: &TableConstraint, keys: &mut KeyNames, columns: &mut [ColumnDef]) {
    match con {
        TableConstraint::PrimaryKey(pk) => {
            keys.pk = pk
                .columns
                .iter()
                .map(|c| ident_of_index_expr(&c.column.expr))
                .collect();
            for c in columns.iter_mut() {
                if keys.pk.iter().any(|n| n.eq_ignore_ascii_case(&c.name)) {
                    c.nullable = false;
                }
            }
        }
        TableConstraint::Unique(u) => keys.uniques.push(
            u.columns
                .iter()
                .map(|c| ident_of_index_expr(&c.column.expr))
                .collect(),
        ),
        TableConstraint::Check(ch) => {
            let s = ch.to_string().to_ascii_lowercase();
            if let Some(i) = s.find("json_valid(") {
                let col = s[i + 11..]
                    .split(')')
                    .next()
                    .unwrap_or("")
                    .trim_matches('`')
                    .to_string();
                for c in columns
                    .iter_mut()
                    .filter(|c| c.name.eq_ignore_ascii_case(&col))
                {
                    c.ty = ColumnType::Json;
                }
            }
        }
        _ => {}
    }
}

/// What a sequence DDL does to the history's set of sequences.
#[derive(Debug, PartialEq)]
enum SequenceChange {
    Create,
    Alter,
    Drop,
}

/// A recognised `CREATE [OR REPLACE] [TEMPORARY] SEQUENCE [IF NOT EXISTS] name …`, `ALTER
/// SEQUENCE [IF EXISTS] name …` or `DROP [TEMPORARY] SEQUENCE [IF EXISTS] a[, b …]`.
#[derive(Debug, PartialEq)]
struct SequenceDdl {
    change: SequenceChange,
    temporary: bool,
    /// The names as written (`db.s` or `s`), parsed by the caller.
    names: Vec<String>,
}

fn sequence_statement(query: &str) -> Option<SequenceDdl> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let toks = Tokenizer::new(&MySqlDialect {}, query).tokenize().ok()?;
    let sig: Vec<&Token> = toks
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let up = |t: &Token| match t {
        Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
        _ => String::new(),
    };
    let change = match up(sig.first()?).as_str() {
        "CREATE" => SequenceChange::Create,
        "ALTER" => SequenceChange::Alter,
        "DROP" => SequenceChange::Drop,
        _ => return None,
    };
    let mut k = 1;
    let mut temporary = false;
    while matches!(up(sig.get(k)?).as_str(), "OR" | "REPLACE" | "TEMPORARY") {
        temporary |= up(sig.get(k)?) == "TEMPORARY";
        k += 1;
    }
    if up(sig.get(k)?) != "SEQUENCE" {
        return None;
    }
    k += 1;
    while matches!(up(sig.get(k)?).as_str(), "IF" | "NOT" | "EXISTS") {
        k += 1;
    }
    let mut names = Vec::new();
    loop {
        let mut name = sig.get(k)?.to_string();
        if matches!(sig.get(k + 1), Some(Token::Period)) {
            name.push('.');
            name.push_str(&sig.get(k + 2)?.to_string());
            k += 2;
        }
        names.push(name);
        k += 1;
        // Only DROP names several sequences.
        if change != SequenceChange::Drop || !matches!(sig.get(k), Some(Token::Comma)) {
            break;
        }
        k += 1;
    }
    Some(SequenceDdl {
        change,
        temporary,
        names,
    })
}

/// An ALTER TABLE with its table-option specifications removed.
struct StrippedAlter {
    query: String,
    /// The table name as written.
    table: String,
    specs_left: bool,
    /// The charset options among the removed specs.
    charset: AlterCharset,
}

/// Words that start an ALTER TABLE specification which sets a table option and changes no
/// column.
const TABLE_OPTION_WORDS: &[&str] = &[
    "ENGINE",
    "CHARSET",
    "CHARACTER",
    "COLLATE",
    "COMMENT",
    "AUTO_INCREMENT",
    "ROW_FORMAT",
    "ALGORITHM",
    "LOCK",
    "FORCE",
    "KEY_BLOCK_SIZE",
    "STATS_PERSISTENT",
    "STATS_AUTO_RECALC",
    "STATS_SAMPLE_PAGES",
    "CONVERT",
    "ORDER",
    "PAGE_CHECKSUM",
    "TRANSACTIONAL",
    "CHECKSUM",
    "DELAY_KEY_WRITE",
    "PACK_KEYS",
    "AVG_ROW_LENGTH",
    "MAX_ROWS",
    "MIN_ROWS",
    "INSERT_METHOD",
    "ENCRYPTED",
    "ENCRYPTION_KEY_ID",
    "PAGE_COMPRESSED",
    "PAGE_COMPRESSION_LEVEL",
    "SEQUENCE",
    "UNION",
];

/// Splits `ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] name spec, spec, ...` and drops the
/// table-option specs. `None` when the statement is not such an ALTER TABLE.
fn strip_alter_options(query: &str) -> Option<StrippedAlter> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let toks = Tokenizer::new(&MySqlDialect {}, query)
        .with_unescape(false)
        .tokenize()
        .ok()?;
    let sig: Vec<usize> = toks
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t, Token::Whitespace(_)))
        .map(|(i, _)| i)
        .collect();
    let word = |k: usize| -> Option<String> {
        match toks.get(*sig.get(k)?)? {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            _ => None,
        }
    };
    let mut k = 0;
    if word(k)? != "ALTER" {
        return None;
    }
    k += 1;
    while matches!(word(k).as_deref(), Some("ONLINE" | "IGNORE")) {
        k += 1;
    }
    if word(k).as_deref() != Some("TABLE") {
        return None;
    }
    k += 1;
    if word(k).as_deref() == Some("IF") {
        k += 2;
    }
    let name_start = *sig.get(k)?;
    k += 1;
    if sig
        .get(k)
        .is_some_and(|i| matches!(toks[*i], Token::Period))
    {
        k += 2;
    }
    let name_end = sig.get(k).copied().unwrap_or(toks.len());
    let mut specs: Vec<Vec<&Token>> = vec![Vec::new()];
    let mut depth = 0i32;
    for t in &toks[name_end..] {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                specs.push(Vec::new());
                continue;
            }
            Token::SemiColon | Token::EOF => continue,
            _ => {}
        }
        if let Some(last) = specs.last_mut() {
            last.push(t);
        }
    }
    let is_option = |spec: &[&Token]| -> bool {
        let words: Vec<String> = spec
            .iter()
            .filter_map(|t| match t {
                Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
                _ => None,
            })
            .take(2)
            .collect();
        match words.first().map(String::as_str) {
            Some("DEFAULT") => matches!(
                words.get(1).map(String::as_str),
                Some("CHARSET" | "CHARACTER" | "COLLATE")
            ),
            Some(w) => TABLE_OPTION_WORDS.contains(&w),
            None => true,
        }
    };
    let option_tokens: Vec<(Option<String>, String)> = specs
        .iter()
        .filter(|s| is_option(s))
        .flat_map(|s| s.iter())
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .map(|t| option_token(t))
        .collect();
    let keep: Vec<String> = specs
        .iter()
        .filter(|s| !is_option(s))
        .map(|s| {
            s.iter()
                .map(|t| t.to_string())
                .collect::<String>()
                .trim()
                .to_string()
        })
        .filter(|s| !s.is_empty())
        .collect();
    let head: String = toks[..name_end].iter().map(|t| t.to_string()).collect();
    let table: String = toks[name_start..name_end]
        .iter()
        .map(|t| t.to_string())
        .collect();
    Some(StrippedAlter {
        query: format!("{} {}", head.trim_end(), keep.join(", ")),
        table: table.trim().to_string(),
        specs_left: !keep.is_empty(),
        charset: scan_charset_options(&option_tokens),
    })
}

/// A token as [`scan_charset_options`] reads it: `(upper-cased keyword, text)`; quoted names and
/// strings lose their quotes.
fn option_token(t: &sqlparser::tokenizer::Token) -> (Option<String>, String) {
    use sqlparser::tokenizer::Token;
    match t {
        Token::Word(w) if w.quote_style.is_none() => {
            (Some(w.value.to_ascii_uppercase()), w.value.clone())
        }
        Token::Word(w) => (None, w.value.clone()),
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => (None, s.clone()),
        t => (None, t.to_string()),
    }
}

/// `ALTER {DATABASE|SCHEMA} [name] [DEFAULT] CHARACTER SET … [DEFAULT] COLLATE …` → the
/// database (the session's when unnamed) and its charset options. `None` for other statements.
fn alter_database_statement(query: &str, default_db: &str) -> Option<(String, CharsetOptions)> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let q = expand_executable_comments(query);
    let toks = Tokenizer::new(&MySqlDialect {}, &q).tokenize().ok()?;
    let sig: Vec<&Token> = toks
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon | Token::EOF))
        .collect();
    let keyword = |k: usize| match sig.get(k) {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
        _ => None,
    };
    if keyword(0).as_deref() != Some("ALTER")
        || !matches!(keyword(1).as_deref(), Some("DATABASE" | "SCHEMA"))
    {
        return None;
    }
    let options_start = matches!(
        keyword(2).as_deref(),
        Some("DEFAULT" | "CHARACTER" | "CHARSET" | "COLLATE" | "COMMENT" | "UPGRADE" | "READ")
    );
    let (db, rest) = match sig.get(2) {
        Some(Token::Word(w)) if !options_start => (w.value.clone(), 3),
        _ => (default_db.to_string(), 2),
    };
    let words: Vec<(Option<String>, String)> =
        sig.iter().skip(rest).map(|t| option_token(t)).collect();
    Some((db, scan_charset_options(&words).default))
}

/// `CREATE [OR REPLACE] [ALGORITHM = …] [DEFINER = …] [SQL SECURITY …] VIEW`, `ALTER … VIEW`
/// (both [`DdlKind::CreateView`]) and `DROP VIEW` ([`DdlKind::DropView`]), with the database
/// the (first) view's name gives; `None` for anything else. Views are not parsed: they change no
/// table the history tracks.
fn view_statement(query: &str) -> Option<(DdlKind, Option<String>)> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let toks = Tokenizer::new(&MySqlDialect {}, query).tokenize().ok()?;
    let sig: Vec<&Token> = toks
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    // Unquoted words upper-cased; quoted names and the values of the clauses before VIEW
    // (`DEFINER = 'u'@'h'`) are "?".
    let word = |t: &Token| match t {
        Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
        _ => String::from("?"),
    };
    let kind = match word(sig.first()?).as_str() {
        "CREATE" | "ALTER" => DdlKind::CreateView,
        "DROP" => DdlKind::DropView,
        _ => return None,
    };
    // A DEFINER's value: a user name and a host, unquoted words too (`root@localhost`).
    let mut definer_words = 0;
    let mut view_at = None;
    for (i, t) in sig.iter().enumerate().take(32).skip(1) {
        match word(t).as_str() {
            "VIEW" => {
                view_at = Some(i);
                break;
            }
            "DEFINER" => definer_words = 2,
            "OR" | "REPLACE" | "ALGORITHM" | "UNDEFINED" | "MERGE" | "TEMPTABLE" | "SQL"
            | "SECURITY" | "INVOKER" | "?" => {}
            _ if definer_words > 0 => definer_words -= 1,
            _ => return None,
        }
    }
    let mut k = view_at? + 1;
    while matches!(
        sig.get(k).map(|t| word(t)).as_deref(),
        Some("IF" | "NOT" | "EXISTS")
    ) {
        k += 1;
    }
    let db = match (sig.get(k), sig.get(k + 1), sig.get(k + 2)) {
        (Some(Token::Word(d)), Some(Token::Period), Some(Token::Word(_))) => Some(d.value.clone()),
        _ => None,
    };
    Some((kind, db))
}

/// Parses with sqlparser's MySQL dialect; a statement it rejects is tried again with the
/// synonyms it does not know rewritten ([`normalize_for_parser`]), so a statement that parses as
/// written is never rewritten (a column may be named `charset`).
fn parse_mysql(sql: &str) -> std::result::Result<Vec<Statement>, sqlparser::parser::ParserError> {
    let parse = |q: &str| sqlparser::parser::Parser::parse_sql(&MySqlDialect {}, q);
    parse(sql).or_else(|e| {
        let n = normalize_for_parser(sql);
        if n == sql {
            Err(e)
        } else {
            parse(&n).map_err(|_| e)
        }
    })
}

/// Rewrites what MariaDB accepts and sqlparser does not, where the meaning is the same:
/// `CHARSET` (a synonym of `CHARACTER SET`, also on columns) in CREATE/ALTER TABLE,
/// `PERSISTENT` right after a generated column's `AS (expr)` (MariaDB's word for `STORED`), and
/// `CREATE SCHEMA … CHARACTER SET …` (a synonym of CREATE DATABASE).
fn normalize_for_parser(sql: &str) -> String {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let words = leading_words(sql, 2);
    let create_schema =
        words.first().is_some_and(|w| w == "CREATE") && words.get(1).is_some_and(|w| w == "SCHEMA");
    if !create_schema && !is_create_or_alter_table(sql) {
        return sql.to_string();
    }
    let Ok(toks) = Tokenizer::new(&MySqlDialect {}, sql)
        .with_unescape(false)
        .tokenize()
    else {
        return sql.to_string();
    };
    let mut changed = false;
    let mut out = String::with_capacity(sql.len() + 16);
    let mut schema_done = !create_schema;
    let mut prev_paren = false;
    for t in &toks {
        let follows_paren = prev_paren;
        if !matches!(t, Token::Whitespace(_)) {
            prev_paren = matches!(t, Token::RParen);
        }
        match t {
            Token::Word(w) if w.quote_style.is_none() => {
                let up = w.value.to_ascii_uppercase();
                if up == "CHARSET" && !create_schema {
                    out.push_str("CHARACTER SET");
                    changed = true;
                    continue;
                }
                if up == "PERSISTENT" && follows_paren && !create_schema {
                    out.push_str("STORED");
                    changed = true;
                    continue;
                }
                if up == "SCHEMA" && !schema_done {
                    out.push_str("DATABASE");
                    schema_done = true;
                    changed = true;
                    continue;
                }
                out.push_str(&t.to_string());
            }
            t => out.push_str(&t.to_string()),
        }
    }
    if changed {
        out
    } else {
        sql.to_string()
    }
}

/// The server side of [`CharsetDefaults`] at the snapshot: `@@character_set_server` /
/// `@@collation_server`, every charset's default collation (`information_schema.COLLATIONS`,
/// then MariaDB 11.2+'s `@@character_set_collations`), what `utf8` means (`@@old_mode`) and
/// whether JSON is MariaDB's LONGTEXT alias.
async fn read_charset_defaults(conn: &mut mysql_async::Conn) -> Result<CharsetDefaults> {
    let e = CaptureError::from_mysql;
    let mut d = CharsetDefaults::default();
    let defaults: Vec<(Option<String>, Option<String>)> = conn
        .query(
            "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLLATIONS \
             WHERE IS_DEFAULT = 'Yes'",
        )
        .await
        .map_err(e)?;
    for (cs, coll) in defaults {
        if let (Some(cs), Some(coll)) = (cs, coll) {
            d.charset_collations
                .insert(cs.to_ascii_lowercase(), coll.to_ascii_lowercase());
        }
    }
    // Variables that not every server has: read one by one, tolerating errors.
    async fn var(conn: &mut mysql_async::Conn, name: &str) -> Option<String> {
        conn.query_first::<Option<String>, _>(format!("SELECT @@{name}"))
            .await
            .ok()
            .flatten()
            .flatten()
    }
    // `utf8` as the server spells it: MariaDB 10.6+ and MySQL 8.0.30+ report utf8mb3 (and
    // MariaDB's `utf8` is utf8mb4 when @@old_mode lacks UTF8_IS_UTF8MB3); older servers `utf8`.
    let mariadb = var(conn, "version")
        .await
        .is_some_and(|v| v.contains("MariaDB"));
    if d.charset_collations.contains_key("utf8mb3") {
        let utf8 = match var(conn, "old_mode").await {
            Some(m) if mariadb && !m.to_ascii_uppercase().contains("UTF8_IS_UTF8MB3") => "utf8mb4",
            _ => "utf8mb3",
        };
        d.aliases.insert("utf8".into(), utf8.into());
    } else if d.charset_collations.contains_key("utf8") {
        d.aliases.insert("utf8mb3".into(), "utf8".into());
    }
    if let Some(v) = var(conn, "character_set_collations").await {
        d.apply_character_set_collations(&v);
    }
    let server_cs = var(conn, "character_set_server").await;
    let server_coll = var(conn, "collation_server").await;
    d.server = d.resolve(server_cs.as_deref(), server_coll.as_deref(), None);
    if mariadb {
        d.json = d.resolve(Some("utf8mb4"), Some("utf8mb4_bin"), None);
    }
    Ok(d)
}

/// The partition layout of a table at the snapshot, from `SHOW CREATE TABLE` (one parser for
/// the snapshot and the DDLs read later). A layout Sluice cannot model is recorded as such.
async fn read_partitioning(
    conn: &mut mysql_async::Conn,
    db: &str,
    name: &str,
) -> Result<Partitioning> {
    let q = format!(
        "SHOW CREATE TABLE `{}`.`{}`",
        db.replace('`', "``"),
        name.replace('`', "``")
    );
    let row: Option<(String, String)> = conn
        .query_first(q)
        .await
        .map_err(CaptureError::from_mysql)?;
    let create = row.map(|r| r.1).unwrap_or_default();
    let (_, text) = split_partition_options(&expand_executable_comments(&create));
    let Some(text) = text else {
        return Ok(Partitioning::unsupported(
            "",
            &format!("no partition options found in SHOW CREATE TABLE {db}.{name}"),
        ));
    };
    Ok(Partitioning::parse(&text)
        .unwrap_or_else(|e| Partitioning::unsupported(&text, &e.to_string())))
}

/// The other table of `EXCHANGE PARTITION p WITH TABLE other [WITH|WITHOUT VALIDATION]`, as
/// written (possibly `db`.`t`).
fn exchange_partner(op: &str) -> Option<String> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let toks = Tokenizer::new(&MySqlDialect {}, op)
        .with_unescape(false)
        .tokenize()
        .ok()?;
    let sig: Vec<&Token> = toks
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let kw = |t: &Token, k: &str| matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(k));
    if !sig.first().is_some_and(|t| kw(t, "EXCHANGE")) {
        return None;
    }
    let at = sig
        .windows(2)
        .position(|w| kw(w[0], "WITH") && kw(w[1], "TABLE"))?;
    let mut name = String::new();
    for t in &sig[at + 2..] {
        match t {
            Token::Word(w)
                if w.quote_style.is_none()
                    && (w.value.eq_ignore_ascii_case("WITH")
                        || w.value.eq_ignore_ascii_case("WITHOUT")) =>
            {
                break
            }
            Token::Word(_) | Token::Period => name.push_str(&t.to_string()),
            _ => break,
        }
    }
    (!name.is_empty()).then_some(name)
}

/// True for `CREATE [OR REPLACE] [TEMPORARY] TABLE …` and `ALTER [ONLINE|IGNORE] TABLE …`, the
/// statements that may carry partition options.
fn is_create_or_alter_table(query: &str) -> bool {
    let words = leading_words(query, 5);
    let first = words.first().map(String::as_str).unwrap_or("");
    matches!(first, "CREATE" | "ALTER")
        && words
            .iter()
            .skip(1)
            .find(|w| {
                !matches!(
                    w.as_str(),
                    "OR" | "REPLACE" | "TEMPORARY" | "ONLINE" | "IGNORE"
                )
            })
            .is_some_and(|w| w == "TABLE")
}

/// The statement with MySQL's executable comments opened: `/*!50100 PARTITION BY … */` (and
/// MariaDB's `/*M!100100 … */`) is executed by the server, so its content is part of the
/// statement (as `mysqldump` and MySQL's `SHOW CREATE TABLE` write partition options). Quoted
/// text and ordinary comments are left as they are.
pub fn expand_executable_comments(sql: &str) -> String {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    let mut open = 0usize; // executable comments currently open
    let mut last = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"' | b'`') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    if b[i] == b'\\' && q != b'`' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'*') && matches!(b.get(i + 2), Some(b'!' | b'M')) => {
                let mut j = i + 2;
                if b[j] == b'M' {
                    if b.get(j + 1) != Some(&b'!') {
                        i += 2;
                        continue;
                    }
                    j += 1;
                }
                j += 1;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                out.push_str(&sql[last..i]);
                out.push(' ');
                last = j;
                i = j;
                open += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => match sql[i + 2..].find("*/") {
                Some(e) => i += e + 4,
                None => break,
            },
            b'*' if open > 0 && b.get(i + 1) == Some(&b'/') => {
                out.push_str(&sql[last..i]);
                out.push(' ');
                i += 2;
                last = i;
                open -= 1;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[last.min(sql.len())..]);
    out
}

/// The first `n` whitespace-separated words of a statement, upper-cased, after leading comments.
fn leading_words(query: &str, n: usize) -> Vec<String> {
    let mut q = query.trim_start();
    loop {
        if let Some(rest) = q.strip_prefix("/*") {
            match rest.find("*/") {
                Some(e) => q = rest[e + 2..].trim_start(),
                None => return Vec::new(),
            }
        } else if q.starts_with("--") || q.starts_with('#') {
            match q.find('\n') {
                Some(e) => q = q[e + 1..].trim_start(),
                None => return Vec::new(),
            }
        } else {
            break;
        }
    }
    q.split_whitespace()
        .take(n)
        .map(|w| w.to_ascii_uppercase())
        .collect()
}

/// True when a statement may change the tracked schema (table or database DDL). Everything
/// else in a QUERY event (GRANT, CREATE USER, FLUSH, procedures, ...) is ignored without
/// parsing, so an unparseable statement of that kind cannot stop capture.
pub fn is_schema_statement(query: &str) -> bool {
    let words = leading_words(query, 6);
    let first = words.first().map(String::as_str).unwrap_or("");
    let rest: Vec<&str> = words
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|w| {
            !matches!(
                *w,
                "OR" | "REPLACE"
                    | "IF"
                    | "NOT"
                    | "EXISTS"
                    | "ONLINE"
                    | "OFFLINE"
                    | "IGNORE"
                    | "UNIQUE"
                    | "FULLTEXT"
                    | "SPATIAL"
            )
        })
        .collect();
    let object = rest.first().copied().unwrap_or("");
    match first {
        "RENAME" | "TRUNCATE" => object == "TABLE" || first == "TRUNCATE",
        // ALTER DATABASE is handled before parsing (`alter_database_statement`).
        "ALTER" if matches!(object, "DATABASE" | "SCHEMA") => false,
        "CREATE" | "DROP" | "ALTER" => {
            matches!(object, "TABLE" | "DATABASE" | "SCHEMA" | "VIEW" | "INDEX")
                || (object.starts_with("ALGORITHM")
                    || object.starts_with("DEFINER")
                    || object.starts_with("SQL"))
                    && words.iter().any(|w| w == "VIEW")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::charset::charset_prefix;

    #[test]
    fn view_statements_are_recognised_with_their_clauses() {
        let create = Some(DdlKind::CreateView);
        for q in [
            "CREATE VIEW v AS SELECT 1",
            "CREATE OR REPLACE VIEW d.v AS SELECT 1",
            "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS select 1 AS `1`",
            "CREATE DEFINER=root@localhost VIEW v AS SELECT 1",
            "ALTER DEFINER = CURRENT_USER() SQL SECURITY INVOKER VIEW v AS SELECT 2",
            "ALTER ALGORITHM = MERGE VIEW v AS SELECT 2",
        ] {
            assert_eq!(view_statement(q).map(|v| v.0), create, "{q}");
        }
        assert_eq!(
            view_statement("DROP VIEW IF EXISTS v, w"),
            Some((DdlKind::DropView, None))
        );
        assert_eq!(
            view_statement("CREATE OR REPLACE VIEW `d 1`.v AS SELECT 1"),
            Some((DdlKind::CreateView, Some("d 1".to_string())))
        );
        assert_eq!(
            view_statement("DROP VIEW IF EXISTS x.v"),
            Some((DdlKind::DropView, Some("x".to_string())))
        );
        for q in [
            "CREATE TABLE view (a INT)",
            "CREATE TABLE t (view INT)",
            "CREATE DEFINER=`u`@`h` TRIGGER trg BEFORE INSERT ON t FOR EACH ROW SET NEW.view = 1",
            "DROP TABLE v",
        ] {
            assert_eq!(view_statement(q), None, "{q}");
        }
    }

    #[test]
    fn views_and_alter_database_are_trigger_events() {
        let mut h = h();
        apply(&mut h, 11, "CREATE DATABASE d");
        apply(&mut h, 12, "CREATE TABLE d.t (id INT PRIMARY KEY)");
        let v = apply(
            &mut h,
            13,
            "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS select `id` from `t`",
        );
        assert_eq!(v.kind, DdlKind::CreateView);
        assert_eq!(v.influence.scope, InfluenceScope::All);
        assert!(v.influence.trigger && v.influence.added.is_empty());
        let d = apply(&mut h, 14, "DROP VIEW v");
        assert_eq!(d.kind, DdlKind::DropView);
        assert_eq!(d.influence.scope, InfluenceScope::Tables(vec![]));
        let a = apply(&mut h, 15, "ALTER DATABASE d CHARACTER SET latin1");
        assert_eq!(a.kind, DdlKind::AlterDatabase);
        assert_eq!(a.influence.scope, InfluenceScope::Tables(vec![]));
        assert!(a.influence.trigger);
        // No table version, and the table is unchanged.
        assert_eq!(h.tables_at(F + 15).len(), 1);
        assert_eq!(h.ddls.len(), 5);
    }

    #[test]
    fn set_statement_ddl_is_applied_with_the_session_it_ran_under() {
        let mut h = h();
        apply(&mut h, 11, "CREATE DATABASE d");
        let session = DdlSession {
            sql_mode: Some("MAXDB".into()),
            ..DdlSession::default()
        };
        let ev = h
            .apply_in_session(
                F + 12,
                0,
                "d",
                "SET STATEMENT max_statement_time=10 FOR CREATE TABLE t (id INT PRIMARY KEY, ts TIMESTAMP)",
                &session,
            )
            .expect("apply")
            .expect("event");
        assert_eq!(ev.kind, DdlKind::CreateTable);
        assert_eq!(ev.session.as_deref(), Some(&session));
        assert_eq!(
            h.ddls.last().and_then(|d| d.session.as_deref()),
            Some(&session)
        );
        let types = |h: &SchemaHistory, t: &str, ts: u64| -> Vec<ColumnType> {
            let s = h.table_at("d", t, F + ts).expect("table");
            s.columns.iter().map(|c| c.ty).collect()
        };
        // MAXDB: TIMESTAMP is DATETIME, as the server made it; without it, TIMESTAMP.
        assert_eq!(types(&h, "t", 12), [ColumnType::Int, ColumnType::DateTime]);
        apply(&mut h, 13, "CREATE TABLE u (ts TIMESTAMP)");
        assert_eq!(types(&h, "u", 13), [ColumnType::Timestamp]);
    }

    const F: u64 = 1 << 32;

    fn h() -> SchemaHistory {
        SchemaHistory::empty(BinlogPos::new("mysql-bin.000001", 4))
    }

    fn apply(h: &mut SchemaHistory, ts: u64, q: &str) -> DdlEvent {
        h.apply(F + ts, 0, "d", q)
            .expect("apply")
            .expect("a ddl event")
    }

    #[test]
    fn sequence_ddl_is_tracked_and_replicated_by_the_trigger() {
        let mut h = h();
        apply(&mut h, 100, "CREATE DATABASE d");
        let e = apply(&mut h, 200, "CREATE SEQUENCE s1 START WITH 10 CACHE 5");
        assert_eq!(e.kind, DdlKind::Other);
        assert!(e.influence.trigger);
        assert_eq!(e.influence.scope, InfluenceScope::Tables(vec![]));
        assert!(h.is_sequence("d", "s1"));
        let e = apply(
            &mut h,
            300,
            "create or replace sequence if not exists other.s2",
        );
        assert_eq!(e.object_database.as_deref(), Some("other"));
        assert!(h.is_sequence("other", "s2"));
        let e = apply(&mut h, 400, "ALTER SEQUENCE IF EXISTS s1 RESTART 100");
        assert_eq!(e.query, "ALTER SEQUENCE IF EXISTS s1 RESTART 100");
        apply(
            &mut h,
            500,
            "CREATE TABLE t (id INT DEFAULT (NEXT VALUE FOR s1) PRIMARY KEY, a INT)",
        );
        assert_eq!(h.table_at("d", "t", F + 500).expect("t").key_columns, [0]);
        apply(
            &mut h,
            600,
            "DROP SEQUENCE `s1`, other.s2 /* generated by server */",
        );
        assert!(!h.is_sequence("d", "s1") && !h.is_sequence("other", "s2"));
        // A temporary sequence is the session's own: no event, not a captured sequence.
        let ev = h
            .apply(F + 700, 0, "d", "CREATE TEMPORARY SEQUENCE tmp")
            .expect("apply");
        assert!(ev.is_none());
        assert!(!h.is_sequence("d", "tmp"));
        assert_eq!(h.head, F + 700);
    }

    #[test]
    fn create_select_columns_are_named_as_the_server_logs_them() {
        let mut h = h();
        apply(&mut h, 100, "CREATE DATABASE d");
        // MariaDB logs CREATE … SELECT in row format as the full definition.
        apply(
            &mut h,
            200,
            "CREATE TABLE `t4` (\n  `id` int(11) NOT NULL,\n  `lead` varchar(6) NOT NULL,\n  \
             `we``ird` bigint(12) DEFAULT NULL,\n  `concat(s, repeat('x', 80))` varchar(90) DEFAULT NULL,\n  \
             `1 + 1` int(3) NOT NULL,\n  `(select 1)` int(1) NOT NULL,\n  `-v` bigint(12) DEFAULT NULL,\n  \
             `v is null` int(1) NOT NULL,\n  `v+1` bigint(12) DEFAULT NULL,\n  `now()` datetime NOT NULL\n)",
        );
        let t = h.table_at("d", "t4", F + 200).expect("t4");
        let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "id",
                "lead",
                "we`ird",
                "concat(s, repeat('x', 80))",
                "1 + 1",
                "(select 1)",
                "-v",
                "v is null",
                "v+1",
                "now()"
            ]
        );
    }

    #[test]
    fn ids_versions_and_influence() {
        let mut h = h();
        let e = apply(&mut h, 100, "CREATE DATABASE d");
        assert_eq!(e.kind, DdlKind::CreateDatabase);
        let e = apply(
            &mut h,
            200,
            "CREATE TABLE t (id INT NOT NULL, name VARCHAR(10), PRIMARY KEY (id))",
        );
        let t = TableId(F + 200);
        assert_eq!(e.influence.added, vec![(t, "d.t".to_string())]);
        assert!(e.influence.trigger);
        assert_eq!(
            h.table_at("d", "t", F + 200).expect("t").key_columns,
            vec![0]
        );
        assert!(
            h.table_at("d", "t", F + 199).is_none(),
            "not visible before its CREATE"
        );
        let e = apply(
            &mut h,
            300,
            "ALTER TABLE t ADD COLUMN j JSON, MODIFY name VARCHAR(20) NOT NULL",
        );
        assert_eq!(e.kind, DdlKind::AlterTable);
        assert_eq!(e.influence.scope, InfluenceScope::Tables(vec![t]));
        assert!(!e.influence.trigger);
        let s = h.table_at("d", "t", F + 300).expect("t");
        assert_eq!(s.columns.len(), 3);
        assert_eq!(s.columns[2].ty, ColumnType::Json);
        assert_eq!(s.version, F + 300);
        assert_eq!(
            h.table_at("d", "t", F + 250).expect("old").columns.len(),
            2,
            "old rows use the old schema"
        );
        let e = apply(&mut h, 400, "RENAME TABLE t TO u");
        assert_eq!(e.influence.renamed, vec![(t, "d.u".to_string())]);
        assert_eq!(
            h.table_at("d", "u", F + 400).expect("u").table_id,
            t,
            "RENAME keeps the id"
        );
        let e = apply(&mut h, 500, "TRUNCATE TABLE u");
        let t2 = TableId(F + 500);
        assert_eq!(e.influence.dropped, vec![t]);
        assert_eq!(e.influence.added, vec![(t2, "d.u".to_string())]);
        apply(&mut h, 600, "CREATE TABLE v LIKE u");
        let e = apply(&mut h, 700, "DROP TABLE `u` /* generated by server */");
        assert_eq!(e.influence.dropped, vec![t2]);
        let e = apply(&mut h, 800, "DROP DATABASE d");
        assert_eq!(e.influence.scope, InfluenceScope::Database("d".into()));
        assert_eq!(e.influence.dropped, vec![TableId(F + 600)]);
        assert!(h.tables_at(F + 800).is_empty());
        assert_eq!(h.tables_at(F + 650).len(), 2);
        assert_eq!(h.ddls_after(F + 500).len(), 3);
        // Idempotent by commit ts: a second reader applying the same DDL gets the same event.
        let again = h
            .apply(F + 400, 0, "d", "RENAME TABLE t TO u")
            .expect("apply")
            .expect("event");
        assert_eq!(again.influence.renamed, vec![(t, "d.u".to_string())]);
        // Persisted and loaded: identical.
        let back = SchemaHistory::from_json(&h.to_json().expect("json")).expect("parse");
        assert_eq!(back, h);
    }

    #[test]
    fn unique_not_null_key_and_non_schema_statements() {
        let mut h = h();
        apply(&mut h, 10, "CREATE TABLE t (a INT, b VARCHAR(5) NOT NULL, c INT NOT NULL, UNIQUE KEY (a), UNIQUE KEY uc (b, c))");
        let s = h.table_at("d", "t", F + 10).expect("t");
        assert_eq!(s.key_columns, vec![1, 2], "the not-null unique key routes");
        assert_eq!(s.unique_keys, vec![vec![0]]);
        assert!(h
            .apply(F + 20, 0, "d", "GRANT SELECT ON *.* TO 'x'@'%'")
            .expect("ok")
            .is_none());
        assert!(h
            .apply(F + 30, 0, "d", "FLUSH PRIVILEGES")
            .expect("ok")
            .is_none());
        assert!(h
            .apply(F + 40, 0, "d", "CREATE PROCEDURE p() BEGIN SELECT 1; END")
            .expect("ok")
            .is_none());
    }

    #[test]
    fn unparseable_ddl_follows_the_binlog_unless_skipped() {
        let mut h = h();
        let q = "ALTER TABLE t FROBNICATE (id) WITH ((10)";
        apply(&mut h, 10, "CREATE TABLE t (id INT PRIMARY KEY)");
        let before = h.clone();
        let id = h.table_at("d", "t", F + 10).expect("t").table_id;
        // Not skipped: an event for the table, a new version completed from the next TABLE_MAP.
        let ev = h
            .apply(F + 20, 0, "d", q)
            .expect("followed")
            .expect("an event");
        assert_eq!(ev.kind, DdlKind::AlterTable);
        assert_eq!(ev.influence.scope, InfluenceScope::Tables(vec![id]));
        let v = h.tables[&id].last().expect("version");
        assert!(v.from_binlog && v.from == F + 20, "{v:?}");
        assert_eq!(h.skipped.len(), 1);
        // A statement whose table cannot be named: every dispatcher stops at it.
        let ev = h
            .apply(F + 30, 0, "d", "CREATE TABLE")
            .expect("followed")
            .expect("an event");
        assert_eq!(ev.influence.scope, InfluenceScope::All);
        // Skipped by configuration: no event, nothing changes but the record.
        let mut h = before;
        h.skip_unparseable_ddl = true;
        assert!(h.apply(F + 20, 0, "d", q).expect("skipped").is_none());
        assert_eq!(h.skipped.len(), 1);
    }

    #[test]
    fn exchange_partition_stops_both_tables() {
        let mut h = h();
        apply(&mut h, 10, "CREATE TABLE t (id INT PRIMARY KEY) PARTITION BY RANGE (id) (PARTITION a VALUES LESS THAN (10), PARTITION b VALUES LESS THAN MAXVALUE)");
        apply(&mut h, 20, "CREATE TABLE `x y` (id INT PRIMARY KEY)");
        apply(&mut h, 25, "CREATE DATABASE e");
        apply(&mut h, 30, "CREATE TABLE e.z (id INT PRIMARY KEY)");
        let (t, xy, z) = (TableId(F + 10), TableId(F + 20), TableId(F + 30));
        let ev = apply(
            &mut h,
            40,
            "ALTER TABLE t EXCHANGE PARTITION a WITH TABLE `x y` WITHOUT VALIDATION",
        );
        assert_eq!(ev.influence.scope, InfluenceScope::Tables(vec![t, xy]));
        let ev = apply(
            &mut h,
            50,
            "alter table t exchange partition b with table e.z",
        );
        assert_eq!(ev.influence.scope, InfluenceScope::Tables(vec![t, z]));
        let ev = apply(&mut h, 60, "ALTER TABLE t TRUNCATE PARTITION a");
        assert_eq!(ev.influence.scope, InfluenceScope::Tables(vec![t]));
        assert_eq!(
            exchange_partner("EXCHANGE PARTITION p WITH TABLE `d`.`w`"),
            Some("`d`.`w`".into())
        );
        assert_eq!(exchange_partner("DROP PARTITION p"), None);
    }

    #[test]
    fn executable_comments_open_and_other_text_stays() {
        assert_eq!(
            expand_executable_comments(
                "CREATE TABLE t (id INT) /*!50100 PARTITION BY HASH (id) */"
            ),
            "CREATE TABLE t (id INT)   PARTITION BY HASH (id)  "
        );
        assert_eq!(
            expand_executable_comments("CREATE TABLE t (c VARCHAR(9) DEFAULT '/*!1 x */') /* PARTITION BY KEY () */ /*M!100100 ENGINE=InnoDB */"),
            "CREATE TABLE t (c VARCHAR(9) DEFAULT '/*!1 x */') /* PARTITION BY KEY () */   ENGINE=InnoDB  "
        );
        assert!(is_create_or_alter_table(
            "/* x */ CREATE OR REPLACE TABLE t (id INT)"
        ));
        assert!(is_create_or_alter_table(
            "alter online table t add partition (partition p9 values less than (9))"
        ));
        assert!(!is_create_or_alter_table("CREATE INDEX i ON t (a)"));
        assert!(!is_create_or_alter_table(
            "ALTER DATABASE d CHARSET utf8mb4"
        ));
    }

    #[test]
    fn partition_layouts_follow_create_and_alter() {
        let mut h = h();
        apply(
            &mut h,
            10,
            "CREATE TABLE t (id INT NOT NULL, v INT, PRIMARY KEY (id)) ENGINE=InnoDB \
             PARTITION BY RANGE (id) (PARTITION a VALUES LESS THAN (10), PARTITION b VALUES LESS THAN MAXVALUE)",
        );
        let names = |h: &SchemaHistory| -> Option<Vec<String>> {
            let s = h.table_at("d", "t", u64::MAX)?;
            s.partitioning
                .as_ref()
                .map(|p| p.partitions.iter().map(|d| d.name.clone()).collect())
        };
        let s = h.table_at("d", "t", F + 10).expect("t").clone();
        assert_eq!(
            s.columns.len(),
            2,
            "columns parsed past the partition clause"
        );
        assert_eq!(s.key_columns, vec![0]);
        assert_eq!(names(&h), Some(vec!["a".to_string(), "b".to_string()]));
        // A partition operation alone: a new version, same columns, new layout.
        let ev = apply(
            &mut h,
            20,
            "ALTER TABLE t REORGANIZE PARTITION b INTO (PARTITION b VALUES LESS THAN (20), PARTITION c VALUES LESS THAN MAXVALUE)",
        );
        assert_eq!(ev.kind, DdlKind::AlterTable);
        assert_eq!(ev.influence.scope, InfluenceScope::Tables(vec![s.table_id]));
        let v2 = h.table_at("d", "t", F + 20).expect("t");
        assert_eq!(v2.version, F + 20);
        assert_eq!(v2.columns, s.columns);
        assert_eq!(names(&h), Some(vec!["a".into(), "b".into(), "c".into()]));
        // Column changes and a partition operation in one ALTER.
        apply(
            &mut h,
            30,
            "ALTER TABLE t ADD COLUMN w INT, DROP PARTITION a",
        );
        assert_eq!(h.table_at("d", "t", F + 30).expect("t").columns.len(), 3);
        assert_eq!(names(&h), Some(vec!["b".into(), "c".into()]));
        // Column changes alone keep the layout; TRUNCATE PARTITION keeps it.
        apply(&mut h, 40, "ALTER TABLE t DROP COLUMN w");
        apply(&mut h, 50, "ALTER TABLE t TRUNCATE PARTITION b");
        assert_eq!(names(&h), Some(vec!["b".into(), "c".into()]));
        apply(&mut h, 60, "ALTER TABLE t REMOVE PARTITIONING");
        assert_eq!(names(&h), None);
        // The historical layouts stay readable by commit ts.
        let at = |ts: u64| {
            h.table_at("d", "t", F + ts)
                .and_then(|s| s.partitioning.clone())
                .map(|p| p.partitions.len())
        };
        assert_eq!(
            (at(10), at(20), at(30), at(60)),
            (Some(2), Some(3), Some(2), None)
        );
        // mysqldump's executable comment form and a layout Sluice cannot model: the table is
        // tracked, the layout says why rows cannot be placed.
        apply(
            &mut h,
            70,
            "CREATE TABLE u (id INT PRIMARY KEY) /*!50100 PARTITION BY HASH (id) PARTITIONS 3 */",
        );
        let u = h.table_at("d", "u", F + 70).expect("u");
        assert_eq!(u.partitioning.as_ref().map(|p| p.partitions.len()), Some(3));
        apply(&mut h, 80, "CREATE TABLE w (id INT PRIMARY KEY) PARTITION BY HASH (SOUNDEX_NOT_A_FUNCTION(id)) PARTITIONS 2");
        let w = h.table_at("d", "w", F + 80).expect("w tracked");
        let p = w.partitioning.as_ref().expect("partitioned");
        assert!(p.partition_of(w, &[sluice_types::Value::Int(1)]).is_err());
    }

    /// A history as a MariaDB 10.11 snapshot with `collation_server=utf8mb4_general_ci` makes it.
    fn hcs() -> SchemaHistory {
        let mut h = h();
        h.charsets = CharsetDefaults::mariadb("utf8mb4_general_ci");
        h
    }

    /// `(column, charset, collation)` of every column of `db.t` now.
    fn charsets_of(
        h: &SchemaHistory,
        db: &str,
        t: &str,
    ) -> Vec<(String, Option<String>, Option<String>)> {
        h.table_at(db, t, u64::MAX)
            .unwrap_or_else(|| panic!("{db}.{t}"))
            .columns
            .iter()
            .map(|c| (c.name.clone(), c.charset.clone(), c.collation.clone()))
            .collect()
    }

    /// `[("a", "latin1_swedish_ci"), ("h", "")]`: expected collations, `""` for no charset.
    fn expect(h: &SchemaHistory, db: &str, t: &str, want: &[(&str, &str)]) {
        let got: Vec<(String, String, String)> = charsets_of(h, db, t)
            .into_iter()
            .map(|(n, cs, co)| (n, cs.unwrap_or_default(), co.unwrap_or_default()))
            .collect();
        let want: Vec<(String, String, String)> = want
            .iter()
            .map(|(n, co)| {
                let cs = if co.is_empty() {
                    ""
                } else {
                    charset_prefix(co)
                };
                (n.to_string(), cs.to_string(), co.to_string())
            })
            .collect();
        assert_eq!(got, want, "{db}.{t}");
    }

    fn table_default(h: &SchemaHistory, db: &str, t: &str) -> Option<String> {
        let id = h.table_at(db, t, u64::MAX)?.table_id;
        h.charsets.tables.get(&id).and_then(|c| c.collation.clone())
    }

    fn db_default(h: &SchemaHistory, db: &str) -> Option<String> {
        h.charsets
            .databases
            .get(db)
            .and_then(|c| c.collation.clone())
    }

    #[test]
    fn charset_create_and_alter_database() {
        let mut h = hcs();
        apply(&mut h, 10, "CREATE DATABASE d0");
        apply(&mut h, 11, "CREATE DATABASE d1 CHARACTER SET latin1");
        apply(&mut h, 12, "CREATE DATABASE d2 COLLATE utf8mb4_bin");
        apply(
            &mut h,
            13,
            "CREATE DATABASE d3 DEFAULT CHARSET=utf8 COLLATE=utf8_unicode_ci",
        );
        apply(&mut h, 14, "CREATE SCHEMA d4 CHARACTER SET utf8");
        apply(
            &mut h,
            15,
            "CREATE DATABASE IF NOT EXISTS `d5` /*!40100 DEFAULT CHARACTER SET latin1 */",
        );
        let dbs = |h: &SchemaHistory| -> Vec<Option<String>> {
            ["d0", "d1", "d2", "d3", "d4", "d5"]
                .iter()
                .map(|d| db_default(h, d))
                .collect()
        };
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            dbs(&h),
            vec![
                s("utf8mb4_general_ci"),
                s("latin1_swedish_ci"),
                s("utf8mb4_bin"),
                s("utf8mb3_unicode_ci"),
                s("utf8mb3_general_ci"),
                s("latin1_swedish_ci")
            ]
        );
        // IF NOT EXISTS of an existing database changes nothing.
        apply(
            &mut h,
            16,
            "CREATE DATABASE IF NOT EXISTS d1 CHARACTER SET ascii",
        );
        assert_eq!(db_default(&h, "d1"), s("latin1_swedish_ci"));
        // ALTER DATABASE: new defaults, an event for the table trigger, no table version.
        apply(&mut h, 20, "CREATE TABLE d1.t (a CHAR(1))");
        let (ddls, versions) = (h.ddls.len(), h.tables.values().map(Vec::len).sum::<usize>());
        assert!(h
            .apply(F + 21, 0, "d", "ALTER DATABASE d1 CHARACTER SET utf8mb3")
            .expect("ok")
            .is_some_and(|e| e.kind == DdlKind::AlterDatabase));
        assert!(h
            .apply(F + 22, 0, "d2", "ALTER DATABASE COLLATE ascii_bin")
            .expect("ok")
            .is_some_and(|e| e.kind == DdlKind::AlterDatabase));
        assert!(h
            .apply(F + 23, 0, "d", "ALTER SCHEMA `d3` DEFAULT CHARACTER SET = latin1 DEFAULT COLLATE = latin1_general_cs")
            .expect("ok")
            .is_some_and(|e| e.kind == DdlKind::AlterDatabase));
        assert!(h
            .apply(F + 24, 0, "d", "ALTER DATABASE d0 COMMENT 'x'")
            .expect("ok")
            .is_some_and(|e| e.kind == DdlKind::AlterDatabase));
        assert_eq!(
            (h.ddls.len(), h.tables.values().map(Vec::len).sum::<usize>()),
            (ddls + 4, versions)
        );
        assert_eq!(h.head, F + 24);
        assert_eq!(
            dbs(&h)[..4].to_vec(),
            vec![
                s("utf8mb4_general_ci"),
                s("utf8mb3_general_ci"),
                s("ascii_bin"),
                s("latin1_general_cs")
            ]
        );
        expect(&h, "d1", "t", &[("a", "latin1_swedish_ci")]);
        apply(&mut h, 30, "CREATE TABLE d1.u (a CHAR(1))");
        expect(&h, "d1", "u", &[("a", "utf8mb3_general_ci")]);
        // DROP DATABASE forgets the default; a new database of that name takes the server's.
        apply(&mut h, 40, "DROP DATABASE d1");
        assert_eq!(db_default(&h, "d1"), None);
        assert!(
            h.charsets.tables.is_empty(),
            "the tables' defaults went with them"
        );
        apply(&mut h, 41, "CREATE DATABASE d1");
        assert_eq!(db_default(&h, "d1"), s("utf8mb4_general_ci"));
    }

    #[test]
    fn charset_create_table_columns() {
        // Every expectation below is what MariaDB 10.11 reports in information_schema.COLUMNS.
        let mut h = hcs();
        apply(&mut h, 101, "CREATE DATABASE d1 CHARACTER SET latin1");
        apply(
            &mut h,
            102,
            "CREATE TABLE d1.t1 (a CHAR(3), b VARCHAR(5) CHARACTER SET utf8mb4, c TEXT COLLATE latin1_bin, \
             d ENUM('x','y'), e SET('p','q') CHARACTER SET ascii, f VARCHAR(4) COLLATE utf8mb4_unicode_ci, \
             g JSON, h BLOB, i VARBINARY(3), j BINARY(2), k NCHAR(2), l NVARCHAR(3), p VARCHAR(3) CHARACTER SET binary, \
             q TEXT CHARSET latin1, r LONGTEXT, s TINYTEXT, u MEDIUMTEXT CHARACTER SET utf8 COLLATE utf8_bin, \
             v INT, w VARCHAR(2) CHARACTER SET 'utf8mb4' COLLATE `utf8mb4_nopad_bin`, x LONGTEXT CHECK (json_valid(x)))",
        );
        expect(
            &h,
            "d1",
            "t1",
            &[
                ("a", "latin1_swedish_ci"),
                ("b", "utf8mb4_general_ci"),
                ("c", "latin1_bin"),
                ("d", "latin1_swedish_ci"),
                ("e", "ascii_general_ci"),
                ("f", "utf8mb4_unicode_ci"),
                ("g", "utf8mb4_bin"),
                ("h", ""),
                ("i", ""),
                ("j", ""),
                ("k", "utf8mb3_general_ci"),
                ("l", "utf8mb3_general_ci"),
                ("p", ""),
                ("q", "latin1_swedish_ci"),
                ("r", "latin1_swedish_ci"),
                ("s", "latin1_swedish_ci"),
                ("u", "utf8mb3_bin"),
                ("v", ""),
                ("w", "utf8mb4_nopad_bin"),
                ("x", "latin1_swedish_ci"),
            ],
        );
        let t1 = h.table_at("d1", "t1", u64::MAX).expect("t1");
        assert_eq!(
            (t1.columns[12].ty, t1.columns[12].sql_type.as_str()),
            (ColumnType::VarBinary, "varbinary(3)")
        );
        assert_eq!(t1.columns[19].ty, ColumnType::Json);
        assert_eq!(
            table_default(&h, "d1", "t1").as_deref(),
            Some("latin1_swedish_ci")
        );
        // Table options: charset alone, collation alone, both, DEFAULT, binary.
        apply(
            &mut h,
            103,
            "CREATE TABLE d1.t2 (a CHAR(3), b VARCHAR(3) CHARACTER SET latin1) CHARSET=utf8mb4",
        );
        expect(
            &h,
            "d1",
            "t2",
            &[("a", "utf8mb4_general_ci"), ("b", "latin1_swedish_ci")],
        );
        apply(&mut h, 104, "CREATE TABLE d1.t3 (a CHAR(3), b VARCHAR(3) CHARACTER SET latin1) COLLATE=utf8mb4_unicode_ci");
        expect(
            &h,
            "d1",
            "t3",
            &[("a", "utf8mb4_unicode_ci"), ("b", "latin1_swedish_ci")],
        );
        apply(&mut h, 105, "CREATE TABLE d1.t4 (a CHAR(3), b VARCHAR(3) COLLATE latin1_german1_ci) ENGINE=InnoDB DEFAULT CHARACTER SET = utf8 COLLATE = utf8_bin");
        expect(
            &h,
            "d1",
            "t4",
            &[("a", "utf8mb3_bin"), ("b", "latin1_german1_ci")],
        );
        assert_eq!(
            table_default(&h, "d1", "t4").as_deref(),
            Some("utf8mb3_bin")
        );
        apply(
            &mut h,
            106,
            "CREATE TABLE d1.t5 (a CHAR(3), g JSON) CHARSET latin1",
        );
        expect(
            &h,
            "d1",
            "t5",
            &[("a", "latin1_swedish_ci"), ("g", "utf8mb4_bin")],
        );
        apply(
            &mut h,
            107,
            "CREATE TABLE d1.t6 (a CHAR(3) COLLATE utf8mb4_bin) CHARSET latin1",
        );
        expect(&h, "d1", "t6", &[("a", "utf8mb4_bin")]);
        apply(
            &mut h,
            108,
            "CREATE TABLE d1.t7 (a CHAR(2)) CHARSET=DEFAULT",
        );
        expect(&h, "d1", "t7", &[("a", "latin1_swedish_ci")]);
        apply(
            &mut h,
            109,
            "CREATE TABLE d1.t8 (a TEXT, b VARCHAR(3), c ENUM('a')) CHARSET=binary",
        );
        expect(&h, "d1", "t8", &[("a", ""), ("b", ""), ("c", "binary")]);
        let t8 = h.table_at("d1", "t8", u64::MAX).expect("t8");
        assert_eq!(
            t8.columns.iter().map(|c| c.ty).collect::<Vec<_>>(),
            vec![ColumnType::Blob, ColumnType::VarBinary, ColumnType::Enum]
        );
        // A table in a database whose default collation is not its charset's default.
        apply(&mut h, 110, "CREATE DATABASE e1 COLLATE latin1_german1_ci");
        apply(
            &mut h,
            111,
            "CREATE TABLE e1.b1 (a CHAR(3), b CHAR(3) CHARACTER SET latin1)",
        );
        expect(
            &h,
            "e1",
            "b1",
            &[("a", "latin1_german1_ci"), ("b", "latin1_swedish_ci")],
        );
        apply(&mut h, 112, "CREATE TABLE e1.b2 (a CHAR(3), b CHAR(3) CHARACTER SET latin1) CHARSET=latin1 COLLATE=latin1_bin");
        expect(
            &h,
            "e1",
            "b2",
            &[("a", "latin1_bin"), ("b", "latin1_swedish_ci")],
        );
        apply(&mut h, 113, "CREATE TABLE e1.b3 (a CHAR(3)) CHARSET=latin1");
        expect(&h, "e1", "b3", &[("a", "latin1_swedish_ci")]);
        // LIKE copies the columns and the table default.
        apply(&mut h, 114, "CREATE TABLE e1.b4 LIKE e1.b2");
        expect(
            &h,
            "e1",
            "b4",
            &[("a", "latin1_bin"), ("b", "latin1_swedish_ci")],
        );
        apply(&mut h, 115, "ALTER TABLE e1.b4 ADD COLUMN c VARCHAR(2)");
        expect(
            &h,
            "e1",
            "b4",
            &[
                ("a", "latin1_bin"),
                ("b", "latin1_swedish_ci"),
                ("c", "latin1_bin"),
            ],
        );
        // The session's database when the table is unqualified.
        h.apply(F + 116, 0, "e1", "CREATE TABLE b5 (a VARCHAR(1))")
            .expect("ok");
        expect(&h, "e1", "b5", &[("a", "latin1_german1_ci")]);
    }

    #[test]
    fn charset_alter_table() {
        let mut h = hcs();
        apply(&mut h, 101, "CREATE DATABASE d1 CHARACTER SET latin1");
        let q = |h: &mut SchemaHistory, ts: u64, sql: &str| {
            h.apply(F + ts, 0, "d1", sql)
                .expect("apply")
                .expect("event")
        };
        // A new default applies to the columns defined in the same statement.
        q(
            &mut h,
            102,
            "CREATE TABLE a3 (a CHAR(3), b TEXT, c VARCHAR(3)) CHARSET latin1",
        );
        q(
            &mut h,
            103,
            "ALTER TABLE a3 DEFAULT CHARSET=utf8mb4, ADD COLUMN d VARCHAR(3), MODIFY b TINYTEXT",
        );
        expect(
            &h,
            "d1",
            "a3",
            &[
                ("a", "latin1_swedish_ci"),
                ("b", "utf8mb4_general_ci"),
                ("c", "latin1_swedish_ci"),
                ("d", "utf8mb4_general_ci"),
            ],
        );
        // COLLATE alone (an options-only ALTER: an event, no new version).
        let versions = h.tables.values().map(Vec::len).sum::<usize>();
        let ev = q(&mut h, 104, "ALTER TABLE a3 COLLATE utf8mb4_unicode_ci");
        assert_eq!(ev.kind, DdlKind::AlterTable);
        assert_eq!(h.tables.values().map(Vec::len).sum::<usize>(), versions);
        assert_eq!(
            table_default(&h, "d1", "a3").as_deref(),
            Some("utf8mb4_unicode_ci")
        );
        q(
            &mut h,
            105,
            "ALTER TABLE a3 ADD COLUMN e CHAR(1), CHANGE c c2 VARCHAR(4) CHARACTER SET latin1",
        );
        expect(
            &h,
            "d1",
            "a3",
            &[
                ("a", "latin1_swedish_ci"),
                ("b", "utf8mb4_general_ci"),
                ("c2", "latin1_swedish_ci"),
                ("d", "utf8mb4_general_ci"),
                ("e", "utf8mb4_unicode_ci"),
            ],
        );
        // CHARSET alone resets the collation to the charset's default.
        q(
            &mut h,
            106,
            "CREATE TABLE b5 (a CHAR(3)) CHARSET utf8mb4 COLLATE utf8mb4_bin",
        );
        q(&mut h, 107, "ALTER TABLE b5 CHARSET utf8mb4");
        q(
            &mut h,
            108,
            "ALTER TABLE b5 ADD COLUMN b CHAR(2), ADD COLUMN c CHAR(2) CHARSET latin1",
        );
        expect(
            &h,
            "d1",
            "b5",
            &[
                ("a", "utf8mb4_bin"),
                ("b", "utf8mb4_general_ci"),
                ("c", "latin1_swedish_ci"),
            ],
        );
        // MODIFY redefines a column from the table default, whatever it had.
        q(
            &mut h,
            109,
            "CREATE TABLE b9 (a CHAR(3) COLLATE latin1_bin) CHARSET ascii",
        );
        q(&mut h, 110, "ALTER TABLE b9 MODIFY a CHAR(3)");
        expect(&h, "d1", "b9", &[("a", "ascii_general_ci")]);
        // CONVERT TO: every charset column but binary ones, JSON too; TEXT stays text.
        q(&mut h, 111, "CREATE TABLE a1 (a CHAR(3), b TEXT, c ENUM('x'), d VARCHAR(3) COLLATE latin1_bin, e BLOB, g JSON, h VARCHAR(10) CHARACTER SET utf8mb4, i SET('a') CHARACTER SET binary, n INT) CHARSET latin1");
        let before = h.table_at("d1", "a1", u64::MAX).expect("a1").version;
        q(
            &mut h,
            112,
            "ALTER TABLE a1 CONVERT TO CHARACTER SET utf8mb4",
        );
        let a1 = h.table_at("d1", "a1", u64::MAX).expect("a1");
        assert!(a1.version > before, "CONVERT TO alone makes a new version");
        assert_eq!(a1.columns[5].ty, ColumnType::Json);
        expect(
            &h,
            "d1",
            "a1",
            &[
                ("a", "utf8mb4_general_ci"),
                ("b", "utf8mb4_general_ci"),
                ("c", "utf8mb4_general_ci"),
                ("d", "utf8mb4_general_ci"),
                ("e", ""),
                ("g", "utf8mb4_general_ci"),
                ("h", "utf8mb4_general_ci"),
                ("i", "binary"),
                ("n", ""),
            ],
        );
        assert_eq!(
            table_default(&h, "d1", "a1").as_deref(),
            Some("utf8mb4_general_ci")
        );
        q(
            &mut h,
            113,
            "CREATE TABLE a4 (a CHAR(3), b VARCHAR(3)) CHARSET utf8mb4",
        );
        q(
            &mut h,
            114,
            "ALTER TABLE a4 CONVERT TO CHARACTER SET latin1 COLLATE latin1_bin",
        );
        expect(&h, "d1", "a4", &[("a", "latin1_bin"), ("b", "latin1_bin")]);
        q(&mut h, 115, "ALTER TABLE a4 CONVERT TO CHARSET DEFAULT");
        expect(
            &h,
            "d1",
            "a4",
            &[("a", "latin1_swedish_ci"), ("b", "latin1_swedish_ci")],
        );
        // CONVERT TO wins over the columns of the same statement, whatever the order.
        q(&mut h, 116, "CREATE TABLE c3 (a VARCHAR(3)) CHARSET=latin1");
        q(&mut h, 117, "ALTER TABLE c3 ADD COLUMN b VARCHAR(3), CONVERT TO CHARACTER SET utf8mb4, MODIFY a VARCHAR(3) CHARACTER SET ascii");
        expect(
            &h,
            "d1",
            "c3",
            &[("a", "utf8mb4_general_ci"), ("b", "utf8mb4_general_ci")],
        );
        // Table-default-only ALTER leaves the columns; later columns take it.
        q(
            &mut h,
            118,
            "CREATE TABLE a6 (a CHAR(3), b VARCHAR(3) CHARACTER SET latin1) CHARSET utf8mb4",
        );
        q(&mut h, 119, "ALTER TABLE a6 CHARACTER SET latin1");
        q(&mut h, 120, "ALTER TABLE a6 ADD COLUMN c CHAR(2)");
        expect(
            &h,
            "d1",
            "a6",
            &[
                ("a", "utf8mb4_general_ci"),
                ("b", "latin1_swedish_ci"),
                ("c", "latin1_swedish_ci"),
            ],
        );
        // CONVERT TO with an explicit default: columns converted, the default as written.
        q(&mut h, 121, "CREATE TABLE q5 (a CHAR(3)) CHARSET utf8mb4");
        q(
            &mut h,
            122,
            "ALTER TABLE q5 DEFAULT CHARSET ascii, CONVERT TO CHARACTER SET latin1",
        );
        q(&mut h, 123, "ALTER TABLE q5 ADD COLUMN b CHAR(1)");
        expect(
            &h,
            "d1",
            "q5",
            &[("a", "latin1_swedish_ci"), ("b", "ascii_general_ci")],
        );
        // CONVERT TO binary: the binary types.
        q(
            &mut h,
            124,
            "ALTER TABLE a6 CONVERT TO CHARACTER SET binary",
        );
        let a6 = h.table_at("d1", "a6", u64::MAX).expect("a6");
        assert_eq!(
            a6.columns
                .iter()
                .map(|c| (c.ty, c.sql_type.as_str(), c.charset.is_none()))
                .collect::<Vec<_>>(),
            vec![
                (ColumnType::Binary, "binary(3)", true),
                (ColumnType::VarBinary, "varbinary(3)", true),
                (ColumnType::Binary, "binary(2)", true)
            ]
        );
        // Options among other table options, with the ENGINE first.
        q(&mut h, 125, "CREATE TABLE o (a CHAR(1))");
        q(
            &mut h,
            126,
            "ALTER TABLE o ENGINE=InnoDB DEFAULT CHARSET=ascii",
        );
        q(&mut h, 127, "ALTER TABLE o ADD COLUMN b CHAR(1)");
        expect(
            &h,
            "d1",
            "o",
            &[("a", "latin1_swedish_ci"), ("b", "ascii_general_ci")],
        );
        // TRUNCATE (a new id) and RENAME keep the default; DROP forgets it.
        q(&mut h, 128, "TRUNCATE TABLE o");
        q(&mut h, 129, "RENAME TABLE o TO o2");
        q(&mut h, 130, "ALTER TABLE o2 ADD COLUMN c CHAR(1)");
        expect(
            &h,
            "d1",
            "o2",
            &[
                ("a", "latin1_swedish_ci"),
                ("b", "ascii_general_ci"),
                ("c", "ascii_general_ci"),
            ],
        );
        let n = h.charsets.tables.len();
        q(&mut h, 131, "DROP TABLE o2");
        assert_eq!(h.charsets.tables.len(), n - 1);
        // Partition operations and CONVERT TO in one options-only ALTER.
        q(&mut h, 132, "CREATE TABLE p (id INT NOT NULL, code VARCHAR(3)) CHARSET latin1 PARTITION BY LIST COLUMNS (code) (PARTITION a VALUES IN ('a'), PARTITION b VALUES IN ('b'))");
        q(
            &mut h,
            133,
            "ALTER TABLE p CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        );
        let p = h.table_at("d1", "p", u64::MAX).expect("p");
        assert_eq!(p.columns[1].collation.as_deref(), Some("utf8mb4_bin"));
        assert!(p.partitioning.is_some(), "the layout stays");
    }

    #[test]
    fn charset_synonyms_do_not_break_columns_named_charset() {
        let mut h = hcs();
        apply(&mut h, 101, "CREATE DATABASE d1 CHARACTER SET latin1");
        apply(
            &mut h,
            102,
            "CREATE TABLE d1.t (charset VARCHAR(3), b CHAR(1))",
        );
        apply(
            &mut h,
            103,
            "ALTER TABLE d1.t ADD COLUMN c CHAR(1) CHARSET ascii, CHARSET utf8mb4",
        );
        apply(&mut h, 104, "ALTER TABLE d1.t MODIFY charset VARCHAR(4)");
        expect(
            &h,
            "d1",
            "t",
            &[
                ("charset", "utf8mb4_general_ci"),
                ("b", "latin1_swedish_ci"),
                ("c", "ascii_general_ci"),
            ],
        );
    }

    #[test]
    fn charset_history_persists_and_old_histories_load() {
        let mut h = hcs();
        apply(&mut h, 101, "CREATE DATABASE d1 CHARACTER SET latin1");
        apply(&mut h, 102, "CREATE TABLE d1.t (a CHAR(1))");
        let back = SchemaHistory::from_json(&h.to_json().expect("json")).expect("parse");
        assert_eq!(back, h);
        // A history persisted before `charsets` existed loads; without defaults, string columns
        // of later DDLs keep only what the DDL says (the charset's compiled-in default).
        let mut v: serde_json::Value =
            serde_json::from_slice(&h.to_json().expect("json")).expect("value");
        v.as_object_mut().expect("object").remove("charsets");
        let mut old =
            SchemaHistory::from_json(&serde_json::to_vec(&v).expect("bytes")).expect("old loads");
        assert_eq!(old.charsets, CharsetDefaults::default());
        apply(&mut old, 103, "CREATE TABLE d1.u (a CHAR(1), b CHAR(1) CHARACTER SET latin1, c CHAR(1) COLLATE utf8mb4_bin)");
        expect(
            &old,
            "d1",
            "u",
            &[("a", ""), ("b", "latin1_swedish_ci"), ("c", "utf8mb4_bin")],
        );
    }

    #[test]
    fn elements_and_types_parse() {
        let c = column_from_sql_type("e", "enum('a','b''c','d,e')");
        assert_eq!(c.elements, vec!["a", "b'c", "d,e"]);
        let c = column_from_sql_type("x", "decimal(10,2) unsigned");
        assert_eq!(
            (c.ty, c.decimals, c.unsigned),
            (ColumnType::Decimal, 2, true)
        );
        assert!(is_schema_statement(
            "/* x */ CREATE OR REPLACE TABLE t (a int)"
        ));
        assert!(!is_schema_statement("CREATE USER x"));
    }
}
