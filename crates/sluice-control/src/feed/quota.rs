//! The feed at its memory quota: reading rows stops, but lanes with nothing to read still move.
//!
//! Invariants:
//! - no row is read while the quota is reached: a lane is looked at with a scan of at most one
//!   row, which it never keeps, and only a lane whose span has no row up to the source's complete
//!   ts, no DDL concerning it there, no snapshot chunk held or asked for, and no transaction
//!   delivered in part has its resolved ts moved (to the complete ts: everything at or below it
//!   is then delivered, there being nothing);
//! - at most one such pass per move of the source's complete ts (a busy lane is scanned once per
//!   move, not once per poll); every lane not caught up stays in `behind` for the next poll.

use super::{concerns, EventSource, Feed, FeedRow, LaneKey, Pos, Quiet};
use sluice_types::{ChangefeedId, DispatcherId, Ts};

impl<R: FeedRow> Feed<R> {
    /// Over the quota: the lanes of `keys` that have nothing to read up to `complete` move their
    /// resolved ts (one `Resolved` per changefeed through `quiet`); the rest wait in `behind`.
    pub(super) fn resolve_idle_lanes<S>(
        &mut self,
        src: &S,
        keys: Vec<LaneKey>,
        complete: Ts,
        wants: &impl Fn(&ChangefeedId, DispatcherId) -> bool,
        quiet: &mut Quiet,
    ) where
        S: EventSource<Row = R>,
    {
        let pass = self.idle_pass_complete != Some(complete);
        self.idle_pass_complete = Some(complete);
        for key in keys {
            let idle = pass && wants(&key.0, key.1) && self.has_nothing_up_to(src, &key, complete);
            if idle {
                self.resolve_quietly(&key, complete, quiet);
                continue; // caught up: it leaves `behind`
            }
            self.behind.insert(key);
        }
    }

    /// Whether the lane's span has no row and no DDL of its own in `(cursor, complete]`, and the
    /// lane waits for no snapshot chunk.
    fn has_nothing_up_to<S>(&self, src: &S, key: &LaneKey, complete: Ts) -> bool
    where
        S: EventSource<Row = R>,
    {
        let Some(lane) = self.lanes.get(key) else {
            return false;
        };
        let Some(sub) = lane.sub.as_ref() else {
            return false;
        };
        let settled = sub.resume == Pos::after(sub.cursor);
        if sub.cursor >= complete || !settled || !lane.reads.is_empty() || !lane.chunks.is_empty() {
            return false;
        }
        let no_rows = sub.is_trigger
            || src
                .scan(&sub.span, sub.resume, complete, 1)
                .is_ok_and(|s| s.rows.is_empty() && s.next.is_none());
        no_rows
            && src
                .ddls(sub.cursor, complete)
                .is_ok_and(|ds| !ds.iter().any(|d| concerns(src, sub, d)))
    }

    fn resolve_quietly(&mut self, key: &LaneKey, complete: Ts, quiet: &mut Quiet) {
        if let Some(s) = self.lanes.get_mut(key).and_then(|l| l.sub.as_mut()) {
            s.advance(complete, Pos::after(complete));
        }
        super::note_quiet(quiet, key, complete);
    }
}
