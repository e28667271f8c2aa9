//! The deterministic simulator: runs scenario files and random explorations against Sluice's real
//! control-plane state machines (`sluice-control`), with models of everything else.
//!
//! Layout rule: one concern per file (the world that delivers messages and faults, the model
//! upstream and downstream, the scenario reader, the explorer, the checker with its
//! invariants); a type's `impl` blocks may spread over the files of its module.

pub mod check;
pub mod downstream;
pub mod explore;
pub mod meta;
pub mod rng;
pub mod scenario;
pub mod upstream;
pub mod world;
