//! The dispatcher manager (one per changefeed per node) and its dispatchers (one per span).
//!
//! Invariants kept here:
//! - **fencing**: scheduling messages (create, remove, merge, barrier, close) are applied only
//!   when they come from the current owner `(maintainer node, epoch)`; a bootstrap is admitted
//!   only with a newer epoch (or the same epoch from the same node). Everything else is dropped
//!   and counted.
//! - **one writer per key range**: the manager never runs two dispatchers whose spans overlap,
//!   except a merge target whose sources are closing; a merge target starts only after every
//!   source is closed, so their writes never overlap in time.
//! - **close before reopen**: a dispatcher is reported `Stopped` only after the sink confirmed
//!   that none of its writes can still land.
//! - **intent survives failover**: a closing dispatcher keeps why it closes (remove, move with its
//!   destination, split with its points, merge with its target); bootstrap reports it.
//! - **barrier**: a dispatcher at a blocking DDL reports `Waiting` only once everything before the
//!   DDL is durable; the writer reports `Written` only once the DDL is durable; a duplicate or
//!   stale Write/Pass/Proceed is answered idempotently.
//! - **checkpoint**: a dispatcher's checkpoint never exceeds what the sink acknowledged as
//!   durable (or its start point), and is capped below a blocking DDL it has not passed. Outside
//!   that cap it never goes back: a write that starts while everything written is acknowledged
//!   first makes what was consumed so far the durable point (else a close, e.g. of a merge
//!   source, would report the last acknowledged write, possibly below a DDL it already passed,
//!   and its successor would replay rows of the table's version before that DDL).
//! - **errors stay reported**: a dispatcher whose sink failed for good stops (writes nothing
//!   more, its sink session is closed) and keeps its first error, which goes to the owner at once
//!   and again in every heartbeat until the dispatcher is removed (the changefeed's close), so a
//!   lost message or a maintainer failover cannot hide it.
//! - **never below an applied DDL**: a span dispatcher the maintainer did not start at a floor it
//!   knows reads its table's replay floor from the downstream before it subscribes, and starts
//!   no lower (`floor.rs`).

