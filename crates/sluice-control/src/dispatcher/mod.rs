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
//!
//! Layout: this file holds the types, the views, the fencing of scheduling messages and their
//! dispatch; `DispatcherManager`'s other `impl` blocks are one concern each: `lifecycle.rs`
//! (bootstrap, create, remove, merge), `barrier.rs` (a blocking DDL's Write and Pass),
//! `events.rs` (events from the feed, the sink's answers), `pump.rs` (moving a stream into
//! sink writes, hold points, heartbeats) and `floor.rs` (replay floors).

use crate::config::{
    complete_heartbeat_ms, ChangefeedConfig, HEARTBEAT_MS, MAX_BUFFERED_ITEMS,
    MAX_ERRORS_PER_HEARTBEAT, MAX_ROWS_PER_WRITE, RESEND_MS,
};
use crate::hold::{HoldPoint, Holds};
use crate::io::{Effect, SinkCommand, StreamItem, TraceEvent};
use crate::msg::{
    truncate_error, BarrierCommand, BlockReport, BlockStage, ClosePurpose, CopyReport,
    DispatcherErrorReport, DispatcherPhase, DispatcherReport, Message, RejectReason,
};
use sluice_types::{
    ChangefeedId, DdlEvent, DdlKind, DispatcherId, Epoch, InfluenceScope, Millis, NodeId, Span,
    TableId, Ts,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod barrier;
mod copy;
pub use copy::QueuedRead;
mod events;
mod floor;
mod lifecycle;
mod pump;
mod set;

/// A bootstrap request kept while `bootstrap_response` is held: (sender, epoch, trigger, config).
type HeldBootstrap = (NodeId, Epoch, Option<(DispatcherId, Ts)>, ChangefeedConfig);
/// A bootstrap request's content: (epoch, trigger, config, ids to forget).
type BootstrapRequest = (
    Epoch,
    Option<(DispatcherId, Ts)>,
    ChangefeedConfig,
    Vec<DispatcherId>,
);

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
    /// The blocking DDL it is stopped at. Boxed, like `copy` and `last_reported`: rare or
    /// large (a dispatcher is 1120 bytes with the three inline, about 530 with them boxed, and
    /// a `sluice-sim scale` run keeps 1,000,000).
    block: Option<Box<Block>>,
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
    /// Rows written and not acknowledged: since when the acknowledged ts last moved (or a part
    /// of an open transaction was written), and where both stood then (`None` while everything
    /// written is acknowledged).
    ack_wait: Option<(Millis, Ts, u64)>,
    /// Rows written of the transaction still open (its parts so far; 0 when none is open).
    open_rows: u64,
    /// The last row of the parts of an open transaction taken so far, kept back from its
    /// write: the write that ends the transaction then carries at least one row of it, so the
    /// sink learns of its end even when every later row of it is filtered out.
    held_part: Option<(Ts, sluice_types::Key, u64)>,
    /// The wait above is longer than [`crate::config::SINK_ACK_STALL_MS`]: how long, in ms.
    ack_stalled_ms: Option<Millis>,
    /// Its snapshot copy, if it copies its span (see `copy.rs`).
    copy: Option<Box<copy::Copy>>,
    /// What its report said when a heartbeat last carried it.
    last_reported: Option<Box<ReportSig>>,
    /// The owner was told it rests ([`DispatcherReport::rests`]): heartbeats skip it until it
    /// no longer may (then its next report, without `rests`, is always sent).
    resting: bool,
}

/// Everything of a dispatcher's report that can change (its id and span never do): a
/// heartbeat between complete ones carries the report only when this differs from the last one
/// sent.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ReportSig {
    phase: DispatcherPhase,
    checkpoint: Ts,
    resolved: Ts,
    block: Option<(Ts, BlockStage)>,
    merge_sources: usize,
    write_rate: u64,
    copy: Option<CopyReport>,
}

