//! Random exploration: each seed draws a world, a workload, operators, DDLs, holds and faults (or
//! runs a given scenario with random faults and timings). Reports failing seeds, faults injected by
//! kind, and the coverage matrix {operator kind × phase} × {crash, partition, drop, stale epoch}.

use crate::rng::Rng;
use crate::scenario::{self, Scenario};
use crate::world::Sim;
use sluice_control::maintainer::operator::{OpKind, OpPhase};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

/// Every cell of the coverage matrix must be hit at least this often.
pub const MIN_COVERAGE: u64 = 5;
pub const FAULTS: [&str; 4] = ["crash", "partition", "drop", "stale_epoch"];

#[derive(Default)]
pub struct Report {
    pub passed: u64,
    pub failed: Vec<(u64, String)>,
    pub faults: BTreeMap<&'static str, u64>,
    pub coverage: BTreeMap<(OpKind, OpPhase, &'static str), u64>,
    pub events: u64,
    pub simulated_ms: u64,
    pub wall_ms: u128,
    pub skipped_expects: u64,
}

impl Report {
    pub fn cells() -> Vec<(OpKind, OpPhase)> {
        let mut v = Vec::new();
        for k in OpKind::ALL {
            for p in k.phases() {
                v.push((k, *p));
            }
        }
        v
    }

    pub fn coverage_ok(&self, min: u64) -> bool {
        Self::cells().iter().all(|(k, p)| {
            FAULTS
                .iter()
                .all(|f| self.coverage.get(&(*k, *p, *f)).copied().unwrap_or(0) >= min)
        })
    }

