//! Table requests and user-split marks kept with the changefeed in the (model) meta store: a
//! maintainer writes what it accepted; the next epoch's maintainer reads it back at its bootstrap
//! (marks restored, requests queued, a request for a table that is gone rejected with a reason,
//! finished ones leaving the record); a maintainer whose epoch was bumped cannot write any more.
//! The maintainers are the real state machines; the store is the simulator's model.

use sluice_control::config::ChangefeedConfig;
use sluice_control::coordinator::{ChangefeedInfo, FeedState};
use sluice_control::io::{Effect, SchemaSnapshot, TableInfo, TraceEvent};
use sluice_control::maintainer::requests::PersistedRequests;
use sluice_control::maintainer::{Ctx, Maintainer};
use sluice_control::meta::{keys, MetaOp};
use sluice_control::msg::{DispatcherPhase, DispatcherReport, Message, TableRequest};
use sluice_sim::meta::MetaModel;
use sluice_types::{ChangefeedId, DispatcherId, Epoch, Key, NodeId, Span, TableId};
use std::collections::{BTreeMap, BTreeSet};

fn cf() -> ChangefeedId {
    ChangefeedId::new("cf")
}
fn n1() -> NodeId {
    NodeId::new("n1")
}
fn config() -> ChangefeedConfig {
    ChangefeedConfig {
        sink_dispatchers: Vec::new(),
        snapshot: Default::default(),
        sink_uri: "blackhole://".into(),
        start_ts: 100,
        scheduler: Default::default(),
        preferred_node: None,
        filter: Default::default(),
    }
}

struct World {
    meta: MetaModel,
    alive: BTreeMap<NodeId, u64>,
    none: BTreeSet<NodeId>,
    regions: BTreeMap<TableId, Vec<Key>>,
    /// Every effect the maintainers returned.
    effects: Vec<Effect>,
}

impl World {
    fn new() -> Self {
        World {
            meta: MetaModel::default(),
            alive: [(n1(), 1)].into_iter().collect(),
            none: BTreeSet::new(),
            regions: BTreeMap::new(),
            effects: Vec::new(),
        }
    }

    /// The coordinator's epoch bump: the info key rewritten with `epoch`.
    fn bump(&mut self, epoch: u64) {
        let info = ChangefeedInfo {
            id: cf(),
            config: config(),
            state: FeedState::Normal,
            epoch,
            error: None,
            restarts: 0,
        };
        let value = serde_json::to_vec(&info).expect("info");
        self.meta.apply(&MetaOp::Txn {
            compares: vec![],
            puts: vec![(keys::info("cf"), value)],
            deletes: vec![],
        });
    }

    fn record(&self) -> Option<PersistedRequests> {
        self.meta
            .kv
            .get(&keys::requests("cf"))
            .map(|(v, _)| serde_json::from_slice(v).expect("record"))
    }

    /// Carry out a maintainer's meta operations on the model store until it asks for none.
    fn pump(&mut self, m: &mut Maintainer) {
        loop {
            let ops = m.take_meta_ops();
            if ops.is_empty() {
                return;
            }
            for (tag, op) in ops {
                let (result, _) = self.meta.apply(&op);
                let mut out = Vec::new();
                let ctx = ctx(&self.alive, &self.none, &self.regions);
                m.on_meta_result(&ctx, tag, result, &mut out);
                self.effects.extend(out);
            }
        }
    }

    /// A maintainer of `epoch` bootstrapped over `tables`, of which only those in `working` have
    /// a (whole-table) dispatcher on n1: requests for the others wait (their span is absent);
    /// its reads answered by the store.
    fn maintainer(&mut self, epoch: u64, tables: &[u64], working: &[u64]) -> Maintainer {
        let mut out = Vec::new();
        let mut m = {
            let ctx = ctx(&self.alive, &self.none, &self.regions);
            Maintainer::new(&ctx, cf(), Epoch(epoch), n1(), 100, config(), &mut out)
        };
        self.pump(&mut m);
        let ctx = ctx(&self.alive, &self.none, &self.regions);
        let snapshot = SchemaSnapshot {
            at_ts: 100,
            tables: tables
                .iter()
                .map(|t| TableInfo {
                    id: TableId(*t),
                    name: format!("db.t{t}"),
                    regions: Vec::new(),
                    splittable: true,
                })
                .collect(),
            ddls_after: Vec::new(),
        };
        m.on_schema(&ctx, snapshot, Epoch(epoch), &mut out);
        let response = Message::BootstrapResponse {
            cf: cf(),
            epoch: Epoch(epoch),
            incarnation: 1,
            dispatchers: working.iter().map(|t| report(*t)).collect(),
        };
        m.on_message(&ctx, &n1(), response, &mut out);
        // The sink has applied no DDL after the start point.
        m.on_applied(&ctx, Ok(Vec::new()), &mut out);
        self.effects.extend(out);
        self.pump(&mut m);
        assert!(m.is_bootstrapped(), "epoch {epoch} did not bootstrap");
        m
    }

