//! Binlog reader against a real MariaDB: rows, DDL, rotation, resume, kill, restart, purge.

mod common;
use common::*;
use sluice_capture::binlog::ReaderEvent;
use sluice_capture::{BinlogPos, CaptureError};
use sluice_testkit::mariadb::{MariaDb, Options};
use sluice_types::{RowKind, Value};

#[tokio::test]
async fn reads_rows_ddl_and_commit_ts() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(20)); \
         INSERT INTO d.t VALUES (1,'a'),(2,'b'); UPDATE d.t SET v='c' WHERE id=2; DELETE FROM d.t WHERE id=1; \
         CREATE TABLE d.marker (id INT PRIMARY KEY)",
    )
    .expect("sql");
    let mut r = reader(&db.url(), 101, start_pos());
    let txns = read_until(&mut r, |t| is_stmt(t, "marker")).await;
    let kinds: Vec<String> = txns
        .iter()
        .map(|t| match &t.statement {
            Some(s) => s
                .query
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" "),
            None => t
                .rows
                .iter()
                .map(|r| format!("{:?}", r.kind))
                .collect::<Vec<_>>()
                .join(","),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "CREATE DATABASE",
            "CREATE TABLE",
            "Insert,Insert",
            "Update",
            "Delete",
            "CREATE TABLE"
        ]
    );
    let ins = &txns[2];
    assert_eq!(
        ins.rows[0].after,
        Some(vec![Value::Int(1), Value::Text("a".into())])
    );
    assert_eq!(ins.rows[0].table.table, "t");
    assert_eq!(ins.rows[0].table.primary_key, vec![0]);
    let upd = &txns[3].rows[0];
    assert_eq!(upd.kind, RowKind::Update);
    assert_eq!(
        upd.before,
        Some(vec![Value::Int(2), Value::Text("b".into())])
    );
    assert_eq!(
        upd.after,
        Some(vec![Value::Int(2), Value::Text("c".into())])
    );
    let del = &txns[4].rows[0];
    assert_eq!(
        del.before,
        Some(vec![Value::Int(1), Value::Text("a".into())])
    );
    assert_eq!(del.after, None);
    // commit ts = (file index << 32) | end position, strictly increasing, GTIDs consecutive.
    for w in txns.windows(2) {
        assert!(w[0].commit_ts < w[1].commit_ts);
        assert_eq!(w[0].end, w[1].start, "transactions are contiguous");
        assert_eq!(
            w[1].gtid.expect("gtid").seq,
            w[0].gtid.expect("gtid").seq + 1
        );
    }
    let (file, pos) = db.master_status().expect("status");
    let last = txns.last().expect("last");
    assert_eq!(last.end, BinlogPos::new(file, pos));
    assert_eq!(last.commit_ts, (1u64 << 32) | pos);
    assert!(
        r.stats.checksums_verified > 0,
        "CRC32 checksums are verified"
    );
}

#[tokio::test]
async fn follows_rotation_and_resumes_from_a_position() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY)")
        .expect("sql");
    for i in 0..5 {
        db.exec(&format!("INSERT INTO d.t VALUES ({i}); FLUSH BINARY LOGS"))
            .expect("sql");
    }
    db.exec("CREATE TABLE d.marker (id INT PRIMARY KEY)")
        .expect("sql");
    let mut r = reader(&db.url(), 102, start_pos());
    let all = read_until(&mut r, |t| is_stmt(t, "marker")).await;
    let ids: Vec<Value> = all
        .iter()
        .flat_map(|t| t.rows.iter())
        .filter_map(|r| r.after.clone())
        .map(|a| a[0].clone())
        .collect();
    assert_eq!(ids, (0..5).map(Value::Int).collect::<Vec<_>>());
    assert!(all.last().expect("last").end.file.ends_with(".000006"));
    // Resume from the end of the third insert: exactly the rest, same commit ts.
    let third = all
        .iter()
        .filter(|t| !t.rows.is_empty())
        .nth(2)
        .expect("third")
        .clone();
    let mut r2 = reader(&db.url(), 103, third.end.clone());
    let rest = read_until(&mut r2, |t| is_stmt(t, "marker")).await;
    let tail: Vec<_> = all
        .iter()
        .filter(|t| t.commit_ts > third.commit_ts)
        .cloned()
        .collect();
    assert_eq!(
        rest.iter().map(|t| t.commit_ts).collect::<Vec<_>>(),
        tail.iter().map(|t| t.commit_ts).collect::<Vec<_>>()
    );
    assert_eq!(rest, tail);
}

