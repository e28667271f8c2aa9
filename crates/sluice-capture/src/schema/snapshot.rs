//! Reading a [`SchemaHistory`] from `information_schema` at a known binlog position: tables,
//! columns, keys, charsets and collations, sequences, foreign keys and partition layouts.

use super::columns::choose_key;
use super::*;
use crate::binlog::master_position;
use crate::error::{CaptureError, Result};
use mysql_async::prelude::Queryable;
use sluice_partition::{split_partition_options, Layout};
use sluice_types::{ColumnDef, ColumnType, Partitioning};

impl SchemaHistory {
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
        h.read_databases(conn).await?;
        let seqs: Vec<(String, String)> = conn
            .query("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'SEQUENCE'")
            .await
            .map_err(e)?;
        h.sequences = seqs.into_iter().map(|(d, t)| qualified(&d, &t)).collect();
        let cat = Catalog::read(conn).await?;
        for (i, (db, name, table_collation)) in cat.tables.iter().enumerate() {
            let columns = cat.columns(db, name);
            let (pk, uniques) = cat.keys(db, name);
            let (key_columns, unique_keys) = choose_key(&columns, &pk, &uniques);
            let id = TableId(SNAPSHOT_FIRST_TABLE_ID + i as u64);
            if let Some(cc) = h.charsets.resolve(None, table_collation.as_deref(), None) {
                h.charsets.tables.insert(id, cc);
            }
            let partitioning = if cat.partitioned.contains(&(db.clone(), name.clone())) {
                Some(read_partitioning(conn, db, name).await?)
            } else {
                None
            };
            let schema = TableSchema {
                table_id: id,
                database: db.clone(),
                name: name.clone(),
                columns,
                key_columns,
                unique_keys,
                version: 0,
                partitioning,
            };
            h.index_name(id, db, name);
            let version = TableVersion {
                from: 0,
                to: None,
                schema,
                from_binlog: false,
            };
            h.tables.insert(id, vec![version]);
        }
        let fk_rows: Vec<crate::foreign_keys::SnapshotRow> = conn
            .query(crate::foreign_keys::SNAPSHOT_QUERY)
            .await
            .map_err(e)?;
        h.snapshot_foreign_keys(fk_rows);
        Ok(h)
    }

    /// Every user database and its default charset and collation.
    async fn read_databases(&mut self, conn: &mut mysql_async::Conn) -> Result<()> {
        let dbs: Vec<(String, Option<String>, Option<String>)> = conn
            .query(
                "SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME \
                 FROM information_schema.SCHEMATA",
            )
            .await
            .map_err(CaptureError::from_mysql)?;
        for (d, cs, coll) in dbs.into_iter().filter(|d| !is_system_schema(&d.0)) {
            if let Some(cc) = self.charsets.resolve(cs.as_deref(), coll.as_deref(), None) {
                self.charsets.databases.insert(d.clone(), cc);
            }
            self.databases.insert(d, vec![(0, None)]);
        }
        Ok(())
    }

    /// The foreign keys read at the snapshot, on the snapshot's tables (ts 0).
    pub(super) fn snapshot_foreign_keys(&mut self, rows: Vec<crate::foreign_keys::SnapshotRow>) {
        for ((db, t), keys) in crate::foreign_keys::group_snapshot(rows) {
            if let Some(id) = self.find_id(&db, &t, 0) {
                self.foreign_keys.set(id, 0, keys);
            }
        }
    }
}

