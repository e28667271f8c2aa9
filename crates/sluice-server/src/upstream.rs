//! Capture on this node: one binlog reader per upstream feeding the node's event store, run on a
//! thread of its own (redb writes are blocking), and the shared view the shell reads: the schema
//! history, how far the store is complete (`captured`), commit times of recent commit ts, and
//! the last capture error.
//!
//! Invariants:
//! - `captured` is published only after the history that covers it is published, so the shell
//!   never hands out a DDL or a row whose schema it cannot look up;
//! - the reader always resumes from what the event store and the persisted history say
//!   ([`Pump::resume_position`]): after a crash or a fatal error nothing is lost or duplicated;
//! - the commit-time samples are bounded by [`MAX_TIME_SAMPLES`].

use crate::error::ServerError;
use crate::mask::scrub;
use sluice_capture::capture::{Capture, Captured, Pump};
use sluice_capture::schema::{FileSchemaStore, SchemaHistory, SchemaStore};
use sluice_capture::store::{EventStore, StoreConfig};
use sluice_capture::{BinlogReader, ReaderConfig};
use sluice_types::{RowEvent, Ts};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// At most this many (commit ts → commit time) samples are kept for `checkpoint_time` and lag.
pub const MAX_TIME_SAMPLES: usize = 65_536;
/// A restarted capture that ran this long without an error is healthy again.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(2);
/// Wait this long before rebuilding the reader after a fatal capture error.
pub const FATAL_RETRY: Duration = Duration::from_secs(5);

pub struct CaptureShared {
    pub store: Arc<EventStore>,
    pub history: RwLock<Arc<SchemaHistory>>,
    pub captured: watch::Sender<Ts>,
    pub error: Mutex<Option<String>>,
    /// The binlog reader's "keeps failing to reconnect" notice ([`ReaderConfig::retrying`]).
    retrying: Arc<Mutex<Option<String>>>,
    times: Mutex<BTreeMap<Ts, u64>>,
    pub rows_captured: AtomicU64,
    pub txns_captured: AtomicU64,
    pub ddls_captured: AtomicU64,
    /// Set while a snapshot chunk waits for capture to reach its position: capture then hands
    /// every heartbeat transaction on at once (`Capture::position_wanted`).
    pub position_wanted: Arc<std::sync::atomic::AtomicBool>,
}

