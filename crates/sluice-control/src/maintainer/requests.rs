//! Table requests (move, split, merge): the maintainer's queue, how each one is carried out, and
//! the copy of the users' requests and user-split marks kept with the changefeed in the meta
//! store, so that they survive the maintainer.
//!
//! Invariants kept here:
//! - **persisted, fenced by the epoch**: the accepted user requests not finished yet and the tables
//!   split by a user are one record ([`PersistedRequests`], carrying the writer's epoch) under
//!   `meta::keys::requests(cf)`. Every write compares the changefeed info key's mod revision as
//!   this maintainer read it with its own epoch in it; the coordinator rewrites that key at every
//!   epoch bump, so a stale maintainer's write fails. A failed compare makes it read the info key
//!   again: a newer epoch there ends its writes for good (at the same epoch it writes again).
//! - **recovered before anything is scheduled**: a new maintainer finishes its bootstrap only once
//!   it has read the record and found its own epoch in the info key. It restores the marks on the
//!   tables that have spans and queues the persisted requests ahead of any accepted meanwhile; a
//!   request for a table that no longer exists is rejected with that reason
//!   (`TraceEvent::RequestDone`), like every other finished request. A table a DDL after the
//!   start point drops keeps its mark and requests until that DDL passes.
//! - **the record is the whole state**: at most one write is in flight; a write that may or may
//!   not have happened (store unreachable) is written again whole; a finished request leaves the
//!   record, a merge clears the table's mark; the merge scheduler's own requests are never written.
//! - **bounded**: at most [`MAX_PENDING_REQUESTS`] requests queue; the marks are at most the tables.
//! - **one request per table at a time**, in the order they came, each waiting behind the
//!   table's operators in flight.

use super::operator::span_key;
use super::{Ctx, Maintainer, Phase, SpanEntry, SpanState};
use crate::config::{MAX_PENDING_REQUESTS, RESEND_MS};
use crate::coordinator::ChangefeedInfo;
use crate::io::{Effect, TraceEvent};
use crate::meta::{keys, Compare, MetaOp, MetaResult};
use crate::msg::TableRequest;
use serde::{Deserialize, Serialize};
use sluice_types::{ChangefeedId, Millis, NodeId, TableId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What the meta store keeps per changefeed of its table requests (the requests key).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedRequests {
    /// The epoch of the maintainer that wrote it.
    pub epoch: u64,
    /// Accepted user requests not finished yet, oldest first.
    #[serde(default)]
    pub requests: Vec<TableRequest>,
    /// Tables split by a user request: the merge scheduler leaves them alone.
    #[serde(default)]
    pub user_split: Vec<TableId>,
    /// Tables a user's move request put on a node: the balancer leaves their spans there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_placed: Vec<(TableId, NodeId)>,
    /// The snapshot copy's pieces not finished yet; present once a copy started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<super::snapshot::SnapshotRecord>,
}

/// A queued request, for the API and the simulator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestView {
    pub req: TableRequest,
    /// A user's request (false: the merge scheduler's, which is not persisted).
    pub by_user: bool,
    /// The meta store has it: a new maintainer carries it out.
    pub persisted: bool,
    /// When this maintainer accepted (or restored) it.
    pub accepted_at: Millis,
}

