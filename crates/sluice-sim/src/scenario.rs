//! Scenario files: parsing and validation.
//!
//! A scenario is a TOML file describing a small world (nodes, upstream tables, scheduler
//! settings, one model sink) and an ordered list of steps run in simulated time. The format is
//! a public contract, specified in `scenarios/contract/FORMAT.md` (a copy of the steering
//! repository's, beside its example scenarios) and summarized, together with the project's `x-`
//! extensions, in `docs/scenario-format.md`.
//!
//! This module turns a file into a typed [`Scenario`] and rejects every invalid file with a
//! [`ScenarioError`] naming the file, the step (1-based) and what is wrong: unknown fields or
//! ops, missing or ill-typed fields, more than one condition in an `expect`, a node not in the
//! world, a table id that neither the world nor an earlier `ddl` step declares. The simulator
//! exits with status 2 on such errors ([`ScenarioError::EXIT_CODE`]).
//!
//! The parser walks a `toml::Table` by hand rather than using `serde` derives: an `op`-tagged
//! step has per-op fields, `expect` needs "exactly one condition" semantics and table ids need
//! cross-step validation, none of which `deny_unknown_fields` expresses with useful messages.
//!
//! Files: this one owns the typed format (the world, the steps, their conditions, the error) and
//! the entry points; the parser's parts are in `scenario/`: `parse.rs` the top level and
//! `[world]`, `step.rs` one step and its op, `expect.rs` an `expect` step's condition,
//! `fields.rs` reading a TOML table's fields and checking nodes and tables, `tests.rs` the unit
//! tests.

use std::fmt;
use std::path::Path;

use sluice_types::TableId;

mod expect;
mod fields;
mod parse;
mod step;
#[cfg(test)]
mod tests;

use parse::Parser;

/// Default `max-ms` of a `settle` step.
pub const DEFAULT_SETTLE_MAX_MS: u64 = 120_000;
/// Default changefeed name of `create_changefeed`.
pub const DEFAULT_CHANGEFEED: &str = "cf";

/// A parsed and validated scenario file.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file name the scenario was read from (as given to [`parse_file`] / [`parse_str`]).
    pub file: String,
    /// Short title (`name`).
    pub name: String,
    /// Optional free text (`description`).
    pub description: Option<String>,
    /// The world the steps run in (`[world]`).
    pub world: World,
    /// The steps, in file order (`[[step]]`).
    pub steps: Vec<Step>,
}

/// The simulated world: nodes, scheduler settings, sink and upstream tables.
#[derive(Debug, Clone)]
pub struct World {
    /// Node names, all started at time 0 (unique, non-empty).
    pub nodes: Vec<String>,
    /// Where the first maintainer of the changefeed is placed, if the file says so.
    pub maintainer: Option<String>,
    /// The model sink.
    pub sink: SinkKind,
    /// Seed (default 0); `--seed` overrides it.
    pub seed: u64,
    /// The changefeed's scheduler settings (`[world.scheduler]`).
    pub scheduler: SchedulerConfig,
    /// Upstream tables present at time 0 (`[[world.tables]]`).
    pub tables: Vec<TableDef>,
    /// Extension `x-lease-ms`: the node lease / session TTL in simulated ms, if set.
    pub x_lease_ms: Option<u64>,
    /// Extension `x-memory-quota-bytes`: every node's feed memory quota (a model row counts
    /// `upstream::ROW_BYTES`), if set.
    pub x_memory_quota_bytes: Option<u64>,
    /// Extension `x-snapshot`: the changefeed's snapshot mode (`never`, `initial`); with
    /// `initial` the model sink starts with the tables but none of their rows.
    pub x_snapshot: sluice_control::config::SnapshotMode,
    /// Extension `x-snapshot-chunk-rows`: rows per snapshot chunk.
    pub x_snapshot_chunk_rows: Option<u64>,
    /// Extension `x-snapshot-read = "window"`: chunks are window reads (an upstream that cannot
    /// name its snapshot's position, as MySQL), not reads at a named position (`"position"`).
    pub x_snapshot_read_window: bool,
}

