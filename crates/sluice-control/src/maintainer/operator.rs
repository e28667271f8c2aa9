//! Operators: the explicit state machines by which a maintainer changes where spans run. Their
//! kinds and legal phase transitions are all in [`OpKind::legal`]; nothing else moves a phase.
//!
//! Every operator first *removes* (waits until the dispatchers it closes are confirmed stopped,
//! or their node is gone) and only then *creates*; so an operator never makes two dispatchers
//! over one key range run at once. At most one operator works on a span at a time.

use sluice_types::{DispatcherId, Key, Millis, NodeId, Span, TableId, Ts};
use std::fmt;

/// The key a span entry is stored under in the maintainer's span map.
pub type SpanKey = (TableId, Key);

pub fn span_key(span: &Span) -> SpanKey {
    (span.table, span.start.clone())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    Add,
    Remove,
    Move,
    Split,
    Merge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpPhase {
    /// Closing the dispatchers this operator replaces (remove, move origin, split origin).
    Removing,
    /// Creating the new dispatcher (add, move destination).
    Creating,
    /// The dispatcher manager closes the sources, then starts the target.
    Merging,
    Done,
    Aborted,
}

impl OpKind {
    pub const ALL: [OpKind; 5] = [
        OpKind::Add,
        OpKind::Remove,
        OpKind::Move,
        OpKind::Split,
        OpKind::Merge,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Add => "add",
            OpKind::Remove => "remove",
            OpKind::Move => "move",
            OpKind::Split => "split",
            OpKind::Merge => "merge",
        }
    }

    /// The phase an operator of this kind starts in.
    pub fn first_phase(self) -> OpPhase {
        match self {
            OpKind::Add => OpPhase::Creating,
            OpKind::Remove | OpKind::Move | OpKind::Split => OpPhase::Removing,
            OpKind::Merge => OpPhase::Merging,
        }
    }

    /// The phases an operator of this kind can go through (for coverage reports).
    pub fn phases(self) -> &'static [OpPhase] {
        match self {
            OpKind::Add => &[OpPhase::Creating],
            OpKind::Remove | OpKind::Split => &[OpPhase::Removing],
            OpKind::Move => &[OpPhase::Removing, OpPhase::Creating],
            OpKind::Merge => &[OpPhase::Merging],
        }
    }

    /// Every legal transition, in one place.
    pub fn legal(self, from: OpPhase, to: OpPhase) -> bool {
        use OpPhase::*;
        matches!(
            (self, from, to),
            (OpKind::Add, Creating, Done)
                | (OpKind::Add, Creating, Aborted)
                | (OpKind::Remove, Removing, Done)
                | (OpKind::Move, Removing, Creating)
                | (OpKind::Move, Removing, Aborted)
                | (OpKind::Move, Creating, Done)
                | (OpKind::Move, Creating, Aborted)
                | (OpKind::Split, Removing, Done)
                | (OpKind::Split, Removing, Aborted)
                | (OpKind::Merge, Merging, Done)
                | (OpKind::Merge, Merging, Aborted)
        )
    }
}

impl fmt::Display for OpPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            OpPhase::Removing => "removing",
            OpPhase::Creating => "creating",
            OpPhase::Merging => "merging",
            OpPhase::Done => "done",
            OpPhase::Aborted => "aborted",
        };
        f.write_str(s)
    }
}

/// An operator in flight.
#[derive(Clone, Debug)]
pub struct Operator {
    pub id: u64,
    pub kind: OpKind,
    pub phase: OpPhase,
    pub table: TableId,
    /// The span entry it works on (for a merge: the target entry).
    pub key: Option<SpanKey>,
    /// Dispatchers this operator waits to see stopped.
    pub removing: Vec<(DispatcherId, NodeId)>,
    /// Destination (add, move) or the node a merge runs on.
    pub dest: Option<NodeId>,
    /// The dispatcher being created (add, move) or the merge target.
    pub creating: Option<DispatcherId>,
    /// Split points (split).
    pub points: Vec<Key>,
    /// Merge sources with their spans and checkpoints, to restore them if the merge is refused.
    pub sources: Vec<(DispatcherId, Span, Ts)>,
    /// The merge target's span.
    pub target: Option<Span>,
    pub last_sent: Option<Millis>,
    /// Whether the span entry goes away when a remove finishes (dropped table, cleanup of an
    /// extra dispatcher) rather than becoming absent.
    pub drop_entry: bool,
    /// Restored from a bootstrap (kept for observability).
    pub restored: bool,
}

