//! MySQL sink tests against real MariaDB servers started by sluice-testkit: the contract suite,
//! every column type, replay convergence in safe mode, causality by unique key across workers,
//! refusing keyless tables, a clear fatal error for a missing column, DDL applied once (also after
//! an ambiguous crash), and retries across a downstream crash.

use sluice_sink::mysql::MysqlSink;
use sluice_sink::testing::*;
use sluice_sink::uri::{SinkConfig, SinkUri};
use sluice_sink::{DdlRecord, ErrorClass, RowBatch, Sink, SinkError};
use sluice_testkit::mariadb::MariaDb;
use sluice_types::*;
use std::sync::Arc;

async fn sink(db: &MariaDb, params: &str) -> MysqlSink {
    let uri = format!("{}/?{params}", db.url());
    let SinkConfig::Mysql(cfg) = SinkUri::parse(&uri).expect("uri").config else {
        panic!("mysql")
    };
    MysqlSink::connect(cfg).await.expect("connect")
}

fn row(
    schema: &TableSchema,
    kind: RowKind,
    ts: Ts,
    before: Option<Vec<Value>>,
    after: Option<Vec<Value>>,
) -> RowEvent {
    let img = after.as_ref().or(before.as_ref()).expect("an image");
    let id = match img[0] {
        Value::Int(i) => i as u64,
        _ => 0,
    };
    RowEvent {
        table_id: schema.table_id,
        schema_version: schema.version,
        commit_ts: ts,
        commit_time_ms: 0,
        kind,
        key: Key::row_u64(schema.table_id, id),
        before,
        after,
        snapshot: false,
        gtid: None,
    }
}

fn iv(id: i64, v: &str) -> Vec<Value> {
    vec![Value::Int(id), Value::Text(v.into())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_keeps_the_contract() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))")
        .expect("ddl");
    let s = sink(&db, "worker-count=4").await;
    run_contract_suite(&s, "d", "t", 1, "ALTER TABLE t ADD COLUMN x INT").await;
    // Rows written by the suite: ids 1,2,3 (ts 10,20), 101-104 (ts 26, 27 in parts), 5 (ts 30),
    // 6 (ts 50, after the DDL) from d1; 2000 from d2.
    assert_eq!(
        db.query_one("SELECT GROUP_CONCAT(id ORDER BY id) FROM d.t")
            .expect("q"),
        "1,2,3,5,6,101,102,103,104,2000"
    );
    assert_eq!(db.query_one("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema='d' AND table_name='t' AND column_name='x'").expect("q"), "1");
}

/// A transaction written in parts: with `transaction-atomicity=table` none of its rows is
/// downstream before its last part (it is one downstream transaction, held whole); without it,
/// its parts are applied as they are flushed (so its size costs no memory), and either way the
/// ack stays below it until it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_in_parts_is_held_whole_only_with_table_atomicity() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))")
        .expect("ddl");
    let schema = Arc::new(simple_schema("d", "t", 1, 1));
    let batch = |ids: &[i64], ts: Ts| RowBatch {
        schema: schema.clone(),
        rows: ids
            .iter()
            .map(|i| row(&schema, RowKind::Insert, ts, None, Some(iv(*i, "x"))))
            .collect(),
    };
    let count = || db.query_one("SELECT COUNT(*) FROM d.t").expect("count");
    for (params, while_open) in [("transaction-atomicity=table", "1"), ("", "3")] {
        db.exec("TRUNCATE d.t").expect("truncate");
        let s = sink(&db, params).await;
        let d = DispatcherId { epoch: 1, seq: 1 };
        s.open(d, Span::whole_table(schema.table_id), 5)
            .await
            .expect("open");
        let mut first = batch(&[1], 9);
        first.rows.extend(batch(&[2, 3], 10).rows);
        s.write_part(d, first).await.expect("part");
        assert_eq!(s.flush(d).await.expect("flush"), 9, "{params}");
        assert_eq!(
            count(),
            while_open,
            "{params}: after a flush of its first part"
        );
        s.write_rows(d, batch(&[4], 10)).await.expect("last part");
        assert_eq!(s.flush(d).await.expect("flush"), 10, "{params}");
        assert_eq!(count(), "4", "{params}: all of it");
    }
}

/// The DDLs the sink applied are read back from `sluice_sink.ddl_ts`, started ones as such, by a
/// sink that did not write them (what a new maintainer's bootstrap reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applied_ddls_come_from_the_progress_table() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))")
        .expect("ddl");
    let s = sink(&db, "").await;
    run_contract_suite(&s, "d", "t", 1, "ALTER TABLE t ADD COLUMN x INT").await;
    db.exec("INSERT INTO sluice_sink.ddl_ts VALUES ('default', 77, 0, 'x'), ('other', 90, 1, 'y')")
        .expect("a started DDL, and another changefeed's");
    let fresh = sink(&db, "").await;
    let got = fresh.applied_ddls(30).await.expect("applied");
    let want = vec![
        DdlRecord {
            commit_ts: 40,
            finished: true,
        },
        DdlRecord {
            commit_ts: 77,
            finished: false,
        },
    ];
    assert_eq!(got, want);
    assert_eq!(fresh.applied_ddls(77).await.expect("applied"), vec![]);
}

