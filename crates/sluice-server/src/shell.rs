//! The node shell: one task owns this node's [`NodeState`] and is the only thing that touches
//! it. It delivers ticks (every [`TICK_MS`]), membership and leadership, meta-store results,
//! messages from peers, event batches and sink acknowledgements, and carries out the effects —
//! the real-IO counterpart of the simulator's world (`crates/sluice-sim/src/world.rs`).
//!
//! Invariants:
//! - the state machines run unchanged: the shell only turns effects into IO and IO results
//!   into inputs, one input at a time, in the order they arrived;
//! - an event batch holds whole transactions only, in commit-ts order, and its resolved ts never
//!   passes what capture has made complete (`CaptureShared::captured`, published after the
//!   history covering it), so every row's schema can be looked up;
//! - `LoadSchema` is answered only once capture has passed the requested ts (the history then
//!   has every DDL up to it), with the epoch the meta store has now;
//! - memory: rows read from the event store and not yet accepted by a sink are accounted
//!   (bytes, per server) against `memory_quota_bytes` and (rows, per dispatcher) against
//!   [`MAX_INFLIGHT_ROWS_PER_DISPATCHER`]; no more rows are read while either is exceeded.
//!   Every other queue here has a named bound.

use crate::mask::scrub;
use crate::metabackend::MetaBackend;
use crate::metrics::Metrics;
use crate::net::Net;
use crate::sinkwork::{spawn_worker, SinkJob, SinkRegistry, SinkReport};
use crate::upstream::CaptureShared;
use sluice_control::coordinator::ChangefeedStatusRecord;
use sluice_control::io::{SchemaSnapshot, TableInfo};
use sluice_control::meta::{keys, MetaOp, MetaResult};
use sluice_control::msg::Message;
use sluice_control::node::NodeState;
use sluice_control::{Effect, Input, SinkCommand, StreamItem, TraceEvent};
use sluice_sink::RowBatch;
use sluice_types::{
    ChangefeedId, DdlEvent, DispatcherId, Epoch, InfluenceScope, Key, NodeId, RowEvent, Span,
    TableId, TableSchema, Ts, Value,
};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Period of the node's tick (the simulator's `TICK_MS`).
pub const TICK_MS: u64 = 100;
/// At most this many rows go into one event batch of one dispatcher.
pub const MAX_ROWS_PER_DELIVERY: usize = 1024;
/// At most this many rows of one dispatcher are between the event store and the sink.
pub const MAX_INFLIGHT_ROWS_PER_DISPATCHER: usize = 8192;
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

struct Sub {
    span: Span,
    is_trigger: bool,
    cursor: Ts,
}

struct Worker {
    tx: mpsc::UnboundedSender<SinkJob>,
    inflight_rows: usize,
}

pub struct Shell {
    pub node_id: NodeId,
    pub incarnation: u64,
    pub node: NodeState,
    pub advertise_addr: String,
    start: Instant,
    pub capture: Arc<CaptureShared>,
    pub meta: MetaBackend,
    pub net: Net,
    local: VecDeque<Input>,
    subs: BTreeMap<(ChangefeedId, DispatcherId), Sub>,
    workers: BTreeMap<(ChangefeedId, DispatcherId), Worker>,
    pending: BTreeMap<(ChangefeedId, DispatcherId), BTreeMap<u64, (RowEvent, usize)>>,
    /// Rows of the current handle() call's sink writes, per dispatcher (sent when it returns).
    batching: BTreeMap<(ChangefeedId, DispatcherId), Vec<(RowEvent, usize)>>,
    next_handle: u64,
    pub inflight_bytes: u64,
    pub quota_bytes: u64,
    pub sink_uris: BTreeMap<ChangefeedId, String>,
    schema_waits: Vec<(ChangefeedId, Epoch, Ts, Instant)>,
    schema_cache: BTreeMap<(TableId, Ts), Arc<TableSchema>>,
    pub registry: Arc<SinkRegistry>,
    report_tx: mpsc::UnboundedSender<SinkReport>,
    pub metrics: Arc<Metrics>,
    sink_cp_written: BTreeMap<ChangefeedId, (Ts, Instant)>,
    last_gc: Instant,
    /// The capture error last given to the control plane (`Input::CaptureStatus`).
    capture_error_sent: Option<String>,
    pub regions: BTreeMap<TableId, Vec<Key>>,
    /// The last checkpoint this node's coordinator persisted, per changefeed.
    pub persisted: BTreeMap<ChangefeedId, Ts>,
    pub stopping: bool,
    pub store_path: std::path::PathBuf,
    /// Live nodes and their addresses, as membership says.
    pub members: BTreeMap<NodeId, String>,
    /// The upstream URL, for views (masked before it is shown).
    pub upstream_masked: String,
    /// Checkpoints carried by meta transactions in flight (async backends), by request.
    meta_checkpoints: BTreeMap<u64, Vec<(ChangefeedId, Ts)>>,
    /// What was captured at the previous GC round (the GC bound when there is no changefeed).
    idle_gc_mark: Ts,
}