/// The model sink kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// Files with at-least-once rows; an identical DDL may appear twice.
    Storage,
    /// Table state plus a DDL progress record; a DDL takes effect once.
    Mysql,
    /// Only counts; `sink-matches-upstream` is invalid with it.
    Blackhole,
}

/// The changefeed's scheduler settings (`[world.scheduler]`, kebab-case keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// `enable-table-across-nodes` (default false): tables may be split into several spans.
    pub enable_table_across_nodes: bool,
    /// `region-threshold` (default 10000): a table with more regions than this is split.
    pub region_threshold: u64,
    /// `region-count-per-span` (default 100): target regions per span when splitting.
    pub region_count_per_span: u64,
    /// `balance` (default true): false turns off balancing, splitting and merging of running spans.
    pub balance: bool,
    /// Extension `x-write-key-threshold` (default 0, off): a span written faster than this many
    /// rows per second is split (with `enable-table-across-nodes` and `balance`).
    pub x_write_key_threshold: u64,
    /// `add-table-batch-size` (default the control plane's, 1000): absent spans given an add
    /// operator per maintainer tick.
    pub add_table_batch_size: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            enable_table_across_nodes: false,
            region_threshold: 10_000,
            region_count_per_span: 100,
            balance: true,
            x_write_key_threshold: 0,
            add_table_batch_size: sluice_control::config::DEFAULT_ADD_TABLE_BATCH_SIZE as u64,
        }
    }
}

/// A `schema.table` name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QualifiedName {
    /// The database (schema) part; databases exist implicitly.
    pub schema: String,
    /// The table part.
    pub table: String,
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.table)
    }
}

/// An upstream table of the world (`[[world.tables]]`).
#[derive(Debug, Clone)]
pub struct TableDef {
    /// Table id (unique, positive).
    pub id: TableId,
    /// `schema.table`.
    pub name: QualifiedName,
    /// Upstream regions (key ranges) of the table (default 1, at least 1).
    pub regions: u64,
    /// Rows present before the changefeed starts (default 0).
    pub rows: u64,
}

/// A reference to a node: a world node name or one of the `@` aliases.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NodeRef {
    /// A node named in `[world] nodes`.
    Name(String),
    /// `"@maintainer"`: where the coordinator last placed the changefeed's maintainer.
    Maintainer,
    /// `"@coordinator"`: the current coordinator.
    Coordinator,
    /// `"@ddl-writer"`: the node of the dispatcher chosen to write the oldest pending blocking DDL.
    DdlWriter,
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeRef::Name(n) => f.write_str(n),
            NodeRef::Maintainer => f.write_str("@maintainer"),
            NodeRef::Coordinator => f.write_str("@coordinator"),
            NodeRef::DdlWriter => f.write_str("@ddl-writer"),
        }
    }
}

/// A hold point: a per-node switch that stops one kind of work until released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HoldPoint {
    /// `create_dispatcher`: requested span dispatchers are accepted but do not start.
    CreateDispatcher,
    /// `close_dispatcher`: dispatchers on the node never finish closing.
    CloseDispatcher,
    /// `bootstrap_response`: the node does not answer a new maintainer's bootstrap.
    BootstrapResponse,
    /// `sink_flush`: sinks accept writes but do not acknowledge flushes.
    SinkFlush,
    /// `ddl_before_write`: the chosen writer does not write the blocking DDL.
    DdlBeforeWrite,
    /// `ddl_after_write`: the blocking DDL is written but the writer does not report it.
    DdlAfterWrite,
    /// `ddl_before_pass`: dispatchers told to pass a blocking DDL do not pass it.
    DdlBeforePass,
    /// `ddl_after_pass`: dispatchers passed the blocking DDL but do not report it.
    DdlAfterPass,
}