/// A row lock held downstream on one table stalls that dispatcher's flush, never the other
/// tables': rows of another table written after the stall began are applied by the sink's own
/// periodic flush while the lock is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_table_does_not_hold_back_the_flushes_of_others() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.a (id BIGINT PRIMARY KEY, v VARCHAR(64));
         CREATE TABLE d.b (id BIGINT PRIMARY KEY, v VARCHAR(64)); INSERT INTO d.a VALUES (1, 'x');",
    )
    .expect("ddl");
    let s = sink(&db, "").await;
    let (a, b) = (
        Arc::new(simple_schema("d", "a", 1, 1)),
        Arc::new(simple_schema("d", "b", 2, 1)),
    );
    let (da, dbb) = (
        DispatcherId { epoch: 1, seq: 1 },
        DispatcherId { epoch: 1, seq: 2 },
    );
    s.open(da, Span::whole_table(a.table_id), 5)
        .await
        .expect("open a");
    s.open(dbb, Span::whole_table(b.table_id), 5)
        .await
        .expect("open b");
    let mut lock = db
        .spawn_session("BEGIN; SELECT * FROM d.a WHERE id = 1 FOR UPDATE; SELECT SLEEP(600);")
        .expect("lock session");
    let waiting_lock = |what: &str| {
        db.query_one(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '{what}'"
        ))
        .unwrap_or_default()
            == "1"
    };
    wait_until(30, || waiting_lock("SELECT SLEEP(600)"));
    let batch = |schema: &Arc<TableSchema>, id, ts| RowBatch {
        schema: schema.clone(),
        rows: vec![simple_insert(schema, id, "new", ts, ts)],
    };
    s.write_rows(da, batch(&a, 1, 10)).await.expect("write a");
    // a's flush is now stuck on the lock...
    wait_until(30, || {
        db.query_one(
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'",
        )
        .unwrap_or_default()
            == "1"
    });
    // ...and b's rows, written after, still land.
    s.write_rows(dbb, batch(&b, 7, 11)).await.expect("write b");
    wait_until(30, || {
        db.query_one("SELECT COUNT(*) FROM d.b").unwrap_or_default() == "1"
    });
    assert!(
        waiting_lock("SELECT SLEEP(600)"),
        "the lock must still be held"
    );
    assert!(
        s.durable_ts(da).unwrap_or(0) < 10,
        "a cannot be durable yet"
    );
    let id = db
        .query_one("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(600)'")
        .expect("lock session id");
    db.exec(&format!("KILL {id}")).expect("release");
    let _ = lock.wait();
    assert_eq!(s.flush(da).await.expect("a flushes once released"), 10);
}