/// The server side of [`CharsetDefaults`] at the snapshot: `@@character_set_server` /
/// `@@collation_server`, every charset's default collation (`information_schema.COLLATIONS`,
/// then MariaDB 11.2+'s `@@character_set_collations`), what `utf8` means (`@@old_mode`) and
/// whether JSON is MariaDB's LONGTEXT alias.
pub(super) async fn read_charset_defaults(conn: &mut mysql_async::Conn) -> Result<CharsetDefaults> {
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
pub(super) async fn read_partitioning(
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

/// A column as the snapshot reads it: `(schema, table, name, COLUMN_TYPE, IS_NULLABLE,
/// charset, collation, EXTRA with the period generation)`. COLUMN_TYPE holds ENUM/SET values in
/// the column's charset, not always UTF-8 (an `sjis` ENUM): bytes, read lossily, never a panic
/// of the driver's row conversion.
type ColRow = (
    String,
    String,
    String,
    Vec<u8>,
    String,
    Option<String>,
    Option<String>,
    String,
);

/// What the snapshot reads from information_schema about tables, before they become versions.
struct Catalog {
    /// `(schema, table, TABLE_COLLATION)` of every user base and system-versioned table, sorted
    /// (the order snapshot table ids follow).
    tables: Vec<(String, String, Option<String>)>,
    /// System-versioned tables without explicit period columns: MariaDB's implicit ones.
    implicit_period: std::collections::BTreeSet<(String, String)>,
    cols: Vec<ColRow>,
    /// `(schema, table, index, NON_UNIQUE, column)` in index order.
    idx: Vec<(String, String, String, i64, String)>,
    /// `(schema, table, CHECK_CLAUSE)`: MariaDB's JSON columns are LONGTEXT with a
    /// `json_valid()` CHECK.
    checks: Vec<(String, String, String)>,
    partitioned: std::collections::BTreeSet<(String, String)>,
}

impl Catalog {
    async fn read(conn: &mut mysql_async::Conn) -> Result<Catalog> {
        let e = CaptureError::from_mysql;
        let mut tables: Vec<(String, String, Option<String>)> = conn
            .query("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED')")
            .await
            .map_err(e)?;
        tables.retain(|(d, _, _)| !is_system_schema(d));
        tables.sort();
        let implicit_period = crate::mariadb_sql::tables_with_implicit_period(conn).await?;
        let cols: Vec<ColRow> = conn
            .query(format!(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, COLLATION_NAME, \
                 {} FROM information_schema.COLUMNS ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
                sluice_types::Generation::EXTRA_SQL
            ))
            .await
            .map_err(e)?;
        let idx = conn
            .query(
                "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS \
                 ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
            )
            .await
            .map_err(e)?;
        let checks = conn
            .query("SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS")
            .await
            .unwrap_or_default();
        let partitioned = conn
            .query(
                "SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME FROM information_schema.PARTITIONS \
                 WHERE PARTITION_NAME IS NOT NULL",
            )
            .await
            .map_err(e)?
            .into_iter()
            .collect();
        Ok(Catalog {
            tables,
            implicit_period,
            cols,
            idx,
            checks,
            partitioned,
        })
    }

    /// The columns of `db.name` in order, with the implicit period columns and JSON checks.
    fn columns(&self, db: &str, name: &str) -> Vec<ColumnDef> {
        let mut columns: Vec<ColumnDef> = self
            .cols
            .iter()
            .filter(|c| c.0 == db && c.1 == name)
            .map(|c| {
                let mut d = column_from_sql_type(&c.2, &String::from_utf8_lossy(&c.3));
                d.nullable = c.4 == "YES";
                d.charset = c.5.clone();
                d.collation = c.6.clone();
                d.generated = generation_from_extra(&c.7);
                d
            })
            .collect();
        if self
            .implicit_period
            .contains(&(db.to_string(), name.to_string()))
        {
            columns.extend(crate::mariadb_sql::implicit_period_columns());
        }
        for (_, _, clause) in self.checks.iter().filter(|c| c.0 == db && c.1 == name) {
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
        columns
    }

    /// The primary key and the unique keys (by index name) of `db.name`, as column names.
    fn keys(&self, db: &str, name: &str) -> (Vec<String>, Vec<Vec<String>>) {
        let mut pk = Vec::new();
        let mut uniques: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (_, _, index, non_unique, col) in self.idx.iter().filter(|x| x.0 == db && x.1 == name) {
            if index == "PRIMARY" {
                pk.push(col.clone());
            } else if *non_unique == 0 {
                uniques.entry(index.clone()).or_default().push(col.clone());
            }
        }
        (pk, uniques.into_values().collect())
    }
}
