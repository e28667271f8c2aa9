//! Helpers shared by the tests that drive a maintainer by hand.
#![allow(dead_code)]

pub mod two_tables;

use sluice_control::config::ChangefeedConfig;
use sluice_control::coordinator::{ChangefeedInfo, FeedState};
use sluice_control::io::Effect;
use sluice_control::maintainer::{Ctx, Maintainer};
use sluice_control::meta::{keys, Kv, MetaOp, MetaResult};
use sluice_types::{Epoch, Key, NodeId, TableId};
use std::collections::{BTreeMap, BTreeSet};

/// The node world a maintainer reads on every call: alive nodes (incarnation 1 each, the first
/// one coordinating), nothing cordoned or draining, no regions.
pub struct World {
    pub alive: BTreeMap<NodeId, u64>,
    pub none: BTreeSet<NodeId>,
    pub regions: BTreeMap<TableId, Vec<Key>>,
    pub coordinator: NodeId,
}

impl World {
    pub fn of(nodes: &[&str]) -> Self {
        World {
            alive: nodes.iter().map(|n| (NodeId::new(*n), 1)).collect(),
            none: BTreeSet::new(),
            regions: BTreeMap::new(),
            coordinator: NodeId::new(nodes[0]),
        }
    }
    pub fn ctx(&self, now: u64) -> Ctx<'_> {
        Ctx {
            now,
            alive: &self.alive,
            cordoned: &self.none,
            draining: &self.none,
            regions: &self.regions,
            coordinator: Some(&self.coordinator),
        }
    }
}

/// Answers a new maintainer's meta-store reads as a store that holds its changefeed at `epoch`
/// (with `config`) and no table requests.
pub fn answer_meta(
    m: &mut Maintainer,
    ctx: &Ctx,
    epoch: Epoch,
    config: &ChangefeedConfig,
    out: &mut Vec<Effect>,
) {
    let info = ChangefeedInfo {
        id: m.cf().clone(),
        config: config.clone(),
        state: FeedState::Normal,
        epoch: epoch.0,
        error: None,
        restarts: 0,
    };
    for (tag, op) in m.take_meta_ops() {
        let MetaOp::Get { prefix } = op else {
            continue;
        };
        let kvs = if prefix == keys::info(m.cf().as_str()) {
            vec![Kv {
                key: prefix,
                value: serde_json::to_vec(&info).expect("info"),
                mod_revision: 7,
            }]
        } else {
            Vec::new()
        };
        m.on_meta_result(ctx, tag, MetaResult::Got { kvs, revision: 7 }, out);
    }
}
