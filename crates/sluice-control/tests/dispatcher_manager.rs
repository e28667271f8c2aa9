//! The dispatcher manager in isolation: fencing, idempotence under duplicate, stale and reordered
//! messages, the overlap guard, close-before-reopen, merges, and the barrier protocol.

use sluice_control::config::ChangefeedConfig;
use sluice_control::dispatcher::{DispatcherManager, QueuedRead};
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
        sink_dispatchers: Vec::new(),
        snapshot: Default::default(),
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
/// A create of `d` over `span` from 100, of the maintainer of `epoch`.
fn create_msg(
    epoch: u64,
    d: DispatcherId,
    span: Span,
    floor_known: bool,
    copy: Option<sluice_control::msg::CopyStart>,
) -> Message {
    Message::Create {
        cf: cf(),
        epoch: Epoch(epoch),
        id: d,
        span,
        start_ts: 100,
        floor_known,
        copy,
    }
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
    let msg = create_msg(epoch, d, span, true, None);
    dm.on_message(0, from, msg, holds, &mut out);
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
/// Answers every `LoadFloor` in `out` with `floor` (the start itself when lower), appending what
/// the answers cause.
fn answer_floors(dm: &mut DispatcherManager, out: &mut Vec<Effect>, floor: u64) {
    let asks: Vec<(DispatcherId, u64)> = out
        .iter()
        .filter_map(|e| match e {
            Effect::LoadFloor { id, after, .. } => Some((*id, *after)),
            _ => None,
        })
        .collect();
    for (id, after) in asks {
        dm.on_floor(0, id, Ok(floor.max(after)), out);
    }
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
    assert!(
        started(&out).is_empty(),
        "a merge target reads its floor first"
    );
    answer_floors(&mut dm, &mut out, 0);
    assert_eq!(started(&out), vec![id(1, 3)]);
}

fn ddl(ts: u64, tables: Vec<TableId>, trigger: bool) -> DdlEvent {
    DdlEvent {
        session: Default::default(),
        object_database: None,
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
            sources: vec![],
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
            ddl: Box::new(ddl(102, vec![TableId(4)], false)),
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
            ddl: Box::new(ddl(130, vec![TableId(4)], true)),
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
    // A new row in flight: the checkpoint stays where everything was durable (the DDL it passed
    // included), not at the last acknowledged row (105, below the DDL): a successor started from
    // it (a merge target, a move) would write rows of the table's version before the DDL.
    dm.on_events(
        0,
        d,
        vec![StreamItem::Row {
            commit_ts: 150,
            key: Key::row_u64(TableId(4), 2),
            handle: 3,
            kind: sluice_types::RowKind::Insert,
        }],
        160,
        &holds,
        &mut out,
    );
    assert!(
        out.iter().any(|e| matches!(e, Effect::Sink(SinkCommand::WriteRows { rows, .. }) if rows.iter().any(|r| r.0 == 150))),
        "row 150 is written"
    );
    assert_eq!(cp(&dm), 140, "row 150 is not durable yet, all before it is");
    dm.on_sink_flushed(0, d, 150, &holds, &mut out);
    assert_eq!(cp(&dm), 160);
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
        answer_floors(&mut dm, &mut out, 0);
        assert_eq!(started(&out), vec![d], "restarted from its own checkpoint");
    }
    // Without any progress, the next one is reported instead of retried silently forever.
    let mut out = Vec::new();
    dm.on_sink_error(d, true, "still failing".into(), &mut out);
    assert!(
        reported(&out),
        "persistent retryable errors must reach the maintainer"
    );
    // ... and keeps being reported (a lost message must not hide it).
    assert_eq!(state_of(&dm, d), Some("failed"));
    let mut out = Vec::new();
    dm.on_tick(sluice_control::config::HEARTBEAT_MS, &holds, &mut out);
    assert!(out.iter().any(|e| matches!(
        e,
        Effect::Send { msg: Message::Heartbeat { errors, .. }, .. }
            if errors.len() == 1 && errors[0].id == d && errors[0].message.contains("still failing")
    )));
}

/// A heartbeat's receiver, epoch and errors.
type HeartbeatErrors = (NodeId, Epoch, Vec<(DispatcherId, String)>);

/// The errors carried by the heartbeats among `out`, with the heartbeat's receiver and epoch.
fn heartbeat_errors(out: &[Effect]) -> Vec<HeartbeatErrors> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Send {
                to,
                msg: Message::Heartbeat { epoch, errors, .. },
            } => Some((
                to.clone(),
                *epoch,
                errors.iter().map(|e| (e.id, e.message.clone())).collect(),
            )),
            _ => None,
        })
        .collect()
}
fn error_sends(out: &[Effect]) -> usize {
    out.iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Send {
                    msg: Message::DispatcherError { .. },
                    ..
                }
            )
        })
        .count()
}
fn tick(dm: &mut DispatcherManager, now: u64, holds: &Holds) -> Vec<Effect> {
    let mut out = Vec::new();
    dm.on_tick(now, holds, &mut out);
    out
}

