//! The write fence (`sluice_sink::fence`) on every writing sink, against real downstreams (local
//! files, S3 on moto, MariaDB): rows buffered while the node's lease was fresh are not written
//! once it is not (the periodic flush is refused, nothing reaches the downstream, the ack stays,
//! the error is `Fenced` and retryable); a dispatcher opened under an older incarnation is
//! refused while one opened under the current incarnation writes; a retry and a commit after
//! the lease lapsed are refused; DDLs and checkpoints are fenced too.

mod common;

use common::list;
use sluice_sink::mysql::MysqlSink;
use sluice_sink::storage::StorageSink;
use sluice_sink::testing::*;
use sluice_sink::uri::{SinkConfig, SinkUri};
use sluice_sink::{AckReceiver, RowBatch, Sink, SinkError, WriteFence};
use sluice_testkit::mariadb::MariaDb;
use sluice_types::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A node's lease as the fence sees it: the incarnation that may write (0: not fresh), how often
/// the fence was asked, and optionally the last call that may still pass.
#[derive(Default)]
struct Lease(Mutex<LeaseState>);

#[derive(Default)]
struct LeaseState {
    incarnation: u64,
    calls: u64,
    passes_until: Option<u64>,
}

impl Lease {
    fn new(incarnation: u64) -> Arc<Lease> {
        let l = Lease::default();
        l.lock().incarnation = incarnation;
        Arc::new(l)
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn fence(self: &Arc<Self>) -> WriteFence {
        let me = self.clone();
        Arc::new(move || {
            let mut s = me.lock();
            s.calls += 1;
            if s.passes_until.is_some_and(|last| s.calls > last) {
                return None;
            }
            (s.incarnation > 0).then_some(s.incarnation)
        })
    }
    /// Moves the lease (0: not fresh); returns how often the fence had been asked until then.
    fn set(&self, incarnation: u64) -> u64 {
        let mut s = self.lock();
        s.incarnation = incarnation;
        s.calls
    }
    fn calls(&self) -> u64 {
        self.lock().calls
    }
    /// The next `n` checks pass, later ones are refused.
    fn pass_only(&self, n: u64) {
        let mut s = self.lock();
        s.passes_until = Some(s.calls + n);
    }
}

fn batch(schema: &Arc<TableSchema>, ids: std::ops::RangeInclusive<u64>, ts: Ts) -> RowBatch {
    RowBatch {
        schema: schema.clone(),
        rows: ids.map(|i| simple_insert(schema, i, "x", ts, 0)).collect(),
    }
}

/// Opens dispatcher `d` on the whole of table `table` from `start_ts` (`what`: the failure's
/// message).
async fn open(s: &dyn Sink, d: DispatcherId, table: u64, start_ts: Ts, what: &str) -> AckReceiver {
    s.open(d, Span::whole_table(TableId(table)), start_ts)
        .await
        .expect(what)
}

/// Gives `batch` to dispatcher `d` (`what`: the failure's message).
async fn write(s: &dyn Sink, d: DispatcherId, batch: RowBatch, what: &str) {
    s.write_rows(d, batch).await.expect(what);
}

fn dispatcher(epoch: u64, seq: u64) -> DispatcherId {
    DispatcherId { epoch, seq }
}

/// `ALTER TABLE …` in database `d` at commit ts 20.
fn alter_at_20(query: &str) -> DdlEvent {
    DdlEvent {
        session: Default::default(),
        object_database: None,
        commit_ts: 20,
        commit_time_ms: 0,
        kind: DdlKind::AlterTable,
        database: "d".into(),
        query: query.into(),
        influence: DdlInfluence {
            scope: InfluenceScope::All,
            trigger: false,
            dropped: vec![],
            added: vec![],
            renamed: vec![],
            sources: vec![],
        },
    }
}

/// Waits for the ack receiver to wake (a failure wakes it with the ack unchanged).
async fn woken(acks: &mut AckReceiver, what: &str) -> Ts {
    tokio::time::timeout(Duration::from_secs(30), acks.changed())
        .await
        .unwrap_or_else(|_| {
            panic!("{what}: the refused periodic flush never woke the ack receiver")
        })
        .expect("ack channel open");
    let ts = *acks.borrow();
    ts
}

/// Asserts `e` is a fence refusal (possibly as the dispatcher's kept failure) and returns its text.
fn assert_fenced(e: &SinkError, incarnation: &str) -> String {
    let inner = match e {
        SinkError::Earlier(inner) => &**inner,
        e => e,
    };
    assert!(
        matches!(inner, SinkError::Fenced { .. }),
        "not a fence refusal: {e:?}"
    );
    assert!(e.is_retryable(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "this node's lease is not fresh ({incarnation}); write refused"
        )),
        "{msg}"
    );
    msg
}

