//! The dispatcher manager in isolation: fencing, idempotence under duplicate, stale and reordered
//! messages, the overlap guard, close-before-reopen, merges, and the barrier protocol.

use sluice_control::config::ChangefeedConfig;
use sluice_control::dispatcher::DispatcherManager;
use sluice_control::hold::{HoldPoint, Holds};
use sluice_control::io::{Effect, SinkCommand, StreamItem, TraceEvent};
use sluice_control::msg::{
    BarrierCommand, BlockStage, ClosePurpose, DispatcherPhase, Message, RejectReason,
};
use sluice_types::{
    ChangefeedId, DdlEvent, DdlInfluence, DdlKind, DispatcherId, Epoch, InfluenceScope, Key,
    NodeId, Span, TableId,
};

fn cf() -> ChangefeedId {
    ChangefeedId::new("cf")
}
fn m1() -> NodeId {
    NodeId::new("m1")
}
fn m2() -> NodeId {
    NodeId::new("m2")
}
fn id(epoch: u64, seq: u64) -> DispatcherId {
    DispatcherId { epoch, seq }
}
fn config() -> ChangefeedConfig {
    ChangefeedConfig {
        sink_uri: "blackhole://".into(),
        start_ts: 100,
        scheduler: Default::default(),
        preferred_node: None,
        filter: Default::default(),
    }
}
fn bootstrap(dm: &mut DispatcherManager, from: &NodeId, epoch: u64, holds: &Holds) -> Vec<Effect> {
    let mut out = Vec::new();
    dm.on_message(
        0,
        from,
        Message::Bootstrap {
            cf: cf(),
            epoch: Epoch(epoch),
            trigger: None,
            config: config(),
            forget: Vec::new(),
        },
        holds,
        &mut out,
    );
    out
}
fn create(
    dm: &mut DispatcherManager,
    from: &NodeId,
    epoch: u64,
    d: DispatcherId,
    span: Span,
    holds: &Holds,
) -> Vec<Effect> {
    let mut out = Vec::new();
    dm.on_message(
        0,
        from,
        Message::Create {
            cf: cf(),
            epoch: Epoch(epoch),
            id: d,
            span,
            start_ts: 100,
        },
        holds,
        &mut out,
    );
    out
}
fn remove(
    dm: &mut DispatcherManager,
    from: &NodeId,
    epoch: u64,
    d: DispatcherId,
    holds: &Holds,
) -> Vec<Effect> {
    let mut out = Vec::new();
    dm.on_message(
        0,
        from,
        Message::Remove {
            cf: cf(),
            epoch: Epoch(epoch),
            id: d,
            purpose: ClosePurpose::Remove,
        },
        holds,
        &mut out,
    );
    out
}
fn started(out: &[Effect]) -> Vec<DispatcherId> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Trace(TraceEvent::DispatcherStarted { id, .. }) => Some(*id),
            _ => None,
        })
        .collect()
}
fn stale(out: &[Effect]) -> bool {
    out.iter()
        .any(|e| matches!(e, Effect::Trace(TraceEvent::Stale { .. })))
}
fn half(t: u64) -> (Span, Span) {
    let whole = Span::whole_table(TableId(t));
    let p = whole.split_at(&[Key::row_u64(TableId(t), 1 << 31)]);
    (p[0].clone(), p[1].clone())
}
fn state_of(dm: &DispatcherManager, d: DispatcherId) -> Option<&'static str> {
    dm.dispatchers()
        .into_iter()
        .find(|v| v.id == d)
        .map(|v| v.state)
}

#[test]
fn only_the_current_maintainer_epoch_is_admitted() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    // Before any bootstrap nothing is admitted.
    let out = create(
        &mut dm,
        &m1(),
        1,
        id(1, 1),
        Span::whole_table(TableId(7)),
        &holds,
    );
    assert!(stale(&out) && started(&out).is_empty());
    bootstrap(&mut dm, &m1(), 2, &holds);
    // Older epoch, and the right epoch from the wrong node, are dropped.
    assert!(stale(&create(
        &mut dm,
        &m1(),
        1,
        id(1, 1),
        Span::whole_table(TableId(7)),
        &holds
    )));
    assert!(stale(&create(
        &mut dm,
        &m2(),
        2,
        id(2, 1),
        Span::whole_table(TableId(7)),
        &holds
    )));
    // An older or same-epoch-other-node bootstrap does not take the manager over.
    assert!(stale(&bootstrap(&mut dm, &m2(), 1, &holds)));
    assert!(stale(&bootstrap(&mut dm, &m2(), 2, &holds)));
    assert_eq!(dm.owner(), Some(&(m1(), Epoch(2))));
    assert_eq!(
        started(&create(
            &mut dm,
            &m1(),
            2,
            id(2, 1),
            Span::whole_table(TableId(7)),
            &holds
        )),
        vec![id(2, 1)]
    );
    // A newer bootstrap takes over; the old owner is fenced from then on.
    bootstrap(&mut dm, &m2(), 3, &holds);
    assert!(stale(&remove(&mut dm, &m1(), 2, id(2, 1), &holds)));
    assert_eq!(state_of(&dm, id(2, 1)), Some("working"));
}

