//! The deterministic simulator: runs scenario files and random explorations against Sluice's real
//! control-plane state machines (`sluice-control`), with models of everything else.
//!
//! Layout rule: one concern per file (the world that delivers messages and faults, the model
//! upstream and downstream, the scenario reader, the explorer, the checker with its
//! invariants); a type's `impl` blocks may spread over the files of its module. A module that
//! outgrows one file keeps its root file (`world.rs`, `scenario.rs`: its types and entry points)
//! and puts its parts, one concern each, in the folder of that name (`world/`: `nodes.rs`,
//! `network.rs`, `events.rs`, `feed.rs`, `sinks.rs`, `requests.rs`, `queries.rs`, `run.rs`,
//! `steps.rs`; `scenario/`: `parse.rs`, `step.rs`, `expect.rs`, `fields.rs`, `tests.rs`); each
//! file opens with a `//!` saying what it owns. `scale` builds and runs the worlds of
//! `sluice-sim scale` (many spans, checkers off).

pub mod check;
pub mod downstream;
pub mod explore;
pub mod meta;
pub mod rng;
pub mod scale;
pub mod scenario;
pub mod upstream;
pub mod world;
