//! Table partitioning as MariaDB/MySQL define it (`PARTITION BY RANGE|LIST|HASH|KEY …`): the
//! parser of a table version's layout ([`Layout::parse`], [`Layout::apply_alter`]) and the pure
//! function that places a row in a partition ([`Placer`]), plus the one charset and collation
//! model of Sluice ([`collation`]: latin1 as MariaDB's cp1252, sort orders, compiled-in default
//! collations), which capture's decoder and charset resolution use too.
//!
//! The layout itself ([`Partitioning`]) is vocabulary and lives in `sluice_types::partition`
//! (every [`TableSchema`] version carries one). Capture parses it from the DDL in the binlog or
//! from `SHOW CREATE TABLE` at the snapshot; the storage sink places rows with a [`Placer`],
//! made once per table version (its expression parsed once, not per row), for
//! `enable-partition-separator`.
//!
//! Layout rule: one file per concern — `lex.rs` (lexer, cutting partition options off a
//! statement), `parse.rs` (the `PARTITION BY` grammar), `alter.rs` (partition operations),
//! `eval.rs` (expressions and partition functions), `collation.rs` (charsets and collations),
//! `compare.rs` (values against bounds), `key_hash.rs` (KEY hashing), `place.rs` (placing a
//! row); modules are private, the surface is re-exported here.
//!
//! How the server places a row (checked against a live MariaDB 10.11):
//! - `RANGE (expr)`: the first partition whose bound is above the value; NULL goes to the first
//!   partition. `LIST (expr)`: the partition listing the value (NULL: the one listing NULL), else
//!   the `DEFAULT` partition. `RANGE|LIST COLUMNS`: the same over tuples, values compared with
//!   the column's collation, NULL below every value and equal to NULL;
//! - `HASH (expr)`: `abs(v % n)` with `v` the expression as a signed 64-bit integer (a BIGINT
//!   UNSIGNED above 2^63-1 wraps to negative; NULL is `i64::MIN`, not 0); `LINEAR HASH`: `v & (V-1)`
//!   with `V` the next power of two ≥ n, then `v & (V/2-1)` when that is ≥ n;
//! - `KEY (cols)`: MariaDB's `nr1/nr2` hash over each column's stored bytes, chained, then `% n`
//!   (or the linear mask). With `ALGORITHM=2` (the default) integers and YEAR are hashed as
//!   latin1_swedish_ci text (`my_hash_sort_simple`: weights through the collation's sort order,
//!   trailing 0x20 bytes dropped), with `ALGORITHM=1` as binary; ENUM/SET the other way round;
//!   dates and times as binary (DATETIME/TIMESTAMP in the MySQL 5.6 format MariaDB writes by
//!   default); text with the column's collation. The fields are hashed in table order, whatever
//!   the order of the KEY list.
//!
//! Invariants:
//! - [`Placer::partition_of`] returns the partition the upstream server itself puts the row
//!   in (checked against a live MariaDB in `sluice-capture/tests/partition.rs`), or an error naming
//!   what is not supported; it never guesses (a string comparison whose outcome depends on
//!   collation weights Sluice does not know is an error, not an approximation);
//! - a layout is a pure value: the same clause text parses to the same value on every node.

mod alter;
pub mod collation;
mod compare;
mod eval;
mod key_hash;
mod lex;
mod parse;
mod place;
#[cfg(test)]
mod tests;

pub use lex::split_partition_options;
pub use place::Placer;
pub use sluice_types::partition::{
    BoundValue, PartitionDef, PartitionError, PartitionMethod, Partitioning,
};
use sluice_types::{TableSchema, Value};

/// Parsing and applying layouts, on the vocabulary type (`Partitioning::parse(…)` reads as
/// before with this trait in scope).
pub trait Layout: Sized {
    /// Parses a `PARTITION BY …` clause (as a DDL or `SHOW CREATE TABLE` prints it).
    fn parse(clause: &str) -> Result<Self, PartitionError>;
    /// The layout after an `ALTER TABLE` partition operation (the text
    /// [`split_partition_options`] returned for an ALTER): `Ok(None)` when the table is no
    /// longer partitioned (`REMOVE PARTITIONING`); see [`alter`](crate) for each operation.
    fn apply_alter(current: Option<&Self>, op: &str) -> Result<Option<Self>, PartitionError>;
    /// The partition of `row` (one value per column of `schema`); parses the expression on
    /// every call: a sink placing many rows makes a [`Placer`] once instead.
    fn partition_of(&self, schema: &TableSchema, row: &[Value]) -> Result<usize, PartitionError>;
}

impl Layout for Partitioning {
    fn parse(clause: &str) -> Result<Partitioning, PartitionError> {
        parse::parse_clause(clause)
    }

    fn apply_alter(
        current: Option<&Partitioning>,
        op: &str,
    ) -> Result<Option<Partitioning>, PartitionError> {
        alter::apply_alter(current, op)
    }

    fn partition_of(&self, schema: &TableSchema, row: &[Value]) -> Result<usize, PartitionError> {
        Placer::new(self).partition_of(schema, row)
    }
}

pub(crate) fn err<T>(msg: impl Into<String>) -> Result<T, PartitionError> {
    Err(PartitionError(msg.into()))
}

/// The suffix of every "this row cannot be placed" error.
const SEPARATOR_HINT: &str =
    "set enable-partition-separator=false to write the table without partition directories";

pub(crate) fn cannot_place<T>(what: impl std::fmt::Display) -> Result<T, PartitionError> {
    err(format!("{what}; {SEPARATOR_HINT}"))
}