#[test]
fn a_failed_dispatcher_stops_and_its_error_rides_every_heartbeat_until_it_is_closed() {
    use sluice_control::config::{HEARTBEAT_MS, MAX_ERROR_MESSAGE_LEN};
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    let other = id(1, 2);
    let (a, b) = half(3);
    create(&mut dm, &m1(), 1, d, a.clone(), &holds);
    create(&mut dm, &m1(), 1, other, b, &holds);

    // A fatal error with an over-long text: sent once at once (the message may be lost), the
    // dispatcher stops (no more reads, its sink session closed).
    let long = format!(
        "table missing downstream {}",
        "é".repeat(MAX_ERROR_MESSAGE_LEN)
    );
    let mut out = Vec::new();
    dm.on_sink_error(d, false, long.clone(), &mut out);
    assert_eq!(error_sends(&out), 1, "reported at once");
    assert!(out
        .iter()
        .any(|e| matches!(e, Effect::Unsubscribe { id, .. } if *id == d)));
    assert!(out
        .iter()
        .any(|e| matches!(e, Effect::Sink(SinkCommand::Close { id, .. }) if *id == d)));
    assert_eq!(state_of(&dm, d), Some("failed"));
    // Later errors of the failed session change nothing and are not sent again on their own.
    let mut out = Vec::new();
    dm.on_sink_error(d, false, "again".into(), &mut out);
    dm.on_sink_error(d, true, "again, retryable".into(), &mut out);
    assert_eq!(error_sends(&out), 0);
    assert!(!out.iter().any(|e| matches!(e, Effect::Sink(_))));
    // Events that still arrive are not written.
    let mut out = Vec::new();
    dm.on_events(
        0,
        d,
        vec![StreamItem::Row {
            commit_ts: 105,
            key: Key::row_u64(TableId(3), 1),
            handle: 1,
            kind: sluice_types::RowKind::Insert,
        }],
        110,
        &holds,
        &mut out,
    );
    assert!(!out.iter().any(|e| matches!(e, Effect::Sink(_))), "{out:?}");
    let mut out = Vec::new();
    dm.on_sink_closed(0, d, &holds, &mut out);
    assert!(
        started(&out).is_empty(),
        "a failed dispatcher is not restarted"
    );
    assert_eq!(state_of(&dm, d), Some("failed"));

    // Every heartbeat carries the error (first text, truncated), only for the failed dispatcher.
    let mut first = None;
    for i in 1..=3 {
        let out = tick(&mut dm, i * HEARTBEAT_MS, &holds);
        let hbs = heartbeat_errors(&out);
        assert_eq!(hbs.len(), 1, "one heartbeat per interval");
        let (to, epoch, errors) = &hbs[0];
        assert_eq!((to, *epoch), (&m1(), Epoch(1)));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].0, d);
        let text = &errors[0].1;
        assert!(text.len() <= MAX_ERROR_MESSAGE_LEN, "{} bytes", text.len());
        assert!(text.starts_with("table missing downstream"), "{text}");
        assert!(text.ends_with('…'));
        if let Some(f) = &first {
            assert_eq!(f, text, "the first error stays the one reported");
        }
        first = Some(text.clone());
    }

    // A maintainer failover: the new maintainer (newer epoch, other node) gets it too.
    bootstrap(&mut dm, &m2(), 2, &holds);
    let out = tick(&mut dm, 10 * HEARTBEAT_MS, &holds);
    let hbs = heartbeat_errors(&out);
    assert_eq!(hbs.len(), 1);
    assert_eq!((&hbs[0].0, hbs[0].1), (&m2(), Epoch(2)));
    assert_eq!(
        hbs[0].2.iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![d],
        "the error survives a maintainer failover"
    );

    // The changefeed's close (a cascade close with a newer epoch) ends it: the dispatcher closes
    // (its session was already closing) and the error is not reported any more.
    let mut out = Vec::new();
    dm.on_message(
        0,
        &m1(),
        Message::CloseChangefeed {
            cf: cf(),
            epoch: Epoch(3),
        },
        &holds,
        &mut out,
    );
    assert!(
        !out.iter()
            .any(|e| matches!(e, Effect::Sink(SinkCommand::Close { id, .. }) if *id == d)),
        "a failed dispatcher's session is not closed twice"
    );
    assert_eq!(
        state_of(&dm, d),
        None,
        "its session already closed: stopped at once"
    );
    let mut out = Vec::new();
    dm.on_sink_closed(0, other, &holds, &mut out);
    assert!(dm.is_closed());
}

#[test]
fn a_failed_dispatcher_removed_before_its_session_closed_stops_when_it_closes() {
    use sluice_control::config::HEARTBEAT_MS;
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    create(&mut dm, &m1(), 1, d, Span::whole_table(TableId(3)), &holds);
    let mut out = Vec::new();
    dm.on_sink_error(d, false, "fatal".into(), &mut out);
    let out = remove(&mut dm, &m1(), 1, d, &holds);
    assert!(!out.iter().any(|e| matches!(e, Effect::Sink(_))));
    assert_eq!(state_of(&dm, d), Some("closing"));
    let out = tick(&mut dm, HEARTBEAT_MS, &holds);
    assert!(
        heartbeat_errors(&out).iter().all(|h| h.2.is_empty()),
        "a dispatcher being removed no longer reports its error"
    );
    let mut out = Vec::new();
    dm.on_sink_closed(0, d, &holds, &mut out);
    assert_eq!(state_of(&dm, d), None);
}

#[test]
fn heartbeats_carry_a_bounded_number_of_errors_lowest_ids_first() {
    use sluice_control::config::{HEARTBEAT_MS, MAX_ERRORS_PER_HEARTBEAT};
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let n = MAX_ERRORS_PER_HEARTBEAT as u64 + 3;
    for i in 1..=n {
        create(
            &mut dm,
            &m1(),
            1,
            id(1, i),
            Span::whole_table(TableId(100 + i)),
            &holds,
        );
    }
    for i in (1..=n).rev() {
        let mut out = Vec::new();
        dm.on_sink_error(id(1, i), false, format!("fatal {i}"), &mut out);
    }
    let out = tick(&mut dm, HEARTBEAT_MS, &holds);
    let hbs = heartbeat_errors(&out);
    assert_eq!(hbs.len(), 1);
    let ids: Vec<DispatcherId> = hbs[0].2.iter().map(|e| e.0).collect();
    let want: Vec<DispatcherId> = (1..=MAX_ERRORS_PER_HEARTBEAT as u64)
        .map(|i| id(1, i))
        .collect();
    assert_eq!(ids, want);
}

fn rows_written(out: &[Effect]) -> Vec<u64> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Sink(SinkCommand::WriteRows { rows, .. }) => {
                Some(rows.iter().map(|r| r.0).collect::<Vec<_>>())
            }
            Effect::Sink(SinkCommand::WriteDdl { ddl, .. }) => Some(vec![ddl.commit_ts]),
            _ => None,
        })
        .flatten()
        .collect()
}

