//! The maintainer's side of resting dispatchers (`DispatcherReport::rests`): a heartbeat's rest
//! ts raises the spans whose dispatchers said they rest, only while no heartbeat of their node
//! was missed since the last complete one, and never those that stopped resting.

mod common;
use common::two_tables::{cf, id, maintainer, n, report, EPOCH};
use common::World;

use sluice_control::maintainer::Maintainer;
use sluice_control::msg::{DispatcherReport, Message};
use sluice_types::{DispatcherId, TableId, Ts};

fn heartbeat(
    seq: u64,
    complete: bool,
    reports: Vec<DispatcherReport>,
    rest: Option<Ts>,
) -> Message {
    Message::Heartbeat {
        cf: cf(),
        epoch: EPOCH,
        incarnation: 1,
        seq,
        complete,
        dispatchers: reports,
        errors: Vec::new(),
        warnings: Vec::new(),
        rest,
    }
}

/// A report of `d` (table `t`) at checkpoint and resolved ts `cp`, resting or not.
fn at(d: DispatcherId, t: u64, cp: Ts, rests: bool) -> DispatcherReport {
    DispatcherReport {
        checkpoint: cp,
        resolved: cp,
        rests,
        ..report(d, t)
    }
}

/// `hb` from n2, at a time that grows with its sequence number.
fn beat(m: &mut Maintainer, w: &World, hb: Message) {
    let Message::Heartbeat { seq, .. } = hb else {
        unreachable!("a heartbeat")
    };
    m.on_message(&w.ctx(10 * seq), &n("n2"), hb, &mut Vec::new());
}

/// The checkpoints the maintainer holds for tables 3 and 4.
fn checkpoints(m: &Maintainer) -> (Ts, Ts) {
    let of = |t: u64| {
        m.spans()
            .iter()
            .find(|s| s.span.table == TableId(t))
            .map(|s| s.checkpoint)
            .expect("the table has a span")
    };
    (of(3), of(4))
}

#[test]
fn a_rest_ts_raises_resting_spans_only_while_no_heartbeat_was_missed() {
    let w = World::of(&["n1", "n2"]);
    let mut m = maintainer(&w);
    let hb = |m: &mut Maintainer, seq, complete, reports, rest| {
        beat(m, &w, heartbeat(seq, complete, reports, rest))
    };
    // Complete: table 3's dispatcher rests, table 4's works.
    hb(
        &mut m,
        1,
        true,
        vec![at(id(5), 3, 110, true), at(id(6), 4, 110, false)],
        Some(110),
    );
    assert_eq!(checkpoints(&m), (110, 110));
    hb(&mut m, 2, false, vec![], Some(150));
    assert_eq!(
        checkpoints(&m),
        (150, 110),
        "only the resting span follows the rest ts"
    );
    // Table 4's starts to rest, table 3's stops (reported below the rest ts: kept at 150).
    hb(
        &mut m,
        3,
        false,
        vec![at(id(5), 3, 140, false), at(id(6), 4, 160, true)],
        Some(160),
    );
    assert_eq!(checkpoints(&m), (150, 160));
    hb(&mut m, 4, false, vec![], Some(170));
    assert_eq!(
        checkpoints(&m),
        (150, 170),
        "a span that stopped resting is not raised"
    );
    // Heartbeat 5 is lost (it may have ended a rest): no rest ts counts until a complete one.
    hb(&mut m, 6, false, vec![], Some(190));
    hb(&mut m, 7, false, vec![], Some(200));
    assert_eq!(
        checkpoints(&m),
        (150, 170),
        "rest ts after a gap are not trusted"
    );
    hb(
        &mut m,
        8,
        true,
        vec![at(id(5), 3, 180, true), at(id(6), 4, 180, true)],
        Some(180),
    );
    hb(&mut m, 9, false, vec![], Some(210));
    assert_eq!(
        checkpoints(&m),
        (210, 210),
        "trusted again after a complete heartbeat"
    );
}

/// A rest ts never lowers a span: a resting dispatcher that joins below the others pulls the
/// node's rest ts down, and spans already past it stay where they are.
#[test]
fn a_lower_rest_ts_lowers_no_span() {
    let w = World::of(&["n1", "n2"]);
    let mut m = maintainer(&w);
    let hb = |m: &mut Maintainer, seq, complete, reports, rest| {
        beat(m, &w, heartbeat(seq, complete, reports, rest))
    };
    hb(
        &mut m,
        1,
        true,
        vec![at(id(5), 3, 150, true), at(id(6), 4, 120, false)],
        Some(150),
    );
    hb(&mut m, 2, false, vec![at(id(6), 4, 130, true)], Some(130));
    assert_eq!(checkpoints(&m), (150, 130));
    hb(&mut m, 3, false, vec![], Some(160));
    assert_eq!(checkpoints(&m), (160, 160));
}