fn wait_until(secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "not reached within {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_column_type_lands_exactly() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(&format!("CREATE DATABASE d; {}", all_types_ddl("d")))
        .expect("ddl");
    let s = sink(&db, "worker-count=2").await;
    let schema = Arc::new(all_types_schema("d", 1));
    let d = DispatcherId { epoch: 1, seq: 1 };
    s.open(d, Span::whole_table(schema.table_id), 0)
        .await
        .expect("open");
    s.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows: all_types_rows(&schema, 5, 0),
        },
    )
    .await
    .expect("write");
    assert_eq!(s.flush(d).await.expect("flush"), 5);
    db.exec("SET time_zone='+00:00'").expect("tz");
    let got = db
        .query(
            "SET time_zone='+00:00'; SELECT id, c_tinyint, c_smallint, c_mediumint, c_bigint, c_decimal, c_float, c_double, HEX(c_char), HEX(c_varchar), HEX(c_text), \
             HEX(c_binary), HEX(c_varbinary), HEX(c_blob), c_date, c_time, c_datetime, c_timestamp, c_year, c_enum, c_set, c_bit+0, c_json, ST_AsText(c_geometry) \
             FROM d.all_types ORDER BY id",
        )
        .expect("select");
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02X}")).collect::<String>();
    let expected_full = vec![
        "1".to_string(),
        "-128".into(),
        "65535".into(),
        "-8388608".into(),
        "18446744073709551615".into(),
        "-123456789.125".into(),
        "1.5".into(),
        "-0.000000000225".into(),
        hex("ab\"c"),
        hex("x,y\ndé \\N "),
        hex("\\N"),
        "000102FF".into(),
        "0022272C0AFF".into(),
        "DEADBEEF".into(),
        "2024-02-29".into(),
        "-838:59:58.999".into(),
        "1999-12-31 23:59:59.123456".into(),
        "2023-11-14 22:13:20.654321".into(),
        "2155".into(),
        "b".into(),
        "x,z".into(),
        "513".into(),
        "{\"k\": [1, \"two\", null]}".into(),
        "POINT(1 2)".into(),
    ];
    assert_eq!(got[0], expected_full);
    let mut expected_null = vec!["NULL".to_string(); expected_full.len()];
    expected_null[0] = "2".into();
    assert_eq!(got[1], expected_null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_from_an_earlier_checkpoint_converges_in_safe_mode() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))")
        .expect("ddl");
    let schema = Arc::new(simple_schema("d", "t", 1, 1));
    // A stream of changes over 200 keys: insert all, update the even ones, delete every third, re-insert some.
    let mut stream = Vec::new();
    let mut ts = 1;
    for id in 0..200 {
        stream.push(row(&schema, RowKind::Insert, ts, None, Some(iv(id, "v0"))));
        ts += 1;
    }
    for id in (0..200).step_by(2) {
        stream.push(row(
            &schema,
            RowKind::Update,
            ts,
            Some(iv(id, "v0")),
            Some(iv(id, "v1")),
        ));
        ts += 1;
    }
    for id in (0..200).step_by(3) {
        let v = if id % 2 == 0 { "v1" } else { "v0" };
        stream.push(row(&schema, RowKind::Delete, ts, Some(iv(id, v)), None));
        ts += 1;
    }
    for id in (0..200).step_by(9) {
        stream.push(row(&schema, RowKind::Insert, ts, None, Some(iv(id, "v2"))));
        ts += 1;
    }
    let expected: Vec<String> = {
        let mut m = std::collections::BTreeMap::new();
        for r in &stream {
            let id = match (r.after.as_ref().or(r.before.as_ref())).map(|v| v[0].clone()) {
                Some(Value::Int(i)) => i,
                _ => -1,
            };
            match r.kind {
                RowKind::Delete => {
                    m.remove(&id);
                }
                _ => {
                    let Some(Value::Text(v)) = r.after.as_ref().map(|a| a[1].clone()) else {
                        panic!()
                    };
                    m.insert(id, v);
                }
            }
        }
        m.into_iter().map(|(k, v)| format!("{k}:{v}")).collect()
    };
    let s = sink(&db, "worker-count=8&max-txn-row=16").await;
    let d1 = DispatcherId { epoch: 1, seq: 1 };
    s.open(d1, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    for chunk in stream.chunks(37) {
        s.write_rows(
            d1,
            RowBatch {
                schema: schema.clone(),
                rows: chunk.to_vec(),
            },
        )
        .await
        .expect("write");
    }
    let acked = s.close(d1).await.durable_ts;
    assert_eq!(acked, ts - 1);
    // A successor restarts from an old checkpoint (ts 150) and replays everything after it, in
    // different batch sizes: the downstream must still equal the upstream.
    let d2 = DispatcherId { epoch: 2, seq: 1 };
    s.open(d2, Span::whole_table(TableId(1)), 150)
        .await
        .expect("open");
    let replay: Vec<RowEvent> = stream
        .iter()
        .filter(|r| r.commit_ts > 150)
        .cloned()
        .collect();
    for chunk in replay.chunks(11) {
        s.write_rows(
            d2,
            RowBatch {
                schema: schema.clone(),
                rows: chunk.to_vec(),
            },
        )
        .await
        .expect("replay");
    }
    s.close(d2).await;
    let got: Vec<String> = db
        .query("SELECT CONCAT(id, ':', v) FROM d.t ORDER BY id")
        .expect("q")
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_sharing_a_unique_key_apply_in_order_across_workers() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.u (id BIGINT PRIMARY KEY, u INT NOT NULL, UNIQUE KEY uk (u))").expect("ddl");
    let mut schema = simple_schema("d", "u", 3, 1);
    schema.columns[1].name = "u".into();
    schema.columns[1].ty = ColumnType::Int;
    schema.unique_keys = vec![vec![1]];
    let schema = Arc::new(schema);
    // Without safe mode an INSERT that reuses a unique value before the old owner gave it up fails
    // with a duplicate key; causality by the unique key must prevent it across 16 workers.
    let s = sink(&db, "worker-count=16&max-txn-row=4&safe-mode=false").await;
    let d = DispatcherId { epoch: 1, seq: 1 };
    s.open(d, Span::whole_table(TableId(3)), 0)
        .await
        .expect("open");
    let mut rows = Vec::new();
    let mut ts = 1;
    let n = 300i64;
    for id in 0..n {
        rows.push(row(
            &schema,
            RowKind::Insert,
            ts,
            None,
            Some(vec![Value::Int(id), Value::Int(id)]),
        ));
        ts += 1;
    }
    // Each row i moves from u=i to u=i+1000; then row i+n takes u=i.
    for id in 0..n {
        rows.push(row(
            &schema,
            RowKind::Update,
            ts,
            Some(vec![Value::Int(id), Value::Int(id)]),
            Some(vec![Value::Int(id), Value::Int(id + 1000)]),
        ));
        ts += 1;
        rows.push(row(
            &schema,
            RowKind::Insert,
            ts,
            None,
            Some(vec![Value::Int(id + n), Value::Int(id)]),
        ));
        ts += 1;
    }
    s.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows,
        },
    )
    .await
    .expect("write");
    s.flush(d)
        .await
        .expect("flush must not hit a duplicate key");
    assert_eq!(
        db.query_one("SELECT COUNT(*) FROM d.u").expect("q"),
        (2 * n).to_string()
    );
    assert_eq!(
        db.query_one("SELECT COUNT(*) FROM d.u WHERE id < 300 AND u = id + 1000")
            .expect("q"),
        n.to_string()
    );
    assert_eq!(
        db.query_one("SELECT COUNT(*) FROM d.u WHERE id >= 300 AND u = id - 300")
            .expect("q"),
        n.to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_tables_are_refused_unless_forced_and_missing_columns_are_fatal() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.nk (id BIGINT, v VARCHAR(64)); CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))").expect("ddl");
    let mut nk = simple_schema("d", "nk", 4, 1);
    nk.key_columns.clear();
    let nk = Arc::new(nk);
    let d = DispatcherId { epoch: 1, seq: 1 };
    let s = sink(&db, "").await;
    s.open(d, Span::whole_table(TableId(4)), 0)
        .await
        .expect("open");
    let e = s
        .write_rows(
            d,
            RowBatch {
                schema: nk.clone(),
                rows: vec![simple_insert(&nk, 1, "a", 1, 0)],
            },
        )
        .await
        .expect_err("refused");
    assert_eq!(e.class(), ErrorClass::Fatal);
    assert!(
        e.to_string().contains("d.nk") && e.to_string().contains("force-replicate"),
        "{e}"
    );
    s.close(d).await;

    let forced = sink(&db, "force-replicate=true").await;
    forced
        .open(d, Span::whole_table(TableId(4)), 0)
        .await
        .expect("open");
    forced
        .write_rows(
            d,
            RowBatch {
                schema: nk.clone(),
                rows: vec![simple_insert(&nk, 1, "a", 1, 0)],
            },
        )
        .await
        .expect("forced");
    assert_eq!(forced.flush(d).await.expect("flush"), 1);
    assert_eq!(db.query_one("SELECT COUNT(*) FROM d.nk").expect("q"), "1");

    let mut wide = simple_schema("d", "t", 5, 1);
    wide.columns.push(wide.columns[1].clone());
    wide.columns[2].name = "not_downstream".into();
    let wide = Arc::new(wide);
    let d5 = DispatcherId { epoch: 1, seq: 5 };
    s.open(d5, Span::whole_table(TableId(5)), 0)
        .await
        .expect("open");
    let mut r = simple_insert(&wide, 1, "a", 1, 0);
    r.after = Some(vec![Value::Int(1), Value::Text("a".into()), Value::Null]);
    s.write_rows(
        d5,
        RowBatch {
            schema: wide.clone(),
            rows: vec![r],
        },
    )
    .await
    .expect("buffered");
    let e = s.flush(d5).await.expect_err("unknown column");
    assert_eq!(e.class(), ErrorClass::Fatal, "{e}");
    assert!(e.to_string().contains("not_downstream"), "{e}");
    let SinkError::Earlier(inner) = &e else {
        panic!("{e:?}")
    };
    assert!(
        matches!(
            **inner,
            SinkError::Db {
                code: Some(1054),
                ..
            }
        ),
        "{inner:?}"
    );
}

