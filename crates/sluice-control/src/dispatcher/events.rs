//! What reaches dispatchers from the node: events from the feed, and the sink's answers
//! (flushed, closed, failed, a table refused).
//!
//! Invariants: a dispatcher's durable point follows only what its sink acknowledged; a sink
//! failure for good stops the dispatcher and keeps its first error reported until removal.

use super::*;

impl DispatcherManager {
    /// Whether dispatcher `id` takes events now: it works, is not stopped at a DDL or an
    /// unreplicable change, and has room in its buffer. The feed reads only for those, so rows
    /// read never wait behind a barrier (see `feed`).
    pub fn wants_events(&self, id: DispatcherId) -> bool {
        self.dispatchers.get(&id).is_some_and(|d| {
            matches!(d.phase, Phase::Working)
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
        if !matches!(d.phase, Phase::Working) {
            return;
        }
        let mut resubscribe_from = None;
        d.buffer.reserve(
            items
                .len()
                .min(MAX_BUFFERED_ITEMS.saturating_sub(d.buffer.len())),
        );
        for item in items {
            let ts = item.commit_ts();
            if ts <= d.received_upto {
                continue; // a repeat from before the cursor
            }
            // Full: stop at the next transaction boundary and ask again from there. Never
            // inside a transaction: the parts of one too large for a batch keep coming (asking
            // again from inside it would fetch it again from its start, for ever).
            let boundary = d.buffer.back().is_none_or(|b| b.commit_ts() != ts);
            // A snapshot chunk is taken whole even then: the feed does not have it twice.
            let chunk = d.copy.as_ref().is_some_and(|c| c.chunk_at(ts));
            if d.buffer.len() >= MAX_BUFFERED_ITEMS && boundary && !chunk {
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
        let copying = d.copy.as_ref().is_some_and(|c| !c.done());
        self.pump(id, now, holds, out);
        if copying {
            self.copy_step(now, out);
        }
    }

    /// The streams of `ids` have nothing new up to `resolved_ts`. A dispatcher with nothing in
    /// flight (nothing buffered, held back or unacknowledged, no DDL, no copy; what a pump of an
    /// empty batch would find) takes it without a pump; any other one as an empty batch.
    pub fn on_resolved(
        &mut self,
        now: Millis,
        ids: Vec<DispatcherId>,
        resolved_ts: Ts,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        for id in ids {
            let Some(d) = self.dispatchers.get_mut(&id) else {
                continue;
            };
            if !matches!(d.phase, Phase::Working) {
                continue;
            }
            if d.idle() {
                d.received_upto = d.received_upto.max(resolved_ts);
                d.consumed_upto = d.consumed_upto.max(d.received_upto);
                continue;
            }
            self.on_events(now, id, Vec::new(), resolved_ts, holds, out);
        }
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
                fresh.copy = d.copy.as_ref().map(|c| Box::new(c.restarted()));
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
        d.held_part = None;
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
        if !matches!(d.phase, Phase::Working) {
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
        d.held_part = None;
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
        if !matches!(d.phase, Phase::Working) || d.halted.is_some() {
            return;
        }
        let at = d.checkpoint() + 1;
        halt(&cf, id, d, at, truncate_error(message), out);
    }
}