#[derive(Clone, Debug)]
pub(super) struct PendingRequest {
    pub(super) req: TableRequest,
    accepted_at: Millis,
    by_user: bool,
    /// Names this request among the queued ones (for `persisted`).
    seq: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum StoreOp {
    ReadInfo,
    ReadRecord,
    /// A write of `record`, which holds the user requests with these `seq`s.
    Write {
        seqs: BTreeSet<u64>,
        record: PersistedRequests,
    },
}

/// The maintainer's side of the requests key: what it read, what it wrote, what is in flight.
#[derive(Clone, Debug, Default)]
pub(super) struct RequestStore {
    /// The info key's mod revision with this maintainer's epoch in it: every write's fence.
    /// `None` until read (again, after a failed compare).
    info_rev: Option<u64>,
    /// The record as read at start, until the bootstrap restores it.
    record: Option<PersistedRequests>,
    record_read: bool,
    /// Restored at bootstrap: from then on this maintainer writes the record.
    restored: bool,
    /// The info key names another epoch: this maintainer never writes again.
    fenced: bool,
    /// The state changed since the last write was sent.
    dirty: bool,
    /// After a failed read or write, nothing is sent again before this.
    retry_at: Option<Millis>,
    ops: BTreeMap<u64, StoreOp>,
    next_tag: u64,
    /// Operations for the node to carry out (it names them and routes their results back).
    outbox: Vec<(u64, MetaOp)>,
    /// The record the store is known to hold (read, or written since), to skip writes that
    /// change nothing.
    written: Option<PersistedRequests>,
    /// The `seq`s of the user requests the meta store holds.
    saved: BTreeSet<u64>,
    next_seq: u64,
}

impl RequestStore {
    /// Starts reading the changefeed's info key (for the epoch and the fence) and its record.
    pub(super) fn start(cf: &ChangefeedId) -> Self {
        let mut s = RequestStore {
            next_tag: 1,
            next_seq: 1,
            ..Default::default()
        };
        s.read_info(cf);
        s.read_record(cf);
        s
    }

    /// Both reads are done: the bootstrap may finish.
    pub(super) fn loaded(&self) -> bool {
        self.info_rev.is_some() && self.record_read
    }

    fn send(&mut self, op: StoreOp, meta: MetaOp) {
        let tag = self.next_tag;
        self.next_tag += 1;
        self.ops.insert(tag, op);
        self.outbox.push((tag, meta));
    }

    fn read_info(&mut self, cf: &ChangefeedId) {
        let prefix = keys::info(cf.as_str());
        self.send(StoreOp::ReadInfo, MetaOp::Get { prefix });
    }

    fn read_record(&mut self, cf: &ChangefeedId) {
        let prefix = keys::requests(cf.as_str());
        self.send(StoreOp::ReadRecord, MetaOp::Get { prefix });
    }

    fn in_flight(&self, op: &StoreOp) -> bool {
        self.ops
            .values()
            .any(|o| std::mem::discriminant(o) == std::mem::discriminant(op))
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq - 1
    }
}

/// The table a request is about.
pub fn request_table(req: &TableRequest) -> TableId {
    match req {
        TableRequest::Move { table, .. }
        | TableRequest::Split { table, .. }
        | TableRequest::Merge { table }
        | TableRequest::Snapshot { table } => *table,
    }
}

/// The `requests-not-recovered` mutation: a new maintainer ignores what the meta store kept.
fn recovery_off() -> bool {
    #[cfg(feature = "mutations")]
    return crate::mutations::on("requests-not-recovered");
    #[cfg(not(feature = "mutations"))]
    false
}

impl Maintainer {
    // ------------------------------------------------------------------ views

    /// Queued requests, oldest first.
    pub fn pending_requests(&self) -> Vec<RequestView> {
        self.requests
            .iter()
            .map(|r| RequestView {
                req: r.req.clone(),
                by_user: r.by_user,
                persisted: self.store.saved.contains(&r.seq),
                accepted_at: r.accepted_at,
            })
            .collect()
    }

    /// Tables split by a user request (the merge scheduler leaves them alone).
    pub fn user_split_tables(&self) -> Vec<TableId> {
        self.tables
            .iter()
            .filter(|(_, s)| s.user_split)
            .map(|(t, _)| *t)
            .collect()
    }

    /// Tables a user's move request put on a node (the balancer leaves their spans there).
    pub fn user_placed_tables(&self) -> Vec<(TableId, NodeId)> {
        self.tables
            .iter()
            .filter_map(|(t, s)| s.placed_by_user.clone().map(|n| (*t, n)))
            .collect()
    }

    // ------------------------------------------------------------------ queue

    /// A user's request: queued (and persisted), then carried out in turn.
    pub fn on_request(&mut self, ctx: &Ctx, req: TableRequest, out: &mut Vec<Effect>) {
        if self.requests.len() >= MAX_PENDING_REQUESTS {
            self.request_done(req, "rejected: too many requests queued".into(), out);
            return;
        }
        let seq = self.store.seq();
        self.requests.push_back(PendingRequest {
            req,
            accepted_at: ctx.now,
            by_user: true,
            seq,
        });
        self.store.dirty = true;
        self.run_requests(ctx, out);
        self.flush_requests();
    }

