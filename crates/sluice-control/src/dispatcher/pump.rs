//! Moving a dispatcher's stream forward: whole transactions into sink writes, DDLs to the
//! sink or to the barrier, the blocking DDL's flush and its reports; hold points; the
//! periodic heartbeats and resends.
//!
//! Invariants: a sink write carries whole transactions (a batch is cut only where the commit
//! ts changes), except that the last one of a write may be a part of a transaction still open
//! (above what the stream resolved; the write says `open`); nothing after a blocking DDL is written before the barrier passes it; a
//! dispatcher reports `Waiting` only once everything before the DDL is durable.

use super::barrier::{do_write, pass};
use super::*;
use crate::filter::FilterConfig;

impl DispatcherManager {
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
                        matches!(d.phase, Phase::Creating)
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
    pub(super) fn pump(
        &mut self,
        id: DispatcherId,
        now: Millis,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        let epoch = self.owner_epoch();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        self.ticking.insert(id);
        if !matches!(d.phase, Phase::Working) || d.halted.is_some() {
            return;
        }
        // Borrowed, not cloned: this runs for every dispatcher on every tick.
        let cf = &self.cf;
        let owner = self.owner.as_ref().map(|o| &o.0);
        let no_filter = FilterConfig::default();
        let ignore = self.config.as_ref().map_or(&no_filter, |c| &c.filter);
        d.drain_buffer(cf, ignore, out);
        d.track_ack_wait(now);
        if let Some(c) = d.copy.as_mut() {
            c.track_stream_wait(d.received_upto, now);
        }
        d.consumed_upto = match d.buffer.front() {
            Some(item) => d.consumed_upto.max(item.commit_ts().saturating_sub(1)),
            None => d.consumed_upto.max(d.received_upto),
        };
        let mut reports = Vec::new();
        if let Some(ts) = d
            .passed_report
            .filter(|_| !holds.is_on(HoldPoint::DdlAfterPass))
        {
            d.passed_report = None;
            reports.push(BlockReport {
                ddl_ts: ts,
                stage: BlockStage::Passed,
                ddl: None,
            });
        }
        reports.extend(d.advance_block(cf, now, holds, out));
        let Some(owner) = owner else { return };
        for report in reports {
            out.push(Effect::Send {
                to: owner.clone(),
                msg: Message::BlockStatus {
                    cf: cf.clone(),
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
        // Only the dispatchers a tick can move: an idle one (nothing buffered, nothing waiting
        // for the sink, no DDL, no copy) is pumped by the event or acknowledgement that ends
        // its idleness, so thousands of idle tables cost no pump each tick; and only those of
        // `ticking` are looked at (in id order, as a pass over all of them would).
        #[cfg(debug_assertions)]
        for d in self.dispatchers.values() {
            assert!(
                !d.wants_tick() || self.ticking.contains(&d.id),
                "dispatcher {:?} wants a tick but is not in the ticking set",
                d.id
            );
        }
        let ids: Vec<DispatcherId> = self.ticking.iter().copied().collect();
        for id in ids {
            if self.dispatchers.get(&id).is_some_and(|d| d.wants_tick()) {
                self.pump(id, now, holds, out);
            } else {
                self.ticking.remove(&id);
            }
        }
        if self.copies {
            self.copy_step(now, out);
        }
        if self.owner.is_none() || self.held_bootstrap.is_some() {
            return;
        }
        let due = self.last_hb.is_none_or(|t| now >= t + HEARTBEAT_MS);
        let copy_finished = std::mem::take(&mut self.copy_finished);
        if due || copy_finished {
            self.heartbeat(now, holds, out);
        }
    }

    /// Sends the heartbeat: everything in it comes from one pass over the dispatchers
    /// ([`DispatcherManager::heartbeat_pass`]), not one pass per part.
    fn heartbeat(&mut self, now: Millis, holds: &Holds, out: &mut Vec<Effect>) {
        let elapsed = self
            .last_hb
            .map(|t| now.saturating_sub(t))
            .unwrap_or(HEARTBEAT_MS)
            .max(1);
        self.last_hb = Some(now);
        self.hb_seq += 1;
        let mut beat = self.heartbeat_pass(now, holds, elapsed);
        for (id, (span, cp)) in &self.stopped {
            beat.reports.push(stopped_report(*id, span.clone(), *cp));
        }
        // Stopped dispatchers are reported a bounded number of times, then forgotten; the
        // maintainer also learns from complete heartbeats that they are gone.
        self.stopped.clear();
        let msg = Message::Heartbeat {
            cf: self.cf.clone(),
            epoch: self.owner_epoch(),
            incarnation: self.incarnation,
            seq: self.hb_seq,
            complete: beat.complete,
            dispatchers: beat.reports,
            errors: beat.errors,
            warnings: beat.warnings,
            rest: beat.rest,
        };
        self.send_owner(out, msg);
    }
}

/// What one pass over the dispatchers gives a heartbeat.
struct Beat {
    complete: bool,
    reports: Vec<DispatcherReport>,
    rest: Option<Ts>,
    /// Failed dispatchers' errors, every time, until the changefeed closes them (bounded).
    errors: Vec<DispatcherErrorReport>,
    /// The node's warning, then the dispatchers' (bounded).
    warnings: Vec<String>,
}

impl DispatcherManager {
    /// One pass over the dispatchers for the next heartbeat: each one's write rate over the
    /// `elapsed` ms, then its report (every dispatcher's when a complete one is due, see
    /// [`complete_heartbeat_ms`], else those whose report changed since it was last sent, except
    /// resting ones, [`DispatcherReport::rests`]: a dispatcher that starts to rest is reported
    /// once with `rests`, then only the rest ts, the lowest checkpoint of the resting ones,
    /// moves it until it stops resting and is reported again; so a heartbeat of 10,000 idle
    /// tables carries one ts, not 10,000 reports), its error and its warning. Between complete
    /// heartbeats the quiet dispatchers (resting, no warning, unchanged since the last pass, see
    /// `set.rs`) are not visited: they add only their checkpoint to the rest ts, and that is
    /// kept with them; what a visit would do to them is nothing.
    fn heartbeat_pass(&mut self, now: Millis, holds: &Holds, elapsed: Millis) -> Beat {
        let epoch = self.owner_epoch();
        let every = complete_heartbeat_ms(self.dispatchers.len());
        let complete = self
            .last_complete
            .is_none_or(|(t, e)| e != epoch || now >= t + every);
        if complete {
            self.last_complete = Some((now, epoch));
        }
        self.dispatchers.debug_check_quiet(|d| d.quiet());
        let (quiet, quiet_rest) = self.dispatchers.quiet();
        // Sized once: only the loud ones report between complete heartbeats (growing a vector
        // of 100,000 reports by doubling copies it and faults in fresh pages at every step).
        let most = self.dispatchers.len() - if complete { 0 } else { quiet };
        let mut beat = Beat {
            complete,
            reports: Vec::with_capacity(most),
            rest: None,
            errors: Vec::new(),
            warnings: self.node_warning.iter().cloned().collect(),
        };
        let mut now_quiet = Vec::new();
        // A partial pass looks up each loud one: worth it while most are quiet.
        if complete || quiet < self.dispatchers.len() / 2 {
            for d in self.dispatchers.values_mut() {
                now_quiet.extend(d.note_in_beat(&mut beat, holds, elapsed));
            }
        } else {
            beat.rest = quiet_rest;
            for id in self.dispatchers.loud() {
                if let Some(d) = self.dispatchers.get_mut(&id) {
                    now_quiet.extend(d.note_in_beat(&mut beat, holds, elapsed));
                }
            }
        }
        for (id, cp) in now_quiet {
            self.dispatchers.make_quiet(id, cp);
        }
        beat
    }
}

impl Dispatcher {
    /// Its part of a heartbeat (see [`DispatcherManager::heartbeat_pass`]): write rate, error,
    /// warning, report and rest ts. `Some((id, checkpoint))` when it is quiet after it.
    fn note_in_beat(
        &mut self,
        beat: &mut Beat,
        holds: &Holds,
        elapsed: Millis,
    ) -> Option<(DispatcherId, Ts)> {
        self.write_rate = self.rows_since_report * 1000 / elapsed;
        self.rows_since_report = 0;
        if let (Phase::Failed { error, .. }, true) =
            (&self.phase, beat.errors.len() < MAX_ERRORS_PER_HEARTBEAT)
        {
            beat.errors.push(DispatcherErrorReport {
                id: self.id,
                message: error.clone(),
            });
        }
        if beat.warnings.len() < MAX_ERRORS_PER_HEARTBEAT {
            beat.warnings.extend(self.warning());
        }
        self.note_in_heartbeat(beat, holds);
        self.quiet().then(|| (self.id, self.checkpoint()))
    }

    /// Resting (the owner was told), may still rest, and nothing to warn of: a heartbeat
    /// between complete ones would only count its checkpoint in the rest ts.
    pub(super) fn quiet(&self) -> bool {
        self.resting && self.may_rest() && self.warning().is_none()
    }
}

impl Dispatcher {
    /// This dispatcher's part of a heartbeat's reports and rest ts (see
    /// [`DispatcherManager::heartbeat_pass`]).
    fn note_in_heartbeat(&mut self, beat: &mut Beat, holds: &Holds) {
        let complete = beat.complete;
        if self.may_rest() {
            let cp = self.checkpoint();
            beat.rest = Some(beat.rest.map_or(cp, |r| r.min(cp)));
            if self.resting && !complete {
                return;
            }
            let mut r = self.report(holds);
            r.rests = true;
            beat.reports.push(r);
            self.resting = true;
            self.last_reported = None;
            return;
        }
        #[cfg(feature = "mutations")]
        if crate::mutations::on("rest-ends-silently") && self.resting && !complete {
            return; // the owner keeps counting it as resting
        }
        let sig = self.report_sig(holds);
        if complete || self.resting || self.last_reported.as_deref() != Some(&sig) {
            beat.reports.push(self.report(holds));
            self.resting = false;
            self.last_reported = Some(Box::new(sig));
        }
    }
}

impl Dispatcher {
    /// Takes what the stream holds into sink writes until it is empty, stopped at a blocking
    /// DDL, or halted at an unreplicable change.
    fn drain_buffer(&mut self, cf: &ChangefeedId, ignore: &FilterConfig, out: &mut Vec<Effect>) {
        let mut rows: Vec<(Ts, sluice_types::Key, u64)> =
            self.held_part.take().into_iter().collect();
        while self.block.is_none() {
            let Some(front) = self.buffer.front() else {
                break;
            };
            // A row is moved out of the buffer (never copied: this runs for every row); a DDL,
            // which may stay in it (blocking, or halted at), is cloned.
            let go_on = match front {
                StreamItem::Row { .. } => {
                    if let Some(StreamItem::Row {
                        commit_ts,
                        key,
                        handle,
                        kind,
                    }) = self.buffer.pop_front()
                    {
                        self.take_row(cf, ignore, (commit_ts, key, handle), kind, &mut rows, out);
                    }
                    true
                }
                StreamItem::Ddl { ddl, .. } if ddl.kind == DdlKind::Unreplicable => {
                    let ddl = ddl.clone();
                    self.take_unreplicable(cf, ignore, &ddl, out)
                }
                StreamItem::Ddl { ddl, handle } => {
                    let (ddl, handle) = ((**ddl).clone(), *handle);
                    self.take_ddl(cf, ignore, ddl, handle, &mut rows, out);
                    true
                }
            };
            if !go_on {
                break;
            }
        }
        #[cfg(feature = "mutations")]
        if crate::mutations::on("reverse-batch") {
            rows.reverse();
        }
        self.write_rows(cf, &mut rows, out);
    }

    /// Sends the rows gathered so far as one sink write (nothing if there are none); `open`
    /// when its last rows are a part of a transaction whose next rows are still to come (above
    /// what the stream resolved). The last row of such a part is kept back for the write that
    /// ends the transaction (see `held_part`).
    fn write_rows(
        &mut self,
        cf: &ChangefeedId,
        rows: &mut Vec<(Ts, sluice_types::Key, u64)>,
        out: &mut Vec<Effect>,
    ) {
        if rows.last().is_some_and(|r| r.0 > self.received_upto) {
            assert!(
                self.held_part.is_none(),
                "one row of an open transaction is held back at most"
            );
            self.held_part = rows.pop();
        }
        let Some(last) = rows.last().map(|r| r.0) else {
            return;
        };
        out.push(Effect::Sink(SinkCommand::WriteRows {
            cf: cf.clone(),
            id: self.id,
            span: self.span.clone(),
            rows: std::mem::take(rows),
            open: last > self.received_upto && !parts_written_closed(),
        }));
    }

    fn take_row(
        &mut self,
        cf: &ChangefeedId,
        ignore: &FilterConfig,
        row: (Ts, sluice_types::Key, u64),
        kind: sluice_types::RowKind,
        rows: &mut Vec<(Ts, sluice_types::Key, u64)>,
        out: &mut Vec<Effect>,
    ) {
        // The caller took it out of the buffer.
        // Rows of an ignored event type are consumed, not written; so are a keyless table's
        // rows before its snapshot chunk (the chunk holds their effect).
        if ignore.ignores_row(kind) || self.copy.as_ref().is_some_and(|c| !c.writes_row(row.0)) {
            return;
        }
        #[cfg(feature = "mutations")]
        if crate::mutations::on("drop-rows") && row.2 % 50 == 7 {
            return;
        }
        // A sink write carries whole transactions: a full batch is cut only where the commit
        // ts changes (the parts of a transaction too large for a feed batch come one per batch).
        let ts = row.0;
        if rows.len() >= MAX_ROWS_PER_WRITE && rows.last().map(|r| r.0 != ts).unwrap_or(false) {
            self.write_rows(cf, rows, out);
        }
        rows.push(row);
        self.rows_since_report += 1;
        // Rows of a transaction still open (a part): they count as the sink's progress while
        // its acknowledgement waits below that transaction.
        self.open_rows = if ts > self.received_upto {
            self.open_rows + 1
        } else {
            0
        };
        self.settle_durable();
        self.written_ts = self.written_ts.max(ts);
    }

    /// An unreplicable change: consumed if the user lets it through, else the dispatcher halts
    /// there. `false`: the stream stops here.
    fn take_unreplicable(
        &mut self,
        cf: &ChangefeedId,
        ignore: &FilterConfig,
        ddl: &DdlEvent,
        out: &mut Vec<Effect>,
    ) -> bool {
        if ignore.ignores("unreplicable") {
            // Let through by the user: consumed, never written.
            self.buffer.pop_front();
            return true;
        }
        if self.halted.is_none() {
            let what = format!(
                "{}; to let it go on, add \"unreplicable\" to the changefeed's [filter] \
                 ignore-event",
                ddl.query
            );
            let id = self.id;
            halt(cf, id, self, ddl.commit_ts, what, out);
        }
        false
    }

    /// A DDL: a blocking one stops the stream at the barrier; an ignored one is consumed; any
    /// other is written after the rows before it.
    fn take_ddl(
        &mut self,
        cf: &ChangefeedId,
        ignore: &FilterConfig,
        ddl: DdlEvent,
        handle: u64,
        rows: &mut Vec<(Ts, sluice_types::Key, u64)>,
        out: &mut Vec<Effect>,
    ) {
        if self.is_blocking(&ddl) {
            self.block = Some(Box::new(Block {
                ddl,
                stage: Stage::Flushing,
                last_report: None,
            }));
            return;
        }
        self.buffer.pop_front();
        if ignore.ignores("ddl") {
            // An ignored DDL is consumed, not written.
            return;
        }
        self.write_rows(cf, rows, out);
        self.settle_durable();
        self.written_ts = self.written_ts.max(ddl.commit_ts);
        out.push(Effect::Sink(SinkCommand::WriteDdl {
            cf: cf.clone(),
            id: self.id,
            ddl,
            handle,
        }));
    }

    /// A blocking DDL's progress: flush before `Waiting`, flush the DDL before `Written`; the
    /// report due now (resent every [`RESEND_MS`]; `Written` not while `ddl_after_write` holds).
    fn advance_block(
        &mut self,
        cf: &ChangefeedId,
        now: Millis,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) -> Option<BlockReport> {
        let b = self.block.as_mut()?;
        let (flushed_enough, next) = match b.stage {
            Stage::Flushing => (self.flushed_ts >= self.written_ts, Some(Stage::Waiting)),
            Stage::Writing => (self.flushed_ts >= b.ddl.commit_ts, Some(Stage::Written)),
            _ => (false, None),
        };
        if let Some(next) = next {
            if flushed_enough {
                if next == Stage::Written {
                    b.last_report = None;
                }
                b.stage = next;
            } else if !self.flush_requested {
                self.flush_requested = true;
                out.push(Effect::Sink(SinkCommand::Flush {
                    cf: cf.clone(),
                    id: self.id,
                }));
            }
        }
        let due = b.last_report.map(|t| now >= t + RESEND_MS).unwrap_or(true);
        let stage = match b.stage {
            Stage::Waiting => BlockStage::Waiting,
            Stage::Written if !holds.is_on(HoldPoint::DdlAfterWrite) => BlockStage::Written,
            _ => return None,
        };
        if !due {
            return None;
        }
        b.last_report = Some(now);
        Some(BlockReport {
            ddl_ts: b.ddl.commit_ts,
            stage,
            ddl: Some(b.ddl.influence.clone()),
        })
    }
}

/// Mutation `parts-written-closed`: a part is written as if it ended its transaction.
#[cfg(feature = "mutations")]
fn parts_written_closed() -> bool {
    crate::mutations::on("parts-written-closed")
}

#[cfg(not(feature = "mutations"))]
fn parts_written_closed() -> bool {
    false
}