impl CaptureShared {
    pub fn history(&self) -> Arc<SchemaHistory> {
        self.history
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    pub fn captured(&self) -> Ts {
        *self.captured.borrow()
    }
    /// Why capture makes no progress now, if it does not: a stop with an error, or a reader
    /// that keeps failing to reach the upstream (secrets scrubbed).
    pub fn error(&self) -> Option<String> {
        let stopped = self.error.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let stopped =
            stopped.map(|e| format!("stopped (retried every {} s): {e}", FATAL_RETRY.as_secs()));
        stopped.or_else(|| {
            let r = self
                .retrying
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            r.map(|m| scrub(&m))
        })
    }
    fn set_error(&self, e: Option<String>) {
        *self.error.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }
    fn sample(&self, ts: Ts, ms: u64) {
        let mut t = self.times.lock().unwrap_or_else(|p| p.into_inner());
        t.insert(ts, ms);
        while t.len() > MAX_TIME_SAMPLES {
            let Some(first) = t.keys().next().copied() else {
                break;
            };
            t.remove(&first);
        }
    }
    /// The commit time (ms since the epoch) of the greatest sampled ts at or below `ts`.
    pub fn time_of(&self, ts: Ts) -> Option<u64> {
        let t = self.times.lock().unwrap_or_else(|p| p.into_inner());
        t.range(..=ts).next_back().map(|(_, ms)| *ms)
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn history_path(dir: &Path) -> PathBuf {
    dir.join("schema-history.json")
}

/// Where a cluster keeps the upstream's schema snapshot, shared by every node: table ids of
/// tables that existed before the snapshot are numbered in it, so every node must start from the
/// same one (later ids come from the binlog and agree by construction).
pub const SHARED_SNAPSHOT_KEY: &str = "/sluice/schema/snapshot";

/// A cluster's shared snapshot: the one in etcd, or (first node) a new one published there with
/// create-if-absent; when another node published first, its snapshot is used.
async fn shared_snapshot(etcd: &[String], upstream: &str) -> Result<SchemaHistory, ServerError> {
    use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
    let meta = |e: String| ServerError::Meta(format!("shared schema snapshot in etcd: {e}"));
    let mut c = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        Client::connect(etcd, None),
    )
    .await
    .map_err(|_| meta(format!("{etcd:?} did not answer within 10 s")))?
    .map_err(|e| meta(e.to_string()))?;
    let read = |v: &[u8]| {
        serde_json::from_slice::<SchemaHistory>(v).map_err(|e| meta(format!("unreadable: {e}")))
    };
    let got = c
        .get(SHARED_SNAPSHOT_KEY, None)
        .await
        .map_err(|e| meta(e.to_string()))?;
    if let Some(kv) = got.kvs().first() {
        return read(kv.value());
    }
    let h = SchemaHistory::snapshot(upstream).await.map_err(|e| {
        ServerError::Upstream(format!(
            "upstream schema snapshot failed: {}",
            scrub(&e.to_string())
        ))
    })?;
    let value = serde_json::to_vec(&h).map_err(|e| meta(e.to_string()))?;
    let txn = Txn::new()
        .when(vec![Compare::create_revision(
            SHARED_SNAPSHOT_KEY,
            CompareOp::Equal,
            0,
        )])
        .and_then(vec![TxnOp::put(SHARED_SNAPSHOT_KEY, value, None)]);
    let r = c.txn(txn).await.map_err(|e| meta(e.to_string()))?;
    if r.succeeded() {
        return Ok(h);
    }
    let got = c
        .get(SHARED_SNAPSHOT_KEY, None)
        .await
        .map_err(|e| meta(e.to_string()))?;
    match got.kvs().first() {
        Some(kv) => read(kv.value()),
        None => Err(meta("published by another node, then gone".into())),
    }
}

/// Opens the event store and the schema history (taking a snapshot on the first start; in a
/// cluster, the snapshot every node shares).
pub async fn open(
    data_dir: &Path,
    upstream: &str,
    cache_bytes: u64,
    skip_unparseable: bool,
    etcd: &[String],
) -> Result<Arc<CaptureShared>, ServerError> {
    let store = EventStore::open(
        &data_dir.join("events.redb"),
        StoreConfig {
            cache_bytes: cache_bytes as usize,
        },
    )
    .map_err(|e| ServerError::Internal(format!("event store: {e}")))?;
    let hs = FileSchemaStore(history_path(data_dir));
    let mut history = match hs
        .load()
        .await
        .map_err(|e| ServerError::Internal(scrub(&e.to_string())))?
    {
        Some(h) => h,
        None => {
            let h = if etcd.is_empty() {
                SchemaHistory::snapshot(upstream).await.map_err(|e| {
                    ServerError::Upstream(format!(
                        "upstream schema snapshot failed: {}",
                        scrub(&e.to_string())
                    ))
                })?
            } else {
                shared_snapshot(etcd, upstream).await?
            };
            hs.save(&h)
                .await
                .map_err(|e| ServerError::Internal(e.to_string()))?;
            h
        }
    };
    history.skip_unparseable_ddl = skip_unparseable;
    let captured = Pump::resume_position(&store, &history)
        .ts()
        .unwrap_or(history.snapshot_ts);
    let (tx, _) = watch::channel(captured.max(store.resolved()));
    let shared = Arc::new(CaptureShared {
        store: Arc::new(store),
        history: RwLock::new(Arc::new(history)),
        captured: tx,
        error: Mutex::new(None),
        retrying: Default::default(),
        position_wanted: Default::default(),
        times: Mutex::new(BTreeMap::new()),
        rows_captured: AtomicU64::new(0),
        txns_captured: AtomicU64::new(0),
        ddls_captured: AtomicU64::new(0),
    });
    // What is captured at start is at most as old as now (refined as transactions arrive).
    shared.sample(*shared.captured.borrow(), now_ms());
    Ok(shared)
}

/// Starts the capture thread, and on its runtime this node's heartbeat writer (`heartbeat`: the
/// node id and interval; `None`: off). It stops when `stop` turns true.
pub fn spawn(
    shared: Arc<CaptureShared>,
    data_dir: PathBuf,
    upstream: String,
    server_id: u32,
    heartbeat: Option<(String, std::time::Duration)>,
    stop: watch::Receiver<bool>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("sluice-capture".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    shared.set_error(Some(format!("cannot start the capture runtime: {e}")));
                    return;
                }
            };
            if let Some((node, interval)) = heartbeat {
                rt.spawn(write_heartbeats(
                    upstream.clone(),
                    node,
                    interval,
                    stop.clone(),
                ));
            }
            rt.block_on(run(shared, data_dir, upstream, server_id, stop));
        })
        .unwrap_or_else(|e| panic!("cannot spawn the capture thread: {e}"))
}