fn storage_sink(uri: &str, lease: &Arc<Lease>) -> StorageSink {
    let SinkConfig::Storage(cfg) = SinkUri::parse(uri).expect("uri").config else {
        panic!("storage")
    };
    let s = StorageSink::open_storage(cfg).expect("sink");
    s.set_fence(lease.fence()).expect("fence");
    s
}

fn tempdir(tag: &str, n: u32) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-fence-{tag}-{n}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The scenario raced: a periodic flush began before the fence moved (run it again).
struct Raced;

/// Rows accepted while the lease is fresh, the lease lapses before the periodic flush: the flush
/// is refused, no file (data, index, schema) is written, the ack stays, `Fenced` is kept; the
/// checkpoint is refused too. Once the node is back as incarnation 2, the old dispatcher stays
/// refused and a new one writes. Local files and S3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_refuses_the_periodic_flush_once_the_lease_is_not_fresh() {
    let moto = sluice_testkit::moto::Moto::start("sluice-fence").expect("moto");
    for n in 0..10u32 {
        let uri = if n % 2 == 0 {
            format!("file://{}?", tempdir("tick", n).display())
        } else {
            format!("{}&", moto.sink_uri(&format!("tick-{n}")))
        };
        let uri = format!("{uri}protocol=csv&flush-interval=1s&enable-table-across-nodes=true");
        match storage_tick_scenario(&uri).await {
            Ok(()) if n >= 1 => return, // both stores passed
            Ok(()) => {}
            Err(Raced) => eprintln!("{uri}: a periodic flush ran before the lease moved; again"),
        }
    }
    panic!("the scenario raced every time");
}

async fn storage_tick_scenario(uri: &str) -> Result<(), Raced> {
    let lease = Lease::new(1);
    let s = storage_sink(uri, &lease);
    let store = s.store();
    let schema = Arc::new(simple_schema("d", "t", 1, 1));
    let d = dispatcher(1, 1);
    let mut acks = open(&s, d, 1, 5, "open").await;
    let before = lease.calls();
    write(&s, d, batch(&schema, 1..=3, 10), "buffered").await;
    if lease.set(0) != before {
        return Err(Raced);
    }
    // Nobody calls flush: the periodic flush meets the fence.
    assert_eq!(
        woken(&mut acks, uri).await,
        5,
        "{uri}: nothing is acknowledged"
    );
    let e = s.failure(d).expect("the refusal is kept");
    assert_fenced(&e, "incarnation 1");
    assert_eq!(
        list(&store).await,
        Vec::<String>::new(),
        "{uri}: a refused flush wrote"
    );
    assert!(s.flush(d).await.is_err());
    assert_eq!(s.durable_ts(d), Some(5));
    let cp = s
        .write_checkpoint(100)
        .await
        .expect_err("checkpoint while not fresh");
    assert_fenced(&cp, "no fresh incarnation");
    assert_eq!(
        list(&store).await,
        Vec::<String>::new(),
        "{uri}: a refused checkpoint wrote"
    );
    // The node rejoins as incarnation 2: its new dispatcher writes, the old one never does.
    lease.set(2);
    let d2 = dispatcher(2, 1);
    open(&s, d2, 1, 5, "open d2").await;
    write(&s, d2, batch(&schema, 1..=3, 10), "d2 rows").await;
    assert_eq!(s.flush(d2).await.expect("d2 flush"), 10);
    s.write_checkpoint(10)
        .await
        .expect("checkpoint under incarnation 2");
    assert_eq!(
        s.close(d).await.durable_ts,
        5,
        "closing the old dispatcher writes nothing"
    );
    let paths = list(&store).await;
    assert!(
        paths.iter().any(|p| p.contains(&d2.to_string())),
        "{paths:?}"
    );
    assert!(
        paths.iter().all(|p| !p.contains(&d.to_string())),
        "{uri}: the old dispatcher wrote: {paths:?}"
    );
    assert!(paths.iter().any(|p| p == "metadata"), "{paths:?}");
    Ok(())
}

