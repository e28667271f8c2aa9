//! Nodes and membership: starting a node (a new incarnation with its own feed, the regions of
//! every table and the holds switched on for its name), killing one, and the meta store's tick
//! (keepalives, lease expiry, election, fenced nodes coming back) that tells every node who is
//! alive and who leads.
//!
//! Invariants: a node that could not renew its lease for nearly a TTL fences itself
//! ([`Sim::check_fence`]) before the store lets the lease expire, so two incarnations of a node
//! never run at once; an incarnation whose lease expired is gone for the checker (a write of it
//! after that is a violation); a fenced node comes back only once it reaches the store and its
//! old lease is gone; a node hears membership and leadership only while it reaches the store, and
//! only when they changed since it last heard them.

use super::*;

impl Sim {
    pub(super) fn start_node(&mut self, name: &str, offset: Millis) {
        let now = self.now;
        let Some(n) = self.nodes.get_mut(name) else {
            return;
        };
        n.incarnation += 1;
        let inc = n.incarnation;
        n.state = Some(NodeState::new(NodeId::new(name), inc));
        n.feed = Some(Feed::new(NodeId::new(name), self.quota_bytes));
        n.last_keepalive = now;
        n.paused_until = 0;
        n.fenced = false;
        n.known_alive = None;
        n.known_leader = None;
        let reach = self.reaches_meta(name);
        if reach {
            self.meta.leases.insert(
                name.to_string(),
                Lease {
                    incarnation: inc,
                    expiry: now + self.lease_ms,
                },
            );
        }
        // Regions of every table, and the holds switched on for this node name.
        let regions: Vec<(TableId, Vec<sluice_types::Key>, u64)> = self
            .upstream
            .tables
            .values()
            .map(|t| {
                (
                    t.id,
                    region_boundaries(t.id, t.regions),
                    t.rows.len() as u64,
                )
            })
            .collect();
        for (table, r, rows) in regions {
            self.deliver_now(
                name,
                Input::Regions {
                    table,
                    regions: r,
                    rows,
                },
            );
        }
        let holds: Vec<HoldPoint> = self
            .holds
            .get(name)
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default();
        for p in holds {
            self.deliver_now(name, Input::Hold { point: p, on: true });
        }
        self.push(now + 1 + offset % TICK_MS, Ev::Tick(name.to_string()));
        self.note(format!("{now} {name}: started incarnation {inc}"));
    }

    pub(super) fn kill_node(&mut self, name: &str, why: &str) {
        let now = self.now;
        let Some(n) = self.nodes.get_mut(name) else {
            return;
        };
        n.feed = None;
        if n.state.take().is_none() {
            return;
        }
        let inc = n.incarnation;
        self.checker.node_gone(name, inc);
        self.spans.retain(|(n, i, _), _| !(n == name && *i == inc));
        self.sessions
            .retain(|(n, i, _), _| !(n == name && *i == inc));
        self.note(format!("{now} {name}: {why}"));
    }

    pub(super) fn alive(&self, name: &str) -> bool {
        self.nodes
            .get(name)
            .map(|n| n.state.is_some())
            .unwrap_or(false)
    }

