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
            Some(s) => s.query.split_whitespace().take(2).collect::<Vec<_>>().join(" "),
            None => t.rows.iter().map(|r| format!("{:?}", r.kind)).collect::<Vec<_>>().join(","),
        })
        .collect();
    assert_eq!(
        kinds,
        vec!["CREATE DATABASE", "CREATE TABLE", "Insert,Insert", "Update", "Delete", "CREATE TABLE"]
    );
    let ins = &txns[2];
    assert_eq!(ins.rows[0].after, Some(vec![Value::Int(1), Value::Text("a".into())]));
    assert_eq!(ins.rows[0].table.table, "t");
    assert_eq!(ins.rows[0].table.primary_key, vec![0]);
    let upd = &txns[3].rows[0];
    assert_eq!(upd.kind, RowKind::Update);
    assert_eq!(upd.before, Some(vec![Value::Int(2), Value::Text("b".into())]));
    assert_eq!(upd.after, Some(vec![Value::Int(2), Value::Text("c".into())]));
    let del = &txns[4].rows[0];
    assert_eq!(del.before, Some(vec![Value::Int(1), Value::Text("a".into())]));
    assert_eq!(del.after, None);
    // commit ts = (file index << 32) | end position, strictly increasing, GTIDs consecutive.
    for w in txns.windows(2) {
        assert!(w[0].commit_ts < w[1].commit_ts);
        assert_eq!(w[0].end, w[1].start, "transactions are contiguous");
        assert_eq!(w[1].gtid.expect("gtid").seq, w[0].gtid.expect("gtid").seq + 1);
    }
    let (file, pos) = db.master_status().expect("status");
    let last = txns.last().expect("last");
    assert_eq!(last.end, BinlogPos::new(file, pos));
    assert_eq!(last.commit_ts, (1u64 << 32) | pos);
    assert!(r.stats.checksums_verified > 0, "CRC32 checksums are verified");
}

#[tokio::test]
async fn follows_rotation_and_resumes_from_a_position() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY)").expect("sql");
    for i in 0..5 {
        db.exec(&format!("INSERT INTO d.t VALUES ({i}); FLUSH BINARY LOGS")).expect("sql");
    }
    db.exec("CREATE TABLE d.marker (id INT PRIMARY KEY)").expect("sql");
    let mut r = reader(&db.url(), 102, start_pos());
    let all = read_until(&mut r, |t| is_stmt(t, "marker")).await;
    let ids: Vec<Value> = all.iter().flat_map(|t| t.rows.iter()).filter_map(|r| r.after.clone()).map(|a| a[0].clone()).collect();
    assert_eq!(ids, (0..5).map(Value::Int).collect::<Vec<_>>());
    assert!(all.last().expect("last").end.file.ends_with(".000006"));
    // Resume from the end of the third insert: exactly the rest, same commit ts.
    let third = all.iter().filter(|t| !t.rows.is_empty()).nth(2).expect("third").clone();
    let mut r2 = reader(&db.url(), 103, third.end.clone());
    let rest = read_until(&mut r2, |t| is_stmt(t, "marker")).await;
    let tail: Vec<_> = all.iter().filter(|t| t.commit_ts > third.commit_ts).cloned().collect();
    assert_eq!(rest.iter().map(|t| t.commit_ts).collect::<Vec<_>>(), tail.iter().map(|t| t.commit_ts).collect::<Vec<_>>());
    assert_eq!(rest, tail);
}

#[tokio::test]
async fn purged_start_is_a_fatal_error_naming_the_file() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; FLUSH BINARY LOGS; FLUSH BINARY LOGS").expect("sql");
    // PURGE skips files whose binlog checkpoint is pending: retry until the first file is gone.
    for _ in 0..100 {
        db.exec("PURGE BINARY LOGS TO 'mysql-bin.000003'").expect("purge");
        if db.query_one("SHOW BINARY LOGS").expect("logs") == "mysql-bin.000003" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(db.query_one("SHOW BINARY LOGS").expect("logs"), "mysql-bin.000003");
    let mut r = reader(&db.url(), 104, start_pos());
    let err = loop {
        match r.next().await {
            Ok(ReaderEvent::Resolved(_)) => continue,
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, CaptureError::BinlogPurged { ref file, .. } if file == "mysql-bin.000001"), "{err}");
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
    tokio::time::timeout(std::time::Duration::from_secs(30), fut).await.expect("resolved reaches the end");
}