    pub fn render(&self, min: u64) -> String {
        let mut s = String::new();
        for (seed, why) in &self.failed {
            let _ = writeln!(s, "FAILED seed {seed}: {why}");
            let _ = writeln!(s, "  replay: sluice-sim explore --start {seed} --seeds 1");
        }
        let secs = (self.wall_ms as f64 / 1000.0).max(0.001);
        let _ = writeln!(
            s,
            "seeds: {}, events: {}, simulated s: {}, wall s: {:.1}",
            self.passed + self.failed.len() as u64,
            self.events,
            self.simulated_ms / 1000,
            secs
        );
        let _ = writeln!(
            s,
            "rate: {:.1} seeds/min, {:.0} events/s",
            (self.passed + self.failed.len() as u64) as f64 * 60.0 / secs,
            self.events as f64 / secs
        );
        let _ = writeln!(s, "faults injected by kind:");
        for (k, v) in &self.faults {
            let _ = writeln!(s, "  {k:<16} {v}");
        }
        if self.skipped_expects > 0 {
            let _ = writeln!(
                s,
                "steps skipped (expects other than checks, aliases without a value): {}",
                self.skipped_expects
            );
        }
        let _ = writeln!(s, "coverage (operator phase in flight when the fault hit):");
        let _ = writeln!(
            s,
            "  {:<18} {:>8} {:>10} {:>8} {:>12} {:>11}",
            "operator", "crash", "partition", "drop", "stale_epoch", "sink_error"
        );
        for (k, p) in Self::cells() {
            let c = |f| self.coverage.get(&(k, p, f)).copied().unwrap_or(0);
            let _ = writeln!(
                s,
                "  {:<18} {:>8} {:>10} {:>8} {:>12} {:>11}",
                format!("{}:{}", k.name(), p),
                c("crash"),
                c("partition"),
                c("drop"),
                c("stale_epoch"),
                c("sink_error")
            );
        }
        if min > 0 && !self.coverage_ok(min) {
            let _ = writeln!(s, "coverage: some cell was hit fewer than {min} times");
        }
        let _ = writeln!(s, "{} passed, {} failed", self.passed, self.failed.len());
        s
    }
}

/// A random world and workload for one seed, written in the scenario format itself.
pub fn random_scenario(seed: u64) -> Scenario {
    parse_generated(seed, random_scenario_text(seed))
}

fn parse_generated(seed: u64, t: String) -> Scenario {
    match scenario::parse_str(&format!("explore-{seed}.toml"), &t) {
        Ok(sc) => sc,
        Err(e) => panic!("generated scenario for seed {seed} is invalid: {e}\n{t}"),
    }
}

/// The scenario file `explore` runs for a seed (`sluice-sim explore --print --start S`).
pub fn random_scenario_text(seed: u64) -> String {
    generate(seed, true)
}

/// The scenario a seed ran before sink faults existed (`explore --no-sink-faults`): the same
/// text as `random_scenario_text` for every seed that draws no sink fault.
pub fn random_scenario_text_without_sink_faults(seed: u64) -> String {
    generate(seed, false)
}

fn generate(seed: u64, sink_faults: bool) -> String {
    let (mut g, mut feed_load) = Gen::world(seed);
    g.step("op = \"create_changefeed\"".into());
    if g.r.chance(0.5) {
        g.step("op = \"settle\"".into());
    }
    let nsteps = g.r.range(8, 22);
    let mut sink_faults = SinkFaults::draw(seed, nsteps, sink_faults);
    let mut window = SlowTableWindow::draw(seed, nsteps);
    for i in 0..nsteps {
        let mut bodies = sink_faults.steps_at(i, &g.live, g.nodes);
        let mut tables = Tables {
            live: &mut g.live,
            db: &mut g.tables_db,
            next: &mut g.next_table,
        };
        bodies.extend(window.steps_at(i, &mut tables, g.nodes));
        bodies.extend(feed_load.steps_at(i, nsteps, tables.live, g.nodes));
        for body in bodies {
            g.step(body);
        }
        g.main_step();
    }
    g.step("op = \"faults\"".into());
    g.t
}

/// The name of node `i` (0-based) in generated scenarios.
fn node_name(i: u64) -> String {
    format!("n{}", i + 1)
}

/// The generator of a seed's random world: its main stream (`r`), the scenario text written so
/// far and what the steps so far did to the world. Invariant: every draw from `r` happens in the
/// order it always did (a seed's scenario never changes), so each helper draws exactly what its
/// part of the scenario always drew, in that order.
struct Gen {
    r: Rng,
    t: String,
    nodes: u64,
    across: bool,
    first_maintainer: String,
    live: Vec<u64>,
    tables_db: BTreeMap<u64, String>,
    next_table: u64,
    held: Vec<&'static str>,
}

impl Gen {
    /// The `[world]` section (nodes, sink, scheduler, tables) and the seed's feed load.
    fn world(seed: u64) -> (Gen, FeedLoad) {
        let mut r = Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xA5A5);
        let nodes = r.range(2, 4);
        let mut t = String::new();
        let _ = writeln!(
            t,
            "name = \"explore seed {seed}\"\n[world]\nnodes = [{}]",
            (0..nodes)
                .map(|i| format!("\"{}\"", node_name(i)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let sink = ["storage", "mysql", "storage", "blackhole"][r.range(0, 3) as usize];
        let first_maintainer = node_name(r.range(0, nodes - 1));
        let _ = writeln!(t, "maintainer = \"{first_maintainer}\"\nsink = \"{sink}\"");
        let feed_load = FeedLoad::draw(seed);
        if let Some(q) = feed_load.quota {
            let _ = writeln!(t, "x-memory-quota-bytes = {q}");
        }
        // Drawn apart too: a seed's world is otherwise the one it was before snapshots.
        let mut r3 = Rng::new(seed ^ 0x5A4B_5407);
        if r3.chance(0.4) {
            let rows = r3.range(3, 20);
            let _ = writeln!(
                t,
                "x-snapshot = \"initial\"\nx-snapshot-chunk-rows = {rows}"
            );
            // Half of them as window reads (an upstream that names no position: MySQL).
            if r3.chance(0.5) {
                let _ = writeln!(t, "x-snapshot-read = \"window\"");
            }
        }
        let across = r.chance(0.7);
        let _ = writeln!(
            t,
            "[world.scheduler]\nenable-table-across-nodes = {across}\nregion-threshold = {}\nregion-count-per-span = {}\nbalance = {}",
            r.range(2, 6),
            r.range(1, 3),
            r.chance(0.5)
        );
        // Drawn apart so the rest of the seed's world stays as it was before this knob existed.
        let mut r2 = Rng::new(seed ^ 0xFEED_F00D);
        if r2.chance(0.4) {
            let _ = writeln!(t, "x-write-key-threshold = {}", r2.range(50, 3000));
        }
        let mut g = Gen {
            r,
            t,
            nodes,
            across,
            first_maintainer,
            live: Vec::new(),
            tables_db: BTreeMap::new(),
            next_table: 100,
            held: Vec::new(),
        };
        g.tables();
        (g, feed_load)
    }

    /// The `[[world.tables]]` the seed starts with: 2 to 5, over two databases.
    fn tables(&mut self) {
        let r = &mut self.r;
        let ntables = r.range(2, 5);
        for i in 0..ntables {
            let id = 10 + i;
            self.live.push(id);
            self.tables_db.insert(id, format!("db{}", i % 2));
            let _ = writeln!(
                self.t,
                "[[world.tables]]\nid = {id}\nname = \"db{}.t{id}\"\nregions = {}\nrows = {}",
                i % 2,
                r.range(1, 12),
                r.range(0, 40)
            );
        }
    }

    fn step(&mut self, body: String) {
        let _ = writeln!(self.t, "[[step]]\n{body}");
    }

    /// A `run` step of `lo..=hi` ms.
    fn run(&mut self, lo: u64, hi: u64) {
        let ms = self.r.range(lo, hi);
        self.step(format!("op = \"run\"\nms = {ms}"));
    }

    /// A live table (the caller checked there is one).
    fn pick(&mut self) -> u64 {
        let v = &self.live;
        v[(self.r.next_u64() % v.len().max(1) as u64) as usize % v.len().max(1)]
    }

    fn new_table_id(&mut self) -> u64 {
        let id = self.next_table;
        self.next_table += 1;
        id
    }

    /// One step of the main loop: a node, then a kind of step drawn; a kind whose condition
    /// does not hold is a `run`.
    fn main_step(&mut self) {
        let n = node_name(self.r.range(0, self.nodes - 1));
        match self.r.range(0, 23) {
            0..=3 if !self.live.is_empty() => self.write(),
            4 if !self.live.is_empty() => {
                let tb = self.pick();
                self.step(format!("op = \"move_table\"\ntable = {tb}\nto = \"{n}\""));
            }
            5 | 6 if !self.live.is_empty() => self.split_or_merge(&n),
            7 => self.create_table(),
            8 if self.live.len() > 1 => {
                let tb = self.pick();
                self.live.retain(|x| *x != tb);
                self.step(format!("op = \"ddl\"\nkind = \"drop_table\"\ntable = {tb}"));
            }
            9 if !self.live.is_empty() => self.truncate_table(),
            10 if !self.live.is_empty() => self.alter_table(),
            11 => self.hold(&n),
            12 if !self.held.is_empty() => {
                let p = self.held.remove(0);
                self.step(format!("op = \"release\"\npoint = \"{p}\""));
            }
            13 => self.crash(&n),
            14 => self.partition(&n),
            15 => self.faults(),
            16 => self.step("op = \"x-move_maintainer\"\nto = \"".to_string() + &n + "\""),
            17 => self.run(50, 3000),
            18 if self.held.is_empty() => self.step("op = \"settle\"\nmax-ms = 60000".into()),
            19 if self.r.chance(0.3) => self.database_ddl(),
            20 => {
                self.step(format!("op = \"cordon\"\nnode = \"{n}\""));
                self.run(100, 2000);
                self.step(format!("op = \"uncordon\"\nnode = \"{n}\""));
            }
            21 if !self.live.is_empty() => {
                let tb = self.pick();
                let rows = self.r.range(600, 1500);
                self.step(format!(
                    "op = \"write\"\ntable = {tb}\nrows = {rows}\ntxn-rows = 600"
                ));
            }
            _ => self.run(10, 800),
        }
    }

    fn write(&mut self) {
        let tb = self.pick();
        let r = &mut self.r;
        let body = format!(
            "op = \"write\"\ntable = {tb}\nrows = {}\ntxn-rows = {}\ndeletes = {}",
            r.range(1, 40),
            r.range(1, 5),
            r.range(0, 3)
        );
        self.step(body);
    }

    /// A split (when tables may span nodes) or a merge, often hit while in flight.
    fn split_or_merge(&mut self, n: &str) {
        let tb = self.pick();
        if self.across && self.r.chance(0.5) {
            let spans = self.r.range(2, 3);
            self.step(format!(
                "op = \"split_table\"\ntable = {tb}\nspans = {spans}"
            ));
        } else {
            self.step(format!("op = \"merge_table\"\ntable = {tb}"));
        }
        // Often hit the operator while it is in flight.
        if self.r.chance(0.6) {
            self.run(0, 250);
            self.operator_fault(n);
        }
    }

    /// A crash, a partition or dropped messages while an operator is in flight.
    fn operator_fault(&mut self, n: &str) {
        match self.r.range(0, 2) {
            0 => {
                self.step(format!("op = \"crash\"\nnode = \"{n}\""));
                self.run(100, 5000);
                self.step(format!("op = \"restart\"\nnode = \"{n}\""));
            }
            1 => {
                self.step(format!("op = \"partition\"\ngroups = [[\"{n}\"]]"));
                self.run(100, 5000);
                self.step("op = \"heal\"".into());
            }
            _ => {
                let r = &mut self.r;
                let body = format!(
                    "op = \"x-drop\"\nmessage = \"{}\"\ncount = {}",
                    ["merge", "remove", "create", "heartbeat", "bootstrap"][r.range(0, 4) as usize],
                    r.range(1, 3)
                );
                self.step(body);
                self.step("op = \"faults\"\ndrop = 0.2\nreorder = true".to_string());
                self.run(100, 2000);
                self.step("op = \"faults\"".into());
            }
        }
    }

    fn create_table(&mut self) {
        let id = self.new_table_id();
        self.live.push(id);
        self.tables_db.insert(id, "db1".into());
        let regions = self.r.range(1, 8);
        self.step(format!("op = \"ddl\"\nkind = \"create_table\"\ntable = {id}\nname = \"db1.n{id}\"\nregions = {regions}"));
    }

    fn truncate_table(&mut self) {
        let tb = self.pick();
        let id = self.new_table_id();
        self.live.retain(|x| *x != tb);
        self.live.push(id);
        let db = self.tables_db.get(&tb).cloned().unwrap_or_default();
        self.tables_db.insert(id, db);
        self.step(format!(
            "op = \"ddl\"\nkind = \"truncate_table\"\ntable = {tb}\nnew-table = {id}"
        ));
    }

    /// `ADD COLUMN` or a rename into `db0`.
    fn alter_table(&mut self) {
        let tb = self.pick();
        let kind = if self.r.chance(0.5) {
            "add_column".to_string()
        } else {
            self.tables_db.insert(tb, "db0".into());
            format!("rename_table\"\nnew-name = \"db0.r{}", self.r.range(0, 999))
        };
        self.step(format!("op = \"ddl\"\nkind = \"{kind}\"\ntable = {tb}"));
    }

    fn hold(&mut self, n: &str) {
        let p = [
            "create_dispatcher",
            "close_dispatcher",
            "bootstrap_response",
            "sink_flush",
            "ddl_before_write",
            "ddl_after_write",
            "ddl_before_pass",
            "ddl_after_pass",
        ][self.r.range(0, 7) as usize];
        self.held.push(p);
        self.step(format!("op = \"hold\"\npoint = \"{p}\"\nnode = \"{n}\""));
    }

    /// A crash of node `n`, or of the first maintainer's node with every node restarted.
    fn crash(&mut self, n: &str) {
        if self.r.chance(0.3) {
            // The node the first maintainer was placed on.
            let first = self.first_maintainer.clone();
            self.step(format!("op = \"crash\"\nnode = \"{first}\""));
            self.run(100, 4000);
            for i in 0..self.nodes {
                self.step(format!("op = \"restart\"\nnode = \"{}\"", node_name(i)));
            }
        } else {
            self.step(format!("op = \"crash\"\nnode = \"{n}\""));
            self.run(100, 5000);
            self.step(format!("op = \"restart\"\nnode = \"{n}\""));
        }
    }

    fn partition(&mut self, n: &str) {
        let meta = if self.r.chance(0.3) { ", \"meta\"" } else { "" };
        self.step(format!("op = \"partition\"\ngroups = [[\"{n}\"{meta}]]"));
        self.run(100, 6000);
        self.step("op = \"heal\"".into());
    }

    fn faults(&mut self) {
        let r = &mut self.r;
        let body = format!(
            "op = \"faults\"\ndrop = {:.2}\nduplicate = {:.2}\nreorder = {}\ndelay-ms = [0, {}]",
            r.range(0, 30) as f64 / 100.0,
            r.range(0, 20) as f64 / 100.0,
            r.chance(0.5),
            r.range(0, 200)
        );
        self.step(body);
    }

    /// Database-level and cluster-level DDLs.
    fn database_ddl(&mut self) {
        match self.r.range(0, 2) {
            0 => {
                let db = format!("db{}", self.r.range(0, 1));
                let tables_db = &self.tables_db;
                let gone: Vec<u64> = self
                    .live
                    .iter()
                    .copied()
                    .filter(|t| tables_db.get(t).map(|d| *d == db).unwrap_or(false))
                    .collect();
                if gone.len() < self.live.len() {
                    self.live.retain(|t| !gone.contains(t));
                    self.step(format!(
                        "op = \"ddl\"\nkind = \"drop_database\"\ndatabase = \"{db}\""
                    ));
                }
            }
            1 => {
                let db = self.r.range(2, 9);
                self.step(format!(
                    "op = \"ddl\"\nkind = \"create_database\"\ndatabase = \"db{db}\""
                ));
            }
            _ => self.step("op = \"ddl\"\nkind = \"x-create_view\"\ndatabase = \"db0\"".into()),
        }
    }
}

/// Share of seeds that inject sink faults.
pub const SINK_FAULT_SEEDS: f64 = 0.3;
/// At most this many changefeed errors a seed's sink faults can cause (a fatal fault one each, a
/// retryable one per `MAX_SINK_RETRIES_WITHOUT_PROGRESS + 1` failures). It keeps the error backoff
/// (doubling from 2 s) within a `settle`'s 60 s and far from `MAX_ERROR_RETRIES`, after which a
/// changefeed is failed for good and rightly never converges.
pub const MAX_SINK_FAULT_ERRORS: u64 = 4;

/// Sink faults of one seed: drawn from their own stream (`seed ^ 0x51_4E_4B`), so every other
/// draw of the seed is what it was before sink faults existed, and a seed that draws none runs
/// exactly the scenario it ran then. Retryable faults are transient (a few failed writes, handled
/// inside the dispatcher) or persistent (more failures in a row than
/// `MAX_SINK_RETRIES_WITHOUT_PROGRESS` on one table: the dispatcher fails and the changefeed
/// errors); fatal faults fail the dispatcher at once. Each fault is lifted by itself once its
/// count of failed writes is used up. After a fault the seed often writes to the faulty table (so
/// it fires now) and hits the error path: its `dispatcher_error` messages dropped, the
/// maintainer or the faulty node crashed or partitioned away, the maintainer moved.
struct SinkFaults {
    rng: Rng,
    /// Loop indexes (of the seed's main steps) before which a fault is injected.
    at: Vec<u64>,
    /// Changefeed errors the faults injected so far can cause at most.
    errors: u64,
    retryable: u64,
}

impl SinkFaults {
    fn draw(seed: u64, nsteps: u64, on: bool) -> Self {
        let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x51_4E_4B);
        let mut at = Vec::new();
        if on && rng.chance(SINK_FAULT_SEEDS) {
            for _ in 0..rng.range(1, 3) {
                at.push(rng.range(0, nsteps.saturating_sub(1)));
            }
            at.sort_unstable();
        }
        SinkFaults {
            rng,
            at,
            errors: 0,
            retryable: 0,
        }
    }

    fn steps_at(&mut self, i: u64, live: &[u64], nodes: u64) -> Vec<String> {
        let mut out = Vec::new();
        while self.at.first() == Some(&i) {
            self.at.remove(0);
            self.one(live, nodes, &mut out);
        }
        out
    }

    fn one(&mut self, live: &[u64], nodes: u64, out: &mut Vec<String>) {
        let r = &mut self.rng;
        let limit = sluice_control::config::MAX_SINK_RETRIES_WITHOUT_PROGRESS as u64 + 1;
        let node = |i: u64| format!("n{}", i + 1);
        let target_node = if r.chance(0.5) {
            Some(node(r.range(0, nodes - 1)))
        } else {
            None
        };
        let target_table = if !live.is_empty() && r.chance(0.7) {
            r.pick(live).copied()
        } else {
            None
        };
        let (count, retryable) = match r.range(0, 3) {
            0 | 1 => (r.range(1, 5), true),
            // Persistent: on one table, enough to exhaust a dispatcher's retries (at least once
            // if the table has a single span).
            2 if target_table.is_some() => (r.range(limit, 2 * limit + 2), true),
            _ => (r.range(1, 2), false),
        };
        // Keep within the error budget (see MAX_SINK_FAULT_ERRORS).
        let (retryable_total, errors) = if retryable {
            let total = self.retryable + count;
            (total, self.errors - self.retryable / limit + total / limit)
        } else {
            (self.retryable, self.errors + count)
        };
        if errors > MAX_SINK_FAULT_ERRORS {
            return;
        }
        self.retryable = retryable_total;
        self.errors = errors;
        let mut body = format!("op = \"x-sink_error\"\ncount = {count}\nretryable = {retryable}");
        if let Some(n) = &target_node {
            let _ = write!(body, "\nnode = \"{n}\"");
        }
        if let Some(tb) = target_table {
            let _ = write!(body, "\ntable = {tb}");
        }
        out.push(body);
        // Make it fire now rather than at some later write.
        if r.chance(0.6) {
            if let Some(tb) = target_table.or_else(|| r.pick(live).copied()) {
                out.push(format!(
                    "op = \"write\"\ntable = {tb}\nrows = {}\ntxn-rows = {}",
                    r.range(1, 40),
                    r.range(1, 4)
                ));
            }
        }
        // ... and hit the error path while it is reported.
        let n = target_node.unwrap_or_else(|| node(r.range(0, nodes - 1)));
        let run = |r: &mut Rng, lo, hi| format!("op = \"run\"\nms = {}", r.range(lo, hi));
        match r.range(0, 7) {
            0 => {
                out.push(run(r, 0, 30));
                out.push(format!(
                    "op = \"x-drop\"\nmessage = \"dispatcher_error\"\ncount = {}",
                    r.range(1, 3)
                ));
            }
            1 => {
                // Drop the error message and the heartbeats (which repeat it) for a while.
                out.push(format!(
                    "op = \"x-drop\"\nmessage = \"dispatcher_error\"\nfrom = \"{n}\"\ncount = {}",
                    r.range(1, 3)
                ));
                out.push(format!(
                    "op = \"x-drop\"\nmessage = \"{}\"\ncount = {}",
                    ["heartbeat", "maintainer_status"][r.range(0, 1) as usize],
                    r.range(1, 20)
                ));
            }
            2 => {
                out.push(run(r, 0, 300));
                out.push(format!("op = \"crash\"\nnode = \"{n}\""));
                out.push(run(r, 100, 5000));
                out.push(format!("op = \"restart\"\nnode = \"{n}\""));
            }
            3 => {
                out.push(run(r, 0, 300));
                let meta = if r.chance(0.3) { ", \"meta\"" } else { "" };
                out.push(format!("op = \"partition\"\ngroups = [[\"{n}\"{meta}]]"));
                out.push(run(r, 100, 6000));
                out.push("op = \"heal\"".into());
            }
            4 => {
                out.push(run(r, 0, 300));
                out.push(format!("op = \"x-move_maintainer\"\nto = \"{n}\""));
            }
            5 => out.push(run(r, 0, 2000)),
            _ => {}
        }
    }
}

/// Share of seeds that open a slow-table window.
pub const SLOW_TABLE_SEEDS: f64 = 0.25;

/// The generator's view of the upstream tables, for steps drawn outside its main loop.
struct Tables<'a> {
    live: &'a mut Vec<u64>,
    db: &'a mut BTreeMap<u64, String>,
    next: &'a mut u64,
}

/// The window of issue 9's reproductions 1 and 2, drawn from its own stream (`seed ^ 0x5_10E`,
/// so a seed that draws none runs the scenario it ran before): one table turns slow downstream
/// (`x-sink_latency`, 3-30 s: the changefeed checkpoint stays below its pending write), another
/// gets rows and a `TRUNCATE`, `DROP TABLE` or `ADD COLUMN`, which the downstream applies while
/// the checkpoint is below it; then one node or every node is killed in that window and started
/// again, the slow table recovering before or after. The replay that follows crosses a DDL the
/// downstream already applied.
struct SlowTableWindow {
    rng: Rng,
    at: Option<u64>,
}

impl SlowTableWindow {
    fn draw(seed: u64, nsteps: u64) -> Self {
        let mut rng = Rng::new(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ 0x5_10E);
        let at = rng
            .chance(SLOW_TABLE_SEEDS)
            .then(|| rng.range(0, nsteps.saturating_sub(1)));
        SlowTableWindow { rng, at }
    }

