//! End to end through the storage layout: the same workload is run on an upstream MariaDB (as SQL)
//! and written through the storage sink (as row and DDL events); `consume` applies the layout to a
//! downstream MariaDB and `check` must find it equal to the upstream. The layout has two table
//! versions, a DDL mid-stream, a table created mid-stream, leftover temporary files, an index
//! pointing past the data and files duplicated by a replay from an earlier checkpoint.

use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use sluice_sink::check::{self, CheckArgs};
use sluice_sink::consume::{self, ConsumeArgs};
use sluice_sink::storage::StorageSink;
use sluice_sink::testing::simple_schema;
use sluice_sink::uri::{SinkConfig, SinkUri};
use sluice_sink::{RowBatch, Sink};
use sluice_testkit::mariadb::MariaDb;
use sluice_types::*;
use std::collections::BTreeMap;
use std::sync::Arc;

const DAY1: u64 = 1_735_689_540_000; // 2024-12-31 23:59
const DAY2: u64 = 1_735_689_660_000; // 2025-01-01 00:01

/// Builds rows and SQL side by side for `table` (columns id, v[, note]).
struct Workload {
    sql: Vec<String>,
    state: BTreeMap<i64, Vec<Value>>,
    ts: Ts,
}

impl Workload {
    fn img(id: i64, v: &str, ncols: usize) -> Vec<Value> {
        let mut r = vec![Value::Int(id), Value::Text(v.into())];
        if ncols == 3 {
            r.push(if id % 2 == 0 {
                Value::Text(format!("n{id}"))
            } else {
                Value::Null
            });
        }
        r
    }
    fn sql_values(img: &[Value]) -> String {
        img.iter()
            .map(|v| match v {
                Value::Int(i) => i.to_string(),
                Value::Text(s) => format!("'{s}'"),
                _ => "NULL".into(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
    fn ev(
        &mut self,
        s: &TableSchema,
        kind: RowKind,
        before: Option<Vec<Value>>,
        after: Option<Vec<Value>>,
        time: u64,
    ) -> RowEvent {
        self.ts += 1;
        let id = match after.as_ref().or(before.as_ref()).map(|i| i[0].clone()) {
            Some(Value::Int(i)) => i as u64,
            _ => 0,
        };
        RowEvent {
            table_id: s.table_id,
            schema_version: s.version,
            commit_ts: self.ts,
            commit_time_ms: time,
            kind,
            key: Key::row_u64(s.table_id, id),
            before,
            after,
            snapshot: false,
            gtid: None,
        }
    }
    fn insert(&mut self, s: &TableSchema, id: i64, v: &str, time: u64) -> RowEvent {
        let img = Self::img(id, v, s.columns.len());
        self.sql.push(format!(
            "INSERT INTO {}.{} VALUES ({})",
            s.database,
            s.name,
            Self::sql_values(&img)
        ));
        self.state.insert(id, img.clone());
        self.ev(s, RowKind::Insert, None, Some(img), time)
    }
    fn update(&mut self, s: &TableSchema, id: i64, v: &str, time: u64) -> RowEvent {
        let before = self.state.get(&id).cloned().expect("row exists");
        let mut after = before.clone();
        after[1] = Value::Text(v.into());
        self.sql.push(format!(
            "UPDATE {}.{} SET v = '{v}' WHERE id = {id}",
            s.database, s.name
        ));
        self.state.insert(id, after.clone());
        self.ev(s, RowKind::Update, Some(before), Some(after), time)
    }
    fn delete(&mut self, s: &TableSchema, id: i64, time: u64) -> RowEvent {
        let before = self.state.remove(&id).expect("row exists");
        self.sql.push(format!(
            "DELETE FROM {}.{} WHERE id = {id}",
            s.database, s.name
        ));
        self.ev(s, RowKind::Delete, Some(before), None, time)
    }
}

fn ddl(ts: Ts, kind: DdlKind, query: &str) -> DdlEvent {
    DdlEvent {
        session: Default::default(),
        object_database: None,
        commit_ts: ts,
        commit_time_ms: DAY2,
        kind,
        database: "d".into(),
        query: query.into(),
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

async fn end_to_end(storage_uri: &str, up: &MariaDb, down: &MariaDb) {
    let seed =
        "CREATE DATABASE IF NOT EXISTS d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64));";
    up.exec(seed).expect("seed up");
    down.exec(seed).expect("seed down");
    let SinkConfig::Storage(cfg) = SinkUri::parse(storage_uri).expect("uri").config else {
        panic!("storage")
    };
    let sink = StorageSink::open_storage(cfg).expect("sink");
    let mut w = Workload {
        sql: Vec::new(),
        state: BTreeMap::new(),
        ts: 0,
    };

    // Version 0 of d.t (pre-existing: the snapshot's version): inserts, updates, deletes across
    // a day boundary.
    let v1 = Arc::new(simple_schema("d", "t", 1, 0));
    let dt = DispatcherId { epoch: 1, seq: 1 };
    sink.open(dt, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    let mut rows = Vec::new();
    for id in 1..=60 {
        rows.push(w.insert(&v1, id, &format!("a{id}"), DAY1));
    }
    for id in (1..=60).step_by(3) {
        rows.push(w.update(&v1, id, &format!("b{id}"), DAY2));
    }
    for id in (1..=60).step_by(7) {
        rows.push(w.delete(&v1, id, DAY2));
    }
    for chunk in rows.chunks(13) {
        sink.write_rows(
            dt,
            RowBatch {
                schema: v1.clone(),
                rows: chunk.to_vec(),
            },
        )
        .await
        .expect("write v1");
    }
    // DDL mid-stream: version 100 adds a column.
    w.ts = 100;
    let q = "ALTER TABLE t ADD COLUMN note VARCHAR(16)";
    w.sql.push(format!("USE d; {q}"));
    let mut v100 = simple_schema("d", "t", 1, 100);
    v100.columns.push(v100.columns[1].clone());
    v100.columns[2].name = "note".into();
    v100.columns[2].sql_type = "varchar(16)".into();
    let v100 = Arc::new(v100);
    sink.write_ddl(dt, ddl(100, DdlKind::AlterTable, q), vec![v100.clone()])
        .await
        .expect("ddl 100");
    for s in w.state.values_mut() {
        s.push(Value::Null);
    }
    let mut rows = Vec::new();
    for id in 61..=90 {
        rows.push(w.insert(&v100, id, &format!("c{id}"), DAY2));
    }
    for id in (2..=90).step_by(5) {
        if w.state.contains_key(&id) {
            rows.push(w.update(&v100, id, &format!("d{id}"), DAY2));
        }
    }
    let replay_from = rows[rows.len() / 2].commit_ts;
    let v100_rows = rows.clone();
    for chunk in rows.chunks(9) {
        sink.write_rows(
            dt,
            RowBatch {
                schema: v100.clone(),
                rows: chunk.to_vec(),
            },
        )
        .await
        .expect("write v100");
    }
    assert!(sink.close(dt).await.error.is_none());

    // A table created mid-stream, through the table trigger.
    let trig = DispatcherId { epoch: 1, seq: 0 };
    sink.open(trig, Span::whole_table(TableId(0)), 0)
        .await
        .expect("open trigger");
    let cq = "CREATE TABLE t2 (id BIGINT PRIMARY KEY, v VARCHAR(64))";
    w.sql.push(format!("USE d; {cq}"));
    let t2 = Arc::new(simple_schema("d", "t2", 2, 300));
    sink.write_ddl(trig, ddl(300, DdlKind::CreateTable, cq), vec![t2.clone()])
        .await
        .expect("create t2");
    sink.close(trig).await;
    let d2 = DispatcherId { epoch: 1, seq: 2 };
    sink.open(d2, Span::whole_table(TableId(2)), 300)
        .await
        .expect("open t2");
    let mut w2 = Workload {
        sql: Vec::new(),
        state: BTreeMap::new(),
        ts: 300,
    };
    let mut rows: Vec<RowEvent> = (1..=20).map(|id| w2.insert(&t2, id, "t2", DAY2)).collect();
    rows.push(w2.update(&t2, 5, "t2-updated", DAY2));
    rows.push(w2.delete(&t2, 6, DAY2));
    sink.write_rows(
        d2,
        RowBatch {
            schema: t2.clone(),
            rows,
        },
    )
    .await
    .expect("write t2");
    sink.close(d2).await;
    sink.write_checkpoint(320).await.expect("checkpoint");

    // A replay: a successor of d.t's dispatcher restarts from an earlier checkpoint and writes the
    // second half of version 100 again (new files, the same rows).
    let again = DispatcherId { epoch: 2, seq: 1 };
    sink.open(again, Span::whole_table(TableId(1)), replay_from - 1)
        .await
        .expect("reopen");
    let replay: Vec<RowEvent> = v100_rows
        .iter()
        .filter(|r| r.commit_ts >= replay_from)
        .cloned()
        .collect();
    for chunk in replay.chunks(4) {
        sink.write_rows(
            again,
            RowBatch {
                schema: v100.clone(),
                rows: chunk.to_vec(),
            },
        )
        .await
        .expect("replay");
    }
    assert!(sink.close(again).await.error.is_none());

    // Leftovers of crashed writes: temporary files, and an index pointing past the data.
    let store = sink.store();
    let ext = if storage_uri.contains("canal-json") {
        "json"
    } else {
        "csv"
    };
    let mut paths: Vec<String> = store
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    paths.sort();
    let v100_dir = paths
        .iter()
        .find(|p| p.starts_with("d/t/100/") && p.ends_with(ext))
        .expect("a v100 file")
        .rsplit_once('/')
        .expect("dir")
        .0
        .to_string();
    let garbage = "\"I\",\"t\",\"d\",999,\"garbage\"\r\n".to_string();
    for name in [
        format!("CDC000777.{ext}#3"),
        format!("CDC000778.{ext}.tmp.0c1d"),
        "CDC_notanid_000001.csv".to_string(),
    ] {
        store
            .put(
                &object_store::path::Path::from(format!("{v100_dir}/{name}")),
                garbage.clone().into(),
            )
            .await
            .expect("put garbage");
    }
    store
        .put(
            &object_store::path::Path::from(format!("{v100_dir}/meta/CDC.index")),
            format!("CDC00000000000000000099.{ext}\n").into(),
        )
        .await
        .expect("put index");

    for s in w.sql.iter().chain(&w2.sql) {
        up.exec(s).expect("upstream SQL");
    }
    let args = ConsumeArgs {
        storage: storage_uri.to_string(),
        downstream: down.url(),
    };
    let report = consume::run(&args).await.expect("consume");
    assert_eq!(report.checkpoint_ts, Some(320));
    assert_eq!(report.ddls_applied, 2, "{report}");
    assert_eq!(
        report
            .ignored_files
            .iter()
            .filter(|p| p.contains("CDC00077") || p.contains("notanid"))
            .count(),
        3,
        "{report:?}"
    );
    assert!(report.rows_read > v100_rows.len() + 60, "{report}");
    let cmp = check::run(&CheckArgs::new(&up.url(), &down.url(), "d.*"))
        .await
        .expect("check");
    assert!(cmp.equal(), "{cmp}\n{report}");
    assert_eq!(cmp.tables.len(), 2, "{cmp}");
    // Consuming again changes nothing (DDLs are recorded downstream, rows are idempotent).
    consume::run(&args).await.expect("consume again");
    let cmp = check::run(&CheckArgs::new(&up.url(), &down.url(), "d.*"))
        .await
        .expect("check");
    assert!(cmp.equal(), "{cmp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_then_check_is_equal_for_every_encoding_on_local_files() {
    for params in [
        "protocol=csv&include-commit-ts=true&file-size=1024",
        "protocol=csv&file-size=2048&date-separator=none",
        "protocol=canal-json&enable-tidb-extension=true&file-size=1024&date-separator=month",
        "protocol=canal-json&file-size=1024",
    ] {
        let (up, down) = (
            MariaDb::start().expect("up"),
            MariaDb::start().expect("down"),
        );
        let dir = std::env::temp_dir().join(format!(
            "sluice-consume-{}-{}",
            std::process::id(),
            params.len()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        end_to_end(&format!("file://{}?{params}", dir.display()), &up, &down).await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_then_check_is_equal_on_s3() {
    let moto = sluice_testkit::moto::Moto::start("sluice-consume").expect("moto");
    let (up, down) = (
        MariaDb::start().expect("up"),
        MariaDb::start().expect("down"),
    );
    end_to_end(
        &format!(
            "{}&protocol=canal-json&enable-tidb-extension=true&file-size=1024",
            moto.sink_uri("cf")
        ),
        &up,
        &down,
    )
    .await;
}

/// Writes d.t (a snapshot table, version 0) through a whole-table dispatcher and then, after a
/// split, through the dispatcher of the span of ids from 1000: its files carry the dispatcher id,
/// the others do not. Returns the SQL that gives the upstream the same rows.
async fn whole_then_split(storage_uri: &str) -> Vec<String> {
    let SinkConfig::Storage(cfg) = SinkUri::parse(storage_uri).expect("uri").config else {
        panic!("storage")
    };
    let sink = StorageSink::open_storage(cfg).expect("sink");
    let t = Arc::new(simple_schema("d", "t", 1, 0));
    let mut w = Workload {
        sql: Vec::new(),
        state: BTreeMap::new(),
        ts: 10,
    };
    let whole = DispatcherId { epoch: 1, seq: 1 };
    sink.open(whole, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open whole");
    let rows: Vec<RowEvent> = (1..=5).map(|id| w.insert(&t, id, "a", DAY2)).collect();
    sink.write_rows(
        whole,
        RowBatch {
            schema: t.clone(),
            rows,
        },
    )
    .await
    .expect("write whole");
    assert!(sink.close(whole).await.error.is_none());
    let split = DispatcherId { epoch: 1, seq: 2 };
    let span = Span::new(
        TableId(1),
        Key::row_u64(TableId(1), 1000),
        Key::table_end(TableId(1)),
    );
    sink.open(split, span, w.ts).await.expect("open split");
    let rows: Vec<RowEvent> = (1000..1005).map(|id| w.insert(&t, id, "b", DAY2)).collect();
    sink.write_rows(
        split,
        RowBatch {
            schema: t.clone(),
            rows,
        },
    )
    .await
    .expect("write split");
    assert!(sink.close(split).await.error.is_none());
    w.sql
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_without_commit_ts_that_cannot_be_ordered_names_the_parameter() {
    let (up, down) = (
        MariaDb::start().expect("up"),
        MariaDb::start().expect("down"),
    );
    let seed = "CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64));";
    up.exec(seed).expect("seed up");
    down.exec(seed).expect("seed down");
    let base =
        std::env::temp_dir().join(format!("sluice-consume-unordered-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let count = |db: &MariaDb| db.query("SELECT COUNT(*) FROM d.t").expect("count")[0][0].clone();
    for (params, needle) in [
        ("protocol=csv", "include-commit-ts=true"),
        ("protocol=canal-json", "enable-tidb-extension=true"),
    ] {
        let uri = format!("file://{}/{}?{params}", base.display(), params.len());
        whole_then_split(&uri).await;
        let args = ConsumeArgs {
            storage: uri.clone(),
            downstream: down.url(),
        };
        let e = consume::run(&args)
            .await
            .expect_err("an unorderable layout");
        let msg = e.to_string();
        for part in [
            "d.t version 0",
            "no commit ts",
            needle,
            "enable-table-across-nodes=true",
        ] {
            assert!(msg.contains(part), "{part} missing: {msg}");
        }
        assert_eq!(
            count(&down),
            "0",
            "rows were applied from a layout refused: {msg}"
        );
    }
    // The same writes with the commit ts in the rows are ordered, and equal to the upstream.
    let uri = format!(
        "file://{}/with-ts?protocol=csv&include-commit-ts=true",
        base.display()
    );
    for s in whole_then_split(&uri).await {
        up.exec(&s).expect("upstream SQL");
    }
    let report = consume::run(&ConsumeArgs {
        storage: uri,
        downstream: down.url(),
    })
    .await
    .expect("consume with commit ts");
    assert_eq!(report.rows_applied, 10, "{report}");
    let cmp = check::run(&CheckArgs::new(&up.url(), &down.url(), "d.*"))
        .await
        .expect("check");
    assert!(cmp.equal(), "{cmp}");
    let _ = std::fs::remove_dir_all(&base);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_partition_without_commit_ts_is_refused() {
    let down = MariaDb::start().expect("down");
    down.exec("CREATE DATABASE d; CREATE TABLE d.x (id BIGINT PRIMARY KEY, v VARCHAR(64));")
        .expect("seed down");
    let dir = std::env::temp_dir().join(format!("sluice-consume-exchange-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let uri = format!("file://{}?protocol=csv", dir.display());
    let SinkConfig::Storage(cfg) = SinkUri::parse(&uri).expect("uri").config else {
        panic!("storage")
    };
    let sink = StorageSink::open_storage(cfg).expect("sink");
    // d.x (snapshot version 0) has rows; `EXCHANGE PARTITION` at 100 swaps its rows with a
    // partition of d.p: d.p gets version 100, d.x keeps version 0 (no new layout).
    let x = Arc::new(simple_schema("d", "x", 2, 0));
    let mut w = Workload {
        sql: Vec::new(),
        state: BTreeMap::new(),
        ts: 10,
    };
    let dx = DispatcherId { epoch: 1, seq: 2 };
    sink.open(dx, Span::whole_table(TableId(2)), 0)
        .await
        .expect("open x");
    let rows: Vec<RowEvent> = (1..=3).map(|id| w.insert(&x, id, "x", DAY2)).collect();
    sink.write_rows(
        dx,
        RowBatch {
            schema: x.clone(),
            rows,
        },
    )
    .await
    .expect("write x");
    assert!(sink.close(dx).await.error.is_none());
    let trig = DispatcherId { epoch: 1, seq: 0 };
    sink.open(trig, Span::whole_table(TableId(0)), 0)
        .await
        .expect("open trigger");
    let q = "ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE x";
    let p = Arc::new(simple_schema("d", "p", 1, 100));
    sink.write_ddl(trig, ddl(100, DdlKind::AlterTable, q), vec![p, x.clone()])
        .await
        .expect("exchange");
    sink.close(trig).await;
    let e = consume::run(&ConsumeArgs {
        storage: uri,
        downstream: down.url(),
    })
    .await
    .expect_err("refused");
    let msg = e.to_string();
    for part in [
        "d.x version 0",
        "EXCHANGE PARTITION",
        "include-commit-ts=true",
    ] {
        assert!(msg.contains(part), "{part} missing: {msg}");
    }
    let n = down.query("SELECT COUNT(*) FROM d.x").expect("count")[0][0].clone();
    assert_eq!(n, "0", "rows were applied from a layout refused");
    let _ = std::fs::remove_dir_all(&dir);
}