/// Rows nobody flushes explicitly are applied by the sink's periodic flush; when that fails (a
/// table missing downstream, on the `LOAD DATA` path and on the statement path), the dispatcher
/// is failed, its ack receiver wakes up at once with the ack unchanged, and `failure` names the
/// server's error; later calls return it, and nothing is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_periodic_flush_wakes_the_ack_receiver_with_the_error() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d").expect("ddl");
    let s = sink(&db, "worker-count=1").await;
    // 40 rows: one LOAD DATA run; 1 row: a REPLACE statement.
    for (seq, table, n) in [(1u64, "gone_bulk", 40u64), (2, "gone_one", 1)] {
        let schema = Arc::new(simple_schema("d", table, 10 + seq, 1));
        let d = DispatcherId { epoch: 1, seq };
        let mut acks = s
            .open(d, Span::whole_table(schema.table_id), 5)
            .await
            .expect("open");
        let rows = (1..=n)
            .map(|i| simple_insert(&schema, i, "x", 10, 0))
            .collect();
        s.write_rows(
            d,
            RowBatch {
                schema: schema.clone(),
                rows,
            },
        )
        .await
        .expect("buffered");
        assert!(s.failure(d).is_none());
        // Nobody calls flush: the periodic flush fails, and the waiting receiver hears of it.
        tokio::time::timeout(std::time::Duration::from_secs(20), acks.changed())
            .await
            .unwrap_or_else(|_| {
                panic!("{table}: the failed periodic flush never woke the ack receiver")
            })
            .expect("ack channel open");
        assert_eq!(*acks.borrow(), 5, "{table}: nothing is acknowledged");
        let e = s.failure(d).expect("the failure is kept");
        assert_eq!(e.class(), ErrorClass::Fatal, "{e}");
        assert!(e.to_string().contains(&format!("d.{table}")), "{e}");
        let SinkError::Earlier(inner) = &e else {
            panic!("{e:?}")
        };
        assert!(
            matches!(
                **inner,
                SinkError::Db {
                    code: Some(1146),
                    ..
                }
            ),
            "{inner:?}"
        );
        let again = s.resolve(d, 20).await.expect_err("failed dispatcher");
        assert!(again.to_string().contains(&format!("d.{table}")), "{again}");
        assert_eq!(s.durable_ts(d), Some(5));
        assert_eq!(s.close(d).await.durable_ts, 5);
        assert!(s.failure(d).is_none(), "a closed dispatcher is forgotten");
    }
}

