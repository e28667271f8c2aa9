//! The MySQL sink's downstream fence (`sluice_sink::mysql::fence`) against a real MariaDB: two
//! sinks stand for two nodes, one dispatcher on each serving the same span (a stale one and its
//! successor, which has the greater id). No node fence is set: the node-side check cannot see a
//! pause, so only what the downstream enforces is tested here.
//!
//! - a successor's claim fences out the older dispatcher: its later transactions are refused
//!   (`Superseded`, retryable) and write nothing;
//! - an older dispatcher that never wrote cannot take the span back from a successor;
//! - other spans of the table are not affected;
//! - a write frozen after the node's check, before it sent anything (the window the node-side
//!   check cannot close), is refused when it wakes, after its successor wrote newer versions;
//! - a transaction frozen between its last check and its commit (the debug commit hold) holds
//!   its successor's claim back: released, it commits before anything of the successor; left
//!   frozen, the server ends it after the idle-transaction timeout, the successor goes on, and
//!   the stale transaction, woken, is refused;
//! - a transaction that failed halfway leaves nothing behind on its pooled connection.

use sluice_sink::mysql::fence::{HoldAt, IDLE_TXN_TIMEOUT};
use sluice_sink::mysql::MysqlSink;
use sluice_sink::testing::*;
use sluice_sink::uri::{SinkConfig, SinkUri};
use sluice_sink::{RowBatch, Sink, SinkError};
use sluice_testkit::mariadb::MariaDb;
use sluice_types::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn mariadb() -> MariaDb {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))")
        .expect("ddl");
    db
}

/// A sink as one node opens it (read-timeout long enough that a held commit is not cut short by
/// the sink's own timeout: a frozen process has no timer either).
async fn node_sink(db: &MariaDb) -> MysqlSink {
    let uri = format!("{}/?worker-count=1&read-timeout=5m", db.url());
    let SinkConfig::Mysql(cfg) = SinkUri::parse(&uri).expect("uri").config else {
        panic!("mysql")
    };
    MysqlSink::connect_for("cf", cfg).await.expect("connect")
}

fn schema() -> Arc<TableSchema> {
    Arc::new(simple_schema("d", "t", 1, 1))
}

fn d(epoch: u64, seq: u64) -> DispatcherId {
    DispatcherId { epoch, seq }
}

/// Rows `ids` with value `v` at commit ts `ts` (one transaction).
fn rows(ids: std::ops::RangeInclusive<u64>, v: &str, ts: Ts) -> RowBatch {
    let schema = schema();
    let rows = ids.map(|i| simple_insert(&schema, i, v, ts, 0)).collect();
    RowBatch { schema, rows }
}

async fn write_and_flush(
    s: &MysqlSink,
    id: DispatcherId,
    batch: RowBatch,
) -> Result<Ts, SinkError> {
    s.write_rows(id, batch).await?;
    s.flush(id).await
}

fn values(db: &MariaDb) -> String {
    db.query_one("SELECT IFNULL(GROUP_CONCAT(CONCAT(id, '=', v) ORDER BY id), '') FROM d.t")
        .expect("query")
}