    fn steps_at(&mut self, i: u64, tables: &mut Tables<'_>, nodes: u64) -> Vec<String> {
        let mut out = Vec::new();
        if self.at != Some(i) || tables.live.len() < 2 {
            return out;
        }
        self.at = None;
        let r = &mut self.rng;
        let slow = *r.pick(tables.live).unwrap_or(&0);
        let others: Vec<u64> = tables.live.iter().copied().filter(|t| *t != slow).collect();
        let other = *r.pick(&others).unwrap_or(&0);
        let ms = r.range(3000, 30000);
        out.push(format!(
            "op = \"x-sink_latency\"\ntable = {slow}\nms = {ms}"
        ));
        out.push(format!(
            "op = \"write\"\ntable = {slow}\nrows = {}",
            r.range(1, 3)
        ));
        out.push(format!(
            "op = \"write\"\ntable = {other}\nrows = {}\ntxn-rows = {}",
            r.range(1, 20),
            r.range(1, 3)
        ));
        out.extend(Self::ddl(r, tables, other));
        out.push(format!("op = \"run\"\nms = {}", r.range(100, 2500)));
        let node = |i: u64| format!("n{}", i + 1);
        let crashed: Vec<String> = if r.chance(0.5) {
            (0..nodes).map(node).collect()
        } else {
            vec![node(r.range(0, nodes - 1))]
        };
        for n in &crashed {
            out.push(format!("op = \"crash\"\nnode = \"{n}\""));
        }
        let recover = format!("op = \"x-sink_latency\"\ntable = {slow}\nms = 0");
        let early = r.chance(0.5);
        if early {
            out.push(recover.clone());
        }
        out.push(format!("op = \"run\"\nms = {}", r.range(100, 3000)));
        for n in &crashed {
            out.push(format!("op = \"restart\"\nnode = \"{n}\""));
        }
        if !early {
            out.push(format!("op = \"run\"\nms = {}", r.range(0, 3000)));
            out.push(recover);
        }
        out
    }

