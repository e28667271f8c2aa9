//! Schema snapshot, DDL in the middle of a stream, keys, and two readers agreeing.

mod common;
use common::*;
use sluice_capture::capture::{Capture, Captured};
use sluice_capture::schema::{SchemaHistory, SNAPSHOT_FIRST_TABLE_ID};
use sluice_capture::BinlogPos;
use sluice_testkit::mariadb::MariaDb;
use sluice_types::{DdlKind, Key, RowKind, TableId, Ts, Value};

/// Runs a capture until a DDL whose query contains `marker`; returns every item.
async fn capture_until(c: &mut Capture, marker: &str) -> Vec<Captured> {
    let mut out = Vec::new();
    let fut = async {
        loop {
            let item = c.next().await.expect("capture");
            let done = matches!(&item, Captured::Ddl(d) if d.query.contains(marker));
            if !matches!(item, Captured::Resolved(_)) {
                out.push(item);
            }
            if done {
                break;
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), fut)
        .await
        .expect("timeout");
    out
}

fn triples(items: &[Captured]) -> Vec<(TableId, Key, Ts, RowKind)> {
    items
        .iter()
        .flat_map(|i| match i {
            Captured::Rows { rows, .. } => rows
                .iter()
                .map(|r| (r.table_id, r.key.clone(), r.commit_ts, r.kind))
                .collect(),
            _ => vec![],
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_ddl_mid_stream_and_two_readers_agree() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.b (id INT PRIMARY KEY, v INT); CREATE TABLE d.a (k VARCHAR(10) PRIMARY KEY, v INT); \
         INSERT INTO d.a VALUES ('x', 1)",
    )
    .expect("sql");
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let (file, pos) = db.master_status().expect("status");
    assert_eq!(history.snapshot_pos, BinlogPos::new(file, pos));
    // Snapshot ids in (db, name) order from SNAPSHOT_FIRST_TABLE_ID.
    let a = history
        .table_at("d", "a", history.snapshot_ts)
        .expect("a")
        .table_id;
    let b = history
        .table_at("d", "b", history.snapshot_ts)
        .expect("b")
        .table_id;
    assert_eq!(
        (a, b),
        (
            TableId(SNAPSHOT_FIRST_TABLE_ID),
            TableId(SNAPSHOT_FIRST_TABLE_ID + 1)
        )
    );

    // Workload after the snapshot: rows, a key change, case/pad-equal keys, DDL in the middle.
    db.exec(
        "INSERT INTO d.b VALUES (1, 1), (2, 2); UPDATE d.b SET id = 3 WHERE id = 1; \
         UPDATE d.a SET v = 2 WHERE k = 'x'; INSERT INTO d.a VALUES ('Y', 1); \
         ALTER TABLE d.b ADD COLUMN w VARCHAR(5) DEFAULT 'z'; INSERT INTO d.b VALUES (4, 4, 'q'); \
         CREATE TABLE d.c (id BIGINT UNSIGNED PRIMARY KEY); INSERT INTO d.c VALUES (18446744073709551615); \
         RENAME TABLE d.c TO d.c2; INSERT INTO d.c2 VALUES (7); TRUNCATE TABLE d.b; INSERT INTO d.b VALUES (9, 9, 'r'); \
         DELETE FROM d.a WHERE k = 'y '; CREATE TABLE d.marker1 (id INT PRIMARY KEY); \
         INSERT INTO d.b VALUES (10, 10, 's'); CREATE TABLE d.marker2 (id INT PRIMARY KEY)",
    )
    .expect("workload");

    let mut c1 = Capture::new(
        reader(&db.url(), 201, history.snapshot_pos.clone()),
        history.clone(),
    );
    let items = capture_until(&mut c1, "marker2").await;
    let rows: Vec<_> = items
        .iter()
        .flat_map(|i| match i {
            Captured::Rows { rows, .. } => rows.clone(),
            _ => vec![],
        })
        .collect();
    let ddls: Vec<_> = items
        .iter()
        .filter_map(|i| {
            if let Captured::Ddl(d) = i {
                Some(d.clone())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        ddls.iter().map(|d| d.kind).collect::<Vec<_>>(),
        vec![
            DdlKind::AlterTable,
            DdlKind::CreateTable,
            DdlKind::RenameTable,
            DdlKind::TruncateTable,
            DdlKind::CreateTable,
            DdlKind::CreateTable
        ]
    );
    // Key change → delete(1) + insert(3).
    assert_eq!(rows[2].kind, RowKind::Delete);
    assert_eq!(rows[3].kind, RowKind::Insert);
    assert_eq!(rows[2].commit_ts, rows[3].commit_ts);
    assert_eq!(rows[2].before.as_ref().expect("before")[0], Value::Int(1));
    assert_eq!(rows[3].after.as_ref().expect("after")[0], Value::Int(3));
    // Same key for 'Y' inserted and 'y ' deleted (case-insensitive, pad-space collation).
    let ins_y = rows
        .iter()
        .find(|r| r.kind == RowKind::Insert && r.table_id == a)
        .expect("insert Y");
    let del_y = rows
        .iter()
        .find(|r| r.kind == RowKind::Delete && r.table_id == a)
        .expect("delete y");
    assert_eq!(ins_y.key, del_y.key);
    // Rows after ALTER carry the new column; the new table's id is its CREATE commit ts.
    let create_c = &ddls[1];
    let c_id = TableId(create_c.commit_ts);
    assert_eq!(create_c.influence.added, vec![(c_id, "d.c".to_string())]);
    let c_rows: Vec<_> = rows.iter().filter(|r| r.table_id == c_id).collect();
    assert_eq!(c_rows.len(), 2, "RENAME keeps the id");
    assert_eq!(c_rows[0].after, Some(vec![Value::UInt(u64::MAX)]));
    let trunc = &ddls[3];
    assert_eq!(trunc.influence.dropped, vec![b]);
    let nine = rows
        .iter()
        .find(|r| r.after.as_ref().is_some_and(|a| a[0] == Value::Int(9)))
        .expect("row 9");
    assert_eq!(
        nine.table_id,
        TableId(trunc.commit_ts),
        "TRUNCATE gives a new id"
    );
    assert_eq!(nine.after.as_ref().expect("after").len(), 3);
    assert!(rows
        .iter()
        .all(|r| Key::table_start(r.table_id) <= r.key && r.key < Key::table_end(r.table_id)));

    // A second reader (another node) from a later start point, with the history persisted and
    // loaded: identical (table id, key, commit ts) where the streams overlap.
    let marker1 = ddls[4].commit_ts;
    let mid = items
        .iter()
        .find_map(|i| match i {
            Captured::Ddl(d) if d.kind == DdlKind::CreateTable => Some(d.commit_ts),
            _ => None,
        })
        .expect("create c");
    let persisted = SchemaHistory::from_json(&c1.history.to_json().expect("json")).expect("load");
    let start = BinlogPos::from_ts("mysql-bin", mid);
    let mut c2 = Capture::new(reader(&db.url(), 202, start), persisted);
    let items2 = capture_until(&mut c2, "marker2").await;
    let t1: Vec<_> = triples(&items).into_iter().filter(|t| t.2 > mid).collect();
    let t2 = triples(&items2);
    assert!(!t2.is_empty() && t2.iter().any(|t| t.2 > marker1));
    assert_eq!(t1, t2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pump_into_store_and_resume_from_the_persisted_position() {
    use sluice_capture::capture::Pump;
    use sluice_capture::schema::FileSchemaStore;
    use sluice_capture::store::{EventStore, StoreConfig};
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY)")
        .expect("sql");
    let dir = db.dir().join("node");
    std::fs::create_dir_all(&dir).expect("dir");
    let hs = std::sync::Arc::new(FileSchemaStore(dir.join("history.json")));
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    hs.save_sync(&history).expect("save");
    let t = history
        .table_at("d", "t", history.head)
        .expect("t")
        .table_id;
    db.exec("INSERT INTO d.t VALUES (1),(2); ALTER TABLE d.t ADD COLUMN v INT; INSERT INTO d.t VALUES (3, 3)")
        .expect("sql");
    let (_, end1) = db.master_status().expect("status");
    {
        let store = std::sync::Arc::new(
            EventStore::open(&dir.join("events"), StoreConfig::default()).expect("store"),
        );
        let pos = Pump::resume_position(&store, &history);
        let mut pump = Pump::new(
            Capture::new(reader(&db.url(), 401, pos), history),
            store.clone(),
            hs.clone(),
        );
        pump.persist_every = 1;
        while store.resolved() & 0xffff_ffff < end1 {
            pump.step().await.expect("step");
        }
    }
    // "Restart the node": reload history and store, resume where the store ended.
    db.exec("INSERT INTO d.t VALUES (4, 4); UPDATE d.t SET v = 5 WHERE id = 1")
        .expect("sql");
    let (_, end2) = db.master_status().expect("status");
    let history = hs.load_sync().expect("load").expect("history");
    let store = std::sync::Arc::new(
        EventStore::open(&dir.join("events"), StoreConfig::default()).expect("reopen"),
    );
    let pos = Pump::resume_position(&store, &history);
    assert_eq!(pos.pos, end1, "resumes at the persisted position");
    let mut pump = Pump::new(
        Capture::new(reader(&db.url(), 402, pos), history),
        store.clone(),
        hs.clone(),
    );
    while store.resolved() & 0xffff_ffff < end2 {
        pump.step().await.expect("step");
    }
    let rows = store
        .scan(&sluice_types::Span::whole_table(t), 0, u64::MAX, 1000)
        .expect("scan")
        .rows;
    let got: Vec<(RowKind, Value)> = rows
        .iter()
        .map(|r| {
            (
                r.kind,
                r.after.clone().or(r.before.clone()).expect("image")[0].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (RowKind::Insert, Value::Int(1)),
            (RowKind::Insert, Value::Int(2)),
            (RowKind::Insert, Value::Int(3)),
            (RowKind::Insert, Value::Int(4)),
            (RowKind::Update, Value::Int(1)),
        ]
    );
    assert_eq!(
        rows[4].after,
        Some(vec![Value::Int(1), Value::Int(5)]),
        "decoded with the post-ALTER schema"
    );
    assert_eq!(store.ddls(0, u64::MAX).expect("ddls").len(), 1);
}

#[tokio::test]
async fn create_table_select_yields_the_ddl_then_its_rows() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.a (id INT PRIMARY KEY); INSERT INTO d.a VALUES (1),(2)",
    )
    .expect("sql");
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    db.exec("CREATE TABLE d.b (PRIMARY KEY (id)) SELECT id FROM d.a; CREATE TABLE d.marker (id INT PRIMARY KEY)")
        .expect("ctas");
    let mut c = Capture::new(
        reader(&db.url(), 501, history.snapshot_pos.clone()),
        history,
    );
    let items = capture_until(&mut c, "marker").await;
    let Captured::Ddl(ddl) = &items[0] else {
        panic!("expected the CREATE first, got {:?}", items[0])
    };
    assert_eq!(ddl.kind, DdlKind::CreateTable);
    let Captured::Rows { commit_ts, rows } = &items[1] else {
        panic!("expected rows, got {:?}", items[1])
    };
    assert_eq!(
        ddl.commit_ts + 1,
        *commit_ts,
        "the DDL sorts just before its rows"
    );
    assert_eq!(
        ddl.influence.added,
        vec![(TableId(ddl.commit_ts), "d.b".to_string())]
    );
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.table_id == TableId(ddl.commit_ts)));
    assert_eq!(rows[1].after, Some(vec![Value::Int(2)]));
}

#[tokio::test]
async fn regions_from_statistics_partition_the_table_evenly() {
    use sluice_capture::keys::row_key;
    use sluice_capture::regions::{table_regions, RegionConfig};
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.r (id BIGINT PRIMARY KEY, pad VARCHAR(200)); \
         INSERT INTO d.r SELECT seq * 3, REPEAT('x', 200) FROM d.seq_1_to_20000; ANALYZE TABLE d.r",
    )
    .expect("sql");
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let t = history.table_at("d", "r", history.head).expect("r").clone();
    let bytes: u64 = db
        .query_one("SELECT DATA_LENGTH FROM information_schema.TABLES WHERE TABLE_NAME = 'r'")
        .expect("stats")
        .parse()
        .expect("number");
    let cfg = RegionConfig {
        region_size: bytes.div_ceil(8),
        max_regions: 100,
    };
    let mut conn = mysql_async::Conn::from_url(db.url()).await.expect("conn");
    let bounds = table_regions(&mut conn, &t, &cfg).await.expect("regions");
    assert_eq!(bounds.len(), 7, "8 regions → 7 interior boundaries");
    let spans = sluice_types::Span::whole_table(t.table_id).split_at(&bounds);
    assert_eq!(spans.len(), 8);
    // Every row falls in exactly one span, and the spans are balanced.
    let mut counts = vec![0usize; spans.len()];
    for id in 1..=20000i64 {
        let k = row_key(t.table_id, &[Value::Int(id * 3), Value::Null], &[(0, 0)]);
        let hits: Vec<usize> = spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.contains(&k))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(hits.len(), 1);
        counts[hits[0]] += 1;
    }
    assert!(
        counts.iter().all(|c| (1500..=3500).contains(c)),
        "balanced regions: {counts:?}"
    );
    // A keyless table is one span.
    db.exec("CREATE TABLE d.nokey (a INT)").expect("nokey");
    let h2 = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let nk = h2.table_at("d", "nokey", h2.head).expect("nokey");
    assert!(table_regions(&mut conn, nk, &cfg)
        .await
        .expect("regions")
        .is_empty());
}

