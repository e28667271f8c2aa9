//! Table partitioning as vocabulary: the layout of one table version (`PARTITION BY
//! RANGE|LIST|HASH|KEY …`) that every [`TableSchema`](crate::TableSchema) version carries.
//! Parsing a layout and placing rows in partitions is `sluice-partition`'s.
//!
//! Invariant: a layout is a pure value: the same clause text parses to the same value on
//! every node.

use serde::{Deserialize, Serialize};

/// How rows are assigned to partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionMethod {
    /// `RANGE (expr)`.
    Range,
    /// `RANGE COLUMNS (c1, …)`.
    RangeColumns,
    /// `LIST (expr)`.
    List,
    /// `LIST COLUMNS (c1, …)`.
    ListColumns,
    /// `[LINEAR] HASH (expr)`.
    Hash,
    /// `[LINEAR] KEY [ALGORITHM=n] (c1, …)` (empty list: the primary key).
    Key,
    /// MariaDB `SYSTEM_TIME` (system-versioned tables).
    SystemTime,
    /// A layout Sluice could not model (see [`Partitioning::unsupported`]); rows cannot be placed.
    Unsupported,
}

/// A literal in a partition bound (`VALUES LESS THAN (…)` / `VALUES IN (…)`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BoundValue {
    Int(i128),
    Text(String),
    Null,
    MaxValue,
}

/// One partition definition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionDef {
    pub name: String,
    /// `VALUES LESS THAN (v1, …)`: one value per expression/column. Empty for HASH/KEY.
    pub less_than: Vec<BoundValue>,
    /// `VALUES IN ((v1, …), …)`: each entry one tuple (one value for `LIST (expr)`). Empty for
    /// other methods. MariaDB's `DEFAULT` partition of a LIST is marked by `default_list`.
    pub values_in: Vec<Vec<BoundValue>>,
    pub default_list: bool,
}

impl PartitionDef {
    /// A definition with only a name (HASH/KEY partitions).
    pub fn named(name: impl Into<String>) -> PartitionDef {
        PartitionDef {
            name: name.into(),
            less_than: Vec::new(),
            values_in: Vec::new(),
            default_list: false,
        }
    }
}

/// The partitioning of one table version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partitioning {
    pub method: PartitionMethod,
    /// `LINEAR HASH` / `LINEAR KEY`.
    pub linear: bool,
    /// The partitioning expression as written (RANGE/LIST/HASH), empty otherwise.
    pub expr: String,
    /// The column list (RANGE COLUMNS, LIST COLUMNS, KEY), as written.
    pub columns: Vec<String>,
    /// `ALGORITHM=n` of KEY partitioning (MariaDB/MySQL default 2).
    pub key_algorithm: u8,
    /// Partitions in definition order (HASH/KEY with only `PARTITIONS n`: `p0` … `p{n-1}`).
    pub partitions: Vec<PartitionDef>,
    /// Why this layout cannot be modelled ([`PartitionMethod::Unsupported`]): the clause text
    /// and the reason; `sluice_partition::Placer` returns it as its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
}

/// Why a partition clause cannot be parsed or a row cannot be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionError(pub String);

impl std::fmt::Display for PartitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PartitionError {}

impl Partitioning {
    /// A layout Sluice cannot model (`clause` as written, `reason` why): capture records it and
    /// goes on; `sluice_partition::Placer::partition_of` reports `reason` for every row.
    pub fn unsupported(clause: &str, reason: &str) -> Partitioning {
        Partitioning {
            method: PartitionMethod::Unsupported,
            linear: false,
            expr: clause.trim().to_string(),
            columns: Vec::new(),
            key_algorithm: 2,
            partitions: Vec::new(),
            unsupported: Some(reason.to_string()),
        }
    }
}