/// An unreplicable change stops the dispatcher of its table: nothing after it is written, the
/// checkpoint stays below it, the heartbeat carries a warning naming it; the changefeed's
/// `ignore-event = ["unreplicable"]` lets it through (consumed, never written).
#[test]
fn an_unreplicable_change_stops_its_dispatcher_with_a_warning_until_let_through() {
    let holds = Holds::default();
    let table = TableId(4);
    let stop = DdlEvent {
        session: Default::default(),
        object_database: None,
        kind: DdlKind::Unreplicable,
        query: "table d.t: statement-format DML".into(),
        ..ddl(130, vec![table], false)
    };
    let row = |ts: u64, h: u64| StreamItem::Row {
        commit_ts: ts,
        key: Key::row_u64(table, h),
        handle: h,
        kind: sluice_types::RowKind::Insert,
    };
    let items = vec![
        row(110, 1),
        StreamItem::Ddl {
            ddl: Box::new(stop.clone()),
            handle: 2,
        },
        row(150, 3),
    ];
    let run = |cfg: ChangefeedConfig| {
        let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
        let mut out = Vec::new();
        dm.on_message(
            0,
            &m1(),
            Message::Bootstrap {
                cf: cf(),
                epoch: Epoch(1),
                trigger: None,
                config: cfg,
                forget: Vec::new(),
            },
            &holds,
            &mut out,
        );
        let d = id(1, 1);
        create(&mut dm, &m1(), 1, d, Span::whole_table(table), &holds);
        let mut out = Vec::new();
        dm.on_events(0, d, items.clone(), 200, &holds, &mut out);
        dm.on_sink_flushed(0, d, 110, &holds, &mut out);
        out.extend(tick(&mut dm, 1000, &holds));
        let cp = dm
            .dispatchers()
            .into_iter()
            .find(|v| v.id == d)
            .map(|v| v.checkpoint)
            .unwrap_or(0);
        (dm, out, cp)
    };
    let (dm, out, cp) = run(config());
    assert_eq!(
        rows_written(&out),
        vec![110],
        "nothing at or after the stop is written"
    );
    assert_eq!(cp, 129, "the checkpoint stays below the stop");
    let w = dm.warnings();
    assert!(
        w.len() == 1 && w[0].contains("statement-format DML") && w[0].contains("unreplicable"),
        "{w:?}"
    );
    let sent: Vec<&Vec<String>> = out
        .iter()
        .filter_map(|e| match e {
            Effect::Send {
                msg: Message::Heartbeat { warnings, .. },
                ..
            } => Some(warnings),
            _ => None,
        })
        .collect();
    assert!(
        sent.iter()
            .any(|w| w.iter().any(|m| m.contains("statement-format DML"))),
        "{sent:?}"
    );

    let mut cfg = config();
    cfg.filter.ignore_event = vec!["unreplicable".into()];
    let (dm, out, _) = run(cfg);
    assert_eq!(
        rows_written(&out),
        vec![110, 150],
        "let through: consumed, never written"
    );
    assert!(dm.warnings().is_empty());
}

/// A transaction larger than the dispatcher's buffer bound is taken whole: no cut, no request to
/// fetch it again (which would fetch the same transaction for ever).
#[test]
fn a_transaction_larger_than_the_buffer_is_taken_whole() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    let table = TableId(4);
    create(&mut dm, &m1(), 1, d, Span::whole_table(table), &holds);
    let big = sluice_control::config::MAX_BUFFERED_ITEMS as u64 + 500;
    let mut items: Vec<StreamItem> = (0..big)
        .map(|h| StreamItem::Row {
            commit_ts: 110,
            key: Key::row_u64(table, h),
            handle: h,
            kind: sluice_types::RowKind::Insert,
        })
        .collect();
    // The next transaction starts past the bound: the dispatcher stops before it.
    items.push(StreamItem::Row {
        commit_ts: 120,
        key: Key::row_u64(table, big),
        handle: big,
        kind: sluice_types::RowKind::Insert,
    });
    let mut out = Vec::new();
    dm.on_events(0, d, items, 130, &holds, &mut out);
    let written = rows_written(&out);
    assert_eq!(
        written.len() as u64,
        big,
        "the whole large transaction is written"
    );
    assert!(written.iter().all(|ts| *ts == 110));
    let resubscribed: Vec<u64> = out
        .iter()
        .filter_map(|e| match e {
            Effect::Subscribe { start_ts, .. } => Some(*start_ts),
            _ => None,
        })
        .collect();
    assert_eq!(
        resubscribed,
        vec![119],
        "asked again from the boundary, after the whole transaction"
    );
}

/// The block stage of `d` in the heartbeats and bootstrap responses among `out`.
fn reported_stages(out: &[Effect], d: DispatcherId) -> Vec<Option<BlockStage>> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Send {
                msg: Message::Heartbeat { dispatchers, .. },
                ..
            }
            | Effect::Send {
                msg: Message::BootstrapResponse { dispatchers, .. },
                ..
            } => dispatchers.iter().find(|r| r.id == d),
            _ => None,
        })
        .map(|r| r.block.as_ref().map(|b| b.stage))
        .collect()
}

fn block_statuses(out: &[Effect]) -> Vec<BlockStage> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Send {
                msg: Message::BlockStatus { report, .. },
                ..
            } => Some(report.stage),
            _ => None,
        })
        .collect()
}

/// `ddl_after_write` keeps a written DDL from the maintainer on every path: neither the block
/// status nor a heartbeat nor a new maintainer's bootstrap says Written while it is on (before,
/// the heartbeat did, and a maintainer went on as if the hold were off). Released, it is said.
#[test]
fn a_write_held_after_it_is_not_reported_by_heartbeats_nor_bootstrap() {
    use sluice_control::config::HEARTBEAT_MS;
    let mut holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let (a, _) = half(4);
    let d = id(1, 1);
    create(&mut dm, &m1(), 1, d, a, &holds);
    let items = vec![StreamItem::Ddl {
        ddl: Box::new(ddl(102, vec![TableId(4)], false)),
        handle: 1,
    }];
    let mut out = Vec::new();
    dm.on_events(0, d, items, 110, &holds, &mut out);
    assert_eq!(dm.block_of(d), Some((102, BlockStage::Waiting)));
    holds.set(HoldPoint::DdlAfterWrite, true);
    let write = Message::Barrier {
        cf: cf(),
        epoch: Epoch(1),
        id: d,
        ddl_ts: 102,
        command: BarrierCommand::Write,
    };
    dm.on_message(0, &m1(), write.clone(), &holds, &mut out);
    let mut out = Vec::new();
    dm.on_sink_flushed(0, d, 102, &holds, &mut out);
    assert_eq!(dm.block_of(d), Some((102, BlockStage::Written)));
    assert!(!dm.held(&holds).is_empty(), "the write is held");

    let mut out = tick(&mut dm, 10 * HEARTBEAT_MS, &holds);
    dm.on_message(0, &m1(), write, &holds, &mut out); // a resent Write
    out.extend(bootstrap(&mut dm, &m2(), 2, &holds)); // a new maintainer
    out.extend(tick(&mut dm, 20 * HEARTBEAT_MS, &holds));
    let stages = reported_stages(&out, d);
    assert!(
        stages.len() >= 2,
        "a heartbeat and a bootstrap response: {out:?}"
    );
    assert!(
        stages.iter().all(|s| *s == Some(BlockStage::Writing)),
        "held, the write is reported as under way: {stages:?}"
    );
    assert!(!block_statuses(&out).contains(&BlockStage::Written));

    holds.set(HoldPoint::DdlAfterWrite, false);
    let out = tick(&mut dm, 30 * HEARTBEAT_MS, &holds);
    assert!(
        block_statuses(&out).contains(&BlockStage::Written),
        "{out:?}"
    );
    assert!(reported_stages(&out, d)
        .iter()
        .all(|s| *s == Some(BlockStage::Written)));
}