/// A dispatcher opened under incarnation 1 with rows buffered is refused after the node moved to
/// incarnation 2 (its lease fresh again), while a dispatcher opened under 2 writes fine; a DDL
/// of the old dispatcher is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_refuses_a_dispatcher_of_an_older_incarnation() {
    let dir = tempdir("incarnation", 0);
    // No periodic flush in the test's time: every flush here is explicit.
    let uri = format!(
        "file://{}?flush-interval=10m&enable-table-across-nodes=true",
        dir.display()
    );
    let lease = Lease::new(1);
    let s = storage_sink(&uri, &lease);
    let (old_t, new_t) = (
        Arc::new(simple_schema("d", "old", 1, 1)),
        Arc::new(simple_schema("d", "new", 2, 1)),
    );
    let d1 = dispatcher(1, 1);
    let d2 = dispatcher(2, 1);
    open(&s, d1, 1, 0, "open d1").await;
    write(&s, d1, batch(&old_t, 1..=3, 10), "d1 rows").await;
    lease.set(2);
    open(&s, d2, 2, 0, "open d2").await;
    write(&s, d2, batch(&new_t, 1..=3, 10), "d2 rows").await;
    assert_eq!(s.flush(d2).await.expect("d2 writes"), 10);
    let e = s.flush(d1).await.expect_err("d1 is of incarnation 1");
    assert_fenced(&e, "incarnation 1, now 2");
    assert_eq!(s.durable_ts(d1), Some(0));
    let d3 = dispatcher(1, 3);
    lease.set(1);
    open(&s, d3, 1, 0, "open d3").await;
    lease.set(2);
    let ddl = alter_at_20("ALTER TABLE old ADD COLUMN x INT");
    let v20 = Arc::new(simple_schema("d", "old", 1, 20));
    let e = s
        .write_ddl(d3, ddl, vec![v20])
        .await
        .expect_err("DDL of incarnation 1");
    assert_fenced(&e, "incarnation 1, now 2");
    let paths = list(&s.store()).await;
    assert!(paths.iter().all(|p| !p.starts_with("d/old/")), "{paths:?}");
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("d/new/1/") && p.contains("/CDC_")),
        "{paths:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

async fn mysql_sink(db: &MariaDb, params: &str, lease: &Arc<Lease>) -> MysqlSink {
    let uri = format!("{}/?{params}", db.url());
    let SinkConfig::Mysql(cfg) = SinkUri::parse(&uri).expect("uri").config else {
        panic!("mysql")
    };
    let s = MysqlSink::connect(cfg).await.expect("connect");
    s.set_fence(lease.fence()).expect("fence");
    s
}

fn count(db: &MariaDb, sql: &str) -> String {
    db.query_one(sql).expect("query")
}

/// [`count`] after `ms` milliseconds (periodic flushes, retries) have passed.
async fn count_after(db: &MariaDb, ms: u64, sql: &str) -> String {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    count(db, sql)
}