#[tokio::test]
async fn purged_start_is_a_fatal_error_naming_the_file() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; FLUSH BINARY LOGS; FLUSH BINARY LOGS")
        .expect("sql");
    // PURGE skips files whose binlog checkpoint is pending: retry until the first file is gone.
    for _ in 0..100 {
        db.exec("PURGE BINARY LOGS TO 'mysql-bin.000003'")
            .expect("purge");
        if db.query_one("SHOW BINARY LOGS").expect("logs") == "mysql-bin.000003" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        db.query_one("SHOW BINARY LOGS").expect("logs"),
        "mysql-bin.000003"
    );
    let mut r = reader(&db.url(), 104, start_pos());
    let err = loop {
        match r.next().await {
            Ok(ReaderEvent::Resolved(_)) => continue,
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, CaptureError::BinlogPurged { ref file, .. } if file == "mysql-bin.000001"),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("mysql-bin.000001"));
}

#[tokio::test]
async fn heartbeats_resolve_an_idle_stream() {
    let db = MariaDb::start_with(Options::default()).expect("mariadb");
    db.exec("CREATE DATABASE d").expect("sql");
    let (file, pos) = db.master_status().expect("status");
    let mut r = reader(&db.url(), 105, start_pos());
    let want = BinlogPos::new(file, pos).ts().expect("ts");
    let fut = async {
        loop {
            if let ReaderEvent::Resolved(ts) = r.next().await.expect("next") {
                if ts == want {
                    break;
                }
                assert!(ts < want);
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), fut)
        .await
        .expect("resolved reaches the end");
}

/// Writes `n` transactions of `rows` rows each into d.big (ids are consecutive, ~1 KiB each).
fn write_big(db: &MariaDb, first_txn: usize, n: usize, rows: usize) {
    for t in first_txn..first_txn + n {
        let values: Vec<String> = (0..rows)
            .map(|i| format!("({}, REPEAT('x', 1000))", t * rows + i))
            .collect();
        db.exec(&format!(
            "BEGIN; INSERT INTO d.big VALUES {}; COMMIT",
            values.join(",")
        ))
        .expect("insert");
    }
}

fn assert_contiguous(txns: &[sluice_capture::Transaction], expect_rows: usize) {
    let ids: Vec<i64> = txns
        .iter()
        .flat_map(|t| t.rows.iter())
        .filter_map(|r| match r.after.as_ref().map(|a| &a[0]) {
            Some(Value::Int(i)) => Some(*i),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), expect_rows, "no row lost or repeated");
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "rows in order without gap or duplicate"
    );
    assert!(
        txns.windows(2).all(|w| w[0].commit_ts < w[1].commit_ts),
        "no transaction repeated"
    );
}

const BIG: &str = "CREATE DATABASE d; CREATE TABLE d.big (id INT PRIMARY KEY, pad VARCHAR(1000))";

/// The reader stops after the first data transaction while ~60 MiB of binlog are pending (more
/// than socket buffers hold), the dump thread is killed, and the reader goes on: it must see the
/// connection end inside a transaction, drop that partial transaction, and resume after the last
/// complete one. Repeated three times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_of_the_dump_thread_mid_transaction_resumes_without_gap() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(BIG).expect("sql");
    write_big(&db, 0, 20, 3000);
    db.exec("CREATE TABLE d.marker (id INT PRIMARY KEY)")
        .expect("marker");
    let mut r = reader(&db.url(), 110, start_pos());
    let mut txns = Vec::new();
    for round in 0..3 {
        txns.extend(read_until(&mut r, |t| !t.rows.is_empty()).await);
        let ids = db
            .query(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'",
            )
            .expect("processlist");
        assert_eq!(ids.len(), 1, "round {round}: one dump thread");
        db.exec(&format!("KILL CONNECTION {}", ids[0][0]))
            .expect("kill");
    }
    txns.extend(read_until(&mut r, |t| is_stmt(t, "marker")).await);
    assert!(
        r.stats.connects >= 4,
        "reconnected after every kill ({} connects)",
        r.stats.connects
    );
    assert!(
        r.stats.partial_dropped >= 1,
        "a kill landed inside a transaction"
    );
    assert_contiguous(&txns, 60_000);
}

