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

/// Writes `n` transactions of `rows` rows each into d.big (ids are consecutive), then a marker.
fn write_big(db: &MariaDb, first_txn: usize, n: usize, rows: usize) {
    for t in first_txn..first_txn + n {
        let values: Vec<String> = (0..rows)
            .map(|i| format!("({}, REPEAT('x', 200))", t * rows + i))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_of_the_dump_thread_mid_transaction_resumes_without_gap() {
    let db = std::sync::Arc::new(MariaDb::start().expect("mariadb"));
    db.exec("CREATE DATABASE d; CREATE TABLE d.big (id INT PRIMARY KEY, pad VARCHAR(255))")
        .expect("sql");
    write_big(&db, 0, 20, 3000);
    db.exec("CREATE TABLE d.marker (id INT PRIMARY KEY)")
        .expect("marker");
    let killer_db = db.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let killer = std::thread::spawn(move || {
        let mut kills = 0;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let ids = killer_db
                .query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
                .expect("processlist");
            for id in ids {
                if killer_db
                    .exec(&format!("KILL CONNECTION {}", id[0]))
                    .is_ok()
                {
                    kills += 1;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        kills
    });
    let mut r = reader(&db.url(), 110, start_pos());
    let txns = read_until(&mut r, |t| is_stmt(t, "marker")).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let kills = killer.join().expect("killer");
    assert!(
        kills > 0 && r.stats.connects > 1,
        "the dump thread was killed ({kills} kills, {} connects)",
        r.stats.connects
    );
    assert_contiguous(&txns, 60_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_restart_mid_stream_resumes_without_gap() {
    let mut db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.big (id INT PRIMARY KEY, pad VARCHAR(255))")
        .expect("sql");
    write_big(&db, 0, 10, 3000);
    // The reader runs in its own task (as in the server), so it keeps reading during restarts.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut r = reader(&db.url(), 111, start_pos());
    let task = tokio::spawn(async move {
        let txns = read_until(&mut r, |t| {
            let _ = tx.send(t.commit_ts);
            is_stmt(t, "marker")
        })
        .await;
        (txns, r.stats.connects)
    });
    // Restart gracefully after the first data transaction, then crash it after the sixth.
    let mut seen = 0;
    while seen < 3 {
        rx.recv().await.expect("progress");
        seen += 1;
    }
    db = tokio::task::spawn_blocking(move || {
        db.restart().expect("restart");
        db
    })
    .await
    .expect("join");
    while seen < 8 {
        rx.recv().await.expect("progress");
        seen += 1;
    }
    db = tokio::task::spawn_blocking(move || {
        db.crash_restart().expect("crash restart");
        write_big(&db, 10, 5, 3000);
        db.exec("CREATE TABLE d.marker (id INT PRIMARY KEY)")
            .expect("marker");
        db
    })
    .await
    .expect("join");
    let (txns, connects) = task.await.expect("reader task");
    assert!(
        connects >= 3,
        "reconnected after each restart ({connects} connects)"
    );
    assert_contiguous(&txns, 45_000);
    drop(db);
}
