//! Generated columns and DDLs that read other tables' definitions, in the schema history.
//!
//! Through a real MariaDB: after the snapshot and after every DDL read from the binlog, each
//! column's generation (none, `VIRTUAL`, `STORED`/`PERSISTENT`) and the routing key must be what
//! `information_schema` says, and rows must carry generated values as the server computed them.
//! Without a server: the influence of `CREATE TABLE … LIKE` and of foreign keys names the tables
//! they read ([`DdlInfluence::sources`]).

mod common;
use common::*;
use sluice_capture::capture::{Capture, Captured};
use sluice_capture::schema::{generation_from_extra, SchemaHistory};
use sluice_capture::BinlogPos;
use sluice_testkit::mariadb::MariaDb;
use sluice_types::{DdlEvent, Generation, InfluenceScope, TableId, Value};
use std::collections::BTreeMap;

/// Tables that exist before the snapshot.
const BEFORE: &[&str] = &[
    "CREATE TABLE g.snap (id INT PRIMARY KEY, v INT, dbl INT AS (v*2) VIRTUAL, \
     inc INT AS (v+1) PERSISTENT, u VARCHAR(20) GENERATED ALWAYS AS (concat('u', v)) STORED, \
     hid INT AS (v) VIRTUAL INVISIBLE, UNIQUE KEY (inc))",
    // A unique key on a generated column (always nullable in MariaDB) is not a routing key.
    "CREATE TABLE g.ukgen (a INT NOT NULL, b INT AS (a+1) PERSISTENT, UNIQUE KEY (b))",
];

/// DDLs applied from the binlog, each checked against the server.
const DDL: &[&str] = &[
    "CREATE TABLE g.ddl (id INT PRIMARY KEY, v INT, s INT AS (v+1) PERSISTENT, \
     w INT GENERATED ALWAYS AS (v*3) VIRTUAL, `persistent` INT)",
    "ALTER TABLE g.ddl ADD COLUMN g INT AS (v*2) VIRTUAL",
    "ALTER TABLE g.ddl ADD COLUMN st INT GENERATED ALWAYS AS (v-1) STORED AFTER id",
    "ALTER TABLE g.ddl MODIFY COLUMN w INT AS (v*4) VIRTUAL",
    "ALTER TABLE g.ddl MODIFY COLUMN s INT AS (v+5) PERSISTENT",
    "ALTER TABLE g.ddl CHANGE COLUMN s s2 INT",
    "ALTER TABLE g.ddl DROP COLUMN g",
    "CREATE TABLE g.copy LIKE g.snap",
    "ALTER TABLE g.ukgen ADD COLUMN c INT AS (a*3) VIRTUAL, ADD UNIQUE KEY (c)",
];

type View = BTreeMap<String, Vec<(String, Option<Generation>)>>;

/// Each table of `g` as the server describes it: columns in order with their generation, read
/// from `EXTRA` by this test's own rule, and the primary key.
fn server_view(db: &MariaDb) -> (View, BTreeMap<String, Vec<String>>) {
    let rows = db
        .query(
            "SELECT TABLE_NAME, COLUMN_NAME, EXTRA FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = 'g' ORDER BY TABLE_NAME, ORDINAL_POSITION",
        )
        .expect("columns");
    let mut view = View::new();
    for r in rows {
        let extra = r[2].to_ascii_uppercase();
        let g = if extra.contains("VIRTUAL GENERATED") {
            Some(Generation::Virtual)
        } else if extra.contains("STORED GENERATED") {
            Some(Generation::Stored)
        } else {
            None
        };
        view.entry(r[0].clone())
            .or_default()
            .push((r[1].clone(), g));
    }
    let keys = db
        .query(
            "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = 'g' AND INDEX_NAME = 'PRIMARY' ORDER BY TABLE_NAME, SEQ_IN_INDEX",
        )
        .expect("keys");
    let mut pk: BTreeMap<String, Vec<String>> = view.keys().map(|t| (t.clone(), vec![])).collect();
    for r in keys {
        pk.entry(r[0].clone()).or_default().push(r[1].clone());
    }
    (view, pk)
}

