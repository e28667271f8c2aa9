//! Charsets and collations through real DDL: databases and tables are made and altered with
//! every charset rule (database/table/column defaults and options, LIKE, CONVERT TO, binary and
//! national types, JSON, ALTER DATABASE, tables from the snapshot), capture applies them from
//! the binlog, and afterwards the history must say exactly what the live server says in
//! `information_schema` for every column (charset, collation, binary or not), every table
//! default (`TABLES.TABLE_COLLATION`) and every database default (`SCHEMATA`).

mod common;
use common::*;
use sluice_capture::capture::{Capture, Captured};
use sluice_capture::schema::{column_from_sql_type, is_system_schema, SchemaHistory};
use sluice_testkit::mariadb::{MariaDb, Options};
use sluice_types::ColumnType;
use std::collections::BTreeMap;

/// Made before the snapshot: the snapshot must record the defaults they need later.
const BEFORE_SNAPSHOT: &[&str] = &[
    "CREATE DATABASE s1 CHARACTER SET latin1 COLLATE latin1_german1_ci",
    "CREATE DATABASE s2",
    "CREATE TABLE s1.pre (a CHAR(1)) CHARSET ascii COLLATE ascii_bin",
    "CREATE TABLE s1.pre2 (a CHAR(1) COLLATE latin1_bin)",
    "CREATE TABLE s2.pre3 (a VARCHAR(2), j JSON)",
];

