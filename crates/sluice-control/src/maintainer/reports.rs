//! The maintainer's view of dispatchers from what nodes say: heartbeats and bootstrap reports
//! (tracking, adoption by span of dispatchers it did not know, span checkpoints), rejections,
//! and the cleanup removes they cause.
//!
//! Invariants: a report counts only from the node its dispatcher is tracked on (others are
//! counted as stale); a span's checkpoint only moves forward; a dispatcher is forgotten only when
//! its node confirmed it stopped or a complete heartbeat no longer lists it.

use super::*;

impl Maintainer {
    /// A remove of the given dispatchers that deletes the span entry `key` (if any) at the end.
    pub(super) fn start_cleanup(
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

    pub(super) fn on_reports(
        &mut self,
        ctx: &Ctx,
        from: &NodeId,
        reports: &[DispatcherReport],
        complete: bool,
        rest: Option<Ts>,
        out: &mut Vec<Effect>,
    ) {
        // Only a complete heartbeat needs what it listed (to find what is gone): sorted once.
        let mut seen: Vec<DispatcherId> =
            Vec::with_capacity(if complete { reports.len() } else { 0 });
        for r in reports {
            if complete {
                seen.push(r.id);
            }
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
            match self.tracked.get(&r.id) {
                Some(t) if t.node == *from => {
                    self.note_tracked(r, (t.phase, t.checkpoint));
                    // The key of the report's span, made once for all that look it up.
                    let key = span_key(&r.span);
                    self.note_span_report(from, r, &key);
                    self.rest_note(from, r, &key);
                    if let (Some(b), DispatcherPhase::Working) = (&r.block, &r.phase) {
                        if matches!(self.phase, Phase::Working) {
                            self.on_block_status(ctx, from, r.id, &r.span, b, out);
                        }
                    }
                    if r.phase == DispatcherPhase::Working && matches!(self.phase, Phase::Working) {
                        self.on_copy_report(from, r, out);
                    }
                }
                Some(_) => {
                    self.stale_dropped += 1; // a report from a node the dispatcher is not on
                }
                None => self.on_unknown_dispatcher(ctx, from, r, out),
            }
        }
        if complete {
            seen.sort_unstable();
            // The node's tracked dispatchers it no longer lists are gone (its own index: a
            // complete heartbeat costs its reports, not a pass over every tracked dispatcher).
            // Only the ids it did not list are looked up.
            let gone: Vec<DispatcherId> = self
                .tracked
                .ids_of_node(from)
                .filter(|id| seen.binary_search(id).is_err() && **id != self.trigger)
                .filter(|id| {
                    self.tracked
                        .get(id)
                        .is_some_and(|t| t.phase != Tracked::Requested)
                })
                .copied()
                .collect();
            for id in gone {
                let Some(t) = self.tracked.remove(&id) else {
                    continue;
                };
                // A dispatcher is only ever set on the entry of its own span.
                if let Some(mut e) = self.spans.get_mut(&span_key(&t.span)) {
                    if e.dispatcher == Some(id) && e.state == SpanState::Replicating {
                        e.state = SpanState::Absent;
                        e.node = None;
                        e.dispatcher = None;
                    }
                }
            }
        }
        self.rest_end(from, complete);
        self.on_rest(from, rest, complete);
        self.drive(ctx, out);
    }

    /// A report of a dispatcher tracked on its node into its tracked entry: its checkpoint
    /// (never lowered) and phase, or its end. Only a report that changes the entry takes it to
    /// change (`TrackedMap::get_mut` marks it touched, which wakes a parked create), so a
    /// complete heartbeat of 100,000 unchanged dispatchers wakes nothing.
    /// `was`: the entry's phase and checkpoint before the report.
    fn note_tracked(&mut self, r: &DispatcherReport, was: (Tracked, Ts)) {
        let phase = match r.phase {
            DispatcherPhase::Stopped => {
                self.tracked.remove(&r.id);
                return;
            }
            DispatcherPhase::Working if was.0 == Tracked::Requested => Tracked::Working,
            DispatcherPhase::Closing(_) => Tracked::Removing,
            DispatcherPhase::Working | DispatcherPhase::Creating => was.0,
        };
        if r.checkpoint > was.1 || phase != was.0 {
            if let Some(t) = self.tracked.get_mut(&r.id) {
                t.checkpoint = t.checkpoint.max(r.checkpoint);
                t.phase = phase;
            }
        }
    }

    /// A tracked dispatcher's progress into the span entry it serves: found by the report's
    /// span (a dispatcher is only ever set on the entry of its own span, see `step_creating`
    /// and adoption), so a heartbeat costs O(reports · log spans), not O(reports · spans). A
    /// stopped report of a dispatcher its node never had carries a placeholder span and no
    /// progress (checkpoint 0): it matches no entry, and is not checked.
    fn note_span_report(&mut self, from: &NodeId, r: &DispatcherReport, key: &SpanKey) {
        #[cfg(debug_assertions)]
        if r.phase != DispatcherPhase::Stopped {
            let serving: Vec<&SpanEntry> = self
                .spans
                .values()
                .filter(|e| e.dispatcher == Some(r.id) && e.node.as_ref() == Some(from))
                .collect();
            assert!(
                serving.iter().all(|e| span_key(&e.span) == span_key(&r.span)),
                "a dispatcher set on a span entry other than its own span's: {} epoch {:?} tracked {:?}; {:?} from {from} reports {:?} {:?}, entries {:?}",
                self.cf,
                self.epoch,
                self.tracked.get(&r.id).map(|t| (&t.span, &t.node, t.phase)),
                r.id,
                r.phase,
                r.span,
                serving.iter().map(|e| (&e.span, &e.state, e.op)).collect::<Vec<_>>()
            );
        }
        self.spans.raise(
            key,
            |e| e.dispatcher == Some(r.id) && e.node.as_ref() == Some(from),
            (r.checkpoint, r.resolved),
            Some(r.write_rate),
        );
    }

    /// A dispatcher this maintainer did not know of: adopt it by span if it exactly fills an
    /// absent span of a live table, else remove it.
    pub(super) fn on_unknown_dispatcher(
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
            if let Some(mut e) = self.spans.get_mut(&key) {
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

    pub(super) fn on_rejected(
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
                    self.spans.update_where(
                        |e| e.op == Some(id),
                        |e| {
                            e.state = SpanState::Replicating;
                            e.op = None;
                        },
                    );
                    for (sid, _, _) in &op.sources {
                        if let Some(t) = self.tracked.get_mut(sid) {
                            t.phase = Tracked::Working;
                        }
                    }
                } else if let Some(k) = &op.key {
                    if let Some(mut e) = self.spans.get_mut(k) {
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
}