/// This node's heartbeat writer (`sluice_capture::heartbeat`): a read-only upstream user turns it
/// off with a warning naming why (commit times are then whole seconds).
async fn write_heartbeats(
    upstream: String,
    node: String,
    interval: std::time::Duration,
    stop: watch::Receiver<bool>,
) {
    tracing::info!(?interval, "heartbeats: writing sluice.heartbeat upstream");
    if let Err(e) = sluice_capture::heartbeat::run(&upstream, &node, interval, stop).await {
        tracing::warn!(
            "heartbeats off: {} (grant CREATE and INSERT, UPDATE on sluice.* to the upstream user for millisecond commit times, or set heartbeat-interval-ms = 0 to silence this); commit times and lag are precise to the second",
            scrub(&e.to_string())
        );
    }
}

async fn run(
    shared: Arc<CaptureShared>,
    data_dir: PathBuf,
    upstream: String,
    server_id: u32,
    mut stop: watch::Receiver<bool>,
) {
    let hs: Arc<dyn SchemaStore> = Arc::new(FileSchemaStore(history_path(&data_dir)));
    loop {
        if *stop.borrow() {
            break;
        }
        let mut pump = start_pump(&shared, &upstream, server_id, &hs);
        let err = capture_until_stopped(&shared, &mut pump, &mut stop).await;
        let _ = shared.store.persist();
        match err {
            None => break,
            Some(e) => {
                if !wait_after_error(&shared, &e, &mut stop).await {
                    break;
                }
            }
        }
    }
}

/// A pump reading the binlog from where the event store and the history resume.
fn start_pump(
    shared: &CaptureShared,
    upstream: &str,
    server_id: u32,
    hs: &Arc<dyn SchemaStore>,
) -> Pump {
    let history = (*shared.history()).clone();
    let start = Pump::resume_position(&shared.store, &history);
    tracing::info!(position = %start, "capture: reading the binlog");
    let mut cfg = ReaderConfig::new(upstream.to_string(), server_id, start);
    cfg.retrying = shared.retrying.clone();
    let reader = BinlogReader::new(cfg);
    let mut capture = Capture::new(reader, history);
    capture.position_wanted = Some(shared.position_wanted.clone());
    Pump::new(capture, shared.store.clone(), hs.clone())
}

