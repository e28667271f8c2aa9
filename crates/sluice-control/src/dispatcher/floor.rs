//! A dispatcher's replay floor: before a span dispatcher subscribes, it learns the latest DDL of
//! its table the downstream recorded above its start ts, and starts no lower (the replay rule of
//! `maintainer::replay`, applied to every dispatcher that replaces another, not only at
//! bootstrap).
//!
//! Why: a replacement (move, split, merge, a node lost, a sink session recovered) starts at the
//! checkpoint its predecessor last reported, which can be below a DDL the predecessor already got
//! downstream (a non-blocking DDL, an acknowledgement still on its way). Its replay would write
//! older versions of rows over newer ones; were it cut short by a crash, the next bootstrap would
//! start the table at that DDL (its record proves everything before it durable) and the older
//! versions would stay.
//!
//! Invariants: a dispatcher waiting for its floor writes nothing and is reported `Creating`; the
//! floor only ever raises its start; a failed read is a retryable sink failure like a failed
//! write: retried every `FLOOR_RETRY_MS` and shown as the dispatcher's warning meanwhile, and
//! counted towards `MAX_SINK_RETRIES_WITHOUT_PROGRESS`, past which the dispatcher fails and its
//! error goes to the maintainer; an answer for a dispatcher that no longer waits is ignored.

use super::{Dispatcher, DispatcherManager, Phase};
use crate::config::MAX_SINK_RETRIES_WITHOUT_PROGRESS;
use crate::io::{Effect, TraceEvent};
use crate::msg::{truncate_error, Message};
use sluice_types::{DispatcherId, Millis, Ts};

/// How long after a failed floor read the dispatcher asks again.
pub const FLOOR_RETRY_MS: Millis = 1_000;

/// A dispatcher's outstanding floor read.
#[derive(Clone, Debug, Default)]
pub(super) struct FloorWait {
    /// Set after a failed read: when to ask again, and why it failed.
    retry: Option<(Millis, String)>,
}

impl Dispatcher {
    /// What a dispatcher that cannot read its floor shows.
    pub(super) fn floor_warning(&self) -> Option<String> {
        let (_, e) = self.floor_wait.as_ref()?.retry.as_ref()?;
        Some(format!(
            "span {:?} of table {} waits for the sink: cannot read which DDLs of its table it \
             applied ({e}); check that the downstream is up and reachable (retrying every \
             {FLOOR_RETRY_MS} ms, {} failures so far, limit {})",
            self.span, self.span.table.0, self.sink_failures, MAX_SINK_RETRIES_WITHOUT_PROGRESS
        ))
    }

    /// Start later: everything below `ts` is durable downstream.
    fn raise_start(&mut self, ts: Ts) {
        assert!(
            matches!(self.phase, Phase::Creating),
            "a started dispatcher's start never moves"
        );
        if ts <= self.start_ts {
            return;
        }
        self.start_ts = ts;
        self.received_upto = ts;
        self.consumed_upto = ts;
        self.written_ts = ts;
        self.flushed_ts = ts;
    }
}

impl DispatcherManager {
    /// Park `d` (not started, reported `Creating`) and ask for its table's floor.
    pub(super) fn ask_floor(&mut self, mut d: Dispatcher, out: &mut Vec<Effect>) {
        d.phase = Phase::Creating;
        d.floor_wait = Some(FloorWait::default());
        self.push_load_floor(&d, out);
        self.dispatchers.insert(d.id, d);
    }

    fn push_load_floor(&self, d: &Dispatcher, out: &mut Vec<Effect>) {
        let sink_uri = self
            .config
            .as_ref()
            .map(|c| c.sink_uri.clone())
            .unwrap_or_default();
        out.push(Effect::LoadFloor {
            cf: self.cf.clone(),
            id: d.id,
            table: d.span.table,
            sink_uri,
            after: d.start_ts,
        });
    }

    /// Failed floor reads whose retry is due are asked again.
    pub(super) fn retry_floors(&mut self, now: Millis, out: &mut Vec<Effect>) {
        let mut due = Vec::new();
        for id in std::mem::take(&mut self.floor_retries) {
            let retry_at = self.dispatchers.get(&id).and_then(|d| {
                d.floor_wait
                    .as_ref()
                    .and_then(|w| w.retry.as_ref())
                    .map(|(at, _)| *at)
            });
            match retry_at {
                Some(at) if now >= at => due.push(id),
                Some(_) => {
                    self.floor_retries.insert(id);
                }
                None => {} // no longer waits for a retry
            }
        }
        for id in due {
            if let Some(d) = self.dispatchers.get_mut(&id) {
                d.floor_wait = Some(FloorWait::default());
            }
            if let Some(d) = self.dispatchers.get(&id) {
                self.push_load_floor(d, out);
            }
        }
    }

    /// The answer to `LoadFloor`: start at the floor (if above the start), or retry later.
    pub fn on_floor(
        &mut self,
        now: Millis,
        id: DispatcherId,
        result: Result<Ts, String>,
        out: &mut Vec<Effect>,
    ) {
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return; // removed while it waited
        };
        let waiting = d.floor_wait.as_ref().is_some_and(|w| w.retry.is_none());
        if !waiting {
            return;
        }
        match result {
            Err(e) => self.floor_failed(now, id, e, out),
            Ok(floor) => {
                let Some(mut d) = self.dispatchers.remove(&id) else {
                    return;
                };
                if floor > d.start_ts {
                    out.push(Effect::Trace(TraceEvent::Log(format!(
                        "dispatcher {id:?} of table {} starts at {floor}, not {}: the downstream \
                         recorded a DDL of its table there",
                        d.span.table.0, d.start_ts
                    ))));
                }
                d.raise_start(floor);
                d.floor_wait = None;
                d.floor_known = true;
                self.start_dispatcher(d, out);
            }
        }
    }

    /// A failed floor read counts as a retryable sink failure: asked again later, or, past the
    /// limit, the dispatcher fails (it never opened a session) and reports its error.
    fn floor_failed(&mut self, now: Millis, id: DispatcherId, e: String, out: &mut Vec<Effect>) {
        let cf = self.cf.clone();
        let epoch = self.owner_epoch();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        // Counted like failed writes.
        if !d.count_sink_failure(&e) {
            d.floor_wait = Some(FloorWait {
                retry: Some((now + FLOOR_RETRY_MS, e)),
            });
            self.floor_retries.insert(id);
            return;
        }
        let message = truncate_error(format!(
            "the sink failed {} times in a row without progress (last: cannot read which DDLs \
             of table {} it applied: {e})",
            d.sink_failures - 1,
            d.span.table.0
        ));
        d.floor_wait = None;
        d.phase = Phase::Failed {
            error: message.clone(),
            sink_closed: true,
        };
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
}
