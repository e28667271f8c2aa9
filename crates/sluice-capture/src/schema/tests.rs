//! Unit tests of the schema history (no server): DDL application, charsets, statement text.

use super::columns::*;
use super::sql_text::*;
use super::*;
use crate::charset::charset_prefix;
use sluice_partition::Layout;
use sluice_types::{ColumnType, DdlKind, DdlSession, InfluenceScope};

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
        expand_executable_comments("CREATE TABLE t (id INT) /*!50100 PARTITION BY HASH (id) */"),
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
        .apply(
            F + 23,
            0,
            "d",
            "ALTER SCHEMA `d3` DEFAULT CHARACTER SET = latin1 DEFAULT COLLATE = latin1_general_cs"
        )
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

fn names(h: &SchemaHistory, t: &str) -> Vec<String> {
    h.table_at("d", t, u64::MAX)
        .unwrap_or_else(|| panic!("d.{t}"))
        .columns
        .iter()
        .map(|c| c.name.clone())
        .collect()
}

fn key_names(h: &SchemaHistory, t: &str) -> Vec<String> {
    let s = h.table_at("d", t, u64::MAX).expect("table");
    s.key_columns
        .iter()
        .map(|i| s.columns[*i].name.clone())
        .collect()
}

#[test]
fn alter_names_the_columns_of_the_table_before_it() {
    let mut h = h();
    apply(&mut h, 11, "CREATE DATABASE d");
    apply(
        &mut h,
        12,
        "CREATE TABLE t (a INT, b BIGINT, c INT, PRIMARY KEY (a))",
    );
    // Two CHANGEs swap the names; each keeps its own definition and key membership.
    apply(
        &mut h,
        13,
        "ALTER TABLE t CHANGE COLUMN a b INT NOT NULL, CHANGE COLUMN b a BIGINT",
    );
    assert_eq!(names(&h, "t"), ["b", "a", "c"]);
    let s = h.table_at("d", "t", u64::MAX).expect("t");
    let types: Vec<ColumnType> = s.columns.iter().map(|c| c.ty).collect();
    assert_eq!(
        types,
        [ColumnType::Int, ColumnType::BigInt, ColumnType::Int]
    );
    assert_eq!(key_names(&h, "t"), ["b"], "the key follows its column");
    assert!(!s.columns[0].nullable);
    // RENAME COLUMN the same way; DROP names the original column, not the renamed one.
    apply(
        &mut h,
        14,
        "ALTER TABLE t RENAME COLUMN b TO c, RENAME COLUMN c TO b",
    );
    assert_eq!(names(&h, "t"), ["c", "a", "b"]);
    apply(
        &mut h,
        15,
        "ALTER TABLE t CHANGE a c2 BIGINT, DROP COLUMN b",
    );
    assert_eq!(names(&h, "t"), ["c", "c2"]);
    // AFTER names a column as the statement leaves it (a renamed one by its new name).
    apply(
        &mut h,
        16,
        "ALTER TABLE t CHANGE c2 z BIGINT FIRST, ADD COLUMN y INT AFTER z",
    );
    assert_eq!(names(&h, "t"), ["z", "y", "c"]);
    apply(
        &mut h,
        17,
        "ALTER TABLE t MODIFY c INT AFTER z, CHANGE y y INT",
    );
    assert_eq!(names(&h, "t"), ["z", "c", "y"]);
    assert_eq!(key_names(&h, "t"), ["c"]);
    apply(
        &mut h,
        18,
        "ALTER TABLE t RENAME COLUMN IF EXISTS nope TO n, RENAME COLUMN IF EXISTS y TO w",
    );
    assert_eq!(names(&h, "t"), ["z", "c", "w"]);
}

#[test]
fn the_binary_attribute_takes_the_bin_collation_of_the_charset_in_effect() {
    let mut h = hcs();
    apply(&mut h, 11, "CREATE DATABASE d CHARACTER SET latin1");
    apply(
        &mut h,
        12,
        "CREATE TABLE t (a VARCHAR(16) BINARY NOT NULL DEFAULT '', b CHAR(3) BINARY CHARACTER SET utf8mb4, c TEXT)",
    );
    expect(
        &h,
        "d",
        "t",
        &[
            ("a", "latin1_bin"),
            ("b", "utf8mb4_bin"),
            ("c", "latin1_swedish_ci"),
        ],
    );
    apply(
        &mut h,
        13,
        "CREATE TABLE u (a CHAR(4) BINARY) DEFAULT CHARSET=utf8mb3",
    );
    expect(&h, "d", "u", &[("a", "utf8mb3_bin")]);
    apply(
        &mut h,
        14,
        "ALTER TABLE u ADD COLUMN b VARCHAR(5) BINARY, MODIFY a CHAR(4)",
    );
    expect(
        &h,
        "d",
        "u",
        &[("a", "utf8mb3_general_ci"), ("b", "utf8mb3_bin")],
    );
}