impl Operator {
    pub fn new(id: u64, kind: OpKind, table: TableId, key: Option<SpanKey>) -> Self {
        Operator {
            id,
            kind,
            phase: kind.first_phase(),
            table,
            key,
            removing: Vec::new(),
            dest: None,
            creating: None,
            points: Vec::new(),
            sources: Vec::new(),
            target: None,
            last_sent: None,
            drop_entry: false,
            restored: false,
        }
    }

    /// Move to `to`; an illegal transition is a bug and is refused (the operator keeps its phase).
    pub fn transition(&mut self, to: OpPhase) -> bool {
        if self.kind.legal(self.phase, to) {
            self.phase = to;
            self.last_sent = None;
            true
        } else {
            debug_assert!(
                false,
                "illegal operator transition {:?} {} -> {}",
                self.kind, self.phase, to
            );
            false
        }
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.phase, OpPhase::Done | OpPhase::Aborted)
    }

    pub fn due(&self, now: Millis, period: Millis) -> bool {
        self.last_sent.map(|t| now >= t + period).unwrap_or(true)
    }
}

use super::*;

/// Driving operators.
impl Maintainer {
    /// Drive every operator one step, then the schedulers.
    pub(super) fn drive(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        self.wake_parked(ctx.now);
        if !matches!(self.phase, Phase::Working) {
            return;
        }
        self.debug_check_parked(ctx);
        for id in self.parked.awake() {
            let Some(op) = self.ops.get(&id) else {
                self.parked.forget(id);
                continue;
            };
            if !self.creating_waits(ctx, op) {
                self.drive_op(ctx, id, out);
                if !self.ops.contains_key(&id) {
                    self.parked.forget(id); // finished
                    continue;
                }
            }
            self.maybe_park(ctx, id);
        }
    }

    /// An add or move that sent its create, is not due to send it again, and whose dispatcher
    /// is not reported working, on a destination still there, over an entry still there: a
    /// step would do nothing (`step_creating`), so `drive` skips it without taking it out of
    /// the map (with 10,000 creates in flight every heartbeat stepped each of them), and parks
    /// it (`parked.rs`).
    pub(super) fn creating_waits(&self, ctx: &Ctx, op: &Operator) -> bool {
        let (Some(dest), Some(id), Some(k)) = (&op.dest, op.creating, &op.key) else {
            return false;
        };
        op.phase == OpPhase::Creating
            && op.last_sent.is_some()
            && !op.due(ctx.now, RESEND_MS)
            && self
                .tracked
                .get(&id)
                .is_some_and(|t| t.phase != Tracked::Working)
            && ctx.alive.contains_key(dest)
            && self.ready.contains_key(dest)
            && self.spans.contains_key(k)
    }