use crate::config::{
    ChangefeedConfig, HEARTBEAT_MS, MAX_BUFFERED_ITEMS, MAX_ERRORS_PER_HEARTBEAT,
    MAX_ROWS_PER_WRITE, RESEND_MS,
};
use crate::hold::{HoldPoint, Holds};
use crate::io::{Effect, SinkCommand, StreamItem, TraceEvent};
use crate::msg::{
    truncate_error, BarrierCommand, BlockReport, BlockStage, ClosePurpose, DispatcherErrorReport,
    DispatcherPhase, DispatcherReport, Message, RejectReason,
};
use sluice_types::{
    ChangefeedId, DdlEvent, DdlKind, DispatcherId, Epoch, InfluenceScope, Millis, NodeId, Span,
    TableId, Ts,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod floor;

/// A bootstrap request kept while `bootstrap_response` is held: (sender, epoch, trigger, config).
type HeldBootstrap = (NodeId, Epoch, Option<(DispatcherId, Ts)>, ChangefeedConfig);

/// Ids of removed dispatchers remembered so a create that arrives after its remove is refused.
pub const MAX_TOMBSTONES: usize = 8192;

/// The span the table trigger is registered under (it carries no rows).
pub fn trigger_span() -> Span {
    Span::whole_table(TableId(0))
}

#[derive(Clone, Debug, PartialEq)]
enum Phase {
    /// Accepted but not started: held at `create_dispatcher`, or a merge target whose sources
    /// are still closing.
    Creating,
    Working,
    /// Closing; `sink_closed` once the sink confirmed.
    Closing {
        purpose: ClosePurpose,
        sink_closed: bool,
    },
    /// A retryable sink error: the sink session is being closed, then the dispatcher restarts
    /// from its own checkpoint.
    Recovering {
        sink_closed: bool,
    },
    /// A fatal sink error (or retryable ones that persisted without progress): the dispatcher
    /// writes nothing more, its sink session is closed (`sink_closed` once confirmed), and its
    /// first error (truncated) is reported in every heartbeat until it is removed.
    Failed {
        error: String,
        sink_closed: bool,
    },
}

#[derive(Clone, Debug)]
struct Block {
    ddl: DdlEvent,
    stage: Stage,
    last_report: Option<Millis>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Waiting for earlier writes to become durable.
    Flushing,
    Waiting,
    /// Told to write but held at `ddl_before_write`.
    WriteHeld,
    Writing,
    Written,
}

#[derive(Clone, Debug)]
struct Dispatcher {
    id: DispatcherId,
    span: Span,
    is_trigger: bool,
    start_ts: Ts,
    phase: Phase,
    buffer: VecDeque<StreamItem>,
    received_upto: Ts,
    consumed_upto: Ts,
    written_ts: Ts,
    flushed_ts: Ts,
    /// A flush acknowledgement that arrived while `sink_flush` was held.
    held_flush: Option<Ts>,
    flush_requested: bool,
    block: Option<Block>,
    pass_held: Option<Ts>,
    /// A passed DDL whose report is held at `ddl_after_pass`, or not yet sent.
    passed_report: Option<Ts>,
    merge_sources: Vec<DispatcherId>,
    /// Final checkpoints of merge sources that already closed.
    merge_closed: BTreeMap<DispatcherId, Ts>,
    remove_after_merge: bool,
    /// Rows written since the last heartbeat, and the rate reported in it (rows/s).
    rows_since_report: u64,
    write_rate: u64,
    /// Retryable sink failures in a row, and the flushed ts when the count last restarted.
    sink_failures: u32,
    sink_failures_since: Ts,
    /// The last retryable sink error: a warning while no progress was made since it.
    last_sink_error: Option<String>,
    /// Stopped at an unreplicable change of its table (`DdlKind::Unreplicable`): its ts and
    /// what it says. The dispatcher goes no further until the event is let through.
    halted: Option<(Ts, String)>,
    /// Its start ts is at or above its table's replay floor (see `floor.rs`).
    floor_known: bool,
    /// Waiting for its replay floor before it subscribes (see `floor.rs`).
    floor_wait: Option<floor::FloorWait>,
}

impl Dispatcher {
    fn new(id: DispatcherId, span: Span, is_trigger: bool, start_ts: Ts, phase: Phase) -> Self {
        Dispatcher {
            id,
            span,
            is_trigger,
            start_ts,
            phase,
            buffer: VecDeque::new(),
            received_upto: start_ts,
            consumed_upto: start_ts,
            written_ts: start_ts,
            flushed_ts: start_ts,
            held_flush: None,
            flush_requested: false,
            block: None,
            pass_held: None,
            passed_report: None,
            merge_sources: Vec::new(),
            merge_closed: BTreeMap::new(),
            remove_after_merge: false,
            rows_since_report: 0,
            write_rate: 0,
            sink_failures: 0,
            sink_failures_since: 0,
            last_sink_error: None,
            halted: None,
            floor_known: is_trigger,
            floor_wait: None,
        }
    }

    /// What stops this dispatcher's progress without failing it: a halt (see `halted`), or
    /// retryable sink errors with no progress since the last one.
    fn warning(&self) -> Option<String> {
        if let Some(w) = self.floor_warning() {
            return Some(w);
        }
        if let Some((ts, what)) = &self.halted {
            return Some(format!(
                "span {:?} of table {} stopped at ts {ts}: {what}",
                self.span, self.span.table.0
            ));
        }
        let e = self.last_sink_error.as_ref()?;
        (self.sink_failures > 0 && self.checkpoint() <= self.sink_failures_since).then(|| {
            format!(
                "span {:?} of table {}: the sink is retrying ({} failures without progress, \
                 limit {}): {e}",
                self.span,
                self.span.table.0,
                self.sink_failures,
                crate::config::MAX_SINK_RETRIES_WITHOUT_PROGRESS
            )
        })
    }

    /// A new write starts: if everything written so far is acknowledged, everything consumed
    /// is durable (nothing of it waits for the sink), so the checkpoint keeps that point while the
    /// new write is in flight.
    fn settle_durable(&mut self) {
        if self.written_ts <= self.flushed_ts {
            self.written_ts = self.written_ts.max(self.consumed_upto);
            self.flushed_ts = self.flushed_ts.max(self.consumed_upto);
        }
    }

    /// Counts one retryable sink failure (a failed write or floor read; progress since the last
    /// one starts the count again) and keeps it as the warning; true once past the limit.
    fn count_sink_failure(&mut self, message: &str) -> bool {
        let cp = self.checkpoint();
        if cp > self.sink_failures_since {
            self.sink_failures = 0;
            self.sink_failures_since = cp;
        }
        self.sink_failures += 1;
        self.last_sink_error = Some(truncate_error(message.to_string()));
        self.sink_failures > crate::config::MAX_SINK_RETRIES_WITHOUT_PROGRESS
    }

    fn checkpoint(&self) -> Ts {
        let cp = if self.written_ts > self.flushed_ts {
            self.flushed_ts
        } else {
            self.consumed_upto
        };
        let cp = cp.max(self.start_ts);
        match &self.block {
            Some(b) => cp.min(b.ddl.commit_ts.saturating_sub(1)),
            None => cp,
        }
    }

    fn is_blocking(&self, ddl: &DdlEvent) -> bool {
        // A DDL that reads other tables' definitions waits for their dispatchers too.
        if self.is_trigger || ddl.influence.trigger || !ddl.influence.sources.is_empty() {
            return true;
        }
        match &ddl.influence.scope {
            InfluenceScope::Tables(ts) => {
                !(ts.len() == 1 && ts[0] == self.span.table && self.span.is_whole_table())
            }
            InfluenceScope::Database(_) | InfluenceScope::All => true,
        }
    }

    /// What heartbeats and bootstrap responses say of this dispatcher. A DDL written while
    /// `ddl_after_write` is on is reported as still being written: the hold keeps the write from
    /// the maintainer on every path, not only in the block status.
    fn report(&self, holds: &Holds) -> DispatcherReport {
        let phase = match &self.phase {
            Phase::Creating => DispatcherPhase::Creating,
            // A failed dispatcher still owns its span until removed; its error rides separately.
            Phase::Working | Phase::Recovering { .. } | Phase::Failed { .. } => {
                DispatcherPhase::Working
            }
            Phase::Closing { purpose, .. } => DispatcherPhase::Closing(purpose.clone()),
        };
        let block = self.block.as_ref().and_then(|b| {
            let stage = match b.stage {
                Stage::Flushing => return None,
                Stage::Waiting | Stage::WriteHeld => BlockStage::Waiting,
                Stage::Writing => BlockStage::Writing,
                Stage::Written if holds.is_on(HoldPoint::DdlAfterWrite) => BlockStage::Writing,
                Stage::Written => BlockStage::Written,
            };
            Some(BlockReport {
                ddl_ts: b.ddl.commit_ts,
                stage,
                ddl: Some(b.ddl.influence.clone()),
            })
        });
        DispatcherReport {
            id: self.id,
            span: self.span.clone(),
            is_trigger: self.is_trigger,
            phase,
            checkpoint: self.checkpoint(),
            block,
            merge_sources: self.merge_sources.clone(),
            write_rate: self.write_rate,
            resolved: self.received_upto.max(self.checkpoint()),
        }
    }
}

/// One changefeed's dispatchers on one node.
#[derive(Debug)]
pub struct DispatcherManager {
    cf: ChangefeedId,
    node: NodeId,
    incarnation: u64,
    owner: Option<(NodeId, Epoch)>,
    config: Option<ChangefeedConfig>,
    dispatchers: BTreeMap<DispatcherId, Dispatcher>,
    tombstones: BTreeSet<DispatcherId>,
    tombstone_order: VecDeque<DispatcherId>,
    /// Stopped dispatchers not yet reported (reported once in the next heartbeat, and again in
    /// later heartbeats until the owner changes or the bound is hit).
    stopped: BTreeMap<DispatcherId, (Span, Ts)>,
    held_bootstrap: Option<HeldBootstrap>,
    closing_all: Option<(NodeId, Epoch)>,
    closed: bool,
    hb_seq: u64,
    last_hb: Option<Millis>,
    /// A condition of the whole node that stops this changefeed's progress here (capture
    /// stopped), set by the node; reported as a warning in every heartbeat while it lasts.
    node_warning: Option<String>,
    pub stale_dropped: u64,
}

/// What the simulator and the API see of held work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldWork {
    pub point: HoldPoint,
    pub table: TableId,
    pub id: DispatcherId,
}

/// A dispatcher as observers (API `/dispatchers`, simulator checks) see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatcherView {
    pub id: DispatcherId,
    pub span: Span,
    pub is_trigger: bool,
    pub state: &'static str,
    pub checkpoint: Ts,
}

impl DispatcherManager {
    pub fn new(cf: ChangefeedId, node: NodeId, incarnation: u64) -> Self {
        DispatcherManager {
            cf,
            node,
            incarnation,
            owner: None,
            config: None,
            dispatchers: BTreeMap::new(),
            tombstones: BTreeSet::new(),
            tombstone_order: VecDeque::new(),
            stopped: BTreeMap::new(),
            held_bootstrap: None,
            closing_all: None,
            closed: false,
            hb_seq: 0,
            last_hb: None,
            node_warning: None,
            stale_dropped: 0,
        }
    }

