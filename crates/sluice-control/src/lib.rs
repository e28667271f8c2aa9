//! Sluice's control plane: the coordinator, the maintainer (span map, operators, schedulers,
//! barrier, bootstrap, checkpoint) and the dispatcher manager with its dispatchers, written as
//! synchronous state machines that take `(now, input)` and return effects.
//!
//! No IO, no async, no wall clock, no thread RNG and no `HashMap` iteration: the server's async
//! shell and the simulator drive this very code through [`node::NodeState`].
//!
//! The invariants this crate keeps, and where:
//! - one writer per key range: [`dispatcher`] refuses overlapping dispatchers on a node and
//!   closes before it reopens; [`maintainer`] never requests a dispatcher over keys that a
//!   dispatcher it knows of may still write (both look a span up among its table's dispatchers
//!   by key, `span_index.rs`);
//! - epoch fencing: [`dispatcher::DispatcherManager`] admits scheduling messages only from its
//!   current `(maintainer node, epoch)`, and a maintainer drops reports of other epochs;
//! - the data path between the event source and the dispatchers (whole transactions, or the
//!   parts of one too large for a batch, never resolved inside it; the memory quota, row handles) is [`feed`], run by the server and the simulator alike;
//! - the checkpoint never goes backwards and never passes unflushed data
//!   ([`maintainer`] computes it, [`coordinator`] persists it with a leadership-fenced write).
//!
//! Layout rule: one concern per file; a type's `impl` blocks may spread over the files of its
//! module (the coordinator's over `coordinator/{mod,meta_result,status,placement,requests,
//! progress,tick}.rs`, the maintainer's over `maintainer/{mod,bootstrap,reports,barrier,operator,
//! scheduler,checkpoint,replay,requests}.rs`, the dispatcher manager's over `dispatcher/{mod,
//! lifecycle,barrier,events,pump,floor}.rs`), each file opening with what it owns and the
//! invariants it keeps; a `match` stays in its parent and each arm is a named helper (no
//! function over 100 lines).

pub mod config;
pub mod coordinator;
pub mod dispatcher;
pub mod feed;
pub mod filter;
pub mod hold;
pub mod io;
pub mod maintainer;
pub mod meta;
pub mod msg;
#[cfg(feature = "mutations")]
pub mod mutations;
pub mod node;
mod span_index;

pub use io::{Effect, Input, SinkCommand, StreamItem, TraceEvent};