    pub(super) fn drive_op(&mut self, ctx: &Ctx, op_id: u64, out: &mut Vec<Effect>) {
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
                if let Some(mut e) = self.spans.get_mut(k) {
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

    pub(super) fn step_op(&mut self, ctx: &Ctx, op: &mut Operator, out: &mut Vec<Effect>) {
        match op.phase {
            OpPhase::Removing => self.step_removing(ctx, op, out),
            OpPhase::Creating => self.step_creating(ctx, op, out),
            OpPhase::Merging => self.step_merging(ctx, op, out),
            OpPhase::Done | OpPhase::Aborted => {}
        }
    }

    /// Removing: (re)send the removes until every dispatcher it closes is gone, then the next
    /// phase by kind.
    fn step_removing(&mut self, ctx: &Ctx, op: &mut Operator, out: &mut Vec<Effect>) {
        let now = ctx.now;
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
                    } else if let Some(mut e) = self.spans.get_mut(k) {
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

    /// Creating: (re)send the create once nothing overlapping is left; done once it works.
    fn step_creating(&mut self, ctx: &Ctx, op: &mut Operator, out: &mut Vec<Effect>) {
        let now = ctx.now;
        // Borrowed, not cloned: a step of each of 1,000,000 adds made a key and a node id.
        let (Some(dest), Some(id), Some(k)) = (op.dest.as_ref(), op.creating, op.key.as_ref())
        else {
            op.transition(OpPhase::Aborted);
            return;
        };
        if !ctx.alive.contains_key(dest) || !self.ready.contains_key(dest) {
            self.tracked.remove(&id);
            self.set_absent(Some(k));
            op.transition(OpPhase::Aborted);
            return;
        }
        if self
            .tracked
            .get(&id)
            .map(|t| t.phase == Tracked::Working)
            .unwrap_or(false)
        {
            if let Some(mut e) = self.spans.get_mut(k) {
                e.state = SpanState::Replicating;
                e.node = Some(dest.clone());
                e.dispatcher = Some(id);
            }
            op.transition(OpPhase::Done);
            return;
        }
        let Some(entry) = self.spans.get(k) else {
            op.transition(OpPhase::Aborted);
            return;
        };
        // Not due: nothing to send (checked first: the overlap check is the costlier one).
        if !op.due(now, RESEND_MS) {
            return;
        }
        let span = entry.span.clone();
        if !self.can_create(&span, &[id]) {
            return; // wait until every overlapping dispatcher is confirmed closed
        }
        op.last_sent = Some(now);
        // Never below the changefeed checkpoint, never above the span's own.
        let start_ts = entry.checkpoint.max(self.committed);
        self.tracked.insert_if_absent(
            id,
            TrackedDispatcher {
                node: dest.clone(),
                span: span.clone(),
                phase: Tracked::Requested,
                checkpoint: start_ts,
            },
        );
        let floor_known = entry.floored;
        let copy = self.copy_start(&span);
        if let Some(mut e) = self.spans.get_mut(k) {
            e.node = Some(dest.clone());
            e.dispatcher = Some(id);
            e.state = SpanState::Scheduling;
            // From now on a dispatcher may have served it.
            e.floored = false;
        }
        self.send(
            out,
            dest,
            Message::Create {
                cf: self.cf.clone(),
                epoch: self.epoch,
                id,
                span,
                start_ts,
                floor_known,
                copy,
            },
        );
    }

    /// Merging: (re)send the merge to the sources' node; done once the target works.
    fn step_merging(&mut self, ctx: &Ctx, op: &mut Operator, out: &mut Vec<Effect>) {
        let now = ctx.now;
        let (Some(node), Some(target), Some(tspan)) =
            (op.dest.clone(), op.creating, op.target.clone())
        else {
            op.transition(OpPhase::Aborted);
            return;
        };
        if !ctx.alive.contains_key(&node) || !self.ready.contains_key(&node) {
            // The node is gone with the sources and the target: the range is absent. The target
            // started at the least checkpoint of its sources and may have replayed older
            // versions over a source's newer rows before it died: every piece restarts from
            // that least checkpoint, not from its own source's.
            self.tracked.remove(&target);
            let id = op.id;
            let least = self
                .spans
                .values()
                .filter(|e| e.op == Some(id))
                .map(|e| e.checkpoint)
                .min()
                .unwrap_or(0);
            self.spans.update_where(
                |e| e.op == Some(id),
                |e| {
                    e.checkpoint = e.checkpoint.min(least);
                    e.state = SpanState::Absent;
                    e.node = None;
                    e.dispatcher = None;
                    e.op = None;
                },
            );
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

    pub(super) fn set_absent(&mut self, key: Option<&SpanKey>) {
        if let Some(k) = key {
            if let Some(mut e) = self.spans.get_mut(k) {
                e.state = SpanState::Absent;
                e.node = None;
                e.dispatcher = None;
                e.op = None;
            }
        }
    }

    /// Start an add of an absent span on `dest`.
    pub(super) fn start_add(&mut self, key: SpanKey, dest: NodeId) {
        let Some(table) = self.spans.get(&key).map(|e| e.span.table) else {
            return;
        };
        let id = self.mint();
        let mut op = self.new_op(OpKind::Add, table, Some(key));
        op.dest = Some(dest);
        op.creating = Some(id);
        self.insert_op(op);
    }

    pub(super) fn start_move(&mut self, key: SpanKey, dest: NodeId) -> bool {
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

    pub(super) fn start_split(&mut self, key: SpanKey, points: Vec<Key>) -> bool {
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
    pub(super) fn start_merge(&mut self, table: TableId) -> bool {
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
            if let Some(mut en) = self.spans.get_mut(&span_key(&e.span)) {
                en.op = Some(id);
                en.state = SpanState::Scheduling;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_can_finish_and_abort_only_legally() {
        for kind in OpKind::ALL {
            let first = kind.first_phase();
            assert!(kind.phases().contains(&first));
            // From every phase of the kind, Done or the next phase is reachable.
            for &p in kind.phases() {
                let next_ok = kind.legal(p, OpPhase::Done) || kind.legal(p, OpPhase::Creating);
                assert!(next_ok, "{kind:?} stuck in {p}");
            }
            // Terminal phases never move.
            for to in [
                OpPhase::Removing,
                OpPhase::Creating,
                OpPhase::Merging,
                OpPhase::Done,
                OpPhase::Aborted,
            ] {
                assert!(!kind.legal(OpPhase::Done, to));
                assert!(!kind.legal(OpPhase::Aborted, to));
            }
        }
        assert!(!OpKind::Add.legal(OpPhase::Creating, OpPhase::Removing));
        assert!(!OpKind::Remove.legal(OpPhase::Removing, OpPhase::Creating));
        assert!(!OpKind::Remove.legal(OpPhase::Removing, OpPhase::Aborted));
    }
}