/// Runs `pump` until `stop` changes (`None`) or capture fails (the error).
async fn capture_until_stopped(
    shared: &CaptureShared,
    pump: &mut Pump,
    stop: &mut watch::Receiver<bool>,
) -> Option<sluice_capture::CaptureError> {
    // A restarted capture clears its error once it got past where it stopped, or ran
    // without one for HEALTHY_AFTER (an idle upstream does not move the store).
    let (restarted, stalled_at) = (std::time::Instant::now(), shared.store.resolved());
    let last_repair = pump
        .capture
        .history
        .repairs
        .last()
        .map(|r| r.ts)
        .unwrap_or(0);
    let mut published = (pump.capture.history.revision, last_repair);
    loop {
        let step = tokio::select! {
            r = pump.step() => r,
            _ = stop.changed() => return None,
        };
        match step {
            Ok(item) => {
                if shared.store.resolved() > stalled_at || restarted.elapsed() >= HEALTHY_AFTER {
                    shared.set_error(None);
                }
                count(shared, &item);
                let ddl = matches!(item, Captured::Ddl(_));
                publish_history(shared, &pump.capture.history, &mut published, ddl);
                publish_captured(shared);
            }
            Err(e) => return Some(e),
        }
    }
}

/// Counts a captured item and samples its commit time.
fn count(shared: &CaptureShared, item: &Captured) {
    match item {
        Captured::Rows { commit_ts, rows } => count_txn(shared, *commit_ts, rows, 0),
        Captured::Ddl(d) => {
            shared.ddls_captured.fetch_add(1, Ordering::Relaxed);
            shared.sample(d.commit_ts, d.commit_time_ms);
        }
        Captured::CommitStaged {
            commit_ts,
            staged_rows,
            rows,
            ..
        } => count_txn(shared, *commit_ts, rows, *staged_rows),
        Captured::Resolved(ts) => shared.sample(*ts, now_ms()),
        Captured::Chunk { .. } | Captured::Abort(_) => {}
    }
}

/// One committed transaction: its rows (`staged` more were handed out in chunks before) and
/// its commit time, sampled from its first row.
fn count_txn(shared: &CaptureShared, commit_ts: Ts, rows: &[RowEvent], staged: usize) {
    shared
        .rows_captured
        .fetch_add((rows.len() + staged) as u64, Ordering::Relaxed);
    shared.txns_captured.fetch_add(1, Ordering::Relaxed);
    let ms = rows
        .first()
        .map(|r| r.commit_time_ms)
        .unwrap_or_else(now_ms);
    shared.sample(commit_ts, ms);
}

/// Moves `captured` up to how far the event store is complete (after the history covering it).
fn publish_captured(shared: &CaptureShared) {
    let r = shared.store.resolved();
    shared.captured.send_if_modified(|c| {
        if r > *c {
            *c = r;
            true
        } else {
            false
        }
    });
}

/// Records why capture stopped and waits [`FATAL_RETRY`] before it is rebuilt. False when
/// `stop` changed meanwhile.
async fn wait_after_error(
    shared: &CaptureShared,
    e: &sluice_capture::CaptureError,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let msg = scrub(&e.to_string());
    tracing::error!(retryable = e.is_retryable(), "capture stopped: {msg}");
    shared.set_error(Some(msg));
    tokio::select! {
        _ = tokio::time::sleep(FATAL_RETRY) => true,
        _ = stop.changed() => false,
    }
}

/// Publishes the history for the data path (sinks look the rows' versions up in it): after a
/// DDL, and after versions were completed or repaired from the binlog (`revision` moved); each
/// repair is logged once. `published`: the revision and the ts of the last repair published.
fn publish_history(
    shared: &CaptureShared,
    h: &SchemaHistory,
    published: &mut (u64, Ts),
    ddl: bool,
) {
    if !ddl && h.revision == published.0 {
        return;
    }
    for r in h.repairs.iter().filter(|r| r.ts > published.1) {
        tracing::warn!(
            table = %r.table,
            ts = r.ts,
            "capture: the schema history disagreed with the binlog about {} (history columns {:?}, binlog columns {:?}); \
             the table's definition was taken from the binlog",
            r.table,
            r.history_columns,
            r.binlog_columns
        );
    }
    let last_repair = h.repairs.last().map(|r| r.ts).unwrap_or(published.1);
    *published = (h.revision, last_repair);
    *shared.history.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(h.clone());
}