fn assert_superseded(e: &SinkError) {
    let inner = match e {
        SinkError::Earlier(e) => e.as_ref(),
        e => e,
    };
    assert!(
        matches!(inner, SinkError::Superseded { .. }),
        "not refused by the downstream fence: {e:?}"
    );
    assert!(e.is_retryable(), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_fences_out_the_dispatcher_it_replaced() {
    let db = mariadb();
    let (a, b) = (node_sink(&db).await, node_sink(&db).await);
    let whole = Span::whole_table(TableId(1));
    a.open(d(1, 4), whole.clone(), 5).await.expect("open a");
    write_and_flush(&a, d(1, 4), rows(1..=3, "a", 10))
        .await
        .expect("a writes");
    // The successor (a later maintainer's dispatcher) takes the span over.
    b.open(d(2, 1), whole.clone(), 10).await.expect("open b");
    write_and_flush(&b, d(2, 1), rows(1..=2, "b", 20))
        .await
        .expect("b writes");
    // The stale dispatcher wakes and writes: refused, nothing of it lands.
    let e = write_and_flush(&a, d(1, 4), rows(1..=3, "stale", 30))
        .await
        .expect_err("a stale write committed");
    assert_superseded(&e);
    assert_eq!(values(&db), "1=b,2=b,3=a");
    // The successor goes on.
    write_and_flush(&b, d(2, 1), rows(3..=3, "b", 40))
        .await
        .expect("b writes on");
    assert_eq!(values(&db), "1=b,2=b,3=b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_dispatcher_cannot_take_a_span_back_and_siblings_are_untouched() {
    let db = mariadb();
    let (a, b) = (node_sink(&db).await, node_sink(&db).await);
    let t = TableId(1);
    let whole = Span::whole_table(t);
    let mid = Key::row_u64(t, 100);
    let left = Span::new(t, whole.start.clone(), mid.clone());
    let right = Span::new(t, mid, whole.end.clone());
    // A split's pieces (later ids) write first; then the split's source, which never wrote
    // (its node froze before its first write), wakes.
    b.open(d(1, 7), left, 5).await.expect("open left");
    b.open(d(1, 8), right, 5).await.expect("open right");
    write_and_flush(&b, d(1, 7), rows(1..=2, "left", 10))
        .await
        .expect("left");
    let right_rows = {
        let schema = schema();
        let rows = (200..=201)
            .map(|i| simple_insert(&schema, i, "right", 10, 0))
            .collect();
        RowBatch { schema, rows }
    };
    write_and_flush(&b, d(1, 8), right_rows)
        .await
        .expect("right");
    a.open(d(1, 3), whole, 5).await.expect("open source");
    let e = write_and_flush(&a, d(1, 3), rows(1..=2, "stale", 8))
        .await
        .expect_err("an older dispatcher took the span back");
    assert_superseded(&e);
    assert_eq!(values(&db), "1=left,2=left,200=right,201=right");
    // Each piece still writes: one piece's claim did not fence its sibling.
    write_and_flush(&b, d(1, 7), rows(1..=1, "left2", 20))
        .await
        .expect("left again");
    assert_eq!(values(&db), "1=left2,2=left,200=right,201=right");
}

/// Waits until `s` has a transaction held at `at`.
async fn until_held(s: &MysqlSink, at: HoldAt) {
    let t0 = Instant::now();
    while s.writes_held(at) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no transaction reached the hold {at:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a stale transaction on `a` (its claim made earlier) and leaves it frozen at `at`;
/// returns the flush's task.
async fn freeze(a: &Arc<MysqlSink>, at: HoldAt) -> tokio::task::JoinHandle<Result<Ts, SinkError>> {
    a.open(d(1, 4), Span::whole_table(TableId(1)), 5)
        .await
        .expect("open a");
    write_and_flush(a, d(1, 4), rows(1..=3, "a", 10))
        .await
        .expect("a writes");
    a.hold_writes(at, true);
    let a2 = a.clone();
    let flush =
        tokio::spawn(async move { write_and_flush(&a2, d(1, 4), rows(1..=2, "a2", 20)).await });
    until_held(a, at).await;
    flush
}

/// Two nodes' sinks on a fresh downstream: `a`'s dispatcher wrote and then froze at `at` with a
/// transaction in hand; `b`'s dispatcher, its successor, is open on the same span.
struct Frozen {
    db: MariaDb,
    a: Arc<MysqlSink>,
    b: Arc<MysqlSink>,
    stale: tokio::task::JoinHandle<Result<Ts, SinkError>>,
}

async fn frozen_with_successor(at: HoldAt) -> Frozen {
    let db = mariadb();
    let a = Arc::new(node_sink(&db).await);
    let b = Arc::new(node_sink(&db).await);
    let stale = freeze(&a, at).await;
    b.open(d(2, 1), Span::whole_table(TableId(1)), 10)
        .await
        .expect("open b");
    Frozen { db, a, b, stale }
}

/// The frozen process wakes: its transaction is refused by the downstream fence.
async fn woken_and_refused(f: Frozen, at: HoldAt) -> MariaDb {
    f.a.hold_writes(at, false);
    let e = f
        .stale
        .await
        .expect("join")
        .expect_err("the stale write committed");
    assert_superseded(&e);
    f.db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_frozen_before_its_commit_lands_before_its_successor() {
    let Frozen { db, a, b, stale } = frozen_with_successor(HoldAt::Commit).await;
    let b2 = b.clone();
    let successor =
        tokio::spawn(async move { write_and_flush(&b2, d(2, 1), rows(1..=1, "b", 30)).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !successor.is_finished(),
        "the successor wrote while a transaction it replaces was open"
    );
    assert_eq!(values(&db), "1=a,2=a,3=a");
    // The frozen process wakes: its transaction commits first, then the successor's.
    a.hold_writes(HoldAt::Commit, false);
    stale
        .await
        .expect("join")
        .expect("the frozen transaction, woken before its successor wrote");
    successor.await.expect("join").expect("successor");
    assert_eq!(values(&db), "1=b,2=a2,3=a");
    // From now on the old dispatcher is fenced out.
    let e = write_and_flush(&a, d(1, 4), rows(1..=3, "stale", 40))
        .await
        .expect_err("stale write");
    assert_superseded(&e);
    assert_eq!(values(&db), "1=b,2=a2,3=a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_left_frozen_is_ended_by_the_server_and_refused_when_it_wakes() {
    let f = frozen_with_successor(HoldAt::Commit).await;
    let t0 = Instant::now();
    write_and_flush(&f.b, d(2, 1), rows(1..=1, "b", 30))
        .await
        .expect("the successor, once the server ended the frozen transaction");
    let waited = t0.elapsed();
    assert!(
        waited + Duration::from_secs(1) >= IDLE_TXN_TIMEOUT,
        "the successor did not wait for the frozen transaction ({waited:?})"
    );
    assert_eq!(values(&f.db), "1=b,2=a,3=a");
    // The frozen process wakes long after: its transaction is gone, and its retry is refused.
    let db = woken_and_refused(f, HoldAt::Commit).await;
    assert_eq!(values(&db), "1=b,2=a,3=a");
}

/// The window the node-side check leaves: a process frozen after its check, before it sent
/// anything. Its successor writes freely (nothing is locked); woken, the stale transaction is
/// refused by its first statement, and its rows (older versions) never land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_frozen_after_the_node_check_is_refused_when_it_wakes() {
    let f = frozen_with_successor(HoldAt::Send).await;
    // The successor replays the frozen rows (ts 20) and writes a newer version after them.
    write_and_flush(&f.b, d(2, 1), rows(1..=2, "a2", 20))
        .await
        .expect("b replays");
    write_and_flush(&f.b, d(2, 1), rows(1..=1, "b", 30))
        .await
        .expect("b writes on");
    assert_eq!(values(&f.db), "1=b,2=a2,3=a");
    let db = woken_and_refused(f, HoldAt::Send).await;
    assert_eq!(
        values(&db),
        "1=b,2=a2,3=a",
        "an older version landed over the successor's"
    );
}

/// A fenced transaction that fails after some of its statements ran leaves nothing behind: its
/// connection goes back to the pool with the transaction open (the driver did not start it), and
/// the reset asked for at its start rolls it back before the connection serves the next
/// transaction, whose `START TRANSACTION` would otherwise commit the failed one's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_failed_halfway_leaves_nothing_on_its_connection() {
    let db = mariadb();
    db.exec(
        "CREATE TABLE d.c (id BIGINT PRIMARY KEY, v VARCHAR(64));
         CREATE TABLE d.u (id BIGINT PRIMARY KEY, v VARCHAR(64));
         DELIMITER //
         CREATE TRIGGER d.no_bad BEFORE INSERT ON d.c FOR EACH ROW
           BEGIN IF NEW.v = 'bad' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no bad'; END IF; END//
         DELIMITER ;",
    )
    .expect("ddl");
    let s = node_sink(&db).await;
    s.open(d(1, 1), Span::whole_table(TableId(3)), 5)
        .await
        .expect("open");
    // One flush, one transaction of two statements (two batches, two schema instances): the
    // second is refused by a downstream trigger (SIGNAL, error 1644) after the first ran (the
    // sink does not check CHECK constraints: rows are stored as the upstream stored them).
    for (ids, v, ts) in [(1..=2, "half", 10), (3..=3, "bad", 11)] {
        let schema = Arc::new(simple_schema("d", "c", 3, 1));
        let rows = ids.map(|i| simple_insert(&schema, i, v, ts, 0)).collect();
        s.write_rows(d(1, 1), RowBatch { schema, rows })
            .await
            .expect("buffer");
    }
    let e = s
        .flush(d(1, 1))
        .await
        .expect_err("a row the trigger refuses landed");
    assert!(format!("{e}").contains("1644"), "{e}");
    // The pool has the connection back; the next transaction on it (another table's dispatcher
    // of the same sink) commits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = Arc::new(simple_schema("d", "u", 2, 1));
    s.open(d(1, 2), Span::whole_table(TableId(2)), 5)
        .await
        .expect("open u");
    let batch = RowBatch {
        rows: vec![simple_insert(&other, 1, "u", 20, 0)],
        schema: other,
    };
    write_and_flush(&s, d(1, 2), batch).await.expect("u writes");
    assert_eq!(
        db.query_one("SELECT COUNT(*) FROM d.u").expect("query"),
        "1"
    );
    assert_eq!(
        db.query_one("SELECT COUNT(*) FROM d.c").expect("query"),
        "0",
        "the failed transaction's first statement was committed"
    );
}
