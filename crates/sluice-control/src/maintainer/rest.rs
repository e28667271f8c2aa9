//! Resting dispatchers ([`DispatcherReport::rests`]): per node, the dispatchers its manager
//! said rest, and that manager's rest ts applied to them, so a heartbeat of thousands of idle
//! tables costs one ts on the wire and a walk over the resting spans here, no report each.
//!
//! Invariants: a rest ts raises only spans whose dispatcher the node said rests, on that node,
//! and only while the group is trusted: since the node's last complete heartbeat every one of
//! its heartbeats reached this maintainer (consecutive `seq`), so no report that ended a rest
//! was lost. A gap distrusts the group (its members keep the checkpoints they had) until the
//! next complete heartbeat builds it again. A rest ts only raises checkpoints (never lowers).

use super::*;

/// The resting dispatchers of one node and the spans they serve.
#[derive(Debug, Default)]
pub(super) struct RestGroup {
    members: BTreeMap<DispatcherId, SpanKey>,
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
            g.members.clear();
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
            g.members.insert(r.id, key.clone());
        } else {
            g.members.remove(&r.id);
        }
    }

    /// After a heartbeat's reports: its rest ts raises every resting span of `from`.
    pub(super) fn on_rest(&mut self, from: &NodeId, rest: Option<Ts>) {
        let (Some(ts), Some(g)) = (rest, self.rests.get_mut(from)) else {
            return;
        };
        if !g.trusted || ts <= g.applied {
            return;
        }
        g.applied = ts;
        for (id, key) in &g.members {
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
