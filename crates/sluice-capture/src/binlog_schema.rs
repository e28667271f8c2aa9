//! Table definitions taken from the binlog itself, so one table's DDL never stops capture.
//!
//! With `binlog_row_metadata=FULL` every TABLE_MAP event carries the column names, types,
//! nullability, charsets, ENUM/SET members and the primary key of the table its rows belong to:
//! everything capture needs to key and describe those rows. This module uses it in two places:
//!
//! - **A DDL the history cannot parse** (`SchemaHistory::follow_unparsed`): when the statement
//!   names the table it creates or alters (`CREATE [OR REPLACE] TABLE t …`, `ALTER [ONLINE]
//!   [IGNORE] TABLE t …`, `CREATE … INDEX … ON t`, `DROP INDEX … ON t`), the DDL still becomes an
//!   event for that table (the downstream gets the statement as the upstream logged it), and the
//!   table's new version is marked *from the binlog*: its definition is completed from the first
//!   TABLE_MAP of the table after the DDL. A statement whose table cannot be named becomes an
//!   event that every dispatcher stops at (nothing is lost or reordered around it) and changes no
//!   table; the next check below repairs any table it changed.
//! - **A history that disagrees with the binlog** ([`SchemaHistory::settle_from_binlog`]): when a
//!   TABLE_MAP's columns differ from the history's version of the table (names, count,
//!   storage shape or signedness), the history was wrong about it (a DDL it misread). Rows are
//!   never keyed or described with the wrong definition: a new version is made from the TABLE_MAP at the rows' commit ts and the
//!   repair is recorded in [`SchemaHistory::repairs`] (logged and counted by the server).
//!
//! Invariants: a version made here carries over, column by column, what the history knew of a
//! column with the same name and a compatible type (the full SQL type, JSON-ness, collation
//! names), so only what the history did not know comes from the binlog; the result is a pure
//! function of the binlog, so every node that reads the same binlog makes the same versions.

use crate::decode::TableMeta;
use crate::schema::{SchemaHistory, SkippedDdl};
use serde::{Deserialize, Serialize};
use sluice_types::{
    ColumnDef, ColumnType, DdlEvent, DdlInfluence, DdlKind, InfluenceScope, TableId, TableSchema,
    Ts,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

/// At most this many repairs are remembered in the history (the newest are kept).
pub const MAX_REPAIRS_KEPT: usize = 256;

/// A table version the history had to take from the binlog because its own was wrong.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchemaRepair {
    /// The commit ts of the rows whose TABLE_MAP disagreed (the new version's ts).
    pub ts: Ts,
    /// `db.table`
    pub table: String,
    pub history_columns: Vec<String>,
    pub binlog_columns: Vec<String>,
}

/// What an unparsed DDL does, as far as its first words tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Create {
        db: String,
        table: String,
        or_replace: bool,
    },
    Alter {
        db: String,
        table: String,
    },
    /// A temporary table: never replicated.
    Temporary,
}

fn words(query: &str) -> Vec<Token> {
    let mut toks = Tokenizer::new(&MySqlDialect {}, query)
        .tokenize()
        .unwrap_or_default();
    toks.retain(|t| !matches!(t, Token::Whitespace(_)));
    toks.truncate(64);
    toks
}

fn keyword(t: Option<&Token>, kw: &str) -> bool {
    matches!(t, Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(kw))
}

/// Reads `name` or `db.name` at `toks[i..]`; returns it and the index after it.
fn object_name(toks: &[Token], i: usize, default_db: &str) -> Option<(String, String, usize)> {
    let Some(Token::Word(a)) = toks.get(i) else {
        return None;
    };
    if matches!(toks.get(i + 1), Some(Token::Period)) {
        let Some(Token::Word(b)) = toks.get(i + 2) else {
            return None;
        };
        return Some((a.value.clone(), b.value.clone(), i + 3));
    }
    Some((default_db.to_string(), a.value.clone(), i + 1))
}

/// Skips the words in `optional` (in any order) starting at `i`.
fn skip_words(toks: &[Token], mut i: usize, optional: &[&str]) -> usize {
    while optional.iter().any(|w| keyword(toks.get(i), w)) {
        i += 1;
    }
    i
}

