//! The row and DDL event model: what capture produces, the event store keeps, dispatchers pass
//! through and sinks encode. (The capture issue owns and extends this module.)
//!
//! Invariants: a [`RowEvent`] carries the commit ts of its transaction and the key it is routed
//! by; an update that changes the key is emitted as a delete and an insert. A [`DdlEvent`]
//! carries the [`DdlInfluence`] the barrier uses to decide who must stop at it. A row carries a
//! value for every column of its schema version, generated ones included (the binlog's full row
//! image has them); a generated column is in the routing key only when the upstream's key has it.

use crate::ids::{TableId, Ts};
use crate::key::Key;
use serde::{Deserialize, Serialize};

/// The column types Sluice decodes (MySQL/MariaDB type families).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ColumnType {
    TinyInt,
    SmallInt,
    MediumInt,
    Int,
    BigInt,
    Decimal,
    Float,
    Double,
    Char,
    VarChar,
    Text,
    Binary,
    VarBinary,
    Blob,
    Date,
    Time,
    DateTime,
    Timestamp,
    Year,
    Enum,
    Set,
    Bit,
    Json,
    Geometry,
}

/// One column of a table schema version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    pub ty: ColumnType,
    /// The full SQL type as the upstream prints it, e.g. `decimal(10,2) unsigned`.
    pub sql_type: String,
    pub unsigned: bool,
    pub nullable: bool,
    pub charset: Option<String>,
    pub collation: Option<String>,
    /// ENUM/SET member names in definition order.
    pub elements: Vec<String>,
    /// Fractional seconds precision for TIME/DATETIME/TIMESTAMP, scale for DECIMAL.
    pub decimals: u8,
    pub length: u64,
    /// `Some` for a generated column (`AS (expr) VIRTUAL|PERSISTENT|STORED`): the server computes
    /// its value from the other columns, so a database downstream computes it too and refuses
    /// writes to it. Absent in histories persisted before it existed (no generated columns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated: Option<Generation>,
}

/// How a generated column is kept: computed on read (`VIRTUAL`) or stored with the row
/// (`STORED`, which MariaDB also spells `PERSISTENT`); a system-versioned table's period
/// columns (`GENERATED ALWAYS AS ROW START` / `ROW END`, explicit or MariaDB's implicit
/// `row_start`/`row_end`) are stored columns the server sets, and `RowEnd` tells a current row
/// from a history row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Generation {
    Virtual,
    Stored,
    RowStart,
    RowEnd,
}

impl Generation {
    /// The `information_schema.COLUMNS` expression [`Generation::from_extra`] reads: `EXTRA`,
    /// followed by ` ROW_START` / ` ROW_END` for a period column (its `GENERATION_EXPRESSION`).
    pub const EXTRA_SQL: &'static str =
        "CONCAT(EXTRA, IF(GENERATION_EXPRESSION IN ('ROW START', 'ROW END'), \
         CONCAT(' ', REPLACE(GENERATION_EXPRESSION, ' ', '_')), ''))";

    /// A generated column as [`Generation::EXTRA_SQL`] shows it: `VIRTUAL GENERATED` or
    /// `STORED GENERATED` (MariaDB before 10.2: `VIRTUAL`, `PERSISTENT`), possibly followed by
    /// `, INVISIBLE`, and ` ROW_START` / ` ROW_END` for a period column. MySQL's
    /// `DEFAULT_GENERATED` (a DEFAULT expression) is not one.
    pub fn from_extra(extra: &str) -> Option<Generation> {
        let upper = extra.to_ascii_uppercase();
        let words: Vec<&str> = upper
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        let period = words.iter().find_map(|w| match *w {
            "ROW_START" => Some(Generation::RowStart),
            "ROW_END" => Some(Generation::RowEnd),
            _ => None,
        });
        period.or_else(|| {
            words.iter().find_map(|w| match *w {
                "VIRTUAL" => Some(Generation::Virtual),
                "STORED" | "PERSISTENT" => Some(Generation::Stored),
                _ => None,
            })
        })
    }

