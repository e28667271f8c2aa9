//! The maintainer: one per changefeed, placed by the coordinator with a fresh epoch. It owns the
//! changefeed's span map (absent / scheduling / replicating per span), the table trigger, the
//! operators, the schedulers, the barrier and the changefeed checkpoint.
//!
//! Invariants kept here:
//! - **bootstrap adopts, never ignores**: the table set is the schema at the start point plus
//!   every DDL after it; every dispatcher any node reports is tracked and either adopted by span,
//!   kept to finish the operator it was part of (with its intent), or removed; a create for a table
//!   that no longer exists becomes a cleanup.
//! - **one writer per key range across nodes**: a create (or merge) is sent only when no other
//!   dispatcher the maintainer knows of, on any node, overlaps the span (`Maintainer::can_create`);
//!   a dispatcher is forgotten only when its node confirmed it stopped, or the node is gone.
//! - **at most one operator per span**; requested operators queue behind operators in flight.
//! - **user requests survive it** ([`requests`]): accepted table requests and user-split marks
//!   are kept with the changefeed in the meta store (fenced by the epoch) and read back before a
//!   new maintainer's bootstrap ends.
//! - **checkpoint** = minimum over every span (whatever its state) and the table trigger, never
//!   backwards; a span's checkpoint only moves forward, from its own dispatcher's reports and the
//!   barrier (to `T - 1` when its dispatcher waits at a DDL at `T`, to `T` once a DDL its table
//!   took part in is written): a replacement never starts below a DDL that may have taken effect.
//! - **the replay rule** ([`replay`]) decides from a schema that knows every DDL the downstream
//!   recorded (loaded again if the first snapshot misses one).
//! - **stale traffic** (other epochs, other incarnations, regressed heartbeat sequence, reports from
//!   a node a span is not bound to) is dropped and counted.
//! - a retryable dispatcher error never reaches here; a fatal one is reported to the coordinator.
//!   Errors come once as `DispatcherError` and again in every heartbeat while the dispatcher is
//!   failed; only an error of a dispatcher this maintainer tracks on the sending node (and does not
//!   remove) counts, and only the first one is kept: the status carries it until this maintainer
//!   stops, and the coordinator acts on it once per maintainer epoch.

pub mod barrier;
mod bootstrap;
mod checkpoint;
pub mod operator;
mod parked;
pub mod replay;
mod reports;
pub mod requests;
mod rest;
mod scheduler;
pub mod snapshot;
mod spanmap;
mod tracked;

use crate::config::{
    ChangefeedConfig, APPLIED_RETRY_MS, BALANCE_INTERVAL_MS, MAINTAINER_STATUS_MS,
    MAX_ERRORS_PER_HEARTBEAT, MAX_OPERATORS_PER_ROUND, RESEND_MS,
};
use crate::io::{AppliedDdl, Effect, SchemaSnapshot, TraceEvent};
use crate::msg::{
    truncate_error, BarrierCommand, BlockReport, BlockStage, ClosePurpose, CopyReport,
    DispatcherPhase, DispatcherReport, MaintainerState, MaintainerStatus, Message, RejectReason,
    TableRequest,
};
use barrier::Barrier;
use operator::{span_key, OpKind, OpPhase, Operator, SpanKey};
use replay::ReplayBounds;
use requests::{request_table, PendingRequest, RequestStore};
use sluice_types::{
    ChangefeedId, DispatcherId, Epoch, InfluenceScope, Key, Millis, NodeId, Span, TableId, Ts,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What a maintainer reads of its node's world on every call.
pub struct Ctx<'a> {
    pub now: Millis,
    /// Alive nodes and their incarnations (from the meta store's membership).
    pub alive: &'a BTreeMap<NodeId, u64>,
    pub cordoned: &'a BTreeSet<NodeId>,
    pub draining: &'a BTreeSet<NodeId>,
    pub regions: &'a BTreeMap<TableId, Vec<Key>>,
    pub coordinator: Option<&'a NodeId>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpanState {
    Absent,
    /// An operator is in flight.
    Scheduling,
    Replicating,
}

