//! The model meta store: keys with revisions, compare-and-swap transactions, node leases and the
//! coordinator election key (what etcd or the embedded store give the server).

use sluice_control::meta::{keys, Compare, Kv, MetaOp, MetaResult};
use sluice_types::Millis;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct Lease {
    pub incarnation: u64,
    pub expiry: Millis,
}

#[derive(Clone, Debug, Default)]
pub struct MetaModel {
    pub revision: u64,
    pub kv: BTreeMap<String, (Vec<u8>, u64)>,
    pub leases: BTreeMap<String, Lease>,
    /// (node, revision of the election key)
    pub leader: Option<(String, u64)>,
    /// The incarnation whose lease holds the election key.
    pub leader_incarnation: u64,
}

impl MetaModel {
    pub fn apply(&mut self, op: &MetaOp) -> (MetaResult, Vec<(String, Vec<u8>)>) {
        match op {
            MetaOp::Get { prefix } => {
                let kvs = self
                    .kv
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(prefix.as_str()))
                    .map(|(k, (v, r))| Kv {
                        key: k.clone(),
                        value: v.clone(),
                        mod_revision: *r,
                    })
                    .collect();
                (
                    MetaResult::Got {
                        kvs,
                        revision: self.revision,
                    },
                    Vec::new(),
                )
            }
            MetaOp::Txn {
                compares,
                puts,
                deletes,
            } => {
                let ok = compares.iter().all(|c| match c {
                    Compare::ModRevision { key, rev } => {
                        self.kv.get(key).map(|(_, r)| *r).unwrap_or(0) == *rev
                    }
                });
                if !ok {
                    return (
                        MetaResult::Txn {
                            succeeded: false,
                            revision: self.revision,
                        },
                        Vec::new(),
                    );
                }
                self.revision += 1;
                for (k, v) in puts {
                    self.kv.insert(k.clone(), (v.clone(), self.revision));
                }
                for k in deletes {
                    self.kv.remove(k);
                }
                (
                    MetaResult::Txn {
                        succeeded: true,
                        revision: self.revision,
                    },
                    puts.clone(),
                )
            }
        }
    }

    /// Expire leases; returns true when membership changed.
    pub fn expire(&mut self, now: Millis) -> bool {
        let before = self.leases.len();
        self.leases.retain(|_, l| l.expiry > now);
        let mut changed = before != self.leases.len();
        if let Some((n, _)) = &self.leader {
            // The election key lives with the lease of the incarnation that won it.
            if self.leases.get(n).map(|l| l.incarnation) != Some(self.leader_incarnation) {
                self.leader = None;
                self.kv.remove(keys::COORDINATOR);
                changed = true;
            }
        }
        changed
    }

    /// The lowest-named node with a lease becomes leader if there is none.
    pub fn elect(&mut self, can_reach: impl Fn(&str) -> bool) -> bool {
        if self.leader.is_some() {
            return false;
        }
        let Some(n) = self.leases.keys().find(|n| can_reach(n)).cloned() else {
            return false;
        };
        self.revision += 1;
        self.kv.insert(
            keys::COORDINATOR.to_string(),
            (n.clone().into_bytes(), self.revision),
        );
        self.leader_incarnation = self.leases.get(&n).map(|l| l.incarnation).unwrap_or(0);
        self.leader = Some((n, self.revision));
        true
    }

    pub fn alive(&self) -> BTreeMap<sluice_types::NodeId, u64> {
        self.leases
            .iter()
            .map(|(n, l)| (sluice_types::NodeId::new(n.as_str()), l.incarnation))
            .collect()
    }
}
