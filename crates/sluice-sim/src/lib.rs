//! The deterministic simulator: runs scenario files and random explorations against Sluice's real
//! control-plane state machines (`sluice-control`), with models of everything else.

pub mod check;
pub mod downstream;
pub mod explore;
pub mod meta;
pub mod rng;
pub mod scenario;
pub mod upstream;
pub mod world;