/// Skips `IF [NOT] EXISTS`.
fn skip_if_exists(toks: &[Token], i: usize) -> usize {
    if !keyword(toks.get(i), "IF") {
        return i;
    }
    skip_words(toks, i + 1, &["NOT", "EXISTS"])
}

/// The table an unparsed `CREATE TABLE`, `ALTER TABLE` or index DDL is about.
pub(crate) fn ddl_target(query: &str, default_db: &str) -> Option<Target> {
    let mut toks = words(query);
    // `SET STATEMENT var = value, … FOR <DDL>`: the DDL is what follows `FOR`.
    if keyword(toks.first(), "SET") && keyword(toks.get(1), "STATEMENT") {
        let at = toks.iter().position(|t| keyword(Some(t), "FOR"))?;
        toks.drain(..=at);
    }
    if keyword(toks.first(), "ALTER") {
        let i = skip_words(&toks, 1, &["ONLINE", "OFFLINE", "IGNORE"]);
        if !keyword(toks.get(i), "TABLE") {
            return None;
        }
        let (db, table, _) = object_name(&toks, skip_if_exists(&toks, i + 1), default_db)?;
        return Some(Target::Alter { db, table });
    }
    if keyword(toks.first(), "DROP") && keyword(toks.get(1), "INDEX") {
        return index_target(&toks, 2, default_db);
    }
    if !keyword(toks.first(), "CREATE") {
        return None;
    }
    let mut i = 1;
    let or_replace = keyword(toks.get(1), "OR") && keyword(toks.get(2), "REPLACE");
    if or_replace {
        i = 3;
    }
    if keyword(toks.get(i), "TEMPORARY") {
        return Some(Target::Temporary);
    }
    let i = skip_words(
        &toks,
        i,
        &["UNIQUE", "FULLTEXT", "SPATIAL", "ONLINE", "OFFLINE"],
    );
    if keyword(toks.get(i), "INDEX") || keyword(toks.get(i), "KEY") {
        return index_target(&toks, i + 1, default_db);
    }
    if !keyword(toks.get(i), "TABLE") {
        return None;
    }
    let (db, table, _) = object_name(&toks, skip_if_exists(&toks, i + 1), default_db)?;
    Some(Target::Create {
        db,
        table,
        or_replace,
    })
}

/// The table a `CREATE [OR REPLACE] TABLE` statement creates, if it is one.
pub fn create_target(query: &str, default_db: &str) -> Option<(String, String)> {
    match ddl_target(query, default_db)? {
        Target::Create { db, table, .. } => Some((db, table)),
        _ => None,
    }
}

/// `… INDEX [IF [NOT] EXISTS] name … ON table`: the table after the first `ON`.
fn index_target(toks: &[Token], from: usize, default_db: &str) -> Option<Target> {
    let on = (from..toks.len()).find(|i| keyword(toks.get(*i), "ON"))?;
    let (db, table, _) = object_name(toks, on + 1, default_db)?;
    Some(Target::Alter { db, table })
}

/// True when `history` (a version's column) and `binlog` (the TABLE_MAP's) describe the same
/// column: the same name, type family and signedness ([`agrees`] column by column).
fn same_column(history: &ColumnDef, binlog: &ColumnDef) -> bool {
    column_matches(history, &binlog.name, binlog.ty, binlog.unsigned)
}

/// The one column test of [`agrees`] and [`same_column`]: the binlog's name, type and
/// signedness can be the history's column.
fn column_matches(history: &ColumnDef, name: &str, ty: ColumnType, unsigned: bool) -> bool {
    history.name.eq_ignore_ascii_case(name)
        && same_family(history.ty, ty)
        && (!is_signed_number(ty) || history.unsigned == unsigned)
}

