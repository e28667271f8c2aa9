//! The node shell: one task owns this node's [`NodeState`] and is the only thing that touches
//! it. It delivers ticks (every [`TICK_MS`]), membership and leadership, meta-store results,
//! messages from peers, event batches and sink acknowledgements, and carries out the effects —
//! the real-IO counterpart of the simulator's world (`crates/sluice-sim/src/world.rs`).
//!
//! The data path's rules (subscriptions, cursors, whole-transaction batches, DDL routing, row
//! handles, in-flight accounting and the memory quota) are the feed's
//! ([`sluice_control::feed`]), the same code the simulator runs; the shell reads the event store
//! for it ([`crate::source::StoreSource`]) and carries its writes to the sink workers.
//!
//! Invariants:
//! - the state machines run unchanged: the shell only turns effects into IO and IO results
//!   into inputs, one input at a time, in the order they arrived;
//! - every sink write the feed asks for is reported back to it as accepted exactly once (the
//!   worker's `done_rows`/`done_bytes`, or at once when the write cannot be sent), so the
//!   memory quota never leaks;
//! - `LoadSchema` is answered only once capture has passed the requested ts (the history then
//!   has every DDL up to it), with the epoch the meta store has now;
//! - the sink's checkpoint record follows `Effect::CheckpointPersisted` only.
//!   Every queue here has a named bound.
//!
//! The shell's fields are private: the API and metrics read it through accessors (inside a
//! query on the shell's own task), and change it only by [`Shell::deliver`]ing inputs;
//! membership comes from [`MetaBackend::on_tick`] and fencing from [`MetaBackend::fence_due`].

use crate::mask::scrub;
use crate::metabackend::MetaBackend;
use crate::metrics::Metrics;
use crate::net::Net;
use crate::sinkwork::{spawn_worker, SinkJob, SinkRegistry, SinkReport};
use crate::source::StoreSource;
use crate::upstream::CaptureShared;
use sluice_control::feed::{Feed, FeedNote, FeedOut};
use sluice_control::io::{SchemaSnapshot, TableInfo};
use sluice_control::msg::Message;
use sluice_control::node::NodeState;
use sluice_control::{Effect, Input, SinkCommand, TraceEvent};
use sluice_sink::RowBatch;
use sluice_types::{
    ChangefeedId, DdlEvent, DispatcherId, Epoch, InfluenceScope, Key, NodeId, RowEvent, TableId,
    TableSchema, Ts,
};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Period of the node's tick (the simulator's `TICK_MS`).
pub const TICK_MS: u64 = 100;
/// At most this many inputs are queued from peers and the API (beyond: 503, the sender retries).
pub const MAX_QUEUED_INPUTS: usize = 4096;
/// At most this many schema versions are cached as `Arc`s for sink batches.
pub const MAX_SCHEMA_CACHE: usize = 4096;
/// The event store is garbage-collected this often, up to the minimum checkpoint.
pub const GC_INTERVAL: Duration = Duration::from_secs(30);
pub use crate::applied::APPLIED_READ_TIMEOUT;
/// The sink's own checkpoint record (storage `metadata`) is written at most this often.
pub const SINK_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

pub type QueryFn = Box<dyn FnOnce(&mut Shell) + Send>;

#[allow(clippy::large_enum_variant)] // one message at a time through a bounded queue
pub enum ShellMsg {
    Input(Input),
    Query(QueryFn),
    Shutdown(oneshot::Sender<()>),
}

struct Worker {
    tx: mpsc::UnboundedSender<SinkJob>,
}