fn ddl(ts: Ts, kind: DdlKind, query: &str) -> DdlEvent {
    DdlEvent {
        session: Default::default(),
        object_database: None,
        commit_ts: ts,
        commit_time_ms: 0,
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

/// A DDL never runs on a connection an earlier DDL left in its database: MariaDB keeps a
/// connection's copy of its current database's defaults from when the database became current,
/// so a table created there after an `ALTER DATABASE` run on another connection (another of the
/// sink's, while this one was busy) would take the old defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ddl_after_alter_database_on_another_connection_takes_the_new_defaults() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE ad CHARACTER SET latin1 COLLATE latin1_general_ci")
        .expect("ddl");
    let s = sink(&db, "").await;
    let trig = DispatcherId { epoch: 1, seq: 0 };
    s.open(trig, Span::whole_table(TableId(0)), 0)
        .await
        .expect("open");
    // Upstream sessions with and without a current database (a QUERY event of `ALTER DATABASE
    // d` names d as its database; a client that names every table has none).
    let under = |db: &str, ts, query: &str| DdlEvent {
        database: db.into(),
        ..ddl(ts, DdlKind::CreateTable, query)
    };
    let t = "CREATE TABLE t (id INT PRIMARY KEY, c CHAR(2))";
    s.write_ddl(trig, under("ad", 10, t), vec![])
        .await
        .expect("ddl 10");
    // The connection that ran `USE ad` is gone (closing is asynchronous on the server).
    let in_ad = || {
        db.query_one("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = 'ad'")
            .expect("processlist")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while in_ad() != "0" && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        in_ad(),
        "0",
        "a connection of the sink stayed in the DDL's database"
    );
    db.exec("ALTER DATABASE ad COLLATE latin1_bin")
        .expect("alter");
    let u = "CREATE TABLE ad.u (id INT PRIMARY KEY, c CHAR(2))";
    s.write_ddl(trig, under("", 20, u), vec![])
        .await
        .expect("ddl 20");
    let collation = |t: &str| {
        db.query_one(&format!(
            "SELECT COLLATION_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = 'ad' AND TABLE_NAME = '{t}' AND COLUMN_NAME = 'c'"
        ))
        .expect("collation")
    };
    assert_eq!(collation("t"), "latin1_general_ci");
    assert_eq!(collation("u"), "latin1_bin");
    s.close(trig).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_ddl_takes_effect_once_even_after_an_ambiguous_crash() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))")
        .expect("ddl");
    let s = sink(&db, "").await;
    let trig = DispatcherId { epoch: 1, seq: 0 };
    s.open(trig, Span::whole_table(TableId(0)), 0)
        .await
        .expect("open");
    s.write_ddl(
        trig,
        ddl(10, DdlKind::AlterTable, "ALTER TABLE t ADD COLUMN c1 INT"),
        vec![],
    )
    .await
    .expect("ddl 10");
    s.write_ddl(
        trig,
        ddl(
            20,
            DdlKind::CreateTable,
            "CREATE TABLE t2 (id INT PRIMARY KEY)",
        ),
        vec![],
    )
    .await
    .expect("ddl 20");
    s.close(trig).await;
    // A replay from checkpoint 5: both are recorded as finished and are skipped (a second ADD COLUMN
    // would fail with a duplicate column otherwise).
    let trig2 = DispatcherId { epoch: 2, seq: 0 };
    s.open(trig2, Span::whole_table(TableId(0)), 5)
        .await
        .expect("open");
    s.write_ddl(
        trig2,
        ddl(10, DdlKind::AlterTable, "ALTER TABLE t ADD COLUMN c1 INT"),
        vec![],
    )
    .await
    .expect("replayed ddl 10");
    s.write_ddl(
        trig2,
        ddl(
            20,
            DdlKind::CreateTable,
            "CREATE TABLE t2 (id INT PRIMARY KEY)",
        ),
        vec![],
    )
    .await
    .expect("replayed ddl 20");
    // An ambiguous crash: the DDL at 30 took effect but its record says unfinished.
    db.exec("ALTER TABLE d.t ADD COLUMN c2 INT, ADD INDEX i2 (c2); INSERT INTO sluice_sink.ddl_ts VALUES ('default', 30, 0, 'x')").expect("plant");
    s.write_ddl(
        trig2,
        ddl(
            30,
            DdlKind::AlterTable,
            "ALTER TABLE t ADD COLUMN c2 INT, ADD INDEX i2 (c2)",
        ),
        vec![],
    )
    .await
    .expect("replayed ambiguous ddl 30");
    // Partition DDLs replayed after an ambiguous crash: the partition exists (ADD) or is gone
    // (DROP) already.
    db.exec("CREATE TABLE d.pt (id INT PRIMARY KEY) PARTITION BY RANGE (id) (PARTITION a VALUES LESS THAN (10), PARTITION b VALUES LESS THAN (20)); \
             ALTER TABLE d.pt ADD PARTITION (PARTITION c VALUES LESS THAN (30)); ALTER TABLE d.pt DROP PARTITION a; \
             INSERT INTO sluice_sink.ddl_ts VALUES ('default', 33, 0, 'x'), ('default', 34, 0, 'x')")
        .expect("plant partitions");
    for (ts, q) in [
        (
            33,
            "ALTER TABLE pt ADD PARTITION (PARTITION c VALUES LESS THAN (30))",
        ),
        (34, "ALTER TABLE pt DROP PARTITION a"),
    ] {
        s.write_ddl(trig2, ddl(ts, DdlKind::AlterTable, q), vec![])
            .await
            .unwrap_or_else(|e| panic!("replayed ambiguous partition ddl {ts}: {e}"));
    }
    // A fresh DDL that fails for real is fatal, with the server's message.
    let e = s
        .write_ddl(
            trig2,
            ddl(
                40,
                DdlKind::AlterTable,
                "ALTER TABLE t MODIFY COLUMN nope INT",
            ),
            vec![],
        )
        .await
        .expect_err("bad DDL");
    assert_eq!(e.class(), ErrorClass::Fatal, "{e}");
    assert!(e.to_string().contains("nope"), "{e}");
    assert_eq!(db.query_one("SELECT GROUP_CONCAT(column_name ORDER BY ordinal_position) FROM information_schema.columns WHERE table_schema='d' AND table_name='t'").expect("q"), "id,v,c1,c2");
    assert_eq!(
        db.query_one("SELECT COUNT(*) FROM sluice_sink.ddl_ts WHERE finished = 1")
            .expect("q"),
        "5"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_errors_are_retried_across_a_downstream_crash() {
    let mut db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))")
        .expect("ddl");
    let s = sink(&db, "worker-count=2&max-retries=50&retry-backoff=100ms").await;
    let schema = Arc::new(simple_schema("d", "t", 1, 1));
    let d = DispatcherId { epoch: 1, seq: 1 };
    s.open(d, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    s.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows: vec![simple_insert(&schema, 1, "a", 1, 0)],
        },
    )
    .await
    .expect("w");
    assert_eq!(s.flush(d).await.expect("flush"), 1);
    // kill -9 the downstream and start it again on the same port: pooled connections are dead.
    db.crash_restart().expect("crash restart");
    s.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows: vec![simple_insert(&schema, 2, "b", 2, 0)],
        },
    )
    .await
    .expect("w");
    assert_eq!(s.flush(d).await.expect("flush after crash is retried"), 2);
    assert_eq!(
        db.query_one("SELECT GROUP_CONCAT(id ORDER BY id) FROM d.t")
            .expect("q"),
        "1,2"
    );
}

