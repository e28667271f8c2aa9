//! The maintainer's side of the DDL barrier. A blocking DDL at `ddl_ts` is an event: the
//! dispatchers it concerns (those of the tables it changes and of the tables it only reads,
//! [`DdlInfluence::sources`]) report `Waiting` (each only once everything before the DDL is durable);
//! when their reports cover every span of every table it concerns (and the table trigger, if it
//! takes part), exactly one writer is told to write; only after the writer reports `Written`
//! (the DDL is durable) are the DDL's effects on the span map applied (tables added at the DDL's
//! commit ts, dropped tables removed) and the others told to pass.
//!
//! Reports count only from a span's current dispatcher on the node it is bound to. Resends are
//! driven by the dispatchers (a waiting dispatcher reports again until told what to do), so a
//! lost Write, Pass or Proceed heals by itself.

use sluice_types::{DdlInfluence, DispatcherId, NodeId, Ts};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
pub struct BarrierEvent {
    pub ddl_ts: Ts,
    pub influence: DdlInfluence,
    /// Current reporters waiting at this event.
    pub waiting: BTreeMap<DispatcherId, NodeId>,
    /// The chosen writer.
    pub writer: Option<(DispatcherId, NodeId)>,
    /// The DDL is durable in the sink (the writer reported `Written`, or a participant is
    /// already past it).
    pub written: bool,
    /// The span-map effects of the DDL were applied.
    pub applied: bool,
    pub passed: BTreeSet<DispatcherId>,
}

impl BarrierEvent {
    pub fn new(ddl_ts: Ts, influence: DdlInfluence) -> Self {
        BarrierEvent {
            ddl_ts,
            influence,
            waiting: BTreeMap::new(),
            writer: None,
            written: false,
            applied: false,
            passed: BTreeSet::new(),
        }
    }
}

/// All events still pending, by commit ts.
#[derive(Clone, Debug, Default)]
pub struct Barrier {
    pub events: BTreeMap<Ts, BarrierEvent>,
}

impl Barrier {
    /// Forget events at or below the changefeed checkpoint: every dispatcher is past them.
    pub fn gc(&mut self, checkpoint: Ts) {
        self.events.retain(|ts, _| *ts > checkpoint);
    }

    /// The oldest event not yet finished, with its writer's node if one was chosen.
    pub fn oldest_pending(&self) -> Option<&BarrierEvent> {
        self.events.values().next()
    }
}
