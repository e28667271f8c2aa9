//! Real-workload DDL through a real MariaDB: after every statement the schema history must
//! describe each table exactly as the binlog's TABLE_MAP does (same columns in the same order,
//! same primary key), so rows always decode and key with the right columns.

mod common;
use common::*;
use sluice_capture::binlog::ReaderEvent;
use sluice_capture::capture::{Capture, Captured};
use sluice_capture::schema::SchemaHistory;
use sluice_testkit::mariadb::MariaDb;

const WORKLOAD: &[&str] = &[
    "CREATE TABLE d.t (id INT PRIMARY KEY, c INT, s VARCHAR(10))",
    "CREATE TABLE IF NOT EXISTS d.t (id INT PRIMARY KEY)",
    "ALTER TABLE d.t ADD INDEX idx (c), ADD COLUMN x INT AFTER id",
    "ALTER TABLE d.t ADD COLUMN y INT FIRST",
    "CREATE INDEX i2 ON d.t (s)",
    "DROP INDEX i2 ON d.t",
    "ALTER TABLE d.t DROP INDEX idx",
    "ALTER TABLE d.t ENGINE=InnoDB",
    "ALTER TABLE d.t MODIFY COLUMN c BIGINT NOT NULL DEFAULT 0 COMMENT 'x'",
    "ALTER TABLE d.t MODIFY COLUMN s VARCHAR(20) FIRST",
    "ALTER TABLE d.t CHANGE c c2 INT AFTER id",
    "ALTER TABLE d.t RENAME COLUMN c2 TO c3",
    "ALTER TABLE d.t CONVERT TO CHARACTER SET utf8mb4",
    "ALTER TABLE d.t ADD COLUMN f INT, ALGORITHM=INPLACE, LOCK=NONE",
    "ALTER TABLE d.t DROP COLUMN f",
    "CREATE TABLE d.t2 LIKE d.t",
    "RENAME TABLE d.t TO d.t3, d.t2 TO d.t",
    "CREATE VIEW d.v AS SELECT * FROM d.t",
    "DROP VIEW d.v",
    "CREATE TEMPORARY TABLE d.tmp (a INT); INSERT INTO d.tmp VALUES (1); DROP TEMPORARY TABLE d.tmp",
    "TRUNCATE TABLE d.t3",
    "CREATE OR REPLACE TABLE d.t3 (id BIGINT PRIMARY KEY, z TEXT)",
    "ALTER DATABASE d CHARACTER SET utf8mb4",
    "DROP TABLE IF EXISTS d.nope",
    "CREATE SEQUENCE d.seq1",
    "CREATE TABLE d.nopk (a INT, b INT)",
    "ALTER TABLE d.nopk ADD PRIMARY KEY (b)",
    "ALTER TABLE d.nopk DROP PRIMARY KEY, ADD UNIQUE KEY uk (a, b)",
    "ALTER TABLE d.nopk MODIFY a INT NOT NULL, MODIFY b INT NOT NULL",
    "CREATE TABLE `d`.`Weird Name` (`id` INT PRIMARY KEY, `select` INT)",
    "ALTER TABLE d.t3 ADD COLUMN j JSON",
    "CREATE USER 'u'@'%'",
    "GRANT SELECT ON d.* TO 'u'@'%'",
    "CREATE PROCEDURE d.p() SELECT 1",
    "CREATE TRIGGER d.tr BEFORE INSERT ON d.t FOR EACH ROW SET NEW.id = NEW.id",
];

#[tokio::test]
async fn history_matches_every_table_map_through_real_ddl() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d").expect("db");
    let mut history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    // After every statement, insert one row into every table so a TABLE_MAP shows the
    // server's view of it.
    let tables = ["t", "t3", "nopk", "Weird Name"];
    let mut n = 0;
    for stmt in WORKLOAD {
        db.exec(stmt).unwrap_or_else(|e| panic!("{stmt}: {e}"));
        for t in tables {
            n += 1;
            // Ignore failures (table absent at this point, NOT NULL columns, ...).
            let _ = db.exec(&format!("INSERT IGNORE INTO d.`{t}` () VALUES ()"));
            let _ = db.exec(&format!("DELETE FROM d.`{t}`"));
        }
    }
    let _ = n;
    db.exec("SELECT NEXTVAL(d.seq1); CREATE TABLE d.marker (id INT PRIMARY KEY)")
        .expect("marker");
    // The whole capture path goes through the same workload without error (sequence rows,
    // heartbeat-free DDL, ...).
    let mut c = Capture::new(
        reader(&db.url(), 702, history.snapshot_pos.clone()),
        history.clone(),
    );
    loop {
        match c.next().await.expect("capture") {
            Captured::Ddl(d) if d.query.contains("marker") => break,
            Captured::Rows { rows, .. } => assert!(rows.iter().all(|r| r.table_id.0 >= 1000)),
            _ => {}
        }
    }
    assert!(c.history.is_sequence("d", "seq1"));
    let mut r = reader(&db.url(), 701, history.snapshot_pos.clone());
    let txns = read_until(&mut r, |t| is_stmt(t, "marker")).await;
    let mut checked = 0;
    for t in txns {
        if let Some(s) = &t.statement {
            history
                .apply(t.commit_ts, 0, &s.database, &s.query)
                .unwrap_or_else(|e| panic!("applying {:?}: {e}", s.query));
        }
        for row in &t.rows {
            let meta = &row.table;
            if history.is_sequence(&meta.database, &meta.table) {
                continue; // sequences are not tables
            }
            let h = history
                .table_at(&meta.database, &meta.table, t.commit_ts)
                .unwrap_or_else(|| {
                    panic!(
                        "history lacks {}.{} at {}",
                        meta.database, meta.table, t.commit_ts
                    )
                });
            let hn: Vec<&str> = h.columns.iter().map(|c| c.name.as_str()).collect();
            let mn: Vec<&str> = meta.columns.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(hn, mn, "columns of {} after {:?}", meta.table, t.start);
            if !meta.primary_key.is_empty() {
                assert_eq!(
                    h.key_columns, meta.primary_key,
                    "primary key of {}",
                    meta.table
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 40, "rows checked: {checked}");
    let _ = ReaderEvent::Resolved(0);
}
