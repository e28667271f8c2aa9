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
//!   dispatcher the maintainer knows of, on any node, overlaps the span ([`Maintainer::can_create`]);
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
pub mod operator;
pub mod replay;
pub mod requests;

use crate::config::{
    ChangefeedConfig, APPLIED_RETRY_MS, BALANCE_INTERVAL_MS, MAINTAINER_STATUS_MS,
    MAX_ERRORS_PER_HEARTBEAT, MAX_OPERATORS_PER_ROUND, RESEND_MS,
};
use crate::io::{AppliedDdl, Effect, SchemaSnapshot, TraceEvent};
use crate::msg::{
    truncate_error, BarrierCommand, BlockReport, BlockStage, ClosePurpose, DispatcherPhase,
    DispatcherReport, MaintainerState, MaintainerStatus, Message, RejectReason, TableRequest,
};
use barrier::{Barrier, BarrierEvent};
use operator::{span_key, OpKind, OpPhase, Operator, SpanKey};
use replay::ReplayBounds;
use requests::{request_table, PendingRequest, RequestStore};
use sluice_types::{
    ChangefeedId, DdlInfluence, DispatcherId, Epoch, InfluenceScope, Key, Millis, NodeId, Span,
    TableId, Ts,
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
    spans: BTreeMap<SpanKey, SpanEntry>,
    tracked: BTreeMap<DispatcherId, TrackedDispatcher>,
    ops: BTreeMap<u64, Operator>,
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
    /// The warnings each node's last heartbeat carried (nodes with none are absent).
    warnings: BTreeMap<NodeId, Vec<String>>,
    /// Capture stopped on this maintainer's own node (it may have no dispatchers yet: a
    /// bootstrap that waits for capture reports it through this).
    node_warning: Option<String>,
    last_status: Option<Millis>,
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
            spans: BTreeMap::new(),
            tracked: BTreeMap::new(),
            ops: BTreeMap::new(),
            next_op: 1,
            next_seq: 1,
            trigger,
            trigger_cp: checkpoint,
            trigger_resolved: checkpoint,
            barrier: Barrier::default(),
            requests: VecDeque::new(),
            store: RequestStore::start(&cf),
            hb_seen: BTreeMap::new(),
            warnings: BTreeMap::new(),
            node_warning: None,
            last_status: None,
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
                    SpanState::Replicating => "replicating",
                },
                node: e.node.clone(),
                checkpoint: e.checkpoint,
                operator: e
                    .op
                    .and_then(|id| self.ops.get(&id))
                    .map(|o| format!("{}:{}", o.kind.name(), o.phase)),
            })
            .collect()
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
            if let Some(e) = self.spans.get_mut(k) {
                e.op = Some(op.id);
                if op.kind != OpKind::Remove || !op.drop_entry {
                    e.state = SpanState::Scheduling;
                }
            }
        }
        self.ops.insert(op.id, op);
    }

    /// No dispatcher the maintainer knows of, other than `except`, may write keys of `span`.
    fn can_create(&self, span: &Span, except: &[DispatcherId]) -> bool {
        !self
            .tracked
            .iter()
            .any(|(id, t)| !except.contains(id) && t.span.overlaps(span))
    }

    fn schedulable(&self, ctx: &Ctx, node: &NodeId) -> bool {
        self.ready.contains_key(node)
            && ctx.alive.contains_key(node)
            && !ctx.cordoned.contains(node)
            && !ctx.draining.contains(node)
    }

    fn load(&self, node: &NodeId) -> usize {
        self.spans
            .values()
            .filter(|e| e.node.as_ref() == Some(node))
            .count()
            + self
                .ops
                .values()
                .filter(|o| {
                    o.dest.as_ref() == Some(node)
                        && o.kind != OpKind::Merge
                        && o.phase == OpPhase::Creating
                })
                .count()
    }

    fn least_loaded(&self, ctx: &Ctx) -> Option<NodeId> {
        self.ready
            .keys()
            .filter(|n| self.schedulable(ctx, n))
            .min_by_key(|n| (self.load(n), (*n).clone()))
            .cloned()
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
                self.hb_seen.insert(from.clone(), (incarnation, seq));
                self.on_warnings(from, warnings);
                self.on_reports(ctx, from, &dispatchers, complete, out);
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

    fn on_bootstrap_response(
        &mut self,
        ctx: &Ctx,
        from: &NodeId,
        inc: u64,
        dispatchers: Vec<DispatcherReport>,
        out: &mut Vec<Effect>,
    ) {
        if !self.bootstrapping.contains_key(from) {
            return;
        }
        // The incarnation that answered is the one that runs there now, even if this
        // maintainer's membership view has not caught up yet; an answer from an incarnation the
        // membership already knows is gone is stale.
        if ctx.alive.get(from).map(|a| *a > inc).unwrap_or(true) {
            return;
        }
        self.bootstrapping.remove(from);
        self.ready.insert(from.clone(), inc);
        match &mut self.phase {
            Phase::Bootstrapping { responses, .. } => {
                responses.insert(from.clone(), dispatchers);
                self.try_finish_bootstrap(ctx, out);
            }
            Phase::Working => {
                // A node that joined (or restarted) after the bootstrap: reconcile what it runs.
                self.on_reports(ctx, from, &dispatchers, true, out);
            }
            _ => {}
        }
    }

    fn try_finish_bootstrap(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        let ready = match &self.phase {
            Phase::Bootstrapping {
                responses,
                schema: Some(_),
                ..
            } => {
                // The `bootstrap-without-all-nodes` mutation finishes once the own node answered.
                #[cfg(feature = "mutations")]
                let early = crate::mutations::on("bootstrap-without-all-nodes");
                #[cfg(not(feature = "mutations"))]
                let early = false;
                (early && responses.contains_key(&self.node))
                    || ctx.alive.keys().all(|n| {
                        responses.contains_key(n)
                            || !self.bootstrapping.contains_key(n) && self.ready.contains_key(n)
                    }) && self
                        .bootstrapping
                        .keys()
                        .all(|n| !ctx.alive.contains_key(n))
                        && responses.contains_key(&self.node)
            }
            _ => false,
        };
        // Also the persisted table requests and user-split marks must be read (`requests.rs`).
        if !ready
            || !self.applied_known(ctx, out)
            || !self.store.loaded()
            || !self.schema_knows_record(out)
        {
            return;
        }
        let Phase::Bootstrapping {
            responses,
            schema: Some(schema),
            applied: Some(applied),
        } = std::mem::replace(&mut self.phase, Phase::Working)
        else {
            unreachable!("bootstrap finishes only with the schema and the sink's record");
        };
        self.replay = replay::replay_bounds(&schema, &replay::with_reported(applied, &responses));
        self.finish_bootstrap(ctx, responses, schema, out);
    }

    /// Whether the schema snapshot has every DDL the downstream recorded (or the nodes report).
    /// The snapshot was loaded when this maintainer started, and an older maintainer may have
    /// written DDLs after that, until this one's bootstrap fenced it; the replay rule needs what
    /// they did (a table they dropped stays gone), so a newer snapshot is loaded first, once (a
    /// recorded DDL the history does not have then bounds nothing).
    fn schema_knows_record(&mut self, out: &mut Vec<Effect>) -> bool {
        let Phase::Bootstrapping {
            responses,
            schema: Some(schema),
            applied: Some(applied),
        } = &self.phase
        else {
            return false;
        };
        if self.schema_refresh == SchemaRefresh::Done {
            return true;
        }
        let known: BTreeSet<Ts> = schema.ddls_after.iter().map(|d| d.commit_ts).collect();
        let unknown = replay::with_reported(applied.clone(), responses)
            .into_iter()
            .find(|a| !known.contains(&a.commit_ts));
        let Some(a) = unknown else {
            return true;
        };
        if self.schema_refresh == SchemaRefresh::No {
            self.schema_refresh = SchemaRefresh::Asked;
            self.log(
                out,
                format!(
                    "the downstream applied the DDL at {} after the schema was loaded: loading it again",
                    a.commit_ts
                ),
            );
            out.push(Effect::LoadSchema {
                cf: self.cf.clone(),
                epoch: self.epoch,
                at_ts: self.start_checkpoint,
            });
        }
        false
    }

    /// Whether the downstream's record of applied DDLs is known; asks for it (once every
    /// `APPLIED_RETRY_MS`) when it is not.
    fn applied_known(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) -> bool {
        if matches!(
            self.phase,
            Phase::Bootstrapping {
                applied: Some(_),
                ..
            }
        ) {
            return true;
        }
        if self.applied_asked.is_none() {
            self.applied_asked = Some(ctx.now);
            out.push(Effect::LoadApplied {
                cf: self.cf.clone(),
                epoch: self.epoch,
                sink_uri: self.config.sink_uri.clone(),
                after: self.start_checkpoint,
            });
        }
        false
    }

    /// The answer to `LoadApplied`. An error keeps the bootstrap waiting (with a warning) and
    /// is asked again: bootstrapping without it could replay rows a DDL already removed.
    pub fn on_applied(
        &mut self,
        ctx: &Ctx,
        result: Result<Vec<AppliedDdl>, String>,
        out: &mut Vec<Effect>,
    ) {
        let Phase::Bootstrapping { applied, .. } = &mut self.phase else {
            return;
        };
        if applied.is_some() {
            return;
        }
        match result {
            Ok(list) => {
                *applied = Some(list);
                self.applied_asked = None;
                self.sink_warning = None;
                self.try_finish_bootstrap(ctx, out);
            }
            Err(e) => {
                let w = truncate_error(format!(
                    "waiting for the sink: cannot read which DDLs it applied ({e}); check that the downstream is up and reachable (retrying every 2 s)"
                ));
                self.log(out, w.clone());
                self.sink_warning = Some(w);
            }
        }
    }

    /// A remove of the given dispatchers that deletes the span entry `key` (if any) at the end.
    fn start_cleanup(
        &mut self,
        table: TableId,
        ids: Vec<(DispatcherId, NodeId)>,
        key: Option<SpanKey>,
    ) {
        let mut op = self.new_op(OpKind::Remove, table, key);
        op.removing = ids;
        op.drop_entry = true;
        self.insert_op(op);
    }

    fn on_reports(
        &mut self,
        ctx: &Ctx,
        from: &NodeId,
        reports: &[DispatcherReport],
        complete: bool,
        out: &mut Vec<Effect>,
    ) {
        let mut seen: BTreeSet<DispatcherId> = BTreeSet::new();
        for r in reports {
            seen.insert(r.id);
            if r.is_trigger {
                if r.id == self.trigger && *from == self.node {
                    self.trigger_cp = self.trigger_cp.max(r.checkpoint);
                    self.trigger_resolved = self.trigger_resolved.max(r.resolved);
                    if let Some(t) = self.tracked.get_mut(&r.id) {
                        t.phase = Tracked::Working;
                    }
                    if let Some(b) = &r.block {
                        if matches!(self.phase, Phase::Working) {
                            self.on_block_status(ctx, from, r.id, &r.span, b, out);
                        }
                    }
                }
                continue;
            }
            match self.tracked.get_mut(&r.id) {
                Some(t) if t.node == *from => {
                    t.checkpoint = t.checkpoint.max(r.checkpoint);
                    match r.phase {
                        DispatcherPhase::Stopped => {
                            self.tracked.remove(&r.id);
                        }
                        DispatcherPhase::Working => {
                            if t.phase == Tracked::Requested {
                                t.phase = Tracked::Working;
                            }
                        }
                        DispatcherPhase::Closing(_) => t.phase = Tracked::Removing,
                        DispatcherPhase::Creating => {}
                    }
                    for e in self.spans.values_mut() {
                        if e.dispatcher == Some(r.id) && e.node.as_ref() == Some(from) {
                            e.checkpoint = e.checkpoint.max(r.checkpoint);
                            e.write_rate = r.write_rate;
                            e.resolved = e.resolved.max(r.resolved);
                        }
                    }
                    if let (Some(b), DispatcherPhase::Working) = (&r.block, &r.phase) {
                        if matches!(self.phase, Phase::Working) {
                            self.on_block_status(ctx, from, r.id, &r.span, b, out);
                        }
                    }
                }
                Some(_) => {
                    self.stale_dropped += 1; // a report from a node the dispatcher is not on
                }
                None => self.on_unknown_dispatcher(ctx, from, r, out),
            }
        }
        if complete {
            let gone: Vec<DispatcherId> = self
                .tracked
                .iter()
                .filter(|(id, t)| {
                    t.node == *from
                        && t.phase != Tracked::Requested
                        && !seen.contains(id)
                        && **id != self.trigger
                })
                .map(|(id, _)| *id)
                .collect();
            for id in gone {
                self.tracked.remove(&id);
                for e in self.spans.values_mut() {
                    if e.dispatcher == Some(id) && e.state == SpanState::Replicating {
                        e.state = SpanState::Absent;
                        e.node = None;
                        e.dispatcher = None;
                    }
                }
            }
        }
        self.drive(ctx, out);
    }

    /// A dispatcher this maintainer did not know of: adopt it by span if it exactly fills an
    /// absent span of a live table, else remove it.
    fn on_unknown_dispatcher(
        &mut self,
        _ctx: &Ctx,
        from: &NodeId,
        r: &DispatcherReport,
        out: &mut Vec<Effect>,
    ) {
        if r.phase == DispatcherPhase::Stopped
            || !matches!(self.phase, Phase::Working)
            || self.ignored.contains(&r.id)
        {
            return;
        }
        let key = span_key(&r.span);
        let adoptable = r.phase == DispatcherPhase::Working
            && self.tables.contains_key(&r.span.table)
            && self
                .spans
                .get(&key)
                .map(|e| e.span == r.span && e.state == SpanState::Absent && e.op.is_none())
                .unwrap_or(false)
            && self.can_create(&r.span, &[]);
        self.tracked.insert(
            r.id,
            TrackedDispatcher {
                node: from.clone(),
                span: r.span.clone(),
                phase: match r.phase {
                    DispatcherPhase::Working => Tracked::Working,
                    DispatcherPhase::Creating => Tracked::Requested,
                    _ => Tracked::Removing,
                },
                checkpoint: r.checkpoint,
            },
        );
        if adoptable {
            if let Some(e) = self.spans.get_mut(&key) {
                e.state = SpanState::Replicating;
                e.node = Some(from.clone());
                e.dispatcher = Some(r.id);
                e.checkpoint = e.checkpoint.max(r.checkpoint);
            }
            self.log(
                out,
                format!("adopted {:?} on {from} for {:?} by span", r.id, r.span),
            );
        } else {
            self.log(
                out,
                format!(
                    "removing unknown dispatcher {:?} on {from} ({:?})",
                    r.id, r.span
                ),
            );
            self.start_cleanup(r.span.table, vec![(r.id, from.clone())], None);
        }
    }

    fn on_rejected(
        &mut self,
        ctx: &Ctx,
        from: &NodeId,
        id: DispatcherId,
        reason: RejectReason,
        out: &mut Vec<Effect>,
    ) {
        if self
            .tracked
            .get(&id)
            .map(|t| t.node != *from || t.phase != Tracked::Requested)
            .unwrap_or(true)
        {
            return;
        }
        self.tracked.remove(&id);
        self.log(out, format!("{from} refused {id:?}: {reason:?}"));
        let op_id = self
            .ops
            .values()
            .find(|o| o.creating == Some(id))
            .map(|o| o.id);
        if let Some(op_id) = op_id {
            if let Some(mut op) = self.ops.remove(&op_id) {
                if op.kind == OpKind::Merge {
                    // Nothing changed on the node: the sources still run there.
                    let id = op.id;
                    for e in self.spans.values_mut().filter(|e| e.op == Some(id)) {
                        e.state = SpanState::Replicating;
                        e.op = None;
                    }
                    for (sid, _, _) in &op.sources {
                        if let Some(t) = self.tracked.get_mut(sid) {
                            t.phase = Tracked::Working;
                        }
                    }
                } else if let Some(k) = &op.key {
                    if let Some(e) = self.spans.get_mut(k) {
                        e.state = SpanState::Absent;
                        e.node = None;
                        e.dispatcher = None;
                        e.op = None;
                    }
                }
                op.transition(OpPhase::Aborted);
                *self
                    .phase_counts
                    .entry((op.kind, OpPhase::Aborted))
                    .or_default() += 1;
            }
        }
        if let RejectReason::Overlap { with } = reason {
            if !self.tracked.contains_key(&with) {
                // The node runs something this maintainer does not know: learn it at the next
                // heartbeat (it is reported there and reconciled by span).
                let _ = with;
            }
        }
        self.drive(ctx, out);
    }

    // ------------------------------------------------------------------ barrier

    /// The tables a DDL at `d` concerns: those it names (or of its database, or all) and those
    /// whose definition it reads ([`DdlInfluence::sources`]), among the tables that existed
    /// before it.
    fn participant_tables(&self, influence: &DdlInfluence, d: Ts) -> Vec<TableId> {
        let before = |s: &TableState| s.created < d;
        let existed = |t: &TableId| self.tables.get(t).map(before).unwrap_or(false);
        let mut tables: Vec<TableId> = match &influence.scope {
            InfluenceScope::Tables(ts) => ts.iter().copied().filter(existed).collect(),
            InfluenceScope::Database(db) => {
                let prefix = format!("{db}.");
                self.tables
                    .iter()
                    .filter(|(_, s)| before(s) && s.name.starts_with(&prefix))
                    .map(|(t, _)| *t)
                    .collect()
            }
            InfluenceScope::All => self
                .tables
                .iter()
                .filter(|(_, s)| before(s))
                .map(|(t, _)| *t)
                .collect(),
        };
        tables.extend(influence.sources.iter().copied().filter(existed));
        tables.sort();
        tables.dedup();
        tables
    }

    /// Is `id` on `from` the current dispatcher of a span of a table this event concerns (or the
    /// trigger)?
    fn is_participant(
        &self,
        from: &NodeId,
        id: DispatcherId,
        influence: &DdlInfluence,
        d: Ts,
    ) -> bool {
        if id == self.trigger {
            return *from == self.node && influence.trigger;
        }
        let tables = self.participant_tables(influence, d);
        self.spans.values().any(|e| {
            e.dispatcher == Some(id)
                && e.node.as_ref() == Some(from)
                && e.state == SpanState::Replicating
                && tables.contains(&e.span.table)
        })
    }

    fn on_block_status(
        &mut self,
        ctx: &Ctx,
        from: &NodeId,
        id: DispatcherId,
        span: &Span,
        report: &BlockReport,
        out: &mut Vec<Effect>,
    ) {
        let d = report.ddl_ts;
        if d <= self.committed {
            // Already below the checkpoint: every participant passed it, so it was written.
            if report.stage == BlockStage::Waiting {
                self.barrier_cmd(out, from, id, d, BarrierCommand::Pass);
            } else if report.stage == BlockStage::Written {
                self.barrier_cmd(out, from, id, d, BarrierCommand::Proceed);
            }
            return;
        }
        if let std::collections::btree_map::Entry::Vacant(v) = self.barrier.events.entry(d) {
            let Some(influence) = report.ddl.clone() else {
                return;
            };
            v.insert(BarrierEvent::new(d, influence));
        }
        let influence = match self.barrier.events.get(&d) {
            Some(e) => e.influence.clone(),
            None => return,
        };
        if !self.is_participant(from, id, &influence, d) {
            self.stale_dropped += 1;
            return;
        }
        match report.stage {
            BlockStage::Passed => {
                if let Some(e) = self.barrier.events.get_mut(&d) {
                    e.passed.insert(id);
                    e.waiting.remove(&id);
                }
            }
            BlockStage::Written => {
                self.mark_written(ctx, d, out);
                self.barrier_cmd(out, from, id, d, BarrierCommand::Proceed);
            }
            BlockStage::Writing => {
                if let Some(e) = self.barrier.events.get_mut(&d) {
                    if e.writer.is_none() {
                        e.writer = Some((id, from.clone()));
                    }
                }
            }
            BlockStage::Waiting => {
                self.raise_to_waiting(id, from, d);
                // Someone already past the DDL proves it was written. For a DDL the table trigger
                // takes part in, only once the trigger waits at it too: by then every earlier
                // DDL that adds, drops or renames tables was applied, so the set of tables it
                // concerns is the right one (a database's members change with renames).
                let trigger_there = !influence.trigger
                    || id == self.trigger
                    || self
                        .barrier
                        .events
                        .get(&d)
                        .map(|e| e.waiting.contains_key(&self.trigger))
                        .unwrap_or(false);
                let tables = if trigger_there {
                    self.participant_tables(&influence, d)
                } else {
                    Vec::new()
                };
                let someone_past = self
                    .spans
                    .values()
                    .find(|e| {
                        tables.contains(&e.span.table)
                            && e.checkpoint >= d
                            && e.state == SpanState::Replicating
                    })
                    .map(|e| (e.span.clone(), e.checkpoint, e.dispatcher));
                if let Some(past) = someone_past {
                    self.log(
                        out,
                        format!("DDL at {d} already passed by {past:?}: it was written"),
                    );
                    self.mark_written(ctx, d, out);
                }
                // A writer that is no longer a span's current dispatcher (moved, merged, its node
                // gone) can write nothing more: choose again once coverage is complete.
                let stale_writer = match self.barrier.events.get(&d).and_then(|e| e.writer.clone())
                {
                    Some((w, wn)) => !self.is_participant(&wn, w, &influence, d),
                    None => false,
                };
                let Some(e) = self.barrier.events.get_mut(&d) else {
                    return;
                };
                if stale_writer && !e.written {
                    e.writer = None;
                }
                if e.written && influence.dropped.contains(&span.table) {
                    // Its table ends at this DDL: it stays blocked until it is removed.
                    return;
                }
                if e.written {
                    let cmd = if e.writer.as_ref().map(|w| w.0) == Some(id) {
                        BarrierCommand::Write
                    } else {
                        BarrierCommand::Pass
                    };
                    self.barrier_cmd(out, from, id, d, cmd);
                    return;
                }
                e.waiting.insert(id, from.clone());
                if let Some((w, wn)) = e.writer.clone() {
                    if w == id {
                        self.barrier_cmd(out, &wn, w, d, BarrierCommand::Write);
                    }
                    return;
                }
                self.try_select_writer(ctx, d, out);
            }
        }
    }

    fn try_select_writer(&mut self, ctx: &Ctx, d: Ts, out: &mut Vec<Effect>) {
        let Some(e) = self.barrier.events.get(&d) else {
            return;
        };
        let influence = e.influence.clone();
        // Drop reporters that are no longer participants (moved, split, merged away).
        let stale: Vec<DispatcherId> = e
            .waiting
            .iter()
            .filter(|(id, n)| !self.is_participant(n, **id, &influence, d))
            .map(|(id, _)| *id)
            .collect();
        let tables = self.participant_tables(&influence, d);
        // With the table each dispatcher serves, to prefer a table the DDL changes as writer.
        let mut participants: Vec<(DispatcherId, NodeId, TableId)> = Vec::new();
        let mut complete = true;
        for entry in self
            .spans
            .values()
            .filter(|en| tables.contains(&en.span.table))
        {
            match (&entry.state, entry.dispatcher, &entry.node) {
                (SpanState::Replicating, Some(id), Some(n)) if e.waiting.contains_key(&id) => {
                    participants.push((id, n.clone(), entry.span.table))
                }
                _ => complete = false,
            }
        }
        if influence.trigger && !e.waiting.contains_key(&self.trigger) {
            complete = false;
        }
        let writer = if influence.trigger {
            Some((self.trigger, self.node.clone()))
        } else {
            participants
                .iter()
                .find(|p| !influence.sources.contains(&p.2))
                .or(participants.first())
                .map(|(id, n, _)| (*id, n.clone()))
        };
        let concerns = self.ddl_concerns_changefeed(&influence);
        let Some(e) = self.barrier.events.get_mut(&d) else {
            return;
        };
        for id in stale {
            e.waiting.remove(&id);
        }
        if !complete {
            return;
        }
        if !concerns {
            // Only tables this changefeed does not replicate: pass it without writing it.
            self.mark_written(ctx, d, out);
            return;
        }
        let Some((w, wn)) = writer else {
            // Nobody takes part (every table concerned is gone): nothing to write.
            e.written = true;
            return;
        };
        e.writer = Some((w, wn.clone()));
        #[cfg(feature = "mutations")]
        if crate::mutations::on("pass-before-write") {
            let others: Vec<(DispatcherId, NodeId)> = e
                .waiting
                .iter()
                .filter(|(i, _)| **i != w)
                .map(|(i, n)| (*i, n.clone()))
                .collect();
            for (i, n) in others {
                self.barrier_cmd(out, &n, i, d, BarrierCommand::Pass);
            }
        }
        self.barrier_cmd(out, &wn, w, d, BarrierCommand::Write);
    }

    fn barrier_cmd(
        &self,
        out: &mut Vec<Effect>,
        to: &NodeId,
        id: DispatcherId,
        ddl_ts: Ts,
        command: BarrierCommand,
    ) {
        self.send(
            out,
            to,
            Message::Barrier {
                cf: self.cf.clone(),
                epoch: self.epoch,
                id,
                ddl_ts,
                command,
            },
        );
    }

    /// The DDL at `d` is durable: apply its effects once and let every waiting participant pass.
    fn mark_written(&mut self, ctx: &Ctx, d: Ts, out: &mut Vec<Effect>) {
        let Some(e) = self.barrier.events.get_mut(&d) else {
            return;
        };
        e.written = true;
        if !e.applied {
            e.applied = true;
            let influence = e.influence.clone();
            let took_part = self.participant_tables(&influence, d);
            self.apply_ddl(ctx, d, &influence, out);
            self.raise_past_written(&took_part, d);
        }
        let Some(e) = self.barrier.events.get(&d) else {
            return;
        };
        let writer = e.writer.as_ref().map(|w| w.0);
        // Dispatchers of tables this DDL drops never pass it: they wait there until removed, so
        // their progress never suggests anything about later DDLs.
        let ends = |id: &DispatcherId| {
            self.tracked
                .get(id)
                .map(|t| e.influence.dropped.contains(&t.span.table))
                .unwrap_or(false)
        };
        let waiting: Vec<(DispatcherId, NodeId)> = e
            .waiting
            .iter()
            .filter(|(id, _)| Some(**id) != writer && !ends(id))
            .map(|(i, n)| (*i, n.clone()))
            .collect();
        for (id, n) in waiting {
            self.barrier_cmd(out, &n, id, d, BarrierCommand::Pass);
        }
    }

    /// A span's dispatcher waits at the DDL at `d`: everything of the span before it is durable,
    /// so whatever replaces that dispatcher (its node died, an operator moves or splits it)
    /// starts at `d - 1` at least, not at an older heartbeat's checkpoint: it must not write the
    /// span's rows again once the DDL may have taken effect (rows before a RENAME under the old
    /// name, rows of a version a TRUNCATE replaced).
    fn raise_to_waiting(&mut self, id: DispatcherId, from: &NodeId, d: Ts) {
        for e in self
            .spans
            .values_mut()
            .filter(|e| e.dispatcher == Some(id) && e.node.as_ref() == Some(from))
        {
            e.checkpoint = e.checkpoint.max(d.saturating_sub(1));
        }
    }

    /// The DDL at `d` is durable and every span of the tables that took part in it had flushed
    /// everything before it: their replacements start after the DDL.
    fn raise_past_written(&mut self, tables: &[TableId], d: Ts) {
        for e in self
            .spans
            .values_mut()
            .filter(|e| tables.contains(&e.span.table))
        {
            e.checkpoint = e.checkpoint.max(d);
        }
    }

    /// A DDL's effects on the table set and span map, applied once it is durable.
    fn apply_ddl(&mut self, ctx: &Ctx, d: Ts, influence: &DdlInfluence, out: &mut Vec<Effect>) {
        #[cfg(feature = "mutations")]
        let buggy = crate::mutations::on("create-dropped-table");
        #[cfg(not(feature = "mutations"))]
        let buggy = false;
        for t in &influence.dropped {
            self.drop_table(*t, out);
            if buggy {
                // The bug: the dropped table comes back, starting at the drop.
                let name = format!("dropped.{t:?}");
                self.tables.insert(
                    *t,
                    TableState {
                        name,
                        created: d,
                        splittable: true,
                        user_split: false,
                    },
                );
                self.add_table_spans(ctx, *t, d);
            }
        }
        for (t, name) in &influence.added {
            if !self.filter.matches_name(name) || self.replay.gone.contains(t) {
                continue;
            }
            let exists = self.spans.keys().any(|(tt, _)| tt == t);
            if exists && !buggy {
                self.log(
                    out,
                    format!("table {t:?} created at {d} is already covered by adopted dispatchers"),
                );
                continue;
            }
            self.tables.insert(
                *t,
                TableState {
                    name: name.clone(),
                    created: d,
                    splittable: true,
                    user_split: false,
                },
            );
            self.add_table_spans(ctx, *t, d);
        }
        for (t, name) in &influence.renamed {
            let keep = self.filter.matches_name(name);
            match self.tables.get_mut(t) {
                // Renamed out of the filter: no longer replicated.
                Some(_) if !keep => self.drop_table(*t, out),
                Some(s) => s.name = name.clone(),
                // Renamed into the filter: replicated from the rename on (unless a DDL the
                // downstream already applied drops it later).
                None if keep
                    && !self.replay.gone.contains(t)
                    && !self.spans.keys().any(|(tt, _)| tt == t) =>
                {
                    self.tables.insert(
                        *t,
                        TableState {
                            name: name.clone(),
                            created: d,
                            splittable: true,
                            user_split: false,
                        },
                    );
                    self.add_table_spans(ctx, *t, d);
                }
                None => {}
            }
        }
    }

    /// Whether a DDL concerns what this changefeed replicates (a DDL only on filtered-out tables
    /// is passed without being written).
    fn ddl_concerns_changefeed(&self, influence: &DdlInfluence) -> bool {
        if self.config.filter.ignores("ddl") {
            return false;
        }
        match &influence.scope {
            InfluenceScope::Tables(ts) => {
                ts.iter().any(|t| self.tables.contains_key(t))
                    || influence
                        .added
                        .iter()
                        .any(|(_, n)| self.filter.matches_name(n))
                    || influence
                        .renamed
                        .iter()
                        .any(|(t, n)| self.tables.contains_key(t) || self.filter.matches_name(n))
                    || (ts.is_empty() && influence.added.is_empty() && influence.renamed.is_empty())
            }
            InfluenceScope::Database(_) | InfluenceScope::All => true,
        }
    }

    fn drop_table(&mut self, table: TableId, out: &mut Vec<Effect>) {
        self.tables.remove(&table);
        // Cancel its operators; every dispatcher of the table that may exist gets removed.
        let ops: Vec<u64> = self
            .ops
            .values()
            .filter(|o| o.table == table)
            .map(|o| o.id)
            .collect();
        for id in ops {
            if let Some(mut op) = self.ops.remove(&id) {
                if op.kind.legal(op.phase, OpPhase::Aborted) {
                    op.transition(OpPhase::Aborted);
                }
            }
        }
        self.spans.retain(|(t, _), _| *t != table);
        let ids: Vec<(DispatcherId, NodeId)> = self
            .tracked
            .iter()
            .filter(|(_, t)| t.span.table == table)
            .map(|(id, t)| (*id, t.node.clone()))
            .collect();
        if !ids.is_empty() {
            self.start_cleanup(table, ids, None);
        }
        self.reject_requests_of(table, "rejected: the table was dropped", out);
    }

    // ------------------------------------------------------------------ operators

    /// Drive every operator one step, then the schedulers.
    fn drive(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        if !matches!(self.phase, Phase::Working) {
            return;
        }
        let ids: Vec<u64> = self.ops.keys().copied().collect();
        for id in ids {
            self.drive_op(ctx, id, out);
        }
    }

    fn drive_op(&mut self, ctx: &Ctx, op_id: u64, out: &mut Vec<Effect>) {
        let Some(mut op) = self.ops.remove(&op_id) else {
            return;
        };
        let before = op.phase;
        self.step_op(ctx, &mut op, out);
        if op.phase != before {
            *self.phase_counts.entry((op.kind, op.phase)).or_default() += 1;
        }
        if op.is_finished() {
            if let Some(k) = &op.key {
                if let Some(e) = self.spans.get_mut(k) {
                    if e.op == Some(op.id) {
                        e.op = None;
                    }
                }
            }
            self.log(
                out,
                format!(
                    "operator {} {:?} on {:?} {}",
                    op.id, op.kind, op.table, op.phase
                ),
            );
        } else {
            self.ops.insert(op.id, op);
        }
    }

    fn step_op(&mut self, ctx: &Ctx, op: &mut Operator, out: &mut Vec<Effect>) {
        let now = ctx.now;
        match op.phase {
            OpPhase::Removing => {
                // Forget removals that are done (untracked: confirmed stopped or node gone).
                op.removing.retain(|(id, _)| self.tracked.contains_key(id));
                if !op.removing.is_empty() {
                    if op.due(now, RESEND_MS) {
                        op.last_sent = Some(now);
                        let purpose = match op.kind {
                            OpKind::Move => ClosePurpose::Move {
                                dest: op.dest.clone().unwrap_or_else(|| self.node.clone()),
                            },
                            OpKind::Split => ClosePurpose::Split {
                                points: op.points.clone(),
                            },
                            _ => ClosePurpose::Remove,
                        };
                        for (id, n) in &op.removing {
                            if let Some(t) = self.tracked.get_mut(id) {
                                t.phase = Tracked::Removing;
                            }
                            self.send(
                                out,
                                n,
                                Message::Remove {
                                    cf: self.cf.clone(),
                                    epoch: self.epoch,
                                    id: *id,
                                    purpose: purpose.clone(),
                                },
                            );
                        }
                    }
                    return;
                }
                // Everything it closes is closed.
                match op.kind {
                    OpKind::Remove => {
                        if let Some(k) = &op.key {
                            if op.drop_entry {
                                self.spans.remove(k);
                            } else if let Some(e) = self.spans.get_mut(k) {
                                e.state = SpanState::Absent;
                                e.node = None;
                                e.dispatcher = None;
                            }
                        }
                        op.transition(OpPhase::Done);
                    }
                    OpKind::Move => {
                        let dest_ok = op
                            .dest
                            .as_ref()
                            .map(|d| self.ready.contains_key(d) && ctx.alive.contains_key(d))
                            .unwrap_or(false);
                        if dest_ok {
                            let id = self.mint();
                            op.creating = Some(id);
                            op.transition(OpPhase::Creating);
                            self.step_op(ctx, op, out);
                        } else {
                            self.set_absent(op.key.as_ref());
                            op.transition(OpPhase::Aborted);
                        }
                    }
                    OpKind::Split => {
                        let Some(k) = op.key.clone() else {
                            op.transition(OpPhase::Aborted);
                            return;
                        };
                        let Some(e) = self.spans.remove(&k) else {
                            op.transition(OpPhase::Aborted);
                            return;
                        };
                        let cp = e.checkpoint;
                        for s in e.span.split_at(&op.points) {
                            self.spans.insert(
                                span_key(&s),
                                SpanEntry {
                                    span: s,
                                    state: SpanState::Absent,
                                    node: None,
                                    dispatcher: None,
                                    checkpoint: cp,
                                    op: None,
                                    write_rate: 0,
                                    resolved: 0,
                                    floored: false,
                                },
                            );
                        }
                        op.key = None;
                        op.transition(OpPhase::Done);
                    }
                    OpKind::Add | OpKind::Merge => {}
                }
            }
            OpPhase::Creating => {
                let (Some(dest), Some(id), Some(k)) =
                    (op.dest.clone(), op.creating, op.key.clone())
                else {
                    op.transition(OpPhase::Aborted);
                    return;
                };
                if !ctx.alive.contains_key(&dest) || !self.ready.contains_key(&dest) {
                    self.tracked.remove(&id);
                    self.set_absent(Some(&k));
                    op.transition(OpPhase::Aborted);
                    return;
                }
                if self
                    .tracked
                    .get(&id)
                    .map(|t| t.phase == Tracked::Working)
                    .unwrap_or(false)
                {
                    if let Some(e) = self.spans.get_mut(&k) {
                        e.state = SpanState::Replicating;
                        e.node = Some(dest);
                        e.dispatcher = Some(id);
                    }
                    op.transition(OpPhase::Done);
                    return;
                }
                let Some(entry) = self.spans.get(&k) else {
                    op.transition(OpPhase::Aborted);
                    return;
                };
                let span = entry.span.clone();
                if !self.can_create(&span, &[id]) {
                    return; // wait until every overlapping dispatcher is confirmed closed
                }
                if op.due(now, RESEND_MS) {
                    op.last_sent = Some(now);
                    // Never below the changefeed checkpoint, never above the span's own.
                    let start_ts = entry.checkpoint.max(self.committed);
                    self.tracked.entry(id).or_insert(TrackedDispatcher {
                        node: dest.clone(),
                        span: span.clone(),
                        phase: Tracked::Requested,
                        checkpoint: start_ts,
                    });
                    let floor_known = entry.floored;
                    if let Some(e) = self.spans.get_mut(&k) {
                        e.node = Some(dest.clone());
                        e.dispatcher = Some(id);
                        e.state = SpanState::Scheduling;
                        // From now on a dispatcher may have served it.
                        e.floored = false;
                    }
                    self.send(
                        out,
                        &dest,
                        Message::Create {
                            cf: self.cf.clone(),
                            epoch: self.epoch,
                            id,
                            span,
                            start_ts,
                            floor_known,
                        },
                    );
                }
            }
            OpPhase::Merging => {
                let (Some(node), Some(target), Some(tspan)) =
                    (op.dest.clone(), op.creating, op.target.clone())
                else {
                    op.transition(OpPhase::Aborted);
                    return;
                };
                if !ctx.alive.contains_key(&node) || !self.ready.contains_key(&node) {
                    // The node is gone with the sources and the target: the range is absent.
                    self.tracked.remove(&target);
                    let id = op.id;
                    for e in self.spans.values_mut().filter(|e| e.op == Some(id)) {
                        e.state = SpanState::Absent;
                        e.node = None;
                        e.dispatcher = None;
                        e.op = None;
                    }
                    op.transition(OpPhase::Aborted);
                    return;
                }
                if let Some(t) = self
                    .tracked
                    .get(&target)
                    .filter(|t| t.phase == Tracked::Working)
                {
                    let id = op.id;
                    let min_cp = self
                        .spans
                        .values()
                        .filter(|e| e.op == Some(id))
                        .map(|e| e.checkpoint)
                        .min();
                    // Both are sound lower bounds for the whole range; keep the larger.
                    let cp = t.checkpoint.max(min_cp.unwrap_or(0));
                    self.spans.retain(|_, e| e.op != Some(id));
                    self.spans.insert(
                        span_key(&tspan),
                        SpanEntry {
                            span: tspan,
                            state: SpanState::Replicating,
                            node: Some(node),
                            dispatcher: Some(target),
                            checkpoint: cp,
                            op: None,
                            write_rate: 0,
                            resolved: 0,
                            floored: false,
                        },
                    );
                    op.key = None;
                    op.transition(OpPhase::Done);
                    return;
                }
                if op.due(now, RESEND_MS) {
                    op.last_sent = Some(now);
                    let sources: Vec<DispatcherId> = op.sources.iter().map(|s| s.0).collect();
                    self.send(
                        out,
                        &node,
                        Message::Merge {
                            cf: self.cf.clone(),
                            epoch: self.epoch,
                            sources,
                            target,
                            span: tspan,
                        },
                    );
                }
            }
            OpPhase::Done | OpPhase::Aborted => {}
        }
    }

    fn set_absent(&mut self, key: Option<&SpanKey>) {
        if let Some(k) = key {
            if let Some(e) = self.spans.get_mut(k) {
                e.state = SpanState::Absent;
                e.node = None;
                e.dispatcher = None;
                e.op = None;
            }
        }
    }

    /// Start an add of an absent span on `dest`.
    fn start_add(&mut self, key: SpanKey, dest: NodeId) {
        let Some(table) = self.spans.get(&key).map(|e| e.span.table) else {
            return;
        };
        let id = self.mint();
        let mut op = self.new_op(OpKind::Add, table, Some(key));
        op.dest = Some(dest);
        op.creating = Some(id);
        self.insert_op(op);
    }

    fn start_move(&mut self, key: SpanKey, dest: NodeId) -> bool {
        let Some(e) = self.spans.get(&key) else {
            return false;
        };
        if e.op.is_some() || e.state != SpanState::Replicating {
            return false;
        }
        let (Some(id), Some(n)) = (e.dispatcher, e.node.clone()) else {
            return false;
        };
        if n == dest {
            return false;
        }
        let table = e.span.table;
        let mut op = self.new_op(OpKind::Move, table, Some(key));
        op.removing = vec![(id, n)];
        op.dest = Some(dest);
        self.insert_op(op);
        true
    }

    fn start_split(&mut self, key: SpanKey, points: Vec<Key>) -> bool {
        let Some(e) = self.spans.get(&key) else {
            return false;
        };
        if e.op.is_some() || e.state != SpanState::Replicating || points.is_empty() {
            return false;
        }
        let (Some(id), Some(n)) = (e.dispatcher, e.node.clone()) else {
            return false;
        };
        let table = e.span.table;
        let mut op = self.new_op(OpKind::Split, table, Some(key));
        op.removing = vec![(id, n)];
        op.points = points;
        self.insert_op(op);
        true
    }

    /// Merge every span of `table` (all replicating on one node) into one. The sources stay in
    /// the span map (scheduling) until the target works; the target lives in the operator.
    fn start_merge(&mut self, table: TableId) -> bool {
        let entries: Vec<SpanEntry> = self
            .spans
            .values()
            .filter(|e| e.span.table == table)
            .cloned()
            .collect();
        if entries.len() < 2
            || entries
                .iter()
                .any(|e| e.op.is_some() || e.state != SpanState::Replicating)
        {
            return false;
        }
        let node = entries[0].node.clone();
        if node.is_none() || entries.iter().any(|e| e.node != node) {
            return false;
        }
        let Some(node) = node else { return false };
        let whole = Span::whole_table(table);
        let target = self.mint();
        let cp = entries
            .iter()
            .map(|e| e.checkpoint)
            .min()
            .unwrap_or(self.committed);
        let mut op = self.new_op(OpKind::Merge, table, None);
        for e in &entries {
            if let Some(id) = e.dispatcher {
                op.sources.push((id, e.span.clone(), e.checkpoint));
            }
        }
        op.dest = Some(node.clone());
        op.creating = Some(target);
        op.target = Some(whole.clone());
        self.tracked.insert(
            target,
            TrackedDispatcher {
                node,
                span: whole,
                phase: Tracked::Requested,
                checkpoint: cp,
            },
        );
        let id = op.id;
        self.insert_op(op);
        for e in &entries {
            if let Some(en) = self.spans.get_mut(&span_key(&e.span)) {
                en.op = Some(id);
                en.state = SpanState::Scheduling;
            }
        }
        true
    }

    // ------------------------------------------------------------------ schedulers
    // (user requests: `requests.rs`)

    fn schedule(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        // Basic: absent spans go to the least loaded schedulable node.
        let absent: Vec<SpanKey> = self
            .spans
            .iter()
            .filter(|(_, e)| e.state == SpanState::Absent && e.op.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        for k in absent.into_iter().take(MAX_OPERATORS_PER_ROUND) {
            let Some(dest) = self.least_loaded(ctx) else {
                break;
            };
            self.start_add(k, dest);
        }
        // Drain: move spans off draining nodes.
        if !ctx.draining.is_empty() {
            let moves: Vec<SpanKey> = self
                .spans
                .iter()
                .filter(|(_, e)| {
                    e.op.is_none()
                        && e.state == SpanState::Replicating
                        && e.node
                            .as_ref()
                            .map(|n| ctx.draining.contains(n))
                            .unwrap_or(false)
                })
                .map(|(k, _)| k.clone())
                .take(MAX_OPERATORS_PER_ROUND)
                .collect();
            for k in moves {
                if let Some(dest) = self.least_loaded(ctx) {
                    self.start_move(k, dest);
                }
            }
        }
        if !self.config.scheduler.balance || ctx.now < self.last_balance + BALANCE_INTERVAL_MS {
            return;
        }
        self.last_balance = ctx.now;
        if !self.ops.is_empty()
            || !self.requests.is_empty()
            || self
                .spans
                .values()
                .any(|e| e.state != SpanState::Replicating)
        {
            return;
        }
        // Split: a table in one span with more regions than the threshold.
        let sched = self.config.scheduler.clone();
        if sched.enable_table_across_nodes {
            let single: Vec<(TableId, SpanKey, Span)> = self
                .tables
                .iter()
                .filter(|(_, s)| s.splittable)
                .filter_map(|(t, _)| {
                    let es: Vec<&SpanEntry> =
                        self.spans.values().filter(|e| e.span.table == *t).collect();
                    (es.len() == 1).then(|| (*t, span_key(&es[0].span), es[0].span.clone()))
                })
                .collect();
            for (t, k, span) in single {
                let regions = ctx.regions.get(&t).map(|r| r.len() as u64 + 1).unwrap_or(1);
                if regions > sched.region_threshold {
                    let points = self.split_points(ctx, &span, None);
                    if self.start_split(k, points) {
                        return;
                    }
                }
            }
            // Split by write rate: a span written faster than the threshold is split into
            // pieces of about the threshold each (as its regions allow).
            if sched.write_key_threshold > 0 {
                let hot: Vec<(SpanKey, Span, u64)> = self
                    .spans
                    .iter()
                    .filter(|(_, e)| {
                        e.write_rate > sched.write_key_threshold
                            && self
                                .tables
                                .get(&e.span.table)
                                .map(|t| t.splittable)
                                .unwrap_or(false)
                    })
                    .map(|(k, e)| (k.clone(), e.span.clone(), e.write_rate))
                    .collect();
                for (k, span, rate) in hot {
                    let pieces = (rate.div_ceil(sched.write_key_threshold) as usize).max(2);
                    let inner = ctx
                        .regions
                        .get(&span.table)
                        .map(|r| {
                            r.iter()
                                .filter(|b| **b > span.start && **b < span.end)
                                .count()
                        })
                        .unwrap_or(0);
                    let points = self.split_points(ctx, &span, Some(pieces.min(inner + 1)));
                    if self.start_split(k, points) {
                        self.log(out, format!("split {span:?}: written at {rate} rows/s"));
                        return;
                    }
                }
            }
            // Merge (hysteresis: only at or below half the split threshold).
            let merge: Vec<TableId> = self
                .tables
                .iter()
                .filter(|(t, s)| {
                    !s.user_split
                        && self.spans.values().filter(|e| e.span.table == **t).count() > 1
                        && ctx.regions.get(t).map(|r| r.len() as u64 + 1).unwrap_or(1) * 2
                            <= sched.region_threshold
                        && (sched.write_key_threshold == 0
                            || self
                                .spans
                                .values()
                                .filter(|e| e.span.table == **t)
                                .map(|e| e.write_rate)
                                .sum::<u64>()
                                * 2
                                <= sched.write_key_threshold)
                })
                .map(|(t, _)| *t)
                .collect();
            if let Some(t) = merge.first() {
                self.queue_scheduler_request(TableRequest::Merge { table: *t }, ctx.now);
                return;
            }
        }
        // Balance: move one span from the most to the least loaded node when they differ by 2+.
        let nodes: Vec<NodeId> = self
            .ready
            .keys()
            .filter(|n| self.schedulable(ctx, n))
            .cloned()
            .collect();
        if nodes.len() < 2 {
            return;
        }
        let max = nodes
            .iter()
            .max_by_key(|n| (self.load(n), std::cmp::Reverse((*n).clone())))
            .cloned();
        let min = nodes
            .iter()
            .min_by_key(|n| (self.load(n), (*n).clone()))
            .cloned();
        if let (Some(max), Some(min)) = (max, min) {
            if self.load(&max) >= self.load(&min) + 2 {
                let k = self
                    .spans
                    .iter()
                    .find(|(_, e)| e.node.as_ref() == Some(&max) && e.op.is_none())
                    .map(|(k, _)| k.clone());
                if let Some(k) = k {
                    self.start_move(k, min);
                    self.log(out, format!("balance: moving a span from {max}"));
                }
            }
        }
    }

    // ------------------------------------------------------------------ checkpoint

    fn compute_checkpoint(&mut self, out: &mut Vec<Effect>) {
        if !matches!(self.phase, Phase::Working) {
            return;
        }
        let mut min = self.trigger_cp;
        for e in self.spans.values() {
            #[cfg(feature = "mutations")]
            if crate::mutations::on("checkpoint-ignores-absent")
                && e.state != SpanState::Replicating
            {
                continue;
            }
            min = min.min(e.checkpoint);
        }
        if min > self.committed {
            self.committed = min;
            self.barrier.gc(min);
            out.push(Effect::Trace(TraceEvent::MaintainerCheckpoint {
                cf: self.cf.clone(),
                epoch: self.epoch,
                checkpoint: min,
            }));
        }
        // Resolved ts: what every span's dispatcher (and the trigger) has received, at least the
        // checkpoint.
        let resolved = self
            .spans
            .values()
            .map(|e| e.resolved.max(e.checkpoint))
            .min()
            .unwrap_or(self.trigger_resolved)
            .min(self.trigger_resolved.max(self.trigger_cp));
        self.resolved = self.resolved.max(resolved).max(self.committed);
    }

    // ------------------------------------------------------------------ lifecycle

    pub fn on_nodes_changed(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
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
            for e in self.spans.values_mut() {
                if e.node.as_ref() == Some(&n) && e.op.is_none() {
                    e.state = SpanState::Absent;
                    e.node = None;
                    e.dispatcher = None;
                }
            }
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
        if self
            .last_status
            .map(|t| ctx.now >= t + MAINTAINER_STATUS_MS)
            .unwrap_or(true)
        {
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