/// A MariaDB downstream on which `setup` ran.
fn mariadb(setup: &str) -> MariaDb {
    let db = MariaDb::start().expect("mariadb");
    db.exec(setup).expect("ddl");
    db
}

/// Creates tables `d.{a}` and `d.{b}`, each `(id BIGINT PRIMARY KEY, v VARCHAR(64))`.
fn create_two_tables(db: &MariaDb, a: &str, b: &str) {
    db.exec(&format!(
        "CREATE TABLE d.{a} (id BIGINT PRIMARY KEY, v VARCHAR(64)); CREATE TABLE d.{b} (id BIGINT PRIMARY KEY, v VARCHAR(64));"
    ))
    .expect("tables");
}

/// Flushes dispatcher `d`, which must be refused (`who` starts the message if it is not).
async fn flush_refused(s: &dyn Sink, d: DispatcherId, who: &str) -> SinkError {
    match s.flush(d).await {
        Err(e) => e,
        Ok(t) => panic!("{who}flushed to {t}"),
    }
}

/// MySQL: rows accepted while the lease is fresh (40 rows: the `LOAD DATA` path; 1 row: a
/// statement), the lease lapses before the periodic flush (every 200 ms): nothing reaches the
/// downstream, acks stay, `Fenced`. A DDL and the checkpoint are refused too, without a trace
/// in `sluice_sink.ddl_ts` or `sluice_sink.checkpoint`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_refuses_the_periodic_flush_once_the_lease_is_not_fresh() {
    let db = mariadb("CREATE DATABASE d");
    for n in 0..10u32 {
        create_two_tables(&db, &format!("bulk{n}"), &format!("one{n}"));
        match mysql_tick_scenario(&db, n).await {
            Ok(()) => return,
            Err(Raced) => eprintln!("a periodic flush ran before the lease moved; again"),
        }
    }
    panic!("the scenario raced every time");
}

async fn mysql_tick_scenario(db: &MariaDb, n: u32) -> Result<(), Raced> {
    let lease = Lease::new(1);
    let s = mysql_sink(db, "worker-count=2", &lease).await;
    let bulk = Arc::new(simple_schema("d", &format!("bulk{n}"), 1, 1));
    let one = Arc::new(simple_schema("d", &format!("one{n}"), 2, 1));
    let (d1, d2) = (dispatcher(1, 1), dispatcher(1, 2));
    let mut a1 = open(&s, d1, 1, 5, "open").await;
    let mut a2 = open(&s, d2, 2, 5, "open").await;
    let before = lease.calls();
    write(&s, d1, batch(&bulk, 1..=40, 10), "buffered").await;
    write(&s, d2, batch(&one, 1..=1, 10), "buffered").await;
    if lease.set(0) != before {
        return Err(Raced);
    }
    for (acks, d, t) in [(&mut a1, d1, "bulk"), (&mut a2, d2, "one")] {
        assert_eq!(woken(acks, t).await, 5, "{t}: nothing is acknowledged");
        assert_fenced(&s.failure(d).expect("kept"), "incarnation 1");
    }
    // Several periodic flushes later, still nothing downstream.
    assert_eq!(
        count_after(db, 600, &format!("SELECT COUNT(*) FROM d.bulk{n}")).await,
        "0"
    );
    assert_eq!(count(db, &format!("SELECT COUNT(*) FROM d.one{n}")), "0");
    assert_eq!(s.close(d1).await.durable_ts, 5);
    assert_eq!(
        count(db, &format!("SELECT COUNT(*) FROM d.bulk{n}")),
        "0",
        "close wrote"
    );
    // A dispatcher opened while the lease is not fresh can write nothing, not even a DDL.
    let d3 = dispatcher(1, 3);
    open(&s, d3, 1, 5, "open").await;
    let ddl = alter_at_20(&format!("ALTER TABLE bulk{n} ADD COLUMN x INT"));
    let v20 = Arc::new(simple_schema("d", &format!("bulk{n}"), 1, 20));
    let e = s
        .write_ddl(d3, ddl, vec![v20])
        .await
        .expect_err("DDL while not fresh");
    let msg = assert_fenced(&e, "no fresh incarnation");
    assert!(msg.contains("record ddl_ts"), "{msg}");
    assert_eq!(count(db, &format!("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema='d' AND table_name='bulk{n}' AND column_name='x'")), "0");
    assert_eq!(count(db, "SELECT COUNT(*) FROM sluice_sink.ddl_ts"), "0");
    let e = s
        .write_checkpoint(30)
        .await
        .expect_err("checkpoint while not fresh");
    assert_fenced(&e, "no fresh incarnation");
    assert_eq!(
        count(db, "SELECT COUNT(*) FROM sluice_sink.checkpoint"),
        "0"
    );
    Ok(())
}