fn create_unfloored(dm: &mut DispatcherManager, d: DispatcherId, span: Span) -> Vec<Effect> {
    let mut out = Vec::new();
    let msg = create_msg(1, d, span, false, None);
    dm.on_message(0, &m1(), msg, &Holds::default(), &mut out);
    out
}

fn subscribed_at(out: &[Effect], d: DispatcherId) -> Option<u64> {
    out.iter().find_map(|e| match e {
        Effect::Subscribe { id, start_ts, .. } if *id == d => Some(*start_ts),
        _ => None,
    })
}

#[test]
fn a_replacement_reads_its_floor_and_starts_no_lower_than_a_recorded_ddl() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    let out = create_unfloored(&mut dm, d, Span::whole_table(TableId(7)));
    let asked: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Effect::LoadFloor {
                id,
                table,
                after,
                sink_uri,
                ..
            } => Some((*id, *table, *after, sink_uri.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        asked,
        vec![(d, TableId(7), 100, "blackhole://".to_string())]
    );
    assert!(started(&out).is_empty() && subscribed_at(&out, d).is_none());
    assert_eq!(
        state_of(&dm, d),
        Some("creating"),
        "it writes nothing while it waits"
    );
    // The downstream recorded a DDL of the table at 150: everything below is durable there.
    let mut out = Vec::new();
    dm.on_floor(0, d, Ok(150), &mut out);
    assert_eq!(subscribed_at(&out, d), Some(150));
    assert_eq!(state_of(&dm, d), Some("working"));
    // A duplicate answer changes nothing.
    let mut dup = Vec::new();
    dm.on_floor(0, d, Ok(170), &mut dup);
    assert!(subscribed_at(&dup, d).is_none());
    // A floor below the start never lowers it.
    let e = id(1, 2);
    create_unfloored(&mut dm, e, Span::whole_table(TableId(8)));
    let mut out = Vec::new();
    dm.on_floor(0, e, Ok(100), &mut out);
    assert_eq!(subscribed_at(&out, e), Some(100));
}

#[test]
fn a_failed_floor_read_is_a_warning_and_is_asked_again() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    create_unfloored(&mut dm, d, Span::whole_table(TableId(7)));
    let mut out = Vec::new();
    dm.on_floor(1_000, d, Err("connection refused".into()), &mut out);
    let warned = |out: &[Effect]| {
        out.iter().any(|e| matches!(
            e,
            Effect::Send { msg: Message::Heartbeat { warnings, .. }, .. }
                if warnings.iter().any(|w| w.contains("connection refused") && w.contains("table 7"))
        ))
    };
    let out = tick(
        &mut dm,
        1_000 + sluice_control::config::HEARTBEAT_MS,
        &holds,
    );
    assert!(warned(&out), "the dispatcher shows why it does not start");
    let asks = |out: &[Effect]| {
        out.iter()
            .filter(|e| matches!(e, Effect::LoadFloor { .. }))
            .count()
    };
    assert_eq!(asks(&out), 0, "not asked again before the retry is due");
    let mut out = tick(&mut dm, 2_000, &holds);
    assert_eq!(asks(&out), 1, "asked again once due");
    answer_floors(&mut dm, &mut out, 120);
    assert_eq!(subscribed_at(&out, d), Some(120));
    let out = tick(
        &mut dm,
        3_000 + 2 * sluice_control::config::HEARTBEAT_MS,
        &holds,
    );
    assert!(!warned(&out), "the warning ends once it started");
}

#[test]
fn a_dispatcher_removed_while_it_waits_for_its_floor_never_starts() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    create_unfloored(&mut dm, d, Span::whole_table(TableId(7)));
    let out = remove(&mut dm, &m1(), 1, d, &holds);
    assert!(
        !out.iter().any(|e| matches!(e, Effect::Sink(_))),
        "it never opened a session"
    );
    let mut out = Vec::new();
    dm.on_floor(0, d, Ok(150), &mut out);
    assert!(started(&out).is_empty(), "a late answer starts nothing");
    assert_eq!(state_of(&dm, d), None);
}

/// A manager bootstrapped by `m1` with one working dispatcher `d1.1` over table 4.
/// A manager of owner m1 with one working dispatcher of table 4 (`a`) and one of table 5 (`b`).
fn dispatchers_of_tables_4_and_5() -> (DispatcherManager, Holds, DispatcherId, DispatcherId) {
    let (mut dm, holds, a) = one_dispatcher_of_table_4();
    let b = id(1, 2);
    create(&mut dm, &m1(), 1, b, Span::whole_table(TableId(5)), &holds);
    (dm, holds, a, b)
}

fn one_dispatcher_of_table_4() -> (DispatcherManager, Holds, DispatcherId) {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    create(&mut dm, &m1(), 1, d, Span::whole_table(TableId(4)), &holds);
    (dm, holds, d)
}

/// An insert of key `k` of `table` at `ts` in a dispatcher's stream (its handle is `k`).
fn insert_item(table: TableId, ts: u64, k: u64) -> StreamItem {
    StreamItem::Row {
        commit_ts: ts,
        key: Key::row_u64(table, k),
        handle: k,
        kind: sluice_types::RowKind::Insert,
    }
}

