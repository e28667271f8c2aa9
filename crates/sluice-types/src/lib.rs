//! Shared vocabulary of Sluice: identifiers (changefeed, node, table, dispatcher, maintainer
//! epoch), commit timestamps, keys and key spans, the row and DDL event model, the error classes
//! and the table of server error codes every crate classifies by, and civil-calendar arithmetic.
//!
//! Invariants kept here:
//! - a [`Key`] orders bytewise, and every key of table `t` lies inside [`Span::whole_table`]`(t)`;
//! - a [`Span`] is a half-open range `[start, end)` with `start < end`, always within one table;
//! - a [`Ts`] (commit ts) totally orders upstream transactions; it is not a wall-clock time.
//!
//! Layout rule: one file per piece of vocabulary (ids, keys and spans, events, partitioning's
//! description, the error classes, the civil calendar); no logic that needs IO or a driver
//! (the MySQL driver's error text is behind the `mysql` feature).

pub mod civil;
pub mod error_class;
pub mod event;
pub mod ids;
pub mod key;
pub mod partition;
pub mod sink_rules;

pub use error_class::{server_error_class, ErrorClass};
pub use event::*;
pub use ids::*;
pub use key::*;
pub use partition::{PartitionError, Partitioning};