/// The table as the TABLE_MAP describes it, keeping what `prev` knew of the same columns.
fn schema_from_binlog(
    meta: &TableMeta,
    prev: &TableSchema,
    version: Ts,
    carry_keys: bool,
) -> TableSchema {
    let columns: Vec<ColumnDef> = meta
        .column_defs()
        .into_iter()
        .map(|b| {
            prev.columns
                .iter()
                .find(|h| same_column(h, &b))
                .map(|h| ColumnDef {
                    nullable: b.nullable,
                    ..h.clone()
                })
                .unwrap_or_else(|| hidden_generated(b))
        })
        .collect();
    let by_name = |old: usize| -> Option<usize> {
        let name = &prev.columns.get(old)?.name;
        columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
    };
    let remap = |idx: &[usize]| -> Option<Vec<usize>> { idx.iter().map(|i| by_name(*i)).collect() };
    // The binlog names the primary key; a history's not-null unique key stands in for a table
    // without one when its columns are all still there.
    let key_columns = if !meta.primary_key.is_empty() {
        meta.primary_key.clone()
    } else if carry_keys {
        remap(&prev.key_columns).unwrap_or_default()
    } else {
        Vec::new()
    };
    let unique_keys = if carry_keys {
        prev.unique_keys.iter().filter_map(|k| remap(k)).collect()
    } else {
        Vec::new()
    };
    TableSchema {
        table_id: prev.table_id,
        database: prev.database.clone(),
        name: prev.name.clone(),
        columns,
        key_columns,
        unique_keys,
        version,
        partitioning: prev.partitioning.clone(),
    }
}

/// A column only the binlog names: MariaDB's hidden `DB_ROW_HASH_<n>` (the hash behind a UNIQUE
/// key on a BLOB or long string) is a virtual generated column the server computes; it is in
/// the row image but must never be written to a downstream.
fn hidden_generated(mut c: ColumnDef) -> ColumnDef {
    let is_hash = c
        .name
        .strip_prefix("DB_ROW_HASH_")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if is_hash {
        c.generated = Some(sluice_types::Generation::Virtual);
    }
    c
}

fn column_names(columns: &[ColumnDef]) -> Vec<String> {
    columns.iter().map(|c| c.name.clone()).collect()
}

/// True when the history's version and the TABLE_MAP describe the same columns in the same
/// order: the same names, the same storage shape (`same_family`) and, for numbers, the same
/// signedness (values are read with it).
pub fn agrees(schema: &TableSchema, meta: &TableMeta) -> bool {
    schema.columns.len() == meta.columns.len()
        && schema
            .columns
            .iter()
            .zip(&meta.columns)
            .all(|(h, b)| column_matches(h, &b.name, b.column_type(), b.unsigned))
}

/// Whether the binlog's type can be the history's: the same storage shape, text or binary
/// alike (MariaDB logs JSON as LONGTEXT, and its UUID, INET4 and INET6, which the history keeps
/// as CHAR-like types, as BINARY).
fn same_family(history: ColumnType, binlog: ColumnType) -> bool {
    use ColumnType::*;
    let shape = |t: ColumnType| match t {
        Char | Binary => Char,
        VarChar | VarBinary => VarChar,
        Text | Blob | Json => Text,
        t => t,
    };
    shape(history) == shape(binlog)
}

/// Number types whose TABLE_MAP carries signedness.
fn is_signed_number(ty: ColumnType) -> bool {
    use ColumnType::*;
    matches!(
        ty,
        TinyInt | SmallInt | MediumInt | Int | BigInt | Decimal | Float | Double
    )
}

impl SchemaHistory {
    /// A DDL the history could not parse (`message` says why), not skipped by configuration:
    /// see the module docs. Always returns an event, so the statement reaches the downstream in
    /// order.
    pub(crate) fn follow_unparsed(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
        message: String,
    ) -> Option<DdlEvent> {
        self.skipped.push(SkippedDdl {
            commit_ts,
            database: database.into(),
            query: query.into(),
            error: format!("{message} (definition taken from the binlog)"),
        });
        let target = ddl_target(query, database);
        if target == Some(Target::Temporary) {
            self.head = commit_ts;
            return None;
        }
        let (kind, influence) = match target {
            Some(Target::Create {
                db,
                table,
                or_replace,
            }) => self.unparsed_create(commit_ts, &db, &table, or_replace),
            Some(Target::Alter { db, table }) => self.unparsed_alter(commit_ts, &db, &table),
            _ => None,
        }
        .unwrap_or_else(|| (DdlKind::Other, every_table()));
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
        self.head = commit_ts;
        self.ddls.push(ev.clone());
        self.revision += 1;
        Some(ev)
    }