#[test]
fn duplicate_create_is_idempotent_and_overlap_is_refused() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let (a, b) = half(5);
    assert_eq!(
        started(&create(&mut dm, &m1(), 1, id(1, 1), a.clone(), &holds)).len(),
        1
    );
    assert!(
        started(&create(&mut dm, &m1(), 1, id(1, 1), a.clone(), &holds)).is_empty(),
        "duplicate create started twice"
    );
    // Another id over the same keys: refused, with the id it overlaps.
    let out = create(
        &mut dm,
        &m1(),
        1,
        id(1, 2),
        Span::whole_table(TableId(5)),
        &holds,
    );
    assert!(started(&out).is_empty());
    assert!(out.iter().any(|e| matches!(e, Effect::Send { msg: Message::Rejected { reason: RejectReason::Overlap { with }, .. }, .. } if *with == id(1, 1))));
    // Disjoint span: fine.
    assert_eq!(
        started(&create(&mut dm, &m1(), 1, id(1, 3), b, &holds)).len(),
        1
    );
}

#[test]
fn remove_before_create_keeps_the_dispatcher_removed() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    // Reordered: the remove arrives first.
    remove(&mut dm, &m1(), 1, id(1, 9), &holds);
    let out = create(
        &mut dm,
        &m1(),
        1,
        id(1, 9),
        Span::whole_table(TableId(3)),
        &holds,
    );
    assert!(
        started(&out).is_empty(),
        "a create after its remove must not start"
    );
    assert_eq!(state_of(&dm, id(1, 9)), None);
}

#[test]
fn a_closing_dispatcher_is_reported_stopped_only_after_the_sink_closed_and_holds_release() {
    let mut holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    create(
        &mut dm,
        &m1(),
        1,
        id(1, 1),
        Span::whole_table(TableId(3)),
        &holds,
    );
    holds.set(HoldPoint::CloseDispatcher, true);
    let out = remove(&mut dm, &m1(), 1, id(1, 1), &holds);
    assert!(out
        .iter()
        .any(|e| matches!(e, Effect::Sink(SinkCommand::Close { .. }))));
    assert_eq!(state_of(&dm, id(1, 1)), Some("closing"));
    let mut out = Vec::new();
    dm.on_sink_closed(0, id(1, 1), &holds, &mut out);
    assert_eq!(
        state_of(&dm, id(1, 1)),
        Some("closing"),
        "held at close_dispatcher"
    );
    assert!(!dm.held(&holds).is_empty());
    // The overlap guard still refuses a successor over the same keys.
    assert!(started(&create(
        &mut dm,
        &m1(),
        1,
        id(1, 2),
        Span::whole_table(TableId(3)),
        &holds
    ))
    .is_empty());
    holds.set(HoldPoint::CloseDispatcher, false);
    let mut out = Vec::new();
    dm.on_hold(0, HoldPoint::CloseDispatcher, false, &holds, &mut out);
    assert_eq!(state_of(&dm, id(1, 1)), None);
    assert_eq!(
        started(&create(
            &mut dm,
            &m1(),
            1,
            id(1, 3),
            Span::whole_table(TableId(3)),
            &holds
        ))
        .len(),
        1
    );
}

#[test]
fn held_create_is_reported_at_bootstrap_and_adoptable_by_the_next_epoch() {
    let mut holds = Holds::default();
    holds.set(HoldPoint::CreateDispatcher, true);
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    assert!(started(&create(
        &mut dm,
        &m1(),
        1,
        id(1, 4),
        Span::whole_table(TableId(22)),
        &holds
    ))
    .is_empty());
    let out = bootstrap(&mut dm, &m2(), 2, &holds);
    let reported = out.iter().find_map(|e| match e {
        Effect::Send {
            msg: Message::BootstrapResponse { dispatchers, .. },
            ..
        } => Some(dispatchers.clone()),
        _ => None,
    });
    let reported = reported.expect("bootstrap response");
    assert!(reported.iter().any(|r| r.id == id(1, 4)
        && r.phase == DispatcherPhase::Creating
        && r.span.table == TableId(22)));
    holds.set(HoldPoint::CreateDispatcher, false);
    let mut out = Vec::new();
    dm.on_hold(0, HoldPoint::CreateDispatcher, false, &holds, &mut out);
    assert_eq!(started(&out), vec![id(1, 4)]);
}