impl HoldPoint {
    /// Every hold point, with its name in the file.
    pub const ALL: [(HoldPoint, &'static str); 8] = [
        (HoldPoint::CreateDispatcher, "create_dispatcher"),
        (HoldPoint::CloseDispatcher, "close_dispatcher"),
        (HoldPoint::BootstrapResponse, "bootstrap_response"),
        (HoldPoint::SinkFlush, "sink_flush"),
        (HoldPoint::DdlBeforeWrite, "ddl_before_write"),
        (HoldPoint::DdlAfterWrite, "ddl_after_write"),
        (HoldPoint::DdlBeforePass, "ddl_before_pass"),
        (HoldPoint::DdlAfterPass, "ddl_after_pass"),
    ];

    /// The name used in scenario files.
    pub fn name(self) -> &'static str {
        HoldPoint::ALL
            .iter()
            .find(|(p, _)| *p == self)
            .map(|(_, n)| *n)
            .unwrap_or("?")
    }

    fn parse(s: &str) -> Option<HoldPoint> {
        HoldPoint::ALL
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(p, _)| *p)
    }
}

/// The kind of control message matched by an `x-drop` step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MessageKind {
    /// `create`: maintainer → dispatcher manager, create (add / move destination / split target).
    Create,
    /// `remove`: maintainer → dispatcher manager, remove a dispatcher.
    Remove,
    /// `merge`: maintainer → dispatcher manager, merge request.
    Merge,
    /// `bootstrap`: a new maintainer's bootstrap request.
    Bootstrap,
    /// `bootstrap_response`: a dispatcher manager's bootstrap snapshot.
    BootstrapResponse,
    /// `heartbeat`: dispatcher manager → maintainer statuses and watermark.
    Heartbeat,
    /// `block_status`: a dispatcher's barrier status (WAITING / DONE).
    BlockStatus,
    /// `barrier_action`: maintainer → dispatcher Write / Pass.
    BarrierAction,
    /// `maintainer_status`: maintainer → coordinator status.
    MaintainerStatus,
    /// `add_maintainer`: coordinator → node, place a maintainer.
    AddMaintainer,
    /// `remove_maintainer`: coordinator → node, remove a maintainer.
    RemoveMaintainer,
    /// `dispatcher_error`: dispatcher manager → maintainer, a failed dispatcher's error (sent once
    /// when it fails; heartbeats repeat it).
    DispatcherError,
}

impl MessageKind {
    /// Every message kind, with its name in the file.
    pub const ALL: [(MessageKind, &'static str); 12] = [
        (MessageKind::Create, "create"),
        (MessageKind::Remove, "remove"),
        (MessageKind::Merge, "merge"),
        (MessageKind::Bootstrap, "bootstrap"),
        (MessageKind::BootstrapResponse, "bootstrap_response"),
        (MessageKind::Heartbeat, "heartbeat"),
        (MessageKind::BlockStatus, "block_status"),
        (MessageKind::BarrierAction, "barrier_action"),
        (MessageKind::MaintainerStatus, "maintainer_status"),
        (MessageKind::AddMaintainer, "add_maintainer"),
        (MessageKind::RemoveMaintainer, "remove_maintainer"),
        (MessageKind::DispatcherError, "dispatcher_error"),
    ];

    /// The name used in scenario files.
    pub fn name(self) -> &'static str {
        MessageKind::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map(|(_, n)| *n)
            .unwrap_or("?")
    }

    fn parse(s: &str) -> Option<MessageKind> {
        MessageKind::ALL
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(k, _)| *k)
    }
}

/// One step of the scenario.
#[derive(Debug, Clone)]
pub struct Step {
    /// 1-based position of the step in the file.
    pub number: usize,
    /// What the step does.
    pub op: Op,
}