fn value_size(v: &Value) -> usize {
    16 + match v {
        Value::Text(s) | Value::Decimal(s) | Value::Json(s) => s.len(),
        Value::Bytes(b) | Value::Geometry(b) => b.len(),
        Value::Enum { name, .. } => name.len(),
        Value::Set { names, .. } => names.iter().map(|n| n.len()).sum(),
        _ => 0,
    }
}

pub fn row_size(r: &RowEvent) -> usize {
    let img = |i: &Option<Vec<Value>>| {
        i.as_ref()
            .map(|v| v.iter().map(value_size).sum::<usize>())
            .unwrap_or(0)
    };
    96 + r.key.0.len() + img(&r.before) + img(&r.after)
}

/// Whether a DDL concerns the dispatcher of table `table` (database `db`).
fn ddl_concerns(ddl: &DdlEvent, table: TableId, db: Option<&str>) -> bool {
    let inf = &ddl.influence;
    let scoped = match &inf.scope {
        InfluenceScope::Tables(ts) => ts.contains(&table),
        InfluenceScope::Database(d) => db.map(|x| x == d).unwrap_or(false),
        InfluenceScope::All => true,
    };
    scoped
        || inf.dropped.contains(&table)
        || inf.renamed.iter().any(|(t, _)| *t == table)
        || inf.sources.contains(&table)
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
    ) -> Shell {
        Shell {
            node: NodeState::new(node_id.clone(), incarnation),
            node_id,
            incarnation,
            advertise_addr,
            start: Instant::now(),
            capture,
            meta,
            net,
            local: VecDeque::new(),
            subs: BTreeMap::new(),
            workers: BTreeMap::new(),
            pending: BTreeMap::new(),
            batching: BTreeMap::new(),
            next_handle: 1,
            inflight_bytes: 0,
            quota_bytes,
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
            store_path: std::path::PathBuf::new(),
            members: BTreeMap::new(),
            upstream_masked: String::new(),
            meta_checkpoints: BTreeMap::new(),
            idle_gc_mark: 0,
        }
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
        self.subs.clear();
        self.pending.clear();
        self.inflight_bytes = 0;
        self.schema_waits.clear();
        self.batching.clear();
        self.local.clear();
        self.incarnation = incarnation;
        self.node = NodeState::new(self.node_id.clone(), incarnation);
        let regions: Vec<(TableId, Vec<Key>)> =
            self.regions.iter().map(|(t, r)| (*t, r.clone())).collect();
        for (table, regions) in regions {
            self.local.push_back(Input::Regions { table, regions });
        }
    }

    fn drain(&mut self) {
        while let Some(input) = self.local.pop_front() {
            self.observe(&input);
            let now = self.now();
            let effects = self.node.handle(now, input);
            for e in effects {
                self.effect(e);
            }
            // The rows of one handle() call go out together: the control plane cuts sink writes
            // at a row count, possibly inside a transaction, while a sink call must carry whole
            // transactions. One call always emits every row of the transactions it consumed.
            let keys: Vec<(ChangefeedId, DispatcherId)> = self.batching.keys().cloned().collect();
            for k in keys {
                self.send_rows(&k);
            }
        }
    }

    /// Hand the rows gathered for a dispatcher to its sink worker.
    fn send_rows(&mut self, key: &(ChangefeedId, DispatcherId)) {
        let Some(taken) = self.batching.remove(key) else {
            return;
        };
        let (cf, id) = (key.0.clone(), key.1);
        let bytes: usize = taken.iter().map(|t| t.1).sum();
        let n = taken.len();
        let mut batches: Vec<RowBatch> = Vec::new();
        let mut failed = None;
        for (row, _) in taken {
            let same = batches
                .last()
                .map(|b| {
                    b.schema.table_id == row.table_id && b.schema.version == row.schema_version
                })
                .unwrap_or(false);
            if same {
                if let Some(b) = batches.last_mut() {
                    b.rows.push(row);
                }
                continue;
            }
            match self.schema_of(row.table_id, row.commit_ts) {
                Some(schema) => batches.push(RowBatch {
                    schema,
                    rows: vec![row],
                }),
                None => {
                    failed = Some(format!(
                        "no schema for table {} at commit ts {}",
                        row.table_id, row.commit_ts
                    ));
                    break;
                }
            }
        }
        if let Some(m) = failed {
            self.inflight_bytes = self.inflight_bytes.saturating_sub(bytes as u64);
            self.sink_error(&cf, id, m);
            return;
        }
        match self.worker(&cf, id) {
            Some(w) => {
                if w.tx
                    .send(SinkJob::Rows {
                        batches,
                        rows: n,
                        bytes,
                    })
                    .is_err()
                {
                    self.inflight_bytes = self.inflight_bytes.saturating_sub(bytes as u64);
                }
            }
            None => {
                self.inflight_bytes = self.inflight_bytes.saturating_sub(bytes as u64);
                self.sink_error(&cf, id, format!("no sink URI known for changefeed {cf}"));
            }
        }
    }

    fn observe(&mut self, input: &Input) {
        if let Input::Regions { table, regions } = input {
            self.regions.insert(*table, regions.clone());
        }
        if let Input::Message {
            msg: Message::Bootstrap { cf, config, .. } | Message::AddMaintainer { cf, config, .. },
            ..
        } = input
        {
            crate::mask::register_url(&config.sink_uri);
            self.sink_uris.insert(cf.clone(), config.sink_uri.clone());
        }
    }

    /// Periodic work: the tick, event delivery, schema answers, GC.
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
        self.feed_all();
        self.answer_schemas();
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
        if let Input::MetaResult { req, result } = &input {
            if let Some(cps) = self.meta_checkpoints.remove(req) {
                if matches!(
                    result,
                    MetaResult::Txn {
                        succeeded: true,
                        ..
                    }
                ) {
                    for (cf, ts) in cps {
                        self.on_persisted_checkpoint(cf, ts);
                    }
                }
            }
        }
        self.deliver(input);
    }

    pub fn on_sink_report(&mut self, r: SinkReport) {
        let key = (r.cf.clone(), r.id);
        if r.done_rows > 0 || r.done_bytes > 0 {
            self.inflight_bytes = self.inflight_bytes.saturating_sub(r.done_bytes as u64);
            if let Some(w) = self.workers.get_mut(&key) {
                w.inflight_rows = w.inflight_rows.saturating_sub(r.done_rows);
            }
        }
        if r.written_rows > 0 {
            self.metrics
                .add_written(&r.cf, r.written_rows as u64, r.done_bytes as u64);
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
    }

    fn worker_uri(&self, cf: &ChangefeedId) -> Option<String> {
        if let Some(u) = self.sink_uris.get(cf) {
            return Some(u.clone());
        }
        self.node.coordinator().and_then(|c| {
            c.feeds()
                .into_iter()
                .find(|f| &f.id == cf)
                .map(|f| f.sink_uri)
        })
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
            self.workers.insert(
                key.clone(),
                Worker {
                    tx,
                    inflight_rows: 0,
                },
            );
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

    fn release_pending(
        &mut self,
        key: &(ChangefeedId, DispatcherId),
        pred: impl Fn(u64, &RowEvent) -> bool,
    ) {
        if let Some(p) = self.pending.get_mut(key) {
            let drop: Vec<u64> = p
                .iter()
                .filter(|(h, (r, _))| pred(**h, r))
                .map(|(h, _)| *h)
                .collect();
            let mut rows = 0;
            for h in drop {
                if let Some((_, b)) = p.remove(&h) {
                    self.inflight_bytes = self.inflight_bytes.saturating_sub(b as u64);
                    rows += 1;
                }
            }
            if let Some(w) = self.workers.get_mut(key) {
                w.inflight_rows = w.inflight_rows.saturating_sub(rows);
            }
        }
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
            Effect::Meta { req, op } => match self.meta.apply_now(&op) {
                Some(result) => {
                    if let (
                        MetaResult::Txn {
                            succeeded: true, ..
                        },
                        MetaOp::Txn { puts, .. },
                    ) = (&result, &op)
                    {
                        for (k, v) in puts {
                            if let Some(cf) = k.strip_prefix(keys::CHANGEFEED_STATUS) {
                                if let Ok(st) = serde_json::from_slice::<ChangefeedStatusRecord>(v)
                                {
                                    self.on_persisted_checkpoint(
                                        ChangefeedId::new(cf),
                                        st.checkpoint_ts,
                                    );
                                }
                            }
                        }
                    }
                    self.local.push_back(Input::MetaResult { req, result });
                }
                None => {
                    if let MetaOp::Txn { puts, .. } = &op {
                        let cps: Vec<(ChangefeedId, Ts)> = puts
                            .iter()
                            .filter_map(|(k, v)| {
                                let cf = k.strip_prefix(keys::CHANGEFEED_STATUS)?;
                                let st =
                                    serde_json::from_slice::<ChangefeedStatusRecord>(v).ok()?;
                                Some((ChangefeedId::new(cf), st.checkpoint_ts))
                            })
                            .collect();
                        if !cps.is_empty() {
                            if self.meta_checkpoints.len() >= MAX_QUEUED_INPUTS {
                                self.meta_checkpoints.clear();
                            }
                            self.meta_checkpoints.insert(req, cps);
                        }
                    }
                    if let Some(result) = self.meta.apply_async(req, op) {
                        self.local.push_back(Input::MetaResult { req, result });
                    }
                }
            },
            Effect::LoadSchema { cf, epoch, at_ts } => {
                // Answered on the next tick (capture may have to catch up to `at_ts` first).
                self.schema_waits.push((cf, epoch, at_ts, Instant::now()));
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
            Effect::Subscribe {
                cf,
                id,
                span,
                is_trigger,
                start_ts,
            } => {
                let key = (cf.clone(), id);
                // This node's event store starts where its capture first started: it cannot
                // serve an older start, and must say so rather than deliver a silent gap.
                let floor = self
                    .capture
                    .history()
                    .snapshot_ts
                    .max(self.capture.store.gc_ts());
                if start_ts < floor {
                    self.metrics.error("start_before_event_store");
                    let m = format!(
                        "node {}: the event store starts at ts {floor}, after this dispatcher's start ts {start_ts}; \
                         the node joined or was reset after the changefeed's checkpoint (cordon it, or recreate the changefeed)",
                        self.node_id
                    );
                    tracing::error!(changefeed = %cf, dispatcher = ?id, "{m}");
                    self.sink_error(&cf, id, m);
                    return;
                }
                if let Some(s) = self.subs.get_mut(&key) {
                    s.cursor = start_ts;
                    self.release_pending(&key, |_, r| r.commit_ts > start_ts);
                } else {
                    self.subs.insert(
                        key,
                        Sub {
                            span: span.clone(),
                            is_trigger,
                            cursor: start_ts,
                        },
                    );
                }
                match self.worker(&cf, id) {
                    Some(w) => {
                        let _ = w.tx.send(SinkJob::Open { span, start_ts });
                    }
                    None => {
                        self.sink_error(&cf, id, format!("no sink URI known for changefeed {cf}"))
                    }
                }
            }
            Effect::Unsubscribe { cf, id } => {
                let key = (cf, id);
                self.subs.remove(&key);
                self.release_pending(&key, |_, _| true);
                self.pending.remove(&key);
            }
            Effect::Sink(cmd) => self.sink_command(cmd),
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
            SinkCommand::WriteRows {
                cf,
                id,
                span: _,
                rows,
            } => {
                let key = (cf.clone(), id);
                let max_handle = rows.iter().map(|r| r.2).max().unwrap_or(0);
                let mut taken: Vec<(RowEvent, usize)> = Vec::with_capacity(rows.len());
                let mut missing = 0usize;
                if let Some(p) = self.pending.get_mut(&key) {
                    for (_, _, h) in &rows {
                        match p.remove(h) {
                            Some(x) => taken.push(x),
                            None => missing += 1,
                        }
                    }
                } else {
                    missing = rows.len();
                }
                // Anything older than what is written now was dropped by the dispatcher.
                self.release_pending(&key, |h, _| h < max_handle);
                if missing > 0 {
                    let bytes: usize = taken.iter().map(|t| t.1).sum();
                    self.inflight_bytes = self.inflight_bytes.saturating_sub(bytes as u64);
                    self.sink_error(
                        &cf,
                        id,
                        format!(
                            "internal: {missing} rows of a sink write are no longer in the shell"
                        ),
                    );
                    return;
                }
                self.batching.entry(key).or_default().extend(taken);
            }
            SinkCommand::WriteDdl {
                cf,
                id,
                ddl,
                handle: _,
            } => {
                self.send_rows(&(cf.clone(), id));
                let tables = self.ddl_tables(&ddl);
                match self.worker(&cf, id) {
                    Some(w) => {
                        let _ = w.tx.send(SinkJob::Ddl { ddl, tables });
                    }
                    None => {
                        self.sink_error(&cf, id, format!("no sink URI known for changefeed {cf}"))
                    }
                }
            }
            SinkCommand::Flush { cf, id } => {
                self.send_rows(&(cf.clone(), id));
                match self.worker(&cf, id) {
                    Some(w) => {
                        let _ = w.tx.send(SinkJob::Flush);
                    }
                    None => {
                        self.sink_error(&cf, id, format!("no sink URI known for changefeed {cf}"))
                    }
                }
            }
            SinkCommand::Close { cf, id } => {
                let key = (cf.clone(), id);
                self.send_rows(&key);
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
        self.schema_cache.insert(key, a.clone());
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

    fn feed_all(&mut self) {
        let keys: Vec<(ChangefeedId, DispatcherId)> = self.subs.keys().cloned().collect();
        for k in keys {
            if self.inflight_bytes >= self.quota_bytes {
                self.metrics.error("memory_quota_wait");
                break;
            }
            self.feed(&k);
        }
        self.drain();
    }

    fn feed(&mut self, key: &(ChangefeedId, DispatcherId)) {
        let captured = self.capture.captured();
        let Some(sub) = self.subs.get(key) else {
            return;
        };
        if sub.cursor >= captured {
            return;
        }
        let inflight = self.workers.get(key).map(|w| w.inflight_rows).unwrap_or(0);
        if inflight >= MAX_INFLIGHT_ROWS_PER_DISPATCHER {
            return;
        }
        let (span, is_trigger, cursor) = (sub.span.clone(), sub.is_trigger, sub.cursor);
        let store = self.capture.store.clone();
        let history = self.capture.history();
        let mut items: Vec<StreamItem> = Vec::new();
        let mut upto = captured;
        let mut fetched: Vec<RowEvent> = Vec::new();
        if !is_trigger {
            match store.scan(&span, cursor, captured, MAX_ROWS_PER_DELIVERY) {
                Ok(batch) => {
                    let mut rows = batch.rows;
                    if batch.next.is_some() {
                        let first = rows.first().map(|r| r.commit_ts).unwrap_or(cursor);
                        let last = rows.last().map(|r| r.commit_ts).unwrap_or(cursor);
                        if first == last {
                            // One transaction larger than a delivery: it goes whole.
                            match store.scan(&span, last.saturating_sub(1), last, usize::MAX) {
                                Ok(b) => rows = b.rows,
                                Err(e) => {
                                    return self.sink_error(
                                        &key.0,
                                        key.1,
                                        format!("event store: {e}"),
                                    )
                                }
                            }
                            upto = last;
                        } else {
                            rows.retain(|r| r.commit_ts < last);
                            upto = last - 1;
                        }
                    }
                    fetched = rows;
                }
                Err(e) => {
                    let m = format!("event store: {e}");
                    self.metrics.error("event_store");
                    return self.sink_error(&key.0, key.1, m);
                }
            }
        }
        let ddls = match store.ddls(cursor, upto) {
            Ok(d) => d,
            Err(e) => return self.sink_error(&key.0, key.1, format!("event store: {e}")),
        };
        let db = if is_trigger {
            None
        } else {
            history
                .tables
                .get(&span.table)
                .and_then(|v| v.last())
                .map(|v| v.schema.database.clone())
        };
        let mut ddls: VecDeque<DdlEvent> = ddls
            .into_iter()
            .filter(|d| {
                if is_trigger {
                    d.influence.trigger
                } else {
                    ddl_concerns(d, span.table, db.as_deref())
                }
            })
            .collect();
        let pending = self.pending.entry(key.clone()).or_default();
        let mut added_bytes = 0u64;
        let n_rows = fetched.len();
        for row in fetched {
            while ddls
                .front()
                .map(|d| d.commit_ts < row.commit_ts)
                .unwrap_or(false)
            {
                if let Some(d) = ddls.pop_front() {
                    items.push(StreamItem::Ddl { ddl: d, handle: 0 });
                }
            }
            let h = self.next_handle;
            self.next_handle += 1;
            let size = row_size(&row);
            added_bytes += size as u64;
            items.push(StreamItem::Row {
                commit_ts: row.commit_ts,
                key: row.key.clone(),
                handle: h,
                kind: row.kind,
            });
            pending.insert(h, (row, size));
        }
        for d in ddls {
            items.push(StreamItem::Ddl { ddl: d, handle: 0 });
        }
        self.inflight_bytes += added_bytes;
        if let Some(w) = self.workers.get_mut(key) {
            w.inflight_rows += n_rows;
        }
        self.metrics.add_delivered(&key.0, n_rows as u64);
        if let Some(s) = self.subs.get_mut(key) {
            s.cursor = upto;
        }
        self.local.push_back(Input::Events {
            cf: key.0.clone(),
            id: key.1,
            items,
            resolved_ts: upto,
        });
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
                    regions: self.regions.get(&t.table_id).cloned().unwrap_or_default(),
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
        if upto > self.capture.store.gc_ts() {
            match self.capture.store.gc(upto) {
                Ok(n) => tracing::debug!(upto, rows = n, "event store gc"),
                Err(e) => tracing::warn!("event store gc: {e}"),
            }
        }
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
    loop {
        crate::metabackend::check_fence(&mut shell);
        tokio::select! {
            _ = tick.tick() => {
                crate::metabackend::on_tick(&mut shell);
                shell.on_tick();
            }
            Some(r) = reports.recv() => shell.on_sink_report(r),
            Some(i) = meta_rx.recv() => shell.on_meta_input(i),
            Ok(()) = captured.changed() => shell.feed_all(),
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
