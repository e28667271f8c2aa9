//! MariaDB's compression through capture: compressed columns (`… COMPRESSED`, TABLE_MAP types
//! 140/141) and compressed binlog events (`log_bin_compress=ON`), each alone and together,
//! through the fast row parser and the generic one, checked value by value (inserts, the before
//! and after images of updates, deletes), with plain columns after compressed ones keeping
//! their own charsets.

mod common;
use common::*;
use sluice_capture::binlog::ReaderConfig;
use sluice_capture::check_upstream;
use sluice_testkit::mariadb::{MariaDb, Options};
use sluice_types::{RowKind, Value};

const DDL: &str = "CREATE TABLE d.z (
  id INT PRIMARY KEY,
  a VARCHAR(1000) COMPRESSED CHARACTER SET latin1,
  b VARCHAR(20) CHARACTER SET latin1,
  c TEXT COMPRESSED CHARACTER SET utf8mb4,
  bl BLOB COMPRESSED,
  e VARCHAR(20) CHARACTER SET utf8mb4,
  f TINYTEXT COMPRESSED CHARACTER SET latin1
)";

fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

/// The rows the workload leaves, as the upstream holds them.
fn long_row(id: i64, tag: &str) -> Vec<Value> {
    let mut bytes: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    bytes.extend_from_slice(tag.as_bytes());
    vec![
        Value::Int(id),
        text(&format!("{}{tag}", "é".repeat(400))),
        text("ñé"),
        text(&format!("{}{tag}", "😀ü".repeat(500))),
        Value::Bytes(bytes),
        text("😀"),
        text(&format!("{}{tag}", "ab".repeat(100))),
    ]
}

fn short_row() -> Vec<Value> {
    vec![
        Value::Int(3),
        text("x"),
        text("é"),
        text("y"),
        Value::Bytes(vec![0]),
        text(""),
        text(""),
    ]
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

fn insert(row: &[Value]) -> String {
    let lit = |v: &Value| match v {
        Value::Int(i) => i.to_string(),
        Value::Text(s) => format!("'{s}'"),
        Value::Bytes(b) if b.is_empty() => "''".into(),
        Value::Bytes(b) => format!("x'{}'", hex(b)),
        other => panic!("no literal for {other:?}"),
    };
    let vals: Vec<String> = row.iter().map(lit).collect();
    format!("INSERT INTO d.z VALUES ({})", vals.join(", "))
}

async fn capture_compressed(events_compressed: bool, fast: bool) {
    let mut opts = Options {
        compress: events_compressed,
        ..Options::default()
    };
    // Compress every event worth compressing (the default leaves events under 256 bytes).
    opts.extra_args.push("--log-bin-compress-min-len=10".into());
    let db = MariaDb::start_with(opts).expect("mariadb");
    check_upstream(&db.url())
        .await
        .expect("a compressing upstream passes the check");
    let (file, pos) = db.master_status().expect("status");
    let long4 = long_row(4, "four");
    let long4b = long_row(4, "four-updated");
    let workload = format!(
        "SET NAMES utf8mb4;
         CREATE DATABASE d; {DDL};
         INSERT INTO d.z (id) VALUES (1);
         INSERT INTO d.z VALUES (2, '', '', '', '', '', '');
         {};
         {};
         UPDATE d.z SET a = '{}', c = '{}', bl = x'{}', f = '{}' WHERE id = 4;
         DELETE FROM d.z WHERE id = 3;
         CREATE TABLE d.marker (id INT PRIMARY KEY) COMMENT '{}'",
        insert(&short_row()),
        insert(&long4),
        as_text(&long4b[1]),
        as_text(&long4b[3]),
        hex(as_bytes(&long4b[4])),
        as_text(&long4b[6]),
        "a comment long enough for the event to be compressed ".repeat(4),
    );
    db.exec(&workload).expect("workload");
    assert_eq!(
        db.query_one("SELECT LENGTH(a) FROM d.z WHERE id = 4")
            .expect("len"),
        "412",
        "latin1 é is one byte upstream"
    );
    let events = db
        .query(&format!("SHOW BINLOG EVENTS IN '{file}'"))
        .expect("events");
    let types: Vec<String> = events
        .into_iter()
        .filter_map(|row| row.get(2).cloned())
        .collect();
    let compressed_events = types.iter().filter(|t| t.contains("compressed")).count();
    if events_compressed {
        assert!(
            types.iter().any(|t| t.starts_with("Query_compressed"))
                && types
                    .iter()
                    .any(|t| t.starts_with("Update_rows_compressed")),
            "the upstream wrote compressed events: {types:?}"
        );
    } else {
        assert_eq!(compressed_events, 0, "{types:?}");
    }
    let mut cfg = ReaderConfig::new(db.url(), 311, sluice_capture::BinlogPos::new(file, pos));
    cfg.fast_decode = fast;
    let mut r = sluice_capture::binlog::BinlogReader::new(cfg);
    let txns = read_until(&mut r, |t| is_stmt(t, "d.marker")).await;
    let changes: Vec<_> = txns
        .iter()
        .flat_map(|t| t.rows.iter())
        .filter(|c| c.table.table == "z")
        .collect();
    let unreplicable: Vec<_> = txns.iter().flat_map(|t| t.unreplicable.iter()).collect();
    assert!(unreplicable.is_empty(), "{unreplicable:?}");
    let kinds: Vec<RowKind> = changes.iter().map(|c| c.kind).collect();
    use RowKind::*;
    assert_eq!(kinds, vec![Insert, Insert, Insert, Insert, Update, Delete]);
    let compressed: Vec<bool> = changes[0]
        .table
        .columns
        .iter()
        .map(|c| c.compressed)
        .collect();
    assert_eq!(
        compressed,
        vec![false, true, false, true, true, false, true]
    );
    let null_row: Vec<Value> = std::iter::once(Value::Int(1))
        .chain(std::iter::repeat_n(Value::Null, 6))
        .collect();
    let empty_row = [
        Value::Int(2),
        text(""),
        text(""),
        text(""),
        Value::Bytes(vec![]),
        text(""),
        text(""),
    ];
    assert_eq!(changes[0].after.as_deref(), Some(&null_row[..]));
    assert_eq!(changes[1].after.as_deref(), Some(&empty_row[..]));
    assert_eq!(changes[2].after.as_deref(), Some(&short_row()[..]));
    assert_eq!(changes[3].after.as_deref(), Some(&long4[..]));
    assert_eq!(changes[4].before.as_deref(), Some(&long4[..]));
    assert_eq!(changes[4].after.as_deref(), Some(&long4b[..]));
    assert_eq!(changes[5].before.as_deref(), Some(&short_row()[..]));
    let marker = txns.last().and_then(|t| t.statement.as_ref()).expect("ddl");
    assert!(
        marker.query.contains("a comment long enough"),
        "{}",
        marker.query
    );
}

fn as_text(v: &Value) -> &str {
    match v {
        Value::Text(s) => s,
        other => panic!("not text: {other:?}"),
    }
}

fn as_bytes(v: &Value) -> &[u8] {
    match v {
        Value::Bytes(b) => b,
        other => panic!("not bytes: {other:?}"),
    }
}

#[tokio::test]
async fn compressed_columns_fast_path() {
    capture_compressed(false, true).await
}

#[tokio::test]
async fn compressed_columns_generic_path() {
    capture_compressed(false, false).await
}

#[tokio::test]
async fn compressed_columns_in_compressed_events() {
    capture_compressed(true, true).await
}

#[tokio::test]
async fn compressed_columns_in_compressed_events_generic_path() {
    capture_compressed(true, false).await
}