    /// A request of the merge scheduler (never persisted: a new maintainer decides again).
    pub(super) fn queue_scheduler_request(&mut self, req: TableRequest, now: Millis) {
        let seq = self.store.seq();
        self.requests.push_back(PendingRequest {
            req,
            accepted_at: now,
            by_user: false,
            seq,
        });
    }

    fn request_done(&self, req: TableRequest, outcome: String, out: &mut Vec<Effect>) {
        out.push(Effect::Trace(TraceEvent::RequestDone {
            cf: self.cf.clone(),
            req,
            outcome,
        }));
    }

    fn finish_request(&mut self, idx: usize, outcome: String, out: &mut Vec<Effect>) {
        if let Some(r) = self.requests.remove(idx) {
            if r.by_user {
                self.store.dirty = true;
                self.store.saved.remove(&r.seq);
            }
            self.request_done(r.req, outcome, out);
        }
    }

    /// Every queued request of `table` ends with `reason` (its table is gone).
    pub(super) fn reject_requests_of(
        &mut self,
        table: TableId,
        reason: &str,
        out: &mut Vec<Effect>,
    ) {
        while let Some(i) = self
            .requests
            .iter()
            .position(|r| request_table(&r.req) == table)
        {
            self.finish_request(i, reason.to_string(), out);
        }
    }

    /// The meta store holds the user-split mark of `table`.
    fn mark_saved(&self, table: TableId) -> bool {
        self.store
            .written
            .as_ref()
            .is_some_and(|w| w.user_split.contains(&table))
    }

    fn set_user_split(&mut self, table: TableId, on: bool) {
        if let Some(t) = self.tables.get_mut(&table) {
            if t.user_split != on {
                t.user_split = on;
                self.store.dirty = true;
            }
        }
    }

    // ------------------------------------------------------------------ execution

    /// Carry every queued request one step (one per table at a time, in order).
    pub(super) fn run_requests(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        if !matches!(self.phase, Phase::Working) {
            return;
        }
        let mut i = 0;
        let mut seen: BTreeSet<TableId> = BTreeSet::new();
        while i < self.requests.len() {
            let req = self.requests[i].req.clone();
            if !seen.insert(request_table(&req)) {
                i += 1;
                continue;
            }
            match self.request_step(ctx, &req, out) {
                Some(outcome) => self.finish_request(i, outcome, out),
                None => i += 1,
            }
        }
        self.flush_requests();
    }

    /// One step of a request; `Some(outcome)` once it is finished (done or rejected).
    fn request_step(
        &mut self,
        ctx: &Ctx,
        req: &TableRequest,
        out: &mut Vec<Effect>,
    ) -> Option<String> {
        let table = request_table(req);
        if !self.tables.contains_key(&table) {
            return Some("rejected: no such table".into());
        }
        if self.ops.values().any(|o| o.table == table) {
            return None;
        }
        let entries: Vec<SpanEntry> = self
            .spans
            .values()
            .filter(|e| e.span.table == table)
            .cloned()
            .collect();
        if entries.iter().any(|e| e.state != SpanState::Replicating) {
            return None; // wait until every span of it is placed
        }
        match req {
            TableRequest::Move { to, .. } => self.step_move(ctx, to, entries),
            TableRequest::Split { spans, .. } => self.step_split(ctx, table, *spans, entries),
            TableRequest::Merge { .. } => self.step_merge(ctx, table, entries),
            TableRequest::Snapshot { .. } => {
                self.recopy_table(table, out);
                Some(format!(
                    "done: copying table {} again ({} span(s))",
                    table.0,
                    entries.len()
                ))
            }
        }
    }

