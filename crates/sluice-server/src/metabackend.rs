//! Where the meta store lives and how membership and leadership reach the node: the embedded
//! store of a single node (this node is the only member and always the leader, with a fixed
//! lease), or etcd in a cluster (see [`crate::etcdmeta`] when built in).
//!
//! Invariants:
//! - `Input::NodesChanged` is delivered before the first `Input::Leader`, and each only when
//!   it changed;
//! - the leader revision handed to the control plane is the mod revision of the election key
//!   (`/sluice/coordinator`) in the store the coordinator writes to, so its leadership-fenced
//!   transactions compare against the very key that elected it. On the embedded store the key is
//!   rewritten at every start, so a restarted node is a new coordinator with a newer revision.

use crate::error::ServerError;
use crate::meta::EmbeddedMeta;
use sluice_control::coordinator::ChangefeedInfo;
use sluice_control::meta::{keys, MetaOp, MetaResult};
use sluice_control::Input;
use sluice_types::{ChangefeedId, Epoch, NodeId};
use std::collections::BTreeMap;

pub enum MetaBackend {
    Embedded {
        store: EmbeddedMeta,
        announced: bool,
        leader_rev: u64,
    },
    Etcd {
        meta: Box<crate::etcdmeta::EtcdMeta>,
        known_alive: Option<BTreeMap<NodeId, u64>>,
        known_leader: Option<(Option<NodeId>, u64)>,
        /// Times this process fenced itself.
        fences: u64,
    },
}

impl MetaBackend {
    /// Opens the embedded store and takes the election key.
    pub fn embedded(
        dir: &std::path::Path,
        node: &NodeId,
        addr: &str,
    ) -> Result<MetaBackend, ServerError> {
        let mut store = EmbeddedMeta::open(dir)?;
        let leader_rev = store.put(keys::COORDINATOR, node.as_str().as_bytes().to_vec())?;
        store.put(
            &format!("{}{}", keys::NODE, node.as_str()),
            addr.as_bytes().to_vec(),
        )?;
        Ok(MetaBackend::Embedded {
            store,
            announced: false,
            leader_rev,
        })
    }

    /// Applies an operation now when the backend is synchronous.
    pub fn apply_now(&mut self, op: &MetaOp) -> Option<MetaResult> {
        match self {
            MetaBackend::Embedded { store, .. } => Some(match store.apply(op) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("meta store: {e}");
                    MetaResult::Unavailable
                }
            }),
            MetaBackend::Etcd { .. } => None,
        }
    }

    /// Starts an operation whose result arrives later as `Input::MetaResult`; returns a result
    /// now only when it cannot be started (queue full: `Unavailable`).
    pub fn apply_async(&mut self, req: u64, op: MetaOp) -> Option<MetaResult> {
        match self {
            MetaBackend::Embedded { .. } => Some(MetaResult::Unavailable),
            MetaBackend::Etcd { meta, .. } => {
                (!meta.submit(req, op)).then_some(MetaResult::Unavailable)
            }
        }
    }

    /// The changefeed's epoch as the store has it now, read after `since` (`None`: cannot tell
    /// yet).
    pub fn persisted_epoch(&self, cf: &ChangefeedId, since: std::time::Instant) -> Option<Epoch> {
        match self {
            MetaBackend::Etcd { meta, .. } => meta.epoch_if_fresh(cf, since),
            MetaBackend::Embedded { store, .. } => Some(
                store
                    .get(&keys::info(cf.as_str()))
                    .and_then(|(v, _)| serde_json::from_slice::<ChangefeedInfo>(&v).ok())
                    .map(|i| Epoch(i.epoch))
                    .unwrap_or_default(),
            ),
        }
    }

    /// Reads keys under a prefix (for views), when the backend can answer synchronously.
    pub fn read_prefix(&mut self, prefix: &str) -> Option<Vec<(String, Vec<u8>)>> {
        if self.is_cluster() {
            return None;
        }
        match self.apply_now(&MetaOp::Get {
            prefix: prefix.to_string(),
        })? {
            MetaResult::Got { kvs, .. } => {
                Some(kvs.into_iter().map(|kv| (kv.key, kv.value)).collect())
            }
            _ => None,
        }
    }

    /// The smallest persisted checkpoint of all changefeeds, when this backend reads it (etcd:
    /// every poll); `Some(None)`: there is no changefeed.
    pub fn min_checkpoint(&self) -> Option<Option<u64>> {
        match self {
            MetaBackend::Etcd { meta, .. } => {
                let v = meta.view.lock().unwrap_or_else(|p| p.into_inner());
                v.refreshed.map(|_| v.min_checkpoint)
            }
            MetaBackend::Embedded { .. } => None,
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, MetaBackend::Etcd { .. })
    }
}