/// The manager warns that a sink acknowledged nothing for too long.
fn ack_stalled(dm: &DispatcherManager) -> bool {
    dm.warnings()
        .iter()
        .any(|w| w.contains("acknowledged nothing"))
}

/// Rows the sink holds without acknowledging them hold the checkpoint; after
/// `SINK_ACK_STALL_MS` without an acknowledgement the dispatcher says so in its heartbeats (the
/// changefeed then reads `warning`, not `normal`), and the warning goes once the sink
/// acknowledges. A sink that acknowledges slowly but steadily never raises it.
#[test]
fn a_sink_that_stops_acknowledging_is_reported_not_hidden() {
    use sluice_control::config::SINK_ACK_STALL_MS;
    let (mut dm, holds, d) = one_dispatcher_of_table_4();
    let row = |ts: u64, k: u64| insert_item(TableId(4), ts, k);
    let mut out = Vec::new();
    dm.on_events(1_000, d, vec![row(105, 1)], 110, &holds, &mut out);
    dm.on_tick(1_000 + SINK_ACK_STALL_MS / 2, &holds, &mut out);
    assert!(!ack_stalled(&dm), "half the limit is not a stall");
    // Steady progress: an acknowledgement, then more rows, each within the limit.
    dm.on_sink_flushed(1_000 + SINK_ACK_STALL_MS / 2, d, 105, &holds, &mut out);
    dm.on_events(
        1_000 + SINK_ACK_STALL_MS / 2,
        d,
        vec![row(115, 2)],
        120,
        &holds,
        &mut out,
    );
    dm.on_tick(1_000 + SINK_ACK_STALL_MS, &holds, &mut out);
    assert!(!ack_stalled(&dm), "the sink acknowledged within the limit");
    dm.on_tick(1_000 + SINK_ACK_STALL_MS * 2, &holds, &mut out);
    assert!(
        ack_stalled(&dm),
        "no acknowledgement for the whole limit: {:?}",
        dm.warnings()
    );
    dm.on_sink_flushed(1_000 + SINK_ACK_STALL_MS * 2, d, 115, &holds, &mut out);
    assert!(!ack_stalled(&dm), "acknowledged again: {:?}", dm.warnings());
}

/// A transaction that comes in parts (rows above the batch's resolved ts): each part goes to
/// the sink as an `open` write (its last row kept back for the next write), the write that ends
/// it is not open and carries a row of it even when the stream brings no more of its rows, the
/// checkpoint stays below it until the sink acknowledges it whole, and parts going out count as
/// progress (no stall warning while they flow, one once they stop).
#[test]
fn a_transaction_in_parts_is_written_open_and_holds_the_checkpoint_below_it() {
    use sluice_control::config::SINK_ACK_STALL_MS;
    let (mut dm, holds, d) = one_dispatcher_of_table_4();
    let row = |ts: u64, k: u64| insert_item(TableId(4), ts, k);
    let writes = |out: &[Effect]| -> Vec<(Vec<u64>, bool)> {
        out.iter()
            .filter_map(|e| match e {
                Effect::Sink(SinkCommand::WriteRows { rows, open, .. }) => {
                    Some((rows.iter().map(|r| r.0).collect(), *open))
                }
                _ => None,
            })
            .collect()
    };
    let checkpoint = |dm: &DispatcherManager| {
        dm.dispatchers()
            .iter()
            .find(|v| v.id == d)
            .map(|v| v.checkpoint)
    };
    let mut out = Vec::new();
    // Transaction 105 whole, then the first part of 120 (resolved 119).
    dm.on_events(
        1_000,
        d,
        vec![row(105, 1), row(120, 2)],
        119,
        &holds,
        &mut out,
    );
    assert_eq!(
        writes(&out),
        vec![(vec![105], false)],
        "the part's only row is kept back"
    );
    dm.on_sink_flushed(1_000, d, 119, &holds, &mut out);
    assert_eq!(checkpoint(&dm), Some(119), "below the open transaction");
    let mut t = 1_000;
    for k in 3..6 {
        t += SINK_ACK_STALL_MS / 2;
        let mut out = Vec::new();
        dm.on_events(t, d, vec![row(120, k)], 119, &holds, &mut out);
        assert_eq!(writes(&out), vec![(vec![120], true)], "a further part");
        dm.on_tick(t, &holds, &mut out);
        assert!(
            !ack_stalled(&dm),
            "parts going out are progress: {:?}",
            dm.warnings()
        );
        assert_eq!(checkpoint(&dm), Some(119));
    }
    let mut out = Vec::new();
    dm.on_tick(t + SINK_ACK_STALL_MS + 1, &holds, &mut out);
    assert!(
        ack_stalled(&dm),
        "no part and no acknowledgement for the limit"
    );
    let mut out = Vec::new();
    // The stream passes it with no more of its rows (the rest filtered out, or the last part
    // ended exactly at its end): the row kept back ends it.
    dm.on_events(t + SINK_ACK_STALL_MS + 1, d, vec![], 130, &holds, &mut out);
    assert_eq!(
        writes(&out),
        vec![(vec![120], false)],
        "the write that ends it"
    );
    dm.on_sink_flushed(t + SINK_ACK_STALL_MS + 2, d, 120, &holds, &mut out);
    assert!(!ack_stalled(&dm));
    assert_eq!(
        checkpoint(&dm),
        Some(130),
        "all of it durable, and the stream resolved past it"
    );
}

/// The create of dispatcher `d` on table 4 with a copy from the table's start (10-row chunks).
fn create_copying(d: DispatcherId) -> Message {
    use sluice_control::msg::{CopyProgress, CopyStart};
    let copy = CopyStart {
        from: CopyProgress {
            cursor: None,
            done: false,
        },
        keyless: false,
        chunk_rows: 10,
    };
    create_msg(1, d, Span::whole_table(TableId(4)), true, Some(copy))
}

/// The copy of `d` finds its chunks' bounds (the probe it asked for is answered with none:
/// the span holds less than a chunk) and reads; the id of the read it asked for.
fn first_read(dm: &mut DispatcherManager, d: DispatcherId, now: u64, out: &mut Vec<Effect>) -> u64 {
    let probe = out.iter().find_map(|e| match e {
        Effect::ProbeChunks(p) if p.id == d => Some(p.probe),
        _ => None,
    });
    let probe = probe.expect("the copy finds its chunks' bounds first");
    let mut after = Vec::new();
    dm.on_chunk_bounds(now, d, probe, Ok(vec![]), &mut after);
    let read = after.iter().find_map(|e| match e {
        Effect::ReadChunk(r) if r.id == d => {
            assert_eq!(r.upto, None, "no bound: the read runs to the span's end");
            Some(r.read)
        }
        _ => None,
    });
    out.extend(after);
    read.expect("the copy reads its first chunk")
}