    fn unparsed_create(
        &mut self,
        ts: Ts,
        db: &str,
        table: &str,
        or_replace: bool,
    ) -> Option<(DdlKind, DdlInfluence)> {
        let name = format!("{db}.{table}");
        let existing = self.table_at(db, table, ts - 1).map(|s| s.table_id);
        let mut dropped = Vec::new();
        match existing {
            // CREATE TABLE IF NOT EXISTS of a table that exists: nothing changes.
            Some(id) if !or_replace => return Some((DdlKind::CreateTable, only(vec![id]))),
            Some(id) => {
                self.close_table(id, ts);
                dropped.push(id);
            }
            None => {}
        }
        let id = TableId(ts);
        let placeholder = TableSchema {
            table_id: id,
            database: db.to_string(),
            name: table.to_string(),
            columns: Vec::new(),
            key_columns: Vec::new(),
            unique_keys: Vec::new(),
            version: ts,
            partitioning: None,
        };
        self.push_from_binlog(placeholder, ts);
        let mut influence = only(dropped.clone());
        influence.trigger = true;
        influence.dropped = dropped;
        influence.added = vec![(id, name)];
        Some((DdlKind::CreateTable, influence))
    }

    fn unparsed_alter(&mut self, ts: Ts, db: &str, table: &str) -> Option<(DdlKind, DdlInfluence)> {
        let prev = self.table_at(db, table, ts - 1)?.clone();
        let id = prev.table_id;
        self.push_from_binlog(prev, ts);
        Some((DdlKind::AlterTable, only(vec![id])))
    }

    /// Completes a version of `meta`'s table marked from the binlog, or repairs one that
    /// disagrees with the binlog, at `ts` (see the module docs); called once per TABLE_MAP of a
    /// transaction, before its rows are keyed.
    pub fn settle_from_binlog(&mut self, ts: Ts, meta: &TableMeta) {
        if self.settle_one(ts, meta) {
            self.revision += 1;
        }
    }

    fn settle_one(&mut self, ts: Ts, meta: &TableMeta) -> bool {
        let Some(schema) = self.table_at(&meta.database, &meta.table, ts) else {
            return false;
        };
        let id = schema.table_id;
        let Some(v) = self
            .tables
            .get_mut(&id)
            .and_then(|v| v.iter_mut().rev().find(|v| v.from <= ts))
        else {
            return false;
        };
        if v.from_binlog {
            // The first rows after an unparsed DDL: the TABLE_MAP completes that version.
            let carry = !v.schema.columns.is_empty();
            v.schema = schema_from_binlog(meta, &v.schema, v.from, carry);
            // An unparsed `CREATE … WITH SYSTEM VERSIONING`: the binlog names the implicit
            // `row_start`, `row_end` like any column.
            crate::schema::mark_implicit_period(&mut v.schema);
            v.from_binlog = false;
            return true;
        }
        if agrees(&v.schema, meta) {
            return false;
        }
        let prev = v.schema.clone();
        self.repairs.push(SchemaRepair {
            ts,
            table: prev.qualified_name(),
            history_columns: column_names(&prev.columns),
            binlog_columns: meta.columns.iter().map(|c| c.name.clone()).collect(),
        });
        if self.repairs.len() > MAX_REPAIRS_KEPT {
            self.repairs.remove(0);
        }
        let repaired = schema_from_binlog(meta, &prev, ts, true);
        self.push_version_at(repaired, ts);
        true
    }

    /// Pushes `schema` as the table's version at `ts`, to be completed from the binlog.
    fn push_from_binlog(&mut self, schema: TableSchema, ts: Ts) {
        let id = schema.table_id;
        self.push_version_at(schema, ts);
        if let Some(v) = self
            .tables
            .get_mut(&id)
            .and_then(|v| v.last_mut())
            .filter(|v| v.from == ts)
        {
            v.from_binlog = true;
        }
    }
}

/// An influence on exactly `tables` (none: the table trigger only).
fn only(tables: Vec<TableId>) -> DdlInfluence {
    DdlInfluence::scoped(InfluenceScope::Tables(tables), false)
}