fn history_view(h: &SchemaHistory) -> (View, BTreeMap<String, Vec<String>>) {
    let mut view = View::new();
    let mut keys = BTreeMap::new();
    for t in h
        .tables_at(h.head)
        .into_iter()
        .filter(|t| t.database == "g")
    {
        let cols = t
            .columns
            .iter()
            .map(|c| (c.name.clone(), c.generated))
            .collect();
        view.insert(t.name.clone(), cols);
        let key = t
            .key_columns
            .iter()
            .map(|i| t.columns[*i].name.clone())
            .collect();
        keys.insert(t.name.clone(), key);
    }
    (view, keys)
}

fn assert_same(h: &SchemaHistory, db: &MariaDb, after: &str) {
    let (hv, hk) = history_view(h);
    let (sv, sk) = server_view(db);
    assert_eq!(hv, sv, "columns and their generation after {after}");
    assert_eq!(hk, sk, "routing keys after {after}");
}

#[tokio::test]
async fn generated_columns_follow_information_schema_through_snapshot_and_ddl() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE g").expect("db");
    for s in BEFORE {
        db.exec(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    let mut history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    assert_same(&history, &db, "the snapshot");
    let snapshot = history.clone();
    let mut r = reader(&db.url(), 711, history.snapshot_pos.clone());
    for stmt in DDL {
        db.exec(stmt).unwrap_or_else(|e| panic!("{stmt}: {e}"));
        for t in read_until(&mut r, |t| t.statement.is_some()).await {
            if let Some(s) = &t.statement {
                history
                    .apply(t.commit_ts, 0, &s.database, &s.query)
                    .unwrap_or_else(|e| panic!("applying {:?}: {e}", s.query));
            }
        }
        assert_same(&history, &db, stmt);
    }
    // Rows carry every column, generated ones as the server computed them (VIRTUAL ones too).
    db.exec(
        "INSERT INTO g.snap (id, v) VALUES (1, 20); CREATE TABLE g.marker (id INT PRIMARY KEY)",
    )
    .expect("row");
    let mut c = Capture::new(
        reader(&db.url(), 712, snapshot.snapshot_pos.clone()),
        snapshot,
    );
    let row = loop {
        match c.next().await.expect("capture") {
            Captured::Rows { rows, .. } if !rows.is_empty() => break rows[0].clone(),
            Captured::Ddl(d) if d.query.contains("marker") => panic!("no row captured"),
            _ => {}
        }
    };
    let after = row.after.expect("after image");
    let ints: Vec<Option<i64>> = after
        .iter()
        .map(|v| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        })
        .collect();
    assert_eq!(
        ints,
        vec![Some(1), Some(20), Some(40), Some(21), None, Some(20)],
        "{after:?}"
    );
    assert_eq!(after[4], Value::Text("u20".into()));
}

const F: u64 = 1 << 32;

fn h() -> SchemaHistory {
    let mut h = SchemaHistory::empty(BinlogPos::new("mysql-bin.000001", 4));
    h.apply(F + 5, 0, "d", "CREATE DATABASE d").expect("db");
    h
}

fn apply(h: &mut SchemaHistory, ts: u64, q: &str) -> DdlEvent {
    h.apply(F + ts, 0, "d", q)
        .unwrap_or_else(|e| panic!("{q}: {e}"))
        .expect("a ddl event")
}

#[test]
fn create_table_like_reads_its_source() {
    let mut h = h();
    apply(&mut h, 10, "CREATE TABLE d.src (id INT PRIMARY KEY)");
    let src = TableId(F + 10);
    let alter = apply(
        &mut h,
        20,
        "ALTER TABLE d.src ADD COLUMN x INT AS (id+1) PERSISTENT",
    );
    assert!(alter.influence.sources.is_empty());
    let e = apply(&mut h, 30, "CREATE TABLE d.e LIKE d.src");
    assert_eq!(
        e.influence.sources,
        vec![src],
        "the LIKE waits for its source"
    );
    assert_eq!(
        e.influence.added,
        vec![(TableId(F + 30), "d.e".to_string())]
    );
    assert_eq!(
        e.influence.scope,
        InfluenceScope::Tables(vec![]),
        "the source gets no new version"
    );
    let copy = h.table_at("d", "e", F + 30).expect("e");
    assert_eq!(copy.columns.len(), 2);
    assert_eq!(copy.columns[1].generated, Some(Generation::Stored));
    // CREATE OR REPLACE … LIKE: drops the old table, reads the source.
    let e = apply(&mut h, 40, "CREATE OR REPLACE TABLE d.e LIKE src");
    assert_eq!(e.influence.sources, vec![src]);
    assert_eq!(e.influence.dropped, vec![TableId(F + 30)]);
}