#[test]
fn merge_starts_the_target_only_after_every_source_closed() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let (a, b) = half(9);
    create(&mut dm, &m1(), 1, id(1, 1), a, &holds);
    create(&mut dm, &m1(), 1, id(1, 2), b, &holds);
    let mut out = Vec::new();
    let merge = Message::Merge {
        cf: cf(),
        epoch: Epoch(1),
        sources: vec![id(1, 1), id(1, 2)],
        target: id(1, 3),
        span: Span::whole_table(TableId(9)),
    };
    dm.on_message(0, &m1(), merge.clone(), &holds, &mut out);
    assert!(started(&out).is_empty());
    // A duplicate merge changes nothing.
    let mut dup = Vec::new();
    dm.on_message(0, &m1(), merge, &holds, &mut dup);
    assert!(started(&dup).is_empty());
    let mut out = Vec::new();
    dm.on_sink_closed(0, id(1, 1), &holds, &mut out);
    assert!(
        started(&out).is_empty(),
        "target started before the second source closed"
    );
    dm.on_sink_closed(0, id(1, 2), &holds, &mut out);
    assert_eq!(started(&out), vec![id(1, 3)]);
}

fn ddl(ts: u64, tables: Vec<TableId>, trigger: bool) -> DdlEvent {
    DdlEvent {
        commit_ts: ts,
        commit_time_ms: 0,
        kind: DdlKind::AlterTable,
        database: "db".into(),
        query: "ALTER TABLE t ADD COLUMN c INT".into(),
        influence: DdlInfluence {
            scope: InfluenceScope::Tables(tables),
            trigger,
            dropped: vec![],
            added: vec![],
            renamed: vec![],
        },
    }
}

#[test]
fn barrier_waits_for_flush_writes_once_and_answers_duplicates_idempotently() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let (a, _) = half(4);
    let d = id(1, 1);
    create(&mut dm, &m1(), 1, d, a.clone(), &holds);
    let items = vec![
        StreamItem::Row {
            commit_ts: 101,
            key: Key::row_u64(TableId(4), 1),
            handle: 1,
            kind: sluice_types::RowKind::Insert,
        },
        StreamItem::Ddl {
            ddl: ddl(102, vec![TableId(4)], false),
            handle: 2,
        },
        StreamItem::Row {
            commit_ts: 103,
            key: Key::row_u64(TableId(4), 2),
            handle: 3,
            kind: sluice_types::RowKind::Insert,
        },
    ];
    let mut out = Vec::new();
    dm.on_events(0, d, items, 110, &holds, &mut out);
    // Row 101 written, then a flush is asked; no Waiting until it is durable.
    assert!(out
        .iter()
        .any(|e| matches!(e, Effect::Sink(SinkCommand::WriteRows { .. }))));
    assert!(!out.iter().any(|e| matches!(
        e,
        Effect::Send {
            msg: Message::BlockStatus { .. },
            ..
        }
    )));
    assert_eq!(dm.block_of(d), None);
    let mut out = Vec::new();
    dm.on_sink_flushed(0, d, 101, &holds, &mut out);
    assert_eq!(dm.block_of(d), Some((102, BlockStage::Waiting)));
    assert!(out.iter().any(|e| matches!(
        e,
        Effect::Send {
            msg: Message::BlockStatus { .. },
            ..
        }
    )));
    // A stale Write for another ts does nothing; the right one writes once.
    let w = |ts| Message::Barrier {
        cf: cf(),
        epoch: Epoch(1),
        id: d,
        ddl_ts: ts,
        command: BarrierCommand::Write,
    };
    let mut out = Vec::new();
    dm.on_message(0, &m1(), w(99), &holds, &mut out);
    assert!(!out
        .iter()
        .any(|e| matches!(e, Effect::Sink(SinkCommand::WriteDdl { .. }))));
    dm.on_message(0, &m1(), w(102), &holds, &mut out);
    dm.on_message(0, &m1(), w(102), &holds, &mut out);
    assert_eq!(
        out.iter()
            .filter(|e| matches!(e, Effect::Sink(SinkCommand::WriteDdl { .. })))
            .count(),
        1
    );
    // Written only once the DDL is durable; then Proceed lets row 103 through.
    assert_eq!(dm.block_of(d), Some((102, BlockStage::Writing)));
    let mut out = Vec::new();
    dm.on_sink_flushed(0, d, 102, &holds, &mut out);
    assert_eq!(dm.block_of(d), Some((102, BlockStage::Written)));
    let mut out = Vec::new();
    dm.on_message(
        0,
        &m1(),
        Message::Barrier {
            cf: cf(),
            epoch: Epoch(1),
            id: d,
            ddl_ts: 102,
            command: BarrierCommand::Proceed,
        },
        &holds,
        &mut out,
    );
    assert_eq!(dm.block_of(d), None);
    assert!(out.iter().any(|e| matches!(e, Effect::Sink(SinkCommand::WriteRows { rows, .. }) if rows.iter().any(|r| r.0 == 103))));
    // A late duplicate Proceed or Pass is ignored.
    let mut out = Vec::new();
    dm.on_message(
        0,
        &m1(),
        Message::Barrier {
            cf: cf(),
            epoch: Epoch(1),
            id: d,
            ddl_ts: 102,
            command: BarrierCommand::Pass,
        },
        &holds,
        &mut out,
    );
    assert!(!out.iter().any(|e| matches!(e, Effect::Sink(_))));
}