/// A step's operation with its fields (defaults applied).
#[derive(Debug, Clone)]
pub enum Op {
    /// `create_changefeed`: request creation; the start point is the upstream position now.
    CreateChangefeed {
        /// Changefeed name (default "cf").
        changefeed: String,
    },
    /// `run`: let `ms` simulated milliseconds pass.
    Run {
        /// Simulated milliseconds.
        ms: u64,
    },
    /// `settle`: run until converged and caught up, failing after `max_ms`.
    Settle {
        /// Bound in simulated ms (default 120000).
        max_ms: u64,
    },
    /// `write`: upstream DML on a table.
    Write {
        /// The table written.
        table: TableId,
        /// Row changes (inserts and updates).
        rows: u64,
        /// Changes per transaction (default 1, at least 1).
        txn_rows: u64,
        /// Deletes of existing keys after the changes (default 0).
        deletes: u64,
    },
    /// `ddl`: an upstream DDL.
    Ddl(Ddl),
    /// `split_table` request.
    SplitTable {
        /// The table.
        table: TableId,
        /// Target span count (at least 1).
        spans: u64,
    },
    /// `merge_table` request: back to one span.
    MergeTable {
        /// The table.
        table: TableId,
    },
    /// `move_table` request: every span of the table to node `to`.
    MoveTable {
        /// The table.
        table: TableId,
        /// Destination node.
        to: NodeRef,
    },
    /// `cordon`: no new dispatcher on the node; kept in the meta store.
    Cordon {
        /// The node.
        node: NodeRef,
    },
    /// `uncordon`: end a cordon.
    Uncordon {
        /// The node.
        node: NodeRef,
    },
    /// `hold`: switch a hold point on.
    Hold {
        /// The hold point.
        point: HoldPoint,
        /// The node, or `None` for all nodes.
        node: Option<NodeRef>,
    },
    /// `release`: switch a hold point off.
    Release {
        /// The hold point.
        point: HoldPoint,
        /// The node, or `None` for all nodes.
        node: Option<NodeRef>,
    },
    /// `crash`: the node stops at once, losing everything not in the meta store.
    Crash {
        /// The node.
        node: NodeRef,
    },
    /// `restart`: a crashed node starts again as a new, empty incarnation.
    Restart {
        /// The node.
        node: NodeRef,
    },
    /// `partition`: nodes in different groups cannot reach each other.
    Partition {
        /// The groups as written (nodes named in no group form one more group, added by the engine).
        groups: Vec<PartitionGroup>,
    },
    /// `heal`: end every partition.
    Heal,
    /// `faults`: control-message faults from now on (replaces the previous `faults`).
    Faults(Faults),
    /// `expect`: check one condition, now or within `within_ms`.
    Expect {
        /// The condition.
        condition: Condition,
        /// `within-ms`: keep running until it holds, failing after this many ms.
        within_ms: Option<u64>,
    },
    /// Extension `x-move_maintainer`: request moving the changefeed's maintainer to `to`.
    XMoveMaintainer {
        /// Destination node.
        to: NodeRef,
    },
    /// Extension `x-sink_error`: the next `count` matching sink writes fail.
    XSinkError {
        /// Only sinks on this node (default: any node).
        node: Option<NodeRef>,
        /// Only writes of this table (default: any table).
        table: Option<TableId>,
        /// Number of writes that fail (default 1, at least 1).
        count: u64,
        /// Whether the error is retryable (default true).
        retryable: bool,
    },
    /// Extension `x-write_txn`: transactions that span several tables, each changing `rows`
    /// rows of every table listed (inserts or updates) in one commit.
    XWriteTxn {
        /// The tables every transaction changes.
        tables: Vec<TableId>,
        /// Number of transactions (at least 1).
        txns: u64,
        /// Rows per table per transaction (at least 1).
        rows: u64,
    },
    /// Extension `x-sink_latency`: from now on the model sink acknowledges the writes of this
    /// table's dispatchers `ms` later than usual (a slow or locked downstream table); 0 ends it.
    XSinkLatency {
        /// Only sinks on this node (default: any node).
        node: Option<NodeRef>,
        /// The slow table.
        table: TableId,
        /// Extra acknowledgement latency in simulated ms (0: back to normal).
        ms: u64,
    },
    /// Extension `x-drop`: drop the next `count` matching control messages.
    XDrop {
        /// Kind of message.
        message: MessageKind,
        /// Only messages sent by this node (default: any).
        from: Option<NodeRef>,
        /// Only messages addressed to this node (default: any).
        to: Option<NodeRef>,
        /// Number of messages dropped (default 1, at least 1).
        count: u64,
    },
    /// Extension `x-pause`: the node's process freezes (handles no input) for `ms`.
    XPause {
        /// The node.
        node: NodeRef,
        /// Simulated milliseconds of the freeze (the step itself takes no time).
        ms: u64,
    },
    /// Extension `x-pause_changefeed`: a user pauses the changefeed (a request).
    XPauseChangefeed {
        /// Changefeed name (default "cf").
        changefeed: String,
    },
    /// Extension `x-resume_changefeed`: a user resumes the changefeed (a request).
    XResumeChangefeed {
        /// Changefeed name (default "cf").
        changefeed: String,
    },
    /// Extension `x-drain`: request draining the node (move every dispatcher and maintainer off it).
    XDrain {
        /// The node.
        node: NodeRef,
    },
}