#[test]
fn foreign_key_parents_are_sources() {
    let mut h = h();
    apply(
        &mut h,
        10,
        "CREATE TABLE d.p (id INT PRIMARY KEY, k INT, UNIQUE KEY (k))",
    );
    let p = TableId(F + 10);
    let e = apply(
        &mut h,
        20,
        "CREATE TABLE d.c (id INT PRIMARY KEY, pid INT, CONSTRAINT f1 FOREIGN KEY (pid) REFERENCES p (id))",
    );
    assert_eq!(e.influence.sources, vec![p]);
    let c = TableId(F + 20);
    let e = apply(
        &mut h,
        30,
        "ALTER TABLE d.c ADD COLUMN pk INT, ADD FOREIGN KEY (pk) REFERENCES d.p (k)",
    );
    assert_eq!(e.influence.scope, InfluenceScope::Tables(vec![c]));
    assert_eq!(e.influence.sources, vec![p]);
    // A table referencing itself changes and reads only itself: no source.
    let e = apply(
        &mut h,
        40,
        "ALTER TABLE d.c ADD FOREIGN KEY (pid) REFERENCES c (id)",
    );
    assert!(e.influence.sources.is_empty(), "{:?}", e.influence);
    // An unknown parent (not replicated, or created with foreign_key_checks=0) is no source.
    let e = apply(
        &mut h,
        50,
        "CREATE TABLE d.o (id INT PRIMARY KEY, FOREIGN KEY (id) REFERENCES d.none (id))",
    );
    assert!(e.influence.sources.is_empty());
}

#[test]
fn persistent_is_stored_and_words_named_persistent_stay_columns() {
    let mut h = h();
    apply(
        &mut h,
        10,
        "CREATE TABLE d.t (id INT PRIMARY KEY, persistent INT, s INT AS (persistent + 1) PERSISTENT, v INT AS (id) , w INT AS ((id)) VIRTUAL) STATS_PERSISTENT=1",
    );
    let t = h.table_at("d", "t", F + 10).expect("t");
    let g: Vec<(&str, Option<Generation>)> = t
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.generated))
        .collect();
    assert_eq!(
        g,
        vec![
            ("id", None),
            ("persistent", None),
            ("s", Some(Generation::Stored)),
            ("v", Some(Generation::Virtual)),
            ("w", Some(Generation::Virtual)),
        ]
    );
    assert_eq!(t.key_columns, vec![0]);
}

#[test]
fn generation_is_read_from_extra_words() {
    assert_eq!(
        generation_from_extra("VIRTUAL GENERATED"),
        Some(Generation::Virtual)
    );
    assert_eq!(
        generation_from_extra("STORED GENERATED"),
        Some(Generation::Stored)
    );
    assert_eq!(
        generation_from_extra("VIRTUAL GENERATED, INVISIBLE"),
        Some(Generation::Virtual)
    );
    assert_eq!(
        generation_from_extra("PERSISTENT"),
        Some(Generation::Stored)
    );
    // MySQL's DEFAULT expressions and ordinary extras are not generated columns.
    assert_eq!(
        generation_from_extra("DEFAULT_GENERATED on update CURRENT_TIMESTAMP"),
        None
    );
    assert_eq!(generation_from_extra("auto_increment"), None);
    assert_eq!(generation_from_extra(""), None);
}

#[test]
fn histories_without_generation_or_sources_load() {
    let mut h = h();
    apply(&mut h, 10, "CREATE TABLE d.t (id INT PRIMARY KEY)");
    apply(&mut h, 20, "CREATE TABLE d.u LIKE d.t");
    let json = String::from_utf8(h.to_json().expect("json")).expect("utf8");
    assert!(
        !json.contains("\"generated\""),
        "ordinary columns serialize as before"
    );
    let old = json.replace(&format!(",\"sources\":[{}]", F + 10), "");
    assert_ne!(old, json);
    let back = SchemaHistory::from_json(old.as_bytes()).expect("an older history loads");
    let like = back.ddls.last().expect("the LIKE");
    assert!(like.query.contains("LIKE") && like.influence.sources.is_empty());
}