    fn step_move(&mut self, ctx: &Ctx, to: &NodeId, entries: Vec<SpanEntry>) -> Option<String> {
        if !ctx.alive.contains_key(to) || ctx.cordoned.contains(to) || ctx.draining.contains(to) {
            return Some(format!(
                "rejected: node {to} is not available (gone, cordoned or draining)"
            ));
        }
        if !self.ready.contains_key(to) {
            return None;
        }
        if entries.iter().all(|e| e.node.as_ref() == Some(to)) {
            if let Some(t) = entries
                .first()
                .and_then(|e| self.tables.get_mut(&e.span.table))
            {
                if t.placed_by_user.as_ref() != Some(to) {
                    t.placed_by_user = Some(to.clone());
                    self.store.dirty = true;
                }
            }
            return Some("done".into());
        }
        for e in entries {
            self.start_move(span_key(&e.span), to.clone());
        }
        None
    }

    fn step_split(
        &mut self,
        ctx: &Ctx,
        table: TableId,
        n: usize,
        entries: Vec<SpanEntry>,
    ) -> Option<String> {
        if entries.len() >= n.max(1) {
            if entries.len() != n {
                return Some(format!("rejected: already {} spans", entries.len()));
            }
            if n < 2 {
                return Some("done".into());
            }
            // Split as asked (also by an operator a previous maintainer started): done once the
            // mark that keeps the merge scheduler off it is in the meta store.
            self.set_user_split(table, true);
            return self.mark_saved(table).then(|| "done".to_string());
        }
        let splittable = self
            .tables
            .get(&table)
            .map(|t| t.splittable)
            .unwrap_or(false);
        if entries.len() != 1 || !splittable {
            return Some("rejected: only a table in one span, with a key, can be split".into());
        }
        let points = self.split_points(ctx, &entries[0].span, Some(n));
        if points.is_empty() {
            return Some(format!("rejected: the table has fewer than {n} regions"));
        }
        // The mark first: a split the meta store does not know was a user's could be merged
        // back by the next maintainer.
        self.set_user_split(table, true);
        if !self.mark_saved(table) {
            return None;
        }
        self.start_split(span_key(&entries[0].span), points);
        // Completed when the pieces are placed (a later step sees `entries.len() == n`).
        None
    }

    fn step_merge(&mut self, ctx: &Ctx, table: TableId, entries: Vec<SpanEntry>) -> Option<String> {
        if entries.len() <= 1 {
            self.set_user_split(table, false);
            return Some("done".into());
        }
        // Bring the spans together on the node that has most of them, then merge.
        let mut count: BTreeMap<NodeId, usize> = BTreeMap::new();
        for e in &entries {
            if let Some(n) = &e.node {
                *count.entry(n.clone()).or_default() += 1;
            }
        }
        // The merged dispatcher is a new one: it goes only where new dispatchers may go (not
        // cordoned, not draining), preferably where most spans already are.
        let target = count
            .iter()
            .filter(|(n, _)| self.schedulable(ctx, n))
            .max_by_key(|(n, c)| (**c, std::cmp::Reverse((*n).clone())))
            .map(|(n, _)| n.clone())
            .or_else(|| self.least_loaded(ctx))?;
        if entries.iter().all(|e| e.node.as_ref() == Some(&target)) {
            self.start_merge(table);
        } else {
            for e in entries {
                if e.node.as_ref() != Some(&target) {
                    self.start_move(span_key(&e.span), target.clone());
                }
            }
        }
        None
    }

    // ------------------------------------------------------------------ recovery