/// The upstream is killed (SIGKILL) while the reader has most of the binlog still to read, then
/// restarted cleanly while the reader runs: the stream has no gap and no duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_restart_mid_stream_resumes_without_gap() {
    let mut db = MariaDb::start().expect("mariadb");
    db.exec(BIG).expect("sql");
    write_big(&db, 0, 10, 3000);
    let mut r = reader(&db.url(), 111, start_pos());
    let mut txns = read_until(&mut r, |t| !t.rows.is_empty()).await;
    db = tokio::task::spawn_blocking(move || {
        db.crash_restart().expect("crash restart");
        db
    })
    .await
    .expect("join");
    txns.extend(
        read_until(&mut r, |t| {
            t.rows.first().is_some_and(|x| {
                x.after
                    .as_ref()
                    .is_some_and(|a| a[0] == Value::Int(9 * 3000))
            })
        })
        .await,
    );
    assert!(
        r.stats.connects >= 2,
        "reconnected after the crash ({} connects)",
        r.stats.connects
    );
    // Now a clean restart while the reader keeps reading in its own task.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let t = read_until(&mut r, |t| {
            let _ = tx.send(());
            is_stmt(t, "marker")
        })
        .await;
        (t, r)
    });
    db = tokio::task::spawn_blocking(move || {
        db.restart().expect("restart");
        write_big(&db, 10, 5, 3000);
        db.exec("CREATE TABLE d.marker (id INT PRIMARY KEY)")
            .expect("marker");
        db
    })
    .await
    .expect("join");
    let (rest, r) = task.await.expect("reader task");
    assert!(rx.recv().await.is_some());
    txns.extend(rest);
    assert!(
        r.stats.connects >= 3,
        "reconnected after the clean restart ({} connects)",
        r.stats.connects
    );
    assert_contiguous(&txns, 45_000);
    drop(db);
}

/// A TABLE_MAP the reader cannot read (here: written while the server had
/// `binlog_row_metadata=MINIMAL`, so without column names) stops only its table: its rows
/// become one unreplicable change naming the fix, the other tables and later maps of the same
/// table decode as before, and the reader never stops.
#[tokio::test]
async fn an_unreadable_table_map_stops_only_its_table() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.a (id INT PRIMARY KEY, v INT); \
         CREATE TABLE d.b (id INT PRIMARY KEY, v INT)",
    )
    .expect("sql");
    let (file, pos) = db.master_status().expect("status");
    db.exec("SET GLOBAL binlog_row_metadata = MINIMAL")
        .expect("minimal");
    db.exec("INSERT INTO d.a VALUES (1, 1)").expect("insert a");
    db.exec("SET GLOBAL binlog_row_metadata = FULL")
        .expect("full");
    db.exec(
        "INSERT INTO d.b VALUES (2, 2); INSERT INTO d.a VALUES (3, 3); \
         CREATE TABLE d.marker (id INT PRIMARY KEY)",
    )
    .expect("sql");
    let mut r = reader(&db.url(), 106, BinlogPos::new(file, pos));
    let txns = read_until(&mut r, |t| is_stmt(t, "marker")).await;
    let stops: Vec<_> = txns.iter().flat_map(|t| t.unreplicable.iter()).collect();
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(stops[0].tables, vec![("d".to_string(), "a".to_string())]);
    assert!(
        stops[0].reason.contains("binlog_row_metadata=FULL"),
        "{}",
        stops[0].reason
    );
    let rows: Vec<(String, Value)> = txns
        .iter()
        .flat_map(|t| t.rows.iter())
        .map(|c| {
            let after = c.after.as_ref().expect("insert image");
            (c.table.table.clone(), after[0].clone())
        })
        .collect();
    assert_eq!(
        rows,
        vec![("b".into(), Value::Int(2)), ("a".into(), Value::Int(3))]
    );
}

/// A row as large as the server's `max_allowed_packet` makes a binlog event larger than it
/// (MariaDB's own `main/explain.test` writes one): the reader takes it, as a replica does with
/// `slave_max_allowed_packet`, instead of failing every reconnect and stopping capture.
#[tokio::test]
async fn a_row_as_large_as_max_allowed_packet_is_read() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.big (id INT PRIMARY KEY, a LONGTEXT)")
        .expect("sql");
    let (file, pos) = db.master_status().expect("status");
    let packet: usize = db
        .query_one("SELECT @@global.max_allowed_packet")
        .expect("max_allowed_packet")
        .parse()
        .expect("number");
    db.exec(
        "INSERT INTO d.big VALUES (1, REPEAT('a', @@global.max_allowed_packet)); \
         CREATE TABLE d.marker (id INT PRIMARY KEY)",
    )
    .expect("insert");
    let mut r = reader(&db.url(), 107, BinlogPos::new(file, pos));
    let txns = read_until(&mut r, |t| is_stmt(t, "marker")).await;
    let row = txns
        .iter()
        .flat_map(|t| t.rows.iter())
        .next()
        .expect("the big row");
    match &row.after.as_ref().expect("image")[1] {
        Value::Text(s) => assert_eq!(s.len(), packet),
        other => panic!("unexpected value {:?}", std::mem::discriminant(other)),
    }
}
