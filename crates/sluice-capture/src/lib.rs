//! Capture from MariaDB/MySQL: the upstream check ([`check`]), the binlog reader ([`binlog`]),
//! row decoding ([`decode`]), commit ts and positions ([`pos`]), row keys ([`keys`]), the schema
//! history ([`schema`]), the glue that turns transactions into Sluice events ([`capture`]) and
//! the per-node event store ([`store`]).
//!
//! Invariants kept by this crate (each module states its own in detail):
//! - the commit ts is a pure function of the binlog (`(file index << 32) | end position`), and
//!   table ids are a pure function of the schema history, so readers on different nodes started
//!   at different positions produce identical `(table id, key, commit ts)` for the same rows;
//! - a resumed reader has no gap and repeats only the transaction it had not finished;
//! - errors are typed and classified retryable or fatal ([`error::CaptureError::class`]).

pub mod binlog;
pub mod capture;
pub mod check;
pub mod codec;
pub mod decode;
pub mod error;
pub mod heartbeat;
pub mod keys;
pub mod pos;
pub mod regions;
pub mod rowimage;
pub mod schema;
pub mod store;

pub use binlog::{BinlogReader, ReaderConfig, ReaderEvent, Transaction};
pub use check::check_upstream;
pub use error::{CaptureError, ErrorClass};
pub use pos::BinlogPos;