const WORKLOAD: &[&str] = &[
    // Databases: server default, charset, collation, both, synonyms, executable comment.
    "CREATE DATABASE d0",
    "CREATE DATABASE d1 CHARACTER SET latin1",
    "CREATE DATABASE d2 COLLATE utf8mb4_bin",
    "CREATE DATABASE d3 DEFAULT CHARSET=utf8 COLLATE=utf8_unicode_ci",
    "CREATE SCHEMA d4 CHARACTER SET utf8",
    "CREATE DATABASE IF NOT EXISTS d5 /*!40100 DEFAULT CHARACTER SET ascii */",
    "CREATE DATABASE IF NOT EXISTS d1 CHARACTER SET ascii",
    // ALTER DATABASE (named, unnamed, SCHEMA, comment only): later tables only.
    "ALTER DATABASE s2 CHARACTER SET latin1",
    "USE d2; ALTER DATABASE COLLATE utf8mb4_nopad_bin",
    "ALTER SCHEMA d5 DEFAULT CHARACTER SET = latin1 DEFAULT COLLATE = latin1_general_cs",
    "ALTER DATABASE d0 COMMENT 'only a comment'",
    // Every column option.
    "CREATE TABLE d1.cols (a CHAR(3), b VARCHAR(5) CHARACTER SET utf8mb4, c TEXT COLLATE latin1_bin, \
     d ENUM('x','y') CHARACTER SET ascii, e SET('p','q') COLLATE utf8mb4_unicode_ci, \
     f VARCHAR(4) CHARACTER SET utf8 COLLATE utf8_bin, g JSON, h LONGTEXT CHECK (json_valid(h)), \
     k NCHAR(2), l NVARCHAR(3), m NCHAR(2) COLLATE utf8mb3_bin, p VARCHAR(3) CHARACTER SET binary, \
     q TEXT CHARSET latin1, r MEDIUMTEXT CHARACTER SET 'utf8mb4' COLLATE `utf8mb4_nopad_bin`, \
     s CHAR(2) CHARACTER SET binary, t TINYTEXT CHARACTER SET binary, u ENUM('a') CHARACTER SET binary, \
     v JSON COLLATE utf8mb4_general_ci, w CHARACTER VARYING(3), x BLOB, y VARBINARY(2), z BINARY(2), n INT)",
    // Table options.
    "CREATE TABLE d1.o1 (a CHAR(3), b VARCHAR(3) CHARACTER SET latin1) CHARSET=utf8mb4",
    "CREATE TABLE d1.o2 (a CHAR(3), b VARCHAR(3) CHARACTER SET latin1) COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE d1.o3 (a CHAR(3), b VARCHAR(3) COLLATE latin1_german1_ci) ENGINE=InnoDB DEFAULT CHARACTER SET = utf8 COLLATE = utf8_bin",
    "CREATE TABLE d1.o4 (a CHAR(3), b CHAR(3) CHARACTER SET latin1) CHARSET latin1 COLLATE latin1_danish_ci",
    "CREATE TABLE d1.o5 (a CHAR(2)) CHARSET=DEFAULT",
    "CREATE TABLE d1.o6 (a TEXT, b VARCHAR(3), c ENUM('a')) CHARSET=binary",
    "CREATE TABLE d1.o7 (a CHAR(3), j JSON) CHARACTER SET 'ascii'",
    "USE s1; CREATE TABLE o8 (a CHAR(3), b CHAR(3) CHARACTER SET latin1, c CHAR(3) CHARSET latin1 COLLATE latin1_bin)",
    // LIKE copies the columns and the table default (also of a snapshot table).
    "CREATE TABLE d0.like1 LIKE d1.o3",
    "ALTER TABLE d0.like1 ADD COLUMN c VARCHAR(2)",
    "CREATE TABLE d0.like2 LIKE s1.pre",
    "ALTER TABLE d0.like2 ADD COLUMN b CHAR(1)",
    // Snapshot tables: their defaults come from information_schema.TABLES.
    "ALTER TABLE s1.pre ADD COLUMN b CHAR(1), ADD COLUMN c CHAR(1) CHARACTER SET utf8mb4",
    "ALTER TABLE s1.pre2 MODIFY a CHAR(1), ADD COLUMN b TEXT",
    "ALTER TABLE s2.pre3 ADD COLUMN b CHAR(1)",
    // ALTER TABLE: a new default with columns, COLLATE alone, CHARSET alone, MODIFY, CHANGE.
    "CREATE TABLE d1.a1 (a CHAR(3), b TEXT, c VARCHAR(3)) CHARSET latin1",
    "ALTER TABLE d1.a1 DEFAULT CHARSET=utf8mb4, ADD COLUMN d VARCHAR(3), MODIFY b TINYTEXT",
    "ALTER TABLE d1.a1 COLLATE utf8mb4_unicode_ci",
    "ALTER TABLE d1.a1 ADD COLUMN e CHAR(1), CHANGE c c2 VARCHAR(4) CHARACTER SET latin1",
    "ALTER TABLE d1.a1 ADD COLUMN f CHAR(1), CHARACTER SET ascii",
    "CREATE TABLE d1.a2 (a CHAR(3)) CHARSET utf8mb4 COLLATE utf8mb4_bin",
    "ALTER TABLE d1.a2 CHARSET utf8mb4",
    "ALTER TABLE d1.a2 ADD COLUMN b CHAR(2), ADD COLUMN c CHAR(2) CHARSET latin1",
    // CONVERT TO: every charset column but binary ones; with COLLATE; DEFAULT; with columns.
    "CREATE TABLE d1.a3 (a CHAR(3), b TEXT, c ENUM('x'), d VARCHAR(3) COLLATE latin1_bin, e BLOB, \
     g JSON, h VARCHAR(10) CHARACTER SET utf8mb4, i SET('a') CHARACTER SET binary, n INT) CHARSET latin1",
    "ALTER TABLE d1.a3 CONVERT TO CHARACTER SET utf8mb4",
    "CREATE TABLE d1.a4 (a CHAR(3), b VARCHAR(3)) CHARSET utf8mb4",
    "ALTER TABLE d1.a4 CONVERT TO CHARACTER SET latin1 COLLATE latin1_bin",
    "CREATE TABLE d1.a4b (a CHAR(3)) CHARSET utf8mb4",
    "ALTER TABLE d1.a4b CONVERT TO CHARSET DEFAULT",
    "CREATE TABLE d1.a5 (a VARCHAR(3)) CHARSET=latin1",
    "ALTER TABLE d1.a5 ADD COLUMN b VARCHAR(3), CONVERT TO CHARACTER SET utf8mb4, MODIFY a VARCHAR(3) CHARACTER SET ascii",
    "CREATE TABLE d1.a5b (a CHAR(3)) CHARSET utf8mb4",
    "ALTER TABLE d1.a5b DEFAULT CHARSET ascii, CONVERT TO CHARACTER SET latin1",
    "ALTER TABLE d1.a5b ADD COLUMN b CHAR(1)",
    "CREATE TABLE d1.a5c (a CHAR(3)) CHARSET utf8mb4",
    "ALTER TABLE d1.a5c CONVERT TO CHARACTER SET latin1 COLLATE latin1_bin, COLLATE latin1_danish_ci",
    "ALTER TABLE d1.a5c ADD COLUMN b CHAR(1)",
    // Defaults only, among other table options.
    "CREATE TABLE d1.a6 (a CHAR(3), b VARCHAR(3) CHARACTER SET latin1) CHARSET utf8mb4",
    "ALTER TABLE d1.a6 CHARACTER SET latin1",
    "ALTER TABLE d1.a6 ADD COLUMN c CHAR(2)",
    "ALTER TABLE d1.a6 ENGINE=InnoDB DEFAULT CHARSET=ascii",
    "ALTER TABLE d1.a6 ADD COLUMN d CHAR(2) FIRST",
    // CONVERT TO binary: the binary types, and a binary table default.
    "CREATE TABLE d1.a7 (a CHAR(3), b TEXT, c INT) CHARSET utf8mb4",
    "ALTER TABLE d1.a7 CONVERT TO CHARACTER SET binary",
    "ALTER TABLE d1.a7 ADD COLUMN d VARCHAR(2)",
    // TRUNCATE (new id), RENAME (across databases), ALTER … RENAME keep the default.
    "CREATE TABLE d1.a8 (id INT PRIMARY KEY, a CHAR(2)) CHARSET latin1",
    "TRUNCATE TABLE d1.a8",
    "RENAME TABLE d1.a8 TO d0.a8r",
    "ALTER TABLE d0.a8r ADD COLUMN b CHAR(2)",
    "ALTER TABLE d0.a8r RENAME TO d2.a8s, ADD COLUMN c CHAR(2)",
    // CREATE OR REPLACE: the new table's own default.
    "CREATE TABLE d1.a9 (a CHAR(2)) CHARSET ascii",
    "CREATE OR REPLACE TABLE d1.a9 (a CHAR(2))",
    "ALTER TABLE d1.a9 ADD COLUMN b CHAR(2)",
    // A partitioned table converted (options only: a new version with the layout kept).
    "CREATE TABLE d1.p (id INT NOT NULL, code VARCHAR(3)) CHARSET latin1 PARTITION BY LIST COLUMNS (code) \
     (PARTITION a VALUES IN ('a'), PARTITION b VALUES IN ('b'))",
    "ALTER TABLE d1.p CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    // A database dropped and made again takes the server default.
    "CREATE DATABASE gone CHARACTER SET ascii",
    "CREATE TABLE gone.t (a CHAR(1))",
    "DROP DATABASE gone",
    "CREATE DATABASE gone",
    "CREATE TABLE gone.t (a CHAR(1))",
];