/// Whether a table's row estimate moved little enough (within a tenth, InnoDB's estimates
/// wander by a few percent) that the boundaries scanned at `then` still stand.
fn stats_close(then: u64, now: u64) -> bool {
    then.abs_diff(now) <= then.max(now) / 10
}

/// How often table regions are recomputed from the upstream's statistics.
pub const REGIONS_REFRESH: Duration = Duration::from_secs(60);

/// Feeds `Input::Regions` for every captured table with a routing key: at start, then every
/// [`REGIONS_REFRESH`], and soon after a DDL (new tables); a table whose statistics did not
/// move since its last scan is not scanned again (`stats_close`). Regions only steer the split
/// scheduler; errors are logged and retried at the next round.
pub async fn regions_task(
    shared: Arc<CaptureShared>,
    upstream: String,
    region_size: u64,
    tx: tokio::sync::mpsc::Sender<crate::shell::ShellMsg>,
) {
    use sluice_capture::regions::{region_count, regions_at, table_stats, RegionConfig};
    let cfg = RegionConfig {
        region_size: region_size.max(1),
        ..RegionConfig::default()
    };
    // The last boundaries scanned per table version, with the region count and row estimate
    // they were scanned at: a round whose statistics did not move reuses them (the scan is a
    // window function over the whole table, which competed with snapshot reads for the
    // upstream's CPU every round).
    let mut scanned: BTreeMap<(sluice_types::TableId, Ts), (u64, u64, Vec<sluice_types::Key>)> =
        BTreeMap::new();
    let mut last_ddls = u64::MAX;
    let mut last_full = std::time::Instant::now() - REGIONS_REFRESH;
    loop {
        let ddls = shared.ddls_captured.load(Ordering::Relaxed);
        if ddls != last_ddls || last_full.elapsed() >= REGIONS_REFRESH {
            last_ddls = ddls;
            last_full = std::time::Instant::now();
            let history = shared.history();
            let at = shared.captured();
            match mysql_async::Opts::from_url(&upstream) {
                Ok(opts) => match mysql_async::Conn::new(opts).await {
                    Ok(mut conn) => {
                        let mut seen = std::collections::BTreeSet::new();
                        for t in history.tables_at(at) {
                            if sluice_capture::schema::is_system_schema(&t.database) {
                                continue;
                            }
                            let version = (t.table_id, t.version);
                            seen.insert(version);
                            // A keyless table has no boundaries, only its row estimate.
                            let stats = async {
                                let (bytes, rows) = table_stats(&mut conn, t).await?;
                                let count = region_count(bytes, &cfg);
                                if let Some((c, r, b)) = scanned.get(&version) {
                                    if *c == count && stats_close(*r, rows) {
                                        return Ok((b.clone(), rows));
                                    }
                                }
                                let b = regions_at(&mut conn, t, count, rows).await?;
                                scanned.insert(version, (count, rows, b.clone()));
                                Ok::<_, sluice_capture::CaptureError>((b, rows))
                            };
                            match stats.await {
                                Ok((regions, rows)) => {
                                    let input = sluice_control::Input::Regions {
                                        table: t.table_id,
                                        regions,
                                        rows,
                                    };
                                    if tx.send(crate::shell::ShellMsg::Input(input)).await.is_err()
                                    {
                                        return;
                                    }
                                }
                                Err(e) => {
                                    tracing::debug!(table = %t.qualified_name(), "regions: {}", scrub(&e.to_string()))
                                }
                            }
                        }
                        scanned.retain(|v, _| seen.contains(v));
                        let _ = conn.disconnect().await;
                    }
                    Err(e) => tracing::debug!("regions: {}", scrub(&e.to_string())),
                },
                Err(e) => tracing::debug!("regions: {}", scrub(&e.to_string())),
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