/// What membership and leadership changed since the last tick ([`MetaBackend::on_tick`]).
#[derive(Default)]
pub struct Membership {
    /// For the control plane, in order.
    pub inputs: Vec<Input>,
    /// The members and their addresses, when known anew (replacing the previous list).
    pub members: Option<BTreeMap<NodeId, String>>,
    /// Peer addresses to learn (for sending to them).
    pub addrs: Vec<(NodeId, String)>,
}

/// This node as membership sees it.
pub struct Me<'a> {
    pub id: &'a NodeId,
    pub addr: &'a str,
    pub incarnation: u64,
}

impl MetaBackend {
    /// Membership and leadership, given on every tick when they changed.
    pub fn on_tick(&mut self, me: &Me<'_>) -> Membership {
        let mut m = Membership::default();
        match self {
            MetaBackend::Embedded {
                announced,
                leader_rev,
                ..
            } => {
                if !*announced {
                    *announced = true;
                    m.members = Some([(me.id.clone(), me.addr.to_string())].into());
                    let alive: BTreeMap<NodeId, u64> = [(me.id.clone(), me.incarnation)].into();
                    m.inputs.push(Input::NodesChanged { alive });
                    m.inputs.push(Input::Leader {
                        node: Some(me.id.clone()),
                        rev: *leader_rev,
                    });
                }
            }
            MetaBackend::Etcd {
                meta,
                known_alive,
                known_leader,
                ..
            } => {
                let v = meta.view.lock().unwrap_or_else(|p| p.into_inner());
                if v.incarnation != me.incarnation {
                    return m; // fenced, not rejoined yet
                }
                let alive: BTreeMap<NodeId, u64> = v
                    .alive
                    .iter()
                    .map(|(n, r)| (n.clone(), r.incarnation))
                    .collect();
                let members: BTreeMap<NodeId, String> = v
                    .alive
                    .iter()
                    .map(|(n, r)| (n.clone(), r.addr.clone()))
                    .collect();
                m.addrs = members
                    .iter()
                    .map(|(n, a)| (n.clone(), a.clone()))
                    .collect();
                m.members = Some(members);
                if known_alive.as_ref() != Some(&alive) && v.refreshed.is_some() {
                    *known_alive = Some(alive.clone());
                    m.inputs.push(Input::NodesChanged { alive });
                }
                let leader = v
                    .leader
                    .clone()
                    .map(|(n, r)| (Some(n), r))
                    .unwrap_or((None, 0));
                if known_leader.as_ref() != Some(&leader) && v.refreshed.is_some() {
                    *known_leader = Some(leader.clone());
                    m.inputs.push(Input::Leader {
                        node: leader.0,
                        rev: leader.1,
                    });
                }
            }
        }
        m
    }

    /// Fencing: a node that could not renew its lease for nearly a TTL must drop everything
    /// before etcd lets the lease expire, and ask for a new lease as a new incarnation. Returns
    /// that incarnation when it is due now (the caller resets to it).
    pub fn fence_due(&mut self, incarnation: u64) -> Option<u64> {
        let MetaBackend::Etcd {
            meta,
            known_alive,
            known_leader,
            fences,
        } = self
        else {
            return None;
        };
        let (stale, want) = {
            let v = meta.view.lock().unwrap_or_else(|p| p.into_inner());
            let limit = meta
                .ttl
                .saturating_sub(std::time::Duration::from_millis(2 * crate::shell::TICK_MS));
            let stale = v.incarnation == incarnation
                && v.renewed.map(|r| r.elapsed() >= limit).unwrap_or(true);
            (stale, v.want_incarnation)
        };
        if !stale || want != incarnation {
            return None;
        }
        *fences += 1;
        let next = incarnation + 1;
        *known_alive = None;
        *known_leader = None;
        meta.view
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .want_incarnation = next;
        tracing::error!(
            incarnation = next,
            "lease not renewed for nearly its TTL: fencing (dropping all work) and rejoining"
        );
        Some(next)
    }
}