/// MySQL: a dispatcher opened under incarnation 1 with rows buffered is refused after the node
/// moved on to incarnation 2, while a dispatcher opened under 2 writes rows and a DDL, and the
/// checkpoint is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_refuses_a_dispatcher_of_an_older_incarnation() {
    let db = mariadb("CREATE DATABASE d");
    for n in 0..10u32 {
        create_two_tables(&db, &format!("old{n}"), &format!("new{n}"));
        let lease = Lease::new(1);
        let s = mysql_sink(&db, "worker-count=2", &lease).await;
        let old_t = Arc::new(simple_schema("d", &format!("old{n}"), 1, 1));
        let new_t = Arc::new(simple_schema("d", &format!("new{n}"), 2, 1));
        let (d1, d2) = (dispatcher(1, 1), dispatcher(2, 1));
        open(&s, d1, 1, 0, "open d1").await;
        let before = lease.calls();
        write(&s, d1, batch(&old_t, 1..=40, 10), "d1 rows").await;
        if lease.set(2) != before {
            eprintln!("a periodic flush ran before the lease moved; again");
            continue;
        }
        open(&s, d2, 2, 0, "open d2").await;
        write(&s, d2, batch(&new_t, 1..=40, 10), "d2 rows").await;
        assert_eq!(s.flush(d2).await.expect("d2 writes"), 10);
        let e = flush_refused(&s, d1, "d1 of incarnation 1 ").await;
        assert_fenced(&e, "incarnation 1, now 2");
        let ddl = alter_at_20(&format!("ALTER TABLE new{n} ADD COLUMN x INT"));
        let v20 = Arc::new(simple_schema("d", &format!("new{n}"), 2, 20));
        assert_eq!(s.write_ddl(d2, ddl, vec![v20]).await.expect("d2 DDL"), 20);
        s.write_checkpoint(20).await.expect("checkpoint");
        assert_eq!(count(&db, &format!("SELECT COUNT(*) FROM d.old{n}")), "0");
        assert_eq!(count(&db, &format!("SELECT COUNT(*) FROM d.new{n}")), "40");
        assert_eq!(count(&db, &format!("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema='d' AND table_name='new{n}' AND column_name='x'")), "1");
        assert_eq!(
            count(&db, "SELECT checkpoint_ts FROM sluice_sink.checkpoint"),
            "20"
        );
        return;
    }
    panic!("the scenario raced every time");
}

