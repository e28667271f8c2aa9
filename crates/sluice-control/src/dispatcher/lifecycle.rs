//! Creating, removing and merging dispatchers, and the manager's bootstrap: the starts and
//! closes of writers.
//!
//! Invariants: two dispatchers whose spans overlap never run at once (a merge target starts
//! only after every source closed); a dispatcher is reported `Stopped` only after its sink
//! session confirmed that none of its writes can still land; a closing dispatcher keeps why it
//! closes, and bootstrap reports it.

use super::*;

impl DispatcherManager {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bootstrap(
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
        // The next heartbeat lists every dispatcher again (resting ones with `rests`): the
        // bootstrapping maintainer may be a new one of the same epoch, knowing no rest.
        self.last_complete = None;
    }

    pub(super) fn start_dispatcher(&mut self, mut d: Dispatcher, out: &mut Vec<Effect>) {
        if !d.floor_known {
            // Never below what the downstream already applied for its table: ask first.
            self.ask_floor(d, out);
            return;
        }
        d.phase = Phase::Working;
        self.ticking.insert(d.id);
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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn create(
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
        if let Some(with) = self.dispatchers.overlapping(&span, &[]) {
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

    pub(super) fn remove(
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
                d.held_part = None;
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
    pub(super) fn finish_closing(
        &mut self,
        id: DispatcherId,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
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

    pub(super) fn maybe_finish_close(&mut self, out: &mut Vec<Effect>) {
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

    pub(super) fn merge(
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
                Some(d) if matches!(d.phase, Phase::Working) && !d.is_trigger => {
                    spans.push(d.span.clone())
                }
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
            || self.dispatchers.overlapping(&span, &sources).is_some()
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
            && matches!(t.phase, Phase::Creating)
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
}