impl Op {
    /// The op name as written in the file.
    pub fn name(&self) -> &'static str {
        match self {
            Op::CreateChangefeed { .. } => "create_changefeed",
            Op::Run { .. } => "run",
            Op::Settle { .. } => "settle",
            Op::Write { .. } => "write",
            Op::Ddl(_) => "ddl",
            Op::SplitTable { .. } => "split_table",
            Op::MergeTable { .. } => "merge_table",
            Op::MoveTable { .. } => "move_table",
            Op::Cordon { .. } => "cordon",
            Op::Uncordon { .. } => "uncordon",
            Op::Hold { .. } => "hold",
            Op::Release { .. } => "release",
            Op::Crash { .. } => "crash",
            Op::Restart { .. } => "restart",
            Op::Partition { .. } => "partition",
            Op::Heal => "heal",
            Op::Faults(_) => "faults",
            Op::Expect { .. } => "expect",
            Op::XMoveMaintainer { .. } => "x-move_maintainer",
            Op::XSinkError { .. } => "x-sink_error",
            Op::XSinkLatency { .. } => "x-sink_latency",
            Op::XWriteTxn { .. } => "x-write_txn",
            Op::XDrop { .. } => "x-drop",
            Op::XPause { .. } => "x-pause",
            Op::XPauseChangefeed { .. } => "x-pause_changefeed",
            Op::XResumeChangefeed { .. } => "x-resume_changefeed",
            Op::XDrain { .. } => "x-drain",
        }
    }
}

/// One group of a `partition` step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionGroup {
    /// World node names in the group.
    pub nodes: Vec<String>,
    /// Whether `"meta"` is in the group (then only this group reaches the meta store).
    pub meta: bool,
}

/// Control-message faults of a `faults` step (omitted fields are 0 / false / [0, 0]).
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Drop ratio, 0..=1.
    pub drop: f64,
    /// Duplicate ratio, 0..=1.
    pub duplicate: f64,
    /// Whether messages may be reordered.
    pub reorder: bool,
    /// Delay bounds `[min, max]` in simulated ms.
    pub delay_ms: (u64, u64),
}

