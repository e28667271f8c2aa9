//! Large transactions stream through bounded memory: the reader hands out chunks, the store
//! stages them on disk and moves them into place at the commit; a dropped connection in the
//! middle aborts the staged chunks and the transaction is read again.

mod common;
use sluice_capture::binlog::{BinlogReader, ReaderConfig};
use sluice_capture::capture::{Capture, Pump};
use sluice_capture::schema::{FileSchemaStore, SchemaHistory, SchemaStore};
use sluice_capture::store::{EventStore, StoreConfig};
use sluice_testkit::mariadb::MariaDb;
use sluice_types::{Span, Value};
use std::path::Path;

const CHILD_ENV: &str = "SLUICE_BIGTXN_CHILD";

/// Checks the store holds `n` rows of table `t` in one transaction, in order, every row with
/// the transaction's commit time and GTID (the staged ones too: they were staged before the
/// commit was read).
fn assert_one_txn(store: &EventStore, t: sluice_types::TableId, n: usize) {
    let mut cursor = sluice_capture::store::Cursor {
        ts: 0,
        seq: u32::MAX,
    };
    let (mut count, mut ts) = (0usize, None);
    let (mut time, mut gtid) = (None, None);
    loop {
        let b = store
            .scan_from(&Span::whole_table(t), cursor, u64::MAX, 50_000)
            .expect("scan");
        for r in &b.rows {
            count += 1;
            assert_eq!(
                r.after.as_ref().expect("after")[0],
                Value::Int(count as i64),
                "rows in order"
            );
            assert_eq!(*ts.get_or_insert(r.commit_ts), r.commit_ts, "one commit ts");
            assert!(r.commit_time_ms > 0, "row {count} has no commit time");
            assert_eq!(*time.get_or_insert(r.commit_time_ms), r.commit_time_ms);
            assert!(r.gtid.is_some(), "row {count} has no GTID");
            assert_eq!(*gtid.get_or_insert(r.gtid), r.gtid, "one GTID");
        }
        match b.next {
            Some(c) => cursor = c,
            None => break,
        }
    }
    assert_eq!(count, n);
}

