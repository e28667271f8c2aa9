//! A bootstrapped maintainer of two tables whose dispatchers run on another node: the start
//! of the tests of what a maintainer makes of dispatchers' messages.

use super::World;
use sluice_control::config::ChangefeedConfig;
use sluice_control::io::{Effect, SchemaSnapshot, TableInfo};
use sluice_control::maintainer::Maintainer;
use sluice_control::msg::{DispatcherPhase, DispatcherReport, Message};
use sluice_types::{ChangefeedId, DispatcherId, Epoch, NodeId, Span, TableId};

pub const EPOCH: Epoch = Epoch(2);

pub fn cf() -> ChangefeedId {
    ChangefeedId::new("cf")
}
pub fn n(s: &str) -> NodeId {
    NodeId::new(s)
}
pub fn id(seq: u64) -> DispatcherId {
    DispatcherId { epoch: 1, seq }
}

pub fn report(d: DispatcherId, table: u64) -> DispatcherReport {
    DispatcherReport {
        id: d,
        span: Span::whole_table(TableId(table)),
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

/// A bootstrapped maintainer of `EPOCH` on n1 that adopted `id(5)` (table 3) and `id(6)`
/// (table 4) on n2.
pub fn maintainer(w: &World) -> Maintainer {
    let ctx = w.ctx(0);
    let config = ChangefeedConfig {
        sink_dispatchers: Vec::new(),
        snapshot: Default::default(),
        sink_uri: "blackhole://".into(),
        start_ts: 100,
        scheduler: Default::default(),
        preferred_node: None,
        filter: Default::default(),
    };
    let mut out = Vec::new();
    let mut m = Maintainer::new(&ctx, cf(), EPOCH, n("n1"), 100, config.clone(), &mut out);
    super::answer_meta(&mut m, &ctx, EPOCH, &config, &mut out);
    let table = |t: u64| TableInfo {
        id: TableId(t),
        name: format!("db.t{t}"),
        regions: Vec::new(),
        splittable: true,
    };
    m.on_schema(
        &ctx,
        SchemaSnapshot {
            at_ts: 100,
            tables: vec![table(3), table(4)],
            ddls_after: Vec::new(),
        },
        EPOCH,
        &mut out,
    );
    for (node, reports) in [
        ("n1", vec![]),
        ("n2", vec![report(id(5), 3), report(id(6), 4)]),
    ] {
        m.on_message(
            &ctx,
            &n(node),
            Message::BootstrapResponse {
                cf: cf(),
                epoch: EPOCH,
                incarnation: 1,
                dispatchers: reports,
            },
            &mut out,
        );
    }
    // Every node answered: the maintainer asks what the sink applied before it finishes.
    assert!(!m.is_bootstrapped());
    assert!(out.iter().any(|e| matches!(e, Effect::LoadApplied { .. })));
    m.on_applied(&ctx, Ok(Vec::new()), &mut out);
    assert!(m.is_bootstrapped());
    assert_eq!(m.status().error, None);
    m
}
