//! End-to-end, on a single-node `sluice server` against real MariaDB instances: DDL that depends
//! on the upstream session (`sql_mode` MAXDB and ANSI_QUOTES, `SET STATEMENT … FOR`, the
//! session's `collation_server`), `ALTER DATABASE … CHARACTER SET`, and views (CREATE, CREATE OR
//! REPLACE, ALTER, DROP; with DEFINER and SQL SECURITY clauses) reach a MySQL downstream as the
//! upstream made them, and a file sink records them (issue 10).

mod common;
use common::*;
use serde_json::Value;
use sluice_testkit::mariadb::MariaDb;
use std::path::Path;

/// `TABLE_NAME.COLUMN_NAME DATA_TYPE COLLATION DEFAULT` of every column of `db`, sorted.
fn columns(db: &MariaDb, schema: &str) -> Vec<Vec<String>> {
    db.query(&format!(
        "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, IFNULL(COLLATION_NAME, '-'), \
         IFNULL(COLUMN_DEFAULT, '-') FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = '{schema}' ORDER BY TABLE_NAME, ORDINAL_POSITION"
    ))
    .expect("columns")
}

fn database_collation(db: &MariaDb, schema: &str) -> String {
    db.query_one(&format!(
        "SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '{schema}'"
    ))
    .expect("schema collation")
}