    pub fn owner(&self) -> Option<&(NodeId, Epoch)> {
        self.owner.as_ref()
    }

    /// True once a cascade close finished; the node then drops this manager.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn dispatchers(&self) -> Vec<DispatcherView> {
        self.dispatchers
            .values()
            .map(|d| DispatcherView {
                id: d.id,
                span: d.span.clone(),
                is_trigger: d.is_trigger,
                state: match d.phase {
                    Phase::Creating => "creating",
                    Phase::Working => "working",
                    Phase::Closing { .. } => "closing",
                    Phase::Recovering { .. } => "recovering",
                    Phase::Failed { .. } => "failed",
                },
                checkpoint: d.checkpoint(),
            })
            .collect()
    }

    /// Work waiting at a hold point now.
    pub fn held(&self, holds: &Holds) -> Vec<HeldWork> {
        let mut out = Vec::new();
        for d in self.dispatchers.values() {
            let mut push = |point| {
                out.push(HeldWork {
                    point,
                    table: d.span.table,
                    id: d.id,
                })
            };
            if d.phase == Phase::Creating
                && d.merge_sources.is_empty()
                && d.floor_wait.is_none()
                && holds.is_on(HoldPoint::CreateDispatcher)
            {
                push(HoldPoint::CreateDispatcher);
            }
            if let Phase::Closing {
                sink_closed: true, ..
            } = d.phase
            {
                if holds.is_on(HoldPoint::CloseDispatcher) {
                    push(HoldPoint::CloseDispatcher);
                }
            }
            if let Some(b) = &d.block {
                if b.stage == Stage::WriteHeld {
                    push(HoldPoint::DdlBeforeWrite);
                }
                if b.stage == Stage::Written && holds.is_on(HoldPoint::DdlAfterWrite) {
                    push(HoldPoint::DdlAfterWrite);
                }
            }
            if d.pass_held.is_some() {
                push(HoldPoint::DdlBeforePass);
            }
            if d.passed_report.is_some() && holds.is_on(HoldPoint::DdlAfterPass) {
                push(HoldPoint::DdlAfterPass);
            }
            if d.held_flush.is_some() && holds.is_on(HoldPoint::SinkFlush) {
                push(HoldPoint::SinkFlush);
            }
        }
        if self.held_bootstrap.is_some() {
            out.push(HeldWork {
                point: HoldPoint::BootstrapResponse,
                table: TableId(0),
                id: DispatcherId { epoch: 0, seq: 0 },
            });
        }
        out
    }

    /// The blocking DDL the given dispatcher is stopped at, with its stage.
    pub fn block_of(&self, id: DispatcherId) -> Option<(Ts, BlockStage)> {
        let b = self.dispatchers.get(&id)?.block.as_ref()?;
        let stage = match b.stage {
            Stage::Flushing => return None,
            Stage::Waiting | Stage::WriteHeld => BlockStage::Waiting,
            Stage::Writing => BlockStage::Writing,
            Stage::Written => BlockStage::Written,
        };
        Some((b.ddl.commit_ts, stage))
    }

    fn send_owner(&self, out: &mut Vec<Effect>, msg: Message) {
        if let Some((node, _)) = &self.owner {
            out.push(Effect::Send {
                to: node.clone(),
                msg,
            });
        }
    }

    fn owner_epoch(&self) -> Epoch {
        self.owner.as_ref().map(|o| o.1).unwrap_or_default()
    }

    fn admits(
        &mut self,
        from: &NodeId,
        epoch: Epoch,
        kind: &'static str,
        out: &mut Vec<Effect>,
    ) -> bool {
        #[allow(unused_mut)]
        let mut ok = matches!(&self.owner, Some((n, e)) if n == from && *e == epoch);
        #[cfg(feature = "mutations")]
        if crate::mutations::on("dm-ignores-epoch") && self.owner.is_some() {
            ok = true;
        }
        if ok {
            out.push(Effect::Trace(TraceEvent::Applied {
                cf: self.cf.clone(),
                kind,
                epoch,
            }));
        } else {
            self.stale_dropped += 1;
            out.push(Effect::Trace(TraceEvent::Stale {
                kind,
                reason: "not from the current (maintainer, epoch)",
            }));
        }
        ok
    }

    fn tombstone(&mut self, id: DispatcherId) {
        if self.tombstones.insert(id) {
            self.tombstone_order.push_back(id);
            while self.tombstone_order.len() > MAX_TOMBSTONES {
                if let Some(old) = self.tombstone_order.pop_front() {
                    self.tombstones.remove(&old);
                }
            }
        }
    }

    /// Handle a message addressed to this changefeed's dispatcher manager.
    pub fn on_message(
        &mut self,
        now: Millis,
        from: &NodeId,
        msg: Message,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        match msg {
            Message::Bootstrap {
                epoch,
                trigger,
                config,
                forget,
                ..
            } => {
                if self.owner.as_ref().map(|o| epoch >= o.1).unwrap_or(true) {
                    for id in forget.into_iter().take(MAX_TOMBSTONES) {
                        self.tombstone(id);
                    }
                }
                if holds.is_on(HoldPoint::BootstrapResponse) {
                    let newer = match &self.held_bootstrap {
                        Some((_, e, _, _)) => epoch >= *e,
                        None => true,
                    };
                    if newer {
                        self.held_bootstrap = Some((from.clone(), epoch, trigger, config));
                    }
                    return;
                }
                self.bootstrap(now, from, epoch, trigger, config, holds, out);
            }
            Message::Create {
                epoch,
                id,
                span,
                start_ts,
                floor_known,
                ..
            } => {
                if self.admits(from, epoch, "create", out) {
                    self.create(id, span, start_ts, floor_known, holds, out);
                }
            }
            Message::Remove {
                epoch, id, purpose, ..
            } => {
                if self.admits(from, epoch, "remove", out) {
                    self.remove(id, purpose, holds, out);
                }
            }
            Message::Merge {
                epoch,
                sources,
                target,
                span,
                ..
            } => {
                if self.admits(from, epoch, "merge", out) {
                    self.merge(sources, target, span, holds, out);
                }
            }
            Message::Barrier {
                epoch,
                id,
                ddl_ts,
                command,
                ..
            } => {
                if self.admits(from, epoch, "barrier_action", out) {
                    self.barrier(now, id, ddl_ts, command, holds, out);
                }
            }
            Message::CloseChangefeed { epoch, .. } => {
                // A cascade close comes from the coordinator with an epoch newer than (or equal
                // to) every maintainer's: admit any epoch at least the owner's.
                let newer = self.owner.as_ref().map(|o| epoch >= o.1).unwrap_or(true);
                if newer {
                    out.push(Effect::Trace(TraceEvent::Applied {
                        cf: self.cf.clone(),
                        kind: "close_changefeed",
                        epoch,
                    }));
                    self.owner = Some((from.clone(), epoch));
                    self.closing_all = Some((from.clone(), epoch));
                    let ids: Vec<_> = self.dispatchers.keys().copied().collect();
                    for id in ids {
                        self.remove(id, ClosePurpose::Remove, holds, out);
                    }
                    self.maybe_finish_close(out);
                } else {
                    self.stale_dropped += 1;
                    out.push(Effect::Trace(TraceEvent::Stale {
                        kind: "close_changefeed",
                        reason: "older epoch",
                    }));
                }
            }
            other => {
                out.push(Effect::Trace(TraceEvent::Stale {
                    kind: other.kind(),
                    reason: "not for a dispatcher manager",
                }));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn bootstrap(
        &mut self,
        now: Millis,
        from: &NodeId,
        epoch: Epoch,
        trigger: Option<(DispatcherId, Ts)>,
        config: ChangefeedConfig,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        if let Some((n, e)) = &self.owner {
            if epoch < *e || (epoch == *e && n != from) {
                self.stale_dropped += 1;
                out.push(Effect::Trace(TraceEvent::Stale {
                    kind: "bootstrap",
                    reason: "older epoch",
                }));
                return;
            }
        }
        if self.closing_all.is_some() {
            // A cascade close is under way; the maintainer of this epoch re-bootstraps later.
            return;
        }
        out.push(Effect::Trace(TraceEvent::Applied {
            cf: self.cf.clone(),
            kind: "bootstrap",
            epoch,
        }));
        self.owner = Some((from.clone(), epoch));
        self.config = Some(config);
        // The table trigger lives only on the maintainer's node, with the id it asks for.
        let triggers: Vec<DispatcherId> = self
            .dispatchers
            .values()
            .filter(|d| d.is_trigger && !matches!(d.phase, Phase::Closing { .. }))
            .map(|d| d.id)
            .collect();
        for tid in triggers {
            if trigger.map(|t| t.0) != Some(tid) {
                self.remove(tid, ClosePurpose::Remove, holds, out);
            }
        }
        if let Some((tid, start)) = trigger {
            if !self.dispatchers.contains_key(&tid) && !self.tombstones.contains(&tid) {
                self.start_dispatcher(
                    Dispatcher::new(tid, trigger_span(), true, start, Phase::Working),
                    out,
                );
            }
        }
        let mut reports: Vec<DispatcherReport> =
            self.dispatchers.values().map(|d| d.report(holds)).collect();
        for (id, (span, cp)) in &self.stopped {
            reports.push(stopped_report(*id, span.clone(), *cp));
        }
        self.send_owner(
            out,
            Message::BootstrapResponse {
                cf: self.cf.clone(),
                epoch,
                incarnation: self.incarnation,
                dispatchers: reports,
            },
        );
        self.last_hb = Some(now);
    }

    fn start_dispatcher(&mut self, mut d: Dispatcher, out: &mut Vec<Effect>) {
        if !d.floor_known {
            // Never below what the downstream already applied for its table: ask first.
            self.ask_floor(d, out);
            return;
        }
        d.phase = Phase::Working;
        out.push(Effect::Subscribe {
            cf: self.cf.clone(),
            id: d.id,
            span: d.span.clone(),
            is_trigger: d.is_trigger,
            start_ts: d.start_ts,
        });
        out.push(Effect::Trace(TraceEvent::DispatcherStarted {
            cf: self.cf.clone(),
            id: d.id,
            span: d.span.clone(),
            start_ts: d.start_ts,
        }));
        self.dispatchers.insert(d.id, d);
    }

    fn overlapping(&self, span: &Span, except: &[DispatcherId]) -> Option<DispatcherId> {
        self.dispatchers
            .values()
            .find(|d| !d.is_trigger && !except.contains(&d.id) && d.span.overlaps(span))
            .map(|d| d.id)
    }

    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        id: DispatcherId,
        span: Span,
        start_ts: Ts,
        floor_known: bool,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        if self.dispatchers.contains_key(&id) {
            return; // duplicate: the next heartbeat reports it
        }
        if self.tombstones.contains(&id) {
            // Removed before it was created: it stays removed.
            self.stopped.entry(id).or_insert((span, start_ts));
            return;
        }
        if self.closing_all.is_some() {
            self.send_owner(
                out,
                Message::Rejected {
                    cf: self.cf.clone(),
                    epoch: self.owner_epoch(),
                    id,
                    reason: RejectReason::Closing,
                },
            );
            return;
        }
        if let Some(with) = self.overlapping(&span, &[]) {
            #[cfg(feature = "mutations")]
            if crate::mutations::on("dm-admits-overlap") {
                self.start_dispatcher(
                    Dispatcher::new(id, span, false, start_ts, Phase::Working),
                    out,
                );
                return;
            }
            self.send_owner(
                out,
                Message::Rejected {
                    cf: self.cf.clone(),
                    epoch: self.owner_epoch(),
                    id,
                    reason: RejectReason::Overlap { with },
                },
            );
            return;
        }
        let mut d = Dispatcher::new(id, span, false, start_ts, Phase::Creating);
        d.floor_known = floor_known;
        if holds.is_on(HoldPoint::CreateDispatcher) {
            self.dispatchers.insert(id, d);
        } else {
            self.start_dispatcher(d, out);
        }
    }

    fn remove(
        &mut self,
        id: DispatcherId,
        purpose: ClosePurpose,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        self.tombstone(id);
        let Some(d) = self.dispatchers.get_mut(&id) else {
            self.stopped.entry(id).or_insert((trigger_span(), 0));
            return;
        };
        match &mut d.phase {
            Phase::Creating if !d.merge_sources.is_empty() && d.floor_wait.is_none() => {
                // A merge target waiting for its sources: it will not start.
                d.remove_after_merge = true;
            }
            Phase::Creating => {
                // Never started, never wrote.
                let cp = d.checkpoint();
                let span = d.span.clone();
                self.dispatchers.remove(&id);
                self.stopped.insert(id, (span, cp));
                out.push(Effect::Trace(TraceEvent::DispatcherClosed {
                    cf: self.cf.clone(),
                    id,
                }));
            }
            Phase::Closing { purpose: p, .. } => {
                if !matches!(p, ClosePurpose::MergeInto { .. }) {
                    *p = purpose;
                }
            }
            Phase::Working | Phase::Recovering { .. } | Phase::Failed { .. } => {
                // Recovering and failed dispatchers already asked their sink session to close.
                let close_sent = !matches!(d.phase, Phase::Working);
                let sink_closed = matches!(
                    d.phase,
                    Phase::Recovering { sink_closed: true }
                        | Phase::Failed {
                            sink_closed: true,
                            ..
                        }
                );
                d.phase = Phase::Closing {
                    purpose,
                    sink_closed,
                };
                d.buffer.clear();
                d.block = None;
                if !close_sent {
                    out.push(Effect::Unsubscribe {
                        cf: self.cf.clone(),
                        id,
                    });
                    out.push(Effect::Sink(SinkCommand::Close {
                        cf: self.cf.clone(),
                        id,
                    }));
                }
            }
        }
        self.finish_closing(id, holds, out);
    }

    /// A closing dispatcher whose sink is closed becomes stopped (unless held).
    fn finish_closing(&mut self, id: DispatcherId, holds: &Holds, out: &mut Vec<Effect>) {
        let Some(d) = self.dispatchers.get(&id) else {
            return;
        };
        let Phase::Closing {
            sink_closed: true,
            purpose,
        } = &d.phase
        else {
            return;
        };
        if holds.is_on(HoldPoint::CloseDispatcher) {
            return;
        }
        let purpose = purpose.clone();
        let cp = d.checkpoint();
        let span = d.span.clone();
        self.dispatchers.remove(&id);
        self.stopped.insert(id, (span, cp));
        out.push(Effect::Trace(TraceEvent::DispatcherClosed {
            cf: self.cf.clone(),
            id,
        }));
        if let ClosePurpose::MergeInto { target } = purpose {
            self.merge_source_closed(target, id, cp, holds, out);
        }
        self.maybe_finish_close(out);
    }

    fn maybe_finish_close(&mut self, out: &mut Vec<Effect>) {
        if let Some((node, epoch)) = self.closing_all.clone() {
            if self.dispatchers.is_empty() {
                self.closed = true;
                out.push(Effect::Send {
                    to: node,
                    msg: Message::CloseChangefeedResponse {
                        cf: self.cf.clone(),
                        epoch,
                    },
                });
            }
        }
    }

    fn merge(
        &mut self,
        sources: Vec<DispatcherId>,
        target: DispatcherId,
        span: Span,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        if self.dispatchers.contains_key(&target) {
            return; // already merging: duplicate request
        }
        if self.tombstones.contains(&target) {
            self.stopped.entry(target).or_insert((span, 0));
            return;
        }
        // Validate: every source working here, same table, adjacent, exactly covering `span`.
        let mut spans = Vec::new();
        for s in &sources {
            match self.dispatchers.get(s) {
                Some(d) if d.phase == Phase::Working && !d.is_trigger => spans.push(d.span.clone()),
                _ => {
                    self.send_owner(
                        out,
                        Message::Rejected {
                            cf: self.cf.clone(),
                            epoch: self.owner_epoch(),
                            id: target,
                            reason: RejectReason::MergeSources,
                        },
                    );
                    return;
                }
            }
        }
        spans.sort_by(|a, b| a.start.cmp(&b.start));
        let refs: Vec<&Span> = spans.iter().collect();
        if sources.len() < 2
            || !sluice_types::spans_partition(&span, &refs)
            || self.overlapping(&span, &sources).is_some()
        {
            self.send_owner(
                out,
                Message::Rejected {
                    cf: self.cf.clone(),
                    epoch: self.owner_epoch(),
                    id: target,
                    reason: RejectReason::MergeSources,
                },
            );
            return;
        }
        let mut t = Dispatcher::new(target, span, false, 0, Phase::Creating);
        t.merge_sources = sources.clone();
        self.dispatchers.insert(target, t);
        for s in sources {
            self.remove(s, ClosePurpose::MergeInto { target }, holds, out);
        }
    }

    fn merge_source_closed(
        &mut self,
        target: DispatcherId,
        source: DispatcherId,
        cp: Ts,
        _holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        let Some(t) = self.dispatchers.get_mut(&target) else {
            return;
        };
        t.merge_closed.insert(source, cp);
        if t.merge_sources
            .iter()
            .all(|s| t.merge_closed.contains_key(s))
            && t.phase == Phase::Creating
        {
            let start = t.merge_closed.values().copied().min().unwrap_or(0);
            if t.remove_after_merge {
                let span = t.span.clone();
                self.dispatchers.remove(&target);
                self.stopped.insert(target, (span, start));
                return;
            }
            let Some(mut t) = self.dispatchers.remove(&target) else {
                return;
            };
            t.start_ts = start;
            t.received_upto = start;
            t.consumed_upto = start;
            t.written_ts = start;
            t.flushed_ts = start;
            self.start_dispatcher(t, out);
        }
    }

    fn barrier(
        &mut self,
        now: Millis,
        id: DispatcherId,
        ddl_ts: Ts,
        command: BarrierCommand,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        let cf = self.cf.clone();
        let epoch = self.owner_epoch();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        if !matches!(d.phase, Phase::Working) {
            return;
        }
        let Some(b) = d.block.as_mut() else { return };
        if b.ddl.commit_ts != ddl_ts {
            return; // a stale action for an event already passed, or one not reached yet
        }
        match (command, b.stage) {
            (BarrierCommand::Write, Stage::Waiting) => {
                if holds.is_on(HoldPoint::DdlBeforeWrite) {
                    b.stage = Stage::WriteHeld;
                } else {
                    do_write(&cf, d, out);
                }
            }
            (BarrierCommand::Write, Stage::Written) => {
                b.last_report = None; // duplicate Write: report Written again
            }
            (BarrierCommand::Pass, Stage::Waiting)
                if b.ddl.influence.dropped.contains(&d.span.table) =>
            {
                // The DDL drops this dispatcher's table: there is nothing after it to replicate;
                // stay here until removed (never let the checkpoint pass the drop).
            }
            (BarrierCommand::Pass, Stage::Waiting) => {
                if holds.is_on(HoldPoint::DdlBeforePass) {
                    d.pass_held = Some(ddl_ts);
                } else {
                    pass(d);
                }
            }
            (BarrierCommand::Proceed, Stage::Written) => {
                d.block = None;
                d.buffer.pop_front();
                d.consumed_upto = d.consumed_upto.max(ddl_ts);
            }
            _ => {}
        }
        let _ = (now, epoch);
        self.pump(id, now, holds, out);
    }

    /// Whether dispatcher `id` takes events now: it works, is not stopped at a DDL or an
    /// unreplicable change, and has room in its buffer. The feed reads only for those, so rows
    /// read never wait behind a barrier (see `feed`).
    pub fn wants_events(&self, id: DispatcherId) -> bool {
        self.dispatchers.get(&id).is_some_and(|d| {
            d.phase == Phase::Working
                && d.block.is_none()
                && d.halted.is_none()
                && d.buffer.len() < MAX_BUFFERED_ITEMS
        })
    }

    /// Events for a dispatcher from the event source.
    pub fn on_events(
        &mut self,
        now: Millis,
        id: DispatcherId,
        items: Vec<StreamItem>,
        resolved_ts: Ts,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        let cf = self.cf.clone();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        if d.phase != Phase::Working {
            return;
        }
        let mut resubscribe_from = None;
        for item in items {
            let ts = item.commit_ts();
            if ts <= d.received_upto {
                continue; // a repeat from before the cursor
            }
            // Full: stop at the next transaction boundary and ask again from there. A
            // transaction is never cut (one larger than the bound is taken whole: cutting it
            // and asking again would fetch it again, for ever).
            let boundary = d.buffer.back().is_none_or(|b| b.commit_ts() != ts);
            if d.buffer.len() >= MAX_BUFFERED_ITEMS && boundary {
                d.received_upto = ts.saturating_sub(1);
                resubscribe_from = Some(d.received_upto);
                break;
            }
            d.buffer.push_back(item);
            d.received_upto = d.received_upto.max(ts.saturating_sub(1));
        }
        match resubscribe_from {
            Some(from) => out.push(Effect::Subscribe {
                cf,
                id,
                span: d.span.clone(),
                is_trigger: d.is_trigger,
                start_ts: from,
            }),
            None => d.received_upto = d.received_upto.max(resolved_ts),
        }
        self.pump(id, now, holds, out);
    }

    pub fn on_sink_flushed(
        &mut self,
        now: Millis,
        id: DispatcherId,
        ts: Ts,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        if holds.is_on(HoldPoint::SinkFlush) {
            d.held_flush = Some(d.held_flush.unwrap_or(0).max(ts));
            return;
        }
        d.flushed_ts = d.flushed_ts.max(ts.min(d.written_ts));
        d.flush_requested = false;
        self.pump(id, now, holds, out);
    }

    pub fn on_sink_closed(
        &mut self,
        now: Millis,
        id: DispatcherId,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        match &mut d.phase {
            Phase::Closing { sink_closed, .. } => {
                *sink_closed = true;
                self.finish_closing(id, holds, out);
            }
            Phase::Recovering { .. } => {
                // Restart from the dispatcher's own checkpoint.
                let cp = d.checkpoint();
                let mut fresh =
                    Dispatcher::new(d.id, d.span.clone(), d.is_trigger, cp, Phase::Working);
                fresh.merge_sources = d.merge_sources.clone();
                fresh.sink_failures = d.sink_failures;
                fresh.sink_failures_since = d.sink_failures_since;
                self.dispatchers.remove(&id);
                self.start_dispatcher(fresh, out);
                self.pump(id, now, holds, out);
            }
            Phase::Failed { sink_closed, .. } => *sink_closed = true,
            _ => {}
        }
    }

    /// The dispatcher failed for good: it stops, its session is closed, and its (first) error is
    /// reported now and in every heartbeat until it is removed.
    fn fail(&mut self, id: DispatcherId, message: String, out: &mut Vec<Effect>) {
        let cf = self.cf.clone();
        let epoch = self.owner_epoch();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        let message = truncate_error(message);
        let sink_closed = match d.phase {
            Phase::Working => {
                out.push(Effect::Unsubscribe { cf: cf.clone(), id });
                out.push(Effect::Sink(SinkCommand::Close { cf: cf.clone(), id }));
                false
            }
            Phase::Recovering { sink_closed } => sink_closed,
            // A closing dispatcher is going away anyway; a failed one keeps its first error.
            _ => return,
        };
        d.phase = Phase::Failed {
            error: message.clone(),
            sink_closed,
        };
        d.buffer.clear();
        d.block = None;
        out.push(Effect::Trace(TraceEvent::Log(format!(
            "dispatcher {id:?}: failed, reported until the changefeed closes it: {message}"
        ))));
        self.send_owner(
            out,
            Message::DispatcherError {
                cf,
                epoch,
                id,
                message,
            },
        );
    }

    pub fn on_sink_error(
        &mut self,
        id: DispatcherId,
        retryable: bool,
        message: String,
        out: &mut Vec<Effect>,
    ) {
        let cf = self.cf.clone();
        let epoch = self.owner_epoch();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        if let Phase::Failed { .. } = d.phase {
            // Already failed: its first error stays the one reported.
            out.push(Effect::Trace(TraceEvent::Log(format!(
                "dispatcher {id:?}: another sink error after it failed: {message}"
            ))));
            return;
        }
        if !retryable {
            if let Phase::Closing { .. } = d.phase {
                // Closing: reported once (the dispatcher goes away; a replacement meets a lasting
                // failure again and reports it itself).
                self.send_owner(
                    out,
                    Message::DispatcherError {
                        cf,
                        epoch,
                        id,
                        message: truncate_error(message),
                    },
                );
                return;
            }
            self.fail(id, message, out);
            return;
        }
        if d.phase != Phase::Working {
            // The session that failed is already being closed (recovering, or closing for good):
            // a later error of it is the same failure, or one the close makes moot. One failure
            // counts once towards the limit below.
            out.push(Effect::Trace(TraceEvent::Log(format!(
                "dispatcher {id:?}: retryable sink error of a session being closed: {message}"
            ))));
            return;
        }
        if d.count_sink_failure(&message) {
            let message = format!(
                "the sink failed {} times in a row without progress (last: {message})",
                d.sink_failures - 1
            );
            self.fail(id, message, out);
            return;
        }
        #[cfg(feature = "mutations")]
        if crate::mutations::on("sink-error-restarts-changefeed") {
            self.send_owner(
                out,
                Message::DispatcherError {
                    cf,
                    epoch,
                    id,
                    message,
                },
            );
            return;
        }
        d.phase = Phase::Recovering { sink_closed: false };
        d.buffer.clear();
        d.block = None;
        out.push(Effect::Unsubscribe { cf: cf.clone(), id });
        out.push(Effect::Sink(SinkCommand::Close { cf, id }));
        out.push(Effect::Trace(TraceEvent::Log(format!(
            "dispatcher {id:?}: retryable sink error, restarting it alone: {message}"
        ))));
    }

    /// The sink refuses this dispatcher's table as it is (`Input::SinkError::table_only`, e.g.
    /// no key): the dispatcher stops where its sink acknowledged (nothing more is written, its
    /// checkpoint stays), reports a warning naming the fix, and the changefeed goes on with its
    /// other tables instead of restarting for one table.
    pub fn on_table_refused(&mut self, id: DispatcherId, message: String, out: &mut Vec<Effect>) {
        let cf = self.cf.clone();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        if d.phase != Phase::Working || d.halted.is_some() {
            return;
        }
        let at = d.checkpoint() + 1;
        halt(&cf, id, d, at, truncate_error(message), out);
    }

    /// A hold point was switched on this node.
    pub fn on_hold(
        &mut self,
        now: Millis,
        point: HoldPoint,
        on: bool,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        if on {
            return;
        }
        match point {
            HoldPoint::CreateDispatcher => {
                let held: Vec<DispatcherId> = self
                    .dispatchers
                    .values()
                    .filter(|d| {
                        d.phase == Phase::Creating
                            && d.merge_sources.is_empty()
                            && d.floor_wait.is_none()
                    })
                    .map(|d| d.id)
                    .collect();
                for id in held {
                    if let Some(d) = self.dispatchers.remove(&id) {
                        self.start_dispatcher(d, out);
                    }
                }
            }
            HoldPoint::CloseDispatcher => {
                let ids: Vec<DispatcherId> = self.dispatchers.keys().copied().collect();
                for id in ids {
                    self.finish_closing(id, holds, out);
                }
            }
            HoldPoint::BootstrapResponse => {
                if let Some((from, epoch, trigger, config)) = self.held_bootstrap.take() {
                    self.bootstrap(now, &from, epoch, trigger, config, holds, out);
                }
            }
            HoldPoint::SinkFlush => {
                let ids: Vec<(DispatcherId, Ts)> = self
                    .dispatchers
                    .values_mut()
                    .filter_map(|d| d.held_flush.take().map(|t| (d.id, t)))
                    .collect();
                for (id, ts) in ids {
                    self.on_sink_flushed(now, id, ts, holds, out);
                }
            }
            HoldPoint::DdlBeforeWrite => {
                let cf = self.cf.clone();
                for d in self.dispatchers.values_mut() {
                    if d.block
                        .as_ref()
                        .map(|b| b.stage == Stage::WriteHeld)
                        .unwrap_or(false)
                    {
                        do_write(&cf, d, out);
                    }
                }
            }
            HoldPoint::DdlBeforePass => {
                for d in self.dispatchers.values_mut() {
                    if d.pass_held.take().is_some() {
                        pass(d);
                    }
                }
            }
            HoldPoint::DdlAfterWrite | HoldPoint::DdlAfterPass => {}
        }
        let ids: Vec<DispatcherId> = self.dispatchers.keys().copied().collect();
        for id in ids {
            self.pump(id, now, holds, out);
        }
    }

    /// Move a dispatcher's stream forward as far as it can go.
    fn pump(&mut self, id: DispatcherId, now: Millis, holds: &Holds, out: &mut Vec<Effect>) {
        let cf = self.cf.clone();
        let epoch = self.owner_epoch();
        let owner = self.owner.as_ref().map(|o| o.0.clone());
        let ignore = self
            .config
            .as_ref()
            .map(|c| c.filter.clone())
            .unwrap_or_default();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        if d.phase != Phase::Working || d.halted.is_some() {
            return;
        }
        let mut rows: Vec<(Ts, sluice_types::Key, u64)> = Vec::new();
        loop {
            if d.block.is_some() {
                break;
            }
            let Some(front) = d.buffer.front() else { break };
            match front {
                StreamItem::Row {
                    commit_ts,
                    key,
                    handle,
                    kind,
                } => {
                    // Rows of an ignored event type are consumed, not written.
                    if ignore.ignores_row(*kind) {
                        d.buffer.pop_front();
                        continue;
                    }
                    let key = key.clone();
                    #[cfg(feature = "mutations")]
                    if crate::mutations::on("drop-rows") && handle % 50 == 7 {
                        d.buffer.pop_front();
                        continue;
                    }
                    // A sink write carries whole transactions: a full batch is cut only where
                    // the commit ts changes (a transaction larger than the bound stays whole).
                    let ts = *commit_ts;
                    if rows.len() >= MAX_ROWS_PER_WRITE
                        && rows.last().map(|r| r.0 != ts).unwrap_or(false)
                    {
                        out.push(Effect::Sink(SinkCommand::WriteRows {
                            cf: cf.clone(),
                            id,
                            span: d.span.clone(),
                            rows: std::mem::take(&mut rows),
                        }));
                    }
                    rows.push((ts, key, *handle));
                    d.rows_since_report += 1;
                    d.settle_durable();
                    d.written_ts = d.written_ts.max(ts);
                    d.buffer.pop_front();
                }
                StreamItem::Ddl { ddl, .. } if ddl.kind == DdlKind::Unreplicable => {
                    if ignore.ignores("unreplicable") {
                        // Let through by the user: consumed, never written.
                        d.buffer.pop_front();
                        continue;
                    }
                    if d.halted.is_none() {
                        let what = format!(
                            "{}; to let it go on, add \"unreplicable\" to the changefeed's \
                             [filter] ignore-event",
                            ddl.query
                        );
                        halt(&cf, id, d, ddl.commit_ts, what, out);
                    }
                    break;
                }
                StreamItem::Ddl { ddl, handle } => {
                    let ddl = ddl.clone();
                    let handle = *handle;
                    if d.is_blocking(&ddl) {
                        d.block = Some(Block {
                            ddl,
                            stage: Stage::Flushing,
                            last_report: None,
                        });
                    } else if ignore.ignores("ddl") {
                        // An ignored DDL is consumed, not written.
                        d.buffer.pop_front();
                    } else {
                        if !rows.is_empty() {
                            out.push(Effect::Sink(SinkCommand::WriteRows {
                                cf: cf.clone(),
                                id,
                                span: d.span.clone(),
                                rows: std::mem::take(&mut rows),
                            }));
                        }
                        d.settle_durable();
                        d.written_ts = d.written_ts.max(ddl.commit_ts);
                        out.push(Effect::Sink(SinkCommand::WriteDdl {
                            cf: cf.clone(),
                            id,
                            ddl,
                            handle,
                        }));
                        d.buffer.pop_front();
                    }
                }
            }
        }
        if !rows.is_empty() {
            #[cfg(feature = "mutations")]
            if crate::mutations::on("reverse-batch") {
                rows.reverse();
            }
            out.push(Effect::Sink(SinkCommand::WriteRows {
                cf: cf.clone(),
                id,
                span: d.span.clone(),
                rows,
            }));
        }
        d.consumed_upto = match d.buffer.front() {
            Some(item) => d.consumed_upto.max(item.commit_ts().saturating_sub(1)),
            None => d.consumed_upto.max(d.received_upto),
        };
        // Blocking DDL progress.
        let mut report = None;
        if let Some(b) = d.block.as_mut() {
            match b.stage {
                Stage::Flushing => {
                    if d.flushed_ts >= d.written_ts {
                        b.stage = Stage::Waiting;
                    } else if !d.flush_requested {
                        d.flush_requested = true;
                        out.push(Effect::Sink(SinkCommand::Flush { cf: cf.clone(), id }));
                    }
                }
                Stage::Writing => {
                    if d.flushed_ts >= b.ddl.commit_ts {
                        b.stage = Stage::Written;
                        b.last_report = None;
                    } else if !d.flush_requested {
                        d.flush_requested = true;
                        out.push(Effect::Sink(SinkCommand::Flush { cf: cf.clone(), id }));
                    }
                }
                _ => {}
            }
            let due = b.last_report.map(|t| now >= t + RESEND_MS).unwrap_or(true);
            let reportable = match b.stage {
                Stage::Waiting => true,
                Stage::Written => !holds.is_on(HoldPoint::DdlAfterWrite),
                _ => false,
            };
            if due && reportable {
                b.last_report = Some(now);
                let stage = if b.stage == Stage::Written {
                    BlockStage::Written
                } else {
                    BlockStage::Waiting
                };
                report = Some(BlockReport {
                    ddl_ts: b.ddl.commit_ts,
                    stage,
                    ddl: Some(b.ddl.influence.clone()),
                });
            }
        }
        if let Some(ts) = d.passed_report {
            if !holds.is_on(HoldPoint::DdlAfterPass) {
                d.passed_report = None;
                if let Some(owner) = &owner {
                    out.push(Effect::Send {
                        to: owner.clone(),
                        msg: Message::BlockStatus {
                            cf: cf.clone(),
                            epoch,
                            id,
                            span: d.span.clone(),
                            report: BlockReport {
                                ddl_ts: ts,
                                stage: BlockStage::Passed,
                                ddl: None,
                            },
                        },
                    });
                }
            }
        }
        if let (Some(report), Some(owner)) = (report, owner) {
            out.push(Effect::Send {
                to: owner,
                msg: Message::BlockStatus {
                    cf,
                    epoch,
                    id,
                    span: d.span.clone(),
                    report,
                },
            });
        }
    }

    /// Periodic work: heartbeats, resends.
    pub fn on_tick(&mut self, now: Millis, holds: &Holds, out: &mut Vec<Effect>) {
        self.retry_floors(now, out);
        let ids: Vec<DispatcherId> = self.dispatchers.keys().copied().collect();
        for id in ids {
            self.pump(id, now, holds, out);
        }
        if self.owner.is_none() || self.held_bootstrap.is_some() {
            return;
        }
        if self
            .last_hb
            .map(|t| now >= t + HEARTBEAT_MS)
            .unwrap_or(true)
        {
            let elapsed = self
                .last_hb
                .map(|t| now.saturating_sub(t))
                .unwrap_or(HEARTBEAT_MS)
                .max(1);
            for d in self.dispatchers.values_mut() {
                d.write_rate = d.rows_since_report * 1000 / elapsed;
                d.rows_since_report = 0;
            }
            self.last_hb = Some(now);
            self.hb_seq += 1;
            let mut reports: Vec<DispatcherReport> =
                self.dispatchers.values().map(|d| d.report(holds)).collect();
            for (id, (span, cp)) in &self.stopped {
                reports.push(stopped_report(*id, span.clone(), *cp));
            }
            // Stopped dispatchers are reported a bounded number of times, then forgotten; the
            // maintainer also learns from complete heartbeats that they are gone.
            self.stopped.clear();
            // Failed dispatchers' errors, every time, until the changefeed closes them.
            let errors: Vec<DispatcherErrorReport> = self
                .dispatchers
                .values()
                .filter_map(|d| match &d.phase {
                    Phase::Failed { error, .. } => Some(DispatcherErrorReport {
                        id: d.id,
                        message: error.clone(),
                    }),
                    _ => None,
                })
                .take(MAX_ERRORS_PER_HEARTBEAT)
                .collect();
            let warnings = self.warnings();
            let msg = Message::Heartbeat {
                cf: self.cf.clone(),
                epoch: self.owner_epoch(),
                incarnation: self.incarnation,
                seq: self.hb_seq,
                complete: true,
                dispatchers: reports,
                errors,
                warnings,
            };
            self.send_owner(out, msg);
        }
    }

    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// Sets (or clears) the node-wide warning (see `node_warning`).
    pub fn set_node_warning(&mut self, warning: Option<String>) {
        self.node_warning = warning;
    }

    /// The current warnings: the node's own, then each dispatcher's, bounded.
    pub fn warnings(&self) -> Vec<String> {
        self.node_warning
            .iter()
            .cloned()
            .chain(self.dispatchers.values().filter_map(|d| d.warning()))
            .take(MAX_ERRORS_PER_HEARTBEAT)
            .collect()
    }
}

/// The dispatcher stops for good at `at` (see `Dispatcher::halted`): it takes no more events
/// and says why in every heartbeat until the changefeed is restarted by the user.
fn halt(
    cf: &ChangefeedId,
    id: DispatcherId,
    d: &mut Dispatcher,
    at: Ts,
    what: String,
    out: &mut Vec<Effect>,
) {
    out.push(Effect::Trace(TraceEvent::Log(format!(
        "dispatcher {id:?}: stopped: {what}"
    ))));
    d.halted = Some((at, what));
    out.push(Effect::Unsubscribe { cf: cf.clone(), id });
}

fn stopped_report(id: DispatcherId, span: Span, cp: Ts) -> DispatcherReport {
    DispatcherReport {
        id,
        span,
        is_trigger: false,
        phase: DispatcherPhase::Stopped,
        checkpoint: cp,
        block: None,
        merge_sources: Vec::new(),
        write_rate: 0,
        resolved: cp,
    }
}

fn do_write(cf: &ChangefeedId, d: &mut Dispatcher, out: &mut Vec<Effect>) {
    if d.block.is_none() {
        return;
    }
    d.settle_durable();
    let Some(b) = d.block.as_mut() else { return };
    let handle = match d.buffer.front() {
        Some(StreamItem::Ddl { handle, .. }) => *handle,
        _ => 0,
    };
    b.stage = Stage::Writing;
    d.written_ts = d.written_ts.max(b.ddl.commit_ts);
    out.push(Effect::Sink(SinkCommand::WriteDdl {
        cf: cf.clone(),
        id: d.id,
        ddl: b.ddl.clone(),
        handle,
    }));
    d.flush_requested = true;
    out.push(Effect::Sink(SinkCommand::Flush {
        cf: cf.clone(),
        id: d.id,
    }));
}

fn pass(d: &mut Dispatcher) {
    if let Some(b) = d.block.take() {
        d.buffer.pop_front();
        d.consumed_upto = d.consumed_upto.max(b.ddl.commit_ts);
        d.passed_report = Some(b.ddl.commit_ts);
    }
}