/// A statement whose tables are unknown: every dispatcher stops at it.
fn every_table() -> DdlInfluence {
    DdlInfluence::scoped(InfluenceScope::All, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(q: &str) -> Option<Target> {
        ddl_target(q, "d")
    }

    fn alter(db: &str, t: &str) -> Option<Target> {
        Some(Target::Alter {
            db: db.into(),
            table: t.into(),
        })
    }

    fn meta_col(
        name: &str,
        my_type: mysql_async::consts::ColumnType,
        unsigned: bool,
    ) -> crate::decode::ColumnMeta {
        crate::decode::ColumnMeta {
            name: name.into(),
            my_type,
            meta: vec![],
            unsigned,
            collation: 45,
            nullable: true,
            elements: vec![],
            compressed: false,
        }
    }

    fn table(columns: Vec<ColumnDef>) -> TableSchema {
        TableSchema {
            table_id: TableId(1),
            database: "d".into(),
            name: "t".into(),
            columns,
            key_columns: vec![],
            unique_keys: vec![],
            version: 0,
            partitioning: None,
        }
    }

    /// A history that names the binlog's columns but has a type or signedness wrong disagrees
    /// (rows would be read and described with it); JSON logged as text does not.
    #[test]
    fn agreement_covers_types_and_signedness() {
        use crate::schema::column_from_sql_type as col;
        use mysql_async::consts::ColumnType as My;
        let meta = |cols| TableMeta {
            database: "d".into(),
            table: "t".into(),
            columns: cols,
            primary_key: vec![],
        };
        let binlog = meta(vec![
            meta_col("a", My::MYSQL_TYPE_LONG, true),
            meta_col("j", My::MYSQL_TYPE_BLOB, false),
        ]);
        let right = table(vec![col("a", "int unsigned"), col("j", "json")]);
        assert!(agrees(&right, &binlog));
        let signed = table(vec![col("a", "int"), col("j", "json")]);
        assert!(!agrees(&signed, &binlog));
        let wider = table(vec![col("a", "bigint unsigned"), col("j", "json")]);
        assert!(!agrees(&wider, &binlog));
        let renamed = table(vec![col("b", "int unsigned"), col("j", "json")]);
        assert!(!agrees(&renamed, &binlog));
        // MariaDB's UUID is a CHAR-like type in the history, BINARY(16) in the binlog.
        let uuid = meta(vec![meta_col("u", My::MYSQL_TYPE_STRING, false)]);
        let mut u = meta_col("u", My::MYSQL_TYPE_STRING, false);
        u.collation = 63;
        let uuid_binlog = meta(vec![u]);
        assert!(agrees(&table(vec![col("u", "uuid")]), &uuid));
        assert!(agrees(&table(vec![col("u", "uuid")]), &uuid_binlog));
        assert!(!agrees(&table(vec![col("u", "varchar(36)")]), &uuid_binlog));
        // The repaired version takes the binlog's column where the history's was wrong, so it
        // agrees from then on (no repair per event).
        let repaired = schema_from_binlog(&binlog, &signed, 5, true);
        assert!(agrees(&repaired, &binlog), "{repaired:?}");
        assert!(repaired.columns[0].unsigned);
        assert_eq!(
            repaired.columns[1].ty,
            ColumnType::Json,
            "kept from the history"
        );
    }

    #[test]
    fn targets_of_unparsed_ddls() {
        assert_eq!(
            target("ALTER TABLE t ADD SYSTEM VERSIONING"),
            alter("d", "t")
        );
        assert_eq!(
            target("alter online ignore table `x`.`y y` frob"),
            alter("x", "y y")
        );
        assert_eq!(
            target("ALTER TABLE IF EXISTS e.t ORDER BY a"),
            alter("e", "t")
        );
        assert_eq!(
            target("CREATE UNIQUE INDEX i USING BTREE ON t (a)"),
            alter("d", "t")
        );
        assert_eq!(target("DROP INDEX IF EXISTS i ON e.t"), alter("e", "t"));
        assert_eq!(
            target("CREATE OR REPLACE TABLE IF NOT EXISTS `9x` (a INT) WITH SYSTEM VERSIONING"),
            Some(Target::Create {
                db: "d".into(),
                table: "9x".into(),
                or_replace: true
            })
        );
        assert_eq!(
            target("CREATE TEMPORARY TABLE t (a INT)"),
            Some(Target::Temporary)
        );
        assert_eq!(
            target("SET STATEMENT max_statement_time = 5 FOR ALTER TABLE t FROB"),
            alter("d", "t")
        );
        assert_eq!(target("CREATE TABLE"), None);
        assert_eq!(target("DROP TABLE t"), None);
        assert_eq!(target("RENAME TABLE a TO b"), None);
    }
}