/// Node `node-a`'s heartbeat writer on `db`, every 50 ms; stopped through the sender.
fn heartbeats_every_50ms(
    db: &MariaDb,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<sluice_capture::error::Result<()>>,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let url = db.url();
    let writer = tokio::spawn(async move {
        sluice_capture::heartbeat::run(
            &url,
            "node-a",
            std::time::Duration::from_millis(50),
            stop_rx,
        )
        .await
    });
    (stop_tx, writer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_table_advances_resolved_and_measures_lag_without_leaking_rows() {
    let db = MariaDb::start().expect("mariadb");
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let (stop_tx, writer) = heartbeats_every_50ms(&db);
    let mut c = Capture::new(
        reader(&db.url(), 601, history.snapshot_pos.clone()),
        history,
    );
    let mut empty_txns = Vec::new();
    let fut = async {
        while empty_txns.len() < 5 {
            match c.next().await.expect("capture") {
                Captured::Rows { commit_ts, rows } => {
                    assert!(
                        rows.is_empty(),
                        "heartbeat rows never reach changefeeds: {rows:?}"
                    );
                    empty_txns.push(commit_ts);
                }
                Captured::Ddl(d) => assert!(d.query.contains("sluice"), "{}", d.query),
                _ => {}
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), fut)
        .await
        .expect("heartbeats");
    stop_tx.send(true).expect("stop");
    writer.await.expect("join").expect("writer");
    assert!(
        empty_txns.windows(2).all(|w| w[0] < w[1]),
        "each heartbeat advances the commit ts"
    );
    let hb = c.last_heartbeat.clone().expect("a heartbeat sample");
    assert_eq!(hb.node, "node-a");
    assert_eq!(hb.commit_ts, *empty_txns.last().expect("last"));
}

/// With heartbeats on, a transaction's commit time has millisecond precision: each row's stamp is
/// within a heartbeat interval (plus scheduling slack) of the upstream's `NOW(6)` in the row, where
/// the binlog header alone is off by up to a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_give_commit_times_in_milliseconds() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, at_ms BIGINT)")
        .expect("sql");
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let (stop_tx, writer) = heartbeats_every_50ms(&db);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    const ROWS: i64 = 30;
    for i in 0..ROWS {
        db.exec(&format!(
            "INSERT INTO d.t VALUES ({i}, ROUND(UNIX_TIMESTAMP(NOW(6)) * 1000))"
        ))
        .expect("row");
        tokio::time::sleep(std::time::Duration::from_millis(73)).await;
    }
    let mut c = Capture::new(
        reader(&db.url(), 602, history.snapshot_pos.clone()),
        history,
    );
    let mut errors = Vec::new();
    let fut = async {
        while errors.len() < ROWS as usize {
            if let Captured::Rows { rows, .. } = c.next().await.expect("capture") {
                for r in rows {
                    let Some([_, Value::Int(at)]) = r.after.as_deref() else {
                        panic!("a row of d.t: {r:?}")
                    };
                    errors.push((r.commit_time_ms as i64 - at).abs());
                }
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), fut)
        .await
        .expect("rows");
    stop_tx.send(true).expect("stop");
    writer.await.expect("join").expect("writer");
    let mean = errors.iter().sum::<i64>() / ROWS;
    let max = errors.iter().copied().max().unwrap_or_default();
    // Whole seconds would be off by ~500 ms on average and up to 999 ms.
    assert!(
        mean <= 250 && max <= 600,
        "commit time errors (ms): {errors:?}"
    );
}

/// A history that is wrong about a table (a DDL it misread) is repaired from the binlog's
/// TABLE_MAP at the first rows of that table: capture goes on, the rows carry every column and
/// are keyed by the binlog's primary key, and the repair is recorded.
#[tokio::test]
async fn a_history_that_disagrees_with_the_binlog_is_repaired_from_it() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, a INT)")
        .expect("sql");
    let mut history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    // Simulate a DDL the history could not follow: it believes `a` does not exist.
    for versions in history.tables.values_mut() {
        for v in versions.iter_mut() {
            v.schema.columns.retain(|c| c.name != "a");
        }
    }
    let t = history
        .table_at("d", "t", history.head)
        .expect("t")
        .table_id;
    db.exec("INSERT INTO d.t VALUES (7, 1); CREATE TABLE d.marker (id INT PRIMARY KEY)")
        .expect("sql");
    let mut c = Capture::new(
        reader(&db.url(), 801, history.snapshot_pos.clone()),
        history,
    );
    let items = capture_until(&mut c, "marker").await;
    let rows: Vec<_> = items
        .iter()
        .flat_map(|i| match i {
            Captured::Rows { rows, .. } => rows.clone(),
            _ => vec![],
        })
        .collect();
    assert_eq!(rows.len(), 1, "{items:?}");
    assert_eq!(rows[0].after, Some(vec![Value::Int(7), Value::Int(1)]));
    assert_eq!(
        rows[0].key,
        sluice_capture::keys::row_key(t, &[Value::Int(7)], &[(0, 0)])
    );
    let h = &c.history;
    let now = h.table_at("d", "t", h.head).expect("t");
    let names: Vec<&str> = now.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["id", "a"],
        "the repaired version has the binlog's columns"
    );
    assert_eq!(
        now.version, rows[0].commit_ts,
        "the repair is a version at the rows' ts"
    );
    assert_eq!(
        rows[0].schema_version, now.version,
        "rows name the repaired version"
    );
    assert_eq!(h.repairs.len(), 1, "{:?}", h.repairs);
    assert_eq!(h.repairs[0].table, "d.t");
}