#[derive(Clone, Debug)]
pub struct SpanEntry {
    pub span: Span,
    pub state: SpanState,
    /// The node and dispatcher serving it (replicating), or whose progress counts (scheduling).
    pub node: Option<NodeId>,
    pub dispatcher: Option<DispatcherId>,
    pub checkpoint: Ts,
    pub op: Option<u64>,
    /// Rows per second its dispatcher reported last.
    pub write_rate: u64,
    /// The resolved ts its dispatcher reported last.
    pub resolved: Ts,
    /// Its checkpoint is at or above its table's replay floor and no dispatcher served it yet
    /// (a bootstrap hole or a table this maintainer saw created): its first create tells the
    /// dispatcher so; every later one makes the dispatcher read the floor itself.
    pub floored: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tracked {
    /// Create or merge sent (or reported creating); not confirmed working.
    Requested,
    Working,
    /// Closing (remove sent or reported closing).
    Removing,
}

#[derive(Clone, Debug)]
struct TrackedDispatcher {
    node: NodeId,
    span: Span,
    phase: Tracked,
    checkpoint: Ts,
}

#[derive(Clone, Debug)]
struct TableState {
    name: String,
    /// Commit ts of the DDL that created it (0: it existed at the start point). A table takes
    /// part only in DDLs after its creation.
    created: Ts,
    splittable: bool,
    /// Split by a user request: the merge scheduler leaves it alone.
    user_split: bool,
    /// The node a user's move request put it on: the balancer leaves its spans there while
    /// they stay on that node (kept with the requests record: a successor keeps it too).
    placed_by_user: Option<NodeId>,
}

/// A second schema load at the end of the bootstrap ([`Maintainer::schema_knows_record`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SchemaRefresh {
    No,
    Asked,
    Done,
}

#[derive(Clone, Debug)]
enum Phase {
    Bootstrapping {
        responses: BTreeMap<NodeId, Vec<DispatcherReport>>,
        schema: Option<SchemaSnapshot>,
        /// What the downstream recorded after the start point, read once every node answered
        /// (so no dispatcher of an older epoch can still be told to write a DDL).
        applied: Option<Vec<AppliedDdl>>,
    },
    Working,
    Closing {
        pending: BTreeSet<NodeId>,
    },
    Stopped,
}

/// A maintainer's view of one span, for the API and the simulator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanView {
    pub span: Span,
    pub table_name: String,
    pub state: &'static str,
    pub node: Option<NodeId>,
    pub checkpoint: Ts,
    pub operator: Option<String>,
    /// Rows its dispatcher copied (snapshot), as it last reported; `None`: it copies nothing.
    pub snapshot_rows: Option<u64>,
}