    /// At the end of the bootstrap: the marks and requests the meta store kept come back.
    pub(super) fn restore_requests(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        self.store.restored = true;
        let mut record = self.store.record.take().unwrap_or_default();
        if recovery_off() {
            record = PersistedRequests::default();
        }
        self.store.written = Some(record.clone());
        self.restore_copy(record.snapshot.clone());
        self.store.dirty |= self.copy_dirty;
        // A mark or a request holds while the table has spans, even when a DDL after the
        // checkpoint drops it: until that DDL passes, its spans are scheduled like any other (and
        // an operator of the request may be in flight, restored from the dispatchers); once the
        // table is gone a request of it is rejected as it is met ("no such table").
        let live = |m: &Maintainer, t: &TableId| m.tables.contains_key(t);
        for t in &record.user_split {
            if live(self, t) {
                if let Some(s) = self.tables.get_mut(t) {
                    s.user_split = true;
                }
            } else {
                self.store.dirty = true;
            }
        }
        for (t, node) in &record.user_placed {
            match self.tables.get_mut(t) {
                Some(s) => s.placed_by_user = Some(node.clone()),
                None => self.store.dirty = true,
            }
        }
        let mut queue: VecDeque<PendingRequest> = VecDeque::new();
        for req in record.requests.iter().cloned() {
            let table = request_table(&req);
            if !live(self, &table) || queue.len() >= MAX_PENDING_REQUESTS {
                self.store.dirty = true;
                let why = format!("rejected: table {} no longer exists (dropped before this maintainer could carry the request out)", table.0);
                self.request_done(req, why, out);
                continue;
            }
            let seq = self.store.seq();
            self.store.saved.insert(seq);
            queue.push_back(PendingRequest {
                req,
                accepted_at: ctx.now,
                by_user: true,
                seq,
            });
        }
        let restored = queue.len();
        // Requests accepted while bootstrapping come after the persisted ones.
        for r in std::mem::take(&mut self.requests) {
            self.store.dirty |= r.by_user;
            queue.push_back(r);
        }
        while queue.len() > MAX_PENDING_REQUESTS {
            if let Some(r) = queue.pop_back() {
                self.request_done(r.req, "rejected: too many requests queued".into(), out);
            }
        }
        self.requests = queue;
        if restored > 0 || !record.user_split.is_empty() || !record.user_placed.is_empty() {
            self.log(
                out,
                format!(
                    "restored {restored} pending request(s), the user-split mark of {:?} and the user placement of {:?}, persisted at epoch {}",
                    self.user_split_tables(),
                    self.user_placed_tables(),
                    record.epoch
                ),
            );
        }
        self.flush_requests();
    }

    // ------------------------------------------------------------------ meta store

    /// Meta-store operations of this maintainer for its node to carry out: the node gives each
    /// a request id and hands its result back to [`Maintainer::on_meta_result`] with the tag.
    pub fn take_meta_ops(&mut self) -> Vec<(u64, MetaOp)> {
        std::mem::take(&mut self.store.outbox)
    }

    /// The result of the operation this maintainer tagged `tag`.
    pub fn on_meta_result(
        &mut self,
        ctx: &Ctx,
        tag: u64,
        result: MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let Some(op) = self.store.ops.remove(&tag) else {
            return;
        };
        if matches!(result, MetaResult::Unavailable) {
            // Whatever it was, it is tried again (a write whole) after a pause.
            self.store.retry_at = Some(ctx.now + RESEND_MS);
            self.store.dirty |= matches!(op, StoreOp::Write { .. });
            return;
        }
        match op {
            StoreOp::ReadInfo => self.on_info_read(ctx, result, out),
            StoreOp::ReadRecord => self.on_record_read(ctx, result, out),
            StoreOp::Write { seqs, record } => {
                self.on_written(seqs, record, result);
                // A split waiting for its mark may go on.
                self.run_requests(ctx, out);
            }
        }
    }

    fn on_info_read(&mut self, ctx: &Ctx, result: MetaResult, out: &mut Vec<Effect>) {
        let MetaResult::Got { kvs, .. } = result else {
            return;
        };
        let key = keys::info(self.cf.as_str());
        let found = kvs.into_iter().find(|kv| kv.key == key).map(|kv| {
            let epoch = serde_json::from_slice::<ChangefeedInfo>(&kv.value).map(|i| i.epoch);
            (epoch.ok(), kv.mod_revision)
        });
        match found {
            Some((Some(e), rev)) if e == self.epoch.0 => {
                self.store.info_rev = Some(rev);
                self.try_finish_bootstrap(ctx, out);
                self.flush_requests();
            }
            other => {
                self.store.fenced = true;
                self.log(
                    out,
                    format!(
                        "the changefeed's info in the meta store names epoch {:?}: this maintainer does not write its requests",
                        other.and_then(|o| o.0)
                    ),
                );
                if matches!(self.phase, Phase::Bootstrapping { .. }) {
                    self.phase = Phase::Stopped;
                }
            }
        }
    }