fn queued(read: u64, ts: u64, cursor: Option<Vec<u8>>, more: bool, rows: usize) -> QueuedRead {
    QueuedRead {
        read,
        ts,
        cursor,
        more,
        rows,
    }
}

/// Many tables that start copying at once: at most `MAX_CONCURRENT_CHUNK_READS` of them ask
/// for their chunks' bounds at a time, the others when those are answered.
#[test]
fn probes_for_chunk_bounds_are_bounded_per_manager() {
    use sluice_control::config::MAX_CONCURRENT_CHUNK_READS;
    use sluice_control::msg::{CopyProgress, CopyStart};
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let mut out = Vec::new();
    let n = MAX_CONCURRENT_CHUNK_READS as u64 + 3;
    for t in 0..n {
        let copy = CopyStart {
            from: CopyProgress::start(),
            keyless: false,
            chunk_rows: 10,
        };
        let span = Span::whole_table(TableId(40 + t));
        dm.on_message(
            0,
            &m1(),
            create_msg(1, id(1, t + 1), span, true, Some(copy)),
            &holds,
            &mut out,
        );
    }
    let probes = |out: &[Effect]| -> Vec<(DispatcherId, u64)> {
        out.iter()
            .filter_map(|e| match e {
                Effect::ProbeChunks(p) => Some((p.id, p.probe)),
                _ => None,
            })
            .collect()
    };
    out.clear();
    dm.on_tick(1_000, &holds, &mut out);
    let first = probes(&out);
    assert_eq!(first.len(), MAX_CONCURRENT_CHUNK_READS, "{first:?}");
    out.clear();
    dm.on_tick(1_100, &holds, &mut out);
    assert!(
        probes(&out).is_empty(),
        "none more while those are under way"
    );
    // One answered (its span holds less than a chunk): another table probes.
    let (d, p) = first[0];
    out.clear();
    dm.on_chunk_bounds(1_200, d, p, Ok(vec![]), &mut out);
    dm.on_tick(1_300, &holds, &mut out);
    let next = probes(&out);
    assert_eq!(next.len(), 1, "{out:?}");
    assert!(
        !first.iter().any(|f| f.0 == next[0].0),
        "a table that had not probed yet"
    );
}

#[test]
fn a_snapshot_copy_held_by_a_lagging_stream_is_a_warning() {
    use sluice_control::config::COPY_STREAM_WAIT_MS;
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    let mut out = Vec::new();
    let msg = create_copying(d);
    dm.on_message(0, &m1(), msg, &holds, &mut out);
    dm.on_tick(1_000, &holds, &mut out);
    let read = first_read(&mut dm, d, 1_000, &mut out);
    let waiting = |dm: &DispatcherManager| {
        dm.warnings()
            .iter()
            .any(|w| w.contains("snapshot copy has waited"))
    };
    // The chunk was read at a position far ahead of the span's stream (at 100).
    dm.on_chunk_queued(
        1_000,
        d,
        queued(read, 500, Some(vec![1]), true, 10),
        &mut out,
    );
    dm.on_tick(1_000, &holds, &mut out);
    dm.on_tick(1_000 + COPY_STREAM_WAIT_MS / 2, &holds, &mut out);
    assert!(!waiting(&dm), "half the limit is not a stall");
    // The stream moves, but not up to the chunk: still waiting for the same chunk.
    dm.on_events(
        1_000 + COPY_STREAM_WAIT_MS / 2,
        d,
        vec![],
        300,
        &holds,
        &mut out,
    );
    dm.on_tick(1_000 + COPY_STREAM_WAIT_MS, &holds, &mut out);
    assert!(
        waiting(&dm),
        "the chunk waited the whole limit: {:?}",
        dm.warnings()
    );
    assert!(
        dm.warnings().iter().any(|w| w.contains("chunk at ts 500")),
        "it names the chunk: {:?}",
        dm.warnings()
    );
    // The stream reaches the chunk: no warning any more.
    dm.on_events(
        1_000 + COPY_STREAM_WAIT_MS,
        d,
        vec![],
        500,
        &holds,
        &mut out,
    );
    dm.on_tick(1_000 + COPY_STREAM_WAIT_MS + 200, &holds, &mut out);
    assert!(!waiting(&dm), "received: {:?}", dm.warnings());
}

/// A copy is pending (the server then has capture hand on every position at once) from its
/// start until its last chunk is durable, and only then.
#[test]
fn a_copy_is_pending_until_its_last_chunk_is_durable() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    let mut out = Vec::new();
    dm.on_tick(500, &holds, &mut out);
    assert!(!dm.copy_pending(), "no copy");
    let msg = create_copying(d);
    dm.on_message(600, &m1(), msg, &holds, &mut out);
    dm.on_tick(1_000, &holds, &mut out);
    assert!(dm.copy_pending(), "the copy finds its chunks' bounds");
    let read = first_read(&mut dm, d, 1_000, &mut out);
    // Its only chunk (nothing after it), read at 500.
    dm.on_chunk_queued(1_000, d, queued(read, 500, None, false, 1), &mut out);
    let chunk_row = insert_item(TableId(4), 500, 1);
    dm.on_events(1_100, d, vec![chunk_row], 500, &holds, &mut out);
    dm.on_tick(1_200, &holds, &mut out);
    assert!(dm.copy_pending(), "received, not durable yet");
    dm.on_sink_flushed(1_300, d, 500, &holds, &mut out);
    dm.on_tick(1_400, &holds, &mut out);
    assert!(!dm.copy_pending(), "durable: the copy is done");
}