pub struct Shell {
    node_id: NodeId,
    incarnation: u64,
    node: NodeState,
    advertise_addr: String,
    start: Instant,
    capture: Arc<CaptureShared>,
    meta: MetaBackend,
    net: Net,
    local: VecDeque<Input>,
    /// The data path: subscriptions, rows between the event store and the sinks, the quota.
    feed: Feed<RowEvent>,
    quota_bytes: u64,
    workers: BTreeMap<(ChangefeedId, DispatcherId), Worker>,
    sink_uris: BTreeMap<ChangefeedId, String>,
    schema_waits: Vec<(ChangefeedId, Epoch, Ts, Instant)>,
    schema_cache: BTreeMap<(TableId, Ts), Arc<TableSchema>>,
    registry: Arc<SinkRegistry>,
    report_tx: mpsc::UnboundedSender<SinkReport>,
    metrics: Arc<Metrics>,
    sink_cp_written: BTreeMap<ChangefeedId, (Ts, Instant)>,
    last_gc: Instant,
    /// The capture error last given to the control plane (`Input::CaptureStatus`).
    capture_error_sent: Option<String>,
    regions: BTreeMap<TableId, (Vec<Key>, u64)>,
    /// The last checkpoint this node's coordinator persisted, per changefeed
    /// (`Effect::CheckpointPersisted`).
    persisted: BTreeMap<ChangefeedId, Ts>,
    stopping: bool,
    store_path: std::path::PathBuf,
    /// Live nodes and their addresses, as membership says.
    members: BTreeMap<NodeId, String>,
    /// The upstream URL, for views (masked before it is shown).
    upstream_masked: String,
    /// What was captured at the previous GC round (the GC bound when there is no changefeed).
    idle_gc_mark: Ts,
    /// The upstream URL (snapshot reads connect with it).
    upstream: String,
    /// Snapshot chunk reads report back here (`crate::snapshot`); `run` takes the receiver.
    chunk_tx: mpsc::UnboundedSender<crate::snapshot::SnapshotDone>,
    chunk_rx: Option<mpsc::UnboundedReceiver<crate::snapshot::SnapshotDone>>,
    /// Chunks read ahead of capture, waiting for it to reach their position.
    chunk_waits: Vec<crate::snapshot::ChunkDone>,
    /// Chunk reads under way (spawned, not yet back): while there are any, capture hands on
    /// every heartbeat transaction, so the position a read is consistent at is soon captured.
    chunk_reads: usize,
    /// Per dispatcher, the position of its last chunk read and how many were read there.
    chunk_positions: BTreeMap<(ChangefeedId, DispatcherId), (Ts, u32)>,
    /// Upstream connections of snapshot reads (`crate::snapshot`).
    snapshot_pool: Option<mysql_async::Pool>,
    /// How snapshot reads find their position (`auto` turns to `window` once the upstream
    /// named none), and whether a failed low-watermark write was logged.
    snapshot_read: sluice_capture::snapshot_read::SnapshotRead,
    watermark_warned: bool,
}

