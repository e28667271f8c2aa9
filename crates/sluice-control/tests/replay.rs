//! The replay rule at the maintainer: a maintainer that bootstraps below DDLs the downstream has
//! already applied starts each table after what its record proves applied. A table a finished
//! DDL truncated or dropped gets no dispatcher from the checkpoint (its rows before the DDL
//! would come back, or land in a table the downstream no longer has); the trigger's replay of
//! such a DDL creates only what comes after it.

mod common;
use common::World;

use sluice_control::config::ChangefeedConfig;
use sluice_control::io::{AppliedDdl, Effect, SchemaSnapshot, TableInfo};
use sluice_control::maintainer::Maintainer;
use sluice_control::msg::{
    BarrierCommand, BlockReport, BlockStage, DispatcherPhase, DispatcherReport, Message,
};
use sluice_types::{
    ChangefeedId, DdlEvent, DdlInfluence, DdlKind, Epoch, InfluenceScope, Key, NodeId, Span,
    TableId, Ts,
};
use std::collections::BTreeMap;

const EPOCH: Epoch = Epoch(3);
const CP: Ts = 100;
const TRUNCATE_TS: Ts = 120;
const DROP_TS: Ts = 130;
/// `r.hold`, `r.tt` (truncated at 120: its new id is 120) and `r.t5` (dropped at 130).
const HOLD: TableId = TableId(1);
const TT: TableId = TableId(2);
const T5: TableId = TableId(3);
const TT_NEW: TableId = TableId(TRUNCATE_TS);

fn cf() -> ChangefeedId {
    ChangefeedId::new("cf")
}
fn n1() -> NodeId {
    NodeId::new("n1")
}

fn ddl(ts: Ts, kind: DdlKind, influence: DdlInfluence) -> DdlEvent {
    DdlEvent {
        commit_ts: ts,
        commit_time_ms: 0,
        kind,
        database: "r".into(),
        query: format!("{kind:?}"),
        influence,
        session: None,
        object_database: None,
    }
}

fn truncate_tt() -> DdlEvent {
    let mut inf = DdlInfluence::scoped(InfluenceScope::Tables(vec![TT]), true);
    inf.dropped = vec![TT];
    inf.added = vec![(TT_NEW, "r.tt".into())];
    ddl(TRUNCATE_TS, DdlKind::TruncateTable, inf)
}

fn drop_t5() -> DdlEvent {
    let mut inf = DdlInfluence::scoped(InfluenceScope::Tables(vec![T5]), true);
    inf.dropped = vec![T5];
    ddl(DROP_TS, DdlKind::DropTable, inf)
}

fn snapshot() -> SchemaSnapshot {
    let table = |id: TableId, name: &str| TableInfo {
        id,
        name: name.into(),
        regions: Vec::new(),
        splittable: true,
    };
    SchemaSnapshot {
        at_ts: CP,
        tables: vec![table(HOLD, "r.hold"), table(TT, "r.tt"), table(T5, "r.t5")],
        ddls_after: vec![truncate_tt(), drop_t5()],
    }
}

/// A maintainer bootstrapped at `CP` on a node that runs nothing (it restarted), with the
/// sink's record `applied`; returns it with the creates it sent (table -> start ts).
fn bootstrap(w: &World, applied: Vec<AppliedDdl>) -> (Maintainer, BTreeMap<TableId, Ts>) {
    let ctx = w.ctx(0);
    let config = ChangefeedConfig {
        sink_dispatchers: Vec::new(),
        snapshot: Default::default(),
        sink_uri: "mysql://down".into(),
        start_ts: CP,
        scheduler: Default::default(),
        preferred_node: None,
        filter: Default::default(),
    };
    let mut out = Vec::new();
    let mut m = Maintainer::new(&ctx, cf(), EPOCH, n1(), CP, config.clone(), &mut out);
    common::answer_meta(&mut m, &ctx, EPOCH, &config, &mut out);
    m.on_schema(&ctx, snapshot(), EPOCH, &mut out);
    m.on_message(&ctx, &n1(), response(vec![]), &mut out);
    let asked = out.iter().any(|e| {
        matches!(e, Effect::LoadApplied { after, sink_uri, .. } if *after == CP && sink_uri == "mysql://down")
    });
    assert!(
        asked,
        "the maintainer asks the sink what it applied after its start point"
    );
    assert!(!m.is_bootstrapped(), "not before the answer");
    m.on_applied(&ctx, Ok(applied), &mut out);
    assert!(m.is_bootstrapped());
    let mut creates = BTreeMap::new();
    run(w, &mut m, 1, out, &mut creates);
    (m, creates)
}