#[test]
fn checkpoint_never_passes_unflushed_rows_nor_a_pending_ddl() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    create(&mut dm, &m1(), 1, d, Span::whole_table(TableId(4)), &holds);
    let cp = |dm: &DispatcherManager| {
        dm.dispatchers()
            .into_iter()
            .find(|v| v.id == d)
            .map(|v| v.checkpoint)
            .unwrap_or(0)
    };
    let mut out = Vec::new();
    dm.on_events(
        0,
        d,
        vec![StreamItem::Row {
            commit_ts: 105,
            key: Key::row_u64(TableId(4), 1),
            handle: 1,
            kind: sluice_types::RowKind::Insert,
        }],
        120,
        &holds,
        &mut out,
    );
    assert_eq!(cp(&dm), 100, "row 105 is not durable yet");
    dm.on_sink_flushed(0, d, 105, &holds, &mut out);
    assert_eq!(cp(&dm), 120);
    // A blocking DDL (trigger involved) caps the checkpoint below it until passed.
    dm.on_events(
        0,
        d,
        vec![StreamItem::Ddl {
            ddl: ddl(130, vec![TableId(4)], true),
            handle: 2,
        }],
        140,
        &holds,
        &mut out,
    );
    assert_eq!(cp(&dm), 129);
    dm.on_message(
        0,
        &m1(),
        Message::Barrier {
            cf: cf(),
            epoch: Epoch(1),
            id: d,
            ddl_ts: 130,
            command: BarrierCommand::Pass,
        },
        &holds,
        &mut out,
    );
    assert_eq!(cp(&dm), 140);
}

#[test]
fn retryable_sink_errors_restart_the_dispatcher_alone_until_they_persist() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    create(&mut dm, &m1(), 1, d, Span::whole_table(TableId(3)), &holds);
    let reported = |out: &[Effect]| {
        out.iter().any(|e| {
            matches!(
                e,
                Effect::Send {
                    msg: Message::DispatcherError { .. },
                    ..
                }
            )
        })
    };
    let limit = sluice_control::config::MAX_SINK_RETRIES_WITHOUT_PROGRESS;
    for i in 0..limit {
        let mut out = Vec::new();
        dm.on_sink_error(d, true, format!("failure {i}"), &mut out);
        assert!(
            !reported(&out),
            "a retryable error is handled inside the dispatcher (attempt {i})"
        );
        assert!(out
            .iter()
            .any(|e| matches!(e, Effect::Sink(SinkCommand::Close { .. }))));
        // More errors of the session being closed (writes queued behind the failed flush) are
        // the same failure: they neither count nor close again.
        for _ in 0..3 {
            let mut out = Vec::new();
            dm.on_sink_error(d, true, format!("failure {i}, again"), &mut out);
            assert!(
                !reported(&out),
                "a failing session counts once (attempt {i})"
            );
            assert!(
                !out.iter().any(|e| matches!(e, Effect::Sink(_))),
                "a session being closed is not closed again"
            );
        }
        let mut out = Vec::new();
        dm.on_sink_closed(0, d, &holds, &mut out);
        assert_eq!(started(&out), vec![d], "restarted from its own checkpoint");
    }
    // Without any progress, the next one is reported instead of retried silently forever.
    let mut out = Vec::new();
    dm.on_sink_error(d, true, "still failing".into(), &mut out);
    assert!(
        reported(&out),
        "persistent retryable errors must reach the maintainer"
    );
}
