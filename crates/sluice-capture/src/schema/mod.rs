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
//! - an unparseable DDL is a [`CaptureError::Ddl`](crate::error::CaptureError::Ddl) and leaves the history unchanged, unless
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
//!
//! Layout (one `impl SchemaHistory` spread over the files of this folder, by concern):
//! `mod.rs` the history's state and its queries by commit ts; `snapshot.rs` reading it from
//! `information_schema`; `apply.rs` applying one binlog statement (the event it makes, the DDLs
//! the table trigger writes, unparseable statements); `statements.rs` one parsed statement per
//! kind; `columns.rs` column definitions, keys and constraints; `sql_text.rs` recognising and
//! rewriting statement text before sqlparser; `store.rs` persistence.

mod apply;
mod columns;
mod snapshot;
mod sql_text;
mod statements;
mod store;
#[cfg(test)]
mod tests;

pub use columns::{column_from_sql_type, generation_from_extra};
pub use sql_text::{expand_executable_comments, is_schema_statement};
pub use store::{FileSchemaStore, SchemaStore, StoreFuture};

use crate::charset::CharsetDefaults;
use crate::pos::BinlogPos;
use columns::implicit_period_columns;
use serde::{Deserialize, Serialize};
use sluice_types::{DdlEvent, Generation, TableId, TableSchema, Ts};
use sqlparser::ast::ObjectName;
use std::collections::BTreeMap;

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

pub(super) fn qualified(db: &str, name: &str) -> String {
    format!("{db}.{name}")
}

/// `db.table` of an object name, defaulting the database to `default_db`.
pub(super) fn split_name(name: &ObjectName, default_db: &str) -> (String, String) {
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

    pub(super) fn version_at(versions: &[TableVersion], ts: Ts) -> Option<&TableSchema> {
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

    pub(super) fn index_name(&mut self, id: TableId, db: &str, name: &str) {
        let ids = self.names.entry(qualified(db, name)).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }

    /// The table with id `id` at `ts`.
    pub fn table_by_id_at(&self, id: TableId, ts: Ts) -> Option<&TableSchema> {
        self.tables.get(&id).and_then(|v| Self::version_at(v, ts))
    }

    /// Whether the version of table `id` at `ts` is still to be completed from the binlog (made
    /// by a DDL the history could not parse; its first TABLE_MAP completes it in place, under
    /// the same version ts): a copy of it must not be kept as the version's definition.
    pub fn is_awaiting_binlog(&self, id: TableId, ts: Ts) -> bool {
        self.tables
            .get(&id)
            .and_then(|v| v.iter().rev().find(|v| v.from <= ts))
            .is_some_and(|v| v.from_binlog)
    }

    /// DDLs with commit ts `> ts`, in order.
    pub fn ddls_after(&self, ts: Ts) -> &[DdlEvent] {
        let i = self.ddls.partition_point(|d| d.commit_ts <= ts);
        &self.ddls[i..]
    }

    pub(super) fn database_exists(&self, db: &str, ts: Ts) -> bool {
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

    pub(super) fn close(&mut self, id: TableId, ts: Ts) {
        if let Some(v) = self.tables.get_mut(&id).and_then(|v| v.last_mut()) {
            if v.to.is_none() {
                v.to = Some(ts);
            }
        }
    }

    pub(super) fn push_version(&mut self, mut schema: TableSchema, ts: Ts) {
        schema.version = ts;
        mark_implicit_period(&mut schema);
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
}

/// MariaDB's implicit system-versioning columns are generated (the server sets them): never
/// written to a downstream, flagged in schema files.
pub(crate) fn mark_implicit_period(schema: &mut TableSchema) {
    let from = schema.columns.len() - implicit_period_columns(&schema.columns);
    let period = [Generation::RowStart, Generation::RowEnd];
    for (c, g) in schema.columns[from..].iter_mut().zip(period) {
        c.generated = Some(g);
    }
}