    pub(super) fn meta_tick(&mut self) {
        let now = self.now;
        let names: Vec<String> = self.nodes.keys().cloned().collect();
        self.keepalives(&names);
        // Self-fencing: a node that could not renew its lease for nearly a TTL stops everything
        // before the store lets the lease expire.
        for name in &names {
            self.check_fence(name);
        }
        let before_leader = self.meta.leader.clone();
        let before_alive = self.meta.alive();
        self.meta.expire(now);
        // A lease that expired fences that incarnation: it may write nothing from now on (its
        // shell checks the lease before any work; a write after this is a violation).
        for (n, inc) in &before_alive {
            if self.meta.leases.get(n.as_str()).map(|l| l.incarnation) != Some(*inc) {
                self.checker.node_gone(n.as_str(), *inc);
            }
        }
        // Fenced nodes come back (a new incarnation) once they reach the store.
        for name in &names {
            let fenced = self
                .nodes
                .get(name)
                .map(|n| n.fenced && n.state.is_none())
                .unwrap_or(false);
            if fenced && self.reaches_meta(name) && !self.meta.leases.contains_key(name) {
                self.start_node(name, 3);
            }
        }
        let reach: BTreeSet<String> = names
            .iter()
            .filter(|n| self.reaches_meta(n) && self.alive(n))
            .cloned()
            .collect();
        self.meta.elect(|n| reach.contains(n));
        let alive = self.meta.alive();
        let leader = self.meta.leader.clone();
        if alive != before_alive || leader != before_leader {
            self.note(format!("{now} meta: alive {alive:?} leader {leader:?}"));
        }
        self.tell_membership(&names, &alive, &leader);
        self.push(now + TICK_MS, Ev::MetaTick);
    }

    /// Keepalives of the live, running nodes that reach the store (their own incarnation's
    /// lease, or a new one).
    fn keepalives(&mut self, names: &[String]) {
        let now = self.now;
        for name in names {
            let (alive, inc, paused) = match self.nodes.get(name) {
                Some(n) => (n.state.is_some(), n.incarnation, n.paused_until > now),
                None => continue,
            };
            if !alive || paused || !self.reaches_meta(name) {
                continue;
            }
            let fresh = self
                .meta
                .leases
                .get(name)
                .map(|l| l.incarnation == inc)
                .unwrap_or(false);
            if fresh || !self.meta.leases.contains_key(name) {
                self.meta.leases.insert(
                    name.clone(),
                    Lease {
                        incarnation: inc,
                        expiry: now + self.lease_ms,
                    },
                );
                if let Some(n) = self.nodes.get_mut(name) {
                    n.last_keepalive = now;
                }
            }
        }
    }

    /// Every live node that reaches the store hears membership and leadership when they
    /// changed since it last heard them.
    fn tell_membership(
        &mut self,
        names: &[String],
        alive: &BTreeMap<NodeId, u64>,
        leader: &Option<(String, u64)>,
    ) {
        let leader_view = leader
            .as_ref()
            .map(|(n, r)| (Some(n.clone()), *r))
            .unwrap_or((None, 0));
        for name in names {
            if !self.alive(name) || !self.reaches_meta(name) {
                continue;
            }
            let (ka, kl) = match self.nodes.get(name) {
                Some(n) => (n.known_alive.clone(), n.known_leader.clone()),
                None => continue,
            };
            if ka.as_ref() != Some(alive) {
                if let Some(n) = self.nodes.get_mut(name) {
                    n.known_alive = Some(alive.clone());
                }
                self.deliver_now(
                    name,
                    Input::NodesChanged {
                        alive: alive.clone(),
                    },
                );
            }
            if kl.as_ref() != Some(&leader_view) {
                if let Some(n) = self.nodes.get_mut(name) {
                    n.known_leader = Some(leader_view.clone());
                }
                let node = leader_view.0.as_ref().map(|n| NodeId::new(n.as_str()));
                self.deliver_now(
                    name,
                    Input::Leader {
                        node,
                        rev: leader_view.1,
                    },
                );
            }
        }
    }

    /// A node's shell checks its lease before doing any work: one that could not renew it for
    /// nearly a TTL (a partition from the store, a long process pause) fences itself first.
    pub(super) fn check_fence(&mut self, name: &str) {
        let now = self.now;
        let Some(n) = self.nodes.get(name) else {
            return;
        };
        if n.state.is_some()
            && n.paused_until <= now
            && now + 2 * TICK_MS >= n.last_keepalive + self.lease_ms
        {
            self.kill_node(name, "found its lease expired: fenced itself");
            *self.fault_counts.entry("lease_lost").or_default() += 1;
            if let Some(n) = self.nodes.get_mut(name) {
                n.fenced = true;
            }
        }
    }
}
