//! Sluice's control plane: the coordinator, the maintainer (span map, operators, schedulers,
//! barrier, bootstrap, checkpoint) and the dispatcher manager with its dispatchers, written as
//! synchronous state machines that take `(now, input)` and return effects.
//!
//! No IO, no async, no wall clock, no thread RNG and no `HashMap` iteration: the server's async
//! shell and the simulator drive this very code.