/// Runs of upserts go through `LOAD DATA LOCAL INFILE … REPLACE` streamed from memory; every
/// column type must land exactly as the statement path writes it, a replay must change nothing,
/// and a server that refuses `LOAD DATA LOCAL` (`local_infile=0`) must get the same rows as
/// statements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_upserts_load_exactly_and_fall_back_to_statements_when_refused() {
    use sluice_testkit::mariadb::Options;
    let with_load = MariaDb::start().expect("mariadb");
    let refusing = MariaDb::start_with(Options {
        extra_args: vec!["--local-infile=0".into()],
        ..Options::default()
    })
    .expect("mariadb without local_infile");
    let schema = Arc::new(all_types_schema("d", 1));
    // 40 inserts (full and all-NULL rows alternating, texts with tab, CR, NUL and backslash),
    // then updates of 20 of them: one run of 60 upserts, applied in order.
    let base = all_types_rows(&schema, 5, 0);
    let mut rows = Vec::new();
    for id in 1..=40i64 {
        let mut r = base[(id as usize + 1) % 2].clone();
        let after = r.after.as_mut().expect("after");
        after[0] = Value::Int(id);
        if id % 4 == 1 {
            after[10] = Value::Text(format!("t\tab\r\0\\{id}\\"));
        }
        r.key = Key::row_u64(schema.table_id, id as u64);
        rows.push(r);
    }
    for id in (1..=40i64).step_by(2) {
        let mut r = base[0].clone();
        let mut after = r.after.clone().expect("after");
        after[0] = Value::Int(id);
        after[9] = Value::Text(format!("updated {id}"));
        r.kind = RowKind::Update;
        r.before = Some(rows[id as usize - 1].after.clone().expect("after"));
        r.after = Some(after);
        r.commit_ts = 6;
        r.key = Key::row_u64(schema.table_id, id as u64);
        rows.push(r);
    }
    let select = "SET time_zone='+00:00'; SELECT id, c_tinyint, c_smallint, c_mediumint, c_bigint, c_decimal, c_float, c_double, HEX(c_char), HEX(c_varchar), HEX(c_text), \
         HEX(c_binary), HEX(c_varbinary), HEX(c_blob), c_date, c_time, c_datetime, c_timestamp, c_year, c_enum, c_set, c_bit+0, c_json, ST_AsText(c_geometry) \
         FROM d.all_types ORDER BY id";
    let mut results = Vec::new();
    for (db, loads) in [(&with_load, true), (&refusing, false)] {
        db.exec(&format!("CREATE DATABASE d; {}", all_types_ddl("d")))
            .expect("ddl");
        let s = sink(db, "worker-count=1&max-txn-row=256").await;
        for seq in 1..=2 {
            // The second pass is a replay from the start: nothing may change.
            let d = DispatcherId { epoch: 1, seq };
            s.open(d, Span::whole_table(schema.table_id), 0)
                .await
                .expect("open");
            s.write_rows(
                d,
                RowBatch {
                    schema: schema.clone(),
                    rows: rows.clone(),
                },
            )
            .await
            .expect("write");
            assert_eq!(s.flush(d).await.expect("flush"), 6);
            s.close(d).await;
            assert_eq!(s.uses_load_data(), loads);
            results.push(db.query(select).expect("select"));
        }
        let com_load: u64 = db
            .query("SHOW GLOBAL STATUS LIKE 'Com_load'")
            .expect("status")[0][1]
            .parse()
            .expect("number");
        // With LOAD DATA: one load per pass. Refused: one refused attempt, then statements only.
        assert_eq!(com_load, if loads { 2 } else { 1 }, "LOAD DATA statements");
    }
    assert_eq!(results[0].len(), 40);
    assert_eq!(results[0], results[1], "replay changed the loaded rows");
    assert_eq!(results[2], results[3], "replay changed the rows");
    assert_eq!(results[0], results[2], "LOAD DATA and statements disagree");
    assert!(results[0][0][9].starts_with(
        &"updated 1"
            .bytes()
            .map(|b| format!("{b:02X}"))
            .collect::<String>()
    ));
}

