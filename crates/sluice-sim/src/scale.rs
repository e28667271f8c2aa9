//! Scale runs (`sluice-sim scale`, issue 14's "1,000,000 spans on 10 nodes"): a world of many
//! spans on many nodes, one changefeed over it, run until the maintainer's span map says every
//! span is replicating. The scheduler is what is measured, so the invariant checkers are off
//! ([`Sim::checks`]), so is the per-message event trace (`Sim::trace`), the sink is the
//! blackhole and the tables hold no rows.
//!
//! This module owns the spec of such a world ([`ScaleSpec`]: its validation and the scenario it
//! becomes) and the run ([`run`]), which is deterministic: it never reads a clock. Wall time,
//! the timeout and peak RSS are measured by the caller (the CLI), which the run asks between
//! ticks whether to go on.
//!
//! Invariants: a spec with no spans, no nodes, no tables or more tables than spans is refused
//! with a message, never run; the span count is exact (the first `spans % tables` tables get one
//! region more); a table of one region is one span, a table of `r` regions is split into `r`
//! spans (`enable-table-across-nodes`, `region-threshold = 1`, `region-count-per-span = 1`).

use crate::scenario::{
    Op, QualifiedName, Scenario, SchedulerConfig, SinkKind, Step, TableDef, World,
    DEFAULT_CHANGEFEED,
};
use crate::world::{Sim, TICK_MS};
use sluice_types::{Millis, TableId};

/// Default span count (issue 14).
pub const DEFAULT_SPANS: u64 = 1_000_000;
/// Default node count (issue 14).
pub const DEFAULT_NODES: u64 = 10;
/// Spans per table unless `--tables` says otherwise.
pub const DEFAULT_SPANS_PER_TABLE: u64 = 100;
/// Simulated time a run may take: this much, plus [`SIM_MS_PER_SPAN`] per span.
pub const SIM_MS_BASE: Millis = 120_000;
/// Simulated ms allowed per span: a wide margin over the scheduler's pace (the changefeed's
/// `add-table-batch-size` adds per 100 ms tick, 1000 by default: 0.1 ms a span).
pub const SIM_MS_PER_SPAN: Millis = 10;

/// The world of a scale run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleSpec {
    pub spans: u64,
    pub nodes: u64,
    pub tables: u64,
    /// The changefeed's `add-table-batch-size` (default: the control plane's default).
    pub add_table_batch_size: u64,
}

