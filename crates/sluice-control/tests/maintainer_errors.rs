//! The maintainer's side of dispatcher errors: an error counts when it comes from a dispatcher the
//! maintainer runs on that node, whether in the one-shot message or a heartbeat's copy; seen
//! again it changes nothing; an error of another epoch, another node, an unknown dispatcher or one
//! being removed is ignored.

mod common;
use common::two_tables::{cf, id, maintainer, n, report, EPOCH};
use common::World;

use sluice_control::io::Effect;
use sluice_control::msg::{ClosePurpose, DispatcherErrorReport, DispatcherPhase, Message};
use sluice_types::{DispatcherId, Epoch};

fn heartbeat(seq: u64, epoch: Epoch, errors: &[(DispatcherId, &str)]) -> Message {
    Message::Heartbeat {
        cf: cf(),
        epoch,
        incarnation: 1,
        seq,
        complete: true,
        dispatchers: vec![report(id(5), 3), report(id(6), 4)],
        errors: errors
            .iter()
            .map(|(d, m)| DispatcherErrorReport {
                id: *d,
                message: m.to_string(),
            })
            .collect(),
        warnings: Vec::new(),
        rest: None,
    }
}

fn dispatcher_error(epoch: Epoch, d: DispatcherId, message: &str) -> Message {
    Message::DispatcherError {
        cf: cf(),
        epoch,
        id: d,
        message: message.into(),
    }
}

#[test]
fn an_error_in_a_heartbeat_counts_when_the_one_shot_message_was_lost() {
    let w = World::of(&["n1", "n2"]);
    let mut m = maintainer(&w);
    let mut out = Vec::new();
    m.on_message(&w.ctx(10), &n("n2"), heartbeat(1, EPOCH, &[]), &mut out);
    assert_eq!(m.status().error, None);
    m.on_message(
        &w.ctx(20),
        &n("n2"),
        heartbeat(2, EPOCH, &[(id(5), "disk full")]),
        &mut out,
    );
    let err = m.status().error.expect("the heartbeat's error is taken");
    assert!(err.contains("disk full") && err.contains("n2"), "{err}");

    // Seen again (later heartbeats, the one-shot message arriving late, another dispatcher's
    // error): the first error stays, nothing else happens.
    for seq in 3..6 {
        m.on_message(
            &w.ctx(20 + seq),
            &n("n2"),
            heartbeat(seq, EPOCH, &[(id(5), "disk full"), (id(6), "other")]),
            &mut out,
        );
    }
    m.on_message(
        &w.ctx(30),
        &n("n2"),
        dispatcher_error(EPOCH, id(6), "other"),
        &mut out,
    );
    assert_eq!(m.status().error.as_deref(), Some(err.as_str()));
}

#[test]
fn errors_of_other_epochs_nodes_or_dispatchers_are_ignored() {
    let w = World::of(&["n1", "n2"]);
    let mut m = maintainer(&w);
    let mut out = Vec::new();
    let ctx = w.ctx(10);
    // An older epoch's copy (in a message or a heartbeat).
    m.on_message(
        &ctx,
        &n("n2"),
        dispatcher_error(Epoch(1), id(5), "old"),
        &mut out,
    );
    m.on_message(
        &ctx,
        &n("n2"),
        heartbeat(1, Epoch(1), &[(id(5), "old")]),
        &mut out,
    );
    // A dispatcher this maintainer does not know (already replaced and forgotten).
    m.on_message(
        &ctx,
        &n("n2"),
        dispatcher_error(EPOCH, id(9), "gone"),
        &mut out,
    );
    m.on_message(
        &ctx,
        &n("n2"),
        heartbeat(2, EPOCH, &[(id(9), "gone")]),
        &mut out,
    );
    // A known dispatcher reported by a node it does not run on.
    m.on_message(
        &ctx,
        &n("n1"),
        dispatcher_error(EPOCH, id(5), "elsewhere"),
        &mut out,
    );
    assert_eq!(
        m.status().error,
        None,
        "no stale error may fail the changefeed"
    );
    assert!(out.iter().any(|e| matches!(
        e,
        Effect::Trace(sluice_control::io::TraceEvent::Stale {
            kind: "dispatcher_error",
            ..
        })
    )));
}

#[test]
fn an_error_of_a_dispatcher_being_removed_is_ignored() {
    let w = World::of(&["n1", "n2"]);
    let mut m = maintainer(&w);
    let mut out = Vec::new();
    // The node reports id(5) closing (a remove is under way): it is being replaced.
    let mut closing = report(id(5), 3);
    closing.phase = DispatcherPhase::Closing(ClosePurpose::Remove);
    m.on_message(
        &w.ctx(10),
        &n("n2"),
        Message::Heartbeat {
            cf: cf(),
            epoch: EPOCH,
            incarnation: 1,
            seq: 1,
            complete: true,
            dispatchers: vec![closing, report(id(6), 4)],
            errors: Vec::new(),
            warnings: Vec::new(),
            rest: None,
        },
        &mut out,
    );
    m.on_message(
        &w.ctx(20),
        &n("n2"),
        dispatcher_error(EPOCH, id(5), "late"),
        &mut out,
    );
    assert_eq!(m.status().error, None);
    // Its neighbour's error still counts.
    m.on_message(
        &w.ctx(30),
        &n("n2"),
        dispatcher_error(EPOCH, id(6), "real"),
        &mut out,
    );
    assert!(m.status().error.unwrap_or_default().contains("real"));
}

/// A node's warnings (capture stopped, a sink retrying) show in the maintainer's status while
/// that node reports them, and are gone with the first heartbeat without them.
#[test]
fn warnings_follow_the_nodes_heartbeats() {
    let w = World::of(&["n1", "n2"]);
    let mut m = maintainer(&w);
    let mut out = Vec::new();
    let mut hb = heartbeat(1, EPOCH, &[]);
    if let Message::Heartbeat { warnings, .. } = &mut hb {
        warnings.push("capture stopped on node n2: bad DDL".into());
    }
    m.on_message(&w.ctx(10), &n("n2"), hb, &mut out);
    assert_eq!(
        m.status().warning.as_deref(),
        Some("capture stopped on node n2: bad DDL")
    );
    assert_eq!(m.status().error, None, "a warning is not an error");
    m.on_message(&w.ctx(20), &n("n2"), heartbeat(2, EPOCH, &[]), &mut out);
    assert_eq!(m.status().warning, None);
}