/// Pooled connections keep the session in UTC across reuse (they are no longer reset on return;
/// the session setup also runs after any reset): timestamps written by later flushes, as
/// statements and as `LOAD DATA`, land at the same instant on a downstream whose default time
/// zone is not UTC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_connections_stay_in_utc() {
    use sluice_testkit::mariadb::Options;
    let db = MariaDb::start_with(Options {
        extra_args: vec!["--default-time-zone=+05:00".into()],
        ..Options::default()
    })
    .expect("mariadb");
    db.exec(&format!("CREATE DATABASE d; {}", all_types_ddl("d")))
        .expect("ddl");
    assert_eq!(
        db.query_one("SELECT @@global.time_zone").expect("tz"),
        "+05:00"
    );
    let s = sink(&db, "worker-count=1").await;
    let schema = Arc::new(all_types_schema("d", 1));
    let d = DispatcherId { epoch: 1, seq: 1 };
    s.open(d, Span::whole_table(schema.table_id), 0)
        .await
        .expect("open");
    let full = all_types_rows(&schema, 5, 0)[0].clone();
    let mut next = 1i64;
    // Flushes of 1 row (statements) and of 40 rows (LOAD DATA), each on a reused connection.
    for (ts, n) in [(5, 1), (6, 40), (7, 1), (8, 40)] {
        let rows = (0..n)
            .map(|_| {
                let mut r = full.clone();
                r.commit_ts = ts;
                r.after.as_mut().expect("after")[0] = Value::Int(next);
                r.key = Key::row_u64(schema.table_id, next as u64);
                next += 1;
                r
            })
            .collect();
        s.write_rows(
            d,
            RowBatch {
                schema: schema.clone(),
                rows,
            },
        )
        .await
        .expect("write");
        assert_eq!(s.flush(d).await.expect("flush"), ts);
        // Let the pool take the connection back before the next flush reuses it.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        db.query_one(
            "SET time_zone='+00:00'; SELECT CONCAT(COUNT(*), ' ', COUNT(DISTINCT c_timestamp), ' ', MIN(c_timestamp)) FROM d.all_types"
        )
        .expect("q"),
        "82 1 2023-11-14 22:13:20.654321"
    );
}