impl ScaleSpec {
    /// `tables` defaults to one table per [`DEFAULT_SPANS_PER_TABLE`] spans (at least one).
    pub fn new(spans: u64, nodes: u64, tables: Option<u64>) -> Result<ScaleSpec, String> {
        let tables = tables.unwrap_or_else(|| (spans / DEFAULT_SPANS_PER_TABLE).max(1));
        let spec = ScaleSpec {
            spans,
            nodes,
            tables,
            add_table_batch_size: sluice_control::config::DEFAULT_ADD_TABLE_BATCH_SIZE as u64,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// The same world with the changefeed's `add-table-batch-size` set to `n`.
    pub fn with_add_table_batch_size(mut self, n: u64) -> Result<ScaleSpec, String> {
        self.add_table_batch_size = n;
        self.validate()?;
        Ok(self)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.spans == 0 {
            return Err("--spans must be at least 1".into());
        }
        if self.nodes == 0 {
            return Err("--nodes must be at least 1".into());
        }
        if self.tables == 0 {
            return Err("--tables must be at least 1".into());
        }
        if self.tables > self.spans {
            return Err(format!(
                "--tables {} is more than --spans {}: every table is at least one span",
                self.tables, self.spans
            ));
        }
        if self.add_table_batch_size == 0 {
            return Err("--add-table-batch-size must be at least 1".into());
        }
        if self.nodes > 100_000 {
            return Err(format!("--nodes {} is more than 100000", self.nodes));
        }
        Ok(())
    }

    /// Regions (= spans) of table number `i` (0-based).
    fn regions_of(&self, i: u64) -> u64 {
        self.spans / self.tables + u64::from(i < self.spans % self.tables)
    }

    /// The simulated time the run may take before it counts as stuck.
    pub fn sim_bound_ms(&self) -> Millis {
        SIM_MS_BASE.saturating_add(self.spans.saturating_mul(SIM_MS_PER_SPAN))
    }

    /// The world as a scenario: nodes `n1..`, tables `scale.t1..` (ids from 1), no rows, the
    /// blackhole sink, one step that creates the changefeed.
    pub fn scenario(&self) -> Scenario {
        let tables = (0..self.tables)
            .map(|i| TableDef {
                id: TableId(i + 1),
                name: QualifiedName {
                    schema: "scale".into(),
                    table: format!("t{}", i + 1),
                },
                regions: self.regions_of(i),
                rows: 0,
            })
            .collect();
        let world = World {
            nodes: (1..=self.nodes).map(|i| format!("n{i}")).collect(),
            maintainer: None,
            sink: SinkKind::Blackhole,
            seed: 0,
            scheduler: SchedulerConfig {
                enable_table_across_nodes: true,
                region_threshold: 1,
                region_count_per_span: 1,
                balance: false,
                x_write_key_threshold: 0,
                add_table_batch_size: self.add_table_batch_size,
            },
            tables,
            x_lease_ms: None,
            x_memory_quota_bytes: None,
            x_snapshot: sluice_control::config::SnapshotMode::Never,
            x_snapshot_chunk_rows: None,
            x_snapshot_read_window: false,
        };
        let create = Step {
            number: 1,
            op: Op::CreateChangefeed {
                changefeed: DEFAULT_CHANGEFEED.into(),
            },
        };
        Scenario {
            file: "<scale>".into(),
            name: format!("scale: {} spans on {} nodes", self.spans, self.nodes),
            description: None,
            world,
            steps: vec![create],
        }
    }

    /// The world with its checkers and event trace off and the changefeed's creation requested.
    pub fn build(&self) -> Result<Sim, String> {
        self.validate()?;
        let mut sim = Sim::new(self.scenario(), 0);
        sim.checks = false;
        sim.trace = false;
        sim.run_step(0).map_err(|f| f.message)?;
        Ok(sim)
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every span of the maintainer's map is replicating, and there are `spans` of them.
    AllReplicating,
    /// The caller said stop (its timeout).
    Stopped,
    /// The simulated-time bound ([`ScaleSpec::sim_bound_ms`]) passed first.
    SimBound,
}

/// Where a run is: the maintainer's spans and how many replicate (`None`: no ready maintainer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub spans: Option<usize>,
    pub replicating: usize,
    pub sim_ms: Millis,
    pub events: u64,
}

/// The progress of `sim` now (a pass over the whole span map).
pub fn progress(sim: &Sim) -> Progress {
    let counts = sim.span_counts();
    Progress {
        spans: counts.map(|c| c.0),
        replicating: counts.map_or(0, |c| c.1),
        sim_ms: sim.now,
        events: sim.events,
    }
}

/// Whether every one of the `want` spans replicates. Cheap while operators are in flight (the
/// span map is only read when there are none).
fn done(sim: &Sim, want: u64) -> bool {
    if sim.operators_in_flight() != Some(0) {
        return false;
    }
    matches!(sim.span_counts(), Some((n, r)) if n as u64 == want && r == n)
}

/// Runs `sim` (built from `spec`) a tick at a time until every span replicates, the simulated
/// bound passes, or `go_on` (asked before every tick) says stop. An invariant the world still
/// checks that fails, or a stuck run, is an error.
pub fn run(
    sim: &mut Sim,
    spec: &ScaleSpec,
    mut go_on: impl FnMut(&Sim) -> bool,
) -> Result<Outcome, String> {
    let bound = spec.sim_bound_ms();
    loop {
        if done(sim, spec.spans) {
            return Ok(Outcome::AllReplicating);
        }
        if sim.now >= bound {
            return Ok(Outcome::SimBound);
        }
        if !go_on(sim) {
            return Ok(Outcome::Stopped);
        }
        let next = sim.now + TICK_MS;
        sim.advance(next).map_err(|f| f.message)?;
    }
}