/// A table with every string type and no charset option, made in every database after its
/// ALTER DATABASE: the database default rule.
const PLAIN: &str = "(a CHAR(2), b TINYTEXT, c ENUM('x','y'), d SET('p','q'), e JSON, f NCHAR(2), \
                     g BLOB, h VARBINARY(3), i INT, j LONGTEXT)";

/// The type family compared (JSON is LONGTEXT to the server).
fn family(ty: ColumnType) -> ColumnType {
    match ty {
        ColumnType::Json => ColumnType::Text,
        t => t,
    }
}

/// `(name, type family, charset, collation)` of one column.
type Column = (String, ColumnType, Option<String>, Option<String>);

fn opt(s: &str) -> Option<String> {
    (s != "NULL" && !s.is_empty()).then(|| s.to_string())
}

#[tokio::test]
async fn history_charsets_match_information_schema_after_real_ddl() {
    // A server default that is not its charset's default collation, so a database made without
    // options shows whether the server default (not the charset's) is used.
    let db = MariaDb::start_with(Options {
        extra_args: vec![
            "--character-set-server=utf8mb4".into(),
            "--collation-server=utf8mb4_unicode_520_ci".into(),
        ],
        ..Options::default()
    })
    .expect("mariadb");
    for stmt in BEFORE_SNAPSHOT {
        db.exec(stmt).unwrap_or_else(|e| panic!("{stmt}: {e}"));
    }
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    assert_eq!(
        history
            .charsets
            .server
            .as_ref()
            .and_then(|s| s.collation.as_deref()),
        Some("utf8mb4_unicode_520_ci")
    );
    let mut statements: Vec<String> = WORKLOAD.iter().map(|s| s.to_string()).collect();
    for d in ["d0", "d1", "d2", "d3", "d4", "d5", "s1", "s2", "gone"] {
        statements.push(format!("CREATE TABLE {d}.plain {PLAIN}"));
    }
    statements.push("CREATE TABLE d0.marker (id INT PRIMARY KEY)".into());
    for stmt in &statements {
        db.exec(stmt).unwrap_or_else(|e| panic!("{stmt}: {e}"));
    }
    let mut c = Capture::new(
        reader(&db.url(), 731, history.snapshot_pos.clone()),
        history.clone(),
    );
    let read = async {
        loop {
            if let Captured::Ddl(d) = c.next().await.expect("capture") {
                if d.query.contains("marker") {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), read)
        .await
        .expect("timed out capturing the workload");
    let h = &c.history;
    let mut wrong: Vec<String> = Vec::new();

    // Columns.
    let live = db
        .query(
            "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE, \
             IFNULL(c.CHARACTER_SET_NAME, 'NULL'), IFNULL(c.COLLATION_NAME, 'NULL') \
             FROM information_schema.COLUMNS c JOIN information_schema.TABLES t \
             ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
             WHERE t.TABLE_TYPE = 'BASE TABLE' \
             ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION",
        )
        .expect("columns");
    let mut live_tables: BTreeMap<(String, String), Vec<Column>> = BTreeMap::new();
    for r in live
        .iter()
        .filter(|r| r.len() == 6 && !is_system_schema(&r[0]))
    {
        let ty = column_from_sql_type(&r[2], &r[3]).ty;
        live_tables
            .entry((r[0].clone(), r[1].clone()))
            .or_default()
            .push((r[2].clone(), family(ty), opt(&r[4]), opt(&r[5])));
    }
    let mut history_tables: BTreeMap<(String, String), Vec<Column>> = BTreeMap::new();
    for t in h.tables_at(h.head) {
        let cols: Vec<_> = t
            .columns
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    family(c.ty),
                    c.charset.clone(),
                    c.collation.clone(),
                )
            })
            .collect();
        history_tables.insert((t.database.clone(), t.name.clone()), cols);
    }
    assert_eq!(
        live_tables.keys().collect::<Vec<_>>(),
        history_tables.keys().collect::<Vec<_>>(),
        "the same tables"
    );
    let mut string_columns = 0;
    for (name, live_cols) in &live_tables {
        let hist_cols = &history_tables[name];
        if live_cols.len() != hist_cols.len() {
            wrong.push(format!(
                "{name:?}: live {live_cols:?}, history {hist_cols:?}"
            ));
            continue;
        }
        for (l, hc) in live_cols.iter().zip(hist_cols) {
            string_columns += usize::from(l.2.is_some());
            if l != hc {
                wrong.push(format!(
                    "{}.{}.{}: live {:?} {:?} {:?}, history {:?} {:?} {:?}",
                    name.0, name.1, l.0, l.1, l.2, l.3, hc.1, hc.2, hc.3
                ));
            }
        }
    }

    // Table defaults.
    let live = db
        .query(
            "SELECT TABLE_SCHEMA, TABLE_NAME, IFNULL(TABLE_COLLATION, 'NULL') FROM information_schema.TABLES \
             WHERE TABLE_TYPE = 'BASE TABLE'",
        )
        .expect("tables");
    for r in live
        .iter()
        .filter(|r| r.len() == 3 && !is_system_schema(&r[0]))
    {
        let got = h
            .table_at(&r[0], &r[1], h.head)
            .and_then(|t| h.charsets.tables.get(&t.table_id))
            .and_then(|c| c.collation.clone());
        if got != opt(&r[2]) {
            wrong.push(format!(
                "table default of {}.{}: live {}, history {got:?}",
                r[0], r[1], r[2]
            ));
        }
    }

    // Database defaults.
    let live = db
        .query("SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA")
        .expect("schemata");
    for r in live
        .iter()
        .filter(|r| r.len() == 3 && !is_system_schema(&r[0]))
    {
        let got = h.charsets.databases.get(&r[0]);
        let want = (r[1].clone(), opt(&r[2]));
        if got.map(|g| (g.charset.clone(), g.collation.clone())) != Some(want.clone()) {
            wrong.push(format!(
                "database default of {}: live {want:?}, history {got:?}",
                r[0]
            ));
        }
    }

    assert!(
        wrong.is_empty(),
        "{} mismatches:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(
        string_columns > 130,
        "string columns compared: {string_columns}"
    );
    // ALTER DATABASE made database-level DDL events (for the table trigger), no table.
    let alters: Vec<_> = h
        .ddls
        .iter()
        .filter(|d| d.query.contains("ALTER DATABASE") || d.query.contains("ALTER SCHEMA"))
        .collect();
    assert_eq!(alters.len(), 4, "{alters:?}");
    assert!(alters
        .iter()
        .all(|d| d.kind == sluice_types::DdlKind::AlterDatabase
            && d.influence.added.is_empty()
            && d.influence.dropped.is_empty()));
    // The history the capture built persists and loads unchanged.
    assert_eq!(
        &SchemaHistory::from_json(&h.to_json().expect("json")).expect("load"),
        h
    );
}