impl Shell {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        node_id: NodeId,
        incarnation: u64,
        advertise_addr: String,
        capture: Arc<CaptureShared>,
        meta: MetaBackend,
        net: Net,
        quota_bytes: u64,
        metrics: Arc<Metrics>,
        report_tx: mpsc::UnboundedSender<SinkReport>,
        (store_path, upstream): (std::path::PathBuf, String),
    ) -> Shell {
        let (chunk_tx, chunk_rx) = mpsc::unbounded_channel();
        let upstream_masked = crate::mask::mask_url(&upstream);
        Shell {
            node: NodeState::new(node_id.clone(), incarnation),
            feed: Feed::new(node_id.clone(), quota_bytes),
            node_id,
            incarnation,
            advertise_addr,
            start: Instant::now(),
            capture,
            meta,
            net,
            local: VecDeque::new(),
            quota_bytes,
            workers: BTreeMap::new(),
            sink_uris: BTreeMap::new(),
            schema_waits: Vec::new(),
            schema_cache: BTreeMap::new(),
            registry: Arc::new(SinkRegistry::default()),
            report_tx,
            metrics,
            sink_cp_written: BTreeMap::new(),
            last_gc: Instant::now(),
            capture_error_sent: None,
            regions: BTreeMap::new(),
            persisted: BTreeMap::new(),
            stopping: false,
            store_path,
            members: BTreeMap::new(),
            upstream_masked,
            idle_gc_mark: 0,
            upstream,
            chunk_tx,
            chunk_rx: Some(chunk_rx),
            chunk_waits: Vec::new(),
            chunk_reads: 0,
            chunk_positions: BTreeMap::new(),
            snapshot_pool: None,
            snapshot_read: Default::default(),
            watermark_warned: false,
        }
    }

    pub fn set_snapshot_read(&mut self, how: sluice_capture::snapshot_read::SnapshotRead) {
        self.snapshot_read = how;
    }

    pub(crate) fn snapshot_read(&self) -> sluice_capture::snapshot_read::SnapshotRead {
        self.snapshot_read
    }

    /// A chunk came back as a window read: `auto` reads so from now on (the upstream names no
    /// position), and a failed low-watermark write is said once.
    pub(crate) fn note_window_read(&mut self, watermark_failed: Option<&str>) {
        use sluice_capture::snapshot_read::SnapshotRead;
        if self.snapshot_read == SnapshotRead::Auto {
            tracing::info!("snapshot: the upstream names no position for its consistent reads (MySQL); snapshot chunks are window reads from now on");
            self.snapshot_read = SnapshotRead::Window;
        }
        if let Some(why) = watermark_failed.filter(|_| !self.watermark_warned) {
            self.watermark_warned = true;
            tracing::warn!(
                "snapshot window reads: the low-watermark write to sluice.heartbeat failed ({}); \
                 each read then relies on the upstream committing what capture saw before the \
                 read began (grant INSERT, UPDATE, CREATE on sluice.*; see docs/configuration.md, \"Snapshot\")",
                crate::mask::scrub(why)
            );
        }
    }

    /// The lowest ts the event store must keep for the feed's snapshot window reads.
    pub(crate) fn feed_window_floor(&self) -> Option<Ts> {
        self.feed.window_floor()
    }

    pub(crate) fn snapshot_pool_slot(&self) -> Option<&mysql_async::Pool> {
        self.snapshot_pool.as_ref()
    }

    pub(crate) fn set_snapshot_pool(&mut self, pool: mysql_async::Pool) {
        self.snapshot_pool = Some(pool);
    }

    /// How many chunks of the dispatcher were read at the same position in a row.
    pub(crate) fn same_position_reads(&self, cf: &ChangefeedId, id: DispatcherId) -> u32 {
        self.chunk_positions
            .get(&(cf.clone(), id))
            .map_or(0, |p| p.1)
    }

    pub(crate) fn note_chunk_position(&mut self, cf: &ChangefeedId, id: DispatcherId, at: Ts) {
        let e = self
            .chunk_positions
            .entry((cf.clone(), id))
            .or_insert((at, 0));
        *e = if e.0 == at { (at, e.1 + 1) } else { (at, 1) };
        if self.chunk_positions.len() > 4 * crate::snapshot::MAX_CHUNK_WAITS {
            self.chunk_positions.clear(); // bounded; a lost count only delays a nudge
        }
    }

    pub(crate) fn upstream_url(&self) -> &str {
        &self.upstream
    }

    pub(crate) fn chunk_sender(&self) -> mpsc::UnboundedSender<crate::snapshot::SnapshotDone> {
        self.chunk_tx.clone()
    }

    pub(crate) fn chunk_waits_len(&self) -> usize {
        self.chunk_waits.len()
    }

    pub(crate) fn push_chunk_wait(&mut self, d: crate::snapshot::ChunkDone) {
        self.chunk_waits.push(d);
        self.note_position_wanted();
    }

    /// A chunk read was spawned: capture hands on every heartbeat transaction from now on, so
    /// one committed before the read's snapshot is never skipped while the read is under way
    /// (its chunk would wait for the next one handed on).
    pub(crate) fn chunk_read_started(&mut self) {
        self.chunk_reads += 1;
        self.note_position_wanted();
    }

    /// A chunk read came back from its task (before it may wait for capture).
    pub(crate) fn chunk_read_ended(&mut self) {
        self.chunk_reads = self.chunk_reads.saturating_sub(1);
        self.note_position_wanted();
    }

    /// Tells capture whether something here waits for it to reach a position, so it hands on
    /// every heartbeat transaction at once instead of one a second: a chunk read under way or
    /// a chunk waiting, a snapshot copy not done (its chunks and its checkpoint follow the
    /// stream), a schema load (a changefeed's bootstrap) above what was captured.
    fn note_position_wanted(&self) {
        let captured = self.capture.captured();
        let wanted = self.chunk_reads > 0
            || !self.chunk_waits.is_empty()
            || self.schema_waits.iter().any(|w| w.2 > captured)
            || self
                .node
                .dispatcher_managers()
                .any(|(_, m)| m.copy_pending());
        self.capture
            .position_wanted
            .store(wanted, std::sync::atomic::Ordering::Relaxed);
    }

    /// Chunks waiting for capture whose position it has reached go to the feed.
    pub(crate) fn release_chunk_waits(&mut self) {
        if self.chunk_waits.is_empty() {
            return;
        }
        let captured = self.capture.captured();
        let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.chunk_waits)
            .into_iter()
            .partition(|d| d.result.as_ref().map_or(true, |c| c.position <= captured));
        self.chunk_waits = wait;
        self.note_position_wanted();
        for d in ready {
            self.on_chunk_done(d);
        }
    }

    /// Hand a chunk read (or its failure) to the feed and run what follows.
    pub(crate) fn chunk_to_feed(
        &mut self,
        cf: &ChangefeedId,
        id: DispatcherId,
        read_id: u64,
        read: Result<sluice_control::feed::ChunkRead<RowEvent>, String>,
    ) {
        let mut outs = Vec::new();
        self.feed.on_chunk(cf, id, read_id, read, &mut outs);
        for o in outs {
            self.feed_out(o);
        }
        self.drain();
        self.feed_all();
    }

    /// The control plane this shell drives (read-only: inputs go through [`Shell::deliver`]).
    pub fn node(&self) -> &NodeState {
        &self.node
    }

    pub fn node_id(&self) -> &NodeId {
        &self.node_id
    }

    pub fn advertise_addr(&self) -> &str {
        &self.advertise_addr
    }

    pub fn capture(&self) -> &Arc<CaptureShared> {
        &self.capture
    }

    pub fn is_cluster(&self) -> bool {
        self.meta.is_cluster()
    }

    /// The address `node` is reached at, as membership last said.
    pub fn addr_of(&self, node: &NodeId) -> Option<&String> {
        self.net.addrs.get(node)
    }

    /// The live members and their addresses, as membership last said.
    pub fn members(&self) -> &BTreeMap<NodeId, String> {
        &self.members
    }

    pub fn registry(&self) -> &Arc<SinkRegistry> {
        &self.registry
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The table's region boundaries as the upstream's statistics last gave them.
    pub fn regions_of(&self, table: TableId) -> Option<&Vec<Key>> {
        self.regions.get(&table).map(|(r, _)| r)
    }

    pub fn store_path(&self) -> &std::path::Path {
        &self.store_path
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// The upstream URL with its password masked.
    pub fn upstream_masked(&self) -> &str {
        &self.upstream_masked
    }

    pub fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Queue an input and run everything that follows from it.
    pub fn deliver(&mut self, input: Input) {
        self.local.push_back(input);
        self.drain();
    }

    /// Replace the node state by a fresh one (fencing: a new incarnation, nothing kept).
    pub fn reset(&mut self, incarnation: u64) {
        for (_, w) in std::mem::take(&mut self.workers) {
            let _ = w.tx.send(SinkJob::Close);
        }
        self.feed = Feed::new(self.node_id.clone(), self.quota_bytes);
        self.schema_waits.clear();
        self.local.clear();
        self.incarnation = incarnation;
        self.node = NodeState::new(self.node_id.clone(), incarnation);
        let regions: Vec<(TableId, (Vec<Key>, u64))> =
            self.regions.iter().map(|(t, r)| (*t, r.clone())).collect();
        for (table, (regions, rows)) in regions {
            self.local.push_back(Input::Regions {
                table,
                regions,
                rows,
            });
        }
    }

    fn drain(&mut self) {
        while let Some(input) = self.local.pop_front() {
            self.observe(&input);
            let now = self.now();
            let effects = self.node.handle(now, input);
            let src = StoreSource::now(&self.capture);
            let mut outs = Vec::new();
            for e in effects {
                self.feed.on_effect(&src, e, &mut outs);
            }
            for o in outs {
                self.feed_out(o);
            }
        }
    }

    /// Carry out what the feed asks for.
    fn feed_out(&mut self, o: FeedOut<RowEvent>) {
        match o {
            FeedOut::Input(i) => self.local.push_back(i),
            FeedOut::Open {
                cf,
                id,
                span,
                start_ts,
            } => self.sink_job(&cf, id, SinkJob::Open { span, start_ts }),
            FeedOut::Write {
                cf,
                id,
                rows,
                bytes,
                open,
                ..
            } => self.send_rows(cf, id, rows, bytes, open),
            FeedOut::Effect(e) => self.effect(e),
            FeedOut::Note(n) => self.feed_note(n),
        }
    }

    fn feed_note(&mut self, n: FeedNote) {
        match n {
            FeedNote::QuotaWait => self.metrics.error("memory_quota_wait"),
            FeedNote::Delivered { cf, rows } => self.metrics.add_delivered(&cf, rows as u64),
            FeedNote::SourceError {
                cf,
                id,
                kind,
                message,
            } => {
                self.metrics.error(kind);
                tracing::error!(changefeed = %cf, dispatcher = ?id, "{message}");
            }
        }
    }

    /// Hand a job to a dispatcher's sink worker (started on first use).
    fn sink_job(&mut self, cf: &ChangefeedId, id: DispatcherId, job: SinkJob) {
        match self.worker(cf, id) {
            Some(w) => {
                let _ = w.tx.send(job);
            }
            None => self.sink_error(cf, id, format!("no sink URI known for changefeed {cf}")),
        }
    }

    /// Hand rows of whole transactions (with `open`, the last one continues in the next write)
    /// to a dispatcher's sink worker, one batch per table version; they are accounted until the
    /// worker reports them done.
    fn send_rows(
        &mut self,
        cf: ChangefeedId,
        id: DispatcherId,
        rows: Vec<RowEvent>,
        bytes: u64,
        open: bool,
    ) {
        let n = rows.len();
        let batches = match self.row_batches(rows) {
            Ok(b) => b,
            Err(m) => {
                self.feed.on_accepted(&cf, id, n, bytes);
                return self.sink_error(&cf, id, m);
            }
        };
        let job = SinkJob::Rows {
            batches,
            rows: n,
            bytes: bytes as usize,
            open,
        };
        let sent = match self.worker(&cf, id) {
            Some(w) => w.tx.send(job).is_ok(),
            None => {
                self.sink_error(&cf, id, format!("no sink URI known for changefeed {cf}"));
                false
            }
        };
        if !sent {
            self.feed.on_accepted(&cf, id, n, bytes);
        }
    }

    fn row_batches(&mut self, mut rows: Vec<RowEvent>) -> Result<Vec<RowBatch>, String> {
        // Where each run of one table version starts. Most writes are one run (a snapshot chunk,
        // a transaction of one table): its rows are moved as they are, not copied row by row.
        let same = |a: &RowEvent, b: &RowEvent| {
            a.table_id == b.table_id && a.schema_version == b.schema_version
        };
        let starts: Vec<usize> = (0..rows.len())
            .filter(|&i| i == 0 || !same(&rows[i - 1], &rows[i]))
            .collect();
        let mut batches: Vec<RowBatch> = Vec::with_capacity(starts.len());
        for &at in starts.iter().rev() {
            let run = match at {
                0 => std::mem::take(&mut rows),
                _ => rows.split_off(at),
            };
            let first = &run[0];
            let Some(schema) = self.schema_of(first.table_id, first.commit_ts) else {
                return Err(format!(
                    "no schema for table {} at commit ts {}",
                    first.table_id, first.commit_ts
                ));
            };
            batches.push(RowBatch { schema, rows: run });
        }
        batches.reverse();
        Ok(batches)
    }

    fn observe(&mut self, input: &Input) {
        if let Input::Regions {
            table,
            regions,
            rows,
        } = input
        {
            self.regions.insert(*table, (regions.clone(), *rows));
        }
        if let Input::Message {
            msg: Message::Bootstrap { cf, config, .. } | Message::AddMaintainer { cf, config, .. },
            ..
        } = input
        {
            crate::mask::register_url(&config.sink_uri);
            self.registry.set_rules(cf, &config.sink_dispatchers);
            self.sink_uris.insert(cf.clone(), config.sink_uri.clone());
        }
    }

    /// Periodic work: the tick, event delivery, schema answers, GC.
    /// Membership and leadership as the meta store says, delivered when they changed.
    fn on_membership_tick(&mut self) {
        let me = crate::metabackend::Me {
            id: &self.node_id,
            addr: &self.advertise_addr,
            incarnation: self.incarnation,
        };
        let m = self.meta.on_tick(&me);
        if let Some(members) = m.members {
            self.members = members;
        }
        for (n, a) in m.addrs {
            self.net.addrs.insert(n, a);
        }
        for i in m.inputs {
            self.deliver(i);
        }
    }

    /// A lease not renewed for nearly its TTL: drop everything and rejoin as a new incarnation.
    fn check_fence(&mut self) {
        if let Some(next) = self.meta.fence_due(self.incarnation) {
            self.reset(next);
        }
    }

    pub fn on_tick(&mut self) {
        let capture_error = self.capture.error();
        if capture_error != self.capture_error_sent {
            self.capture_error_sent = capture_error.clone();
            self.local.push_back(Input::CaptureStatus {
                error: capture_error,
            });
        }
        self.local.push_back(Input::Tick);
        self.drain();
        self.release_chunk_waits();
        self.feed_all();
        self.answer_schemas();
        self.note_position_wanted();
        let due: Vec<(ChangefeedId, Ts)> = self
            .persisted
            .iter()
            .filter(|(cf, ts)| {
                self.sink_cp_written
                    .get(*cf)
                    .map(|(t, at)| **ts > *t && at.elapsed() >= SINK_CHECKPOINT_INTERVAL)
                    .unwrap_or(true)
            })
            .map(|(cf, ts)| (cf.clone(), *ts))
            .collect();
        for (cf, ts) in due {
            self.on_persisted_checkpoint(cf, ts);
        }
        if self.last_gc.elapsed() >= GC_INTERVAL {
            self.last_gc = Instant::now();
            self.gc();
        }
    }

    /// A meta result from an async backend.
    pub fn on_meta_input(&mut self, input: Input) {
        self.deliver(input);
    }

    pub fn on_sink_report(&mut self, r: SinkReport) {
        let key = (r.cf.clone(), r.id);
        if r.done_rows > 0 || r.done_bytes > 0 {
            self.feed
                .on_accepted(&r.cf, r.id, r.done_rows, r.done_bytes as u64);
        }
        if r.written_rows > 0 {
            self.metrics
                .add_written(&r.cf, r.written_rows as u64, r.done_bytes as u64);
        }
        if !r.row_lags.is_empty() {
            self.metrics.add_row_lags(&r.cf, &r.row_lags);
        }
        if r.finished {
            self.workers.remove(&key);
        }
        if let Some(Input::SinkError {
            message, retryable, ..
        }) = &r.input
        {
            self.metrics.error(if *retryable {
                "sink_retryable"
            } else {
                "sink_fatal"
            });
            tracing::warn!(changefeed = %r.cf, dispatcher = ?r.id, retryable, "sink error: {message}");
        }
        if let Some(input) = r.input {
            self.deliver(input);
        }
        // The sink took rows off the feed's quota: feed at once, not at the next tick (a
        // catch-up, with nothing new captured, was paced by the tick: one quota per 100 ms).
        if r.done_rows > 0 || r.done_bytes > 0 {
            self.feed_all();
        }
    }

    fn worker_uri(&self, cf: &ChangefeedId) -> Option<String> {
        if let Some(u) = self.sink_uris.get(cf) {
            return Some(u.clone());
        }
        let f = self
            .node
            .coordinator()
            .and_then(|c| c.feeds().into_iter().find(|f| &f.id == cf))?;
        self.registry.set_rules(cf, &f.config.sink_dispatchers);
        Some(f.sink_uri)
    }

    fn worker(&mut self, cf: &ChangefeedId, id: DispatcherId) -> Option<&mut Worker> {
        let key = (cf.clone(), id);
        if !self.workers.contains_key(&key) {
            let uri = self.worker_uri(cf)?;
            let tx = spawn_worker(
                self.registry.clone(),
                cf.clone(),
                id,
                uri,
                self.incarnation,
                self.report_tx.clone(),
            );
            self.workers.insert(key.clone(), Worker { tx });
        }
        self.workers.get_mut(&key)
    }

    fn sink_error(&mut self, cf: &ChangefeedId, id: DispatcherId, message: String) {
        self.local.push_back(Input::SinkError {
            cf: cf.clone(),
            id,
            retryable: false,
            table_only: false,
            message,
        });
    }

    fn effect(&mut self, e: Effect) {
        match e {
            Effect::Send { to, msg } => {
                if to == self.node_id {
                    self.local.push_back(Input::Message {
                        from: self.node_id.clone(),
                        msg,
                    });
                } else {
                    self.net.send(&to, self.node_id.clone(), msg);
                }
            }
            Effect::Meta { req, op } => {
                let result = match self.meta.apply_now(&op) {
                    Some(result) => Some(result),
                    None => self.meta.apply_async(req, op),
                };
                if let Some(result) = result {
                    self.local.push_back(Input::MetaResult { req, result });
                }
            }
            Effect::LoadSchema { cf, epoch, at_ts } => {
                // Answered on the next tick (capture may have to catch up to `at_ts` first).
                self.schema_waits.push((cf, epoch, at_ts, Instant::now()));
                self.note_position_wanted();
            }
            Effect::LoadApplied {
                cf,
                epoch,
                sink_uri,
                after,
            } => {
                let (registry, tx) = (self.registry.clone(), self.report_tx.clone());
                crate::applied::spawn_load_applied(registry, tx, cf, epoch, sink_uri, after);
            }
            Effect::LoadFloor {
                cf,
                id,
                table,
                sink_uri,
                after,
            } => self.load_floor(cf, id, sink_uri, table, after),
            // The feed's: they never reach the shell.
            Effect::Subscribe { .. } | Effect::Unsubscribe { .. } => {}
            Effect::ReadChunk(ask) => self.read_snapshot_chunk(ask),
            Effect::ProbeChunks(probe) => self.probe_snapshot_chunks(probe),
            Effect::Sink(cmd) => self.sink_command(cmd),
            Effect::CheckpointPersisted { cf, ts } => self.on_persisted_checkpoint(cf, ts),
            Effect::Trace(t) => self.trace(t),
        }
    }

    fn trace(&mut self, t: TraceEvent) {
        match &t {
            TraceEvent::Log(s) => tracing::debug!("{}", scrub(s)),
            TraceEvent::Stale { kind, reason } => {
                self.metrics.error("stale_message");
                tracing::debug!(kind, reason, "stale message dropped");
            }
            TraceEvent::ChangefeedRestarted { cf, reason } => {
                self.metrics.error("changefeed_restart");
                tracing::warn!(changefeed = %cf, "changefeed restarted: {}", scrub(reason));
            }
            TraceEvent::RequestDone { cf, req, outcome } => {
                tracing::info!(changefeed = %cf, "request {req:?}: {outcome}")
            }
            TraceEvent::DispatcherStarted {
                cf,
                id,
                span,
                start_ts,
            } => {
                tracing::debug!(changefeed = %cf, dispatcher = ?id, span = ?span, start_ts, "dispatcher started")
            }
            TraceEvent::DispatcherClosed { cf, id } => {
                tracing::debug!(changefeed = %cf, dispatcher = ?id, "dispatcher closed")
            }
            TraceEvent::MaintainerBootstrapped { cf, epoch } => {
                tracing::info!(changefeed = %cf, epoch = epoch.0, "maintainer bootstrapped")
            }
            _ => {}
        }
    }

    fn sink_command(&mut self, cmd: SinkCommand) {
        match cmd {
            // The feed turns row writes into `FeedOut::Write`.
            SinkCommand::WriteRows { .. } => {}
            SinkCommand::WriteDdl { cf, id, ddl, .. } => {
                let tables = self.ddl_tables(&ddl);
                self.sink_job(&cf, id, SinkJob::Ddl { ddl, tables });
            }
            SinkCommand::Flush { cf, id } => self.sink_job(&cf, id, SinkJob::Flush),
            SinkCommand::Close { cf, id } => {
                let key = (cf.clone(), id);
                match self.workers.get(&key) {
                    Some(w) => {
                        if w.tx.send(SinkJob::Close).is_err() {
                            self.workers.remove(&key);
                            self.local.push_back(Input::SinkClosed { cf, id });
                        }
                    }
                    None => self.local.push_back(Input::SinkClosed { cf, id }),
                }
            }
        }
    }

    fn schema_of(&mut self, table: TableId, ts: Ts) -> Option<Arc<TableSchema>> {
        let h = self.capture.history();
        let s = h.table_by_id_at(table, ts)?;
        let key = (table, s.version);
        if let Some(a) = self.schema_cache.get(&key) {
            return Some(a.clone());
        }
        if self.schema_cache.len() >= MAX_SCHEMA_CACHE {
            self.schema_cache.clear();
        }
        let a = Arc::new(s.clone());
        // A version the first TABLE_MAP is still to complete (an unparsed DDL) changes in
        // place: cached, its rows would be written with the placeholder's columns.
        if !h.is_awaiting_binlog(table, ts) {
            self.schema_cache.insert(key, a.clone());
        }
        Some(a)
    }

    /// The table versions a DDL produces (empty for database-level DDLs and drops).
    fn ddl_tables(&mut self, ddl: &DdlEvent) -> Vec<Arc<TableSchema>> {
        let mut ids: Vec<TableId> = match &ddl.influence.scope {
            InfluenceScope::Tables(ts) => ts.clone(),
            _ => Vec::new(),
        };
        ids.extend(ddl.influence.added.iter().map(|(t, _)| *t));
        ids.extend(ddl.influence.renamed.iter().map(|(t, _)| *t));
        ids.sort();
        ids.dedup();
        ids.into_iter()
            .filter_map(|t| self.schema_of(t, ddl.commit_ts))
            .collect()
    }

    // ------------------------------------------------------------------ event delivery

    /// Let the feed read for every dispatcher that takes events now.
    pub fn feed_all(&mut self) {
        let src = StoreSource::now(&self.capture);
        let mut outs = Vec::new();
        let node = &self.node;
        self.feed
            .poll(&src, |cf, id| node.wants_events(cf, id), &mut outs);
        for o in outs {
            self.feed_out(o);
        }
        self.drain();
    }

    // ------------------------------------------------------------------ schema

    fn answer_schemas(&mut self) {
        if self.schema_waits.is_empty() {
            return;
        }
        let captured = self.capture.captured();
        let waits = std::mem::take(&mut self.schema_waits);
        for (cf, epoch, at_ts, since) in waits {
            if captured < at_ts {
                self.schema_waits.push((cf, epoch, at_ts, since));
                continue;
            }
            let snapshot_ts = self.capture.history().snapshot_ts;
            if at_ts < snapshot_ts {
                // The history of this node starts later: answering would hide tables. The
                // maintainer waits (and its changefeed shows no progress) rather than bootstrap
                // from a wrong schema.
                if since.elapsed() < Duration::from_millis(TICK_MS * 2) {
                    self.metrics.error("schema_before_history");
                    tracing::error!(changefeed = %cf, at_ts, snapshot_ts, "cannot load the schema at ts {at_ts}: this node's schema history starts at {snapshot_ts}");
                }
                self.schema_waits.push((cf, epoch, at_ts, since));
                continue;
            }
            let Some(persisted_epoch) = self.meta.persisted_epoch(&cf, since) else {
                // The store could not be read since the request: ask again on the next tick.
                self.schema_waits.push((cf, epoch, at_ts, since));
                continue;
            };
            let history = self.capture.history();
            let tables = history
                .tables_at(at_ts)
                .into_iter()
                .filter(|t| !sluice_capture::schema::is_system_schema(&t.database))
                .map(|t| TableInfo {
                    id: t.table_id,
                    name: t.qualified_name(),
                    regions: self.regions_of(t.table_id).cloned().unwrap_or_default(),
                    splittable: !t.key_columns.is_empty(),
                })
                .collect();
            let ddls_after = history.ddls_after(at_ts).to_vec();
            let snapshot = SchemaSnapshot {
                at_ts,
                tables,
                ddls_after,
            };
            self.local.push_back(Input::Schema {
                cf,
                epoch,
                snapshot,
                persisted_epoch,
            });
        }
        self.drain();
    }

    /// A dispatcher's replay floor: the schema history at its start (from this node's capture)
    /// with the sink's record, read in a task (`applied.rs`). A start this node's history cannot
    /// describe gets no floor: its subscription reports that start as unservable.
    fn load_floor(
        &mut self,
        cf: ChangefeedId,
        id: DispatcherId,
        uri: String,
        table: TableId,
        after: Ts,
    ) {
        let history = self.capture.history();
        if after < history.snapshot_ts {
            self.local.push_back(Input::Floor {
                cf,
                id,
                result: Ok(after),
            });
            return;
        }
        let tables = history
            .tables_at(after)
            .into_iter()
            .map(|t| TableInfo {
                id: t.table_id,
                name: t.qualified_name(),
                regions: Vec::new(),
                splittable: !t.key_columns.is_empty(),
            })
            .collect();
        let snapshot = SchemaSnapshot {
            at_ts: after,
            tables,
            ddls_after: history.ddls_after(after).to_vec(),
        };
        let (registry, tx) = (self.registry.clone(), self.report_tx.clone());
        crate::applied::spawn_load_floor(registry, tx, cf, id, uri, snapshot, table);
    }

    // ------------------------------------------------------------------ checkpoints and GC

    fn on_persisted_checkpoint(&mut self, cf: ChangefeedId, ts: Ts) {
        self.persisted.insert(cf.clone(), ts);
        let due = self
            .sink_cp_written
            .get(&cf)
            .map(|(t, at)| ts > *t && at.elapsed() >= SINK_CHECKPOINT_INTERVAL)
            .unwrap_or(true);
        if !due {
            return;
        }
        let Some(uri) = self.worker_uri(&cf) else {
            return;
        };
        self.sink_cp_written
            .insert(cf.clone(), (ts, Instant::now()));
        let registry = self.registry.clone();
        tokio::spawn(async move {
            match registry.get(&cf, &uri).await {
                Ok(s) => {
                    if let Err(e) = s.write_checkpoint(ts).await {
                        tracing::warn!(changefeed = %cf, "writing the sink checkpoint: {}", scrub(&e.to_string()));
                    }
                }
                Err(e) => {
                    tracing::warn!(changefeed = %cf, "opening the sink for its checkpoint: {}", scrub(&e.to_string()))
                }
            }
        });
    }

    fn gc(&mut self) {
        // Up to the smallest changefeed checkpoint: the coordinator knows them all; other nodes
        // read the persisted checkpoints from the meta store. With no changefeed, up to what
        // was captured one GC interval ago (a changefeed created now starts at the head).
        let min: Option<Option<Ts>> = match self.node.coordinator() {
            Some(c) if c.is_ready() => Some(
                c.feeds()
                    .iter()
                    .filter(|f| f.state != sluice_control::coordinator::FeedState::Removed)
                    .map(|f| f.checkpoint)
                    .min(),
            ),
            _ => self.meta.min_checkpoint(),
        };
        let Some(min) = min else { return };
        let captured = self.capture.captured();
        let upto = match min {
            Some(m) => m.min(captured),
            None => std::mem::replace(&mut self.idle_gc_mark, captured),
        };
        // A snapshot window read settles its window from the store when its chunk goes out.
        let upto = self.feed_window_floor().map_or(upto, |f| upto.min(f));
        if upto > self.capture.store.gc_ts() {
            match self.capture.store.gc(upto) {
                Ok(n) => tracing::debug!(upto, rows = n, "event store gc"),
                Err(e) => tracing::warn!("event store gc: {e}"),
            }
        }
    }

    /// Bytes of the rows read from the event store and not yet accepted by a sink.
    pub fn inflight_bytes(&self) -> u64 {
        self.feed.inflight_bytes()
    }

    /// The memory quota those rows are held to.
    pub fn quota_bytes(&self) -> u64 {
        self.quota_bytes
    }

    /// Number of dispatchers running on this node, all changefeeds.
    pub fn dispatcher_count(&self) -> usize {
        self.node
            .dispatcher_managers()
            .map(|(_, dm)| dm.dispatchers().len())
            .sum()
    }
}

/// Runs the shell until shutdown.
pub async fn run(
    mut shell: Shell,
    mut rx: mpsc::Receiver<ShellMsg>,
    mut reports: mpsc::UnboundedReceiver<SinkReport>,
    mut meta_rx: mpsc::UnboundedReceiver<Input>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut captured = shell.capture.captured.subscribe();
    let Some(mut chunks) = shell.chunk_rx.take() else {
        return;
    };
    loop {
        shell.check_fence();
        tokio::select! {
            _ = tick.tick() => {
                shell.on_membership_tick();
                shell.on_tick();
            }
            Some(r) = reports.recv() => shell.on_sink_report(r),
            Some(c) = chunks.recv() => match c {
                crate::snapshot::SnapshotDone::Chunk(c) => {
                    shell.chunk_read_ended();
                    shell.on_chunk_done(c);
                }
                crate::snapshot::SnapshotDone::Bounds(i) => shell.deliver(i),
            },
            Some(i) = meta_rx.recv() => shell.on_meta_input(i),
            // Chunks waiting for this position go at once, not at the next tick.
            Ok(()) = captured.changed() => {
                shell.release_chunk_waits();
                shell.feed_all();
            }
            m = rx.recv() => match m {
                Some(ShellMsg::Input(i)) => shell.deliver(i),
                Some(ShellMsg::Query(f)) => f(&mut shell),
                Some(ShellMsg::Shutdown(done)) => {
                    shell.stopping = true;
                    let _ = done.send(());
                    break;
                }
                None => break,
            },
        }
    }
}