    /// The DDL of the other table, with the rows after it; keeps `tables` up to date.
    fn ddl(r: &mut Rng, tables: &mut Tables<'_>, other: u64) -> Vec<String> {
        let kind = r.range(0, 19);
        if kind < 9 || (kind < 16 && tables.live.len() < 3) {
            let id = *tables.next;
            *tables.next += 1;
            tables.live.retain(|x| *x != other);
            tables.live.push(id);
            let db = tables.db.get(&other).cloned().unwrap_or_default();
            tables.db.insert(id, db);
            vec![
                format!(
                    "op = \"ddl\"\nkind = \"truncate_table\"\ntable = {other}\nnew-table = {id}"
                ),
                format!("op = \"write\"\ntable = {id}\nrows = {}", r.range(1, 10)),
            ]
        } else if kind < 16 {
            tables.live.retain(|x| *x != other);
            vec![format!(
                "op = \"ddl\"\nkind = \"drop_table\"\ntable = {other}"
            )]
        } else {
            vec![
                format!("op = \"ddl\"\nkind = \"add_column\"\ntable = {other}"),
                format!("op = \"write\"\ntable = {other}\nrows = {}", r.range(1, 10)),
            ]
        }
    }
}

/// Share of seeds with a feed load.
pub const FEED_LOAD_SEEDS: f64 = 0.3;

/// The feed under load, drawn from its own stream (`seed ^ 0xFEED_10AD`, so a seed that draws
/// none runs the scenario it ran before): every node's memory quota is small (200 to 2000 model
/// rows), and 1-3 times in the run transactions spanning 1-3 tables with 20-400 rows of each (or,
/// one time in three, one or two of 1100-1600: larger than a feed batch, so they go in parts)
/// are written, often while one of those tables is slow downstream on one node (`x-sink_latency`
/// 0.2-1.5 s, lifted a little later).
struct FeedLoad {
    rng: Rng,
    quota: Option<u64>,
    /// Main-step indexes (as fractions of the step count, drawn before it is known) of the loads.
    at: Vec<u64>,
}

impl FeedLoad {
    fn draw(seed: u64) -> Self {
        let mut rng = Rng::new(seed.wrapping_mul(0xA076_1D64_78BD_642F) ^ 0xFEED_10AD);
        let (mut quota, mut at) = (None, Vec::new());
        if rng.chance(FEED_LOAD_SEEDS) {
            quota = Some(rng.range(200, 2000) * crate::upstream::ROW_BYTES as u64);
            for _ in 0..rng.range(1, 3) {
                at.push(rng.range(0, 99));
            }
        }
        FeedLoad { rng, quota, at }
    }