pub struct Maintainer {
    cf: ChangefeedId,
    epoch: Epoch,
    node: NodeId,
    config: ChangefeedConfig,
    phase: Phase,
    start_checkpoint: Ts,
    committed: Ts,
    resolved: Ts,
    /// Nodes (with the incarnation) whose dispatcher manager answered this maintainer's bootstrap.
    ready: BTreeMap<NodeId, u64>,
    /// Bootstrap requests sent and not answered: node -> (incarnation, last send).
    bootstrapping: BTreeMap<NodeId, (u64, Millis)>,
    tables: BTreeMap<TableId, TableState>,
    spans: spanmap::SpanMap,
    tracked: tracked::TrackedMap,
    ops: BTreeMap<u64, Operator>,
    /// Operators `drive` skips until something wakes them (`parked.rs`).
    parked: parked::Parked,
    next_op: u64,
    next_seq: u64,
    trigger: DispatcherId,
    trigger_cp: Ts,
    trigger_resolved: Ts,
    barrier: Barrier,
    /// User requests (and the merge scheduler's) in the order they came; see `requests.rs`.
    requests: VecDeque<PendingRequest>,
    /// The persisted copy of the user requests and marks, and its reads and writes.
    store: RequestStore,
    hb_seen: BTreeMap<NodeId, (u64, u64)>,
    /// Per node, its resting dispatchers (see `rest.rs`).
    rests: BTreeMap<NodeId, rest::RestGroup>,
    /// The warnings each node's last heartbeat carried (nodes with none are absent).
    warnings: BTreeMap<NodeId, Vec<String>>,
    /// Capture stopped on this maintainer's own node (it may have no dispatchers yet: a
    /// bootstrap that waits for capture reports it through this).
    node_warning: Option<String>,
    last_status: Option<Millis>,
    /// The snapshot copy finished since the last status: the next tick sends one at once.
    status_due: bool,
    last_balance: Millis,
    error: Option<String>,
    pub stale_dropped: u64,
    /// Per node, dispatchers meant for incarnations of it that are gone (bounded): every later
    /// incarnation is told to refuse them (a create still in the network must not start there).
    forget: BTreeMap<NodeId, BTreeSet<DispatcherId>>,
    /// Which tables this changefeed replicates.
    filter: crate::filter::TableFilter,
    /// Where each table's replay starts, from what the downstream already applied
    /// ([`replay`]); set once at bootstrap.
    replay: ReplayBounds,
    /// When `LoadApplied` was last sent (`None`: not outstanding).
    applied_asked: Option<Millis>,
    /// The schema snapshot missed DDLs the downstream recorded: a newer one was asked for (once).
    schema_refresh: SchemaRefresh,
    /// Why the downstream's record could not be read (the bootstrap waits for it).
    sink_warning: Option<String>,
    /// Dispatchers ignored at bootstrap (only ever filled by the `bootstrap-ignores-unknown-tables`
    /// mutation, which reproduces TiCDC's behaviour in the seed bug).
    ignored: BTreeSet<DispatcherId>,
    /// Operator phases entered, by (kind, phase), for coverage reports.
    pub phase_counts: BTreeMap<(OpKind, OpPhase), u64>,
    /// The snapshot copy's progress by key range ([`snapshot`]).
    copies: snapshot::CopyMap,
    /// The changefeed has (had) a copy: its status is reported.
    copy_started: bool,
    /// The copy's progress changed since the record was last written.
    copy_dirty: bool,
    /// Each dispatcher's copy as it last reported it.
    copy_rows: BTreeMap<DispatcherId, CopyReport>,
    /// The upstream's row estimate of each table (its statistics, from the node).
    table_rows: BTreeMap<TableId, u64>,
}

impl Maintainer {
    /// A new maintainer of epoch `epoch` starting from `checkpoint`: asks for the schema history
    /// and bootstraps every alive node.
    pub fn new(
        ctx: &Ctx,
        cf: ChangefeedId,
        epoch: Epoch,
        node: NodeId,
        checkpoint: Ts,
        config: ChangefeedConfig,
        out: &mut Vec<Effect>,
    ) -> Self {
        let trigger = DispatcherId {
            epoch: epoch.0,
            seq: 0,
        };
        let filter = match crate::filter::TableFilter::new(&config.filter) {
            Ok(f) => f,
            Err(e) => {
                out.push(Effect::Trace(TraceEvent::Log(format!(
                    "maintainer {cf}: {e}; replicating every table"
                ))));
                crate::filter::TableFilter::all()
            }
        };
        let m = Maintainer {
            filter,
            cf: cf.clone(),
            epoch,
            node,
            config,
            phase: Phase::Bootstrapping {
                responses: BTreeMap::new(),
                schema: None,
                applied: None,
            },
            start_checkpoint: checkpoint,
            committed: checkpoint,
            resolved: checkpoint,
            ready: BTreeMap::new(),
            bootstrapping: BTreeMap::new(),
            tables: BTreeMap::new(),
            spans: Default::default(),
            tracked: Default::default(),
            ops: BTreeMap::new(),
            parked: Default::default(),
            next_op: 1,
            next_seq: 1,
            trigger,
            trigger_cp: checkpoint,
            trigger_resolved: checkpoint,
            barrier: Barrier::default(),
            requests: VecDeque::new(),
            store: RequestStore::start(&cf),
            hb_seen: BTreeMap::new(),
            rests: BTreeMap::new(),
            warnings: BTreeMap::new(),
            node_warning: None,
            last_status: None,
            status_due: false,
            last_balance: ctx.now,
            error: None,
            stale_dropped: 0,
            ignored: BTreeSet::new(),
            replay: ReplayBounds::default(),
            applied_asked: None,
            schema_refresh: SchemaRefresh::No,
            sink_warning: None,
            forget: BTreeMap::new(),
            phase_counts: BTreeMap::new(),
            copies: snapshot::CopyMap::default(),
            copy_started: false,
            copy_dirty: false,
            copy_rows: BTreeMap::new(),
            table_rows: BTreeMap::new(),
        };
        // First the schema history and the persisted epoch; the bootstrap starts only once this
        // maintainer knows it is not stale.
        out.push(Effect::LoadSchema {
            cf,
            epoch,
            at_ts: checkpoint,
        });
        m
    }