/// DDLs MariaDB accepts, whether or not the history's parser understands them, never stop
/// capture: after each, the rows that follow are captured with the columns the server has and
/// the history's version of the table agrees with the binlog.
#[tokio::test]
async fn ddls_the_history_may_not_parse_never_stop_capture() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d").expect("sql");
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let cases: &[(&str, &str, &str)] = &[
        ("g", "CREATE TABLE d.g (id INT PRIMARY KEY, v INT, s INT AS (v+1) PERSISTENT)", "INSERT INTO d.g (id, v) VALUES (1, 1)"),
        ("sv", "CREATE TABLE d.sv (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING", "INSERT INTO d.sv VALUES (1, 1)"),
        ("av", "CREATE TABLE d.av (id INT PRIMARY KEY, v INT); ALTER TABLE d.av ADD SYSTEM VERSIONING", "INSERT INTO d.av VALUES (1, 1)"),
        ("ok", "CREATE TABLE d.ok (id INT PRIMARY KEY, v INT); ALTER TABLE d.ok DISABLE KEYS; ALTER TABLE d.ok ORDER BY v", "INSERT INTO d.ok VALUES (1, 1)"),
        ("multi", "CREATE TABLE d.multi (id INT PRIMARY KEY); ALTER TABLE d.multi ADD COLUMN (a INT, b VARCHAR(8)), ADD COLUMN IF NOT EXISTS a INT", "INSERT INTO d.multi VALUES (1, 2, 'x')"),
        ("9lives", "CREATE TABLE d.9lives (id INT PRIMARY KEY, c BLOB, UNIQUE KEY (c))", "INSERT INTO d.9lives VALUES (1, 'x')"),
    ];
    for (_, ddl, dml) in cases {
        db.exec(ddl).expect("ddl accepted upstream");
        db.exec(dml).expect("dml");
    }
    db.exec("CREATE TABLE d.marker (id INT PRIMARY KEY)")
        .expect("marker");
    let mut c = Capture::new(
        reader(&db.url(), 803, history.snapshot_pos.clone()),
        history,
    );
    let items = capture_until(&mut c, "marker").await;
    for (table, ..) in cases {
        let want: Vec<String> = db
            .query(&format!(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'd' AND TABLE_NAME = '{table}' ORDER BY ORDINAL_POSITION"
            ))
            .expect("columns")
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
        let h = &c.history;
        let s = h
            .table_at("d", table, h.head)
            .unwrap_or_else(|| panic!("d.{table} unknown to the history"));
        let row = items
            .iter()
            .flat_map(|i| match i {
                Captured::Rows { rows, .. } => rows.clone(),
                _ => vec![],
            })
            .find(|r| r.table_id == s.table_id)
            .unwrap_or_else(|| panic!("no row of d.{table} captured: {items:?}"));
        let got: Vec<String> = s.columns.iter().map(|c| c.name.clone()).collect();
        let width = row.after.as_ref().map(|a| a.len()).unwrap_or(0);
        assert_eq!(
            width,
            got.len(),
            "d.{table}: the row and its version have the same columns: {got:?}"
        );
        eprintln!("d.{table}: server {want:?}, history {got:?}, row width {width}");
        if width == want.len() {
            assert_eq!(
                got, want,
                "d.{table}: the history names the server's columns"
            );
        } else {
            // Hidden columns the server logs but does not list (or the reverse): every listed
            // column the history knows must still be there, in the server's order.
            let listed: Vec<&String> = got.iter().filter(|g| want.contains(g)).collect();
            assert_eq!(
                listed,
                want.iter().collect::<Vec<_>>(),
                "d.{table}: columns out of order or missing"
            );
        }
        assert_eq!(
            row.schema_version, s.version,
            "d.{table}: rows name the version that describes them"
        );
    }
}

/// The server spawns the pump and shares the store: they must be `Send + 'static` / `Sync`
/// (a compile-time check).
#[test]
fn pump_can_be_spawned_and_store_shared() {
    fn spawnable<T: Send + 'static>() {}
    fn shareable<T: Send + Sync + 'static>() {}
    spawnable::<sluice_capture::capture::Pump>();
    shareable::<sluice_capture::store::EventStore>();
    shareable::<sluice_capture::schema::SchemaHistory>();
}