    fn steps_at(&mut self, i: u64, nsteps: u64, live: &[u64], nodes: u64) -> Vec<String> {
        let mut out = Vec::new();
        let due = self.at.iter().filter(|p| **p * nsteps / 100 == i).count();
        if due == 0 || live.is_empty() {
            return out;
        }
        let r = &mut self.rng;
        for _ in 0..due {
            let mut tables: Vec<u64> = Vec::new();
            for _ in 0..r.range(1, 3) {
                let t = *r.pick(live).unwrap_or(&live[0]);
                if !tables.contains(&t) {
                    tables.push(t);
                }
            }
            let slow = r
                .chance(0.6)
                .then(|| (tables[0], format!("n{}", r.range(1, nodes))));
            if let Some((t, n)) = &slow {
                out.push(format!(
                    "op = \"x-sink_latency\"\nnode = \"{n}\"\ntable = {t}\nms = {}",
                    r.range(200, 1500)
                ));
            }
            // Now and then one or two transactions larger than a feed batch: they go in parts
            // (few, so a snapshot copy in small chunks still ends within the liveness bounds).
            let (txns, rows) = if r.chance(0.3) {
                (r.range(1, 2), r.range(1100, 1600))
            } else {
                (r.range(1, 6), r.range(20, 400))
            };
            out.push(format!(
                "op = \"x-write_txn\"\ntables = {tables:?}\ntxns = {txns}\nrows = {rows}"
            ));
            if let Some((t, n)) = slow {
                out.push(format!("op = \"run\"\nms = {}", r.range(100, 2000)));
                out.push(format!(
                    "op = \"x-sink_latency\"\nnode = \"{n}\"\ntable = {t}\nms = 0"
                ));
            }
        }
        out
    }
}

/// Random faults and timings added to a given scenario: a `faults` step at the start.
fn with_random_faults(base: &Scenario, seed: u64) -> Scenario {
    let mut sc = base.clone();
    let mut r = Rng::new(seed ^ 0x5EED);
    sc.world.seed = seed;
    let f = scenario::Faults {
        drop: r.range(0, 15) as f64 / 100.0,
        duplicate: r.range(0, 10) as f64 / 100.0,
        reorder: r.chance(0.5),
        delay_ms: (0, r.range(0, 100)),
    };
    sc.steps.insert(
        0,
        scenario::Step {
            number: 0,
            op: scenario::Op::Faults(f),
        },
    );
    sc
}

pub fn explore(start: u64, seeds: u64, base: Option<&Scenario>, verbose: bool) -> Report {
    explore_with(start, seeds, base, verbose, true)
}

/// `explore`, with or without sink faults in random worlds.
pub fn explore_with(
    start: u64,
    seeds: u64,
    base: Option<&Scenario>,
    verbose: bool,
    sink_faults: bool,
) -> Report {
    let mut rep = Report::default();
    let t0 = Instant::now();
    for seed in start..start + seeds {
        let sc = match base {
            Some(b) => with_random_faults(b, seed),
            None => parse_generated(seed, generate(seed, sink_faults)),
        };
        let mut sim = Sim::new(sc, seed);
        sim.explore = base.is_some();
        sim.verbose = verbose;
        let res = sim.run();
        rep.events += sim.events;
        rep.simulated_ms += sim.now;
        rep.skipped_expects += sim.skipped_expects;
        for (k, v) in &sim.fault_counts {
            *rep.faults.entry(k).or_default() += v;
        }
        for (k, v) in &sim.coverage {
            *rep.coverage.entry(*k).or_default() += v;
        }
        match res {
            Ok(()) => rep.passed += 1,
            Err(f) => rep.failed.push((
                seed,
                format!(
                    "{}{} (trace {:016x})",
                    f.step.map(|s| format!("step {s}: ")).unwrap_or_default(),
                    f.message,
                    sim.trace_hash()
                ),
            )),
        }
    }
    rep.wall_ms = t0.elapsed().as_millis();
    rep
}