    /// One tick: the maintainer carries its requests a step.
    fn tick(&mut self, m: &mut Maintainer) {
        let mut out = Vec::new();
        m.on_tick(&ctx(&self.alive, &self.none, &self.regions), &mut out);
        self.effects.extend(out);
        self.pump(m);
    }

    fn request(&mut self, m: &mut Maintainer, req: TableRequest) {
        let mut out = Vec::new();
        m.on_request(&ctx(&self.alive, &self.none, &self.regions), req, &mut out);
        self.effects.extend(out);
        self.pump(m);
    }

    fn outcomes(&self) -> Vec<(TableRequest, String)> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Trace(TraceEvent::RequestDone { req, outcome, .. }) => {
                    Some((req.clone(), outcome.clone()))
                }
                _ => None,
            })
            .collect()
    }
}

fn ctx<'a>(
    alive: &'a BTreeMap<NodeId, u64>,
    none: &'a BTreeSet<NodeId>,
    regions: &'a BTreeMap<TableId, Vec<Key>>,
) -> Ctx<'a> {
    Ctx {
        now: 0,
        alive,
        cordoned: none,
        draining: none,
        regions,
        coordinator: None,
    }
}

fn report(t: u64) -> DispatcherReport {
    DispatcherReport {
        id: DispatcherId { epoch: 1, seq: t },
        span: Span::whole_table(TableId(t)),
        is_trigger: false,
        phase: DispatcherPhase::Working,
        checkpoint: 100,
        block: None,
        merge_sources: Vec::new(),
        write_rate: 0,
        resolved: 100,
        copy: None,
        rests: false,
    }
}

fn split(t: u64) -> TableRequest {
    TableRequest::Split {
        table: TableId(t),
        spans: 2,
    }
}

#[test]
fn a_request_survives_the_maintainer_and_a_stale_one_cannot_overwrite_it() {
    let mut w = World::new();
    w.bump(1);
    let mut a = w.maintainer(1, &[3, 4], &[]);
    w.request(&mut a, split(3));
    let rec = w
        .record()
        .expect("the accepted request is in the meta store");
    assert_eq!((rec.epoch, rec.requests.clone()), (1, vec![split(3)]));
    assert!(a.pending_requests()[0].persisted && a.pending_requests()[0].by_user);

    // A new epoch: its maintainer reads the request back and queues it.
    w.bump(2);
    let mut b = w.maintainer(2, &[3, 4], &[]);
    let pending: Vec<TableRequest> = b.pending_requests().into_iter().map(|r| r.req).collect();
    assert_eq!(pending, vec![split(3)]);
    assert!(b.pending_requests()[0].persisted);

    // The stale maintainer accepts one more: its write fails the fence, it reads the info key
    // again, finds the newer epoch and never writes.
    w.request(&mut a, split(4));
    assert_eq!(w.record().map(|r| r.requests), Some(vec![split(3)]));
    assert!(!a.pending_requests()[1].persisted);
    w.request(&mut a, TableRequest::Merge { table: TableId(4) });
    assert_eq!(w.record().map(|r| r.requests), Some(vec![split(3)]));

    // The current one writes with its epoch.
    w.request(&mut b, split(4));
    let rec = w.record().expect("record");
    assert_eq!((rec.epoch, rec.requests), (2, vec![split(3), split(4)]));
}