/// Once a copy's last chunk is written, the manager asks the sink to flush it (once) instead of
/// waiting for the sink's own flush interval; no flush is asked while a chunk is still read.
#[test]
fn a_copy_whose_last_chunk_is_written_asks_the_sink_to_flush_once() {
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    let flushes = |out: &[Effect]| {
        out.iter()
            .filter(|e| matches!(e, Effect::Sink(SinkCommand::Flush { id, .. }) if *id == d))
            .count()
    };
    let mut out = Vec::new();
    dm.on_message(600, &m1(), create_copying(d), &holds, &mut out);
    dm.on_tick(1_000, &holds, &mut out);
    let read = first_read(&mut dm, d, 1_000, &mut out);
    dm.on_tick(1_050, &holds, &mut out);
    assert_eq!(flushes(&out), 0, "a chunk is still read: {out:?}");
    dm.on_chunk_queued(1_000, d, queued(read, 500, None, false, 1), &mut out);
    let chunk_row = insert_item(TableId(4), 500, 1);
    dm.on_events(1_100, d, vec![chunk_row], 500, &holds, &mut out);
    assert_eq!(flushes(&out), 1, "the last chunk is written: {out:?}");
    dm.on_tick(1_200, &holds, &mut out);
    dm.on_tick(1_300, &holds, &mut out);
    assert_eq!(
        flushes(&out),
        1,
        "asked once until the sink answers: {out:?}"
    );
    dm.on_sink_flushed(1_400, d, 500, &holds, &mut out);
    dm.on_tick(1_500, &holds, &mut out);
    assert!(!dm.copy_pending(), "durable: the copy is done");
    assert_eq!(flushes(&out), 1, "a finished copy asks for nothing");
}

/// One heartbeat of a manager: (complete, the ids it reports and whether each rests, its rest
/// ts). Exactly one is sent per heartbeat interval.
type Beat = (bool, Vec<(DispatcherId, bool)>, Option<u64>);