    fn on_record_read(&mut self, ctx: &Ctx, result: MetaResult, out: &mut Vec<Effect>) {
        let MetaResult::Got { kvs, .. } = result else {
            return;
        };
        let key = keys::requests(self.cf.as_str());
        let record = match kvs.into_iter().find(|kv| kv.key == key) {
            None => PersistedRequests::default(),
            Some(kv) => serde_json::from_slice(&kv.value).unwrap_or_else(|e| {
                self.log(
                    out,
                    format!("unreadable requests record ({e}); starting without it"),
                );
                PersistedRequests::default()
            }),
        };
        self.store.record = Some(record);
        self.store.record_read = true;
        self.try_finish_bootstrap(ctx, out);
    }

    fn on_written(&mut self, seqs: BTreeSet<u64>, record: PersistedRequests, result: MetaResult) {
        match result {
            MetaResult::Txn {
                succeeded: true, ..
            } => {
                self.store.saved = seqs;
                self.store.written = Some(record);
            }
            _ => {
                // The info key changed since it was read: a newer epoch, or a state change at
                // this one. Read it again before writing again.
                self.store.info_rev = None;
                self.store.dirty = true;
                let cf = self.cf.clone();
                self.store.read_info(&cf);
            }
        }
        self.flush_requests();
    }

    /// Periodic: reads and writes that failed are tried again.
    pub(super) fn tick_request_store(&mut self, ctx: &Ctx) {
        if self.store.fenced || self.store.retry_at.is_some_and(|t| ctx.now < t) {
            return;
        }
        self.store.retry_at = None;
        let cf = self.cf.clone();
        if self.store.info_rev.is_none() && !self.store.in_flight(&StoreOp::ReadInfo) {
            self.store.read_info(&cf);
        }
        if !self.store.record_read && !self.store.in_flight(&StoreOp::ReadRecord) {
            self.store.read_record(&cf);
        }
        self.flush_requests();
    }

    /// Write the record if it changed and nothing stands in the way (one write at a time).
    fn flush_requests(&mut self) {
        self.forget_dropped_copies();
        let s = &self.store;
        let write = StoreOp::Write {
            seqs: BTreeSet::new(),
            record: PersistedRequests::default(),
        };
        let Some(rev) = s.info_rev else {
            return;
        };
        if !(s.dirty || self.copy_dirty)
            || !s.restored
            || s.fenced
            || s.retry_at.is_some()
            || s.in_flight(&write)
            || !matches!(self.phase, Phase::Working)
        {
            return;
        }
        let users: Vec<&PendingRequest> = self.requests.iter().filter(|r| r.by_user).collect();
        let record = PersistedRequests {
            epoch: self.epoch.0,
            requests: users.iter().map(|r| r.req.clone()).collect(),
            user_split: self.user_split_tables(),
            user_placed: self.user_placed_tables(),
            snapshot: self.copy_started.then(|| self.copies.record()),
        };
        let seqs: BTreeSet<u64> = users.iter().map(|r| r.seq).collect();
        self.store.dirty = false;
        self.copy_dirty = false;
        if self
            .store
            .written
            .as_ref()
            .map(|w| (&w.requests, &w.user_split, &w.user_placed, &w.snapshot))
            == Some((
                &record.requests,
                &record.user_split,
                &record.user_placed,
                &record.snapshot,
            ))
        {
            self.store.saved = seqs;
            return;
        }
        let key = keys::requests(self.cf.as_str());
        let (puts, deletes) = if record.requests.is_empty()
            && record.user_split.is_empty()
            && record.user_placed.is_empty()
            && record.snapshot.is_none()
        {
            (vec![], vec![key])
        } else {
            (
                vec![(key, serde_json::to_vec(&record).unwrap_or_default())],
                vec![],
            )
        };
        let compares = vec![Compare::ModRevision {
            key: keys::info(self.cf.as_str()),
            rev,
        }];
        self.store.send(
            StoreOp::Write { seqs, record },
            MetaOp::Txn {
                compares,
                puts,
                deletes,
            },
        );
    }
}