impl Dispatcher {
    /// Follows the sink's acknowledgements at `now`: a sink that keeps rows written without
    /// acknowledging them for [`crate::config::SINK_ACK_STALL_MS`] holds the checkpoint, and the
    /// dispatcher says so (a changefeed stuck behind a silent sink never reads `normal`).
    fn track_ack_wait(&mut self, now: Millis) {
        if self.written_ts <= self.flushed_ts {
            self.ack_wait = None;
            self.ack_stalled_ms = None;
            return;
        }
        // A transaction written in parts holds the acknowledgement below it until its last
        // part: parts going out are progress too.
        let since = match self.ack_wait {
            Some((since, acked, parts)) if acked == self.flushed_ts && parts == self.open_rows => {
                since
            }
            _ => {
                self.ack_wait = Some((now, self.flushed_ts, self.open_rows));
                now
            }
        };
        let waited = now.saturating_sub(since);
        self.ack_stalled_ms = (waited >= crate::config::SINK_ACK_STALL_MS).then_some(waited);
    }

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
            ack_wait: None,
            open_rows: 0,
            held_part: None,
            ack_stalled_ms: None,
            copy: None,
            last_reported: None,
            resting: false,
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
        if let Some(ms) = self.ack_stalled_ms {
            return Some(format!(
                "span {:?} of table {}: the sink has acknowledged nothing for {} s (rows written \
                 up to ts {}, acknowledged up to ts {}): the checkpoint cannot move; check the \
                 sink and its downstream",
                self.span,
                self.span.table.0,
                ms / 1000,
                self.written_ts,
                self.flushed_ts
            ));
        }
        if let Some((ms, ts)) = self.copy.as_ref().and_then(|c| c.stream_stall()) {
            return Some(format!(
                "span {:?} of table {}: its snapshot copy has waited {} s for the table's stream \
                 to reach the position of its next chunk (stream at ts {}, chunk at ts {}): the \
                 stream is behind the upstream's writes to this table (check the sink's speed \
                 and the checkpoint lag); the copy goes on as the stream catches up",
                self.span,
                self.span.table.0,
                ms / 1000,
                self.received_upto,
                ts
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

    /// Whether the periodic tick has anything to do for it: take buffered items, follow the
    /// sink's acknowledgements or a copy's wait (both timed), move the consumed point, resend a
    /// DDL's report. Everything else that moves an idle dispatcher (events, acknowledgements,
    /// barrier messages, holds released) pumps it directly.
    fn wants_tick(&self) -> bool {
        !self.buffer.is_empty()
            || self.block.is_some()
            || self.passed_report.is_some()
            || self.written_ts > self.flushed_ts
            || self.ack_wait.is_some()
            || self.consumed_upto < self.received_upto
            || self.copy.as_ref().is_some_and(|c| !c.done())
    }

    /// Nothing to move but its resolved ts: what a tick would not touch, with nothing held
    /// back and no halt (see [`DispatcherManager::on_resolved`]).
    fn idle(&self) -> bool {
        !self.wants_tick() && self.held_part.is_none() && self.halted.is_none()
    }

    /// Whether it may rest ([`DispatcherReport::rests`]): a working span dispatcher, idle,
    /// with no merge, no floor wait and nothing written since the last heartbeat. Its
    /// checkpoint then equals its resolved ts (nothing is buffered or unacknowledged).
    fn may_rest(&self) -> bool {
        matches!(self.phase, Phase::Working)
            && !self.is_trigger
            && self.idle()
            && self.merge_sources.is_empty()
            && self.floor_wait.is_none()
            && self.write_rate == 0
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

    /// What its next report would say, without building it.
    fn report_sig(&self, holds: &Holds) -> ReportSig {
        ReportSig {
            phase: self.report_phase(),
            checkpoint: self.checkpoint(),
            resolved: self.received_upto.max(self.checkpoint()),
            block: self.report_block_stage(holds),
            merge_sources: self.merge_sources.len(),
            write_rate: self.write_rate,
            copy: self.copy.as_ref().map(|c| c.report()),
        }
    }

    fn report_phase(&self) -> DispatcherPhase {
        match &self.phase {
            Phase::Creating => DispatcherPhase::Creating,
            // A failed dispatcher still owns its span until removed; its error rides separately.
            Phase::Working | Phase::Recovering { .. } | Phase::Failed { .. } => {
                DispatcherPhase::Working
            }
            Phase::Closing { purpose, .. } => DispatcherPhase::Closing(purpose.clone()),
        }
    }

    /// The blocking DDL it reports (its ts and stage), if any.
    fn report_block_stage(&self, holds: &Holds) -> Option<(Ts, BlockStage)> {
        let b = self.block.as_ref()?;
        let stage = match b.stage {
            Stage::Flushing => return None,
            Stage::Waiting | Stage::WriteHeld => BlockStage::Waiting,
            Stage::Writing => BlockStage::Writing,
            Stage::Written if holds.is_on(HoldPoint::DdlAfterWrite) => BlockStage::Writing,
            Stage::Written => BlockStage::Written,
        };
        Some((b.ddl.commit_ts, stage))
    }

    /// What heartbeats and bootstrap responses say of this dispatcher. A DDL written while
    /// `ddl_after_write` is on is reported as still being written: the hold keeps the write from
    /// the maintainer on every path, not only in the block status.
    fn report(&self, holds: &Holds) -> DispatcherReport {
        let phase = self.report_phase();
        let block =
            self.report_block_stage(holds)
                .zip(self.block.as_ref())
                .map(|((ddl_ts, stage), b)| BlockReport {
                    ddl_ts,
                    stage,
                    ddl: Some(b.ddl.influence.clone()),
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
            copy: self.copy.as_ref().map(|c| c.report()),
            rests: false,
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
    dispatchers: set::DispatcherSet,
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
    /// When the last complete heartbeat (every dispatcher listed) was sent, and to which owner
    /// epoch ([`crate::config::complete_heartbeat_ms`]).
    last_complete: Option<(Millis, Epoch)>,
    /// A condition of the whole node that stops this changefeed's progress here (capture
    /// stopped), set by the node; reported as a warning in every heartbeat while it lasts.
    node_warning: Option<String>,
    /// The dispatchers with a floor read to retry (a superset: one that no longer waits is
    /// dropped at the next tick), so a tick does not look through every dispatcher for them.
    floor_retries: BTreeSet<DispatcherId>,
    /// The dispatchers a tick may have to pump: a superset of those that want it
    /// (`Dispatcher::wants_tick`), kept by `pump` and `start_dispatcher` (every change that
    /// makes a dispatcher want a tick goes through one of them, or a copy's start); one that no
    /// longer wants it is dropped at the next tick. So a tick costs the busy dispatchers, not a
    /// pass over every one (checked against such a pass in debug builds).
    ticking: BTreeSet<DispatcherId>,
    /// A dispatcher of this manager was ever given a snapshot copy: only then does a tick look
    /// for copies to step.
    copies: bool,
    /// A copy of this manager is not done (as of the last copy step): the node's data path
    /// then wants capture to hand on every position promptly ([`DispatcherManager::copy_pending`]).
    copy_pending: bool,
    /// A copy finished since the last heartbeat: the next tick sends one at once (the owner
    /// learns a copy's end, and the changefeed's snapshot reads `finished`, a heartbeat
    /// period sooner).
    copy_finished: bool,
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
            dispatchers: Default::default(),
            tombstones: BTreeSet::new(),
            tombstone_order: VecDeque::new(),
            stopped: BTreeMap::new(),
            held_bootstrap: None,
            closing_all: None,
            closed: false,
            hb_seq: 0,
            last_hb: None,
            last_complete: None,
            node_warning: None,
            floor_retries: BTreeSet::new(),
            ticking: BTreeSet::new(),
            copies: false,
            copy_pending: false,
            copy_finished: false,
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
            if matches!(d.phase, Phase::Creating)
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
            } => self.on_bootstrap(now, from, (epoch, trigger, config, forget), holds, out),
            Message::Create {
                epoch,
                id,
                span,
                start_ts,
                floor_known,
                copy,
                ..
            } => {
                if self.admits(from, epoch, "create", out) {
                    self.create(id, span, start_ts, floor_known, holds, out);
                    if let Some(start) = copy {
                        self.start_copy(id, start, false);
                        self.copies = true;
                        self.ticking.insert(id);
                    }
                }
            }
            Message::Copy {
                epoch,
                id,
                copy,
                restart,
                ..
            } => {
                if self.admits(from, epoch, "copy", out) {
                    self.start_copy(id, copy, restart);
                    self.copies = true;
                    self.ticking.insert(id);
                    self.copy_step(now, out);
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
            Message::CloseChangefeed { epoch, .. } => self.close_all(from, epoch, holds, out),
            other => {
                out.push(Effect::Trace(TraceEvent::Stale {
                    kind: other.kind(),
                    reason: "not for a dispatcher manager",
                }));
            }
        }
    }

    /// A bootstrap request: ids to forget are taken from an owner at least as new; the answer
    /// waits while `bootstrap_response` holds (the newest request is kept).
    fn on_bootstrap(
        &mut self,
        now: Millis,
        from: &NodeId,
        (epoch, trigger, config, forget): BootstrapRequest,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
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

    /// A cascade close comes from the coordinator with an epoch newer than (or equal to) every
    /// maintainer's: admit any epoch at least the owner's, and close every dispatcher.
    fn close_all(&mut self, from: &NodeId, epoch: Epoch, holds: &Holds, out: &mut Vec<Effect>) {
        let newer = self.owner.as_ref().map(|o| epoch >= o.1).unwrap_or(true);
        if !newer {
            self.stale_dropped += 1;
            out.push(Effect::Trace(TraceEvent::Stale {
                kind: "close_changefeed",
                reason: "older epoch",
            }));
            return;
        }
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
        copy: None,
        rests: false,
    }
}
