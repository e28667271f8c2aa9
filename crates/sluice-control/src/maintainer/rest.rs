//! Resting dispatchers ([`DispatcherReport::rests`]): per node, the dispatchers its manager
//! said rest, and that manager's rest ts applied to them, so a heartbeat of thousands of idle
//! tables costs one ts on the wire and a walk over the resting spans here, no report each.
//!
//! Invariants: a rest ts raises only spans whose dispatcher the node said rests, on that node,
//! and only while the group is trusted: since the node's last complete heartbeat every one of
//! its heartbeats reached this maintainer (consecutive `seq`), so no report that ended a rest
//! was lost. A gap distrusts the group (its members keep the checkpoints they had) until the
//! next complete heartbeat builds it again. A rest ts only raises checkpoints (never lowers).
//! A complete heartbeat rebuilds the group in place: members it lists as resting are marked
//! with the heartbeat's generation and the others dropped at its end (`rest_end`), so a
//! complete heartbeat of 100,000 resting dispatchers does not free and copy 100,000 keys; its
//! rest ts is only noted as applied, since every member's own report in it raised its span at
//! least that far (`on_rest`).

use super::*;

/// The resting dispatchers of one node and the spans they serve.
#[derive(Debug, Default)]
pub(super) struct RestGroup {
    /// Each member's span and the generation (complete heartbeat) that last listed it.
    members: BTreeMap<DispatcherId, (SpanKey, u64)>,
    generation: u64,
    trusted: bool,
    /// The rest ts last applied to every member (a member that joined since was reported at or
    /// above it): an unchanged rest ts costs nothing.
    applied: Ts,
}

impl Maintainer {
    /// Before a heartbeat's reports: a complete one starts the node's group again (its reports
    /// list every resting dispatcher); a heartbeat after a gap distrusts it.
    pub(super) fn rest_begin(&mut self, from: &NodeId, complete: bool, contiguous: bool) {
        if !self.rests.contains_key(from) {
            self.rests.insert(from.clone(), RestGroup::default());
        }
        let Some(g) = self.rests.get_mut(from) else {
            return;
        };
        if complete {
            // Rebuilt in place: whoever it does not list again goes at its end (`rest_end`).
            g.generation += 1;
            g.trusted = true;
            g.applied = 0;
        } else if !contiguous {
            g.members.clear();
            g.trusted = false;
            g.applied = 0;
        }
    }

    /// A report of a dispatcher tracked on `from`: it starts or goes on resting, or stops.
    pub(super) fn rest_note(&mut self, from: &NodeId, r: &DispatcherReport, key: &SpanKey) {
        let Some(g) = self.rests.get_mut(from) else {
            return;
        };
        if r.rests && g.trusted && r.phase == DispatcherPhase::Working {
            match g.members.get_mut(&r.id) {
                Some((k, generation)) => {
                    if k != key {
                        *k = key.clone();
                    }
                    *generation = g.generation;
                }
                None => {
                    g.members.insert(r.id, (key.clone(), g.generation));
                }
            }
        } else {
            g.members.remove(&r.id);
        }
    }

    /// After a heartbeat's reports: a complete one drops the members it did not list as
    /// resting (what clearing the group before it would have left out).
    pub(super) fn rest_end(&mut self, from: &NodeId, complete: bool) {
        if let (true, Some(g)) = (complete, self.rests.get_mut(from)) {
            let current = g.generation;
            g.members
                .retain(|_, (_, generation)| *generation == current);
        }
    }

    /// After a heartbeat's reports: its rest ts raises every resting span of `from`. After a
    /// complete heartbeat that is a no-op: every member was listed in it with its own
    /// checkpoint, at or above the rest ts (the least of them), and raised by its report; so
    /// the ts is only noted as applied (checked in debug builds), and a complete heartbeat of
    /// 100,000 resting dispatchers costs its reports, not a second walk over them.
    pub(super) fn on_rest(&mut self, from: &NodeId, rest: Option<Ts>, complete: bool) {
        let (Some(ts), Some(g)) = (rest, self.rests.get_mut(from)) else {
            return;
        };
        if !g.trusted || ts <= g.applied {
            return;
        }
        g.applied = ts;
        if complete {
            #[cfg(debug_assertions)]
            for id in g.members.keys() {
                let t = self.tracked.get(id).filter(|t| t.node == *from);
                assert!(
                    t.is_none_or(|t| t.checkpoint >= ts),
                    "a resting dispatcher {id:?} listed below its complete heartbeat's rest ts {ts}"
                );
            }
            return;
        }
        for (id, (key, _)) in &g.members {
            if let Some(t) = self.tracked.get_mut(id) {
                if t.node == *from {
                    t.checkpoint = t.checkpoint.max(ts);
                }
            }
            self.spans.raise(
                key,
                |e| e.dispatcher == Some(*id) && e.node.as_ref() == Some(from),
                (ts, ts),
                Some(0),
            );
        }
    }

    /// A node gone: its group with it.
    pub(super) fn rest_forget(&mut self, node: &NodeId) {
        self.rests.remove(node);
    }
}
