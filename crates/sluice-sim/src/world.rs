//! The simulated world: nodes running the real control plane ([`NodeState`]), and models of the
//! network (delay, reordering, loss, duplication, partitions), the meta store (revisions, leases,
//! compare-and-swap, election), the upstream, the event source and the sinks. One discrete-event
//! queue ordered by (time, sequence) drives everything; the seed decides every random draw, so a
//! file and a seed always give the same trace hash.
//!
//! Each node runs the feed of the server ([`sluice_control::feed`]) over the model upstream: the
//! same subscriptions, batches, DDL routing, row handles and memory quota; the world checks the
//! feed's invariants on every batch and write (`Sim::check_batch`, `Sim::check_feed`).
//!
//! Each node's shell keeps its lease: a node that could not renew it for nearly a lease TTL
//! fences itself (drops every piece of state, as a crashed process would) before the store lets
//! the lease expire, so its replacement never overlaps it.
//!
//! This file holds the world's types and its constructor; its parts are in `world/`, one concern
//! each: `nodes` (nodes, leases, membership, the meta tick), `network` (partitions, messages),
//! `events` (one event, a node's input, the effects), `feed` (each node's feed and its checks),
//! `sinks` (sessions, writes, acknowledgements), `requests` (user requests, holds), `queries`
//! (views, aliases, `converged`, the conditions), `run` (the event loop, settling, the whole
//! file) and `steps` (one scenario step).

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

mod events;
mod feed;
mod network;
mod nodes;
mod queries;
mod requests;
mod run;
mod sinks;
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
    /// A snapshot chunk read (`Effect::ReadChunk`) is carried out on the model upstream.
    ChunkRead {
        node: String,
        inc: u64,
        ask: sluice_control::io::ChunkAsk,
        /// What capture had when the read was asked (a window read may see the upstream as it
        /// was then: `x-snapshot-read = "window"`).
        asked: sluice_types::Ts,
    },
    /// A chunk read (at an earlier time, at the upstream as it was then) reaches the node's
    /// feed: the server's parallel reads come back in any order, and each waits for capture.
    ChunkAnswer {
        node: String,
        inc: u64,
        ask: sluice_control::io::ChunkAsk,
        chunk: sluice_control::feed::ChunkRead<crate::upstream::SimRow>,
    },
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
    /// The transaction its last write left open (a part came, its next rows are still to come):
    /// nothing of it is acknowledged.
    open: Option<Ts>,
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
    /// Per (node, dispatcher): the position of its last snapshot chunk read and how many there.
    chunk_positions: BTreeMap<(String, DispatcherId), (Ts, u32)>,
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
    /// Of every subscription in the middle of a transaction the feed delivers in parts: its ts
    /// and the rows of it delivered so far.
    open_parts: BTreeMap<(String, u64, DispatcherId), (Ts, usize)>,
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
    /// The invariant checkers run (default). Off only for scale runs (`sluice-sim scale`): the
    /// world then skips the per-batch, per-write and per-dispatcher checks and their
    /// bookkeeping, and keeps only what drives it (persisted checkpoints, requests, restarts).
    pub checks: bool,
    /// Every input and trace event is summarized into the recent-events ring (a failure
    /// report's context) and the run's hash (default). Off only for scale runs: formatting a
    /// line per message was about a tenth of a million-span run, none of it the scheduler's;
    /// the world's own notes (steps, starts, faults) are kept.
    pub trace: bool,
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
            open_parts: BTreeMap::new(),
            chunk_positions: BTreeMap::new(),
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
            checks: true,
            trace: true,
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
}
