//! Benchmark (not a test): decode rate of the binlog reader on a local MariaDB, side by side
//! with `mariadb-binlog --read-from-remote-server -v` (MariaDB's C decoder) and `--raw` into a
//! RAM directory (the I/O ceiling), and the event store's append/scan rate.
//!
//! `cargo run --release -p sluice-capture --example bench_decode -- [ROWS]` (default 1,000,000).

use sluice_capture::binlog::{BinlogReader, ReaderConfig, ReaderEvent};
use sluice_capture::capture::{convert, Captured};
use sluice_capture::schema::SchemaHistory;
use sluice_capture::store::{EventStore, StoreConfig};
use sluice_capture::BinlogPos;
use sluice_testkit::mariadb::MariaDb;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The same allocator as the `sluice` binary, so the figures are the product's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BATCH: u64 = 10_000;

fn load(db: &MariaDb, table: &str, create: &str, select: &str, rows: u64) {
    db.exec(&format!("CREATE TABLE sb.{table} {create}"))
        .expect("create");
    let mut i = 0;
    while i < rows {
        let (lo, hi) = (i + 1, (i + BATCH).min(rows));
        db.exec(&format!(
            "INSERT INTO sb.{table} SELECT {select} FROM sb.seq_{lo}_to_{hi}"
        ))
        .expect("insert");
        i = hi;
    }
}

/// CPU seconds (user + system) this process has used so far, from `/proc/self/stat` (clock
/// ticks of 10 ms): on a shared machine, rows per CPU-second moves far less than rows per
/// wall-clock second. Child processes (the MariaDB server) are not included.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

async fn ours(
    db: &MariaDb,
    from: BinlogPos,
    to: BinlogPos,
    history: &SchemaHistory,
) -> (u64, f64, f64) {
    let mut cfg = ReaderConfig::new(db.url(), 900, from);
    cfg.max_reconnects = Some(0);
    let mut r = BinlogReader::new(cfg);
    let mut h = history.clone();
    let t = Instant::now();
    let cpu = cpu_secs();
    let mut rows = 0u64;
    let end = to.ts().expect("ts");
    loop {
        match r.next().await.expect("read") {
            ReaderEvent::Transaction(txn) => {
                let ts = txn.commit_ts;
                for item in convert(&mut h, txn).expect("convert") {
                    if let Captured::Rows { rows: r, .. } = item {
                        rows += r.len() as u64;
                    }
                }
                if ts >= end {
                    break;
                }
            }
            ReaderEvent::Resolved(ts) if ts >= end => break,
            ReaderEvent::Chunk(c) => rows += c.rows.len() as u64,
            ReaderEvent::Resolved(_) | ReaderEvent::Abort(_) => {}
        }
    }
    (rows, t.elapsed().as_secs_f64(), cpu_secs() - cpu)
}