/// MySQL: a flush retrying against a downstream that is down stops retrying once the lease
/// lapses, so it cannot land when the downstream comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_refuses_a_retry_after_the_lease_lapsed() {
    let mut db =
        mariadb("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))");
    let lease = Lease::new(1);
    let s = mysql_sink(
        &db,
        "worker-count=1&max-retries=100&retry-backoff=50ms",
        &lease,
    )
    .await;
    let schema = Arc::new(simple_schema("d", "t", 1, 1));
    let d = dispatcher(1, 1);
    let mut acks = open(&s, d, 1, 5, "open").await;
    db.stop(false).expect("kill the downstream");
    write(&s, d, batch(&schema, 1..=3, 10), "buffered").await;
    // The periodic flush (every 200 ms) fails against the dead downstream and retries.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(s.durable_ts(d), Some(5));
    lease.set(0);
    db.start_again().expect("downstream back");
    assert_eq!(
        woken(&mut acks, "retry").await,
        5,
        "a retry landed after the lease lapsed"
    );
    assert_fenced(&s.failure(d).expect("kept"), "incarnation 1");
    assert_eq!(
        count_after(&db, 500, "SELECT COUNT(*) FROM d.t").await,
        "0",
        "a retry landed after the lease lapsed"
    );
}

/// MySQL: a transaction of several statements whose lease lapses after it was sent but before
/// its commit is rolled back: the commit is checked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_rolls_back_a_transaction_whose_lease_lapses_before_commit() {
    let db = mariadb("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64)); INSERT INTO d.t VALUES (9, 'kept')");
    let lease = Lease::new(1);
    let s = mysql_sink(&db, "worker-count=1", &lease).await;
    let schema = Arc::new(simple_schema("d", "t", 1, 1));
    let d = dispatcher(1, 1);
    open(&s, d, 1, 5, "open").await;
    // Three upserts (one REPLACE) and a delete of another key (one DELETE): one transaction of
    // two statements. The span's claim (the dispatcher's first write) and the attempt's check
    // pass; the check before COMMIT is refused.
    lease.pass_only(2);
    let mut rows: Vec<RowEvent> = (1..=3)
        .map(|i| simple_insert(&schema, i, "x", 10, 0))
        .collect();
    let mut del = simple_insert(&schema, 9, "kept", 11, 0);
    del.kind = RowKind::Delete;
    del.before = del.after.take();
    rows.push(del);
    let rows = RowBatch {
        schema: schema.clone(),
        rows,
    };
    write(&s, d, rows, "buffered").await;
    let e = flush_refused(&s, d, "").await;
    let msg = assert_fenced(&e, "incarnation 1");
    assert!(
        msg.contains("commit rows"),
        "refused elsewhere than at the commit: {msg}"
    );
    assert_eq!(
        count_after(&db, 300, "SELECT GROUP_CONCAT(id ORDER BY id) FROM d.t").await,
        "9",
        "the transaction committed"
    );
}

/// The blackhole counts what it is given (its "write"): a dispatcher of an older incarnation is
/// refused, a current one counts; unfenced sinks behave as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_counts_only_under_the_current_incarnation() {
    use sluice_sink::blackhole::BlackholeSink;
    let lease = Lease::new(1);
    let s = BlackholeSink::new_blackhole();
    s.set_fence(lease.fence()).expect("fence");
    assert!(
        s.set_fence(lease.fence()).is_err(),
        "a second fence is refused"
    );
    let schema = Arc::new(simple_schema("d", "t", 1, 1));
    let (d1, d2) = (dispatcher(1, 1), dispatcher(2, 1));
    open(&s, d1, 1, 0, "open d1").await;
    lease.set(2);
    open(&s, d2, 1, 0, "open d2").await;
    let e = s
        .write_rows(d1, batch(&schema, 1..=3, 10))
        .await
        .expect_err("d1 is of incarnation 1");
    assert_fenced(&e, "incarnation 1, now 2");
    write(&s, d2, batch(&schema, 1..=3, 10), "d2 counts").await;
    assert_eq!(
        s.counters().rows.load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    let unfenced = BlackholeSink::new_blackhole();
    open(&unfenced, d1, 1, 0, "open").await;
    write(&unfenced, d1, batch(&schema, 1..=3, 10), "no fence").await;
    assert!(
        unfenced.set_fence(lease.fence()).is_err(),
        "too late: a dispatcher is open"
    );
}
