//! The simulated world: nodes running the real control plane ([`NodeState`]), and models of the
//! network (delay, reordering, loss, duplication, partitions), the meta store (revisions, leases,
//! compare-and-swap, election), the upstream, the event source and the sinks. One discrete-event
//! queue ordered by (time, sequence) drives everything; the seed decides every random draw, so a
//! file and a seed always give the same trace hash.
//!
//! Each node runs the feed of the server ([`sluice_control::feed`]) over the model upstream: the
//! same subscriptions, batches, DDL routing, row handles and memory quota; the world checks the
//! feed's invariants on every batch and write ([`Sim::check_batch`], [`Sim::check_feed`]).
//!
//! Each node's shell keeps its lease: a node that could not renew it for nearly a lease TTL
//! fences itself (drops every piece of state, as a crashed process would) before the store lets
//! the lease expire, so its replacement never overlaps it.

use crate::check::Checker;
use crate::downstream::Downstream;
use crate::meta::{Lease, MetaModel};
use crate::rng::Rng;
use crate::scenario::{self, Check, Condition, NodeRef, Op, Scenario, SinkKind, SpanCount};
use crate::upstream::{region_boundaries, SimRow, Upstream, ROW_BYTES};
use sluice_control::config::{ChangefeedConfig, SchedulerConfig};
use sluice_control::feed::{Feed, FeedNote, FeedOut};
use sluice_control::hold::HoldPoint;
use sluice_control::io::{Effect, Input, SinkCommand, TraceEvent, UserRequest};
use sluice_control::maintainer::operator::{OpKind, OpPhase};
use sluice_control::meta::keys;
use sluice_control::msg::{Message, TableRequest};
use sluice_control::node::NodeState;
use sluice_types::{
    spans_partition, ChangefeedId, DispatcherId, Millis, NodeId, Span, TableId, Ts,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;

mod steps;

/// Period of every node's tick.
pub const TICK_MS: Millis = 100;
/// Default node lease TTL.
pub const DEFAULT_LEASE_MS: Millis = 3_000;
/// The memory quota of every node's feed, unless the world sets `x-memory-quota-bytes`.
pub const DEFAULT_QUOTA_BYTES: u64 = 1 << 40;
/// How many recent events a failure report shows.
pub const RECENT_EVENTS: usize = 40;
/// Bound for the final liveness settle.
pub const FINAL_SETTLE_MS: Millis = 120_000;

#[derive(Clone, Debug)]
enum Ev {
    Tick(String),
    Input {
        node: String,
        inc: u64,
        input: Input,
    },
    /// A sink acknowledgement for one sink session.
    SinkAck {
        node: String,
        inc: u64,
        cf: ChangefeedId,
        id: DispatcherId,
        session: u64,
        ts: Ts,
    },
    SinkClosed {
        node: String,
        inc: u64,
        cf: ChangefeedId,
        id: DispatcherId,
        session: u64,
    },
    /// A DDL the model MySQL sink ran took effect: its record is marked finished, unless the
    /// node's process died meanwhile (then it stays started, as after a crash between the two).
    DdlFinished {
        node: String,
        inc: u64,
        ts: Ts,
    },
    /// The model sink took a write of the feed (its rows leave the memory quota).
    SinkAccepted {
        node: String,
        inc: u64,
        cf: ChangefeedId,
        id: DispatcherId,
        rows: usize,
        bytes: u64,
    },
    /// An effect the shell retries later.
    Effect {
        node: String,
        inc: u64,
        effect: Effect,
    },
    MetaTick,
}

struct SimNode {
    state: Option<NodeState>,
    /// The node's data path, the server's feed over the model upstream.
    feed: Option<Feed<SimRow>>,
    incarnation: u64,
    last_keepalive: Millis,
    paused_until: Millis,
    /// Down because it fenced itself (restarts once it reaches the meta store again), as
    /// opposed to crashed by a step (restarts only on a `restart` step).
    fenced: bool,
    known_alive: Option<BTreeMap<NodeId, u64>>,
    known_leader: Option<(Option<String>, u64)>,
}

#[derive(Clone, Debug, Default)]
struct Session {
    id: u64,
    closed: bool,
    max_written: Ts,
    /// A write of this session failed: as the sink runner does, every later write and flush of
    /// the session fails too (nothing lands, nothing is acknowledged, and, as the server's sink
    /// worker does, the repeats of that one failure are not reported again) until it is closed.
    failed: bool,
    /// When its latest acknowledgement is due: a later call is never acknowledged before an
    /// earlier one (the sink runner serializes a dispatcher's calls; a flush waits for a DDL).
    last_ack: Millis,
    /// Upstream rows this session was handed (a row goes to one session at most once).
    written: BTreeSet<usize>,
}

#[derive(Clone, Debug)]
struct DropRule {
    kind: &'static str,
    from: Option<String>,
    to: Option<String>,
    left: u64,
}

#[derive(Clone, Debug)]
struct SinkErrorRule {
    node: Option<String>,
    table: Option<TableId>,
    left: u64,
    retryable: bool,
}

#[derive(Clone, Debug, Default)]
pub struct FaultConfig {
    pub drop: f64,
    pub duplicate: f64,
    pub reorder: bool,
    pub delay: (u64, u64),
}

/// Why a run failed.
#[derive(Debug)]
pub struct Failure {
    pub step: Option<usize>,
    pub message: String,
}

pub struct Sim {
    pub sc: Scenario,
    pub seed: u64,
    rng: Rng,
    pub now: Millis,
    seq: u64,
    queue: BTreeMap<(Millis, u64), Ev>,
    nodes: BTreeMap<String, SimNode>,
    meta: MetaModel,
    pub upstream: Upstream,
    pub checker: Checker,
    /// The span of every dispatcher whose sink session the feed opened.
    spans: BTreeMap<(String, u64, DispatcherId), Span>,
    /// Every node's memory quota (`x-memory-quota-bytes`).
    quota_bytes: u64,
    sessions: BTreeMap<(String, u64, DispatcherId), Session>,
    next_session: u64,
    partition: Option<(Vec<BTreeSet<String>>, Option<usize>)>,
    pub faults: FaultConfig,
    drops: Vec<DropRule>,
    sink_errors: Vec<SinkErrorRule>,
    holds: BTreeMap<String, BTreeSet<HoldPoint>>,
    requests: VecDeque<UserRequest>,
    table_requests_in_flight: Vec<TableRequest>,
    hash: u64,
    pub events: u64,
    recent: VecDeque<String>,
    pub fault_counts: BTreeMap<&'static str, u64>,
    pub coverage: BTreeMap<(OpKind, OpPhase, &'static str), u64>,
    cf: ChangefeedId,
    lease_ms: Millis,
    last_cp_advanced: Ts,
    created: bool,
    pub skipped_expects: u64,
    /// Explore mode: only safety, settle and the end-state checks apply.
    pub explore: bool,
    pub verbose: bool,
    /// The model downstream: tables, rows and the DDL record (`LoadApplied` reads it).
    pub downstream: Downstream,
    /// `x-sink_latency`: extra acknowledgement latency per (node or any, table).
    sink_latency: BTreeMap<(Option<String>, TableId), Millis>,
    /// The create request, re-sent (as a user would) while the meta store has no changefeed.
    create: Option<(UserRequest, Millis)>,
    /// Cordon / drain states asked for, re-sent while the meta store does not show them:
    /// node -> (wanted value of its cordon key, last send).
    cordons: BTreeMap<String, (Option<&'static str>, Millis)>,
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= *b as u64;
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

fn to_hold(p: scenario::HoldPoint) -> HoldPoint {
    p.name().parse().unwrap_or(HoldPoint::CreateDispatcher)
}

impl Sim {
    pub fn new(sc: Scenario, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut upstream = Upstream::new();
        for t in &sc.world.tables {
            upstream.add_initial_table(&mut rng, t.id, &t.name.to_string(), t.regions, t.rows);
        }
        let lease_ms = sc.world.x_lease_ms.unwrap_or(DEFAULT_LEASE_MS);
        let mut sim = Sim {
            seed,
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            nodes: BTreeMap::new(),
            meta: MetaModel::default(),
            upstream,
            checker: Checker::default(),
            spans: BTreeMap::new(),
            quota_bytes: sc.world.x_memory_quota_bytes.unwrap_or(DEFAULT_QUOTA_BYTES),
            sessions: BTreeMap::new(),
            next_session: 1,
            partition: None,
            faults: FaultConfig::default(),
            drops: Vec::new(),
            sink_errors: Vec::new(),
            holds: BTreeMap::new(),
            requests: VecDeque::new(),
            table_requests_in_flight: Vec::new(),
            hash: 0xcbf2_9ce4_8422_2325,
            events: 0,
            recent: VecDeque::new(),
            fault_counts: BTreeMap::new(),
            coverage: BTreeMap::new(),
            cf: ChangefeedId::new(scenario::DEFAULT_CHANGEFEED),
            lease_ms,
            last_cp_advanced: 0,
            created: false,
            skipped_expects: 0,
            explore: false,
            verbose: false,
            downstream: Downstream::baseline(SinkKind::Blackhole, &Upstream::new(), 0),
            sink_latency: BTreeMap::new(),
            create: None,
            cordons: BTreeMap::new(),
            sc,
        };
        let names: Vec<String> = sim.sc.world.nodes.clone();
        for (i, n) in names.iter().enumerate() {
            sim.nodes.insert(
                n.clone(),
                SimNode {
                    state: None,
                    feed: None,
                    incarnation: 0,
                    last_keepalive: 0,
                    paused_until: 0,
                    fenced: false,
                    known_alive: None,
                    known_leader: None,
                },
            );
            sim.start_node(n, (i as u64) * 7);
        }
        sim.push(0, Ev::MetaTick);
        sim.meta_tick();
        sim
    }

    pub fn trace_hash(&self) -> u64 {
        self.hash
    }

    fn push(&mut self, at: Millis, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    fn note(&mut self, s: String) {
        fnv(&mut self.hash, s.as_bytes());
        if self.verbose {
            eprintln!("{s}");
        }
        if self.recent.len() >= RECENT_EVENTS {
            self.recent.pop_front();
        }
        self.recent.push_back(s);
    }

    pub fn recent(&self) -> String {
        let mut s = String::new();
        for r in &self.recent {
            let _ = writeln!(s, "    {r}");
        }
        s
    }

    // ------------------------------------------------------------------ nodes and meta

    fn start_node(&mut self, name: &str, offset: Millis) {
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
        let regions: Vec<(TableId, Vec<sluice_types::Key>)> = self
            .upstream
            .tables
            .values()
            .map(|t| (t.id, region_boundaries(t.id, t.regions)))
            .collect();
        for (table, r) in regions {
            self.deliver_now(name, Input::Regions { table, regions: r });
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

    fn kill_node(&mut self, name: &str, why: &str) {
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

    fn alive(&self, name: &str) -> bool {
        self.nodes
            .get(name)
            .map(|n| n.state.is_some())
            .unwrap_or(false)
    }

    fn group_of(&self, name: &str) -> Option<usize> {
        let (groups, _) = self.partition.as_ref()?;
        Some(
            groups
                .iter()
                .position(|g| g.contains(name))
                .unwrap_or(groups.len()),
        )
    }

    fn reaches(&self, a: &str, b: &str) -> bool {
        self.group_of(a) == self.group_of(b)
    }

    fn reaches_meta(&self, a: &str) -> bool {
        match &self.partition {
            Some((_, Some(meta_group))) => self.group_of(a) == Some(*meta_group),
            _ => true,
        }
    }

    fn meta_tick(&mut self) {
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
}

impl Sim {
    // ------------------------------------------------------------------ event loop

    fn deliver_now(&mut self, name: &str, input: Input) {
        let inc = self.nodes.get(name).map(|n| n.incarnation).unwrap_or(0);
        let now = self.now;
        self.push(
            now,
            Ev::Input {
                node: name.to_string(),
                inc,
                input,
            },
        );
    }

    /// Run every event up to `until`, checking invariants after each. Stops at a violation.
    pub fn advance(&mut self, until: Millis) -> Result<(), Failure> {
        while let Some((&(at, seq), _)) = self.queue.iter().next() {
            if at > until {
                break;
            }
            let Some(ev) = self.queue.remove(&(at, seq)) else {
                break;
            };
            self.now = at;
            self.events += 1;
            self.process(ev);
            if let Some(v) = &self.checker.violation {
                return Err(Failure {
                    step: None,
                    message: v.clone(),
                });
            }
        }
        self.now = self.now.max(until);
        Ok(())
    }

    /// A node's shell checks its lease before doing any work: one that could not renew it for
    /// nearly a TTL (a partition from the store, a long process pause) fences itself first.
    fn check_fence(&mut self, name: &str) {
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

    fn process(&mut self, ev: Ev) {
        match &ev {
            Ev::Tick(n)
            | Ev::Input { node: n, .. }
            | Ev::SinkAck { node: n, .. }
            | Ev::SinkClosed { node: n, .. }
            | Ev::DdlFinished { node: n, .. }
            | Ev::SinkAccepted { node: n, .. }
            | Ev::Effect { node: n, .. } => {
                let n = n.clone();
                self.check_fence(&n);
            }
            Ev::MetaTick => {}
        }
        match ev {
            Ev::MetaTick => self.meta_tick(),
            Ev::SinkAccepted {
                node,
                inc,
                cf,
                id,
                rows,
                bytes,
            } => {
                if let Some(f) = self
                    .nodes
                    .get_mut(&node)
                    .filter(|n| n.incarnation == inc)
                    .and_then(|n| n.feed.as_mut())
                {
                    f.on_accepted(&cf, id, rows, bytes);
                }
            }
            Ev::Tick(name) => self.node_tick(name),
            Ev::Input { node, inc, input } => {
                let paused = self.nodes.get(&node).map(|n| n.paused_until).unwrap_or(0);
                if paused > self.now {
                    self.push(paused, Ev::Input { node, inc, input });
                    return;
                }
                self.handle(&node, inc, input);
            }
            Ev::SinkAck {
                node,
                inc,
                cf,
                id,
                session,
                ts,
            } => {
                if self.session_is(&node, inc, id, session, false) {
                    self.handle(&node, inc, Input::SinkFlushed { cf, id, ts });
                }
            }
            Ev::Effect { node, inc, effect } => {
                if self
                    .nodes
                    .get(&node)
                    .map(|n| n.incarnation == inc && n.state.is_some())
                    .unwrap_or(false)
                {
                    self.effect(&node, inc, effect);
                }
            }
            Ev::DdlFinished { node, inc, ts } => {
                if self
                    .nodes
                    .get(&node)
                    .is_some_and(|n| n.incarnation == inc && n.state.is_some())
                {
                    self.downstream.finish_ddl(ts);
                }
            }
            Ev::SinkClosed {
                node,
                inc,
                cf,
                id,
                session,
            } => {
                if self.session_is(&node, inc, id, session, true) {
                    self.sessions.remove(&(node.clone(), inc, id));
                    self.handle(&node, inc, Input::SinkClosed { cf, id });
                }
            }
        }
    }

    /// Whether dispatcher `id` of incarnation `inc` of `node` has sink session `session` now
    /// (`closed_too`: also when that session is closing).
    fn session_is(
        &self,
        node: &str,
        inc: u64,
        id: DispatcherId,
        session: u64,
        closed_too: bool,
    ) -> bool {
        self.sessions
            .get(&(node.to_string(), inc, id))
            .map(|s| s.id == session && (closed_too || !s.closed))
            .unwrap_or(false)
    }

    /// A node's tick: capture catches up (a write is captured when a tick reads it, as the
    /// server's capture publishes in its own time), the node's feed reads, then the control
    /// plane ticks; a paused node ticks when it wakes.
    fn node_tick(&mut self, name: String) {
        let (alive, inc, paused) = match self.nodes.get(&name) {
            Some(n) => (n.state.is_some(), n.incarnation, n.paused_until),
            None => return,
        };
        if !alive {
            return;
        }
        let now = self.now;
        if paused > now {
            self.push(paused, Ev::Tick(name));
            return;
        }
        self.pump_requests();
        self.upstream.capture();
        self.feed_events(&name, inc);
        self.handle(&name, inc, Input::Tick);
        self.push(now + TICK_MS, Ev::Tick(name));
    }

    fn handle(&mut self, name: &str, inc: u64, input: Input) {
        let now = self.now;
        let effects = {
            let Some(n) = self.nodes.get_mut(name) else {
                return;
            };
            if n.incarnation != inc {
                return; // addressed to an earlier incarnation: lost
            }
            let Some(state) = n.state.as_mut() else {
                return;
            };
            state.handle(now, input.clone())
        };
        if !matches!(input, Input::Tick | Input::Events { .. }) || !effects.is_empty() {
            let mut s = format!("{now} {name}: ");
            summarize_input(&mut s, &input);
            self.note(s);
        }
        for o in self.through_feed(name, inc, effects) {
            self.feed_out(name, inc, o);
        }
    }

    /// The node's effects go through its feed (which takes subscriptions and row writes).
    fn through_feed(&mut self, name: &str, inc: u64, effects: Vec<Effect>) -> Vec<FeedOut<SimRow>> {
        let mut outs = Vec::new();
        let Some(feed) = self.nodes.get_mut(name).and_then(|n| n.feed.as_mut()) else {
            return outs;
        };
        let mut unsubscribed = false;
        for e in effects {
            if let Effect::Unsubscribe { id, .. } = &e {
                self.spans.remove(&(name.to_string(), inc, *id));
                unsubscribed = true;
            }
            feed.on_effect(&self.upstream, e, &mut outs);
        }
        if unsubscribed {
            if let Err(e) = feed.audit() {
                self.checker
                    .violation
                    .get_or_insert(format!("row-handle-leak: on {name}: {e}"));
            }
        }
        outs
    }

    /// Carry out what a node's feed asks for.
    fn feed_out(&mut self, name: &str, inc: u64, o: FeedOut<SimRow>) {
        match o {
            FeedOut::Input(input @ Input::Events { .. }) => {
                self.check_batch(name, inc, &input);
                self.handle(name, inc, input);
            }
            FeedOut::Input(input) => {
                let now = self.now;
                let node = name.to_string();
                self.push(now, Ev::Input { node, inc, input });
            }
            FeedOut::Open { id, span, .. } => {
                self.spans.insert((name.to_string(), inc, id), span);
            }
            FeedOut::Write {
                cf,
                id,
                span,
                rows,
                bytes,
            } => {
                let n = rows.len();
                let at = self.sink_rows(name, inc, cf.clone(), id, &span, rows);
                let node = name.to_string();
                self.push(
                    at,
                    Ev::SinkAccepted {
                        node,
                        inc,
                        cf,
                        id,
                        rows: n,
                        bytes,
                    },
                );
            }
            FeedOut::Effect(e) => self.effect(name, inc, e),
            FeedOut::Note(FeedNote::QuotaWait) => {
                *self.fault_counts.entry("quota_wait").or_default() += 1;
            }
            FeedOut::Note(FeedNote::Delivered { .. }) => {}
            FeedOut::Note(FeedNote::SourceError { message, .. }) => {
                let now = self.now;
                self.note(format!("{now} {name}: feed: {message}"));
            }
        }
    }

    /// The feed's batch invariants: whole transactions, resolved within the source.
    fn check_batch(&mut self, name: &str, inc: u64, input: &Input) {
        let Input::Events {
            id,
            items,
            resolved_ts,
            ..
        } = input
        else {
            return;
        };
        if *resolved_ts > self.upstream.captured {
            self.checker.violation.get_or_insert(format!(
                "resolved-within-source: a batch for {id:?} on {name} resolved ts {resolved_ts}, past what capture completed ({})",
                self.upstream.captured
            ));
        }
        let Some(span) = self.spans.get(&(name.to_string(), inc, *id)) else {
            return;
        };
        let mut counts: BTreeMap<Ts, usize> = BTreeMap::new();
        for i in items {
            if let sluice_control::io::StreamItem::Row { commit_ts, .. } = i {
                *counts.entry(*commit_ts).or_default() += 1;
            }
        }
        for (ts, n) in counts {
            let whole = self.upstream.txn_rows_in(span, ts);
            if n != whole {
                self.checker.violation.get_or_insert(format!(
                    "whole-transactions: a batch for {id:?} on {name} holds {n} of the {whole} rows of its span in the transaction at {ts}"
                ));
                return;
            }
        }
    }

    /// The feed's accounting after it read: rows in flight within the quota plus one
    /// transaction, and every row read held or in a sink write.
    fn check_feed(&mut self, name: &str) {
        let Some(feed) = self.nodes.get(name).and_then(|n| n.feed.as_ref()) else {
            return;
        };
        let bound = feed.quota_bytes() + self.upstream.max_txn_rows * ROW_BYTES as u64;
        let v = if feed.inflight_bytes() > bound {
            Some(format!(
                "inflight-within-quota: {name} has {} bytes of rows in flight, above its quota {} plus its largest transaction ({} rows of {ROW_BYTES} bytes)",
                feed.inflight_bytes(),
                feed.quota_bytes(),
                self.upstream.max_txn_rows
            ))
        } else {
            feed.audit()
                .err()
                .map(|e| format!("row-handle-leak: on {name}: {e}"))
        };
        if let Some(v) = v {
            self.checker.violation.get_or_insert(v);
        }
    }

    fn effect(&mut self, name: &str, inc: u64, e: Effect) {
        match e {
            Effect::Send { to, msg } => {
                if let Message::Merge { span, .. } = &msg {
                    self.checker.on_merge_sent(span.table);
                }
                self.send(name, to.as_str(), msg)
            }
            Effect::Meta { req, op } => self.meta_effect(name, inc, req, op),
            Effect::LoadSchema { cf, epoch, at_ts } => {
                self.load_schema(name, inc, (cf, epoch, at_ts))
            }
            Effect::LoadApplied {
                cf, epoch, after, ..
            } => {
                // The blackhole keeps nothing; the others answer from their record.
                let list = self.downstream.applied(after);
                let lat = self.rng.range(1, 20);
                self.input_after(
                    name,
                    inc,
                    lat,
                    Input::Applied {
                        cf,
                        epoch,
                        result: Ok(list),
                    },
                );
            }
            Effect::LoadFloor {
                cf,
                id,
                table,
                after,
                ..
            } => {
                // The shell's answer: the sink's record bounded by the schema history.
                let snapshot = self.upstream.snapshot(after);
                let applied = self.downstream.applied(after);
                let floor =
                    sluice_control::maintainer::replay::table_floor(&snapshot, &applied, table);
                let lat = self.rng.range(1, 20);
                self.input_after(
                    name,
                    inc,
                    lat,
                    Input::Floor {
                        cf,
                        id,
                        result: Ok(floor),
                    },
                );
            }
            // The feed's: they never leave it.
            Effect::Subscribe { .. } | Effect::Unsubscribe { .. } => {}
            Effect::CheckpointPersisted { cf, ts } => {
                self.checker.on_persisted_checkpoint(cf.as_str(), ts)
            }
            Effect::Sink(cmd) => self.sink(name, inc, cmd),
            Effect::Trace(t) => self.trace(name, inc, t),
        }
    }

    /// Queues `input` for incarnation `inc` of node `name`, `lat` ms from now.
    fn input_after(&mut self, name: &str, inc: u64, lat: Millis, input: Input) {
        let at = self.now + lat;
        self.push(
            at,
            Ev::Input {
                node: name.to_string(),
                inc,
                input,
            },
        );
    }

    /// A meta-store operation: unavailable from a node cut off from the store; else applied,
    /// what it wrote shown to the checker, and answered a few ms later.
    fn meta_effect(&mut self, name: &str, inc: u64, req: u64, op: sluice_control::meta::MetaOp) {
        if !self.reaches_meta(name) {
            let lat = self.rng.range(1, 5);
            let result = sluice_control::meta::MetaResult::Unavailable;
            return self.input_after(name, inc, lat, Input::MetaResult { req, result });
        }
        let (result, puts) = self.meta.apply(&op);
        if let (
            sluice_control::meta::MetaResult::Txn {
                succeeded: true, ..
            },
            sluice_control::meta::MetaOp::Txn { deletes, .. },
        ) = (&result, &op)
        {
            if deletes
                .iter()
                .any(|k| k.starts_with(keys::CHANGEFEED_REQUESTS))
            {
                self.checker.on_requests_record(None);
            }
        }
        for (k, v) in puts {
            self.show_put(&k, &v);
        }
        let lat = self.rng.range(1, 5);
        self.input_after(name, inc, lat, Input::MetaResult { req, result });
    }

    /// What a meta-store write tells the checker: the requests record, a changefeed's epoch and
    /// restarts.
    fn show_put(&mut self, k: &str, v: &[u8]) {
        if k.starts_with(keys::CHANGEFEED_REQUESTS) {
            if let Ok(rec) = serde_json::from_slice(v) {
                self.checker.on_requests_record(Some(&rec));
            }
        } else if let Some(cf) = k.strip_prefix(keys::CHANGEFEED_INFO) {
            if let Ok(info) =
                serde_json::from_slice::<sluice_control::coordinator::ChangefeedInfo>(v)
            {
                self.checker.on_persisted_epoch(cf, info.epoch);
                self.checker.on_persisted_restarts(cf, info.restarts);
            }
        }
    }

    /// The schema at `at_ts` with the epoch the store has now; retried while the node cannot
    /// reach the store (as the shell does).
    fn load_schema(
        &mut self,
        name: &str,
        inc: u64,
        (cf, epoch, at_ts): (ChangefeedId, sluice_types::Epoch, Ts),
    ) {
        if !self.reaches_meta(name) {
            let lat = self.rng.range(200, 500);
            let at = self.now + lat;
            return self.push(
                at,
                Ev::Effect {
                    node: name.to_string(),
                    inc,
                    effect: Effect::LoadSchema { cf, epoch, at_ts },
                },
            );
        }
        let snapshot = self.upstream.snapshot(at_ts);
        let persisted_epoch = self
            .meta
            .kv
            .get(&keys::info(cf.as_str()))
            .and_then(|(v, _)| {
                serde_json::from_slice::<sluice_control::coordinator::ChangefeedInfo>(v).ok()
            })
            .map(|i| sluice_types::Epoch(i.epoch))
            .unwrap_or_default();
        let lat = self.rng.range(1, 10);
        self.input_after(
            name,
            inc,
            lat,
            Input::Schema {
                cf,
                epoch,
                snapshot,
                persisted_epoch,
            },
        );
    }

    fn trace(&mut self, name: &str, inc: u64, t: TraceEvent) {
        match &t {
            TraceEvent::Applied { cf, kind, epoch } => {
                self.checker.on_applied(name, inc, cf, kind, *epoch)
            }
            TraceEvent::Stale { .. } => {
                *self.fault_counts.entry("stale_dropped").or_default() += 1;
                self.cover("stale_epoch");
            }
            TraceEvent::DispatcherStarted {
                id, span, start_ts, ..
            } => {
                let up = &self.upstream;
                self.checker
                    .dispatcher_started(name, inc, *id, span, *start_ts, up);
            }
            TraceEvent::DispatcherClosed { id, .. } => {
                self.checker.dispatcher_closed(name, inc, *id)
            }
            TraceEvent::MaintainerCheckpoint {
                cf,
                epoch,
                checkpoint,
            } => self
                .checker
                .on_maintainer_checkpoint(cf, *epoch, *checkpoint),
            TraceEvent::RequestDone { req, outcome, .. } => {
                self.checker.on_request_done(req, outcome)
            }
            TraceEvent::ChangefeedRestarted { reason, .. } => {
                self.checker.on_restart(reason);
                *self.fault_counts.entry("changefeed_error").or_default() += 1;
            }
            TraceEvent::MaintainerBootstrapped { cf, epoch } => {
                self.checker.on_bootstrapped(cf, *epoch)
            }
            TraceEvent::MaintainerStarted { cf, epoch } => {
                self.checker.on_maintainer_started(cf, *epoch)
            }
            TraceEvent::Log(_) => {}
        }
        let now = self.now;
        self.note(format!("{now} {name}: {t:?}"));
    }

    fn send(&mut self, from: &str, to: &str, msg: Message) {
        let now = self.now;
        let to_inc = self.nodes.get(to).map(|n| n.incarnation).unwrap_or(0);
        if from == to {
            self.push(
                now,
                Ev::Input {
                    node: to.to_string(),
                    inc: to_inc,
                    input: Input::Message {
                        from: NodeId::new(from),
                        msg,
                    },
                },
            );
            return;
        }
        if !self.reaches(from, to) {
            *self.fault_counts.entry("partition_drop").or_default() += 1;
            return;
        }
        let kind = msg.kind();
        if let Some(r) = self.drops.iter_mut().find(|r| {
            r.left > 0
                && r.kind == kind
                && r.from.as_deref().map(|f| f == from).unwrap_or(true)
                && r.to.as_deref().map(|t| t == to).unwrap_or(true)
        }) {
            r.left -= 1;
            *self.fault_counts.entry("targeted_drop").or_default() += 1;
            self.cover("drop");
            self.note(format!("{now} net: dropped {kind} {from}->{to} (x-drop)"));
            return;
        }
        if self.rng.chance(self.faults.drop) {
            *self.fault_counts.entry("drop").or_default() += 1;
            self.cover("drop");
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate) {
            *self.fault_counts.entry("duplicate").or_default() += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut lat =
                self.rng.range(1, 3) + self.rng.range(self.faults.delay.0, self.faults.delay.1);
            if self.faults.reorder {
                lat += self.rng.range(0, 300);
                *self.fault_counts.entry("reorder").or_default() += 1;
            }
            self.push(
                now + lat,
                Ev::Input {
                    node: to.to_string(),
                    inc: to_inc,
                    input: Input::Message {
                        from: NodeId::new(from),
                        msg: msg.clone(),
                    },
                },
            );
        }
    }

    fn session(&mut self, name: &str, inc: u64, id: DispatcherId) -> u64 {
        let next = self.next_session;
        let s = self
            .sessions
            .entry((name.to_string(), inc, id))
            .or_insert_with(|| Session {
                id: next,
                closed: false,
                max_written: 0,
                failed: false,
                last_ack: 0,
                written: BTreeSet::new(),
            });
        if s.id == next {
            self.next_session += 1;
        }
        s.id
    }

    fn session_failed(&self, name: &str, inc: u64, id: DispatcherId) -> bool {
        self.sessions
            .get(&(name.to_string(), inc, id))
            .is_some_and(|s| s.failed)
    }

    fn sink_error(&mut self, name: &str, table: TableId) -> Option<bool> {
        let rule = self.sink_errors.iter_mut().find(|r| {
            r.left > 0
                && r.node.as_deref().map(|n| n == name).unwrap_or(true)
                && r.table.map(|t| t == table).unwrap_or(true)
        })?;
        rule.left -= 1;
        Some(rule.retryable)
    }

    fn sink(&mut self, name: &str, inc: u64, cmd: SinkCommand) {
        match cmd {
            // The feed turns row writes into `FeedOut::Write`.
            SinkCommand::WriteRows { .. } => {}
            SinkCommand::WriteDdl { cf, id, ddl, .. } => self.sink_ddl(name, inc, cf, id, &ddl),
            SinkCommand::Flush { cf, id } => {
                if self.session_failed(name, inc, id) {
                    return;
                }
                let session = self.session(name, inc, id);
                let ts = self
                    .sessions
                    .get(&(name.to_string(), inc, id))
                    .map(|s| s.max_written)
                    .unwrap_or(0);
                let at = self.ack_at(name, inc, id, (1, 10));
                self.ack(name, inc, cf, id, session, ts, at);
            }
            SinkCommand::Close { cf, id } => {
                let session = self.session(name, inc, id);
                if let Some(s) = self.sessions.get_mut(&(name.to_string(), inc, id)) {
                    s.closed = true;
                }
                let lat = self.rng.range(1, 20);
                self.push(
                    self.now + lat,
                    Ev::SinkClosed {
                        node: name.to_string(),
                        inc,
                        cf,
                        id,
                        session,
                    },
                );
            }
        }
    }

    /// A write of the session failed: as the sink runner does, the whole session fails (nothing
    /// more of it lands until it is closed), and the failure is reported once.
    fn fail_write(
        &mut self,
        name: &str,
        inc: u64,
        cf: ChangefeedId,
        id: DispatcherId,
        retryable: bool,
        message: String,
    ) {
        let _ = self.session(name, inc, id);
        if let Some(s) = self.sessions.get_mut(&(name.to_string(), inc, id)) {
            s.failed = true;
        }
        let lat = self.rng.range(1, 5);
        self.push(
            self.now + lat,
            Ev::Input {
                node: name.to_string(),
                inc,
                input: Input::SinkError {
                    cf,
                    id,
                    retryable,
                    table_only: false,
                    message,
                },
            },
        );
    }

    /// A write of the feed reaches the model sink; returns when the sink has taken it.
    fn sink_rows(
        &mut self,
        name: &str,
        inc: u64,
        cf: ChangefeedId,
        id: DispatcherId,
        span: &Span,
        rows: Vec<SimRow>,
    ) -> Millis {
        if self.session_failed(name, inc, id) {
            return self.now;
        }
        self.check_once_per_session(name, inc, id, &rows);
        let rows: Vec<(Ts, sluice_types::Key, u64)> = rows
            .into_iter()
            .map(|r| (r.ts, r.key, r.idx as u64))
            .collect();
        if let Some(retryable) = self.sink_error(name, span.table) {
            *self.fault_counts.entry("sink_error").or_default() += 1;
            if retryable {
                self.checker.sink_retryable += 1;
            } else {
                self.checker.sink_fatal += 1;
                *self.fault_counts.entry("sink_error_fatal").or_default() += 1;
            }
            self.cover("sink_error");
            let message = crate::check::INJECTED_SINK_ERROR.to_string();
            self.fail_write(name, inc, cf, id, retryable, message);
            return self.now;
        }
        #[cfg(feature = "mutations")]
        let rows: Vec<_> = if sluice_control::mutations::on("drop-rows") {
            rows.into_iter().filter(|r| r.2 % 50 != 7).collect()
        } else {
            rows
        };
        // The downstream refuses rows of a table it does not have (MySQL 1146: fatal).
        if let Err(message) = self.downstream.write_rows(&self.upstream, &rows) {
            *self.fault_counts.entry("sink_missing_table").or_default() += 1;
            self.note(format!(
                "{} {name}: sink write of {id:?} refused: {message}",
                self.now
            ));
            self.fail_write(name, inc, cf, id, false, message);
            return self.now;
        }
        let session = self.session(name, inc, id);
        let max = rows.iter().map(|r| r.0).max().unwrap_or(0);
        // The sink contract: writes carry whole transactions, in commit order.
        let first = rows.first().map(|r| r.0).unwrap_or(0);
        let before = self
            .sessions
            .get(&(name.to_string(), inc, id))
            .map(|s| s.max_written)
            .unwrap_or(0);
        if first <= before && before > 0 {
            self.checker.violation.get_or_insert(format!(
                "sink-contract: {id:?} on {name} wrote a batch starting at {first} after one that reached {before} (a transaction cut across writes, or out of order)"
            ));
        }
        let up = &self.upstream;
        self.checker.on_rows(name, inc, id, span, &rows, up);
        if let Some(s) = self.sessions.get_mut(&(name.to_string(), inc, id)) {
            s.max_written = s.max_written.max(max);
        }
        let at = self.ack_at(name, inc, id, (5, 60));
        self.ack(name, inc, cf, id, session, max, at);
        at
    }

    /// A sink session is never handed one upstream row twice.
    fn check_once_per_session(&mut self, name: &str, inc: u64, id: DispatcherId, rows: &[SimRow]) {
        let _ = self.session(name, inc, id);
        let Some(s) = self.sessions.get_mut(&(name.to_string(), inc, id)) else {
            return;
        };
        if let Some(r) = rows.iter().find(|r| !s.written.insert(r.idx)) {
            self.checker.violation.get_or_insert(format!(
                "row-once-per-session: {id:?} on {name} was handed upstream row #{} (ts {}) twice in one sink session",
                r.idx, r.ts
            ));
        }
    }

    fn sink_ddl(
        &mut self,
        name: &str,
        inc: u64,
        cf: ChangefeedId,
        id: DispatcherId,
        ddl: &sluice_types::DdlEvent,
    ) {
        if self.session_failed(name, inc, id) {
            return;
        }
        let session = self.session(name, inc, id);
        let span = self
            .spans
            .get(&(name.to_string(), inc, id))
            .cloned()
            .unwrap_or_else(sluice_control::dispatcher::trigger_span);
        let ts = ddl.commit_ts;
        let handle = self.upstream.ddl_index(ts).map_or(u64::MAX, |i| i as u64);
        // MySQL skips a DDL its record shows finished; storage accepts repeated DDLs.
        if self.downstream.write_ddl(&self.upstream, ddl) {
            let up = &self.upstream;
            self.checker.on_ddl(name, inc, id, &span, ts, handle, up);
        }
        if let Some(s) = self.sessions.get_mut(&(name.to_string(), inc, id)) {
            s.max_written = s.max_written.max(ts);
        }
        let at = self.ack_at(name, inc, id, (5, 60));
        let at = self
            .sessions
            .get(&(name.to_string(), inc, id))
            .map_or(at, |s| s.last_ack.max(at));
        // The record says finished when the DDL is acknowledged, not before.
        self.push(
            at,
            Ev::DdlFinished {
                node: name.to_string(),
                inc,
                ts,
            },
        );
        self.ack(name, inc, cf, id, session, ts, at);
    }

    /// When the model sink acknowledges a write of `id` on `name`: a random latency, plus the
    /// `x-sink_latency` of its table there.
    fn ack_at(&mut self, name: &str, inc: u64, id: DispatcherId, latency: (u64, u64)) -> Millis {
        let table = self
            .spans
            .get(&(name.to_string(), inc, id))
            .map(|s| s.table);
        let slow = table
            .map(|t| {
                let any = self.sink_latency.get(&(None, t)).copied().unwrap_or(0);
                let here = self
                    .sink_latency
                    .get(&(Some(name.to_string()), t))
                    .copied()
                    .unwrap_or(0);
                any.max(here)
            })
            .unwrap_or(0);
        self.now + self.rng.range(latency.0, latency.1) + slow
    }

    /// The model sink acknowledges a session's writes up to `ts` at `at` (or after the session's
    /// previous acknowledgement).
    #[allow(clippy::too_many_arguments)]
    fn ack(
        &mut self,
        name: &str,
        inc: u64,
        cf: ChangefeedId,
        id: DispatcherId,
        session: u64,
        ts: Ts,
        at: Millis,
    ) {
        let at = match self.sessions.get_mut(&(name.to_string(), inc, id)) {
            Some(s) => {
                s.last_ack = s.last_ack.max(at);
                s.last_ack
            }
            None => at,
        };
        self.push(
            at,
            Ev::SinkAck {
                node: name.to_string(),
                inc,
                cf,
                id,
                session,
                ts,
            },
        );
    }

    /// The node's feed reads the model upstream for its dispatchers.
    fn feed_events(&mut self, name: &str, inc: u64) {
        let mut outs = Vec::new();
        let Some(n) = self.nodes.get_mut(name).filter(|n| n.incarnation == inc) else {
            return;
        };
        let (Some(state), Some(feed)) = (n.state.as_ref(), n.feed.as_mut()) else {
            return;
        };
        feed.poll(
            &self.upstream,
            |cf, id| state.wants_events(cf, id),
            &mut outs,
        );
        self.check_feed(name);
        for o in outs {
            self.feed_out(name, inc, o);
        }
    }

    /// Requests go to the coordinator (changefeed and node requests) or to the node running the
    /// changefeed's current maintainer (table requests); retried while there is none.
    fn pump_requests(&mut self) {
        let now = self.now;
        // Cordons that did not take are asked again.
        let resend: Vec<(String, Option<&'static str>)> = self
            .cordons
            .iter()
            .filter(|(n, (want, at))| {
                let have = self.meta.kv.get(&keys::cordon(n)).map(|(v, _)| {
                    if v.as_slice() == b"drain" {
                        "drain"
                    } else {
                        "cordon"
                    }
                });
                have != *want && now >= at + 2_000
            })
            .map(|(n, (w, _))| (n.clone(), *w))
            .collect();
        for (n, want) in resend {
            self.cordons.insert(n.clone(), (want, now));
            let req = match want {
                Some("drain") => UserRequest::Drain {
                    node: NodeId::new(n.as_str()),
                },
                Some(_) => UserRequest::Cordon {
                    node: NodeId::new(n.as_str()),
                    on: true,
                },
                None => UserRequest::Cordon {
                    node: NodeId::new(n.as_str()),
                    on: false,
                },
            };
            self.requests.push_back(req);
        }
        // A create that did not take (the coordinator died or lost the store) is sent again.
        if let Some((req, at)) = self.create.clone() {
            if self.meta.kv.contains_key(&keys::info(self.cf.as_str())) {
                self.create = None;
            } else if now >= at + 2_000
                && !self
                    .requests
                    .iter()
                    .any(|r| matches!(r, UserRequest::CreateChangefeed { .. }))
            {
                self.create = Some((req.clone(), now));
                self.requests.push_back(req);
            }
        }
        let mut keep = VecDeque::new();
        while let Some(req) = self.requests.pop_front() {
            let target = match &req {
                UserRequest::Table { .. } => self
                    .current_maintainer()
                    .filter(|(_, ready)| *ready)
                    .map(|(n, _)| n),
                _ => self.coordinator_node().filter(|n| {
                    self.node(n)
                        .and_then(|s| s.coordinator())
                        .map(|c| c.is_ready())
                        .unwrap_or(false)
                }),
            };
            match target {
                Some(n) => {
                    let inc = self.nodes.get(&n).map(|x| x.incarnation).unwrap_or(0);
                    self.push(
                        now,
                        Ev::Input {
                            node: n,
                            inc,
                            input: Input::Request(req),
                        },
                    );
                }
                None => keep.push_back(req),
            }
        }
        self.requests = keep;
    }

    fn cover(&mut self, fault: &'static str) {
        let ops: Vec<(OpKind, OpPhase)> = match self.current_maintainer_state() {
            Some(m) => m.operators().into_iter().map(|(k, p, _)| (k, p)).collect(),
            None => return,
        };
        for (k, p) in ops {
            *self.coverage.entry((k, p, fault)).or_default() += 1;
        }
    }

    // ------------------------------------------------------------------ views

    fn node(&self, name: &str) -> Option<&NodeState> {
        self.nodes.get(name).and_then(|n| n.state.as_ref())
    }

    pub fn coordinator_node(&self) -> Option<String> {
        self.meta
            .leader
            .as_ref()
            .map(|l| l.0.clone())
            .filter(|n| self.alive(n))
    }

    /// The node where the coordinator last placed the maintainer, and whether it is ready.
    fn current_maintainer(&self) -> Option<(String, bool)> {
        let c = self.coordinator_node()?;
        let (node, epoch) = self.node(&c)?.coordinator()?.maintainer_of(&self.cf)?;
        let ready = self
            .node(node.as_str())
            .and_then(|s| s.maintainer(&self.cf))
            .map(|m| m.epoch() == epoch && m.is_bootstrapped())
            .unwrap_or(false);
        Some((node.as_str().to_string(), ready))
    }

    fn current_maintainer_state(&self) -> Option<&sluice_control::maintainer::Maintainer> {
        let (n, ready) = self.current_maintainer()?;
        if !ready {
            return None;
        }
        self.node(&n)?.maintainer(&self.cf)
    }

    pub fn persisted_checkpoint(&self) -> Ts {
        self.checker
            .persisted_cp
            .get(self.cf.as_str())
            .copied()
            .unwrap_or(0)
    }

    fn resolve(&self, r: &NodeRef) -> Result<String, String> {
        match r {
            NodeRef::Name(n) => Ok(n.clone()),
            NodeRef::Maintainer => self
                .current_maintainer()
                .map(|m| m.0)
                .ok_or_else(|| "@maintainer has no value now".to_string()),
            NodeRef::Coordinator => self
                .coordinator_node()
                .ok_or_else(|| "@coordinator has no value now".to_string()),
            NodeRef::DdlWriter => self
                .current_maintainer_state()
                .and_then(|m| m.pending_ddl_writer())
                .map(|n| n.as_str().to_string())
                .ok_or_else(|| {
                    "@ddl-writer has no value now (no pending blocking DDL with a chosen writer)"
                        .to_string()
                }),
        }
    }

    /// How many dispatchers (any state, the table trigger included) run on all live nodes.
    pub fn dispatcher_count(&self) -> usize {
        self.dispatchers_everywhere().len()
    }

    fn dispatchers_everywhere(&self) -> Vec<(String, sluice_control::dispatcher::DispatcherView)> {
        let mut out = Vec::new();
        for (name, n) in &self.nodes {
            if let Some(s) = &n.state {
                for (_, dm) in s.dispatcher_managers() {
                    for d in dm.dispatchers() {
                        out.push((name.clone(), d));
                    }
                }
            }
        }
        out
    }

    fn live_tables(&self) -> Vec<TableId> {
        let cp = self
            .persisted_checkpoint()
            .max(self.checker.start_ts.unwrap_or(0));
        self.upstream
            .tables
            .values()
            .filter(|t| t.live_at(cp))
            .map(|t| t.id)
            .collect()
    }

    /// `converged`: every live table covered exactly once by working dispatchers, nothing for
    /// dropped tables, no operator in flight.
    pub fn converged(&self) -> Result<(), String> {
        let Some(m) = self.current_maintainer_state() else {
            return Err("no ready maintainer".into());
        };
        if !m.operators().is_empty() {
            return Err(format!("operators in flight: {:?}", m.operators()));
        }
        let ds = self.dispatchers_everywhere();
        let live: BTreeSet<TableId> = self.live_tables().into_iter().collect();
        let mut by_table: BTreeMap<TableId, Vec<Span>> = BTreeMap::new();
        for (node, d) in &ds {
            if d.is_trigger {
                continue;
            }
            if !live.contains(&d.span.table) {
                if self
                    .upstream
                    .tables
                    .get(&d.span.table)
                    .map(|t| t.dropped.is_some())
                    .unwrap_or(true)
                {
                    return Err(format!(
                        "dispatcher {:?} on {node} for dropped table {:?}",
                        d.id, d.span.table
                    ));
                }
                continue; // created after the checkpoint: not live yet
            }
            if d.state != "working" {
                return Err(format!("dispatcher {:?} on {node} is {}", d.id, d.state));
            }
            by_table
                .entry(d.span.table)
                .or_default()
                .push(d.span.clone());
        }
        for t in &live {
            let spans = by_table.remove(t).unwrap_or_default();
            let refs: Vec<&Span> = spans.iter().collect();
            if !spans_partition(&Span::whole_table(*t), &refs) {
                return Err(format!(
                    "table {t:?} is not covered exactly once: {spans:?}"
                ));
            }
        }
        let triggers = ds.iter().filter(|(_, d)| d.is_trigger).count();
        if triggers != 1 {
            return Err(format!("{triggers} table triggers"));
        }
        Ok(())
    }

    fn settled(&self, target: Ts) -> Result<(), String> {
        self.converged()?;
        if !self.requests.is_empty() {
            return Err("requests not yet delivered".into());
        }
        if let Some(m) = self.current_maintainer_state() {
            if !m.requests_in_flight().is_empty() {
                return Err(format!("requests in flight: {:?}", m.requests_in_flight()));
            }
        }
        // A request the meta store held is in flight until a maintainer finished it: one a
        // failover lost stays in flight for ever.
        let lost = self.checker.unfinished_requests();
        if !lost.is_empty() {
            return Err(format!(
                "request-lost: the meta store held {lost:?}, no maintainer finished them"
            ));
        }
        let cp = self.persisted_checkpoint();
        if cp < target {
            return Err(format!("checkpoint {cp} has not reached {target}"));
        }
        Ok(())
    }

    fn table_spans(
        &self,
        table: TableId,
    ) -> Option<(Vec<sluice_control::maintainer::SpanView>, bool)> {
        let m = self.current_maintainer_state()?;
        let spans: Vec<_> = m
            .spans()
            .into_iter()
            .filter(|s| s.span.table == table)
            .collect();
        Some((spans, m.table_busy(table)))
    }

    fn condition(&mut self, c: &Condition) -> Result<(), String> {
        match c {
            Condition::Spans { table, count } => self.spans_condition(*table, count),
            Condition::On { table, node } => self.on_condition(*table, node),
            Condition::Absent { table } => self.absent_condition(*table),
            Condition::Check(Check::Converged) => self.converged(),
            Condition::Check(Check::SinkMatchesUpstream) => {
                if self.sc.world.sink == SinkKind::Blackhole {
                    return Ok(());
                }
                let cp = self.persisted_checkpoint();
                self.checker.sink_matches_upstream(&self.upstream, cp)?;
                // Caught up (nothing above the checkpoint yet): the downstream's tables too.
                if cp >= self.upstream.head {
                    self.downstream.compare(&self.upstream, cp)?;
                }
                Ok(())
            }
            Condition::Check(Check::ChangefeedNormal) => {
                if self.checker.restarted {
                    return Err("the changefeed was stopped or restarted as a whole".into());
                }
                Ok(())
            }
            Condition::MaintainerNotOn(r) => {
                let node = self.resolve(r)?;
                match self.current_maintainer() {
                    Some((m, _)) if m != node => Ok(()),
                    other => Err(format!("maintainer is on {other:?}")),
                }
            }
            Condition::MaintainerReady => match self.current_maintainer() {
                Some((_, true)) => Ok(()),
                other => Err(format!("maintainer not ready: {other:?}")),
            },
            Condition::Held { point, node, table } => self.held_condition(*point, node, *table),
            Condition::CheckpointAdvanced => {
                let cp = self.persisted_checkpoint();
                if cp > self.last_cp_advanced {
                    self.last_cp_advanced = cp;
                    Ok(())
                } else {
                    Err(format!("checkpoint still {cp}"))
                }
            }
        }
    }

    /// `spans`: the table's span count in the maintainer (exactly: with nothing in flight).
    fn spans_condition(&mut self, table: TableId, count: &SpanCount) -> Result<(), String> {
        let Some((spans, busy)) = self.table_spans(table) else {
            return Err("no ready maintainer".into());
        };
        let n = spans.len() as u64;
        match count {
            SpanCount::Exactly(want) => {
                if busy {
                    return Err(format!(
                        "table {table:?} has an operator or request in flight ({n} spans now)"
                    ));
                }
                if n != *want {
                    return Err(format!("table {table:?} has {n} spans, expected {want}"));
                }
            }
            SpanCount::AtLeast(want) if n < *want => {
                return Err(format!(
                    "table {table:?} has {n} spans, expected at least {want}"
                ))
            }
            SpanCount::AtMost(want) if n > *want => {
                return Err(format!(
                    "table {table:?} has {n} spans, expected at most {want}"
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// `on`: every span of the table replicates on `node`.
    fn on_condition(&mut self, table: TableId, node: &NodeRef) -> Result<(), String> {
        let node = self.resolve(node)?;
        let Some((spans, _)) = self.table_spans(table) else {
            return Err("no ready maintainer".into());
        };
        if spans.is_empty()
            || spans.iter().any(|s| {
                s.node.as_ref().map(|n| n.as_str()) != Some(node.as_str())
                    || s.state != "replicating"
            })
        {
            return Err(format!(
                "table {table:?} spans: {:?}",
                spans
                    .iter()
                    .map(|s| (s.node.clone(), s.state))
                    .collect::<Vec<_>>()
            ));
        }
        Ok(())
    }

    /// `absent`: no span in the maintainer and no dispatcher anywhere for the table.
    fn absent_condition(&mut self, table: TableId) -> Result<(), String> {
        let Some((spans, _)) = self.table_spans(table) else {
            return Err("no ready maintainer".into());
        };
        if !spans.is_empty() {
            return Err(format!(
                "table {table:?} still has {} spans in the maintainer",
                spans.len()
            ));
        }
        if let Some((n, d)) = self
            .dispatchers_everywhere()
            .into_iter()
            .find(|(_, d)| d.span.table == table)
        {
            return Err(format!(
                "table {table:?} still has dispatcher {:?} on {n}",
                d.id
            ));
        }
        Ok(())
    }

    /// `held`: some node (or `node`) has work waiting at the hold point (of `table`).
    fn held_condition(
        &mut self,
        point: scenario::HoldPoint,
        node: &Option<NodeRef>,
        table: Option<TableId>,
    ) -> Result<(), String> {
        let node = match node {
            Some(r) => Some(self.resolve(r)?),
            None => None,
        };
        let p = to_hold(point);
        for (name, n) in &self.nodes {
            if node.as_ref().map(|x| x != name).unwrap_or(false) {
                continue;
            }
            let Some(s) = &n.state else { continue };
            for (_, dm) in s.dispatcher_managers() {
                if dm
                    .held(s.holds())
                    .iter()
                    .any(|h| h.point == p && table.map(|t| t == h.table).unwrap_or(true))
                {
                    return Ok(());
                }
            }
        }
        Err(format!("nothing held at {}", p.name()))
    }

    // ------------------------------------------------------------------ steps

    /// Send a user request (as the API would) to the coordinator or the maintainer.
    pub fn user_request(&mut self, req: UserRequest) {
        self.request(req);
    }

    /// The changefeed's info as the meta store has it.
    pub fn changefeed_info(&self, cf: &str) -> Option<sluice_control::coordinator::ChangefeedInfo> {
        self.meta
            .kv
            .get(&keys::info(cf))
            .and_then(|(v, _)| serde_json::from_slice(v).ok())
    }

    fn request(&mut self, req: UserRequest) {
        self.requests.push_back(req);
        self.pump_requests();
    }

    fn hold(
        &mut self,
        point: scenario::HoldPoint,
        node: &Option<NodeRef>,
        on: bool,
    ) -> Result<(), String> {
        let p = to_hold(point);
        let names: Vec<String> = match node {
            Some(r) => vec![self.resolve(r)?],
            None => self.nodes.keys().cloned().collect(),
        };
        for n in names {
            let set = self.holds.entry(n.clone()).or_default();
            if on {
                set.insert(p);
            } else {
                set.remove(&p);
            }
            self.deliver_now(&n, Input::Hold { point: p, on });
        }
        Ok(())
    }

    pub fn run_step(&mut self, idx: usize) -> Result<(), Failure> {
        match self.run_step_inner(idx) {
            // Under random faults an alias may legitimately have no value: skip that step.
            Err(f) if self.explore && f.message.contains("has no value now") => {
                self.skipped_expects += 1;
                Ok(())
            }
            r => r,
        }
    }

    pub fn settle(&mut self, max_ms: Millis) -> Result<(), String> {
        let target = self.upstream.head;
        let deadline = self.now + max_ms;
        // Requests issued at this instant reach their component first.
        self.advance(self.now).map_err(|f| f.message)?;
        loop {
            let r = self.settled(target);
            match r {
                Ok(()) => return Ok(()),
                Err(m) if self.now >= deadline => {
                    return Err(format!("settle did not finish within {max_ms} ms: {m}"))
                }
                Err(_) => {
                    let next = (self.now + TICK_MS).min(deadline);
                    self.advance(next).map_err(|f| f.message)?;
                }
            }
        }
    }

    /// Run the whole file, then the final liveness check.
    pub fn run(&mut self) -> Result<(), Failure> {
        for i in 0..self.sc.steps.len() {
            self.run_step(i)?;
            if let Some(v) = &self.checker.violation {
                return Err(Failure {
                    step: Some(self.sc.steps[i].number),
                    message: v.clone(),
                });
            }
        }
        // End of run: release every hold, heal, faults off, settle.
        let names: Vec<String> = self.nodes.keys().cloned().collect();
        self.holds.clear();
        for n in &names {
            for p in HoldPoint::ALL {
                self.deliver_now(
                    n,
                    Input::Hold {
                        point: p,
                        on: false,
                    },
                );
            }
        }
        self.partition = None;
        self.faults = FaultConfig::default();
        self.drops.clear();
        self.sink_errors.clear();
        self.sink_latency.clear();
        for n in &names {
            if let Some(x) = self.nodes.get_mut(n) {
                x.paused_until = 0;
            }
        }
        if self.created {
            self.settle(FINAL_SETTLE_MS).map_err(|m| Failure {
                step: None,
                message: format!("final liveness check: {m}"),
            })?;
            if self.sc.world.sink != SinkKind::Blackhole {
                let cp = self.persisted_checkpoint();
                self.checker
                    .sink_matches_upstream(&self.upstream, cp)
                    .and_then(|()| self.downstream.compare(&self.upstream, cp))
                    .map_err(|m| Failure {
                        step: None,
                        message: format!("final check: {m}"),
                    })?;
            }
        }
        Ok(())
    }
}

fn summarize_input(s: &mut String, input: &Input) {
    match input {
        Input::Message { from, msg } => {
            let _ = write!(s, "<- {from} {}", msg.kind());
            match msg {
                Message::Create {
                    id,
                    span,
                    start_ts,
                    epoch,
                    ..
                } => {
                    let _ = write!(s, " {id:?} {span:?} from {start_ts} {epoch:?}");
                }
                Message::Remove {
                    id, purpose, epoch, ..
                } => {
                    let _ = write!(s, " {id:?} {purpose:?} {epoch:?}");
                }
                Message::Merge {
                    sources,
                    target,
                    epoch,
                    ..
                } => {
                    let _ = write!(s, " {sources:?} -> {target:?} {epoch:?}");
                }
                Message::Barrier {
                    id,
                    ddl_ts,
                    command,
                    epoch,
                    ..
                } => {
                    let _ = write!(s, " {id:?} {ddl_ts} {command:?} {epoch:?}");
                }
                Message::BlockStatus { id, report, .. } => {
                    let _ = write!(s, " {id:?} {} {:?}", report.ddl_ts, report.stage);
                }
                Message::AddMaintainer {
                    epoch, checkpoint, ..
                } => {
                    let _ = write!(s, " {epoch:?} at {checkpoint}");
                }
                Message::Heartbeat {
                    seq,
                    dispatchers,
                    errors,
                    ..
                } => {
                    let _ = write!(s, " #{seq} ({} dispatchers)", dispatchers.len());
                    if !errors.is_empty() {
                        let _ = write!(s, " ({} errors)", errors.len());
                    }
                }
                other => {
                    if let Some(e) = other.epoch() {
                        let _ = write!(s, " {e:?}");
                    }
                }
            }
        }
        Input::Events {
            id,
            items,
            resolved_ts,
            ..
        } => {
            let _ = write!(s, "events {id:?} {} items to {resolved_ts}", items.len());
        }
        Input::MetaResult { req, result } => {
            let _ = write!(
                s,
                "meta #{req} {}",
                match result {
                    sluice_control::meta::MetaResult::Got { kvs, .. } =>
                        format!("got {}", kvs.len()),
                    sluice_control::meta::MetaResult::Txn { succeeded, .. } =>
                        format!("txn {succeeded}"),
                    sluice_control::meta::MetaResult::Unavailable => "unavailable".into(),
                }
            );
        }
        other => {
            let d = format!("{other:?}");
            s.push_str(&d[..d.len().min(160)]);
        }
    }
}