/// Child half of `big_transaction_streams_under_a_memory_quota`: pumps the upstream into a store
/// with a 64 MiB budget (8 MiB chunks, 32 MiB page cache) and prints its peak RSS.
#[tokio::test]
async fn big_transaction_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut it = spec.split('|');
    let (url, dir, end) = (
        it.next().expect("url"),
        it.next().expect("dir"),
        it.next().expect("end"),
    );
    let end: u64 = end.parse().expect("end");
    let hs = std::sync::Arc::new(FileSchemaStore(Path::new(dir).join("history.json")));
    let history = hs.load_sync().expect("load").expect("history");
    let store = std::sync::Arc::new(
        EventStore::open(
            &Path::new(dir).join("events"),
            StoreConfig {
                cache_bytes: 32 << 20,
            },
        )
        .expect("store"),
    );
    let mut cfg = ReaderConfig::new(url, 601, Pump::resume_position(&store, &history));
    cfg.chunk_bytes = 8 << 20;
    let mut pump = Pump::new(
        Capture::new(BinlogReader::new(cfg), history),
        store.clone(),
        hs.clone(),
    );
    while store.resolved() < end {
        pump.step().await.expect("step");
    }
    store.persist().expect("persist");
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let hwm: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    println!("\nSLUICE-RESULT {} {hwm}", pump.capture.reader.stats.chunks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_transaction_streams_under_a_memory_quota() {
    const ROWS: usize = 1_000_000; // ~1 GiB of row events in one transaction
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.big (id INT PRIMARY KEY, pad VARCHAR(1000))")
        .expect("sql");
    let dir = db.dir().join("node");
    std::fs::create_dir_all(&dir).expect("dir");
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let t = history
        .table_at("d", "big", history.head)
        .expect("t")
        .table_id;
    FileSchemaStore(dir.join("history.json"))
        .save(&history)
        .await
        .expect("save");
    db.exec(&format!(
        "INSERT INTO d.big SELECT seq, REPEAT('x', 1000) FROM d.seq_1_to_{ROWS}"
    ))
    .expect("big insert");
    let (file, pos) = db.master_status().expect("status");
    let end = sluice_capture::BinlogPos::new(file, pos).ts().expect("ts");
    let out = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "big_transaction_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{}|{}|{end}", db.url(), dir.display()))
        .output()
        .expect("child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Vec<u64> = stdout
        .lines()
        .find_map(|l| l.split("SLUICE-RESULT ").nth(1))
        .unwrap_or_else(|| panic!("no result line in: {stdout}"))
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let (chunks, hwm_kb) = (result[0], result[1]);
    println!("chunks {chunks}, peak RSS {hwm_kb} kB");
    assert!(chunks >= 50, "the transaction came in chunks ({chunks})");
    assert!(
        hwm_kb < 256 * 1024,
        "peak RSS {hwm_kb} kB stays under 256 MiB"
    );
    let store = std::sync::Arc::new(
        EventStore::open(&dir.join("events"), StoreConfig::default()).expect("reopen"),
    );
    assert_one_txn(&store, t, ROWS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_lost_inside_a_chunked_transaction_aborts_and_rereads() {
    const ROWS: usize = 30_000;
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.big (id INT PRIMARY KEY, pad VARCHAR(1000))")
        .expect("sql");
    let dir = db.dir().join("node");
    std::fs::create_dir_all(&dir).expect("dir");
    let hs = std::sync::Arc::new(FileSchemaStore(dir.join("history.json")));
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let t = history
        .table_at("d", "big", history.head)
        .expect("t")
        .table_id;
    db.exec(&format!(
        "INSERT INTO d.big SELECT seq, REPEAT('x', 1000) FROM d.seq_1_to_{ROWS}"
    ))
    .expect("insert");
    let (file, pos) = db.master_status().expect("status");
    let end = sluice_capture::BinlogPos::new(file, pos).ts().expect("ts");
    let store = std::sync::Arc::new(
        EventStore::open(&dir.join("events"), StoreConfig::default()).expect("store"),
    );
    let mut cfg = ReaderConfig::new(db.url(), 602, history.snapshot_pos.clone());
    cfg.chunk_bytes = 1 << 20;
    cfg.backoff_initial = std::time::Duration::from_millis(20);
    let mut pump = Pump::new(
        Capture::new(BinlogReader::new(cfg), history),
        store.clone(),
        hs.clone(),
    );
    // Drop the connection right after the first chunk was staged.
    let mut aborted = false;
    while store.resolved() < end {
        let item = pump.step().await.expect("step");
        match item {
            sluice_capture::capture::Captured::Chunk { .. }
                if !aborted && pump.capture.reader.stats.connects == 1 =>
            {
                pump.capture.reader.disconnect();
            }
            sluice_capture::capture::Captured::Abort(_) => aborted = true,
            _ => {}
        }
    }
    assert!(aborted, "the staged chunks were aborted");
    assert!(pump.capture.reader.stats.connects >= 2);
    assert_one_txn(&store, t, ROWS);
}

/// A large transaction whose early chunks hold rows of a table the history does not know (its
/// creation happened before the reader's start, after the snapshot) and rows of a sequence:
/// capture goes on, the unknown table's rows become one unreplicable change that stops the
/// tables, and the known table's rows are all stored in one transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_transaction_with_an_unknown_table_is_not_fatal() {
    const ROWS: usize = 4_000;
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.big (id INT PRIMARY KEY, pad VARCHAR(1000));
         CREATE SEQUENCE d.s NOCACHE",
    )
    .expect("sql");
    let dir = db.dir().join("node");
    std::fs::create_dir_all(&dir).expect("dir");
    let hs = std::sync::Arc::new(FileSchemaStore(dir.join("history.json")));
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    let t = history
        .table_at("d", "big", history.head)
        .expect("t")
        .table_id;
    // Created after the snapshot and before where the reader starts: the history misses it.
    db.exec("CREATE TABLE d.ghost (id INT PRIMARY KEY, pad VARCHAR(1000))")
        .expect("ghost");
    let (file, pos) = db.master_status().expect("status");
    let start = sluice_capture::BinlogPos::new(file, pos);
    db.exec(&format!(
        "BEGIN;
         INSERT INTO d.ghost SELECT seq, REPEAT('g', 1000) FROM d.seq_1_to_{ROWS};
         INSERT INTO d.big SELECT seq, REPEAT('x', 1000) FROM d.seq_1_to_{ROWS};
         SELECT NEXTVAL(d.s); SELECT NEXTVAL(d.s);
         INSERT INTO d.ghost VALUES ({ROWS} + 1, 'last');
         COMMIT"
    ))
    .expect("transaction");
    let (file, pos) = db.master_status().expect("status");
    let end = sluice_capture::BinlogPos::new(file, pos).ts().expect("ts");
    let store = std::sync::Arc::new(
        EventStore::open(&dir.join("events"), StoreConfig::default()).expect("store"),
    );
    let mut cfg = ReaderConfig::new(db.url(), 603, start);
    cfg.chunk_bytes = 256 << 10;
    let mut pump = Pump::new(
        Capture::new(BinlogReader::new(cfg), history),
        store.clone(),
        hs.clone(),
    );
    while store.resolved() < end {
        pump.step().await.expect("capture goes on");
    }
    assert!(pump.capture.reader.stats.chunks >= 4, "chunked");
    assert_one_txn(&store, t, ROWS);
    let ddls = store.ddls(0, u64::MAX).expect("ddls");
    let stops: Vec<_> = ddls
        .iter()
        .filter(|d| d.kind == sluice_types::DdlKind::Unreplicable)
        .collect();
    assert_eq!(stops.len(), 1, "{ddls:?}");
    assert!(stops[0].query.contains("d.ghost"), "{}", stops[0].query);
    assert_eq!(stops[0].influence.scope, sluice_types::InfluenceScope::All);
}