/// An upstream DDL (the `kind` of a `ddl` step, with its fields).
#[derive(Debug, Clone)]
pub enum Ddl {
    /// `create_table`: declares a new table id.
    CreateTable {
        /// The new table's id.
        table: TableId,
        /// Its `schema.table` name.
        name: QualifiedName,
        /// Upstream regions (default 1).
        regions: u64,
    },
    /// `drop_table`.
    DropTable {
        /// The table.
        table: TableId,
    },
    /// `truncate_table`: the emptied table gets a new id.
    TruncateTable {
        /// The table truncated.
        table: TableId,
        /// `new-table`: the id the emptied table gets (declared by this step).
        new_table: TableId,
    },
    /// `rename_table`: the table keeps its id and spans.
    RenameTable {
        /// The table.
        table: TableId,
        /// `new-name`.
        new_name: QualifiedName,
    },
    /// `add_column`.
    AddColumn {
        /// The table.
        table: TableId,
    },
    /// `create_database`.
    CreateDatabase {
        /// Database name.
        database: String,
    },
    /// `drop_database`: drops every table in it.
    DropDatabase {
        /// Database name.
        database: String,
    },
    /// Extension `x-create_view`: a CREATE VIEW in the database, an All-tables (blocking) DDL
    /// that creates no physical table.
    XCreateView {
        /// Database name.
        database: String,
    },
}

impl Ddl {
    /// The kind as written in the file.
    pub fn kind(&self) -> &'static str {
        match self {
            Ddl::CreateTable { .. } => "create_table",
            Ddl::DropTable { .. } => "drop_table",
            Ddl::TruncateTable { .. } => "truncate_table",
            Ddl::RenameTable { .. } => "rename_table",
            Ddl::AddColumn { .. } => "add_column",
            Ddl::CreateDatabase { .. } => "create_database",
            Ddl::DropDatabase { .. } => "drop_database",
            Ddl::XCreateView { .. } => "x-create_view",
        }
    }
}

/// Bound of a span-count condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanCount {
    /// `spans`: exactly (evaluated only when no operator or request of the table is in flight).
    Exactly(u64),
    /// `spans-at-least`.
    AtLeast(u64),
    /// `spans-at-most`.
    AtMost(u64),
}

/// A named global check (`check = "..."`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// `converged`.
    Converged,
    /// `sink-matches-upstream` (invalid with the blackhole sink).
    SinkMatchesUpstream,
    /// `changefeed-normal`.
    ChangefeedNormal,
}

/// The single condition of an `expect` step.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `table` + `spans` / `spans-at-least` / `spans-at-most`.
    Spans {
        /// The table.
        table: TableId,
        /// The bound.
        count: SpanCount,
    },
    /// `table` + `on`: every span of the table is on the node.
    On {
        /// The table.
        table: TableId,
        /// The node.
        node: NodeRef,
    },
    /// `table` + `absent = true`.
    Absent {
        /// The table.
        table: TableId,
    },
    /// `check = ...`.
    Check(Check),
    /// `maintainer-not-on`.
    MaintainerNotOn(NodeRef),
    /// `maintainer-ready = true`.
    MaintainerReady,
    /// `held` (+ optional `node`, `table`): some work waits at the hold point now.
    Held {
        /// The hold point.
        point: HoldPoint,
        /// Only on this node.
        node: Option<NodeRef>,
        /// Only work of this table.
        table: Option<TableId>,
    },
    /// `checkpoint-advanced = true`.
    CheckpointAdvanced,
}

/// Why a scenario file is invalid (the simulator exits 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file.
    pub file: String,
    /// The 1-based step number, if the problem is in a step.
    pub step: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl ScenarioError {
    /// Exit status of the simulator for an invalid file.
    pub const EXIT_CODE: i32 = 2;
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.step {
            Some(n) => write!(f, "{}: step {}: {}", self.file, n, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// Reads and validates a scenario file.
pub fn parse_file(path: &Path) -> Result<Scenario, ScenarioError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: name.clone(),
        step: None,
        message: format!("cannot read the file: {e}"),
    })?;
    parse_str(&name, &text)
}

/// Parses and validates scenario text; `name` is the file name used in errors.
pub fn parse_str(name: &str, text: &str) -> Result<Scenario, ScenarioError> {
    Parser {
        file: name.to_string(),
    }
    .scenario(text)
}