    /// The SQL word (`VIRTUAL` or `STORED`, which information_schema also says of the period
    /// columns).
    pub fn as_sql(self) -> &'static str {
        match self {
            Generation::Virtual => "VIRTUAL",
            Generation::Stored | Generation::RowStart | Generation::RowEnd => "STORED",
        }
    }
}

/// A table as it was between two DDLs (a schema version, named by the commit ts of the DDL
/// that produced it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    pub table_id: TableId,
    pub database: String,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Indexes into `columns` of the key the rows are routed by (primary key, else a not-null
    /// unique key). Empty: the table has no such key and is one unsplittable span.
    pub key_columns: Vec<usize>,
    /// Other unique keys (column indexes each), for causality ordering in the MySQL sink.
    pub unique_keys: Vec<Vec<usize>>,
    /// Commit ts of the DDL that produced this version (0 for the snapshot).
    pub version: Ts,
    /// `PARTITION BY …` of this version, if the table is partitioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitioning: Option<crate::partition::Partitioning>,
}

impl TableSchema {
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.database, self.name)
    }

    /// Indexes of the columns a downstream write sets: every column but the generated ones.
    pub fn written_columns(&self) -> Vec<usize> {
        (0..self.columns.len())
            .filter(|i| self.columns[*i].generated.is_none())
            .collect()
    }
}

/// A typed column value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    Null,
    Int(i64),
    UInt(u64),
    Float(f32),
    Double(f64),
    /// Exact decimal as its canonical text (no float rounding).
    Decimal(String),
    /// Character data decoded to UTF-8 from the column's charset.
    Text(String),
    /// Binary data (BINARY, VARBINARY, BLOB) and character data that is not valid in its charset.
    Bytes(Vec<u8>),
    Date {
        year: u16,
        month: u8,
        day: u8,
    },
    Time {
        negative: bool,
        hours: u32,
        minutes: u8,
        seconds: u8,
        micros: u32,
    },
    DateTime {
        year: u16,
        month: u8,
        day: u8,
        hour: u8,
        minute: u8,
        second: u8,
        micros: u32,
    },
    /// Microseconds since the Unix epoch, UTC.
    Timestamp {
        micros: i64,
    },
    Year(u16),
    Enum {
        index: u16,
        name: String,
    },
    Set {
        bits: u64,
        names: Vec<String>,
    },
    Bit {
        bits: u64,
        width: u16,
    },
    Json(String),
    Geometry(Vec<u8>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RowKind {
    Insert,
    Update,
    Delete,
}

/// A MariaDB GTID `domain-server-seq`: the transaction's id in the upstream's replication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Gtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
}

impl std::fmt::Display for Gtid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

/// One committed row change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowEvent {
    pub table_id: TableId,
    /// Schema version the row was decoded with.
    pub schema_version: Ts,
    pub commit_ts: Ts,
    /// Upstream commit time in ms since the Unix epoch, as well as it is known.
    pub commit_time_ms: u64,
    pub kind: RowKind,
    /// The key the change is routed by (see [`Key::row`]).
    pub key: Key,
    pub before: Option<Vec<Value>>,
    pub after: Option<Vec<Value>>,
    /// A snapshot read of the row (an initial or requested copy), not a change in the binlog:
    /// an insert of the row as it was, which sinks mark where their protocol has a place for it
    /// (Debezium's `op: "r"`, canal-json's TiDB extension). Never set on captured changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub snapshot: bool,
    /// The upstream transaction's GTID (MariaDB), when the binlog has one; `None` for snapshot
    /// reads and upstreams without GTIDs. Sinks that have a place for it show it (Debezium's
    /// `source.gtid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<Gtid>,
}

/// The DDL kinds the control plane distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DdlKind {
    CreateDatabase,
    DropDatabase,
    CreateTable,
    DropTable,
    TruncateTable,
    RenameTable,
    AlterTable,
    CreateView,
    DropView,
    /// `ALTER DATABASE`/`ALTER SCHEMA`: the database's defaults (charset, collation, comment).
    AlterDatabase,
    Other,
    /// Not a statement to replicate: changes of these tables happened upstream that the binlog
    /// does not carry as full rows (statement-format DML, an incomplete row image, rows capture
    /// cannot decode). `query` says what and how to fix it. Dispatchers stop at it; it is never
    /// written to a sink.
    Unreplicable,
}