    // ------------------------------------------------------------------ views

    pub fn epoch(&self) -> Epoch {
        self.epoch
    }
    pub fn cf(&self) -> &ChangefeedId {
        &self.cf
    }
    pub fn checkpoint(&self) -> Ts {
        self.committed
    }
    pub fn is_bootstrapped(&self) -> bool {
        matches!(self.phase, Phase::Working)
    }
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped)
    }
    pub fn state(&self) -> MaintainerState {
        match self.phase {
            Phase::Bootstrapping { .. } => MaintainerState::Bootstrapping,
            Phase::Working => MaintainerState::Working,
            Phase::Closing { .. } => MaintainerState::Closing,
            Phase::Stopped => MaintainerState::Stopped,
        }
    }
    pub fn status(&self) -> MaintainerStatus {
        MaintainerStatus {
            cf: self.cf.clone(),
            epoch: self.epoch,
            state: self.state(),
            checkpoint: self.committed,
            resolved: self.resolved,
            error: self.error.clone(),
            warning: self
                .warnings
                .values()
                .flatten()
                .next()
                .or(self.node_warning.as_ref())
                .or(self.sink_warning.as_ref())
                .cloned(),
            snapshot: self.snapshot_status(),
        }
    }
    pub fn trigger_id(&self) -> DispatcherId {
        self.trigger
    }
    /// Live tables with their names.
    pub fn tables(&self) -> Vec<(TableId, String)> {
        self.tables
            .iter()
            .map(|(t, s)| (*t, s.name.clone()))
            .collect()
    }
    pub fn spans(&self) -> Vec<SpanView> {
        self.spans
            .values()
            .map(|e| SpanView {
                span: e.span.clone(),
                table_name: self
                    .tables
                    .get(&e.span.table)
                    .map(|t| t.name.clone())
                    .unwrap_or_default(),
                state: match e.state {
                    SpanState::Absent => "absent",
                    SpanState::Scheduling => "scheduling",
                    SpanState::Replicating if self.copies.copy_of(&e.span).is_some() => {
                        "snapshotting"
                    }
                    SpanState::Replicating => "replicating",
                },
                snapshot_rows: e
                    .dispatcher
                    .and_then(|d| self.copy_rows.get(&d))
                    .map(|c| c.rows),
                node: e.node.clone(),
                checkpoint: e.checkpoint,
                operator: e
                    .op
                    .and_then(|id| self.ops.get(&id))
                    .map(|o| format!("{}:{}", o.kind.name(), o.phase)),
            })
            .collect()
    }
    /// How many spans there are and how many of them replicate (`"replicating"` in
    /// [`Maintainer::spans`]), without building the views: from the span map's index while
    /// nothing is being copied.
    pub fn span_counts(&self) -> (usize, usize) {
        let replicating = if self.copies.is_empty() {
            self.spans.replicating()
        } else {
            self.spans
                .values()
                .filter(|e| {
                    e.state == SpanState::Replicating && self.copies.copy_of(&e.span).is_none()
                })
                .count()
        };
        (self.spans.len(), replicating)
    }
    /// Operators in flight: (kind, phase, table).
    pub fn operators(&self) -> Vec<(OpKind, OpPhase, TableId)> {
        self.ops
            .values()
            .map(|o| (o.kind, o.phase, o.table))
            .collect()
    }
    pub fn requests_in_flight(&self) -> Vec<TableRequest> {
        self.requests.iter().map(|r| r.req.clone()).collect()
    }
    pub fn table_busy(&self, table: TableId) -> bool {
        self.ops.values().any(|o| o.table == table)
            || self.requests.iter().any(|r| request_table(&r.req) == table)
    }
    /// The node of the writer chosen for the oldest blocking DDL still pending.
    pub fn pending_ddl_writer(&self) -> Option<NodeId> {
        self.barrier
            .events
            .values()
            .find(|e| !e.written)
            .and_then(|e| e.writer.as_ref().map(|w| w.1.clone()))
    }
    pub fn pending_barrier_events(&self) -> usize {
        self.barrier.events.len()
    }

    // ------------------------------------------------------------------ plumbing

    fn mint(&mut self) -> DispatcherId {
        let id = DispatcherId {
            epoch: self.epoch.0,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        id
    }

    fn send(&self, out: &mut Vec<Effect>, to: &NodeId, msg: Message) {
        out.push(Effect::Send {
            to: to.clone(),
            msg,
        });
    }

    fn log(&self, out: &mut Vec<Effect>, s: String) {
        out.push(Effect::Trace(TraceEvent::Log(format!(
            "maintainer {} {:?}: {s}",
            self.cf, self.epoch
        ))));
    }

    fn send_bootstrap(&mut self, now: Millis, node: &NodeId, inc: u64, out: &mut Vec<Effect>) {
        let trigger = if *node == self.node {
            Some((self.trigger, self.start_checkpoint))
        } else {
            None
        };
        self.send(
            out,
            node,
            Message::Bootstrap {
                cf: self.cf.clone(),
                epoch: self.epoch,
                trigger,
                config: self.config.clone(),
                forget: self
                    .forget
                    .get(node)
                    .map(|f| f.iter().copied().collect())
                    .unwrap_or_default(),
            },
        );
        self.bootstrapping.insert(node.clone(), (inc, now));
    }

    fn new_op(&mut self, kind: OpKind, table: TableId, key: Option<SpanKey>) -> Operator {
        let id = self.next_op;
        self.next_op += 1;
        Operator::new(id, kind, table, key)
    }

    fn insert_op(&mut self, op: Operator) {
        *self.phase_counts.entry((op.kind, op.phase)).or_default() += 1;
        if let Some(k) = &op.key {
            if let Some(mut e) = self.spans.get_mut(k) {
                e.op = Some(op.id);
                if op.kind != OpKind::Remove || !op.drop_entry {
                    e.state = SpanState::Scheduling;
                }
            }
        }
        self.parked.wake(op.id);
        self.ops.insert(op.id, op);
    }

    /// No dispatcher the maintainer knows of, other than `except`, may write keys of `span`.
    fn can_create(&self, span: &Span, except: &[DispatcherId]) -> bool {
        !self.tracked.any_overlaps(span, except)
    }

    fn schedulable(&self, ctx: &Ctx, node: &NodeId) -> bool {
        self.ready.contains_key(node)
            && ctx.alive.contains_key(node)
            && !ctx.cordoned.contains(node)
            && !ctx.draining.contains(node)
    }

    /// Split points for `span` from the table's regions: about `per_span` regions per piece, or
    /// exactly `pieces` pieces when asked.
    fn split_points(&self, ctx: &Ctx, span: &Span, pieces: Option<usize>) -> Vec<Key> {
        let Some(regions) = ctx.regions.get(&span.table) else {
            return Vec::new();
        };
        let inner: Vec<&Key> = regions
            .iter()
            .filter(|k| **k > span.start && **k < span.end)
            .collect();
        let count = inner.len() + 1;
        let want = match pieces {
            Some(p) => p,
            None => {
                let per = self.config.scheduler.region_count_per_span.max(1) as usize;
                count.div_ceil(per)
            }
        };
        if want < 2 || want > count {
            return Vec::new();
        }
        (1..want)
            .map(|i| inner[i * count / want - 1].clone())
            .collect()
    }

    /// Absent span entries for a whole table (split by regions when the settings say so).
    fn add_table_spans(&mut self, ctx: &Ctx, table: TableId, checkpoint: Ts) {
        let whole = Span::whole_table(table);
        self.add_hole_spans(ctx, &whole, checkpoint, true);
    }

    fn add_hole_spans(&mut self, ctx: &Ctx, hole: &Span, checkpoint: Ts, may_split: bool) {
        // Never below what the downstream already applied for this table (the replay rule).
        let checkpoint = checkpoint.max(self.replay.floor(hole.table));
        let splittable = self
            .tables
            .get(&hole.table)
            .map(|t| t.splittable)
            .unwrap_or(false);
        let sched = &self.config.scheduler;
        let regions = ctx
            .regions
            .get(&hole.table)
            .map(|r| r.len() as u64 + 1)
            .unwrap_or(1);
        let points = if may_split
            && splittable
            && sched.enable_table_across_nodes
            && regions > sched.region_threshold
        {
            self.split_points(ctx, hole, None)
        } else {
            Vec::new()
        };
        for s in hole.split_at(&points) {
            self.spans.insert(
                span_key(&s),
                SpanEntry {
                    span: s,
                    state: SpanState::Absent,
                    node: None,
                    dispatcher: None,
                    checkpoint,
                    op: None,
                    write_rate: 0,
                    resolved: 0,
                    floored: true,
                },
            );
        }
    }

    /// Key ranges of `table` not covered by the given spans.
    fn holes(table: TableId, covered: &[Span]) -> Vec<Span> {
        let whole = Span::whole_table(table);
        let mut v: Vec<&Span> = covered.iter().filter(|s| s.table == table).collect();
        v.sort_by(|a, b| a.start.cmp(&b.start));
        let mut at = whole.start.clone();
        let mut out = Vec::new();
        for s in v {
            if s.start > at {
                out.push(Span::new(table, at.clone(), s.start.clone()));
            }
            if s.end > at {
                at = s.end.clone();
            }
        }
        if at < whole.end {
            out.push(Span::new(table, at, whole.end));
        }
        out
    }

    // ------------------------------------------------------------------ inputs

    pub fn on_schema(
        &mut self,
        ctx: &Ctx,
        snapshot: SchemaSnapshot,
        persisted_epoch: Epoch,
        out: &mut Vec<Effect>,
    ) {
        let Phase::Bootstrapping { schema, .. } = &mut self.phase else {
            return;
        };
        if schema.is_some() {
            if self.schema_refresh == SchemaRefresh::Asked && persisted_epoch == self.epoch {
                *schema = Some(snapshot);
                self.schema_refresh = SchemaRefresh::Done;
                self.try_finish_bootstrap(ctx, out);
            }
            return;
        }
        if persisted_epoch != self.epoch {
            self.log(out, format!("stale maintainer: the changefeed's epoch is {persisted_epoch:?}; stopping before bootstrap"));
            self.phase = Phase::Stopped;
            return;
        }
        *schema = Some(snapshot);
        out.push(Effect::Trace(TraceEvent::MaintainerStarted {
            cf: self.cf.clone(),
            epoch: self.epoch,
        }));
        for (n, inc) in ctx.alive {
            self.send_bootstrap(ctx.now, n, *inc, out);
        }
        self.try_finish_bootstrap(ctx, out);
    }

    fn schema_loaded(&self) -> bool {
        matches!(
            self.phase,
            Phase::Bootstrapping {
                schema: Some(_),
                ..
            } | Phase::Working
        )
    }

    pub fn on_message(&mut self, ctx: &Ctx, from: &NodeId, msg: Message, out: &mut Vec<Effect>) {
        if let Some(e) = msg.epoch() {
            if e != self.epoch {
                self.stale_dropped += 1;
                out.push(Effect::Trace(TraceEvent::Stale {
                    kind: msg.kind(),
                    reason: "other maintainer epoch",
                }));
                return;
            }
        }
        match msg {
            Message::BootstrapResponse {
                incarnation,
                dispatchers,
                ..
            } => self.on_bootstrap_response(ctx, from, incarnation, dispatchers, out),
            Message::Heartbeat {
                incarnation,
                seq,
                complete,
                dispatchers,
                errors,
                warnings,
                rest,
                ..
            } => {
                if self.ready.get(from) != Some(&incarnation)
                    || ctx
                        .alive
                        .get(from)
                        .map(|a| *a > incarnation)
                        .unwrap_or(true)
                {
                    self.stale_dropped += 1;
                    return;
                }
                match self.hb_seen.get(from) {
                    Some((inc, s)) if *inc == incarnation && *s >= seq => {
                        self.stale_dropped += 1;
                        out.push(Effect::Trace(TraceEvent::Stale {
                            kind: "heartbeat",
                            reason: "sequence regressed",
                        }));
                        return;
                    }
                    _ => {}
                }
                let contiguous = matches!(self.hb_seen.get(from),
                    Some((inc, s)) if *inc == incarnation && s + 1 == seq);
                self.hb_seen.insert(from.clone(), (incarnation, seq));
                self.on_warnings(from, warnings);
                self.rest_begin(from, complete, contiguous);
                self.on_reports(ctx, from, &dispatchers, complete, rest, out);
                for e in errors.into_iter().take(MAX_ERRORS_PER_HEARTBEAT) {
                    self.on_dispatcher_error(from, e.id, e.message, out);
                }
            }
            Message::Rejected { id, reason, .. } => self.on_rejected(ctx, from, id, reason, out),
            Message::BlockStatus {
                id, span, report, ..
            } => {
                if matches!(self.phase, Phase::Working) {
                    self.on_block_status(ctx, from, id, &span, &report, out);
                }
            }
            Message::CloseChangefeedResponse { .. } => {
                if let Phase::Closing { pending } = &mut self.phase {
                    pending.remove(from);
                    if pending.is_empty() {
                        self.phase = Phase::Stopped;
                    }
                }
            }
            Message::DispatcherError { id, message, .. } => {
                self.on_dispatcher_error(from, id, message, out);
            }
            Message::TableRequest { req, .. } => self.on_request(ctx, req, out),
            other => out.push(Effect::Trace(TraceEvent::Stale {
                kind: other.kind(),
                reason: "not for a maintainer",
            })),
        }
    }

    /// Sets (or clears) the warning of this maintainer's own node.
    pub fn set_node_warning(&mut self, warning: Option<String>) {
        self.node_warning = warning;
    }

    /// The node's current warnings replace what it said before (none: it has none now).
    fn on_warnings(&mut self, from: &NodeId, mut warnings: Vec<String>) {
        warnings.truncate(MAX_ERRORS_PER_HEARTBEAT);
        if warnings.is_empty() {
            self.warnings.remove(from);
        } else {
            self.warnings.insert(from.clone(), warnings);
        }
    }

    /// A failed dispatcher's error (the one-shot message or a heartbeat's copy). It counts only
    /// for a dispatcher this maintainer tracks on that node and is not removing (an error of a
    /// dispatcher already replaced, or being replaced, is moot: its successor reports its own);
    /// the first one is kept, so seeing it again changes nothing.
    fn on_dispatcher_error(
        &mut self,
        from: &NodeId,
        id: DispatcherId,
        message: String,
        out: &mut Vec<Effect>,
    ) {
        let current = if id == self.trigger {
            *from == self.node
        } else {
            // A dispatcher of a table that no longer exists (dropped) is on its way out too.
            matches!(self.tracked.get(&id), Some(t) if t.node == *from
                && t.phase != Tracked::Removing
                && self.tables.contains_key(&t.span.table))
        };
        if !current {
            self.stale_dropped += 1;
            out.push(Effect::Trace(TraceEvent::Stale {
                kind: "dispatcher_error",
                reason: "not a dispatcher this maintainer runs there",
            }));
            return;
        }
        if self.error.is_some() {
            return;
        }
        let message = truncate_error(message);
        self.log(out, format!("dispatcher {id} on {from} failed: {message}"));
        self.error = Some(truncate_error(format!(
            "dispatcher {id} on {from}: {message}"
        )));
    }

    // ------------------------------------------------------------------ lifecycle

    pub fn on_nodes_changed(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        self.parked.wake_all();
        // Nodes gone (or back as a new incarnation): what ran there is gone.
        let gone: Vec<NodeId> = self
            .ready
            .iter()
            // Incarnations only grow: a view that still shows an older one is just late.
            .filter(|(n, inc)| ctx.alive.get(*n).map(|a| a > *inc).unwrap_or(true))
            .map(|(n, _)| n.clone())
            .collect();
        for n in gone {
            self.ready.remove(&n);
            self.hb_seen.remove(&n);
            self.rest_forget(&n);
            self.warnings.remove(&n);
            let ids: Vec<DispatcherId> = self
                .tracked
                .iter()
                .filter(|(_, t)| t.node == n)
                .map(|(id, _)| *id)
                .collect();
            let f = self.forget.entry(n.clone()).or_default();
            f.extend(ids);
            while f.len() > crate::dispatcher::MAX_TOMBSTONES {
                f.pop_first();
            }
            self.tracked.retain(|_, t| t.node != n);
            self.spans.update_where(
                |e| e.node.as_ref() == Some(&n) && e.op.is_none(),
                |e| {
                    e.state = SpanState::Absent;
                    e.node = None;
                    e.dispatcher = None;
                },
            );
            self.log(out, format!("node {n} left"));
        }
        self.bootstrapping
            .retain(|n, (inc, _)| ctx.alive.get(n).map(|a| a <= inc).unwrap_or(false));
        let joined: Vec<(NodeId, u64)> = ctx
            .alive
            .iter()
            .filter(|(n, inc)| {
                self.ready.get(*n).map(|r| r < *inc).unwrap_or(true)
                    && self
                        .bootstrapping
                        .get(*n)
                        .map(|b| b.0 < **inc)
                        .unwrap_or(true)
            })
            .map(|(n, i)| (n.clone(), *i))
            .collect();
        if self.schema_loaded() {
            for (n, inc) in joined {
                if let Phase::Bootstrapping { responses, .. } = &mut self.phase {
                    responses.remove(&n);
                }
                self.send_bootstrap(ctx.now, &n, inc, out);
            }
        }
        if let Phase::Closing { pending } = &mut self.phase {
            pending.retain(|n| ctx.alive.contains_key(n));
            if pending.is_empty() {
                self.phase = Phase::Stopped;
            }
        }
        self.try_finish_bootstrap(ctx, out);
        self.drive(ctx, out);
    }

    /// Stop. `cascade` closes every dispatcher of the changefeed first.
    pub fn stop(&mut self, ctx: &Ctx, cascade: bool, out: &mut Vec<Effect>) {
        if !cascade {
            self.phase = Phase::Stopped;
            return;
        }
        let pending: BTreeSet<NodeId> = ctx.alive.keys().cloned().collect();
        for n in &pending {
            self.send(
                out,
                n,
                Message::CloseChangefeed {
                    cf: self.cf.clone(),
                    epoch: self.epoch,
                },
            );
        }
        self.phase = Phase::Closing { pending };
    }

    pub fn on_tick(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        if matches!(self.phase, Phase::Bootstrapping { .. })
            && self
                .applied_asked
                .is_some_and(|t| ctx.now >= t + APPLIED_RETRY_MS)
        {
            self.applied_asked = None;
            self.try_finish_bootstrap(ctx, out);
        }
        match &self.phase {
            Phase::Bootstrapping { .. } | Phase::Working => {
                let resend: Vec<(NodeId, u64)> = self
                    .bootstrapping
                    .iter()
                    .filter(|(_, (_, t))| ctx.now >= *t + RESEND_MS)
                    .map(|(n, (inc, _))| (n.clone(), *inc))
                    .collect();
                for (n, inc) in resend {
                    self.send_bootstrap(ctx.now, &n, inc, out);
                }
            }
            Phase::Closing { pending } => {
                if self
                    .last_status
                    .map(|t| ctx.now >= t + RESEND_MS)
                    .unwrap_or(true)
                {
                    for n in pending.clone() {
                        self.send(
                            out,
                            &n,
                            Message::CloseChangefeed {
                                cf: self.cf.clone(),
                                epoch: self.epoch,
                            },
                        );
                    }
                }
            }
            Phase::Stopped => {}
        }
        self.tick_request_store(ctx);
        if matches!(self.phase, Phase::Working) {
            self.drive(ctx, out);
            self.run_requests(ctx, out);
            self.schedule(ctx, out);
            self.drive(ctx, out);
            self.compute_checkpoint(out);
        }
        let due = self
            .last_status
            .is_none_or(|t| ctx.now >= t + MAINTAINER_STATUS_MS);
        let snapshot_finished = std::mem::take(&mut self.status_due);
        if due || snapshot_finished {
            self.last_status = Some(ctx.now);
            if let Some(c) = ctx.coordinator {
                self.send(
                    out,
                    c,
                    Message::MaintainerStatusReport {
                        status: self.status(),
                    },
                );
            }
        }
    }
}