fn response(dispatchers: Vec<DispatcherReport>) -> Message {
    Message::BootstrapResponse {
        cf: cf(),
        epoch: EPOCH,
        incarnation: 1,
        dispatchers,
    }
}

/// Ticks the maintainer a few times, collecting the creates it sends.
fn run(
    w: &World,
    m: &mut Maintainer,
    from: u64,
    mut out: Vec<Effect>,
    creates: &mut BTreeMap<TableId, Ts>,
) -> Vec<Effect> {
    for i in 0..5 {
        m.on_tick(&w.ctx(from * 1000 + i * 100), &mut out);
    }
    for e in &out {
        if let Effect::Send {
            msg: Message::Create { span, start_ts, .. },
            ..
        } = e
        {
            // Resent until confirmed: always with the same start.
            let first = *creates.entry(span.table).or_insert(*start_ts);
            assert_eq!(first, *start_ts, "{span:?}");
        }
    }
    out
}

/// The table trigger reports `stage` at the DDL at `ts`; returns the barrier commands it gets.
fn trigger_at(
    w: &World,
    m: &mut Maintainer,
    now: u64,
    ddl: &DdlEvent,
    stage: BlockStage,
) -> Vec<BarrierCommand> {
    let mut out = Vec::new();
    m.on_message(
        &w.ctx(now),
        &n1(),
        Message::BlockStatus {
            cf: cf(),
            epoch: EPOCH,
            id: m.trigger_id(),
            span: sluice_control::dispatcher::trigger_span(),
            report: BlockReport {
                ddl_ts: ddl.commit_ts,
                stage,
                ddl: Some(ddl.influence.clone()),
            },
        },
        &mut out,
    );
    out.iter()
        .filter_map(|e| match e {
            Effect::Send {
                msg: Message::Barrier { command, .. },
                ..
            } => Some(*command),
            _ => None,
        })
        .collect()
}

fn finished(ts: Ts) -> AppliedDdl {
    AppliedDdl {
        commit_ts: ts,
        finished: true,
    }
}

#[test]
fn tables_a_finished_ddl_truncated_or_dropped_are_not_replayed() {
    let w = World::of(&["n1"]);
    let (mut m, mut creates) = bootstrap(&w, vec![finished(TRUNCATE_TS), finished(DROP_TS)]);
    assert_eq!(
        creates.get(&HOLD),
        Some(&CP),
        "an untouched table replays from the checkpoint"
    );
    assert!(
        !creates.contains_key(&TT),
        "truncated downstream: its old rows must not come back"
    );
    assert!(
        !creates.contains_key(&T5),
        "dropped downstream: nothing to write into"
    );

    // The trigger replays the TRUNCATE: it is written again (the sink skips what it finished)
    // and the table's new version starts after it.
    assert_eq!(
        trigger_at(&w, &mut m, 2000, &truncate_tt(), BlockStage::Waiting),
        vec![BarrierCommand::Write]
    );
    trigger_at(&w, &mut m, 2100, &truncate_tt(), BlockStage::Written);
    run(&w, &mut m, 3, Vec::new(), &mut creates);
    let start = creates.get(&TT_NEW).copied();
    assert!(start.is_some_and(|s| s >= TRUNCATE_TS), "{creates:?}");

    // The DROP replayed: nothing of t5 appears.
    assert_eq!(
        trigger_at(&w, &mut m, 4000, &drop_t5(), BlockStage::Waiting),
        vec![BarrierCommand::Write]
    );
    trigger_at(&w, &mut m, 4100, &drop_t5(), BlockStage::Written);
    run(&w, &mut m, 5, Vec::new(), &mut creates);
    assert!(!creates.contains_key(&T5), "{creates:?}");
    assert!(m.tables().iter().all(|(t, _)| *t != T5 && *t != TT));
}