#[test]
fn mariadb_database_and_column_shorthands() {
    let mut h = hcs();
    apply(
        &mut h,
        11,
        "CREATE DATABASE d COMMENT 'the app' CHARACTER SET DEFAULT",
    );
    assert_eq!(db_default(&h, "d").as_deref(), Some("utf8mb4_general_ci"));
    apply(
        &mut h,
        12,
        "CREATE TABLE t (a NATIONAL CHAR(2), b NATIONAL VARCHAR(3), c NATIONAL CHAR VARYING(4), \
         d CHAR(5) UNICODE, e CHAR(6) ASCII, f CHAR(7) CHARACTER SET latin1 COLLATE DEFAULT, \
         h VARCHAR(3) BINARY)",
    );
    expect(
        &h,
        "d",
        "t",
        &[
            ("a", "utf8mb3_general_ci"),
            ("b", "utf8mb3_general_ci"),
            ("c", "utf8mb3_general_ci"),
            ("d", "ucs2_general_ci"),
            ("e", "latin1_swedish_ci"),
            ("f", "latin1_swedish_ci"),
            ("h", "utf8mb4_bin"),
        ],
    );
    let types: Vec<ColumnType> = h
        .table_at("d", "t", u64::MAX)
        .expect("t")
        .columns
        .iter()
        .map(|c| c.ty)
        .collect();
    assert_eq!(
        types[..3],
        [ColumnType::Char, ColumnType::VarChar, ColumnType::VarChar]
    );
    // OR REPLACE drops the database with its tables, then creates it again.
    let ev = apply(
        &mut h,
        13,
        "CREATE OR REPLACE DATABASE d COMMENT = 'again' DEFAULT CHARSET = latin1",
    );
    assert_eq!(ev.kind, DdlKind::CreateDatabase);
    assert!(
        h.table_at("d", "t", u64::MAX).is_none(),
        "t went with its database"
    );
    assert_eq!(db_default(&h, "d").as_deref(), Some("latin1_swedish_ci"));
    apply(&mut h, 14, "CREATE TABLE t (a CHAR(1))");
    expect(&h, "d", "t", &[("a", "latin1_swedish_ci")]);
    apply(&mut h, 15, "CREATE SCHEMA IF NOT EXISTS d COLLATE DEFAULT");
    assert_eq!(
        db_default(&h, "d").as_deref(),
        Some("latin1_swedish_ci"),
        "IF NOT EXISTS kept it"
    );
}

#[test]
fn digit_led_names() {
    let mut h = h();
    apply(&mut h, 11, "CREATE DATABASE d");
    apply(
        &mut h,
        12,
        "CREATE TABLE 2fa_codes (id INT PRIMARY KEY, 3d_model INT, 1e INT, 1ea10 INT)",
    );
    assert_eq!(names(&h, "2fa_codes"), ["id", "3d_model", "1e", "1ea10"]);
    apply(
        &mut h,
        13,
        "ALTER TABLE 2fa_codes ADD COLUMN 9lives INT DEFAULT 1e3",
    );
    assert_eq!(
        names(&h, "2fa_codes"),
        ["id", "3d_model", "1e", "1ea10", "9lives"]
    );
}

