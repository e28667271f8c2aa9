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