#[test]
fn without_a_record_every_table_replays_from_the_checkpoint() {
    // The contrast: the same history with nothing applied downstream replays all of it.
    let w = World::of(&["n1"]);
    let (_, creates) = bootstrap(&w, Vec::new());
    for t in [HOLD, TT, T5] {
        assert_eq!(creates.get(&t), Some(&CP), "{creates:?}");
    }
}

#[test]
fn a_started_ddl_replays_itself_but_no_row_before_it() {
    let w = World::of(&["n1"]);
    let started = AppliedDdl {
        commit_ts: DROP_TS,
        finished: false,
    };
    let (_, creates) = bootstrap(&w, vec![started]);
    assert_eq!(creates.get(&T5), Some(&(DROP_TS - 1)), "{creates:?}");
    assert_eq!(creates.get(&TT), Some(&CP));
}

#[test]
fn a_surviving_writer_counts_as_a_record() {
    // n2 survived with t5's dispatcher writing the DROP (told by the old maintainer); the sink
    // read may predate the write. t5's other span, on the restarted n1, must not replay rows.
    let mut w = World::of(&["n1"]);
    w.alive.insert(NodeId::new("n2"), 1);
    let ctx = w.ctx(0);
    let config = ChangefeedConfig {
        sink_dispatchers: Vec::new(),
        snapshot: Default::default(),
        sink_uri: "mysql://down".into(),
        start_ts: CP,
        scheduler: Default::default(),
        preferred_node: None,
        filter: Default::default(),
    };
    let mut out = Vec::new();
    let mut m = Maintainer::new(&ctx, cf(), EPOCH, n1(), CP, config.clone(), &mut out);
    common::answer_meta(&mut m, &ctx, EPOCH, &config, &mut out);
    m.on_schema(&ctx, snapshot(), EPOCH, &mut out);
    let whole = Span::whole_table(T5);
    let mut mid = whole.start.0.clone();
    mid.push(0x80);
    let half = Span::new(T5, whole.start.clone(), Key(mid));
    assert!(half.end < whole.end, "{half:?} is part of {whole:?}");
    let writer = DispatcherReport {
        id: sluice_types::DispatcherId { epoch: 2, seq: 7 },
        span: half,
        is_trigger: false,
        phase: DispatcherPhase::Working,
        checkpoint: DROP_TS - 1,
        block: Some(BlockReport {
            ddl_ts: DROP_TS,
            stage: BlockStage::Writing,
            ddl: Some(drop_t5().influence),
        }),
        merge_sources: Vec::new(),
        write_rate: 0,
        resolved: DROP_TS,
        copy: None,
        rests: false,
    };
    m.on_message(&ctx, &n1(), response(vec![]), &mut out);
    m.on_message(&ctx, &NodeId::new("n2"), response(vec![writer]), &mut out);
    m.on_applied(&ctx, Ok(Vec::new()), &mut out);
    assert!(m.is_bootstrapped());
    let mut creates = BTreeMap::new();
    run(&w, &mut m, 1, out, &mut creates);
    assert_eq!(
        creates.get(&T5),
        Some(&(DROP_TS - 1)),
        "{creates:?} {:?} {:?}",
        m.spans(),
        m.operators()
    );
}

#[test]
fn an_unreadable_sink_keeps_the_bootstrap_waiting_with_a_warning() {
    let w = World::of(&["n1"]);
    let ctx = w.ctx(0);
    let config = ChangefeedConfig {
        sink_dispatchers: Vec::new(),
        snapshot: Default::default(),
        sink_uri: "mysql://down".into(),
        start_ts: CP,
        scheduler: Default::default(),
        preferred_node: None,
        filter: Default::default(),
    };
    let mut out = Vec::new();
    let mut m = Maintainer::new(&ctx, cf(), EPOCH, n1(), CP, config.clone(), &mut out);
    common::answer_meta(&mut m, &ctx, EPOCH, &config, &mut out);
    m.on_schema(&ctx, snapshot(), EPOCH, &mut out);
    m.on_message(&ctx, &n1(), response(vec![]), &mut out);
    m.on_applied(&ctx, Err("connection refused".into()), &mut out);
    assert!(!m.is_bootstrapped());
    let warning = m.status().warning.unwrap_or_default();
    assert!(warning.contains("connection refused"), "{warning}");
    // Asked again later, and a good answer finishes the bootstrap and clears the warning.
    let mut again = Vec::new();
    m.on_tick(&w.ctx(10_000), &mut again);
    assert!(again
        .iter()
        .any(|e| matches!(e, Effect::LoadApplied { .. })));
    m.on_applied(&w.ctx(10_001), Ok(Vec::new()), &mut again);
    assert!(m.is_bootstrapped());
    assert_eq!(m.status().warning, None);
}