#[test]
fn application_time_periods_and_collate_default() {
    let mut h = hcs();
    apply(&mut h, 11, "CREATE DATABASE d");
    apply(
        &mut h,
        12,
        "CREATE TABLE t2 (id INT, f INT, s DATE, e DATE, PERIOD FOR p(s,e), \
         PRIMARY KEY(id, p WITHOUT OVERLAPS))",
    );
    let t = h.table_at("d", "t2", u64::MAX).expect("t2");
    let nullable: Vec<bool> = t.columns.iter().map(|c| c.nullable).collect();
    assert_eq!(
        nullable,
        [false, true, false, false],
        "the period's bounds are NOT NULL"
    );
    assert_eq!(
        key_names(&h, "t2"),
        ["id", "e", "s"],
        "WITHOUT OVERLAPS keys by end, start"
    );
    apply(
        &mut h,
        13,
        "CREATE TABLE t (s DATE, e DATE, PERIOD FOR p(s,e))",
    );
    let nullable: Vec<bool> = h
        .table_at("d", "t", u64::MAX)
        .expect("t")
        .columns
        .iter()
        .map(|c| c.nullable)
        .collect();
    assert_eq!(nullable, [false, false]);
    // COLLATE DEFAULT: the charset's default collation, not the table's.
    apply(
        &mut h,
        14,
        "CREATE TABLE c (a CHAR(10) COLLATE DEFAULT, b CHAR(1), x CHAR(2) CHARACTER SET latin1 COLLATE DEFAULT) \
         CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    );
    expect(
        &h,
        "d",
        "c",
        &[
            ("a", "utf8mb4_general_ci"),
            ("b", "utf8mb4_bin"),
            ("x", "latin1_swedish_ci"),
        ],
    );
}

#[test]
fn zerofill_is_unsigned() {
    let mut h = hcs();
    apply(&mut h, 11, "CREATE DATABASE d");
    apply(
        &mut h,
        12,
        "CREATE TABLE z (b INT(2) ZEROFILL, c INT ZEROFILL UNSIGNED, d BIGINT UNSIGNED ZEROFILL, e DECIMAL(5,2) ZEROFILL, f INT)",
    );
    let t = h.table_at("d", "z", u64::MAX).expect("z");
    let unsigned: Vec<bool> = t.columns.iter().map(|c| c.unsigned).collect();
    assert_eq!(unsigned, [true, true, true, true, false]);
    apply(&mut h, 13, "CREATE OR REPLACE UNIQUE INDEX i1 ON z (f)");
    apply(&mut h, 14, "CREATE OR REPLACE INDEX i2 ON z (b)");
    assert_eq!(h.ddls.len(), 4);
    assert!(
        h.skipped.is_empty(),
        "every DDL understood: {:?}",
        h.skipped
    );
}

#[test]
fn create_table_like_in_parentheses() {
    let mut h = h();
    apply(&mut h, 11, "CREATE DATABASE d");
    apply(&mut h, 12, "CREATE TABLE t1 (p INT PRIMARY KEY, a CHAR(3))");
    apply(&mut h, 13, "create table t3 (like t1)");
    assert_eq!(names(&h, "t3"), ["p", "a"]);
    assert_eq!(key_names(&h, "t3"), ["p"]);
}

/// MariaDB resolves an ALTER's key parts by name against the table the whole statement makes:
/// `DROP i, ADD i …` keeps the key on `i`; a dropped column leaves the primary key (which keeps
/// its other parts) and drops a unique key it was part of (checked on MariaDB 10.11, found by
/// the suite replay: `main/alter_table.test`).
#[test]
fn a_column_dropped_and_added_again_in_one_alter_keeps_its_key() {
    let mut h = h();
    apply(&mut h, 100, "CREATE DATABASE d");
    apply(
        &mut h,
        200,
        "CREATE TABLE t (i INT NOT NULL, v INT, PRIMARY KEY (i))",
    );
    apply(
        &mut h,
        300,
        "ALTER TABLE t DROP i, ADD i INT UNSIGNED NOT NULL AUTO_INCREMENT, AUTO_INCREMENT = 1",
    );
    let s = h.table_at("d", "t", F + 300).expect("t");
    let names: Vec<&str> = s.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["v", "i"]);
    assert_eq!(s.key_columns, vec![1], "the primary key is on the new i");
    apply(
        &mut h,
        400,
        "CREATE TABLE u (a INT NOT NULL, b INT NOT NULL, c INT NOT NULL, PRIMARY KEY (a, b), UNIQUE KEY (c))",
    );
    apply(&mut h, 500, "ALTER TABLE u DROP b, DROP c");
    let s = h.table_at("d", "u", F + 500).expect("u");
    assert_eq!(s.key_columns, vec![0], "the primary key keeps a");
    assert!(s.unique_keys.is_empty());
}
