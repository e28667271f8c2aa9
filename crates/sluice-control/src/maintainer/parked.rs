//! Parked operators ([`Parked`]): adds and moves that sent their create and only wait, for the
//! dispatcher's report that it works or for the time to send the create again. `drive` skips
//! them without looking at them: it walks only the awake operators (those not parked), so with
//! 10,000 creates in flight a heartbeat costs the operators something happened to, not a pass
//! over every one (`sluice-sim scale`).
//!
//! Invariants: a parked operator is one a step would not change (`Maintainer::creating_waits`);
//! it is woken (stepped again at the next drive) when its resend is due, when anything touches
//! the tracked dispatcher it creates (`TrackedMap::take_touched`), when its span entry goes
//! (`SpanMap::take_dropped_ops`), and when the nodes change. Every operator of the maintainer
//! is parked or awake (`Maintainer::insert_op` wakes a new one; an id of the awake set whose
//! operator is gone is dropped by the next drive). Debug builds check both at every drive.

use super::*;

#[derive(Debug, Default)]
pub(super) struct Parked {
    /// Operator id -> (when its resend is due, the dispatcher it creates).
    ops: BTreeMap<u64, (Millis, DispatcherId)>,
    by_due: BTreeSet<(Millis, u64)>,
    by_dispatcher: BTreeMap<DispatcherId, u64>,
    /// The operators not parked (a superset: ids of finished operators stay until a drive).
    awake: BTreeSet<u64>,
}

impl Parked {
    pub(super) fn park(&mut self, op: u64, due: Millis, creating: DispatcherId) {
        self.wake(op);
        self.awake.remove(&op);
        self.ops.insert(op, (due, creating));
        self.by_due.insert((due, op));
        self.by_dispatcher.insert(creating, op);
    }

    #[cfg(debug_assertions)]
    pub(super) fn contains(&self, op: u64) -> bool {
        self.ops.contains_key(&op)
    }

    #[cfg(debug_assertions)]
    pub(super) fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.ops.keys().copied()
    }

    /// `op` is stepped at the next drive (a new operator, or a parked one woken).
    pub(super) fn wake(&mut self, op: u64) {
        if let Some((due, d)) = self.ops.remove(&op) {
            self.by_due.remove(&(due, op));
            self.by_dispatcher.remove(&d);
        }
        self.awake.insert(op);
    }

    /// The awake operators, in id order (what `drive` steps).
    pub(super) fn awake(&self) -> Vec<u64> {
        self.awake.iter().copied().collect()
    }

    /// `op` is gone: it is no longer looked at.
    pub(super) fn forget(&mut self, op: u64) {
        self.awake.remove(&op);
    }

    pub(super) fn wake_dispatcher(&mut self, d: &DispatcherId) {
        if let Some(op) = self.by_dispatcher.get(d).copied() {
            self.wake(op);
        }
    }

    /// Wakes every operator whose resend is due at `now`.
    pub(super) fn wake_due(&mut self, now: Millis) {
        while let Some(&(due, op)) = self.by_due.first() {
            if due > now {
                break;
            }
            self.wake(op);
        }
    }

    pub(super) fn wake_all(&mut self) {
        let parked: Vec<u64> = self.ops.keys().copied().collect();
        for op in parked {
            self.wake(op);
        }
    }
}

impl Maintainer {
    /// Before a drive: wakes what changed since the last one (see the module's comment).
    pub(super) fn wake_parked(&mut self, now: Millis) {
        for d in self.tracked.take_touched() {
            self.parked.wake_dispatcher(&d);
        }
        for op in self.spans.take_dropped_ops() {
            self.parked.wake(op);
        }
        self.parked.wake_due(now);
    }

    /// After a step: parks `op` if it now only waits.
    pub(super) fn maybe_park(&mut self, ctx: &Ctx, op: u64) {
        let Some(o) = self.ops.get(&op) else {
            return;
        };
        if let (true, Some(sent), Some(d)) = (self.creating_waits(ctx, o), o.last_sent, o.creating)
        {
            self.parked.park(op, sent + RESEND_MS, d);
        }
    }

    /// Debug builds: every parked operator only waits, and every operator is parked or awake.
    pub(super) fn debug_check_parked(&self, ctx: &Ctx) {
        #[cfg(debug_assertions)]
        {
            for id in self.parked.ids() {
                if let Some(op) = self.ops.get(&id) {
                    assert!(
                        self.creating_waits(ctx, op),
                        "operator {id} is parked but a step would change it: {op:?}"
                    );
                }
            }
            for id in self.ops.keys() {
                assert!(
                    self.parked.contains(*id) || self.parked.awake.contains(id),
                    "operator {id} is neither parked nor awake: drive would never step it"
                );
            }
        }
        let _ = ctx;
    }
}