fn mariadb_binlog(db: &MariaDb, from: &BinlogPos, to: &BinlogPos, raw: bool) -> f64 {
    let shm = std::path::Path::new("/dev/shm").join(format!("sluice-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&shm);
    let mut c = Command::new("mariadb-binlog");
    c.args([
        "--no-defaults",
        "--read-from-remote-server",
        "-h127.0.0.1",
        &format!("-P{}", db.port()),
        "-uroot",
        &format!("--start-position={}", from.pos),
        &format!("--stop-position={}", to.pos),
    ]);
    if raw {
        c.arg("--raw")
            .arg(format!("--result-file={}/", shm.display()));
    } else {
        c.arg("-v");
    }
    c.arg(&from.file).stdout(Stdio::null());
    let t = Instant::now();
    let st = c.status().expect("mariadb-binlog");
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&shm);
    assert!(st.success(), "mariadb-binlog failed");
    secs
}

/// The Python peer decodes only this many rows of each range (it is too slow for all of them).
const PYTHON_ROWS: u64 = 20_000;

/// The PyPI `mysql-replication` peer decoding the start of the same range (rows/s is what is
/// compared); `None` when it is not installed. Returns (rows, wall seconds, CPU seconds).
fn python_peer(db: &MariaDb, from: &BinlogPos, to: &BinlogPos) -> Option<(u64, f64, f64)> {
    const SCRIPT: &str = r#"
import sys, time
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent
port, f, pos, end = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = BinLogStreamReader(connection_settings={"host": "127.0.0.1", "port": port, "user": "root", "passwd": ""},
    server_id=950, log_file=f, log_pos=pos, resume_stream=True, blocking=False, is_mariadb=True,
    only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
t = time.time(); c = time.process_time(); n = 0
limit = int(sys.argv[5])
for ev in s:
    n += len(ev.rows)
    if s.log_pos >= end or n >= limit:
        break
print(n, time.time() - t, time.process_time() - c)
"#;
    let out = Command::new("python3")
        .args([
            "-c",
            SCRIPT,
            &db.port().to_string(),
            &from.file,
            &from.pos.to_string(),
            &to.pos.to_string(),
            &PYTHON_ROWS.to_string(),
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "python peer: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return None;
    }
    let s = String::from_utf8_lossy(&out.stdout);
    let mut it = s.split_whitespace();
    Some((
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    ))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let db = MariaDb::start_with(sluice_testkit::mariadb::Options {
        max_binlog_size: 1 << 30,
        ..Default::default()
    })
    .expect("mariadb");
    db.exec("CREATE DATABASE sb").expect("db");
    let no_peers = std::env::var("BENCH_NO_PEERS").is_ok();
    println!("| workload | rows | binlog MiB | reader | rows/s | MiB/s | rows/CPU-s |");
    println!("|---|---|---|---|---|---|---|");
    for (name, create, select) in [
        (
            "narrow (sysbench-like)",
            "(id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL)",
            "seq, seq % 100000, REPEAT(CHAR(97 + seq % 26), 120), REPEAT('p', 60)",
        ),
        (
            "wide (40 columns)",
            "(id BIGINT PRIMARY KEY, a1 INT, a2 INT, a3 INT, a4 INT, a5 INT, a6 INT, a7 INT, a8 INT, a9 INT, a10 INT, \
             b1 BIGINT, b2 BIGINT, b3 BIGINT, b4 BIGINT, b5 BIGINT, c1 DECIMAL(12,2), c2 DECIMAL(12,2), c3 DECIMAL(12,2), \
             d1 DOUBLE, d2 DOUBLE, e1 DATETIME(6), e2 DATETIME(6), e3 DATE, f1 VARCHAR(64), f2 VARCHAR(64), f3 VARCHAR(64), \
             f4 VARCHAR(64), f5 VARCHAR(255), g1 TINYINT, g2 SMALLINT, g3 MEDIUMINT, h1 CHAR(10), h2 CHAR(10), \
             i1 TEXT, j1 ENUM('a','b','c'), k1 BIT(8), l1 YEAR, m1 TIME(3), n1 INT UNSIGNED)",
            "seq, seq, seq+1, seq+2, seq+3, seq+4, seq+5, seq+6, seq+7, seq+8, seq+9, seq*10, seq*11, seq*12, seq*13, seq*14, \
             seq/100, seq/7, seq/3, seq*1.5, seq/9.0, NOW(6), NOW(6), CURDATE(), MD5(seq), MD5(seq+1), MD5(seq+2), MD5(seq+3), \
             REPEAT('w', 100), seq % 100, seq % 30000, seq % 8000000, 'abcdefghij', 'k', 'some text here', 'b', 7, 2024, '12:34:56.789', seq",
        ),
    ] {
        let table = if name.starts_with("narrow") { "narrow" } else { "wide" };
        // For profiling: `BENCH_ONLY=wide` runs one workload, `BENCH_NO_PEERS=1` skips the
        // other decoders and the event store.
        if std::env::var("BENCH_ONLY").is_ok_and(|w| w != table) {
            continue;
        }
        db.exec("FLUSH BINARY LOGS").expect("flush");
        let (f, p) = db.master_status().expect("status");
        let from = BinlogPos::new(f, p);
        let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
        load(&db, table, create, select, n);
        let (f, p) = db.master_status().expect("status");
        let to = BinlogPos::new(f, p);
        assert_eq!(from.file, to.file, "one binlog file per workload");
        let mib = (to.pos - from.pos) as f64 / (1 << 20) as f64;
        // The reader starts before the CREATE TABLE: the history learns the table from it.
        let (rows, secs, cpu) = ours(&db, from.clone(), to.clone(), &history).await;
        println!("| {name} | {rows} | {mib:.0} | sluice (decode + keys) | {:.0} | {:.1} | {:.0} |", rows as f64 / secs, mib / secs, rows as f64 / cpu);
        if no_peers {
            continue;
        }
        let secs = mariadb_binlog(&db, &from, &to, false);
        println!("| {name} | {n} | {mib:.0} | mariadb-binlog -v > /dev/null | {:.0} | {:.1} | - |", n as f64 / secs, mib / secs);
        let secs = mariadb_binlog(&db, &from, &to, true);
        println!("| {name} | {n} | {mib:.0} | mariadb-binlog --raw (I/O ceiling) | {:.0} | {:.1} | - |", n as f64 / secs, mib / secs);
        match python_peer(&db, &from, &to) {
            Some((rows, secs, cpu)) => println!(
                "| {name} | {rows} (first) | - | python mysql-replication (peer) | {:.0} | - | {:.0} |",
                rows as f64 / secs,
                rows as f64 / cpu,
            ),
            None => println!("| {name} | - | {mib:.0} | python mysql-replication (not installed) | - | - | - |"),
        }
    }

    if no_peers {
        return;
    }
    // Event store: append 1M rows in 1000-row transactions, then scan one table fully.
    let dir = std::env::temp_dir().join(format!("sluice-bench-store-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let store = EventStore::open(&dir.join("db"), StoreConfig::default()).expect("store");
    let t = Instant::now();
    let mut ts = 1u64 << 32;
    for b in 0..(n / 1000) {
        ts += 1;
        let rows: Vec<_> = (0..1000u64)
            .map(|i| sluice_types::RowEvent {
                table_id: sluice_types::TableId(1 + i % 4),
                schema_version: 0,
                commit_ts: ts,
                commit_time_ms: 0,
                kind: sluice_types::RowKind::Insert,
                key: sluice_types::Key::row_u64(sluice_types::TableId(1 + i % 4), b * 1000 + i),
                before: None,
                after: Some(vec![
                    sluice_types::Value::Int((b * 1000 + i) as i64),
                    sluice_types::Value::Text("x".repeat(100)),
                ]),
                snapshot: false,
                gtid: None,
            })
            .collect();
        store.append_txn(ts, &rows).expect("append");
        if b % 100 == 0 {
            store.persist().expect("persist");
        }
    }
    store.persist().expect("persist");
    let append = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut scanned = 0;
    let span = sluice_types::Span::whole_table(sluice_types::TableId(1));
    let mut cursor = sluice_capture::store::Cursor {
        ts: 0,
        seq: u32::MAX,
    };
    loop {
        let b = store
            .scan_from(&span, cursor, u64::MAX, 10_000)
            .expect("scan");
        scanned += b.rows.len();
        match b.next {
            Some(c) => cursor = c,
            None => break,
        }
    }
    let scan = t.elapsed().as_secs_f64();
    println!();
    println!("| event store (redb) | rows | seconds | rows/s |");
    println!("|---|---|---|---|");
    println!(
        "| append, 1000-row txns, persist every 100 | {n} | {append:.2} | {:.0} |",
        n as f64 / append
    );
    println!(
        "| scan one table of 4 (span) | {scanned} | {scan:.2} | {:.0} |",
        scanned as f64 / scan
    );
    let _ = std::fs::remove_dir_all(&dir);
}
