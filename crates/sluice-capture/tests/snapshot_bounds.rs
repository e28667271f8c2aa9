//! Chunk bounds against a real MariaDB: however they are found (spaced for a dense integer key,
//! counted for any other), the ranges they cut hold every row of the table once when read as a
//! copy reads them, and none is at or past the span's end.

use sluice_capture::snapshot_read::{chunk_bounds, read_chunk, SnapshotRead};
use sluice_capture::SchemaHistory;
use sluice_testkit::mariadb::MariaDb;
use sluice_types::{Key, Span, TableSchema, Value};

async fn table(db: &MariaDb, name: &str) -> TableSchema {
    let h = SchemaHistory::snapshot(&db.url()).await.expect("schema");
    h.table_at("d", name, h.head).expect("table").clone()
}

async fn conn(db: &MariaDb) -> mysql_async::Conn {
    mysql_async::Conn::from_url(db.url())
        .await
        .expect("connect")
}

fn first_int(cursor: &[u8]) -> i128 {
    let v: serde_json::Value = serde_json::from_slice(cursor).expect("cursor json");
    let inner = v[0]
        .as_object()
        .expect("a tagged value")
        .values()
        .next()
        .cloned();
    inner.and_then(|n| n.as_i64()).expect("an integer") as i128
}

/// Copies `span` as a dispatcher does: bounds `count` at a time, each range read chunk after
/// chunk (a chunk that says `more` goes on from its cursor), the rest as one range once fewer
/// bounds come than asked. The first column of every row read, and every bound.
async fn copy(
    c: &mut mysql_async::Conn,
    t: &TableSchema,
    span: &Span,
    (rows, count): (usize, usize),
) -> (Vec<Value>, Vec<Vec<u8>>) {
    let (mut read, mut all) = (Vec::new(), Vec::new());
    let mut after: Option<Vec<u8>> = None;
    loop {
        let bounds = chunk_bounds(c, t, span, after.as_deref(), (rows, count))
            .await
            .expect("bounds");
        all.extend(bounds.iter().cloned());
        let rest = bounds.len() < count;
        let mut ranges: Vec<Option<Vec<u8>>> = bounds.into_iter().map(Some).collect();
        if rest {
            ranges.push(None);
        }
        for upto in ranges {
            loop {
                let range = (after.as_deref(), upto.as_deref());
                let chunk = read_chunk(c, t, range, rows, SnapshotRead::Auto, "n1")
                    .await
                    .expect("chunk");
                read.extend(chunk.rows.iter().map(|(v, _)| v[0].clone()));
                if chunk.more {
                    after = chunk.cursor;
                    continue;
                }
                after = upto.clone().or(chunk.cursor).or(after);
                break;
            }
        }
        if rest {
            return (read, all);
        }
    }
}

fn uints(vals: &[Value]) -> Vec<u64> {
    vals.iter()
        .map(|v| match v {
            Value::UInt(u) => *u,
            other => panic!("not an unsigned key: {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn a_dense_integer_key_is_cut_by_key_distance_and_every_row_is_read_once() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.t (id INT UNSIGNED PRIMARY KEY, v VARCHAR(20)); \
         INSERT INTO d.t SELECT seq, CONCAT('v', seq) FROM d.seq_1_to_5000; \
         INSERT INTO d.t SELECT seq, CONCAT('v', seq) FROM d.seq_10001_to_15000; \
         ANALYZE TABLE d.t",
    )
    .expect("sql");
    let t = table(&db, "t").await;
    let mut c = conn(&db).await;
    let span = Span::whole_table(t.table_id);
    let first = chunk_bounds(&mut c, &t, &span, None, (1000, 4))
        .await
        .expect("bounds");
    // 10,000 rows over 15,000 keys: a chunk is about 1,500 keys apart (the row estimate is
    // InnoDB's sample, so about); counted bounds would be 1000, 2000, ...
    let got: Vec<i128> = first.iter().map(|b| first_int(b)).collect();
    assert_eq!(got.len(), 4, "{got:?}");
    for (i, b) in got.iter().enumerate() {
        let want = 1500 * (i as i128 + 1);
        assert!((b - want).abs() <= want / 10, "spaced bounds {got:?}");
    }
    let (read, bounds) = copy(&mut c, &t, &span, (1000, 4)).await;
    let mut want: Vec<u64> = (1..=5000).chain(10_001..=15_000).collect();
    let mut got = uints(&read);
    assert_eq!(got.len(), want.len(), "every row once");
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
    let ints: Vec<i128> = bounds.iter().map(|b| first_int(b)).collect();
    assert!(
        ints.windows(2).all(|w| w[0] < w[1]),
        "bounds increase: {ints:?}"
    );
}

#[tokio::test]
async fn sparse_or_non_integer_keys_are_counted_and_every_row_is_read_once() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; \
         CREATE TABLE d.sparse (id BIGINT UNSIGNED PRIMARY KEY); \
         INSERT INTO d.sparse SELECT seq FROM d.seq_1_to_3000; \
         INSERT INTO d.sparse VALUES (1000000000000); \
         CREATE TABLE d.named (name VARCHAR(20), n INT, PRIMARY KEY (name, n)); \
         INSERT INTO d.named SELECT CONCAT('k', seq % 7), seq FROM d.seq_1_to_2500; \
         ANALYZE TABLE d.sparse, d.named",
    )
    .expect("sql");
    let sparse = table(&db, "sparse").await;
    let mut c = conn(&db).await;
    let span = Span::whole_table(sparse.table_id);
    // One key far out: spaced bounds would put the whole table in the first range.
    let b = chunk_bounds(&mut c, &sparse, &span, None, (1000, 4))
        .await
        .expect("bounds");
    let got: Vec<i128> = b.iter().map(|b| first_int(b)).collect();
    assert_eq!(got, [1000, 2000, 3000], "the key of every 1000th row");
    let (read, _) = copy(&mut c, &sparse, &span, (1000, 4)).await;
    let mut want: Vec<u64> = (1..=3000).collect();
    want.push(1_000_000_000_000);
    assert_eq!(uints(&read), want, "every row once, in key order");

    let named = table(&db, "named").await;
    let span = Span::whole_table(named.table_id);
    let (read, bounds) = copy(&mut c, &named, &span, (300, 4)).await;
    assert_eq!(read.len(), 2500, "every row once");
    assert!(
        bounds.len() >= 8,
        "counted bounds for a string key: {}",
        bounds.len()
    );
}

#[tokio::test]
async fn no_bound_is_at_or_past_the_spans_end() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.t (id INT UNSIGNED PRIMARY KEY); \
         INSERT INTO d.t SELECT seq FROM d.seq_1_to_10000; ANALYZE TABLE d.t",
    )
    .expect("sql");
    let t = table(&db, "t").await;
    let mut c = conn(&db).await;
    let span = Span::new(
        t.table_id,
        Key::table_start(t.table_id),
        sluice_capture::keys::row_key(t.table_id, &[Value::UInt(2500)], &[(0, 0)]),
    );
    let b = chunk_bounds(&mut c, &t, &span, None, (1000, 4))
        .await
        .expect("bounds");
    let got: Vec<i128> = b.iter().map(|b| first_int(b)).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|b| *b < 2500), "{got:?}");
}