#[test]
fn a_ddl_the_downstream_applied_after_the_schema_was_loaded_is_learned_before_the_bootstrap_ends() {
    // The schema was loaded while the previous maintainer still ran; it then wrote the DROP of
    // t5 before this maintainer's bootstrap fenced it. The record names a DDL the snapshot does
    // not have: the maintainer loads the schema again before it decides where tables start.
    let w = World::of(&["n1"]);
    let ctx = w.ctx(0);
    let config = ChangefeedConfig {
        sink_dispatchers: Vec::new(),
        snapshot: Default::default(),
        sink_uri: "mysql://down".into(),
        start_ts: CP,
        scheduler: Default::default(),
        preferred_node: None,
        filter: Default::default(),
    };
    let mut out = Vec::new();
    let mut m = Maintainer::new(&ctx, cf(), EPOCH, n1(), CP, config.clone(), &mut out);
    common::answer_meta(&mut m, &ctx, EPOCH, &config, &mut out);
    let mut early = snapshot();
    early.ddls_after.retain(|d| d.commit_ts < DROP_TS);
    m.on_schema(&ctx, early, EPOCH, &mut out);
    m.on_message(&ctx, &n1(), response(vec![]), &mut out);
    let mut again = Vec::new();
    m.on_applied(&ctx, Ok(vec![finished(DROP_TS)]), &mut again);
    assert!(
        !m.is_bootstrapped(),
        "not with a schema that misses a recorded DDL"
    );
    assert!(
        again
            .iter()
            .any(|e| matches!(e, Effect::LoadSchema { at_ts, epoch, .. } if *at_ts == CP && *epoch == EPOCH)),
        "{again:?}"
    );
    m.on_schema(&w.ctx(1), snapshot(), EPOCH, &mut again);
    assert!(m.is_bootstrapped());
    let mut creates = BTreeMap::new();
    run(&w, &mut m, 1, [out, again].concat(), &mut creates);
    assert!(
        !creates.contains_key(&T5),
        "dropped downstream before the bootstrap: {creates:?}"
    );
    assert_eq!(creates.get(&HOLD), Some(&CP));
}

#[test]
fn a_recorded_ddl_the_history_never_has_does_not_hold_the_bootstrap() {
    // Loaded again once; a record the newer history still lacks bounds nothing.
    let w = World::of(&["n1"]);
    let (_, creates) = bootstrap_after_refresh(&w, vec![finished(DROP_TS + 50)]);
    for t in [HOLD, TT, T5] {
        assert_eq!(creates.get(&t), Some(&CP), "{creates:?}");
    }
}

/// `bootstrap`, where the record names a DDL the snapshot lacks: answered with the same
/// snapshot again.
fn bootstrap_after_refresh(
    w: &World,
    applied: Vec<AppliedDdl>,
) -> (Maintainer, BTreeMap<TableId, Ts>) {
    let ctx = w.ctx(0);
    let config = ChangefeedConfig {
        sink_dispatchers: Vec::new(),
        snapshot: Default::default(),
        sink_uri: "mysql://down".into(),
        start_ts: CP,
        scheduler: Default::default(),
        preferred_node: None,
        filter: Default::default(),
    };
    let mut out = Vec::new();
    let mut m = Maintainer::new(&ctx, cf(), EPOCH, n1(), CP, config.clone(), &mut out);
    common::answer_meta(&mut m, &ctx, EPOCH, &config, &mut out);
    m.on_schema(&ctx, snapshot(), EPOCH, &mut out);
    m.on_message(&ctx, &n1(), response(vec![]), &mut out);
    m.on_applied(&ctx, Ok(applied), &mut out);
    assert!(!m.is_bootstrapped());
    m.on_schema(&ctx, snapshot(), EPOCH, &mut out);
    assert!(m.is_bootstrapped());
    let mut creates = BTreeMap::new();
    run(w, &mut m, 1, out, &mut creates);
    (m, creates)
}