/// A downstream that stops answering (here: rows locked by another session's open transaction)
/// makes a write fail after `read-timeout` with a retryable error instead of hanging; the stuck
/// statement is killed on the server, so it cannot commit later (InnoDB lock waits do not notice
/// a closed client socket: without the kill it would commit once the lock is released); once the
/// downstream answers again a new dispatcher writes normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_write_times_out_is_killed_and_is_retryable() {
    use mysql_async::prelude::Queryable;
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))")
        .expect("ddl");
    let s = sink(
        &db,
        "worker-count=1&read-timeout=1s&max-retries=1&retry-backoff=10ms",
    )
    .await;
    let schema = Arc::new(simple_schema("d", "t", 1, 1));
    let mut locker = mysql_async::Conn::from_url(db.url()).await.expect("locker");
    locker.query_drop("BEGIN").await.expect("begin");
    locker
        .query_drop("INSERT INTO d.t VALUES (1, 'locker'), (2, 'locker')")
        .await
        .expect("lock rows");
    let d = DispatcherId { epoch: 1, seq: 1 };
    s.open(d, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    let rows: Vec<RowEvent> = (1..=40)
        .map(|i| simple_insert(&schema, i, "x", 10, 0))
        .collect();
    let write = async {
        s.write_rows(
            d,
            RowBatch {
                schema: schema.clone(),
                rows: rows.clone(),
            },
        )
        .await?;
        s.flush(d).await
    };
    let e = tokio::time::timeout(std::time::Duration::from_secs(40), write)
        .await
        .expect("the write hung: read-timeout did not fire")
        .expect_err("a locked table cannot be written");
    assert!(e.is_retryable(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("read-timeout") && msg.contains("killed"),
        "{msg}"
    );
    // Nothing of the sink is left waiting on the server (kills are asynchronous: wait a little).
    let mut waiting = String::new();
    for _ in 0..100 {
        waiting = db
            .query_one(
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'",
            )
            .expect("innodb_trx");
        if waiting == "0" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        waiting, "0",
        "a killed statement is still waiting on the server"
    );
    locker
        .query_drop("ROLLBACK")
        .await
        .expect("release the rows");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        db.query_one("SELECT COUNT(*) FROM d.t").expect("count"),
        "0",
        "a timed-out write committed later"
    );
    s.close(d).await;
    let d2 = DispatcherId { epoch: 1, seq: 2 };
    s.open(d2, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open again");
    s.write_rows(
        d2,
        RowBatch {
            schema: schema.clone(),
            rows,
        },
    )
    .await
    .expect("write");
    s.flush(d2)
        .await
        .expect("flush once the downstream answers");
    assert_eq!(
        db.query_one("SELECT COUNT(*) FROM d.t").expect("count"),
        "40"
    );
}

/// A table version that does not know its generated columns (rebuilt from the binlog after a
/// DDL the history could not parse): the sink asks the downstream and writes none of them, so
/// the rows land and the downstream computes them. (MariaDB under the sink's non-strict
/// `sql_mode` only warns, 1906, about a written generated column; MySQL 8 refuses it, 3105: the
/// statements the downstream received, from its general log, show what was written.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columns_the_downstream_generates_are_never_written_whatever_the_schema_says() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.g (id BIGINT PRIMARY KEY, v VARCHAR(64), \
         s VARCHAR(70) AS (CONCAT(v, '!')) PERSISTENT, w INT AS (LENGTH(v)) VIRTUAL); \
         SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1",
    )
    .expect("ddl");
    let mut g = simple_schema("d", "g", 7, 1);
    for name in ["s", "w"] {
        let mut c = g.columns[1].clone();
        c.name = name.into();
        g.columns.push(c);
    }
    assert!(g.columns.iter().all(|c| c.generated.is_none()));
    let g = Arc::new(g);
    let img = |id: i64, v: &str| {
        vec![
            Value::Int(id),
            Value::Text(v.into()),
            Value::Text("as upstream computed it".into()),
            Value::Int(99),
        ]
    };
    for params in ["", "safe-mode=false"] {
        db.exec("DELETE FROM d.g").expect("clean");
        let s = sink(&db, params).await;
        let d = DispatcherId { epoch: 1, seq: 7 };
        s.open(d, Span::whole_table(TableId(7)), 0)
            .await
            .expect("open");
        let rows = vec![
            row(&g, RowKind::Insert, 10, None, Some(img(1, "a"))),
            row(&g, RowKind::Insert, 10, None, Some(img(2, "bb"))),
            row(
                &g,
                RowKind::Update,
                20,
                Some(img(1, "a")),
                Some(img(1, "ccc")),
            ),
            row(&g, RowKind::Delete, 30, Some(img(2, "bb")), None),
        ];
        s.write_rows(
            d,
            RowBatch {
                schema: g.clone(),
                rows,
            },
        )
        .await
        .expect("buffered");
        assert_eq!(s.flush(d).await.expect("flushed, no 1906"), 30, "{params}");
        assert_eq!(
            db.query_one("SELECT GROUP_CONCAT(CONCAT_WS(':', id, v, s, w)) FROM d.g")
                .expect("q"),
            "1:ccc:ccc!:3",
            "{params}"
        );
        s.close(d).await;
    }
    let writes = |pattern: &str| {
        db.query_one(&format!(
            "SELECT COUNT(*) FROM mysql.general_log WHERE argument LIKE '%`d`.`g`%' \
             AND argument REGEXP '^(INSERT|REPLACE|UPDATE|LOAD)' AND argument REGEXP '{pattern}'"
        ))
        .expect("general log")
        .parse::<u32>()
        .expect("count")
    };
    assert!(writes("`v`") >= 4, "the writes are in the log");
    assert_eq!(writes("`s`|`w`"), 0, "no write names a generated column");
}