/// Which dispatchers a DDL concerns (TiCDC's influence types).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum InfluenceScope {
    /// Exactly these tables (plus the table trigger when `trigger` is set in [`DdlInfluence`]).
    Tables(Vec<TableId>),
    /// Every table of a database.
    Database(String),
    /// Every table of the changefeed.
    All,
}

/// What a DDL does to the set of replicated tables and who must stop at it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DdlInfluence {
    pub scope: InfluenceScope,
    /// The table trigger takes part (it writes DDLs that create, drop or rename tables and
    /// database- or cluster-level DDLs).
    pub trigger: bool,
    /// Tables that stop existing at this DDL's commit ts.
    pub dropped: Vec<TableId>,
    /// Tables that start existing at this DDL's commit ts: (id, `db.table`, regions boundaries
    /// are looked up separately).
    pub added: Vec<(TableId, String)>,
    /// Tables renamed: (id, new `db.table`).
    pub renamed: Vec<(TableId, String)>,
    /// Tables whose definition the DDL reads without changing them: the source of `CREATE TABLE
    /// … LIKE`, the parent of a foreign key. Their dispatchers stop at it too, so everything
    /// before it (their own DDLs included) is downstream first; they get no new version and do
    /// not by themselves make the DDL concern a changefeed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<TableId>,
}

impl DdlInfluence {
    /// An influence on `scope` that adds, drops and renames nothing (the table trigger takes
    /// part when `trigger`).
    pub fn scoped(scope: InfluenceScope, trigger: bool) -> DdlInfluence {
        DdlInfluence {
            scope,
            trigger,
            dropped: vec![],
            added: vec![],
            renamed: vec![],
            sources: vec![],
        }
    }
}

/// One committed DDL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DdlEvent {
    pub commit_ts: Ts,
    pub commit_time_ms: u64,
    pub kind: DdlKind,
    /// Default database of the statement.
    pub database: String,
    /// The statement as the upstream logged it.
    pub query: String,
    pub influence: DdlInfluence,
    /// The upstream session settings the statement ran under, where they change what it does
    /// (empty for events recorded before capture read them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Box<DdlSession>>,
    /// The database of what a DDL that changes no table creates or drops (a view), when the
    /// statement names one: where a storage sink records the DDL. `None`: `database`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_database: Option<Box<str>>,
}

impl DdlEvent {
    /// The database a DDL belongs to: its object's, else the statement's default database.
    pub fn target_database(&self) -> &str {
        self.object_database.as_deref().unwrap_or(&self.database)
    }
}

/// The settings of the upstream session a DDL ran under that change its meaning, read from the
/// QUERY event's status variables. A sink that executes DDL runs it under the same settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DdlSession {
    /// `@@sql_mode`, as MariaDB spells it (`PIPES_AS_CONCAT,ANSI_QUOTES,…,MAXDB`; "" for none):
    /// `MAXDB` makes TIMESTAMP a DATETIME, `ANSI_QUOTES` reads `"x"` as a name, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql_mode: Option<String>,
    /// `@@collation_server` by id: the default of a `CREATE DATABASE` that names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collation_server: Option<u16>,
    /// `@@collation_connection` by id: the collation of string literals in the statement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collation_connection: Option<u16>,
    /// `@@time_zone` when the statement used it (a TIMESTAMP default given as a literal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// `@@foreign_key_checks` was 0 (a foreign key to a table created later).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_foreign_key_checks: bool,
    /// The error the statement ended with upstream: MariaDB logs a failed DDL that changed
    /// something (a `CREATE OR REPLACE TABLE` that failed after dropping the old table), and a
    /// sink whose downstream gives the same error has done what the upstream did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_error: Option<u16>,
}

impl DdlSession {
    pub fn is_empty(&self) -> bool {
        *self == DdlSession::default()
    }
}