#[test]
fn a_new_maintainer_restores_marks_and_rejects_requests_of_tables_gone() {
    let mut w = World::new();
    w.bump(1);
    let stored = PersistedRequests {
        snapshot: None,
        epoch: 1,
        requests: vec![
            split(3),
            split(9),
            TableRequest::Merge { table: TableId(4) },
        ],
        user_split: vec![TableId(4), TableId(9)],
        user_placed: vec![(TableId(3), n1()), (TableId(9), n1())],
    };
    w.meta.apply(&MetaOp::Txn {
        compares: vec![],
        puts: vec![(
            keys::requests("cf"),
            serde_json::to_vec(&stored).expect("record"),
        )],
        deletes: vec![],
    });
    w.bump(2);
    // Table 9 no longer exists at the new maintainer's start point; tables 3 and 4 wait to be
    // placed (their requests wait with them).
    let mut m = w.maintainer(2, &[3, 4], &[]);
    assert_eq!(m.user_split_tables(), vec![TableId(4)]);
    assert_eq!(
        m.user_placed_tables(),
        vec![(TableId(3), n1())],
        "a user's placement outlives its maintainer (table 9's went with the table)"
    );
    w.tick(&mut m);
    let outcomes = w.outcomes();
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert_eq!(outcomes[0].0, split(9));
    assert!(
        outcomes[0]
            .1
            .starts_with("rejected: table 9 no longer exists"),
        "{outcomes:?}"
    );
    let merge4 = TableRequest::Merge { table: TableId(4) };
    let rec = w.record().expect("record");
    assert_eq!(
        (rec.epoch, rec.requests, rec.user_split, rec.user_placed),
        (
            2,
            vec![split(3), merge4.clone()],
            vec![TableId(4)],
            vec![(TableId(3), n1())]
        )
    );
    let pending: Vec<(TableRequest, bool)> = m
        .pending_requests()
        .into_iter()
        .map(|r| (r.req, r.persisted))
        .collect();
    assert_eq!(pending, vec![(split(3), true), (merge4, true)]);
}

#[test]
fn the_record_is_deleted_once_nothing_is_pending_or_marked() {
    let mut w = World::new();
    w.bump(1);
    let mut m = w.maintainer(1, &[3, 4], &[]);
    w.request(&mut m, TableRequest::Merge { table: TableId(7) });
    assert_eq!(
        w.outcomes(),
        vec![(
            TableRequest::Merge { table: TableId(7) },
            "rejected: no such table".to_string()
        )]
    );
    assert_eq!(
        w.record(),
        None,
        "a request finished at once is never written"
    );
    let stored = PersistedRequests {
        snapshot: None,
        epoch: 1,
        requests: vec![TableRequest::Merge { table: TableId(4) }],
        user_split: vec![TableId(4)],
        user_placed: vec![],
    };
    w.meta.apply(&MetaOp::Txn {
        compares: vec![],
        puts: vec![(
            keys::requests("cf"),
            serde_json::to_vec(&stored).expect("record"),
        )],
        deletes: vec![],
    });
    w.bump(2);
    let mut m = w.maintainer(2, &[3, 4], &[4]);
    assert_eq!(m.user_split_tables(), vec![TableId(4)]);
    w.tick(&mut m);
    assert!(m.pending_requests().is_empty());
    assert!(m.user_split_tables().is_empty());
    assert_eq!(w.record(), None, "the merge finished and cleared the mark");
}

/// A user's move is kept with the requests record, so the balancer of a later maintainer leaves
/// the table where the user put it too.
#[test]
fn a_users_placement_is_written_and_the_next_maintainer_keeps_it() {
    let mut w = World::new();
    w.bump(1);
    let mut a = w.maintainer(1, &[3, 4], &[3]);
    assert!(a.user_placed_tables().is_empty());
    let to_n1 = TableRequest::Move {
        table: TableId(3),
        to: n1(),
    };
    w.request(&mut a, to_n1.clone());
    assert_eq!(w.outcomes(), vec![(to_n1, "done".to_string())]);
    let rec = w.record().expect("record");
    assert_eq!(rec.user_placed, vec![(TableId(3), n1())]);
    w.bump(2);
    let b = w.maintainer(2, &[3, 4], &[3]);
    assert_eq!(b.user_placed_tables(), vec![(TableId(3), n1())]);
}