fn beat(dm: &mut DispatcherManager, now: u64, holds: &Holds) -> Beat {
    let out = tick(dm, now, holds);
    let beats: Vec<Beat> = out
        .iter()
        .filter_map(|e| match e {
            Effect::Send {
                msg:
                    Message::Heartbeat {
                        complete,
                        dispatchers,
                        rest,
                        ..
                    },
                ..
            } => Some((
                *complete,
                dispatchers.iter().map(|r| (r.id, r.rests)).collect(),
                *rest,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(beats.len(), 1, "one heartbeat per interval: {out:?}");
    beats[0].clone()
}

/// Between complete heartbeats a dispatcher is reported only when its report changed; a new
/// owner gets a complete one at once.
#[test]
fn heartbeats_between_complete_ones_carry_only_changed_reports() {
    use sluice_control::config::{HEARTBEAT_COMPLETE_MS, HEARTBEAT_MS};
    let (mut dm, holds, a, b) = dispatchers_of_tables_4_and_5();
    // Both busy: rows written and not acknowledged, so neither rests.
    let mut out = Vec::new();
    dm.on_events(
        9_000,
        a,
        vec![insert_item(TableId(4), 105, 1)],
        110,
        &holds,
        &mut out,
    );
    dm.on_events(
        9_000,
        b,
        vec![insert_item(TableId(5), 105, 1)],
        110,
        &holds,
        &mut out,
    );
    let t0 = 10_000;
    let ids = |v: &[DispatcherId]| v.iter().map(|d| (*d, false)).collect::<Vec<_>>();
    assert_eq!(
        beat(&mut dm, t0, &holds),
        (true, ids(&[a, b]), None),
        "the first is complete"
    );
    assert_eq!(
        beat(&mut dm, t0 + HEARTBEAT_MS, &holds),
        (false, vec![], None),
        "nothing changed"
    );
    // Table 4's write is acknowledged: only its dispatcher is reported.
    dm.on_sink_flushed(t0 + 2 * HEARTBEAT_MS, a, 105, &holds, &mut out);
    dm.on_events(
        t0 + 2 * HEARTBEAT_MS,
        a,
        vec![insert_item(TableId(4), 115, 2)],
        120,
        &holds,
        &mut out,
    );
    assert_eq!(
        beat(&mut dm, t0 + 3 * HEARTBEAT_MS, &holds),
        (false, ids(&[a]), None)
    );
    assert_eq!(
        beat(&mut dm, t0 + 4 * HEARTBEAT_MS, &holds),
        (false, ids(&[a]), None),
        "its write rate fell back to zero"
    );
    assert_eq!(
        beat(&mut dm, t0 + 5 * HEARTBEAT_MS, &holds),
        (false, vec![], None)
    );
    // Every dispatcher again once the complete interval passed.
    assert_eq!(
        beat(&mut dm, t0 + HEARTBEAT_COMPLETE_MS, &holds),
        (true, ids(&[a, b]), None)
    );
    // A new owner gets a complete heartbeat at once.
    bootstrap(&mut dm, &m2(), 2, &holds);
    assert_eq!(
        beat(&mut dm, t0 + HEARTBEAT_COMPLETE_MS + HEARTBEAT_MS, &holds),
        (true, ids(&[a, b]), None)
    );
}

/// Idle dispatchers rest: each is reported once with `rests`, then only the heartbeat's rest ts
/// (the lowest checkpoint of the resting ones) moves them, however far their resolved ts goes;
/// a row ends the rest and the dispatcher is reported again (without `rests`) in the next
/// heartbeat; complete heartbeats and a bootstrap list every resting dispatcher again.
#[test]
fn idle_dispatchers_rest_and_heartbeats_carry_one_rest_ts_for_them() {
    use sluice_control::config::{HEARTBEAT_COMPLETE_MS, HEARTBEAT_MS};
    let (mut dm, holds, a, b) = dispatchers_of_tables_4_and_5();
    let mut out = Vec::new();
    let t0 = 10_000;
    dm.on_resolved(t0, vec![a, b], 150, &holds, &mut out);
    let rests = |v: &[DispatcherId]| v.iter().map(|d| (*d, true)).collect::<Vec<_>>();
    assert_eq!(beat(&mut dm, t0, &holds), (true, rests(&[a, b]), Some(150)));
    dm.on_resolved(t0, vec![a, b], 180, &holds, &mut out);
    assert_eq!(
        beat(&mut dm, t0 + HEARTBEAT_MS, &holds),
        (false, vec![], Some(180)),
        "resting: no report, the rest ts moves"
    );
    // One lags behind the other: the rest ts is the lower one.
    dm.on_resolved(t0, vec![b], 200, &holds, &mut out);
    assert_eq!(
        beat(&mut dm, t0 + 2 * HEARTBEAT_MS, &holds),
        (false, vec![], Some(180))
    );
    // A row for table 4 (not yet acknowledged) ends its rest.
    dm.on_events(
        t0,
        a,
        vec![insert_item(TableId(4), 210, 1)],
        220,
        &holds,
        &mut out,
    );
    dm.on_resolved(t0, vec![b], 230, &holds, &mut out);
    let (complete, reports, rest) = beat(&mut dm, t0 + 3 * HEARTBEAT_MS, &holds);
    assert_eq!(
        (complete, reports, rest),
        (false, vec![(a, false)], Some(230))
    );
    // Acknowledged, and a heartbeat interval without writes: it rests again.
    dm.on_sink_flushed(t0 + 3 * HEARTBEAT_MS, a, 210, &holds, &mut out);
    assert_eq!(
        beat(&mut dm, t0 + 4 * HEARTBEAT_MS, &holds),
        (false, rests(&[a]), Some(220))
    );
    assert_eq!(
        beat(&mut dm, t0 + HEARTBEAT_COMPLETE_MS, &holds),
        (true, rests(&[a, b]), Some(220))
    );
    // A bootstrap (even a repeated one of the same owner) is followed by a complete heartbeat.
    bootstrap(&mut dm, &m1(), 1, &holds);
    assert_eq!(
        beat(&mut dm, t0 + HEARTBEAT_COMPLETE_MS + HEARTBEAT_MS, &holds),
        (true, rests(&[a, b]), Some(220))
    );
}

/// A node of many dispatchers lists them all less often than every
/// [`HEARTBEAT_COMPLETE_MS`](sluice_control::config::HEARTBEAT_COMPLETE_MS): at most
/// `COMPLETE_REPORTS_PER_SEC` a second on average (12,000 resting dispatchers: every 2.4 s), so
/// unchanged dispatchers cost the maintainer a bounded rate however many a node has; a
/// dispatcher whose report changed is still reported in the next heartbeat.
#[test]
fn complete_heartbeats_of_a_large_node_are_spread_out() {
    use sluice_control::config::{
        complete_heartbeat_ms, COMPLETE_REPORTS_PER_SEC, HEARTBEAT_COMPLETE_MS, HEARTBEAT_MS,
    };
    assert_eq!(complete_heartbeat_ms(0), HEARTBEAT_COMPLETE_MS);
    assert_eq!(complete_heartbeat_ms(2), HEARTBEAT_COMPLETE_MS);
    let n: u64 = 12_000;
    assert_eq!(
        complete_heartbeat_ms(n as usize),
        n * 1000 / COMPLETE_REPORTS_PER_SEC
    );
    assert!(complete_heartbeat_ms(n as usize) > HEARTBEAT_COMPLETE_MS);
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let ids: Vec<DispatcherId> = (1..=n).map(|i| id(1, i)).collect();
    for (i, d) in ids.iter().enumerate() {
        create(
            &mut dm,
            &m1(),
            1,
            *d,
            Span::whole_table(TableId(i as u64 + 10)),
            &holds,
        );
    }
    let mut out = Vec::new();
    let t0 = 10_000;
    dm.on_resolved(t0, ids.clone(), 150, &holds, &mut out);
    let (complete, reports, _) = beat(&mut dm, t0, &holds);
    assert!(complete);
    assert_eq!(reports.len(), n as usize, "the first lists every one");
    // At a small node's interval: only what changed (one dispatcher's row).
    dm.on_events(
        t0,
        ids[7],
        vec![insert_item(TableId(17), 160, 1)],
        170,
        &holds,
        &mut out,
    );
    assert_eq!(
        beat(&mut dm, t0 + HEARTBEAT_COMPLETE_MS, &holds),
        (false, vec![(ids[7], false)], Some(150)),
        "not complete yet, the changed one is not delayed"
    );
    let (complete, reports, _) = beat(
        &mut dm,
        t0 + complete_heartbeat_ms(n as usize) - HEARTBEAT_MS,
        &holds,
    );
    assert!(!complete && reports.is_empty(), "{} reports", reports.len());
    let (complete, reports, _) = beat(&mut dm, t0 + complete_heartbeat_ms(n as usize), &holds);
    assert!(complete);
    assert_eq!(reports.len(), n as usize, "then every one again");
}

/// The tick after a copy's last chunk became durable sends a heartbeat at once (its owner, and
/// the user watching the snapshot, learn of the end a heartbeat period sooner); the heartbeats
/// after it keep their period.
#[test]
fn a_finished_copy_is_reported_at_the_next_tick() {
    use sluice_control::config::HEARTBEAT_MS;
    let holds = Holds::default();
    let mut dm = DispatcherManager::new(cf(), NodeId::new("n1"), 1);
    bootstrap(&mut dm, &m1(), 1, &holds);
    let d = id(1, 1);
    let mut out = Vec::new();
    dm.on_message(600, &m1(), create_copying(d), &holds, &mut out);
    dm.on_tick(1_000, &holds, &mut out);
    let read = first_read(&mut dm, d, 1_000, &mut out);
    dm.on_chunk_queued(1_000, d, queued(read, 500, None, false, 1), &mut out);
    dm.on_events(
        1_100,
        d,
        vec![insert_item(TableId(4), 500, 1)],
        500,
        &holds,
        &mut out,
    );
    let t = 1_200;
    tick(&mut dm, t, &holds); // a heartbeat is due here: the period starts again
    dm.on_sink_flushed(t + 10, d, 500, &holds, &mut out);
    let heartbeats = |out: &[Effect]| -> Vec<bool> {
        out.iter()
            .filter_map(|e| match e {
                Effect::Send {
                    msg: Message::Heartbeat { dispatchers, .. },
                    ..
                } => Some(
                    dispatchers
                        .iter()
                        .filter(|r| r.id == d)
                        .any(|r| r.copy.as_ref().is_some_and(|c| c.durable.done)),
                ),
                _ => None,
            })
            .collect()
    };
    let now = t + HEARTBEAT_MS / 2;
    assert_eq!(
        heartbeats(&tick(&mut dm, now, &holds)),
        [true],
        "within the period, at once, saying the copy is done"
    );
    assert!(
        heartbeats(&tick(&mut dm, now + 1, &holds)).is_empty(),
        "then the period again"
    );
}