/// Every schema file (table- and database-level) under a storage root, parsed.
fn schema_files(root: &Path) -> Vec<Value> {
    fn walk(dir: &Path, out: &mut Vec<Value>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("schema_") && n.ends_with(".json"))
            {
                let v = serde_json::from_slice(&std::fs::read(&p).expect("schema file"))
                    .expect("schema json");
                out.push(v);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out
}

/// Starts the server with a MySQL and a file changefeed, runs `workload` upstream, and waits
/// until both changefeeds passed it.
struct Setup {
    out: Outputs,
    up: MariaDb,
    up_url: String,
    down: MariaDb,
    down_url: String,
    root: std::path::PathBuf,
    server: Server,
    /// Last: removed only after the server stopped.
    dir: ScratchDir,
}

fn replicate(name: &str, workload: &str) -> Setup {
    let out = Outputs::default();
    let dir = tmpdir(name);
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let server = Server::start(&dir, &up_url);
    create_changefeed(&out, &server.url(), "to-mysql", &format!("{down_url}/"));
    let root = dir.join("out");
    let storage = format!(
        "file://{}?protocol=canal-json&enable-tidb-extension=true&flush-interval=200ms",
        root.display()
    );
    create_changefeed(&out, &server.url(), "to-files", &storage);
    up.exec(workload).expect("workload");
    let target = master_ts(&up);
    wait_checkpoint(&out, &server.url(), "to-mysql", target, 120);
    wait_checkpoint(&out, &server.url(), "to-files", target, 120);
    Setup {
        out,
        dir,
        up,
        up_url,
        down,
        down_url,
        root,
        server,
    }
}

impl Setup {
    /// No changefeed shows an error.
    fn assert_healthy(&self) {
        let r = sluice(
            &self.out,
            &["cli", "--server", &self.server.url(), "changefeed", "list"],
        );
        assert!(
            r.stdout.contains("to-mysql") && !r.stdout.contains("error"),
            "{}",
            r.stdout
        );
    }

    fn finish(self) {
        self.out.assert_no_secret(&[&self.server.log]);
        let dir = self.dir.clone();
        drop(self);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

const SESSION_WORKLOAD: &str = "CREATE DATABASE sm;
     SET SESSION sql_mode = 'MAXDB';
     CREATE TABLE sm.maxdb (id INT PRIMARY KEY, at TIMESTAMP NULL);
     SET SESSION sql_mode = DEFAULT;
     SET STATEMENT sql_mode = 'MAXDB' FOR CREATE TABLE sm.stmt (id INT PRIMARY KEY, at TIMESTAMP NULL);
     SET SESSION sql_mode = 'ANSI_QUOTES';
     CREATE TABLE sm.\"quoted\" (\"id\" INT PRIMARY KEY, \"v\" VARCHAR(8) DEFAULT 'x');
     SET SESSION sql_mode = DEFAULT;
     CREATE TABLE sm.plain (id INT PRIMARY KEY, at TIMESTAMP NULL);
     INSERT INTO sm.maxdb VALUES (1, '2024-01-02 03:04:05'), (2, NULL);
     INSERT INTO sm.stmt VALUES (1, '2024-05-06 07:08:09');
     INSERT INTO sm.quoted (id) VALUES (1), (2);
     INSERT INTO sm.plain VALUES (1, '2024-01-02 03:04:05');
     SET SESSION time_zone = '+05:00';
     CREATE TABLE sm.tz (id INT PRIMARY KEY, at TIMESTAMP NOT NULL DEFAULT '2020-01-01 00:00:00');
     SET SESSION time_zone = DEFAULT;
     INSERT INTO sm.tz (id) VALUES (1);
     SET SESSION collation_server = 'latin1_german1_ci';
     CREATE DATABASE sl;
     SET SESSION collation_server = DEFAULT;
     CREATE TABLE sl.t (id INT PRIMARY KEY, c VARCHAR(8));
     INSERT INTO sl.t VALUES (1, 'a');
     CREATE DATABASE ad;
     ALTER DATABASE ad CHARACTER SET latin1 COLLATE latin1_general_ci;
     CREATE TABLE ad.t (id INT PRIMARY KEY, c VARCHAR(8));
     INSERT INTO ad.t VALUES (1, 'b');
     ALTER SCHEMA ad COLLATE latin1_bin;
     CREATE TABLE ad.u (id INT PRIMARY KEY, c CHAR(2));
     INSERT INTO ad.u VALUES (1, 'c');";

#[test]
fn ddl_runs_under_the_upstream_session_and_alter_database_replicates() {
    let s = replicate("session-ddl", SESSION_WORKLOAD);
    // Upstream, the session's MAXDB made a TIMESTAMP a DATETIME; `SET STATEMENT sql_mode` did
    // not (MariaDB parses under the session's mode): the downstream has the same columns.
    let up_cols = columns(&s.up, "sm");
    let at_type = |t: &str| {
        up_cols
            .iter()
            .find(|c| c[0] == t && c[1] == "at")
            .map(|c| c[2].clone())
    };
    assert_eq!(at_type("maxdb").as_deref(), Some("datetime"), "{up_cols:?}");
    assert_eq!(at_type("stmt").as_deref(), Some("timestamp"), "{up_cols:?}");
    assert_eq!(
        columns(&s.down, "sm"),
        up_cols,
        "{:?}",
        s.down.query("SELECT query FROM sluice_sink.ddl_ts")
    );
    // The session's collation_server is the default of the database it created.
    assert_eq!(database_collation(&s.up, "sl"), "latin1_german1_ci");
    assert_eq!(database_collation(&s.down, "sl"), "latin1_german1_ci");
    assert_eq!(columns(&s.down, "sl"), columns(&s.up, "sl"));
    // ALTER DATABASE: the downstream database's default, and the tables created after it.
    assert_eq!(database_collation(&s.up, "ad"), "latin1_bin");
    assert_eq!(database_collation(&s.down, "ad"), "latin1_bin");
    assert_eq!(columns(&s.down, "ad"), columns(&s.up, "ad"));
    for tables in ["sm.*", "sl.*", "ad.*"] {
        let r = check(&s.out, &s.up_url, &s.down_url, tables);
        assert_eq!(r.code, 0, "check {tables}: {} {}", r.stdout, r.stderr);
    }
    s.assert_healthy();
    // The history followed MAXDB: the schema files say DATETIME where the server made one.
    let files = schema_files(&s.root);
    let column_type = |table: &str| -> Vec<String> {
        files
            .iter()
            .filter(|f| f["Schema"] == "sm" && f["Table"] == table)
            .flat_map(|f| f["Columns"].as_array().cloned().unwrap_or_default())
            .filter(|c| c["ColumnName"] == "at")
            .map(|c| c["ColumnType"].as_str().unwrap_or("").to_string())
            .collect()
    };
    for (table, ty) in [
        ("maxdb", "DATETIME"),
        ("stmt", "TIMESTAMP"),
        ("plain", "TIMESTAMP"),
    ] {
        let tys = column_type(table);
        assert!(
            !tys.is_empty() && tys.iter().all(|t| t == ty),
            "{table}: {tys:?}"
        );
    }
    // ALTER DATABASE is recorded as a database-level schema file.
    assert!(
        files.iter().any(|f| f["Type"] == "AlterDatabase"
            && f["Query"]
                .as_str()
                .is_some_and(|q| q.contains("latin1_bin"))),
        "{files:?}"
    );
    s.finish();
}

const VIEW_WORKLOAD: &str = "CREATE DATABASE vw;
     CREATE TABLE vw.t (id INT PRIMARY KEY, v INT);
     INSERT INTO vw.t VALUES (1, 10), (2, 20), (3, 30);
     CREATE VIEW vw.doubled AS SELECT id, v * 2 AS d FROM vw.t;
     CREATE OR REPLACE ALGORITHM = MERGE SQL SECURITY INVOKER VIEW vw.big AS SELECT id FROM vw.t WHERE v > 15;
     ALTER VIEW vw.doubled AS SELECT id, v * 3 AS d FROM vw.t;
     ALTER TABLE vw.t ADD COLUMN w INT DEFAULT 7;
     USE vw;
     CREATE VIEW with_w AS SELECT id, w FROM t;
     CREATE DEFINER = 'nobody'@'nowhere' VIEW vw.orphan AS SELECT id FROM vw.t;
     DROP VIEW vw.big;
     INSERT INTO vw.t (id, v) VALUES (4, 40);";

#[test]
fn views_replicate_in_order_and_are_recorded_by_file_sinks() {
    let s = replicate("views", VIEW_WORKLOAD);
    let views = |db: &MariaDb| {
        db.query(
            "SELECT TABLE_NAME, VIEW_DEFINITION, SECURITY_TYPE, DEFINER FROM information_schema.VIEWS \
             WHERE TABLE_SCHEMA = 'vw' ORDER BY TABLE_NAME",
        )
        .expect("views")
    };
    let up_views = views(&s.up);
    let names: Vec<&str> = up_views.iter().map(|v| v[0].as_str()).collect();
    assert_eq!(names, ["doubled", "orphan", "with_w"]);
    assert_eq!(views(&s.down), up_views);
    // The views read the same rows on both sides (the one created after the ALTER sees `w`).
    for v in ["doubled", "with_w"] {
        let q = format!("SELECT * FROM vw.{v} ORDER BY id");
        assert_eq!(
            s.down.query(&q).expect("downstream view"),
            s.up.query(&q).expect("upstream view")
        );
    }
    let r = check(&s.out, &s.up_url, &s.down_url, "vw.t");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    s.assert_healthy();
    // A file sink records each view DDL as a database-level schema file.
    let files = schema_files(&s.root);
    let view_ddls: Vec<(String, String)> = files
        .iter()
        .filter(|f| f["Type"] == "CreateView" || f["Type"] == "DropView")
        .map(|f| {
            (
                f["Schema"].as_str().unwrap_or("").to_string(),
                f["Query"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(view_ddls.len(), 6, "{view_ddls:?}");
    assert!(view_ddls.iter().all(|(db, _)| db == "vw"), "{view_ddls:?}");
    s.finish();
}

const OBJECTS_WORKLOAD: &str = "CREATE DATABASE ob;
     CREATE SEQUENCE ob.s1 START WITH 100 INCREMENT BY 5 CACHE 10;
     CREATE TABLE ob.t (id INT DEFAULT (NEXT VALUE FOR ob.s1) PRIMARY KEY, a INT);
     INSERT INTO ob.t (a) VALUES (1), (2), (3);
     ALTER SEQUENCE ob.s1 RESTART WITH 1000;
     INSERT INTO ob.t (a) VALUES (4);
     USE ob;
     CREATE SEQUENCE s2;
     SELECT NEXTVAL(s2);
     DROP SEQUENCE s2;
     CREATE TABLE ob.src (id INT PRIMARY KEY, v INT, s VARCHAR(10));
     INSERT INTO ob.src VALUES (1, 10, 'a'), (2, 20, 'b');
     CREATE TABLE ob.sel (PRIMARY KEY (id)) SELECT id, v+1, concat(s, 'y'), v*2 AS named, -v, v IS NULL FROM ob.src;
     INSERT INTO ob.sel VALUES (3, 31, 'cy', 60, -30, 0);
     CREATE TABLE ob.sv (id INT PRIMARY KEY, v INT,
         rs TIMESTAMP(6) GENERATED ALWAYS AS ROW START,
         re TIMESTAMP(6) GENERATED ALWAYS AS ROW END,
         PERIOD FOR SYSTEM_TIME (rs, re)) WITH SYSTEM VERSIONING;
     INSERT INTO ob.sv (id, v) VALUES (1, 1), (2, 2), (3, 3);
     UPDATE ob.sv SET v = 20 WHERE id = 2;
     DELETE FROM ob.sv WHERE id = 1;
     UPDATE ob.sv SET v = 30 WHERE id = 3;
     CREATE TABLE ob.marker (id INT PRIMARY KEY);";

/// Current rows of `ob.sv` (the period columns differ: each server sets its own).
fn current_versioned(db: &MariaDb) -> Vec<Vec<String>> {
    db.query("SELECT id, v FROM ob.sv ORDER BY id").expect("sv")
}

#[test]
fn sequences_create_select_and_explicit_periods_replicate() {
    let s = replicate("objects", OBJECTS_WORKLOAD);
    // The sequence exists downstream with its definition (a MariaDB downstream), so the table
    // whose DEFAULT reads it was created; the rows carry the values the upstream drew.
    let seqs = |db: &MariaDb| {
        db.query(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'ob' \
             AND TABLE_TYPE = 'SEQUENCE' ORDER BY 1",
        )
        .expect("sequences")
    };
    assert_eq!(seqs(&s.up), [["s1"]]);
    assert_eq!(seqs(&s.down), seqs(&s.up));
    assert_eq!(
        s.down
            .query_one("SELECT increment FROM ob.s1")
            .expect("downstream s1"),
        "5"
    );
    // CREATE TABLE … SELECT: columns named after expressions, as information_schema names them.
    assert_eq!(columns(&s.down, "ob"), columns(&s.up, "ob"));
    // The explicit period: only current rows, no history row written as a current one.
    assert_eq!(current_versioned(&s.down), current_versioned(&s.up));
    for tables in ["ob.t", "ob.src", "ob.sel", "ob.marker"] {
        let r = check(&s.out, &s.up_url, &s.down_url, tables);
        assert_eq!(r.code, 0, "check {tables}: {} {}", r.stdout, r.stderr);
    }
    s.assert_healthy();
    // The file sink records the sequence DDLs (database-level schema files, run as logged).
    let files = schema_files(&s.root);
    let seq_ddls = files
        .iter()
        .filter(|f| {
            f["Query"]
                .as_str()
                .is_some_and(|q| q.to_ascii_uppercase().contains("SEQUENCE"))
        })
        .count();
    assert!(seq_ddls >= 4, "{files:?}");
    s.finish();
}

const NON_STRICT_WORKLOAD: &str = "CREATE DATABASE ns;
     CREATE TABLE ns.t (id INT PRIMARY KEY, d DATE, dt DATETIME, e ENUM('a', 'b'), s VARCHAR(3),
         n TINYINT, x DECIMAL(4, 1));
     CREATE TABLE ns.ai (id INT AUTO_INCREMENT PRIMARY KEY, v INT);
     SET SESSION sql_mode = '';
     INSERT INTO ns.t VALUES (1, '2020-13-45', '0000-00-00 00:00:00', 'zz', 'abcdef', 999, 12345);
     SET SESSION sql_mode = 'ALLOW_INVALID_DATES';
     INSERT INTO ns.t VALUES (2, '2020-02-31', '2021-04-31 10:00:00', 'a', 'ab', 1, 1.5);
     SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO';
     INSERT INTO ns.ai VALUES (0, 1), (5, 2);
     SET SESSION sql_mode = DEFAULT;
     INSERT IGNORE INTO ns.t VALUES (3, '2020-00-00', NULL, 'q', 'toolong', -300, 1.25);
     UPDATE IGNORE ns.t SET e = 'nope', s = 'four' WHERE id = 2;
     INSERT INTO ns.t VALUES (4, '2024-01-02', NULL, 'b', 'ok', 4, 4.0);";

#[test]
fn rows_the_upstream_accepted_under_non_strict_modes_replicate() {
    let s = replicate("non-strict", NON_STRICT_WORKLOAD);
    let rows = |db: &MariaDb, t: &str| {
        db.query(&format!("SELECT * FROM ns.{t} ORDER BY id"))
            .expect("rows")
    };
    let up = rows(&s.up, "t");
    assert_eq!(up.len(), 4, "{up:?}");
    assert_eq!(rows(&s.down, "t"), up);
    assert_eq!(rows(&s.down, "ai"), rows(&s.up, "ai"));
    for tables in ["ns.t", "ns.ai"] {
        let r = check(&s.out, &s.up_url, &s.down_url, tables);
        assert_eq!(r.code, 0, "check {tables}: {} {}", r.stdout, r.stderr);
    }
    s.assert_healthy();
    s.finish();
}

/// A `CREATE OR REPLACE TABLE` that fails upstream after dropping the old table is logged with
/// its error: downstream it fails the same way (the old table is gone there too) and the
/// changefeed goes on; the history knows the table is gone, so a table created again under the
/// name replicates. An ALTER of a system-versioned table, allowed upstream by the session's
/// `system_versioning_alter_history = KEEP` (not in the binlog), is allowed downstream too.
/// A table whose CREATE the history cannot parse (`COLUMN_GET(… AS CHAR)`) takes its columns
/// from the first TABLE_MAP, and its rows are written with them, not with the placeholder the
/// DDL made. Rows a `check_constraint_checks = 0` session stored against a CHECK constraint are
/// stored downstream too, and so are the rows of an unparsed `CREATE … WITH SYSTEM VERSIONING`
/// (its implicit `row_start`, `row_end` are never written). All five stopped the changefeed before (found by the MariaDB suite
/// replay through the sink: `main/default.test`, `suite/versioning/t/alter.test`,
/// `main/create.test`, `main/check_constraint.test`, `main/create_select.test`).
#[test]
fn ddl_that_failed_upstream_or_needed_keep_history_replicates() {
    let s = replicate(
        "ddl-outcome",
        "CREATE DATABASE fo; CREATE TABLE fo.t1 (a INT);",
    );
    let failed =
        s.up.exec("CREATE OR REPLACE TABLE fo.t1 (a INT DEFAULT b, b INT DEFAULT a)");
    assert!(failed.is_err(), "the upstream refuses it: {failed:?}");
    s.up.exec(
        "CREATE TABLE fo.t1 (x INT PRIMARY KEY, y VARCHAR(8));
         INSERT INTO fo.t1 VALUES (1, 'one'), (2, 'two');
         SET SESSION system_versioning_alter_history = KEEP;
         CREATE TABLE fo.v (id INT PRIMARY KEY, a INT) WITH SYSTEM VERSIONING;
         INSERT INTO fo.v VALUES (1, 1);
         ALTER TABLE fo.v ADD COLUMN b INT;
         INSERT INTO fo.v VALUES (2, 2, 2);
         CREATE TABLE fo.dc (color CHAR(32) AS (COLUMN_GET(dyn, 1 AS CHAR)) PERSISTENT,
             item VARCHAR(32) PRIMARY KEY, dyn BLOB);
         INSERT INTO fo.dc (item, dyn) VALUES ('shirt', COLUMN_CREATE(1, 'blue', 2, 'XL'));
         CREATE TABLE fo.cc (id INT PRIMARY KEY, v INT, CONSTRAINT positive CHECK (v > 0));
         SET SESSION check_constraint_checks = 0;
         INSERT INTO fo.cc VALUES (1, -5), (2, 7);
         SET SESSION check_constraint_checks = 1;
         SET SESSION sql_mode = 'IGNORE_BAD_TABLE_OPTIONS';
         CREATE TABLE fo.sv (id INT PRIMARY KEY, f INT foo=\"bar\") WITH SYSTEM VERSIONING;
         INSERT INTO fo.sv VALUES (1, 1), (2, 2);
         UPDATE fo.sv SET f = 20 WHERE id = 2;",
    )
    .expect("workload");
    let target = master_ts(&s.up);
    wait_checkpoint(&s.out, &s.server.url(), "to-mysql", target, 120);
    wait_checkpoint(&s.out, &s.server.url(), "to-files", target, 120);
    assert_eq!(columns(&s.down, "fo"), columns(&s.up, "fo"));
    let r = check(&s.out, &s.up_url, &s.down_url, "fo.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    s.assert_healthy();
    s.finish();
}
